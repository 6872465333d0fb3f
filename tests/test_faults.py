"""The run survives faults: a second run into the same results directory (refused), a trial
process killed while it measures, the driver interrupted (SIGINT) or killed (SIGKILL) and
resumed, and a Ray cluster of two local nodes, one of which goes away mid-run.

Trial processes are found through tests/fault_workloads.py, which writes each trial's PID and
Ray node to a directory the test names; a process is signalled only after checking that it
belongs to the run this test started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests import fault_workloads
from tests.conftest import REPO_ROOT, stop_shared_ray
from tuner import leaderboard
from tuner.plan import REMEASURE_ROUNDS
from tuner.winner import best as answer_of

pytestmark = pytest.mark.slow

REGRESSION = "tests.fake_workloads:regression"
SLOW = "tests.fault_workloads:slow"
SHORT = ["--device", "cpu", "--windows", "2", "--window-s", "0.2", "--warmup-steps", "1",
         "--confirm", "0", "--no-ceiling", "--no-early-stop"]
"""The smallest run of every phase; no early stopping (tests/test_budget.py tests it): these
tests count rows and statuses."""


@pytest.fixture
def space(tmp_path) -> str:
    """The test space without DataLoader workers (no worker processes to start per trial on
    a loaded 2-core machine)."""
    path = tmp_path / "no-workers.yaml"
    path.write_text("knobs:\n  batch_size: {low: 4, high: 64, log: true}\n  num_workers: 0\n")
    return str(path)


@pytest.fixture
def env(tmp_path) -> dict:
    pids = tmp_path / "pids"
    pids.mkdir()
    return {**os.environ, "TUNER_CACHE": str(tmp_path / "cache"), "COLUMNS": "200",
            "TUNER_TEST_PID_DIR": str(pids), "TUNER_TEST_STEP_SLEEP": "0.05"}


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


# ---------------------------------------------------------------- one results directory

def test_two_runs_at_once_into_one_results_directory(tmp_path, env, space):
    """Two runs on one machine share its cores and measure each other: the second into the
    same results directory is refused in one line naming the first (tuner/runlock.py), before
    it starts Ray or writes a row; the first runs on undisturbed."""
    results = tmp_path / "results"
    procs = [start(["run", "--workload", REGRESSION, "--space", space, "--trials", "3",
                    "--results", str(results), "--seed", str(seed), *SHORT], env)
             for seed in (1, 2)]
    outputs = [finish(p) for p in procs]
    assert sorted(p.returncode for p in procs) == [0, 2], [err[-3000:] for _, err in outputs]
    (winner, (out, _)), = [(p, o) for p, o in zip(procs, outputs) if p.returncode == 0]
    (_, refused), = [o for p, o in zip(procs, outputs) if p.returncode == 2]
    rows = rows_of(results)
    (run_id,) = {r["run_id"] for r in rows}
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    assert sorted(r["reference"] or "" for r in rows) == ["", "baseline", "recommended"]
    assert run_id in out
    lines = [ln for ln in refused.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in refused, refused[-3000:]
    assert f"error: --results {results}: run {run_id} (PID {winner.pid}) is tuning" in lines[0]


# ----------------------------------------------------------------- a trial process dies

def test_trial_process_killed_while_measuring(tmp_path, env, space, monkeypatch):
    results, pid_dir = tmp_path / "results", Path(env["TUNER_TEST_PID_DIR"])
    hold = tmp_path / "hold"    # the first trial waits in its first step until it is killed
    hold.touch()
    proc = start(["run", "--workload", SLOW, "--space", space, "--trials", "3",
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
    assert len(rows) == 4                             # 3 trials and the baseline's retry
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
    plan = make_plan(RunOptions(workload=SLOW, space_file=space, trials=3, device="cpu",
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
        workload=SLOW, space_file=space, trials=3, device="cpu", results=str(results),
        resume="latest", confirm=3, ceiling=False)))
    # ... and the failed trial's row says when it ran, like every other row.
    assert killed["started_at"] is not None and killed["finished_at"] is not None


# ------------------------------------------------------------ the driver stops; resume

STOPPED_TRIALS = 5
"""Search trials of the run the driver-stop tests share; enough that two stops in the search
leave some of it to the resume."""


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
    again = start(resume, env)                                     # now there is nothing left
    out, err = finish(again)
    stages["again"] = {"returncode": again.returncode, "out": out, "err": err,
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


# ------------------------------------------------------- one node per accelerator type

@pytest.fixture
def typed_cluster(tmp_path, monkeypatch):
    """Two 1-CPU nodes carrying the fake accelerator types A and B (Ray resources
    ``accelerator_type:A`` / ``accelerator_type:B``), not connected."""
    import ray
    from ray.cluster_utils import Cluster
    stop_shared_ray()                        # the runs below connect to this cluster instead
    assert not ray.is_initialized(), "a fixture left Ray initialised: the run would not connect"
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))
    import ray._private.ray_constants as ray_constants
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # see `two_nodes`
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "resources": {"accelerator_type:A": 1}})
    try:
        c.worker = c.add_node(num_cpus=1, node_ip_address="127.0.0.1",
                              resources={"accelerator_type:B": 1})
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def test_each_accelerator_type_gets_its_own_search_and_best(tmp_path, typed_cluster, space):
    from tuner import leaderboard
    from tuner.driver import run
    from tuner.settings import RunOptions
    run(RunOptions(workload=REGRESSION, trials=3, results=str(tmp_path / "results"),
                   address=typed_cluster.address, space_file=space, device="cpu",
                   windows=2, window_s=0.2, warmup_steps=1, confirm=0, ceiling=False,
                             early_stop=False))
    rows = rows_of(tmp_path / "results")
    assert len(rows) == 6
    node_of = {"A": typed_cluster.head_node.node_id, "B": typed_cluster.worker.node_id}
    for accel in ("A", "B"):
        mine = [r for r in rows if r["accelerator_type"] == accel]
        assert len(mine) == 3                                     # the full budget per type
        assert {r["node_id"] for r in mine} == {node_of[accel]}   # pinned to that type's node
        assert {r["hardware_key"][-2:] for r in mine} == {f"@{accel}"}
        assert sorted(r["reference"] or "" for r in mine) == ["", "baseline", "recommended"]
        table = leaderboard.read(tmp_path / "results", workload="fake-regression",
                                 hardware_key=mine[0]["hardware_key"])
        assert answer_of(table).row["accelerator_type"] == accel


# ---------------------------------------------------------------- two nodes, one machine

@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A Ray cluster of two 1-CPU nodes on this machine (head + worker), not connected; one
    for the module (its nodes' workers see the environment set here)."""
    import ray
    from ray.cluster_utils import Cluster
    stop_shared_ray()                        # the runs below connect to this cluster instead
    assert not ray.is_initialized(), "a fixture left Ray initialised: the run would not connect"
    tmp = tmp_path_factory.mktemp("two-nodes")
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("TUNER_CACHE", str(tmp / "cache"))
    monkeypatch.setenv("TUNER_TEST_STEP_SLEEP", "0.05")
    pids = tmp / "pids"
    pids.mkdir()
    monkeypatch.setenv("TUNER_TEST_PID_DIR", str(pids))
    # A trial's first step waits while this file exists (the nodes' workers read it: they
    # inherit the environment of the raylet, not of a run's driver).
    monkeypatch.setenv(fault_workloads.HOLD_FILE_ENV, str(tmp / "hold"))
    monkeypatch.setenv(fault_workloads.HOLD_FROM_ENV, "1")
    # Nodes on the loopback only (notes section 4). Ray rewrites a bootstrap address of
    # 127.0.0.1 to the machine's outward IP (services.resolve_ip_for_localhost), where these
    # nodes do not listen, and then retries for minutes; a driver that counts as a
    # single-machine one keeps the loopback, as it would in a private network namespace.
    import ray._private.ray_constants as ray_constants
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    # A node that stops answering is declared dead after 3 failed health checks 1 s apart
    # (Ray's defaults: 5, 3 s apart, each waiting up to 10 s).
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                "_system_config": {"health_check_period_ms": 1000,
                                                   "health_check_timeout_ms": 2000,
                                                   "health_check_failure_threshold": 3}})
    try:
        c.worker = c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        monkeypatch.undo()


