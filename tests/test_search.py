"""The search through Ray Tune + Optuna on CPU with the fake workloads: references first, one
complete leaderboard row per trial, OOM trials recorded and learnt from, never fatal."""

from __future__ import annotations

import os
import re

import pytest

from tuner import leaderboard
from tuner.driver import run
from tuner.option_checks import make_plan
from tuner.searcher import make_searcher
from tuner.settings import RunOptions
from tuner.winner import best as answer_of

pytestmark = pytest.mark.slow

REQUIRED = ("run_id", "trial_id", "workload", "scale", "device", "hardware_key", "node_id",
            "status", "is_baseline", "peak_host_memory_mb", "started_at", "finished_at",
            "ray_version", "optuna_version", "torch_version", "tuner_version")
"""Non-null in every row, whatever the trial's status."""
MEASURED = ("samples_per_sec", "step_time_ms_p50", "warmup_s")
"""Non-null in every ok row."""


def options(tmp_path, workload: str, trials: int, seed: int = 0) -> RunOptions:
    """The search phase only (no re-measurement or ceiling phase): one row per trial."""
    return RunOptions(workload=workload, trials=trials, results=str(tmp_path / "results"),
                      device="cpu", windows=2, window_s=0.1, warmup_steps=1, confirm=0,
                      ceiling=False, early_stop=False,  # counted rows (pruning: test_budget.py)
                      seed=seed)


def test_run_records_references_first_and_complete_rows(tmp_path, tuner_cache, ray_session):
    # Seed 35: the first searched trial (bs=13 nw=0) starts no DataLoader workers (a trial
    # with workers spends ~8 s starting them on 2 CPUs). Three trials: the references, then a
    # searched one (each trial costs seconds of set-up and windows on a loaded machine).
    summary = run(options(tmp_path, "tests.fake_workloads:regression", trials=3, seed=35))
    rows = summary.rows
    assert len(rows) == 3
    assert (summary.workload, summary.device, summary.scale) == ("fake-regression", "cpu", "tiny")
    assert [r["reference"] for r in rows[:2]] == ["baseline", "recommended"]
    assert [r["is_baseline"] for r in rows] == [True, False, False]
    assert all(r["reference"] is None for r in rows[2:])
    assert (rows[0]["batch_size"], rows[1]["batch_size"]) == (4, 16)    # the references' knobs
    assert len({r["trial_id"] for r in rows}) == 3
    assert {r["run_id"] for r in rows} == {summary.run_id}
    for r in rows:
        assert r["status"] == "ok", r["error"]
        for name in REQUIRED + MEASURED:
            assert r[name] is not None, name
        assert r["workload"] == "fake-regression" and r["device"] == "cpu"
        assert r["samples_per_sec"] > 0
        assert r["started_at"] <= r["finished_at"]
        assert 4 <= r["batch_size"] <= 64
    # One trial at a time: each has the machine, and trains on every CPU its DataLoader
    # workers leave (not 1 thread whatever its workers).
    cpus = os.cpu_count()
    assert all(r["trial_cpus"] == cpus for r in rows)
    assert all(r["torch_threads"] == max(1, cpus - r["num_workers"]) for r in rows)
    assert any(r["num_workers"] == 0 and r["torch_threads"] == cpus for r in rows)
    # The leaderboard on disk holds the same rows, one file per trial.
    table = leaderboard.read(summary.results_dir)
    assert len(list((tmp_path / "results" / "leaderboard").glob("part-*.parquet"))) == 3
    on_disk = {r["trial_id"]: r for r in table.to_pylist()}
    assert set(on_disk) == {r["trial_id"] for r in rows}
    for r in rows:
        assert on_disk[r["trial_id"]]["samples_per_sec"] == r["samples_per_sec"]
        assert on_disk[r["trial_id"]]["reference"] == r["reference"]
        assert on_disk[r["trial_id"]]["batch_size"] == r["batch_size"]


def test_oom_trials_are_recorded_and_the_run_goes_on(tmp_path, tuner_cache, ray_session):
    # Seed 15, default sampler (GP): after the references (batch 4 and 16) the start-up
    # proposal is batch 42 without DataLoader workers (an OOM), the model-driven ones then
    # include batches up to 16, so OOM and ok trials both occur.
    trials = 6
    summary = run(options(tmp_path, "tests.fake_workloads:oom", trials=trials, seed=15))
    rows = summary.rows
    assert len(rows) == trials                                   # every trial ran and was written
    statuses = [r["status"] for r in rows]
    assert "oom" in statuses
    assert set(statuses) <= {"ok", "oom"}
    first_oom = statuses.index("oom")
    assert "ok" in statuses[first_oom + 1:]                      # the run went on after it
    for r in rows:
        for name in REQUIRED:
            assert r[name] is not None, name
        if r["status"] == "oom":
            assert r["batch_size"] > 16
            assert r["samples_per_sec"] is None                  # never a throughput of zero
            assert "OutOfMemoryError" in r["error"]
        else:
            assert r["batch_size"] <= 16
            assert r["samples_per_sec"] > 0
    top = answer_of(leaderboard.read(summary.results_dir))
    assert top.row["status"] == "ok" and top.knobs.batch_size <= 16
    assert top.baseline.ratio is not None


