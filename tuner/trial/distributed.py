"""Data-parallel trials: one trial is a DistributedDataParallel training run of
``world_size`` ranks, launched with Ray Train.

A Ray Tune function trainable (``make_data_parallel_trainable``) starts a ``TorchTrainer`` with
``ScalingConfig(num_workers=world_size)``: one process per rank, one GPU each on CUDA (nccl),
the node's CPUs shared among its ranks on CPU (gloo). Rank 0 runs the harness's measured loop and
the other ranks step with it (``tuner.trial.ranks``); at the end rank 0 gathers every rank's figures
and hands the trial's result (global samples/sec, ``tuner.trial.ranks.merge``) back through a Ray
queue, and the trainable reports it to Ray Tune. A rank that fails (an OOM, a crash) ends every
rank: Ray Train stops the worker group when one of its workers raises, so the trial ends ``oom`` /
``error`` within Ray Train's polling time, never waiting on a collective; a rank lost with its
node ends it ``node_lost``. Ray Train retries nothing: a retry would wait for
ranks that may no longer fit the cluster. A multi-rank trial reports once, at its end: early
stopping does not judge it.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any, Callable

from tuner.errors import TrialFailure
from tuner.ray_runtime import NODE_DEATH_WAIT_S, dead_nodes, node_lost_error
from tuner.settings import TrialSettings
from tuner.status import Status
from tuner.trial.failures import classify
from tuner.trial.harness import follow_trial, named_trainable, run_trial
from tuner.trial.ranks import STOP, Rank, RankFigures, merge
from tuner.workload import Workload

RESULT_WAIT_S = 30.0
"""How long the trainable waits for rank 0's result once Ray Train's run has ended."""

COLLATERAL_TEXTS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
                    "gloo/transport", "DistBackendError", "ProcessGroupNCCL", "NCCL communicator")
"""What a rank's collective says when another rank went away (gloo's reset socket, NCCL's
aborted communicator): the other rank's failure is the trial's cause."""


def _collateral(error_text: str) -> bool:
    return any(text in error_text for text in COLLATERAL_TEXTS)


def backend(device: str) -> str:
    """torch.distributed backend of a data-parallel trial on ``device``: nccl on CUDA, gloo
    on CPU."""
    return "nccl" if device == "cuda" else "gloo"


def make_data_parallel_trainable(workload: Workload) -> Callable[[dict], None]:
    """A Ray Tune function trainable whose trials are data-parallel training runs of
    ``config["tuner"]["world_size"]`` ranks (``TrialSettings.world_size``); the config as
    ``tuner.trial.harness.make_trainable``'s. Ask Ray Tune for almost nothing for it (the ranks
    hold the trial's CPUs and GPUs: ``tuner.ray_runtime.TrialResources``)."""
    return named_trainable(workload, run_data_parallel_trial, "ddp_trainable")


def run_data_parallel_trial(workload: Workload, config: dict) -> dict:
    """Run one data-parallel trial under Ray Train from a Ray Tune trial and report its
    result (``run_trial``'s columns, plus ``world_size``, ``backend``,
    ``rank_samples_per_sec``, ``slowest_rank``, ``slowest_rank_data_wait_s``). Returns it."""
    import ray
    from ray import tune
    from ray.util.queue import Queue
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    settings = TrialSettings(**config["tuner"])
    known_dead = frozenset(dead_nodes())  # no rank of this trial was lost with these
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    results = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})  # dies with it
    started = time.time()
    try:
        trainer = _trainer(workload, config, settings, results)
        try:
            trainer.fit()
            failure = None
        except Exception as exc:  # a rank failed: Ray Train stopped them all
            failure = exc
        result = _result(results, failure, settings, known_dead)
    finally:
        ray.kill(results.actor)
    result.setdefault("setup_s", time.time() - started)
    given = {"trial_cpus": float(_rank_cpus(settings) * settings.world_size),
             "trial_gpus": float(settings.world_size if settings.device == "cuda" else 0)}
    tune.report({**result, **given})
    return result


def _rank_cpus(settings: TrialSettings) -> int:
    """CPUs each rank asks Ray for (``TrialSettings.rank_cpus``, the plan's share of a node)."""
    return max(1, settings.rank_cpus or 1)


def _trainer(workload: Workload, config: dict, settings: TrialSettings, results: Any):
    from ray import tune
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    cuda = settings.device == "cuda"
    per_rank: dict[str, float] = {"CPU": _rank_cpus(settings)}
    if cuda:
        per_rank["GPU"] = 1
    storage = os.path.join(tune.get_context().get_trial_dir(), "train")
    return TorchTrainer(
        partial(_rank_main, workload, results),
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=settings.world_size, use_gpu=cuda,
                                     resources_per_worker=per_rank,
                                     accelerator_type=settings.accelerator_type),
        torch_config=TorchConfig(backend=backend(settings.device)),
        run_config=RunConfig(name="ranks", storage_path=storage,
                             failure_config=FailureConfig(
                                 max_failures=0, controller_failure_limit=0,
                                 max_preemption_failures=0)),
    )


