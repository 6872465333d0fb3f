"""The run's phases in the driver: Ray Tune ``Tuner`` driving the constrained Optuna searcher
(``tuner.searcher``) over a validated plan (``tuner.plan``).

* Phases: optional memory probe, the search, re-measurement of the best configurations, and
  the winner's ceilings; on a cluster with several accelerator types, all of it once per type.
  The search and the follow-ups are one Ray Tune experiment (``tuner.searcher.Staged``), so
  one trial process serves them all.
* Resources per trial: CPUs = num_workers + 1 (capped at the node's CPUs), one whole GPU on
  CUDA; one trial per GPU (per node on CPU) at a time, so trials do not steal each other's cores.
* The driver writes a leaderboard row as each trial finishes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import tuner.budget as budget
import tuner.leaderboard as leaderboard
import tuner.windows as windows
from tuner._deprecated import moved
from tuner.errors import RecordFailed, RunInterrupted, TunerError  # noqa: F401  (re-exported)
from tuner.followups import Batch, followups, has_machine_compute
from tuner.knobs import COMPUTE_SWITCHES, Knobs
from tuner.option_checks import make_plan, resolve_workload
from tuner.plan import Plan, Resources
from tuner.probe import (
    InputRate,
    ProbeResult,
    candidates,
    compute_curve,
    probe_batch_limit,
    probe_in_process,
)
from tuner.pruning import EarlyStopping
from tuner.ray_runtime import (
    TrialResources,
    accelerator_types,
    cluster_resources,
    dead_nodes,
    hardware_key,
    ray_messages_to,
    ray_session,
)
from tuner.recorder import LeaderboardWriter, ignore_event
from tuner.runlock import registered
from tuner.search_policy import with_compute_curve
from tuner.searcher import make_searcher
from tuner.settings import RunOptions, TrialSettings, default_cache_dir
from tuner.staging import Staged
from tuner.status import Phase, Status
from tuner.trial.distributed import make_data_parallel_trainable
from tuner.trial.harness import make_trainable, run_trial
from tuner.workload import Workload


@dataclass(frozen=True)
class RunSummary:
    """A finished run: its id, workload name, device, scale, this run's leaderboard rows (every
    phase, every status, in the order they finished), wall time (s) and results location."""
    run_id: str
    workload: str
    device: str
    scale: str
    rows: list[dict]
    wall_s: float
    results_dir: str


def run(what: RunOptions | Plan, *,
        on_event: Callable[[str, dict], None] | None = None) -> RunSummary:
    """Tune one workload: memory probe, search, re-measurement of the best, compute-only
    ceiling. ``what`` is the run's options (planned here; with ``--address`` after connecting,
    since the cluster decides the device) or a plan made by ``plan_run``. ``on_event(kind,
    data)`` receives 'start', 'probe', 'machine' (what the search starts from: ``text``
    (``machine_text``), ``curve`` (``tuner.probe.ComputeCurve`` or None) and ``anchors``),
    'phase', 'trial' and 'complete' events.

    Raises:
        TunerError (and subclasses): bad input, found before any trial; a memory limit that
        not even the smallest batch fits.
        RunInterrupted: Ctrl-C; the finished trials are in the leaderboard.
        RecordFailed (a TunerError): a leaderboard row or Ray's state could not be written
        (a full disk); the run stops at once, its rows written so far kept.
    """
    if isinstance(what, RunOptions):
        with planned(what) as plan:
            return run(plan, on_event=on_event)
    plan, on_event = what, on_event or ignore_event
    started = time.perf_counter()
    plan = plan.with_deadline(None if plan.time_budget_s is None
                              else plan.budget_start() + plan.time_budget_s)
    idle = nothing_left(plan)   # then neither Ray nor the memory probe starts
    writer = None
    with registered(plan.run_id, plan.options.results, local=plan.options.address is None), \
            (contextlib.nullcontext() if idle else _ray_for(plan)), stop_signals_interrupt():
        if idle:
            on_event("start", {"plan": plan, "concurrency": _concurrency(plan)})
            on_event("complete", {"run_id": plan.run_id})
            return RunSummary(plan.run_id, plan.workload.name, plan.device, plan.scale,
                              list(plan.prior_rows), time.perf_counter() - started,
                              plan.options.results)
        try:  # (_ray_for: local Ray started here; a cluster's connection made already)
            plan = plan.with_hardware_key(hardware_key(plan))
            probe = None
            if plan.should_probe:
                plan, probe = _probe(plan, on_event)
            writer = _writer(plan, on_event)
            plan = _fit_each_type(plan, writer, probe, on_event)
            if writer.failed is not None:  # a row of the last experiment's end
                raise writer.failed
            if plan.prior_rows and len(writer.rows) == len(plan.prior_rows):
                on_event("complete", {"run_id": plan.run_id})
        except KeyboardInterrupt:
            recorded = len(writer.rows) if writer else len(plan.prior_rows)
            raise RunInterrupted(plan.run_id, recorded) from None
        except OSError as exc:  # Ray Tune's own state under <results>/ray, on a full disk
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise
            recorded = len(writer.rows) if writer else len(plan.prior_rows)
            raise RecordFailed(exc.filename or "Ray Tune's experiment state", exc, plan,
                               recorded) from None
    return RunSummary(plan.run_id, plan.workload.name, plan.device, plan.scale, writer.rows,
                      time.perf_counter() - started, plan.options.results)


def _fit_each_type(plan: Plan, writer: "LeaderboardWriter", probe: ProbeResult | None,
                   on_event: Callable[[str, dict], None]) -> Plan:
    """``_fit`` for each accelerator type of the cluster (one search state each: hardware is
    part of the answer), or once; the probe's machine-limit row recorded with the first
    (a fresh run's). Returns the plan of the last type."""
    types = accelerator_types() if plan.options.address is not None else []
    for accelerator in (types if len(types) > 1 else [None]):
        plan = _pinned_to(plan, accelerator)
        writer.plan = plan  # this type's rows are assembled with its plan
        on_event("start", {"plan": plan, "concurrency": _concurrency(plan)})
        on_event("machine", {"text": machine_text(plan), "curve": plan.compute_curve,
                             "anchors": plan.anchors})
        if probe is not None and not plan.prior_rows:
            record_machine_limit(plan, writer, probe)
            probe = None  # one row: the probe measured one accelerator type
        _fit(plan, writer, on_event)
    return plan


@contextlib.contextmanager
def _ray_for(plan: Plan) -> Iterator[None]:
    """Ray for the run (``ray_session``: started here, or the cluster's connection), its
    messages to the run's log under the results (``ray_messages_to``)."""
    with ray_session(plan.options.address), \
            ray_messages_to(os.path.join(_ray_storage(plan), f"{plan.run_id}.log")):
        yield


def nothing_left(plan: Plan) -> bool:
    """Whether a resumed run on this machine (no ``--address``) has nothing left to run: no
    search trial, or no time for one, and no follow-up batch (``tuner.followups``, planned
    from its rows as the run would). It then says so without Ray's start (5-10 s), the
    memory probe, or the line of what the search starts from. Not where the probe runs and
    no machine-compute ceiling is recorded with ``--ceiling``: the probe's bound sets that
    ceiling's batch (``followups.machine_compute_knobs``). On a cluster Ray says which
    accelerator types there are: the run connects first."""
    if plan.options.address is not None or not plan.prior_rows:
        return False
    if (plan.should_probe and plan.options.ceiling
            and not has_machine_compute(plan.prior_rows)):
        return False
    if plan.remaining_trials != 0 and budget.has_time(plan.time_left_s()):
        return False
    return next(followups(plan, list(plan.prior_rows), ignore_event), None) is None


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (what a scheduler, ``timeout``, a container stop or a closed terminal
    send) stop the run as Ctrl-C does: KeyboardInterrupt, finished trials kept, one line with
    the --resume command. Installed after Ray starts, whose core worker otherwise answers
    SIGTERM with dozens of lines of native stack traces."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            saved[sig] = signal.signal(sig, interrupt)
        except ValueError:  # not the main thread (a run driven from a notebook's worker)
            pass
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def planned(options: RunOptions) -> Iterator[Plan]:
    """The run's plan, made in the order it must be: the workload resolved first (a bad one
    fails before connecting; a workload given as a file has its directory on sys.path before
    Ray builds the workers' PYTHONPATH), then, with --address, inside a connection to the
    cluster (which decides the device, GPUs and CPUs per node) held for the block."""
    resolve_workload(options)
    with ray_session(options.address) if options.address else contextlib.nullcontext():
        yield plan_run(options)


def plan_run(options: RunOptions) -> Plan:
    """``make_plan`` with the resources the trials will get: this machine's, or with
    ``--address`` the connected cluster's (call inside ``ray_session(options.address)``)."""
    resources = Resources(*cluster_resources(options.device)) if options.address else None
    return make_plan(options, resources)


def _pinned_to(plan: Plan, accelerator: str | None) -> Plan:
    """The plan of one accelerator type's search (None: the whole cluster)."""
    if accelerator == plan.accelerator_type:
        return plan
    import ray
    key = f"accelerator_type:{accelerator}"
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive") and key in n["Resources"]]
    slots = (int(sum(n.get("GPU", 0) for n in nodes)) if plan.device == "cuda" else len(nodes))
    pinned = plan.for_accelerator(accelerator, type_slots=slots,
                                  node_cpus=int(min(n.get("CPU", 1) for n in nodes)) or 1)
    return pinned.with_hardware_key(hardware_key(pinned))


def _probe_trial(workload: Workload, knobs: Knobs, settings: TrialSettings) -> dict:
    return run_trial(workload, knobs, settings)


def _probe(plan: Plan, on_event: Callable[[str, dict], None]) -> tuple[Plan, ProbeResult]:
    """The plan with its batch size bounded by the memory probe and its search started from
    the machine's compute curve (``with_compute_curve``), and the probe's result: every
    short trial in one worker process (``probe_in_process``), or with a host memory limit each
    in a fresh one (a process keeps the heap it once held)."""
    import ray
    clock = time.monotonic()
    base = plan.references[0][1]
    # Up to the dataset's size, not the space file's high: that was written for another card.
    space = plan.device_space.with_batch_high(plan.samples)
    resources = dict(num_cpus=1, num_gpus=1 if plan.device == "cuda" else 0)
    if plan.max_host_memory_mb is None:
        task = ray.remote(max_calls=1)(probe_in_process).options(**resources)
        result = ray.get(task.remote(plan.workload, space, base, plan.settings))
    else:  # max_calls=1: one process per probe
        trial = ray.remote(max_calls=1)(_probe_trial).options(**resources)
        result = probe_batch_limit(space, base, plan.settings, lambda knobs, settings: ray.get(
            trial.remote(plan.workload, knobs, settings)))
    result = replace(result, duration_s=time.monotonic() - clock)
    on_event("probe", {"result": result})
    if result.timed_out:  # the run's deadline has passed: nothing more can run
        fit = ("before a batch size was measured" if result.max_batch is None else
               f"(batch_size {result.max_batch} was the largest that fit by then)")
        raise TunerError(f"memory probe: the time budget ({plan.time_budget_s:.0f} s) ran out "
                         f"during the probe {fit}, after {result.duration_s:.0f} s of probing; "
                         "give a larger --time-budget")
    if result.max_batch is None:
        raise TunerError(f"memory probe: not even batch_size {result.probes[0][0]} fits "
                         f"({result.probes[0][1]}); raise --max-memory/--max-host-memory or "
                         "lower the space's batch_size")
    plan = plan.with_batch_bound(result.max_batch)
    curve = compute_curve(result, candidates(plan.device_space))
    return with_compute_curve(plan, curve, result.knobs, result.input_rates), result


def machine_text(plan: Plan) -> str:
    """One line on what the search starts from: the machine's compute curve (its fit, knee
    and limit) and the structured points, or why there is none."""
    curve = plan.compute_curve
    if curve is None:
        why = ("the memory probe is off: --probe off" if plan.options.probe == "off" else
               "no memory probe: on the CPU device it runs with --max-host-memory or --probe on"
               if not plan.should_probe else "the memory probe timed fewer than two batch sizes")
        return (f"machine limit: not measured before the search ({why}); the search starts "
                "from the references alone")
    points = " · ".join(f"{name}: {_knobs_text(k)}" for name, k in plan.anchors)
    dom = plan.device_space.domains.get("batch_size")
    searched = dom.describe() if dom is not None else str(curve.max_batch)
    return (f"machine limit: {curve.limit_samples_per_sec:,.1f} samples/sec compute-only at "
            f"batch_size {curve.max_batch} · step {curve.alpha_ms:.1f} ms + "
            f"{curve.beta_ms * 1000:.1f} us/sample · knee batch_size {curve.knee_batch} "
            f"({curve.samples_per_sec(curve.knee_batch):,.1f} samples/sec fitted)"
            + input_text(plan.input_rates) + f" · searched batch_size {searched}"
            + (f" · starting from {points}" if points else ""))


def input_text(rates: Sequence[InputRate]) -> str:
    """' · input pipeline alone: data=device 9,876.5 · data=cache nw=0 321.0, nw=2 612.3
    samples/sec' for the memory probe's input rates (``tuner.probe.measure_input``), a failed
    one as 'failed'; '' when none was measured."""
    if not rates:
        return ""
    parts: dict[str, list[str]] = {}
    for r in rates:
        rate = "failed" if r.samples_per_sec is None else f"{r.samples_per_sec:,.1f}"
        workers = "" if r.data_path == "device" else f"nw={r.num_workers} "
        parts.setdefault(r.data_path, []).append(f"{workers}{rate}")
    return (" · input pipeline alone: " + " · ".join(
        f"data={path} {', '.join(texts)}" for path, texts in parts.items()) + " samples/sec")


def _knobs_text(knobs: Knobs) -> str:
    switches = "".join(f" {name}" for name in COMPUTE_SWITCHES if getattr(knobs, name))
    return (f"bs={knobs.batch_size} amp={knobs.amp} data={knobs.data_path} "
            f"nw={knobs.num_workers}{switches}")


def record_machine_limit(plan: Plan, writer: "LeaderboardWriter", probe: ProbeResult) -> None:
    """Write the probe's measurement at its largest batch as the run's 'machine-compute'
    ceiling row (phase ceiling, compute-only, batches on the device, the probe's precision),
    so the follow-ups need not measure it again (``tuner.followups.planned_ceilings``).
    Nothing when the probe has no such measurement."""
    result = probe.limit_result
    if result is None or not result.get("samples_per_sec") or probe.knobs is None:
        return
    knobs = probe.knobs.replace(batch_size=probe.max_batch)
    config = {**knobs.to_dict(), "reference": None, "phase": Phase.CEILING.value}
    row = {**result, "ceiling": "machine-compute", "status": Status.OK.value,
           "trial_cpus": result.get("trial_cpus") or 1.0,
           "trial_gpus": result.get("trial_gpus", 1.0 if plan.device == "cuda" else 0.0)}
    writer.record_result(f"{plan.run_id}-probe-{probe.max_batch}", config, row)


def _writer(plan: Plan, on_event: Callable[[str, dict], None]) -> "LeaderboardWriter":
    import optuna
    import ray
    # a node dead before the run lost none of its trials
    return LeaderboardWriter(plan, on_event, versions={
        "ray_version": ray.__version__, "optuna_version": optuna.__version__},
        known_dead=frozenset(dead_nodes()))


def _concurrency(plan: Plan) -> int:
    """Trials at once (``Plan.trials_at_once``), a cluster's alive nodes counted."""
    if plan.options.address is None:
        return plan.trials_at_once()
    import ray
    return plan.trials_at_once(len([n for n in ray.nodes() if n.get("Alive")]))


def _reuse_actors(plan: Plan) -> bool:
    """Reuse trial processes (a new process costs about 1 s per trial), except when host memory
    is a limit: a process keeps memory it once held, which would be charged to the next
    trial."""
    return plan.max_host_memory_mb is None


def _trainable(plan: Plan):
    from ray import tune
    if plan.settings.world_size > 1:
        # The ranks hold the trial's CPUs and GPUs (ScalingConfig); Ray Tune's own trial
        # process only waits for them, and asks for a token (a request may not be empty), on
        # the head node: a worker node lost takes a rank with it, never the trial's record.
        return tune.with_resources(make_data_parallel_trainable(plan.workload),
                                   resources={"cpu": 0, "memory": 1,
                                              "node:__internal_head__": 0.001})
    # A fresh function each time: with_resources sets an attribute on the function object,
    # so wrapping one function twice would give every run the last resources.
    return tune.with_resources(
        make_trainable(plan.workload),
        resources=TrialResources(1 if plan.device == "cuda" else 0, plan.node_cpus,
                                 plan.accelerator_type,
                                 # one trial at a time on this machine: one shape, one process
                                 whole_node=plan.options.address is None
                                 and _concurrency(plan) == 1))


def _run_config(plan: Plan, writer: "LeaderboardWriter", name: str):
    from ray import tune
    # Trials save no checkpoints, so Ray's run state can stay on the driver.
    return tune.RunConfig(name=name, storage_path=_ray_storage(plan),
                          callbacks=[writer], verbose=0,
                          failure_config=tune.FailureConfig(max_failures=0))


def _ray_storage(plan: Plan) -> str:
    """Where Ray's run state and messages go: ``<results>/ray``; for a remote results URI the
    local cache (workers then need no object-store credentials)."""
    return (str(default_cache_dir() / "ray") if leaderboard.is_uri(plan.options.results)
            else str(Path(plan.options.results).resolve() / "ray"))


def _experiment_name(plan: Plan) -> str:
    """Ray Tune experiment directory name: one per run, accelerator type and resume."""
    parts = [plan.run_id]
    if plan.accelerator_type:
        parts.append(plan.accelerator_type)
    if plan.prior_rows:
        parts.append(f"resume{len(plan.prior_rows)}")
    return "-".join(parts)


def _scheduler(plan: Plan) -> EarlyStopping | None:
    """The search's trial scheduler: early stopping (``tuner.pruning``), unless
    ``--no-early-stop``; None is Ray Tune's FIFO default."""
    if not plan.options.early_stop:
        return None
    return EarlyStopping(plan.metric, plan.mode, plan.settings.windows)


def _fit(plan: Plan, writer: "LeaderboardWriter", on_event: Callable[[str, dict], None]) -> None:
    """The search and its follow-ups (``tuner.followups``) as ONE Tune experiment (``Staged``):
    one trial process throughout, where an experiment per phase would start a new one each
    time. The search runs while it has trials and time left (the references to the run's
    deadline; its own trials end where the follow-ups' share of the time left begins once a
    trial has measured, ``tuner.searcher.ConstrainedSearch.deadline_unix_s``); early stopping
    judges search trials only. Raises what the follow-ups' planning raised."""
    from ray import tune
    searching = plan.remaining_trials != 0 and budget.has_time(plan.time_left_s())
    spec = plan.search_spec() if searching else None
    settings = asdict(plan.settings)  # the run's deadline; the searcher sets its trials' own
    # writer.rows: the list the writer appends each finished trial's row to, so each batch is
    # planned from the rows recorded before it.
    batches = followups(plan, writer.rows, on_event)

    def next_batch() -> list[dict] | None:
        batch = next(batches, None)
        return None if batch is None else _trial_configs(plan, writer, batch)

    staged = Staged(next_batch, writer.recorded, search=make_searcher(spec) if spec else None,
                    search_trials=plan.remaining_trials if plan.trials else None,
                    settings=lambda: _trial_settings(plan, writer.rows),
                    deadline_unix_s=plan.settings.deadline_unix_s)
    tuner = tune.Tuner(
        _trainable(plan),
        param_space={"tuner": settings, "phase": Phase.SEARCH.value},
        tune_config=tune.TuneConfig(
            search_alg=staged,
            scheduler=_scheduler(plan) if searching else None,
            num_samples=-1,  # until the searcher is finished (Staged counts the search's)
            time_budget_s=budget.tune_time_budget_s(plan.time_left_s()),
            max_concurrent_trials=_concurrency(plan),
            reuse_actors=_reuse_actors(plan),
        ),
        run_config=_run_config(plan, writer, _experiment_name(plan)),
    )
    tuner.fit()
    if staged.error is not None:
        raise staged.error


def _trial_settings(plan: Plan, rows: list[dict]) -> dict:
    """Trial settings changes for the run's next trial, from its rows so far (this run's, on
    this accelerator type): the steady-state tolerance its machine's window noise calls for
    (``tuner.windows.steady_tolerance``; the plan's own until the references have measured)."""
    this_run = [r for r in rows if r.get("run_id") == plan.run_id
                and r.get("accelerator_type") == plan.accelerator_type]
    return {"steady_tolerance": windows.steady_tolerance(
        this_run, plan.settings.steady_tolerance, plan.settings.window_s)}


def _trial_configs(plan: Plan, writer: "LeaderboardWriter", batch: Batch) -> list[dict]:
    """The Tune configurations of a batch's trials (Ray Tune merges a configuration's
    ``"tuner"`` entries into the experiment's settings, which are the search's): the run's
    deadline, not the search's; only search-phase trials time the per-phase breakdown
    (``breakdown_*`` columns; null in re-measurement and ceiling rows: they repeat a
    configuration the search measured, or one a compute knob away from it)."""
    if writer.expected is not None:
        writer.expected += len(batch.configs)
    follow_up = {} if batch.phase == Phase.SEARCH else {"breakdown_steps": 0}
    settings = {"deadline_unix_s": plan.settings.deadline_unix_s, **follow_up, **batch.settings}
    changes = batch.per_trial or [{} for _ in batch.configs]
    return [{**knobs.to_dict(), "reference": ref, "phase": batch.phase.value,
             "tuner": {**settings, **change}}
            for (knobs, ref), change in zip(batch.configs, changes)]


__getattr__ = moved(__name__, {
    "MIN_PHASE_S": "tuner.budget", "TUNE_STOP_GRACE_S": "tuner.budget",
    "TRIAL_OVERHEAD_S": "tuner.budget", "tune_time_budget_s": "tuner.budget",
    "CAN_WIN_FRACTION": "tuner.followups",
    "REMEASURE_ROUNDS": "tuner.plan"})
