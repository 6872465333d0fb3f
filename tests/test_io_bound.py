"""An input pipeline that waits rather than computes (``tests.landscapes.IoBound``: a sleep per
sample, as a read from network storage is): a window reads no more than its DataLoader workers
sustain, however many batches they prefetched before it (``tuner.trial.prefetch``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.landscapes import io_bound
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.status import Status
from tuner.trial.harness import run_trial


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return io_bound.prepare_default_data(tmp_path_factory.mktemp("io-bound"), "tiny")


def _screen(data_dir: Path, windows: int = 1) -> TrialSettings:
    """A screening trial's settings: one warm-up step (the 2-s first step, while the workers
    fill their queue), then ``windows`` window of 1 s."""
    return TrialSettings(scale="tiny", device="cpu", data_dir=str(data_dir), warmup_steps=1,
                         windows=windows, window_s=1.0, breakdown_steps=0, max_steady_probes=0)


def test_a_screen_reads_what_the_workers_sustain_not_their_queue(data_dir, one_torch_thread):
    """Two workers prefetching eight batches each fill their queue during the 2-s first step;
    the 1-s window after it took those batches at the model's rate (533 samples/sec, 2.7x the
    196 the workers deliver, before the window counted only what they deliver). Bounds for a
    loaded machine, where the workers' batches (0.64 s each) arrive late or in bursts."""
    knobs = Knobs(batch_size=64, num_workers=2, prefetch_factor=8, persistent_workers=True)
    sustained = io_bound.samples_per_sec(knobs)
    result = run_trial(io_bound, knobs, _screen(data_dir), cpus=2)
    assert result["status"] == Status.OK, result["error"]
    assert 0.75 * sustained <= result["samples_per_sec"] <= 1.25 * sustained


# ------------------------------------------------------------------ what a window counts


class _Queue:
    """A stand-in for the DataLoader's result queue: ``ready`` batches."""

    def __init__(self, ready: int):
        self.ready = ready

    def qsize(self) -> int:
        return self.ready


def _watched(ready: int, workers: int = 2, prefetch: int = 8):
    """A ``QueueWatch`` over a stand-in iterator whose queue holds ``ready`` batches (of at
    most ``workers`` x ``prefetch``), and that queue."""
    from types import SimpleNamespace

    from tuner.trial.prefetch import QueueWatch
    queue = _Queue(ready)
    iterator = SimpleNamespace(_worker_result_queue=queue, _data_queue=queue, _task_info={})
    stepper = SimpleNamespace(batches=SimpleNamespace(iterator=iterator),
                              knobs=Knobs(batch_size=8, num_workers=workers,
                                          prefetch_factor=prefetch if workers else None))
    return QueueWatch.begin(stepper, window_s=1.0), queue


def test_a_queue_that_holds_changes_nothing():
    """A compute-bound pipeline: its workers keep the queue full, less the batch being made:
    the window ends at its length and counts all its steps."""
    watch, queue = _watched(16)
    for step in range(1, 11):
        watch.before_step()
        queue.ready = 15 + step % 2
        watch.after_step(step, 8 * step, 0.1 * step)
    assert watch.done(10, 1.0)
    assert watch.counted(10, 80, 1.0) == (10, 80, 1.0)


def test_a_draining_queue_is_counted_between_the_steps_that_found_it_empty():
    """The window goes on while the queue drains; once steps find it empty it counts from the
    end of the first such step to the end of the latest, at least half a window and four
    batches per worker apart."""
    watch, queue = _watched(6)
    for step, (ready, elapsed) in enumerate([(4, 0.1), (2, 0.2), (0, 0.3)], start=1):
        watch.before_step()
        queue.ready = ready
        watch.after_step(step, 8 * step, elapsed)
    assert not watch.done(3, 1.0)                    # drained by 6: not what the workers make
    watch.before_step()                               # finds it empty: waits for a batch
    queue.ready = 1
    watch.after_step(4, 32, 0.9)
    assert not watch.done(4, 1.0)                     # one step that waited: no span yet
    for step in range(5, 12):                         # the workers' batches, as they come
        watch.before_step()
        queue.ready = step % 2
        watch.after_step(step, 8 * step, 0.9 + 0.1 * (step - 4))
        assert not watch.done(step, 0.9 + 0.1 * (step - 4))  # under 4 batches per worker
    queue.ready = 0
    watch.before_step()                               # waits: 8 batches since the first
    watch.after_step(12, 96, 1.7)
    assert watch.done(12, 1.7)
    assert watch.counted(12, 96, 1.7) == pytest.approx((8, 64, 0.8))


