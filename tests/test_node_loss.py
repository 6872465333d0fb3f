"""How a lost Ray node is read, without a cluster: which rank of a data-parallel trial was lost
(``tuner.trial.distributed``), how long a rank's death waits for Ray's verdict on its node, and
where Ray's messages about the node go (``tuner.ray_runtime``). The runs that lose a real local node
are in tests/test_faults_cluster.py."""

from __future__ import annotations

import warnings

import pytest

from tuner.errors import RayNodeWarning
from tuner.settings import TrialSettings
from tuner.status import Status

LOST = "a" * 56
ALIVE = "b" * 56
DEATH = (f"A worker health check failed.\nWorker info: Worker(node_id='{LOST}', pid=7)\n"
         "The actor died unexpectedly before finishing this task.")
RESET = "[gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:5: Connection reset by peer."


@pytest.fixture
def nodes(monkeypatch):
    """``ray.nodes()`` answered from a list the test changes: ``LOST`` alive until the test
    marks it dead (``states["dead_after"]`` calls), ``ALIVE`` always alive."""
    import ray
    states = {"calls": 0, "dead_after": 0}

    def fake_nodes():
        states["calls"] += 1
        lost_dead = states["calls"] > states["dead_after"]
        return [{"NodeID": LOST, "Alive": not lost_dead, "NodeManagerAddress": "10.0.0.2"},
                {"NodeID": ALIVE, "Alive": True, "NodeManagerAddress": "10.0.0.1"}]
    monkeypatch.setattr(ray, "nodes", fake_nodes)
    monkeypatch.setattr("time.sleep", lambda s: None)
    return states


class WorkerGroupError(Exception):
    """Ray Train's error of a worker group, as ``tuner.trial.distributed`` reads it."""

    def __init__(self, worker_failures: dict):
        super().__init__("Training failed due to worker errors")
        self.worker_failures = worker_failures


def settings() -> TrialSettings:
    return TrialSettings(device="cpu", scale="tiny", data_dir="-", world_size=2, rank_cpus=1)


def test_the_rank_lost_with_its_node_names_the_trial_not_the_rank_left_waiting(nodes):
    """Rank 0 fails with gloo's connection reset (collateral); rank 1's process died and Ray
    marks its node dead a few polls later: the trial is node_lost, rank 1, that node."""
    from tuner.trial.distributed import _failed
    nodes["dead_after"] = 3
    failure = WorkerGroupError({0: RuntimeError(RESET), 1: RuntimeError(DEATH)})
    out = _failed(failure, settings())
    assert out["status"] == Status.NODE_LOST
    assert (
        out["error"] == f"rank 1: lost with Ray node {LOST} (10.0.0.2), which went away mid-trial"
    )
    assert out["world_size"] == 2 and out["backend"] == "gloo"
    assert nodes["calls"] > 3                                   # it waited for Ray's verdict


def test_a_rank_that_crashed_on_a_live_node_is_an_error_after_the_wait(nodes, monkeypatch):
    from tuner import ray_runtime
    from tuner.trial.distributed import _failed
    nodes["dead_after"] = 10 ** 9                               # the node stays alive
    clock = iter(range(0, 10 ** 6, 5))
    monkeypatch.setattr(ray_runtime.time, "monotonic", lambda: float(next(clock)))
    out = _failed(WorkerGroupError({1: RuntimeError(DEATH)}), settings())
    assert out["status"] == Status.ERROR
    assert out["error"].startswith("rank 1: RuntimeError: A worker health check failed")
    waited = nodes["calls"]
    assert waited * 5 >= ray_runtime.NODE_DEATH_WAIT_S / 2      # bounded by the wait, polled


def test_rank_0s_measured_result_stands_when_a_node_goes_after_it(nodes):
    """Rank 0 sent its measured result, then a node went while Ray Train shut the ranks down:
    the result stands. Rank 0's own failure gives way to the lost node."""
    from tuner.trial.distributed import _result

    class Results:
        def __init__(self, item):
            self.item = item

        def get(self, timeout):
            return self.item

    failure = WorkerGroupError({1: RuntimeError(DEATH)})
    measured = {"status": Status.OK, "samples_per_sec": 100.0}
    assert _result(Results(measured), failure, settings()) is measured
    collateral = {"status": Status.ERROR, "error": f"RuntimeError: {RESET}"}
    assert _result(Results(collateral), failure, settings())["status"] == Status.NODE_LOST
    oom = {"status": Status.OOM, "error": "OutOfMemoryError: ..."}
    crash = WorkerGroupError({0: RuntimeError("rank 0: OutOfMemoryError")})
    assert _result(Results(oom), crash, settings()) is oom


