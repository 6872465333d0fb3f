"""The run survives faults: a second run into the same results directory (refused), a trial
process killed while it measures, the driver interrupted (SIGINT) or killed (SIGKILL) and
resumed. (Ray clusters of two local nodes: tests/test_faults_cluster.py.)

Trial processes are found through tests/fault_workloads.py, which writes each trial's PID and
Ray node to a directory the test names; a process is signalled only after checking that it
belongs to the run this test started."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests import fault_workloads
from tests.conftest import tuner_in_process
from tests.fault_runs import (
    REGRESSION,
    SHORT,
    SLOW,
    _stop,
    announced,
    descends_from,
    finish,
    rows_of,
    start,
    stop_setup,
    wait_for,
)
from tuner.plan import REMEASURE_ROUNDS
from tuner.winner import best as answer_of

pytestmark = pytest.mark.slow


@pytest.fixture
def env(tmp_path) -> dict:
    pids = tmp_path / "pids"
    pids.mkdir()
    return {**os.environ, "TUNER_CACHE": str(tmp_path / "cache"), "COLUMNS": "200",
            "TUNER_TEST_PID_DIR": str(pids), "TUNER_TEST_STEP_SLEEP": "0.05"}


# ---------------------------------------------------------------- one results directory

def test_two_runs_at_once_into_one_results_directory(tmp_path, env, space):
    """Two runs on one machine share its cores and measure each other: the second into the
    same results directory is refused in one line naming the first (tuner/runlock.py), before
    it starts Ray or writes a row; the first runs on undisturbed (its two references: a
    searched trial would add seconds and nothing to assert)."""
    results = tmp_path / "results"
    procs = [start(["run", "--workload", REGRESSION, "--space", space, "--trials", "2",
                    "--results", str(results), "--seed", str(seed), *SHORT], env)
             for seed in (1, 2)]
    outputs = [finish(p) for p in procs]
    assert sorted(p.returncode for p in procs) == [0, 2], [err[-3000:] for _, err in outputs]
    (winner, (out, _)), = [(p, o) for p, o in zip(procs, outputs) if p.returncode == 0]
    (_, refused), = [o for p, o in zip(procs, outputs) if p.returncode == 2]
    rows = rows_of(results)
    (run_id,) = {r["run_id"] for r in rows}
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    assert sorted(r["reference"] for r in rows) == ["baseline", "recommended"]
    assert run_id in out
    lines = [ln for ln in refused.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in refused, refused[-3000:]
    assert f"error: --results {results}: run {run_id} (PID {winner.pid}) is tuning" in lines[0]


# ----------------------------------------------------------------- a trial process dies

def test_trial_process_killed_while_measuring(tmp_path, env, space, monkeypatch):
    """The run's two references, the first (the baseline) killed while it measures."""
    results, pid_dir = tmp_path / "results", Path(env["TUNER_TEST_PID_DIR"])
    hold = tmp_path / "hold"    # the first trial waits in its first step until it is killed
    hold.touch()
    proc = start(["run", "--workload", SLOW, "--space", space, "--trials", "2",
                  "--results", str(results), *SHORT, "--window-s", "0.5"],
                 {**env, fault_workloads.HOLD_FILE_ENV: str(hold),
                  fault_workloads.HOLD_FROM_ENV: "1"})
    try:
        pid, _ = wait_for(lambda: announced(pid_dir)[:1], 120, "the first trial's step", proc)[0]
        assert descends_from(pid, proc.pid), "the announced process is not part of this run"
        assert rows_of(results) == []                 # still measuring the first trial
        os.kill(pid, signal.SIGKILL)
    finally:
        hold.unlink()
        out, err = finish(proc)
    assert proc.returncode == 0, err[-3000:]
    rows = rows_of(results)
    assert len(rows) == 3                             # 2 trials and the baseline's retry
    errors = [r for r in rows if r["status"] == "error"]
    assert len(errors) == 1, [(r["status"], r["error"]) for r in rows]
    killed = errors[0]
    assert killed["reference"] == "baseline"          # the first trial
    message = killed["error"].lower()
    assert "died" in message or "actor" in message or "worker" in message, killed["error"]
    assert killed["samples_per_sec"] is None
    assert all(r["status"] == "ok" for r in rows if r is not killed)
    assert "Traceback" not in err
    # A reference killed by a transient fault is measured once more, so the run still has
    # its speed-up over the baseline.
    (retry,) = [r for r in rows if r["reference"] == "baseline" and r is not killed]
    assert retry["phase"] == "search" and retry["status"] == "ok"
    assert "measuring baseline once more" in " ".join(out.split())
    top = answer_of(rows)
    assert top.baseline.samples_per_sec == retry["samples_per_sec"]
    assert top.baseline.ratio is not None
    # The run can still be resumed (it is complete: nothing left to run, so the resume ends
    # without starting Ray) ...
    from tuner import driver
    from tuner.option_checks import make_plan
    from tuner.settings import RunOptions
    plan = make_plan(RunOptions(workload=SLOW, space_file=space, trials=2, device="cpu",
                                results=str(results), resume="latest", confirm=0,
                                ceiling=False))
    assert plan.run_id == killed["run_id"] and plan.remaining_trials == 0

    def no_ray(address):
        raise AssertionError("Ray started for a run with nothing left")
    monkeypatch.setattr(driver, "ray_session", no_ray)
    events = []
    summary = driver.run(plan, on_event=lambda kind, data: events.append(kind))
    assert events == ["start", "complete"] and summary.rows == rows
    # (with the re-measurement the run did not do, there is something left: Ray starts)
    assert not driver.nothing_left(make_plan(RunOptions(
        workload=SLOW, space_file=space, trials=2, device="cpu", results=str(results),
        resume="latest", confirm=3, ceiling=False)))
    # ... and the failed trial's row says when it ran, like every other row.
    assert killed["started_at"] is not None and killed["finished_at"] is not None