@pytest.fixture
def cluster(two_nodes):
    """The module's two nodes, a worker node added again where a test removed it, and no trial
    announced yet in $TUNER_TEST_PID_DIR."""
    import ray
    assert not ray.is_initialized(), "a test left Ray initialised: the run would not connect"
    if two_nodes.worker not in two_nodes.worker_nodes:
        two_nodes.worker = two_nodes.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        two_nodes.wait_for_nodes()
    for p in Path(os.environ["TUNER_TEST_PID_DIR"]).iterdir():
        p.unlink()
    return two_nodes


def _hold_file() -> Path:
    """The module's hold file, created: a trial's first step waits while it exists."""
    hold = Path(os.environ[fault_workloads.HOLD_FILE_ENV])
    hold.touch()
    return hold


@contextlib.contextmanager
def _in_thread(run, options):
    """``run(options)`` in a thread; yields its outcome (``thread``, then ``summary`` or
    ``error``), and on leaving removes the hold file and waits for the run to end."""
    outcome: dict = {}

    def target():
        try:
            outcome["summary"] = run(options)
        except BaseException as exc:  # reported by the caller's assertions
            outcome["error"] = exc

    outcome["thread"] = thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield outcome
    finally:
        Path(os.environ[fault_workloads.HOLD_FILE_ENV]).unlink(missing_ok=True)
        thread.join(timeout=300)
    assert not thread.is_alive(), "the run did not end"