def _result(results: Any, failure: Exception | None, settings: TrialSettings,
            known_dead: frozenset[str] = frozenset()) -> dict:
    """The trial's result: rank 0's when it sent one (an ok or timed-out trial, or rank 0's
    own failure), else the failed rank's exception classified (``tuner.trial.failures``). A rank
    lost with its node, or another rank's failure when rank 0's reads as collateral
    (``COLLATERAL_TEXTS``: gloo's connection reset by the rank that went away), outranks
    rank 0's failure; a node lost after rank 0's result (while Ray Train shut the ranks
    down) leaves the measured result."""
    from ray.util.queue import Empty
    try:
        result = results.get(timeout=RESULT_WAIT_S if failure is None else 1.0)
    except Empty:
        result = None
    if failure is None:
        if result is not None:
            return result
        failure = TrialFailure("the data-parallel run ended without a result from rank 0")
    failed = _failed(failure, settings, known_dead)
    if result is None:
        return failed
    if result["status"] in (Status.OK, Status.TIMEOUT):
        return result
    others = any(which != 0 for which in _rank_failures(failure))
    if failed["status"] == Status.NODE_LOST or (others and _collateral(result.get("error") or "")):
        return failed
    return result


def _failed(failure: Exception, settings: TrialSettings,
            known_dead: frozenset[str] = frozenset()) -> dict:
    """The columns of a trial a rank ended: a rank lost with its node (not one of
    ``known_dead``, dead before the trial) when there is one, else the first failed rank's
    exception, classified: a rank's own failure before one that reads as collateral."""
    import torch
    ranks = _rank_failures(failure)
    texts = {which: f"{type(cause).__name__}: {cause}" for which, cause in ranks.items()}
    # A rank's process that died may be the first sign of its node's loss, which Ray
    # declares only once the node has missed its heartbeats for a while: one wait for all.
    deadline = time.monotonic() + NODE_DEATH_WAIT_S
    lost = {which: error for which, text in texts.items()
            if (error := node_lost_error(text, known_dead=known_dead, death_may_be_loss=True,
                                         wait_s=max(0.0, deadline - time.monotonic())))}
    primary = {which for which, text in texts.items() if not _collateral(text)}
    which = min(lost or primary or ranks) if ranks else None
    cause = failure if which is None else ranks[which]
    status, memory, error = classify(cause, torch.device(settings.device))
    prefix = "" if which is None else f"rank {which}: "
    out = {"status": status, "error": prefix + (_no_room(failure, settings) or error),
           "samples_per_sec": 0.0, "world_size": settings.world_size,
           "backend": backend(settings.device)}
    gone = lost.get(which) if ranks else node_lost_error(f"{type(cause).__name__}: {cause}",
                                                         known_dead=known_dead)
    if gone is not None:  # a rank's node went away: Ray Train ended the others
        out.update(status=Status.NODE_LOST, error=prefix + gone, traceback=str(failure))
    if memory is not None:
        out["memory_exceeded"] = memory
    return out


def _no_room(failure: Exception, settings: TrialSettings) -> str | None:
    """One line for Ray Train's worker-group start that timed out (the cluster had no room
    for the ranks, e.g. after a node went away); None for any other failure."""
    import re
    cause = getattr(failure, "controller_failure", None)
    if type(cause).__name__ != "WorkerGroupStartupTimeoutError":
        return None
    waited = re.search(r"after ([0-9.]+) seconds", str(cause))
    gpus = " and 1 GPU" if settings.device == "cuda" else ""
    return (f"the cluster had no room for {settings.world_size} ranks of "
            f"{_rank_cpus(settings)} CPU{gpus} each"
            f"{f' in {float(waited.group(1)):.0f} s' if waited else ''} (Ray Train's "
            f"worker-group start): add nodes or use a smaller --world-size")


def _rank_failures(failure: Exception) -> dict[int, BaseException]:
    """Each failed rank's exception in Ray Train's ``WorkerGroupError``; empty for anything
    else."""
    return {rank: cause if isinstance(cause, BaseException) else RuntimeError(str(cause))
            for rank, cause in (getattr(failure, "worker_failures", None) or {}).items()}


def _rank_main(workload: Workload, results: Any, config: dict) -> None:
    """One rank, inside Ray Train: rank 0 runs the measured trial and sends its result; the
    others follow it. A failure raises, so that Ray Train ends every rank."""
    import ray
    import torch

    settings = TrialSettings(**config["tuner"])
    if settings.device == "cuda":
        import ray.train.torch
        torch.cuda.set_device(ray.train.torch.get_device())
    rank = Rank.joined()
    cpus = int(ray.get_runtime_context().get_assigned_resources().get("CPU") or 1)
    if rank.rank > 0:
        figures = follow_trial(workload, config, settings, rank, cpus)
        rank.gather(figures)
        return
    result = run_trial(workload, config, settings, cpus=cpus, rank=rank)
    if result["status"] not in (Status.OK, Status.TIMEOUT):
        results.put(dict(result, backend=backend(settings.device)))  # world_size: run_trial's
        raise TrialFailure(f"rank 0: {result.get('error')}")  # Ray Train ends the others
    rank.send(STOP)
    figures = rank.gather(RankFigures(0, rank.samples, rank.data_wait_s,
                                      result.get("peak_device_memory_mb"), result.get("node_id")))
    results.put(merge(result, figures, backend(settings.device)))
