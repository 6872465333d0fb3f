"""``tuner.trial.validate``: the plain loop warms up and measures as long as the trial it checks did
(a 20-step loop reads 1.17x the trial's ddpm figure on an H100: it measures the batches the
workers prefetched during the warm-up), runs on the trial's threads, and alternates with the
harness's measurement in one process."""

from __future__ import annotations

import os
import statistics
import time

import pytest
import torch

from tests.fake_workloads import Regression
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.trial.harness import run_trial
from tuner.trial.validate import MIN_MEASURED_STEPS, interleaved, loop_for_row, train_loop

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


# --- threads: the plain loop runs on the trial's, and both sides of validate's interleaved
# measurement run on them (on an H200 validate read 1.14 and 0.94 of the trial while the trial,
# in a Ray worker, had 16 torch threads and validate torch's default)

@pytest.fixture
def omp_unset(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def test_the_trials_row_records_its_torch_threads_and_omp_num_threads(regression_data,
                                                                       monkeypatch):
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=1, window_s=0.1, warmup_steps=1)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    row = run_trial(Regression(), Knobs(batch_size=BATCH), settings, cpus=1)
    assert (row["torch_threads"], row["omp_num_threads"]) == (1, 3)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert run_trial(Regression(), Knobs(batch_size=BATCH), settings)["omp_num_threads"] is None


def test_the_loop_runs_on_the_threads_asked_and_puts_them_back(regression_data, omp_unset):
    before = torch.get_num_threads()
    v = train_loop(Regression(), Knobs(batch_size=BATCH), scale="tiny", device="cpu",
                   data_dir=regression_data, steps=5, threads=2, omp_threads=3)
    assert (v.torch_threads, v.omp_num_threads) == (2, 3)
    assert torch.get_num_threads() == before and "OMP_NUM_THREADS" not in os.environ


def test_the_loop_for_a_row_takes_the_rows_threads(regression_data, omp_unset):
    row = {"scale": "tiny", "device": "cpu", "torch_threads": 1, "omp_num_threads": 2,
           "trial_cpus": None}
    v = loop_for_row(Regression(), Knobs(batch_size=BATCH), row, data_dir=regression_data,
                     steps=5, threads=None, ranks=1)
    assert (v.torch_threads, v.omp_num_threads) == (1, 2)


def test_interleaved_alternates_loop_and_harness_on_the_trials_threads(regression_data,
                                                                      monkeypatch, omp_unset):
    import tuner.trial.harness as harness
    import tuner.trial.validate as validate
    seen = []
    real_loop, real_trial = validate.train_loop, harness.run_trial

    def loop(*a, **k):
        v = real_loop(*a, **k)
        seen.append(("loop", v.torch_threads, v.omp_num_threads))
        return v

    def trial(*a, **k):
        seen.append(("harness", torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")))
        return real_trial(*a, **k)

    monkeypatch.setattr(validate, "train_loop", loop)
    monkeypatch.setattr(harness, "run_trial", trial)
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=2, window_s=0.2, warmup_steps=1)
    row = {"torch_threads": 1, "omp_num_threads": 2, "trial_cpus": 1.0, "warmup_s": 0.3,
           "first_step_s": 0.1}
    v = interleaved(Regression(), Knobs(batch_size=BATCH), row, settings, rounds=2)
    assert [s[0] for s in seen] == ["loop", "harness", "loop", "harness"]
    assert seen[0][1:] == (1, 2) and seen[1][1:] == (1, "2")  # the row's threads on both sides
    assert (v.torch_threads, v.omp_num_threads) == (1, 2)
    assert len(v.ratios) == 2 and all(r > 0 for r in v.ratios)
    assert v.median_ratio == pytest.approx(statistics.median(v.ratios))
    assert "OMP_NUM_THREADS" not in os.environ              # put back


def test_interleaved_runs_one_round_when_a_second_would_end_past_stop_at(regression_data):
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=1, window_s=0.1, warmup_steps=1)
    v = interleaved(Regression(), Knobs(batch_size=BATCH), {"trial_cpus": 1.0}, settings,
                    rounds=3, stop_at=time.time())
    assert len(v.rounds) == 1 and v.rounds[0].harness_status == "ok"


def test_the_validate_command_says_the_threads_it_ran_on_and_the_trials(tmp_path, omp_unset):
    from click.testing import CliRunner

    from tests.test_leaderboard import row
    from tuner import leaderboard
    from tuner.cli import main
    leaderboard.append(tmp_path, [row(0, knobs=Knobs(batch_size=BATCH), phase="search",
                                      workload="fake-regression", trial_cpus=2.0,
                                      torch_threads=1, omp_num_threads=2)])
    result = CliRunner().invoke(main, ["validate", "--workload", "tests.fake_workloads:regression",
                                       "--results", str(tmp_path), "--steps", "6"])
    assert result.exit_code == 0, result.output
    assert "threads: torch 1, OMP_NUM_THREADS 2 (the trial's: 1, 2)" in result.output
