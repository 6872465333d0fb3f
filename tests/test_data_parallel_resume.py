"""A run of data-parallel trials (``--world-size 2``) stopped with Ctrl-C and resumed, its
driver a process of its own (the stop-and-resume helpers of tests/fault_runs.py). A file of its
own: the suite's workers take whole files, and beside tests/test_data_parallel.py's shared
``--world-size 1,2`` run this one test made that file the suite's longest."""

from __future__ import annotations

import signal

import pytest

from tests.fault_runs import SLOW, _stop, finish, rows_of, start, stop_setup


@pytest.mark.slow
def test_a_run_of_two_rank_trials_interrupted_then_resumed_records_each_trial_once(tmp_path):
    """Ctrl-C once a 2-rank trial is recorded (exit 130), then --resume: the run's trials are
    recorded exactly once each, all of world size 2."""
    space, env = stop_setup(tmp_path, step_sleep_s=0.02)
    results = tmp_path / "results"
    args = ["run", "--workload", SLOW, "--space", str(space), "--trials", "2", "--world-size",
            "2", "--results", str(results), "--device", "cpu", "--windows", "2", "--window-s",
            "0.2", "--warmup-steps", "1", "--confirm", "0", "--no-ceiling", "--no-early-stop"]
    # every rank process runs one trial: hold_from=2 never holds, the run goes on to the signal
    stopped = _stop(args, env, results, lambda rows: len(rows) >= 1, "a recorded trial",
                    signal.SIGINT, hold_from=2)
    assert stopped["returncode"] == 130, stopped["err"][-2000:]
    (run_id,) = {r["run_id"] for r in stopped["before"].values()}
    assert len(stopped["before"]) == 1
    proc = start([*args, "--resume", run_id], env)
    out, err = finish(proc)
    assert proc.returncode == 0, err[-2000:]
    rows = [r for r in rows_of(results) if r["run_id"] == run_id]
    assert len(rows) == 2 and len({r["trial_id"] for r in rows}) == 2
    assert set(stopped["before"]) <= {r["trial_id"] for r in rows}   # kept, not measured again
    assert all(r["world_size"] == 2 and r["status"] == "ok" for r in rows), [
        (r["status"], r["error"]) for r in rows]
