"""``tuner.validate.train_loop``: the plain loop warms up and measures as long as the trial it
checks did (a 20-step loop reads 1.17x the trial's ddpm figure on an H100: it measures the
batches the workers prefetched during the warm-up)."""

from __future__ import annotations

from tests.fake_workloads import Regression
from tuner.knobs import Knobs
from tuner.validate import MIN_MEASURED_STEPS, train_loop

BATCH = 8


def loop(regression_data, **kwargs):
    return train_loop(Regression(), Knobs(batch_size=BATCH), scale="tiny", device="cpu",
                      data_dir=regression_data, warmup_steps=3, threads=1, **kwargs)


def steady_s(v) -> float:
    """Seconds of the steady part: its samples over its rate."""
    return (v.steps - v.warmup_steps) * BATCH / v.samples_per_sec


def test_by_default_one_epoch_at_least_warm_up_plus_twenty_steps(regression_data):
    v = loop(regression_data)
    assert v.steps == 3 + MIN_MEASURED_STEPS and v.warmup_steps == 3
    assert v.epochs == (3 + MIN_MEASURED_STEPS) / (64 // BATCH)


def test_the_loop_measures_at_least_the_trials_measured_time(regression_data):
    v = loop(regression_data, min_measured_s=0.6)
    assert steady_s(v) >= 0.6
    assert v.steps > 3 + MIN_MEASURED_STEPS          # went on across epochs past the default


def test_the_steady_part_starts_after_the_trials_warm_up_time(regression_data):
    v = loop(regression_data, warmup_s=0.4)
    assert v.warmup_steps > 3                         # warm-up steps went on for 0.4 s
    assert v.total_s - steady_s(v) >= 0.4 - 1e-6
    assert v.steps > v.warmup_steps


def test_explicit_steps_are_kept_when_no_time_is_asked_for(regression_data):
    v = loop(regression_data, steps=5)
    assert (v.steps, v.warmup_steps) == (5, 3)
