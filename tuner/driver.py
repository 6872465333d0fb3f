"""The run's phases in the driver: Ray Tune ``Tuner`` driving the constrained Optuna searcher
(``tuner.searcher``) over a validated plan (``tuner.plan``).

* Phases: optional memory probe, the search, re-measurement of the best configurations, and
  the winner's compute-only ceiling; on a cluster with several accelerator types, all of it
  once per type.
* Resources per trial: CPUs = num_workers + 1 (capped at the node's CPUs), one whole GPU on
  CUDA; one trial per GPU (per node on CPU) at a time, so trials do not steal each other's cores.
* The driver writes a leaderboard row as each trial finishes.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import tuner.leaderboard as leaderboard
import tuner.noise as noise
from tuner.errors import TunerError
from tuner.harness import make_trainable, run_trial
from tuner.knobs import Knobs
from tuner.plan import Plan, Resources, make_plan
from tuner.probe import candidates, probe_batch_limit
from tuner.ray_runtime import (TrialResources, accelerator_types, cluster_resources, hardware_key,
                               ray_session)
from tuner.recorder import LeaderboardWriter, ignore_event
from tuner.searcher import FixedConfigs, make_searcher
from tuner.settings import RunOptions, TrialSettings, default_cache_dir
from tuner.status import Phase, Status, phase_of
from tuner.workload import Workload, resolve


@dataclass
class RunSummary:
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
    data)`` receives 'start', 'probe', 'phase', 'trial' and 'complete' events.

    Raises:
        TunerError (and subclasses): bad input, found before any trial; a memory limit that
        not even the smallest batch fits.
        RunInterrupted: Ctrl-C; the finished trials are in the leaderboard.
    """
    if isinstance(what, RunOptions):
        with planned(what) as plan:
            return run(plan, on_event=on_event)
    plan, on_event = what, on_event or ignore_event
    started = time.perf_counter()
    writer = None
    with ray_session(plan.options.address), stop_signals_interrupt():
        try:  # (ray_session: local Ray started here; a cluster's connection made already)
            plan = plan.with_hardware_key(hardware_key(plan))
            if plan.should_probe:
                plan = _probe(plan, on_event)
            writer = _writer(plan, on_event)
            types = accelerator_types() if plan.options.address is not None else []
            for accelerator in (types if len(types) > 1 else [None]):
                # Hardware is part of the answer: each type gets its own search state.
                plan = _pin(plan, accelerator)
                writer.plan = plan  # this type's rows are assembled with its plan
                on_event("start", {"plan": plan, "concurrency": _concurrency(plan)})
                if plan.remaining_trials != 0:
                    _fit_search(plan, writer)
                _fit_followups(plan, writer, on_event)
            if plan.prior_rows and len(writer.rows) == len(plan.prior_rows):
                on_event("complete", {"run_id": plan.run_id})
        except KeyboardInterrupt:
            recorded = len(writer.rows) if writer else len(plan.prior_rows)
            raise RunInterrupted(plan.run_id, recorded) from None
    return RunSummary(plan.run_id, plan.workload.name, plan.device, plan.scale, writer.rows,
                      time.perf_counter() - started, plan.options.results)


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
    resolve(options.workload)
    with ray_session(options.address) if options.address else contextlib.nullcontext():
        yield plan_run(options)


def plan_run(options: RunOptions) -> Plan:
    """``make_plan`` with the resources the trials will get: this machine's, or with
    ``--address`` the connected cluster's (call inside ``ray_session(options.address)``)."""
    resources = Resources(*cluster_resources(options.device)) if options.address else None
    return make_plan(options, resources)


def _pin(plan: Plan, accelerator: str | None) -> Plan:
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


class RunInterrupted(Exception):
    """The run was interrupted (Ctrl-C); its finished trials are in the leaderboard."""

    def __init__(self, run_id: str, recorded: int):
        super().__init__(f"run {run_id} interrupted with {recorded} trials recorded")
        self.run_id = run_id
        self.recorded = recorded


def _probe_trial(workload: Workload, knobs: Knobs, settings: TrialSettings) -> dict:
    return run_trial(workload, knobs, settings)


def _probe(plan: Plan, on_event: Callable[[str, dict], None]) -> Plan:
    """The plan with its batch size bounded by the memory probe (one short trial per batch
    size, each in a fresh worker process)."""
    import ray
    # One probe per worker process (max_calls=1): memory a process has held stays in its RSS.
    task = ray.remote(max_calls=1)(_probe_trial).options(
        num_cpus=1, num_gpus=1 if plan.device == "cuda" else 0)

    def run_remote(knobs: Knobs, settings: TrialSettings) -> dict:
        return ray.get(task.remote(plan.workload, knobs, settings))

    base = plan.references[0][1]
    # Up to the dataset's size, not the space file's high: that was written for another card.
    space = plan.device_space.with_batch_high(plan.samples)
    result = probe_batch_limit(space, base, plan.settings, run_remote)
    on_event("probe", {"result": result})
    if result.max_batch is None:
        raise TunerError(f"memory probe: not even batch_size {result.probes[0][0]} fits "
                         f"({result.probes[0][1]}); raise --max-memory/--max-host-memory or "
                         "lower the space's batch_size")
    return plan.with_batch_bound(result.max_batch)