def test_a_queue_that_never_runs_empty_stops_the_window_and_counts_what_it_lost():
    """Past ``MAX_DRAIN_WINDOWS`` windows the window ends, less the batches the queue lost."""
    from tuner.trial.prefetch import MAX_DRAIN_WINDOWS
    watch, queue = _watched(20)
    queue.ready = 8
    assert not watch.done(40, 1.0)
    assert watch.done(40, MAX_DRAIN_WINDOWS * 1.0)
    assert watch.counted(40, 320, 4.0) == (28, 224, 4.0)   # 20 - 8 lost


def test_a_queue_drained_by_less_than_a_batch_per_worker_is_not_taken_to_hold():
    """Eight workers, two batches each: a window that took 10 batches and the queue from 11
    ready to 7 drained it (a 240-s run read screens of 8 workers at 1.68x what they sustain
    when a batch per worker was allowed as slack); a queue holds that lost at most a tenth of
    the batches taken, or is full but for the batch being made."""
    watch, queue = _watched(11, workers=8, prefetch=2)
    for ready in (7, 8):                              # 3 or 4 of the 10 taken were queued
        queue.ready = ready
        assert not watch.done(10, 1.0)
    queue.ready = 10                                  # 1 of 10: the workers made the rest
    assert watch.done(10, 1.0)
    queue.ready = 15                                  # 16 outstanding, 1 being made: full
    assert watch.done(2, 1.0)


def test_no_workers_no_queue():
    watch, _ = _watched(0, workers=0)
    assert watch.start is None and watch.done(3, 1.0)
    assert watch.counted(3, 24, 1.0) == (3, 24, 1.0)


# ------------------------------------------------------------------ CPU beside wall seconds


def test_a_loader_only_trial_says_its_workers_wait(data_dir, one_torch_thread):
    """The loader-only trial of eight workers on two cores delivers ~741 samples/sec while
    its workers spend a fraction of a core: its CPU seconds per sample are far below the
    10.8 ms of wall time each worker takes per sample, and the rate waits on I/O."""
    from tuner.probe import InputRate
    knobs = Knobs(batch_size=32, num_workers=8, prefetch_factor=2, persistent_workers=True)
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(data_dir), warmup_steps=1,
                             windows=1, window_s=1.0, breakdown_steps=0, max_steady_probes=0,
                             loader_only=True)
    result = run_trial(io_bound, knobs, settings, cpus=2)
    assert result["status"] == Status.OK, result["error"]
    delivered = io_bound.samples_per_sec(knobs.replace(batch_size=128))  # no compute bound
    assert 0.75 <= result["samples_per_sec"] / delivered <= 1.25
    assert 0 < result["cpu_s_per_sample"] < 0.1 * 8 / result["samples_per_sec"]
    rate = InputRate("loader", 8, 32, result["samples_per_sec"], None, result["cpu_s_per_sample"])
    assert rate.waits(cores=2)


# ------------------------------------------------------------------ the model on such rows


