"""The run on a Ray cluster of two local nodes: one node per accelerator type (a search and
a best for each), trials spread over both nodes, a worker node removed mid-run, and a two-rank
trial across both nodes that loses one. (A separate file from tests/test_faults.py so that the
suite's two workers run the two long halves side by side.)

Trial processes are found through tests/fault_workloads.py, which writes each trial's PID and
Ray node to a directory the test names; a process is signalled only after checking that it
belongs to the run this test started."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests import fault_workloads
from tests.conftest import no_workers_space, stop_shared_ray
from tests.fault_runs import REGRESSION, SHORT, SLOW, announced, finish, rows_of, start, wait_for
from tuner import leaderboard
from tuner.winner import best as answer_of

pytestmark = pytest.mark.slow


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


def _ready(two_nodes):
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


@pytest.fixture
def cluster(two_nodes):
    """``_ready``: the module's two nodes for a test's own run."""
    return _ready(two_nodes)


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
    # Four trials: the two held first ones (one per node) and one more each.
    options = RunOptions(workload=SLOW, trials=4, results=str(tmp_path / "results"),
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
    assert len(rows) == 4 and len(summary.rows) == 4
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    nodes = {r["node_id"] for r in rows}
    assert nodes == {cluster.head_node.node_id, cluster.worker.node_id}
    assert {r["node_ip"] for r in rows} == {"127.0.0.1"}
    assert all(r["trial_cpus"] == 1 for r in rows)          # capped at the nodes' CPUs


def test_worker_node_removed_mid_run(tmp_path, cluster, space):
    from tuner.driver import run
    from tuner.settings import RunOptions
    pid_dir = Path(os.environ["TUNER_TEST_PID_DIR"])
    trials = 4                  # the worker's held one, and three for the head during and after
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


@pytest.fixture(scope="module")
def lost_node_run(two_nodes, tmp_path_factory) -> dict:
    """``run --world-size 2`` on the two nodes (one rank on each); the worker node goes away
    while both ranks wait in their first step, and the rank left then waits in DDP's first
    all-reduce for a rank that is gone. A new node takes the lost one's place (as an
    autoscaler's would): the lost reference (the run's one search trial, the baseline) runs
    again on it and the head. One run for the two tests below (each 2-rank trial starts 8
    actor processes, ~30 s on 2 cores): what it printed, the rows it left, the ranks it
    announced (the first trial's, then all) and the nodes, and the seconds it took to end
    after the node went away."""
    cluster = _ready(two_nodes)
    tmp = tmp_path_factory.mktemp("lost-node")
    pid_dir = Path(os.environ["TUNER_TEST_PID_DIR"])
    hold = Path(os.environ[fault_workloads.HOLD_FILE_ENV])
    results = tmp / "results"
    # The driver keeps the nodes' loopback address (as `two_nodes` does in this process).
    env = {**os.environ, "COLUMNS": "100", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    hold.touch()
    try:
        # one search trial: each 2-rank trial starts 8 actor processes (~30 s on 2 cores)
        proc = start(["run", "--workload", SLOW, "--space", no_workers_space(tmp), "--trials",
                      "1", "--world-size", "2", "--address", cluster.address,
                      "--results", str(results), *SHORT], env)
        try:
            ranks = wait_for(lambda: len(announced(pid_dir)) >= 2 and announced(pid_dir), 240,
                             "both ranks' first step", proc)
            lost_id = cluster.worker.node_id
            started = time.monotonic()
            # The machine goes away: its raylet, the rank it ran, then the node's other
            # processes, each SIGKILLed (a raylet killed alone leaves its workers running).
            from ray._private.ray_constants import PROCESS_TYPE_RAYLET
            (raylet,) = cluster.worker.all_processes[PROCESS_TYPE_RAYLET]
            raylet.process.kill()
            (rank_pid,) = [pid for pid, node in ranks if node == lost_id]
            os.kill(rank_pid, signal.SIGKILL)
            cluster.remove_node(cluster.worker, allow_graceful=False)
        finally:
            hold.unlink()
        cluster.worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        out, err = finish(proc, timeout=300)
        ended_s = time.monotonic() - started
    finally:
        hold.unlink(missing_ok=True)
    return {"returncode": proc.returncode, "out": out, "err": err, "rows": rows_of(results),
            "ranks": ranks, "announced": announced(pid_dir), "ended_s": ended_s,
            "head_id": cluster.head_node.node_id, "lost_id": lost_id,
            "new_id": cluster.worker.node_id}


def test_a_two_rank_trial_runs_across_both_nodes(lost_node_run):
    """Two ranks of one CPU each on two 1-CPU nodes: Ray Train places one on each (the lost
    trial's ranks on the head and the node that went away, its measured retry's on the head and
    the node that took its place), and the measured trial is one row with the global figure."""
    run = lost_node_run
    assert run["returncode"] == 0, run["err"][-3000:]
    (row,) = [r for r in run["rows"] if r["status"] == "ok"]
    assert row["world_size"] == 2 and row["backend"] == "gloo"
    assert row["samples_per_sec"] == pytest.approx(2 * row["rank_samples_per_sec"])
    # each rank's model announced itself with its node
    assert {node for _, node in run["ranks"]} == {run["head_id"], run["lost_id"]}
    retry = run["announced"][len(run["ranks"]):]
    assert len(retry) == 2 and {node for _, node in retry} == {run["head_id"], run["new_id"]}


def test_a_lost_node_ends_a_two_rank_trial_on_both_ranks(lost_node_run):
    """The run of ``lost_node_run``: Ray Train ends the trial whose node went away, the run
    records the trial once, ``node_lost`` naming the node, and keeps Ray's node-loss dumps off
    the console; the lost reference runs again on the new node, and the run exits 0."""
    run = lost_node_run
    out, err, lost_id = run["out"], run["err"], run["lost_id"]
    assert run["returncode"] == 0, err[-3000:]
    rows = run["rows"]
    (lost,) = [r for r in rows if r["status"] != "ok"]
    # the trial once; the reference lost with the node is measured once more (on the new node)
    assert lost["reference"] == "baseline"
    assert len(rows) == 2 and len({r["trial_id"] for r in rows}) == 2
    (again,) = [r for r in rows if r is not lost]
    assert again["reference"] == "baseline" and again["world_size"] == 2
    assert lost["status"] == "node_lost", lost["error"]
    assert lost["world_size"] == 2
    assert f"lost with Ray node {lost_id} (127.0.0.1)" in lost["error"]
    assert lost["error"].startswith("rank "), lost["error"]
    assert lost["traceback"]                              # Ray's own text, kept
    ended_s = run["ended_s"]
    assert ended_s < 400, f"the run took {ended_s:.0f} s to end after the node went away"
    assert run["new_id"] in {node for _, node in run["announced"]}  # the new node
    # Ray's messages about the node (a raylet's last 20 log lines, twice) go to a file; the
    # console has one line naming it.
    console = (out + err).splitlines()
    assert not [ln for ln in console if "(raylet)" in ln or "Last 20 lines" in ln], err[-3000:]
    (told,) = [ln for ln in console if "Ray reported" in ln]
    log = Path(told.split("Ray's messages: ")[1].rstrip(")"))
    assert "Raylet is terminated" in log.read_text()
    assert "Traceback" not in err