def _writer(plan: Plan, on_event: Callable[[str, dict], None]) -> "LeaderboardWriter":
    import optuna
    import ray
    return LeaderboardWriter(plan, on_event, versions={
        "ray_version": ray.__version__, "optuna_version": optuna.__version__})


def _concurrency(plan: Plan) -> int:
    import ray
    if plan.accelerator_type is not None:
        return max(1, plan.type_slots)
    if plan.device == "cuda":
        return max(1, plan.gpus)
    if plan.options.address is not None:
        return max(1, len([n for n in ray.nodes() if n.get("Alive")]))
    return 1


def _reuse_actors(plan: Plan) -> bool:
    """Reuse trial processes (measured with Ray 2.60: 0.12 s per trial reused, 1.25 s with a
    new process each), except
    when host memory is a limit: a process keeps memory it once held, which would be charged
    to the next trial."""
    return plan.max_host_memory_mb is None


def _trainable(plan: Plan):
    from ray import tune
    # A fresh function each time: with_resources sets an attribute on the function object,
    # so wrapping one function twice would give every run the last resources.
    return tune.with_resources(
        make_trainable(plan.workload),
        resources=TrialResources(1 if plan.device == "cuda" else 0, plan.node_cpus,
                                 plan.accelerator_type))


def _run_config(plan: Plan, writer: "LeaderboardWriter", name: str):
    from ray import tune
    # Trials save no checkpoints, so Ray's run state can stay on the driver; for a remote
    # results URI it goes to the local cache (workers then need no object-store credentials).
    storage = (str(default_cache_dir() / "ray") if leaderboard.is_uri(plan.options.results)
               else str(Path(plan.options.results).resolve() / "ray"))
    return tune.RunConfig(name=name, storage_path=storage,
                          callbacks=[writer], verbose=0,
                          failure_config=tune.FailureConfig(max_failures=0))


def _experiment_name(plan: Plan, phase: str, label: str | None = None) -> str:
    """Ray Tune experiment directory name: one per phase (and label), accelerator type and
    resume."""
    parts = [plan.run_id, phase] + ([label] if label else [])
    if plan.accelerator_type:
        parts.append(plan.accelerator_type)
    if plan.prior_rows:
        parts.append(f"resume{len(plan.prior_rows)}")
    return "-".join(parts)


def _fit_search(plan: Plan, writer: "LeaderboardWriter") -> None:
    from ray import tune
    settings = asdict(plan.settings)
    tuner = tune.Tuner(
        _trainable(plan),
        param_space={"tuner": settings, "phase": Phase.SEARCH.value},
        tune_config=tune.TuneConfig(
            search_alg=make_searcher(plan.search_spec()),
            num_samples=plan.remaining_trials if plan.trials else -1,
            time_budget_s=plan.options.time_budget_s,
            max_concurrent_trials=_concurrency(plan),
            reuse_actors=_reuse_actors(plan),
        ),
        run_config=_run_config(plan, writer, _experiment_name(plan, Phase.SEARCH)),
    )
    tuner.fit()


def _fit_followups(plan: Plan, writer: "LeaderboardWriter", on_event: Callable[[str, dict], None]) -> None:
    """Re-measure the best configurations with twice the windows, side by side with the
    references that succeeded (the winner and its speed-ups are read from these), then measure
    the winner's compute-only ceiling. A resumed run measures only what its rows lack, so a run
    stopped in either phase finishes it."""
    rows = [r for r in writer.rows if r.get("accelerator_type") == plan.accelerator_type]
    top, configs = _remeasure_configs(plan, rows)
    done = {(Knobs.from_dict(r, strict=False), r["reference"]) for r in rows
            if phase_of(r) == Phase.REMEASURE}
    todo = [(knobs, ref) for knobs, ref in configs if (knobs, ref) not in done]
    if todo:
        on_event("phase", {"phase": Phase.REMEASURE, "count": len(todo)})
        _fit_fixed(plan, writer, todo, Phase.REMEASURE, windows=plan.settings.windows * 2)
    if plan.options.ceiling and top:
        _fit_ceiling(plan, writer, on_event)
        _fit_limits(plan, writer, on_event)