def test_trials_spread_over_two_nodes(tmp_path, cluster, space):
    # The first trials wait in their first step until both nodes have one (the hold file):
    # otherwise a reused trial process can take every trial before the other node's first
    # process has started (tens of seconds on a loaded machine).
    from tuner.driver import run
    from tuner.settings import RunOptions
    pid_dir = Path(os.environ["TUNER_TEST_PID_DIR"])
    options = RunOptions(workload=SLOW, trials=6, results=str(tmp_path / "results"),
                         address=cluster.address, space_file=space, device="cpu",
                         windows=2, window_s=1.0, warmup_steps=1, confirm=0, ceiling=False,
                         early_stop=False)
    _hold_file()
    with _in_thread(run, options) as outcome:     # leaving it removes the hold file
        both = {cluster.head_node.node_id, cluster.worker.node_id}
        deadline = time.monotonic() + 180
        while {node for _, node in announced(pid_dir)} != both:
            assert outcome["thread"].is_alive(), outcome
            assert time.monotonic() < deadline, "no trial ran on one of the nodes"
            time.sleep(0.05)
    assert "error" not in outcome, repr(outcome.get("error"))
    summary = outcome["summary"]
    rows = rows_of(tmp_path / "results")
    assert len(rows) == 6 and len(summary.rows) == 6
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    nodes = {r["node_id"] for r in rows}
    assert nodes == {cluster.head_node.node_id, cluster.worker.node_id}
    assert {r["node_ip"] for r in rows} == {"127.0.0.1"}
    assert all(r["trial_cpus"] == 1 for r in rows)          # capped at the nodes' CPUs


def test_worker_node_removed_mid_run(tmp_path, cluster, space):
    from tuner.driver import run
    from tuner.settings import RunOptions
    pid_dir = Path(os.environ["TUNER_TEST_PID_DIR"])
    trials = 6
    options = RunOptions(workload=SLOW, trials=trials, results=str(tmp_path / "results"),
                         address=cluster.address, space_file=space, device="cpu", windows=2,
                         window_s=0.5, warmup_steps=1, confirm=0, ceiling=False,
                             early_stop=False)
    worker_id = cluster.worker.node_id
    _hold_file()                # the worker's first trial waits in its first step: mid-trial
    with _in_thread(run, options) as outcome:
        deadline = time.monotonic() + 180
        while worker_id not in {node for _, node in announced(pid_dir)}:
            assert outcome["thread"].is_alive(), outcome
            assert time.monotonic() < deadline, "no trial ran on the worker node"
            time.sleep(0.05)
        recorded = {r["trial_id"] for r in rows_of(tmp_path / "results")}
        import datetime as dt
        removed_at = dt.datetime.now(dt.timezone.utc)
        cluster.remove_node(cluster.worker)
    assert "error" not in outcome, repr(outcome.get("error"))
    rows = rows_of(tmp_path / "results")
    errors = [r for r in rows if r["status"] != "ok"]
    assert len(errors) == 1, [(r["status"], r["node_id"], r["error"]) for r in rows]
    lost = errors[0]                                  # the trial that was on the removed node
    assert lost["status"] == "node_lost", lost["error"]
    assert lost["error"].startswith(f"lost with Ray node {worker_id} (127.0.0.1)")
    # A reference lost with the node is measured once more (on the node left), so the run
    # still has its speed-up: which trial the node held when it went depends on timing.
    retried = 1 if lost["reference"] is not None else 0
    assert len(rows) == trials + retried
    assert len({r["trial_id"] for r in rows}) == trials + retried
    if retried:
        (retry,) = [r for r in rows if r["reference"] == lost["reference"] and r is not lost]
        assert retry["status"] == "ok" and retry["node_id"] == cluster.head_node.node_id
    assert lost["trial_id"] not in recorded
    assert lost["node_id"] in (worker_id, None)       # None: it died before its first window
    assert lost["traceback"]                          # Ray's own text, kept
    for r in rows:
        if r["status"] == "ok" and r["started_at"] > removed_at:
            assert r["node_id"] == cluster.head_node.node_id