def test_the_machine_first_then_screening_then_finalists(tmp_path, tuner_cache, ray_session):
    """With the probe on: the probe's timed steps give the compute curve and the run's
    machine-compute ceiling row before any search trial, and the same process times the input
    pipeline alone (the loader with no worker first); the references are measured in full,
    the machine's structured points and the sampler's proposals screened over one window, and
    the best are re-measured in full windows in the rounds."""
    events = []
    opts = RunOptions(workload="tests.fake_workloads:regression", trials=6, device="cpu",
                      results=str(tmp_path / "results"), windows=2, window_s=0.1,
                      warmup_steps=1, confirm=2, ceiling=False, early_stop=False, seed=35,
                      probe="on")
    summary = run(opts, on_event=lambda kind, data: events.append((kind, data)))
    machine = next(data for kind, data in events if kind == "machine")
    assert machine["curve"] is not None and "knee batch_size" in machine["text"]
    assert re.search(r"input pipeline alone: data=loader nw=0 [\d,.]+", machine["text"])
    rows = summary.rows
    assert (rows[0]["phase"], rows[0]["ceiling"], rows[0]["status"]) == (
        "ceiling", "machine-compute", "ok")
    assert rows[0]["batch_size"] == machine["curve"].max_batch
    assert rows[0]["samples_per_sec"] == machine["curve"].limit_samples_per_sec
    search = [r for r in rows if r["phase"] == "search"]
    assert len(search) == 6 and all(r["status"] == "ok" for r in search)
    assert [r["reference"] for r in search[:2]] == ["baseline", "recommended"]
    anchors = len(machine["anchors"])
    assert [r["batch_size"] for r in search[2:2 + anchors]] == [
        k.batch_size for _, k in machine["anchors"]]
    assert all(r["windows"] == 2 for r in search[:2])                # the references in full
    assert all(r["windows"] == 1 for r in search[2:])                # the rest screened
    rounds = [r for r in rows if r["phase"] == "remeasure"]
    assert rounds and all(r["windows"] == 2 for r in rounds)         # finalists in full


@pytest.fixture
def searcher(tmp_path, tuner_cache):
    plan = make_plan(options(tmp_path, "tests.fake_workloads:regression", trials=8))
    return make_searcher(plan.search_spec())


def test_searcher_suggests_references_first(searcher):
    baseline, recommended, searched = (searcher.suggest(f"t{i}") for i in range(3))
    assert baseline["reference"] == "baseline" and baseline["batch_size"] == 4
    assert recommended["reference"] == "recommended" and recommended["batch_size"] == 16
    assert searched["reference"] is None
    assert 4 <= searched["batch_size"] <= 64


def test_searcher_passes_failures_to_optuna(searcher):
    for i in range(5):
        searcher.suggest(f"t{i}")
    searcher.on_trial_complete("t0", {"status": "oom", "samples_per_sec": 0.0})
    searcher.on_trial_complete("t1", {"status": "error", "samples_per_sec": 0.0})
    searcher.on_trial_complete("t2", {"status": "ok", "samples_per_sec": 1234.5})
    searcher.on_trial_complete("t3", {"status": "over_limit", "samples_per_sec": 0.0})
    import optuna
    states = {t.number: t for t in searcher.study.trials}
    # OOM: complete but infeasible, so the sampler learns to avoid the region (a FAIL is ignored).
    assert states[0].state == optuna.trial.TrialState.COMPLETE
    assert list(states[0].constraints.values()) == [1.0]
    # Any other error: FAIL, with no value.
    assert states[1].state == optuna.trial.TrialState.FAIL
    assert states[1].values is None
    # ok: complete, feasible, valued by samples/sec.
    assert states[2].state == optuna.trial.TrialState.COMPLETE
    assert list(states[2].constraints.values()) == [0.0]
    assert states[2].values == [1234.5]
    assert states[3].state == optuna.trial.TrialState.COMPLETE
    assert list(states[3].constraints.values()) == [1.0]
    assert states[4].state == optuna.trial.TrialState.RUNNING