def _io_run(cpu_s: bool = True) -> list[dict]:
    """Shaped like the I/O-bound run on 2 cores: the best, bs=256 with 8 workers, at 3,539
    samples/sec; its compute-only ceiling 9,000, its DataLoader alone 3,600 with 8 workers
    (0.1 of a core busy), one core without workers 450 (0.2 core-ms per sample: it waits)."""
    from tests.test_ceilings_paths import ceiling
    from tests.test_leaderboard import row
    best = Knobs(batch_size=256, num_workers=8, prefetch_factor=4, persistent_workers=True)
    cpu = {"cpu_s_per_sample": 0.00003} if cpu_s else {}
    one = {"cpu_s_per_sample": 0.0002} if cpu_s else {}
    return [row(0, knobs=best.replace(num_workers=2), sps=880.0, reference="baseline",
                trial_cpus=2.0),
            row(1, knobs=best, sps=3539.0, trial_cpus=2.0),
            ceiling(2, "compute", best, 9000.0, trial_cpus=2.0),
            ceiling(3, "loader", best, 3600.0, trial_cpus=2.0, **cpu),
            ceiling(4, "machine-loader", best, 3580.0, trial_cpus=2.0, **cpu),
            ceiling(5, "machine-compute", best, 9100.0, trial_cpus=2.0),
            ceiling(6, "core-compute", best, 4000.0, trial_cpus=2.0),
            ceiling(7, "core-loader", Knobs(batch_size=256), 450.0, trial_cpus=2.0, **one)]


def test_workers_that_wait_are_bounded_by_what_they_deliver_not_by_the_cores():
    """With the one-core ceiling's wall seconds as its core-seconds, the shared-cores model put
    the attainable rate at 2 / (0.25 + 2.22 ms) = 809 samples/sec, under the best's 3,539 ("not
    a bound ... a disturbed measurement"); with its CPU seconds the input pipeline binds."""
    from tuner import winner
    from tuner.ceilings import pipeline_kind
    before = winner.best(_io_run(cpu_s=False)).attainable
    assert before.share is None                          # the old reading: 'not a bound'
    a = winner.best(_io_run()).attainable
    assert a.input_core_s_per_sample == {"loader": pytest.approx(0.0002)}
    assert (a.bound_by, a.samples_per_sec) == ("input pipeline", 3600.0)
    assert a.share == pytest.approx(3539.0 / 3600.0)
    kind = pipeline_kind(_io_run())
    assert kind.waits and (kind.workers, kind.cores) == (8, 2)
    assert kind.text().startswith("input pipeline: waits on I/O (8 DataLoader workers "
                                  "delivered 3,600.0 samples/sec keeping 0.1 of 2 cores busy")


def test_a_pipeline_that_computes_is_compute_bound():
    from tuner.ceilings import pipeline_kind
    rows = _io_run()
    for r in rows:
        if r.get("cpu_s_per_sample"):
            r["cpu_s_per_sample"] = 1.9 / r["samples_per_sec"]     # 1.9 of 2 cores busy
    kind = pipeline_kind(rows)
    assert not kind.waits and kind.text().startswith("input pipeline: compute-bound")


def test_the_summary_says_which_kind_the_pipeline_is_and_no_disturbance():
    from tests.test_ceilings_paths import summary_of
    out = summary_of(_io_run())
    assert "input pipeline: waits on I/O" in out
    assert "disturbed" not in out


# ------------------------------------------------------------------ the worker range


