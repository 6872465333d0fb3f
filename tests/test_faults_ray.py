"""Faults around Ray and the machine: an ``--address`` where something other than Ray listens,
a leaderboard write that fails mid-run (a full disk), Ray's state kept small, and two runs
on one machine (tuner.runlock). The driver killed with ``kill -9`` (Ray's DashboardAgent and
RuntimeEnvAgent processes gone with it) is checked in tests/test_faults.py, on the run it
already kills."""

from __future__ import annotations

import errno
import http.server
import os
import pickle
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO_ROOT
from tuner.errors import TunerError

REGRESSION = "tests.fake_workloads:regression"


# ------------------------------------------------------------ --address: not a Ray cluster

@pytest.fixture
def http_port():
    """An HTTP server on every interface (Ray connects to 127.0.0.1 as this machine's outward
    IP), answering whatever comes with an HTTP error."""
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreachable_address_is_refused_where_ray_already_runs_in_the_process(ray_session):
    """With Ray running in this process (a notebook, a test module before), ``--address``
    named a cluster nobody could reach and the run went on with the local Ray."""
    from tuner.errors import TunerError
    from tuner.ray_runtime import ray_init
    with pytest.raises(TunerError, match=r"--address 127\.0\.0\.1:1: cannot reach"):
        ray_init("127.0.0.1:1")


@pytest.mark.slow
def test_an_address_where_another_service_listens_stops_in_seconds(tmp_path, http_port):
    """Ray itself retried such a port for over ten minutes, printing C++ warnings."""
    address = f"127.0.0.1:{http_port}"
    env = {**os.environ, "TUNER_CACHE": str(tmp_path / "cache"), "COLUMNS": "300"}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tuner", "run", "--workload", REGRESSION,
                           "--device", "cpu", "--address", address,
                           "--results", str(tmp_path / "results")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - started
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]            # no Ray warning lines, no traceback
    assert lines[0].startswith(f"error: --address {address}")
    assert "no Ray cluster answered there within 10 s" in lines[0]
    # 10 s of waiting plus start-up and imports, which a machine at load 15 stretched to 35 s:
    # far from the ten minutes of Ray's own retries
    assert seconds < 60, f"{seconds:.1f} s"
    assert not (tmp_path / "results").exists()


# ------------------------------------------------------------------- a failed write

@pytest.fixture
def plan(tmp_path, regression_data):
    from tuner.option_checks import make_plan
    from tuner.settings import RunOptions
    return make_plan(RunOptions(workload=REGRESSION, trials=3, device="cpu",
                                data=str(regression_data), results=str(tmp_path / "results")))


class _Trial:
    """What LeaderboardWriter reads of a finished Ray Tune trial."""

    def __init__(self, n: int):
        self.trial_id = f"t{n}"
        self.config = {"batch_size": 4, "phase": "search"}
        self.last_result = {"status": "ok", "samples_per_sec": 10.0 + n, "trial_cpus": 1}
        self.run_metadata = None


def _writer(plan):
    from tuner.recorder import LeaderboardWriter
    events = []
    return LeaderboardWriter(plan, lambda kind, data: events.append(kind), versions={}), events


def _fail_from(call: int, monkeypatch) -> list[int]:
    """Make the leaderboard's row writes fail with ENOSPC from the ``call``-th on."""
    import tuner.leaderboard as leaderboard
    real, calls = leaderboard.write_row, []

    def write_row(results, row):
        calls.append(1)
        if len(calls) >= call:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(results))
        return real(results, row)

    monkeypatch.setattr(leaderboard, "write_row", write_row)
    return calls


def test_a_failed_row_write_is_kept_for_the_step_end_and_nothing_after_it_is_written(
        plan, monkeypatch):
    from tuner.recorder import RecordFailed
    calls = _fail_from(2, monkeypatch)
    writer, events = _writer(plan)
    writer.on_trial_complete(0, [], _Trial(0))
    writer.on_step_end(0, [])                                 # nothing failed yet
    writer.on_trial_complete(1, [], _Trial(1))                # ENOSPC: Tune would swallow a raise
    writer.on_trial_complete(2, [], _Trial(2))
    assert len(writer.rows) == 1 and events == ["trial"] and len(calls) == 2
    with pytest.raises(RecordFailed) as info:
        writer.on_step_end(2, [])
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, TunerError)
    assert (
        f"cannot write to {plan.options.results}/leaderboard (No space left on device)" in message
    )
    assert f"1 trials of run {plan.run_id} are in {plan.options.results}/leaderboard" in message
    assert "the row of trial t1 is lost" in message
    assert message.endswith(f"--resume {plan.run_id}")


@pytest.mark.parametrize("windows, said", [
    (1, "after 1 window"), (2, "after 2 windows"),
    (0, "before its first window (set-up, compile or warm-up)")])