def _remeasure_configs(plan: Plan, rows: list[dict]) -> tuple[list[Knobs], list[tuple[Knobs, str | None]]]:
    """The ``--confirm`` best configurations of the search, and what the re-measurement phase
    measures: those and the references beside them (none with fewer than two to compare)."""
    ok = [r for r in rows if r["status"] == Status.OK and r[plan.metric] is not None
          and phase_of(r) == Phase.SEARCH]
    ok.sort(key=lambda r: r[plan.metric], reverse=plan.mode == "max")
    top: list[Knobs] = []
    for r in ok:
        knobs = Knobs.from_dict(r, strict=False)
        if knobs not in top:
            top.append(knobs)
    top = top[:plan.options.confirm]
    if len(top) < 2:
        return top, []
    refs: dict[Knobs, str] = {}
    for r in ok:
        if r["reference"] and r["reference"] not in refs.values():
            refs.setdefault(Knobs.from_dict(r, strict=False), r["reference"])
    return top, [(k, refs.get(k)) for k in top] + [(k, name) for k, name in refs.items()
                                                   if k not in top]


def _fit_ceiling(plan: Plan, writer: "LeaderboardWriter", on_event: Callable[[str, dict], None]) -> None:
    """The winner's compute-only ceiling; measured once more when it came out below the
    winner (a disturbed measurement, never an efficiency over 100 %), and not again when this
    run's rows already hold it."""
    for _ in range(2):
        rows = [r for r in writer.rows if r.get("accelerator_type") == plan.accelerator_type]
        winner = leaderboard.best_row(rows)
        if winner is None:
            return
        knobs = Knobs.from_dict(winner, strict=False)
        measured = [r for r in rows if phase_of(r) == Phase.CEILING
                    and Knobs.from_dict(r, strict=False) == knobs]
        if (measured and not winner["ceiling_disturbed"]) or len(measured) >= 2:
            return
        on_event("phase", {"phase": Phase.CEILING, "count": 1, "again": bool(measured)})
        _fit_fixed(plan, writer, [(knobs, None)], Phase.CEILING, compute_only=True,
                   ceiling="compute")


def _fit_limits(plan: Plan, writer: "LeaderboardWriter", on_event: Callable[[str, dict], None]) -> None:
    """What bounds the winner: its own DataLoader alone ('loader'), and the machine's two
    limits, whose minimum is the attainable rate: the loader-only rate with every CPU a trial
    may have as workers ('machine-loader') and the compute-only rate at the largest batch the
    search allows in the fastest precision ('machine-compute'). Each is measured once per
    run (a resumed run measures what its rows lack)."""
    rows = [r for r in writer.rows if r.get("accelerator_type") == plan.accelerator_type]
    winner = leaderboard.best_row(rows)
    if winner is None:
        return
    knobs = Knobs.from_dict(winner, strict=False)
    have = {r.get("ceiling") for r in rows if phase_of(r) == Phase.CEILING}
    workers = plan.node_cpus
    machine_loader = knobs.replace(num_workers=workers, persistent_workers=True,
                                   prefetch_factor=max(knobs.prefetch_factor or 2, 4))
    largest = max(candidates(plan.device_space))  # the batch sizes the search allows
    machine_compute = knobs.replace(batch_size=max(largest, knobs.batch_size),
                                    amp="bf16" if plan.device == "cuda" else knobs.amp)
    for label, config, mode in (("loader", knobs, "loader_only"),
                                ("machine-loader", machine_loader, "loader_only"),
                                ("machine-compute", machine_compute, "compute_only")):
        if label in have:
            continue
        on_event("phase", {"phase": Phase.CEILING, "count": 1, "ceiling": label})
        _fit_fixed(plan, writer, [(config.clamp(plan.device)[0], None)], Phase.CEILING,
                   label=label, ceiling=label, **{mode: True})


def _fit_fixed(plan: Plan, writer: "LeaderboardWriter", configs: list[tuple[Knobs, str | None]],
               phase: str, label: str | None = None, **settings_changes: Any) -> None:
    """Measure given configurations (knobs, reference name or None) as one Tune experiment
    (``label`` names it apart from the phase's others)."""
    from ray import tune
    if writer.expected is not None:
        writer.expected += len(configs)
    settings = {**asdict(plan.settings), **settings_changes}
    tuner = tune.Tuner(
        _trainable(plan),
        param_space={"tuner": settings, "phase": Phase(phase).value},
        tune_config=tune.TuneConfig(
            search_alg=FixedConfigs([{**k.to_dict(), "reference": ref} for k, ref in configs]),
            num_samples=len(configs), max_concurrent_trials=_concurrency(plan),
            reuse_actors=_reuse_actors(plan)),
        run_config=_run_config(plan, writer, _experiment_name(plan, phase, label)),
    )
    tuner.fit()


