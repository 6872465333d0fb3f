"""Data-parallel trials (``--world-size``): Ray Train runs each trial as DDP over 2 ranks with
the gloo backend on this machine's CPUs (one process per rank)."""

from __future__ import annotations

import os
import time

import pytest

RANK_OOM = "tests.fake_workloads:rank_oom"


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory, regression_data, ray_session):
    """A 2-rank run of the fake regression: the baseline (batch 32) fails on rank 1 with a
    fake OOM, the recommended (batch 8) runs. Returns (rows, seconds the run took)."""
    import tuner.leaderboard as leaderboard
    from tuner.driver import run
    from tuner.settings import RunOptions
    results = tmp_path_factory.mktemp("ddp") / "results"
    started = time.monotonic()
    run(RunOptions(workload=RANK_OOM, trials=2, device="cpu", data=str(regression_data),
                   results=str(results), world_size=2, confirm=0, ceiling=False,
                   windows=2, window_s=0.5, warmup_steps=2))
    return leaderboard.read(str(results)).to_pylist(), time.monotonic() - started


def _by_reference(rows: list[dict]) -> dict:
    return {row["reference"]: row for row in rows}


def test_a_two_rank_trial_records_its_world_size_and_a_global_rate(two_rank_run):
    rows, _ = two_rank_run
    ok = _by_reference(rows)["recommended"]
    assert ok["status"] == "ok", ok["error"]
    assert ok["world_size"] == 2 and ok["backend"] == "gloo"
    # the ranks step together on equal micro-batches: the global rate is twice rank 0's
    assert ok["samples_per_sec"] == pytest.approx(2 * ok["rank_samples_per_sec"], rel=1e-9)
    assert ok["slowest_rank"] in (0, 1) and ok["slowest_rank_data_wait_s"] >= 0
    assert ok["trial_cpus"] == 2.0 and ok["torch_threads"] == 1  # 1 CPU per rank, no workers


def test_a_fake_oom_on_one_rank_ends_the_trial_oom_and_the_run_goes_on(two_rank_run):
    rows, seconds = two_rank_run
    assert len(rows) == 2  # one row per trial, written by the driver
    failed = _by_reference(rows)["baseline"]
    assert failed["status"] == "oom", failed["error"]
    assert failed["error"].startswith("rank 1: ") and "out of memory" in failed["error"]
    assert failed["world_size"] == 2
    assert _by_reference(rows)["recommended"]["status"] == "ok"
    print(f"2-rank run with one rank's OOM: {seconds:.0f} s")


def test_more_ranks_than_cpus_is_refused_in_one_line(tmp_path, regression_data):
    from tuner.errors import TunerError
    from tuner.plan import make_plan
    from tuner.settings import RunOptions
    n = (os.cpu_count() or 1) + 1
    with pytest.raises(TunerError, match=rf"--world-size {n}: this machine has \d+ CPUs"):
        make_plan(RunOptions(workload=RANK_OOM, device="cpu", data=str(regression_data),
                             results=str(tmp_path / "r"), world_size=n))


def test_the_ddp_knobs_are_sampled_only_at_world_size_above_one(tmp_path, regression_data):
    from tuner.knobs import DDP_KNOBS
    from tuner.plan import make_plan
    from tuner.settings import RunOptions
    common = dict(workload=RANK_OOM, device="cpu", data=str(regression_data),
                  results=str(tmp_path / "r"))
    one = make_plan(RunOptions(**common)).device_space
    two = make_plan(RunOptions(**common, world_size=2)).device_space
    assert not set(DDP_KNOBS) & set(one.domains)
    assert set(DDP_KNOBS) <= set(two.domains)
    # 2 ranks on this machine's CPUs: world size x (num_workers + 1) <= CPUs
    workers = two.domains.get("num_workers")
    high = workers.high if workers is not None else two.constants["num_workers"]
    assert 2 * (high + 1) <= max(os.cpu_count() or 1, 2)