# ------------------------------------------------------------ the driver stops; resume

STOPPED_TRIALS = 5
"""Search trials of the run the driver-stop tests share; enough that two stops in the search
leave some of it to the resume."""


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> dict:
    """One run (--confirm 1 --ceiling) stopped four ways, each stop then resumed: Ctrl-C
    (SIGINT) in the search, SIGKILL of the resumed driver later in the search, SIGTERM of the
    next resume while it re-measures, a resume that finishes, and one more that finds nothing
    left. Each stage's output and the rows it left; the tests below assert on them."""
    tmp = tmp_path_factory.mktemp("stopped")
    space, env = stop_setup(tmp, step_sleep_s=0.05)
    results = tmp / "results"
    args = ["run", "--workload", SLOW, "--space", str(space), "--trials", str(STOPPED_TRIALS),
            "--results", str(results), "--device", "cpu", "--windows", "2", "--window-s",
            "0.2", "--warmup-steps", "1", "--confirm", "1", "--ceiling", "--no-early-stop"]
    # Each stage holds the trial after the one it waits for: the search's second (1 row),
    # the resume's second (1 more), then after the search's last 3 trials and a re-measured one.
    stages = {"SIGINT": _stop(args, env, results, lambda rows: len(rows) >= 1,
                              "a recorded trial", signal.SIGINT, hold_from=2)}
    (run_id,) = {r["run_id"] for r in stages["SIGINT"]["before"].values()}
    resume = [*args, "--resume", run_id]
    first = len(stages["SIGINT"]["before"])
    stages["SIGKILL"] = _stop(resume, env, results, lambda rows: len(rows) > first,
                              "one more recorded trial", signal.SIGKILL, hold_from=2)
    left = STOPPED_TRIALS - len(stages["SIGKILL"]["before"])
    stages["SIGTERM"] = _stop(resume, env, results,
                              lambda rows: any(r["phase"] == "remeasure" for r in rows),
                              "a re-measured trial", signal.SIGTERM, hold_from=left + 2)
    proc = start(resume, env)
    out, err = finish(proc)
    stages["resumed"] = {"returncode": proc.returncode, "out": out, "err": err,
                         "rows": [r for r in rows_of(results) if r["run_id"] == run_id]}
    # Now there is nothing left: neither Ray nor a trial starts, so the command runs in this
    # process (a process of its own imports torch and tuner again: seconds on 2 busy cores).
    again = tuner_in_process(*resume, env=env)
    stages["again"] = {"returncode": again.returncode, "out": again.stdout, "err": again.stderr,
                       "rows": [r for r in rows_of(results) if r["run_id"] == run_id]}
    return {"run_id": run_id, **stages}


