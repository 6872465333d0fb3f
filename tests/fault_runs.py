"""What the fault tests (tests/test_faults.py, tests/test_faults_cluster.py) share: the
workloads and the smallest run's options, a run started as its own process (with Ctrl-C as in
a terminal), the rows it left, and the trials it announced (tests/fault_workloads.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests import fault_workloads
from tests.conftest import REPO_ROOT
from tuner import leaderboard

REGRESSION = "tests.fake_workloads:regression"
SLOW = "tests.fault_workloads:slow"
SHORT = ["--device", "cpu", "--windows", "2", "--window-s", "0.2", "--warmup-steps", "1",
         "--confirm", "0", "--no-ceiling", "--no-early-stop"]
"""The smallest run of every phase; no early stopping (tests/test_budget.py tests it): these
tests count rows and statuses."""


TUNER_WITH_CTRL_C = ("import runpy, signal; signal.signal(signal.SIGINT, "
                     "signal.default_int_handler); "
                     "runpy.run_module('tuner', run_name='__main__', alter_sys=True)")
"""``python -m tuner`` with Ctrl-C (SIGINT) raising KeyboardInterrupt, as in a terminal. A
shell without job control starts a background job (``pytest ... &`` in a script) with SIGINT
ignored, its children inherit that, and Python then leaves SIGINT ignored: a driver started
so cannot be stopped with it (the stopped-run tests would hang in a suite started in the
background)."""


def start(args: list[str], env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", TUNER_WITH_CTRL_C, *args], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # only the process this test started
        out, err = proc.communicate()
        pytest.fail(f"timed out; stdout: {out[-2000:]} stderr: {err[-2000:]}")


def rows_of(results: Path) -> list[dict]:
    return leaderboard.read(str(results)).to_pylist()


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None,
             every_s: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run exited ({proc.returncode}) before {what}: {err[-3000:]}")
        time.sleep(every_s)
    pytest.fail(f"timed out waiting for {what}")


def announced(pid_dir: Path) -> list[tuple[int, str]]:
    """(pid, node id) of each trial that has started a step, in order of appearance."""
    files = sorted((p for p in pid_dir.iterdir() if not p.name.startswith(".")),
                   key=lambda p: p.stat().st_mtime_ns)
    out = []
    for p in files:
        pid, node = p.read_text().split()
        out.append((int(pid), node))
    return out


def descends_from(pid: int, ancestor: int) -> bool:
    try:
        return ancestor in {p.pid for p in psutil.Process(pid).parents()}
    except psutil.NoSuchProcess:
        return False


def _stop(args: list[str], env: dict, results: Path, until, what: str, sig: int,
          hold_from: int) -> dict:
    """Start ``args``, send ``sig`` to its driver once ``until(rows)`` holds; what it left.
    The run's ``hold_from``-th trial (of its trial process) waits until then
    (tests/fault_workloads.py): the rows left at each stop are the same in every suite, and a
    signal the driver does not act on shows as a run held until ``finish`` times out, not as a
    run that ended before its stop."""
    kwargs = {"start_new_session": True} if sig == signal.SIGKILL else {}
    hold = Path(env[fault_workloads.PID_DIR_ENV]).parent / "hold"
    hold.touch()
    proc = start(args, {**env, fault_workloads.HOLD_FILE_ENV: str(hold),
                        fault_workloads.HOLD_FROM_ENV: str(hold_from)}, **kwargs)
    try:
        # reading the leaderboard 20 times a second took CPU from the run on 2 cores
        wait_for(lambda: until(rows_of(results)), 240, what, proc, every_s=0.5)
        tree = psutil.Process(proc.pid).children(recursive=True)  # Ray started by this run
        os.kill(proc.pid, sig)
    finally:
        out, err = finish(proc)
        hold.unlink()
    alive = []
    if sig == signal.SIGKILL:
        # The killed driver's Ray processes go with it: GCS, raylet and workers share its
        # fate; its RuntimeEnvAgent and DashboardAgent (which outlive it by 62 s) are ended by
        # the reaper ray_init starts (tuner/ray_runtime.py). Any left are ended here, by PID.
        _, left = psutil.wait_procs(tree, timeout=30)
        alive = [p.name() for p in left if p.is_running()]
        for p in left:
            p.kill()
    return {"returncode": proc.returncode, "out": out, "err": err, "alive": alive,
            "before": {r["trial_id"]: r for r in rows_of(results)}}


def stop_setup(tmp: Path, step_sleep_s: float) -> tuple[Path, dict]:
    """For a run ``_stop`` stops: a search space without DataLoader workers, and the
    environment (a private cache, wide output, a PID directory, steps of ``step_sleep_s``)."""
    (tmp / "pids").mkdir()
    space = tmp / "no-workers.yaml"
    space.write_text("knobs:\n  batch_size: {low: 4, high: 64, log: true}\n  num_workers: 0\n")
    return space, {**os.environ, "TUNER_CACHE": str(tmp / "cache"), "COLUMNS": "200",
                   "TUNER_TEST_PID_DIR": str(tmp / "pids"),
                   "TUNER_TEST_STEP_SLEEP": str(step_sleep_s)}