def test_a_two_rank_trial_runs_across_both_nodes(tmp_path, cluster, space):
    """Two ranks of one CPU each on two 1-CPU nodes: Ray Train places one on each, and the
    trial is one row with the global figure."""
    from tuner.driver import run
    from tuner.settings import RunOptions
    pid_dir = Path(os.environ["TUNER_TEST_PID_DIR"])
    run(RunOptions(workload=SLOW, trials=1, results=str(tmp_path / "results"),
                   address=cluster.address, space_file=space, device="cpu", windows=2,
                   window_s=0.5, warmup_steps=1, confirm=0, ceiling=False, world_size=2))
    (row,) = rows_of(tmp_path / "results")
    assert row["status"] == "ok", row["error"]
    assert row["world_size"] == 2 and row["backend"] == "gloo"
    assert row["samples_per_sec"] == pytest.approx(2 * row["rank_samples_per_sec"])
    # each rank's model announced itself with its node
    assert {node for _, node in announced(pid_dir)} == {cluster.head_node.node_id,
                                                         cluster.worker.node_id}



def test_a_lost_node_ends_a_two_rank_trial_on_both_ranks(tmp_path, cluster, space):
    """``run --world-size 2`` on the two nodes (one rank on each); the worker node goes away
    while both ranks wait in their first step, and the rank left then waits in DDP's first
    all-reduce for a rank that is gone: Ray Train ends it, the run records the trial once,
    ``node_lost`` naming the node, and keeps Ray's node-loss dumps off the console. A new node
    takes the lost one's place (as an autoscaler's would): the lost reference (the run's one
    search trial, the baseline) runs again on it, and the run exits 0."""
    pid_dir = Path(os.environ["TUNER_TEST_PID_DIR"])
    hold = Path(os.environ[fault_workloads.HOLD_FILE_ENV])
    results = tmp_path / "results"
    # The driver keeps the nodes' loopback address (as `two_nodes` does in this process).
    env = {**os.environ, "COLUMNS": "100", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    hold.touch()
    try:
        # one search trial: each 2-rank trial starts 8 actor processes (~30 s on 2 cores)
        proc = start(["run", "--workload", SLOW, "--space", space, "--trials", "1",
                      "--world-size", "2", "--address", cluster.address,
                      "--results", str(results), *SHORT], env)
        try:
            ranks = wait_for(lambda: len(announced(pid_dir)) >= 2 and announced(pid_dir), 240,
                             "both ranks' first step", proc)
            worker_id = cluster.worker.node_id
            assert {node for _, node in ranks} == {cluster.head_node.node_id, worker_id}
            started = time.monotonic()
            # The machine goes away: its raylet, the rank it ran, then the node's other
            # processes, each SIGKILLed (a raylet killed alone leaves its workers running).
            from ray._private.ray_constants import PROCESS_TYPE_RAYLET
            (raylet,) = cluster.worker.all_processes[PROCESS_TYPE_RAYLET]
            raylet.process.kill()
            (rank_pid,) = [pid for pid, node in ranks if node == worker_id]
            os.kill(rank_pid, signal.SIGKILL)
            cluster.remove_node(cluster.worker, allow_graceful=False)
        finally:
            hold.unlink()
        cluster.worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        out, err = finish(proc, timeout=300)
    finally:
        hold.unlink(missing_ok=True)
    ended_s = time.monotonic() - started
    assert proc.returncode == 0, err[-3000:]
    rows = rows_of(results)
    (lost,) = [r for r in rows if r["status"] != "ok"]
    # the trial once; the reference lost with the node is measured once more (on the new node)
    assert lost["reference"] == "baseline"
    assert len(rows) == 2 and len({r["trial_id"] for r in rows}) == 2
    (again,) = [r for r in rows if r is not lost]
    assert again["reference"] == "baseline" and again["world_size"] == 2
    assert lost["status"] == "node_lost", lost["error"]
    assert lost["world_size"] == 2
    assert f"lost with Ray node {worker_id} (127.0.0.1)" in lost["error"]
    assert lost["error"].startswith("rank "), lost["error"]
    assert lost["traceback"]                              # Ray's own text, kept
    assert ended_s < 400, f"the run took {ended_s:.0f} s to end after the node went away"
    assert cluster.worker.node_id in {node for _, node in announced(pid_dir)}  # the new node
    # Ray's messages about the node (a raylet's last 20 log lines, twice) go to a file; the
    # console has one line naming it.
    console = (out + err).splitlines()
    assert not [ln for ln in console if "(raylet)" in ln or "Last 20 lines" in ln], err[-3000:]
    (told,) = [ln for ln in console if "Ray reported" in ln]
    log = Path(told.split("Ray's messages: ")[1].rstrip(")"))
    assert "Raylet is terminated" in log.read_text()
    assert "Traceback" not in err