def _resumed_exactly_once(stopped_run: dict, stage: str) -> None:
    """The resumes after ``stage`` finished the run: every search trial recorded once, the
    rows recorded before the stop unchanged."""
    done = stopped_run["resumed"]
    assert done["returncode"] == 0, done["err"][-3000:]
    assert f"resuming run {stopped_run['run_id']}" in done["out"]
    rows = done["rows"]
    assert len(rows) == len({r["trial_id"] for r in rows})          # no trial recorded twice
    search = [r for r in rows if r["phase"] == "search"]
    assert len(search) == STOPPED_TRIALS
    after = {r["trial_id"]: r for r in rows}
    for trial_id, row in stopped_run[stage]["before"].items():      # earlier rows unchanged
        assert after[trial_id] == row
    assert sorted(r["reference"] for r in search if r["reference"]) == ["baseline",
                                                                         "recommended"]
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_driver_interrupted_then_resumed(stopped_run, sig):
    """Ctrl-C, and what a scheduler or a closed terminal sends (SIGTERM: sent while the run
    re-measures), stop the run in one line naming the --resume command."""
    stage = stopped_run[sig.name]
    (run_id,) = {r["run_id"] for r in stage["before"].values()}
    assert run_id == stopped_run["run_id"]
    assert 1 <= len([r for r in stage["before"].values() if r["phase"] == "search"])
    if sig == signal.SIGINT:
        assert len(stage["before"]) < STOPPED_TRIALS                # stopped in the search
    err = stage["err"]
    assert stage["returncode"] == 130, err[-3000:]
    assert f"--resume {run_id}" in " ".join(err.split()), err[-3000:]  # rich wraps lines
    assert "Traceback" not in err
    assert "SIGTERM received" not in err and "*** " not in err, err[-3000:]  # Ray's native
    _resumed_exactly_once(stopped_run, sig.name)


def test_driver_killed_then_resumed(stopped_run):
    stage = stopped_run["SIGKILL"]
    assert stage["returncode"] == -signal.SIGKILL
    assert not stage["alive"], f"outlived the killed driver by 10 s: {stage['alive']}"
    before = stage["before"]
    assert len(stopped_run["SIGINT"]["before"]) < len(before) < STOPPED_TRIALS
    assert {r["run_id"] for r in before.values()} == {stopped_run["run_id"]}
    _resumed_exactly_once(stopped_run, "SIGKILL")


def test_stopped_during_remeasurement_resume_finishes_that_phase_and_the_ceiling(stopped_run):
    """A run stopped while it re-measures resumes there: the re-measurements it lacks run, each
    configuration once, then the ceiling (never 'already complete' with a re-measured winner
    beside references that were not re-measured)."""
    stopped = stopped_run["SIGTERM"]
    assert stopped["returncode"] == 130, stopped["err"][-3000:]
    before = stopped["before"].values()
    assert any(r["phase"] == "remeasure" for r in before)
    assert not any(r["phase"] == "ceiling" for r in before)
    resumed = stopped_run["resumed"]
    assert resumed["returncode"] == 0, resumed["err"][-3000:]
    assert "already complete" not in resumed["out"]
    rows = resumed["rows"]
    phases = [r["phase"] for r in rows]
    assert phases.count("search") == STOPPED_TRIALS and phases.count("ceiling") >= 1
    remeasured = [(r["batch_size"], r["reference"]) for r in rows if r["phase"] == "remeasure"]
    assert len(set(remeasured)) >= 2
    assert all(remeasured.count(c) == REMEASURE_ROUNDS for c in remeasured)  # once a round
    refs = {r["reference"] for r in rows if r["phase"] == "remeasure" and r["reference"]}
    assert refs == {"baseline", "recommended"}                      # beside the winner, again
    again = stopped_run["again"]
    assert again["returncode"] == 0 and "already complete" in " ".join(again["out"].split()), \
        again["err"][-2000:]
    assert len(again["rows"]) == len(rows)


def test_sighup_is_handled_as_ctrl_c_in_process():
    """SIGHUP (a closed terminal) takes the same handler as SIGTERM, whose whole run and resume
    is tested above: KeyboardInterrupt where the run is, the previous handlers restored."""
    from tuner.driver import stop_signals_interrupt
    before = signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM)
    for sig in (signal.SIGHUP, signal.SIGTERM):
        with pytest.raises(KeyboardInterrupt, match=sig.name):
            with stop_signals_interrupt():
                os.kill(os.getpid(), sig)
                time.sleep(5)                        # the handler interrupts this
    assert (signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM)) == before
