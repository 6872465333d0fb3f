"""The time budget and early stopping in whole runs on one local Ray: a run ends within its
budget + the grace with the trial its deadline caught recorded; a measurement the budget
stopped after a window is the run's answer; a search trial far behind the best is pruned.
(The budget's arithmetic and a trial's own deadline, without Ray: tests/test_budget.py.)"""

from __future__ import annotations

import math
import time

import pytest

from tuner.budget import BUDGET_GRACE_S
from tuner.settings import RunOptions

PACED = "tests.fake_workloads:paced"


@pytest.fixture
def paced_space(tmp_path) -> str:
    """Batch 4, 5 and 6 are 5x, 4x and 3.3x slower than 20; 32 has a 15 s first step."""
    path = tmp_path / "paced.yaml"
    path.write_text("knobs:\n  batch_size: {choices: [4, 5, 6, 20, 32]}\n  num_workers: 0\n")
    return str(path)


COMMON = dict(device="cpu", sampler="random", seed=5, windows=3, window_s=0.6, warmup_steps=2,
              confirm=0, ceiling=False)
"""The options the Ray runs below share (with their space and data)."""


@pytest.fixture(scope="module")
def pruning_run(ray_session, regression_data, tmp_path_factory) -> dict:
    """No budget, 3 trials of a steeply paced workload (``SteepPaced``): its rows, and the
    start-up measured by its first trial on this machine now (seconds from the run's call to
    that trial's first step), which sizes the budgets of the budget runs below: a fixed budget
    measured the start-up instead (5-6 s on 2 quiet cores, 10-17 s and more beside another
    suite, over 90 s at a load average of 20-25)."""
    from tuner.driver import run
    tmp = tmp_path_factory.mktemp("budget-runs")
    space = tmp / "paced.yaml"
    space.write_text("knobs:\n  batch_size: {choices: [4, 5, 6, 20, 32]}\n  num_workers: 0\n")
    common = dict(space_file=str(space), data=str(regression_data), **COMMON)
    called_unix_s = time.time()
    # windows of 1.2 s: six steps of batch 20 (0.2 s apart) each, for the noise
    summary = run(RunOptions(workload="tests.fake_workloads:steep_paced", trials=3,
                             results=str(tmp / "prune"), **{**common, "window_s": 1.2}))
    first = min(summary.rows, key=lambda r: r["started_at"])
    start_up_s = first["started_at"].timestamp() - called_unix_s + (first["setup_s"] or 0.0)
    return {"rows": summary.rows, "start_up_s": start_up_s, "common": common, "tmp": tmp}


def budget_for(pruning_run: dict) -> int:
    """A time budget (seconds) of twice the start-up ``pruning_run`` measured, at least 20 s:
    the trial process starts well inside it however busy the machine is."""
    return max(20, math.ceil(2 * pruning_run["start_up_s"]))


@pytest.mark.slow
def test_a_budget_run_ends_in_time_and_early_stopping_prunes_slow_trials(pruning_run):
    """Two runs on one Ray (started by the fixture, outside the budget).

    1. ``pruning_run``: the references (batch 20, then 4: 25x slower) run whole; the random
       sampler (seed 5) then proposes batch 5, 16x slower than the best: pruned after a
       window, its partial measurement kept, while the slower reference ran all its windows.
       (Steps start at fixed periods: a busy machine's per-step cost narrows neither gap.)
    2. A time budget of twice the start-up it measured (``budget_for``) over a workload whose
       trials spend 600 s in their first step (a compile longer than the budget): the
       deadline catches the first trial inside that step, which is killed; the run ends
       within the budget + the grace, the trial recorded ``timeout``, not lost. (A fixed
       20-s budget and a 15-s first step measured the start-up instead: beside another suite
       the deadline came while the trial process was still starting, Ray Tune's stop waited
       10 s more for it, and no row was written.)"""
    from tuner.driver import run
    rows = {r["batch_size"]: r for r in pruning_run["rows"]}
    assert rows[20]["status"] == "ok" and rows[20]["reference"] == "baseline"
    slow_ref = rows[4]
    # pruned after a window, or (steps stretched past half a window on a busy machine) after
    # its warm-up's report of a long step, with no window
    assert rows[5]["status"] == "pruned" and (rows[5]["windows"] or 0) < 3, [
        (r["batch_size"], r["status"], r["windows"], r["samples_per_sec"])
        for r in pruning_run["rows"]]
    assert rows[5]["samples_per_sec"] > 0                   # its partial measurement kept
    # The recommended reference runs whole though it is far behind the baseline (25x, far
    # past the pruning margin's floor of 10 %): a reference is never pruned.
    assert slow_ref["reference"] == "recommended" and slow_ref["status"] == "ok"
    assert slow_ref["windows"] == 3
    assert slow_ref["samples_per_sec"] < rows[20]["samples_per_sec"] / 4

    budget_s = budget_for(pruning_run)
    started = time.monotonic()
    budget = run(RunOptions(workload="tests.fake_workloads:paced_long", time_budget_s=budget_s,
                            results=str(pruning_run["tmp"] / "budget"), **pruning_run["common"]))
    assert time.monotonic() - started < budget_s + BUDGET_GRACE_S, (
        pruning_run["start_up_s"], budget_s)
    assert budget.rows, "the trial the deadline caught is recorded"
    last = budget.rows[-1]
    assert last["status"] == "timeout" and "time budget" in last["error"]
    assert all(r["status"] in ("ok", "timeout") for r in budget.rows)


@pytest.mark.slow
def test_a_measurement_the_budget_stopped_after_a_window_is_the_runs_answer(
        pruning_run, regression_data, paced_space, tmp_path):
    """A budget of twice the start-up measured (``budget_for``, at least 20 s) over a
    baseline planned for 1,000 windows of 0.5 s (more than the budget): the budget stops it
    after the windows it had time for, however long its trial process took to start (its
    steps are sleeps). Its row says how many of the 1,000 it measured, and it is the run's
    answer, said so in one line, never 'no trial succeeded'. (That a run ends in its budget
    is the test above's.)"""
    from tuner import leaderboard, winner
    from tuner.driver import run
    summary = run(RunOptions(workload=PACED, space_file=paced_space, data=str(regression_data),
                             device="cpu", windows=1000, window_s=0.5, confirm=0, ceiling=False,
                             time_budget_s=budget_for(pruning_run), results=str(tmp_path / "r")))
    (baseline,) = [r for r in summary.rows if r["reference"] == "baseline"]
    assert baseline["status"] == "timeout" and baseline["windows_planned"] == 1000
    assert 1 <= baseline["windows"] < 1000 and baseline["samples_per_sec"] > 0
    answer = winner.best(leaderboard.read(tmp_path / "r"))
    assert answer is not None and answer.budget_stopped
    assert answer.row["trial_id"] == baseline["trial_id"] and answer.baseline.is_best
    assert winner.budget_stopped_text(answer) == (
        f"best: {baseline['samples_per_sec']:,.1f} samples/sec (baseline; "
        f"{baseline['windows']} of 1000 windows, the time budget stopped the "
        f"{winner._ordinal(baseline['windows'] + 1)})")