def test_a_trial_past_the_time_budget_is_recorded_with_the_windows_it_finished(
        plan, windows, said):
    """The row of a trial stopped by the time budget keeps what it measured, and its error
    says how many windows that was, in words a person reads ('1 window', not '1 windows')."""
    from tuner.status import Status
    writer, events = _writer(plan)
    trial = _Trial(0)
    trial.last_result = {"status": Status.RUNNING, "windows": windows, "trial_cpus": 1,
                         "samples_per_sec": 12.5 if windows else None}
    writer._write_timeout(trial)
    (row,) = writer.rows
    assert row["status"] == "timeout" and events == ["trial"]
    assert row["error"] == f"stopped by the time budget {said}"
    assert row["samples_per_sec"] == (12.5 if windows else None)


def test_rays_pickled_copy_of_the_writer_does_not_grow_with_the_rows(plan):
    """Ray Tune pickles the run config with each experiment (tuner.pkl under <results>/ray);
    with the rows in it, Ray's state outgrew the leaderboard and filled a small disk."""
    writer, _ = _writer(plan)
    empty = len(pickle.dumps(writer))
    for n in range(50):
        writer.on_trial_complete(n, [], _Trial(n))
    assert len(writer.rows) == 50
    assert len(pickle.dumps(writer)) == empty
    assert writer.rows and pickle.loads(pickle.dumps(writer)).rows == []


@pytest.mark.slow
def test_a_full_disk_stops_the_run_at_once(tmp_path, tuner_cache, ray_session, monkeypatch):
    """Through Ray Tune: the error leaves Tuner.fit at the step that failed to write, and no
    later trial runs (none runs on for minutes, writing nothing, saying nothing)."""
    from tuner import leaderboard
    from tuner.driver import run
    from tuner.recorder import RecordFailed
    from tuner.settings import RunOptions
    calls = _fail_from(2, monkeypatch)
    results = tmp_path / "results"
    with pytest.raises(RecordFailed, match=r"1 trials of run \S+ are in .*--resume"):
        run(RunOptions(workload=REGRESSION, trials=4, results=str(results), device="cpu",
                       windows=2, window_s=0.2, warmup_steps=1, confirm=0, ceiling=False,
                       early_stop=False))
    assert len(calls) == 2                                    # no trial after the failure
    assert len(leaderboard.read(str(results)).to_pylist()) == 1


# --------------------------------------------------------------- two runs on one machine

HOLDER = """
import sys, time
from tuner.runlock import registered
from pathlib import Path
with registered(sys.argv[1], sys.argv[2], local=True, registry=Path(sys.argv[3])):
    print("registered", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def other_run(tmp_path):
    """Another run's process, registered in a private registry with results ``other``."""
    registry = tmp_path / "registry"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, "other-run-1", str(tmp_path / "other"),
                             str(registry)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "registered"
        yield proc, registry
    finally:
        proc.kill()                                           # the process this test started
        proc.wait()


def test_a_second_run_into_the_same_results_is_refused(tmp_path, other_run):
    from tuner.runlock import registered
    proc, registry = other_run
    with pytest.raises(TunerError) as info:
        with registered("mine", tmp_path / "other", local=True, registry=registry):
            pytest.fail("registered beside a live run into the same results")
    message = str(info.value)
    assert f"--results {tmp_path / 'other'}: run other-run-1 (PID {proc.pid}) is tuning" in message
    assert "\n" not in message
    with registered("mine", tmp_path / "other", local=False, registry=registry):
        pass                                                  # on a cluster: Ray shares it


def test_a_run_beside_another_is_warned_once_and_marks_nothing_stale(tmp_path, other_run):
    from tuner.runlock import ConcurrentRunWarning, active_runs, registered
    proc, registry = other_run
    with pytest.warns(ConcurrentRunWarning) as caught:
        with registered("mine", tmp_path / "mine", local=True, registry=registry):
            assert {r.run_id for r in active_runs(registry)} == {"other-run-1", "mine"}
    # pytest.warns records every warning raised in the block, of any category: CI counted 2
    # (the registry is private, so the other was not a ConcurrentRunWarning; garbage of an
    # earlier test collected here, say). Only ConcurrentRunWarnings are counted
    mine = [w for w in caught if issubclass(w.category, ConcurrentRunWarning)]
    assert len(mine) == 1
    assert f"run other-run-1 (PID {proc.pid}, results {tmp_path / 'other'})" in str(
        mine[0].message)
    assert [r.run_id for r in active_runs(registry)] == ["other-run-1"]   # mine removed


def test_a_killed_runs_registration_is_ignored_and_removed(tmp_path, other_run, recwarn):
    from tuner.runlock import active_runs, registered
    proc, registry = other_run
    proc.kill()                                               # kill -9: no clean-up ran
    proc.wait()
    assert len(list(registry.glob("*.json"))) == 1
    with registered("mine", tmp_path / "other", local=True, registry=registry):
        assert [r.run_id for r in active_runs(registry)] == ["mine"]
    assert not list(registry.glob("*.json"))
    assert not [w for w in recwarn.list if not issubclass(w.category, ResourceWarning)]