def test_where_the_pipeline_waits_the_workers_go_past_the_cores(tmp_path, tuner_cache):
    """The probe's input rates: no worker 90 samples/sec, two (the node's CPUs) 196 with 0.06
    of a core busy: the pipeline waits, so the search's worker range ends at the space's 8
    and the machine point takes them; a pipeline whose workers keep their cores busy keeps
    the range at the node's CPUs."""
    from tuner.option_checks import make_plan
    from tuner.probe import ComputeCurve, InputRate
    from tuner.search_policy import with_compute_curve
    from tuner.settings import RunOptions
    plan = make_plan(RunOptions(workload="tests.landscapes:io_bound", trials=8, device="cpu",
                                probe="off", results=str(tmp_path / "results")))
    cores = plan.node_cpus
    assert plan.device_space.domains["num_workers"].high == cores
    curve = ComputeCurve(alpha_ms=120.0, beta_ms=0.5, points=((4, 120.0), (256, 128.0)),
                         max_batch=256, knee_batch=240, limit_samples_per_sec=2000.0)
    waiting = [InputRate("loader", 0, 240, 90.0, None, 0.0004),
               InputRate("loader", cores, 64, 196.0, None, 0.0003)]
    widened = with_compute_curve(plan, curve, Knobs(batch_size=4), waiting)
    assert widened.device_space.domains["num_workers"].high == 8
    assert dict(widened.anchors)["machine"].num_workers == 8
    assert any("past this node's" in note and "waits on I/O" in note for note in widened.notes)
    busy = [InputRate("loader", 0, 240, 90.0, None, 0.011),
            InputRate("loader", cores, 64, 196.0, None, 0.9 * cores / 196.0)]
    kept = with_compute_curve(plan, curve, Knobs(batch_size=4), busy)
    assert kept.device_space.domains["num_workers"].high == cores


def test_an_answer_measured_only_by_a_screen_says_so():
    """A best whose row is a screening trial's (one window planned where the references
    planned three) is labelled as a first reading; re-measured or full, it is not."""
    from tests.test_ceilings_paths import summary_of
    from tests.test_leaderboard import row
    base = Knobs(batch_size=64, num_workers=2, prefetch_factor=2)
    rows = [row(0, knobs=base, sps=196.0, reference="baseline", windows_planned=3),
            row(1, knobs=base.replace(num_workers=8), sps=740.0, windows_planned=1)]
    assert "best (screened only: a first reading, not re-measured)" in summary_of(rows)
    rows[1]["windows_planned"] = 3
    assert "best (measured)" in summary_of(rows)


@pytest.mark.slow
def test_a_run_answers_workers_past_the_cores_at_what_a_full_trial_sustains(tmp_path,
                                                                            data_dir):
    """`python -m tuner run` on the I/O-bound landscape, seed 0, the references and the
    machine point: the probe finds that the pipeline waits, the search's workers go past the
    trial's 2 CPUs, the answer has more workers than cores, and its reported rate is within
    25 % of what a full trial of the same knobs (three windows) sustains. Trials, not a time
    budget: a loaded machine then slows the run but does not change what it measures."""
    from tests.conftest import run_landscape
    from tuner import leaderboard, winner
    proc, results = run_landscape(tmp_path, "io_bound")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "past this node's" in proc.stdout and "waits on I/O" in proc.stdout
    answer = winner.best(leaderboard.read(results, workload=io_bound.name).to_pylist())
    knobs = Knobs.from_dict(answer.row, strict=False)
    assert knobs.num_workers > answer.row["trial_cpus"]
    full = run_trial(io_bound, knobs, TrialSettings(
        scale="tiny", device="cpu", data_dir=str(data_dir), warmup_steps=2, windows=3,
        window_s=1.0, breakdown_steps=0), cpus=2)
    assert full["status"] == Status.OK, full["error"]
    assert abs(answer.samples_per_sec / full["samples_per_sec"] - 1) <= 0.25


def test_a_queue_that_ran_empty_once_and_then_holds_counts_from_there():
    """Workers starting an epoch leave the queue empty for one step; a compute-bound pipeline
    then fills it again: the window ends half a window after that step, not at
    ``MAX_DRAIN_WINDOWS``, and counts from it."""
    watch, queue = _watched(0)
    watch.before_step()                               # empty: the workers are starting
    queue.ready = 1
    watch.after_step(1, 8, 0.3)
    for step in range(2, 11):
        watch.before_step()
        queue.ready = min(16, step)
        watch.after_step(step, 8 * step, 0.3 + 0.1 * (step - 1))
    assert watch.done(10, 1.2)
    assert watch.counted(10, 80, 1.2) == pytest.approx((9, 72, 0.9))