def test_another_ranks_oom_outranks_rank_0s_collateral_reset(nodes):
    """Rank 1 ran out of memory; Ray Train, stopping the ranks, closed its socket, and rank 0's
    all-reduce failed with gloo's reset (sent as its result, or raised too): the trial is
    rank 1's OOM either way. Rank 0's own failure, with no other rank's, stands."""
    import torch

    from tuner.trial.distributed import _failed, _result

    class Results:
        def get(self, timeout):
            return {"status": Status.ERROR, "error": f"RuntimeError: {RESET}"}

    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    for failures in ({1: oom}, {0: RuntimeError(f"rank 0: RuntimeError: {RESET}"), 1: oom}):
        out = _result(Results(), WorkerGroupError(failures), settings())
        assert out["status"] == Status.OOM, out
        assert out["error"].startswith("rank 1: ") and "out of memory" in out["error"]
    alone = _failed(WorkerGroupError({0: RuntimeError("rank 0: ValueError: bad shape")}),
                    settings())
    assert alone["status"] == Status.ERROR and alone["error"].startswith("rank 0: ")
    assert _result(Results(), WorkerGroupError({0: RuntimeError(RESET)}),
                   settings())["error"] == f"RuntimeError: {RESET}"   # no other rank to blame


def test_a_node_dead_before_the_run_loses_none_of_its_trials(nodes):
    from tuner.ray_runtime import node_lost_error
    text = "ActorUnavailableError: RpcError: Socket closed rpc_code: 14"
    assert node_lost_error(text).startswith(f"lost with Ray node {LOST}")
    assert node_lost_error(text, known_dead=frozenset({LOST})) is None
    # a process's death alone is no node's loss unless the caller says it may be
    nodes["dead_after"], nodes["calls"] = 10 ** 9, 0
    assert node_lost_error(DEATH, wait_s=60) is None and nodes["calls"] == 1


def test_a_worker_group_that_found_no_room_is_one_line(nodes):
    from tuner.trial.distributed import _failed

    class WorkerGroupStartupTimeoutError(Exception):
        pass

    class ControllerError(Exception):
        def __init__(self, cause):
            super().__init__(f"Training failed due to controller error:\n{cause}")
            self.controller_failure = cause

    cause = WorkerGroupStartupTimeoutError(
        "The worker group startup timed out after 60.0 seconds waiting for 2 workers. "
        "Potential causes include: (1) ...")
    out = _failed(ControllerError(cause), settings())
    assert out["status"] == Status.ERROR
    assert out["error"] == ("the cluster had no room for 2 ranks of 1 CPU each in 60 s (Ray "
                            "Train's worker-group start): add nodes or use a smaller "
                            "--world-size")


def test_rays_node_messages_go_to_the_log_file_with_one_warning(tmp_path, monkeypatch):
    from ray._private import worker

    from tuner.ray_runtime import ray_messages_to
    printed = []
    monkeypatch.setattr(worker, "print_to_stdstream",
                        lambda data, ignore_prefix: printed.append(data["lines"]))
    log = tmp_path / "ray" / "run.log"
    dump = {"pid": "raylet", "is_err": False,
            "lines": ["Raylet is terminated. Termination is unexpected. Possible reasons...",
                      "Last 20 lines of the Raylet logs:", "    [2026-11-26] (raylet) ..."]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ray_messages_to(str(log)):
            worker.print_to_stdstream(dump, ignore_prefix=False)
            worker.print_to_stdstream({**dump, "lines": ["The node ... marked dead"]}, False)
            worker.print_to_stdstream({"pid": 42, "is_err": True, "lines": ["a worker"]}, False)
        worker.print_to_stdstream(dump, ignore_prefix=False)     # after the block: Ray's own
    (told,) = [str(w.message) for w in caught if w.category is RayNodeWarning]
    assert told == f"Ray reported: Raylet is terminated (Ray's messages: {log})"
    text = log.read_text()
    assert "Last 20 lines of the Raylet logs:" in text and "marked dead" in text
    assert printed == [["a worker"], dump["lines"]]
