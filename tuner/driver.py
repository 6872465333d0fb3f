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
import math
import signal
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import tuner.leaderboard as leaderboard
import tuner.noise as noise
from tuner.errors import TunerError
from tuner.harness import make_trainable, run_trial
from tuner.knobs import Knobs
from tuner.plan import REMEASURE_ROUNDS, Plan, Resources, make_plan, resolve_workload
from tuner.probe import candidates, probe_batch_limit, probe_in_process
from tuner.ray_runtime import (TrialResources, accelerator_types, cluster_resources, hardware_key,
                               ray_session)
from tuner.pruning import EarlyStopping
from tuner.recorder import LeaderboardWriter, RecordFailed, ignore_event
from tuner.runlock import registered
from tuner.searcher import Staged, make_searcher
from tuner.settings import RunOptions, TrialSettings, default_cache_dir
from tuner.status import Phase, Status, phase_of
from tuner.winner import best as winning
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
    data)`` receives 'start', 'probe', 'phase', 'trial' and 'complete' events.

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
    writer = None
    with registered(plan.run_id, plan.options.results, local=plan.options.address is None), \
            ray_session(plan.options.address), stop_signals_interrupt():
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
                _fit(plan, writer, on_event)
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
    """The plan with its batch size bounded by the memory probe: every short trial in one
    worker process (``probe_in_process``), or with a host memory limit each in a fresh one
    (a process keeps the heap it once held)."""
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
                                 plan.accelerator_type,
                                 # one trial at a time on this machine: one shape, one process
                                 whole_node=plan.options.address is None
                                 and _concurrency(plan) == 1))


def _run_config(plan: Plan, writer: "LeaderboardWriter", name: str):
    from ray import tune
    # Trials save no checkpoints, so Ray's run state can stay on the driver; for a remote
    # results URI it goes to the local cache (workers then need no object-store credentials).
    storage = (str(default_cache_dir() / "ray") if leaderboard.is_uri(plan.options.results)
               else str(Path(plan.options.results).resolve() / "ray"))
    return tune.RunConfig(name=name, storage_path=storage,
                          callbacks=[writer], verbose=0,
                          failure_config=tune.FailureConfig(max_failures=0))


def _experiment_name(plan: Plan) -> str:
    """Ray Tune experiment directory name: one per run, accelerator type and resume."""
    parts = [plan.run_id]
    if plan.accelerator_type:
        parts.append(plan.accelerator_type)
    if plan.prior_rows:
        parts.append(f"resume{len(plan.prior_rows)}")
    return "-".join(parts)


MIN_PHASE_S = 3.0
"""The search, or the follow-ups, are not started with less time left than this: a trial's
set-up and first step take 1.5-3 s (more on a loaded machine; starting Ray Tune and the trial
process more again), so it would start trials only to stop them."""


def _has_time(seconds: float | None) -> bool:
    """Whether a phase with ``seconds`` left (None: no budget) is worth starting."""
    return seconds is None or seconds >= MIN_PHASE_S


TUNE_STOP_GRACE_S = 4.0
"""Ray Tune stops an experiment this long after its trials' deadline (``time_budget_s``). A
trial stops itself at the first step boundary past its deadline; the recorder kills one still
inside a longer step (a compile) 2 s past it (``recorder.OVERDUE_S``) and records it from its
last report; Tune then stops what is left."""


def tune_time_budget_s(seconds: float | None) -> float | None:
    """``TuneConfig.time_budget_s`` for an experiment whose trials must end ``seconds`` from
    now (their ``deadline_unix_s``): that, plus ``TUNE_STOP_GRACE_S``; None: no budget.
    The run's experiment passes ``plan.time_left_s()``."""
    return None if seconds is None else seconds + TUNE_STOP_GRACE_S


def _scheduler(plan: Plan) -> EarlyStopping | None:
    """The search's trial scheduler: early stopping (``tuner.pruning``), unless
    ``--no-early-stop``; None is Ray Tune's FIFO default."""
    if not plan.options.early_stop:
        return None
    return EarlyStopping(plan.metric, plan.mode, plan.settings.windows)


@dataclass(frozen=True)
class Batch:
    """Configurations a follow-up phase measures next, one trial each, in order: (knobs,
    reference name or None) with ``settings`` changed for all of them and ``per_trial``
    changes for each."""
    configs: list[tuple[Knobs, str | None]]
    phase: Phase
    settings: dict = field(default_factory=dict)
    per_trial: list[dict] | None = None


def _fit(plan: Plan, writer: "LeaderboardWriter", on_event: Callable[[str, dict], None]) -> None:
    """The search and its follow-ups (``_followups``) as ONE Tune experiment (``Staged``):
    one trial process throughout, where an experiment per phase started a new one each time
    (6-7 s on 2 CPU cores). The search runs while it has trials and time left (its trials
    end where the follow-ups' share of the budget begins, ``Plan.search_time_s``); early
    stopping judges search trials only. Raises what the follow-ups' planning raised."""
    from ray import tune
    searching = plan.remaining_trials != 0 and _has_time(plan.search_time_s())
    spec = plan.search_spec() if searching else None
    settings = asdict(plan.settings)
    if spec is not None:
        settings["deadline_unix_s"] = spec.deadline_unix_s
    batches = _followups(plan, writer, on_event)

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
            time_budget_s=tune_time_budget_s(plan.time_left_s()),
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
    (``tuner.noise.steady_tolerance``; the plan's own until the references have measured)."""
    mine = [r for r in rows if r.get("run_id") == plan.run_id
            and r.get("accelerator_type") == plan.accelerator_type]
    return {"steady_tolerance": noise.steady_tolerance(
        mine, plan.settings.steady_tolerance, plan.settings.window_s)}


def _followups(plan: Plan, writer: "LeaderboardWriter",
               on_event: Callable[[str, dict], None]) -> Iterator[Batch]:
    """After the search: measure once more a reference that failed for a transient reason,
    re-measure the best configurations that can still win beside the references that
    succeeded, in interleaved rounds (the winner and its speed-ups are read from these), then
    measure the winner's ceilings. Each batch is planned from the rows recorded before it. A
    resumed run measures only what its rows lack, so a run stopped in any of these phases
    finishes it."""
    if not _has_time(plan.time_left_s()):
        return
    yield from _retry_references(plan, writer, on_event)
    rows = _type_rows(plan, writer)
    top, configs = _remeasure_configs(plan, rows)
    if configs:
        yield from _rounds(plan, writer, configs, on_event)
    if plan.options.ceiling and top:
        yield from _limits(plan, writer, on_event)
        yield from _ceiling_again(plan, writer, on_event)


def _trial_configs(plan: Plan, writer: "LeaderboardWriter", batch: Batch) -> list[dict]:
    """The Tune configurations of a batch's trials (Ray Tune merges a configuration's
    ``"tuner"`` entries into the experiment's settings, which are the search's): the run's
    deadline, not the search's; only search-phase trials time the per-phase breakdown
    (``breakdown_*`` columns; null in re-measurement and ceiling rows: they repeat a
    configuration the search measured)."""
    if writer.expected is not None:
        writer.expected += len(batch.configs)
    follow_up = {} if batch.phase == Phase.SEARCH else {"breakdown_steps": 0}
    settings = {"deadline_unix_s": plan.settings.deadline_unix_s, **follow_up, **batch.settings}
    changes = batch.per_trial or [{} for _ in batch.configs]
    return [{**knobs.to_dict(), "reference": ref, "phase": batch.phase.value,
             "tuner": {**settings, **change}}
            for (knobs, ref), change in zip(batch.configs, changes)]


CAN_WIN_FRACTION = 0.5
"""A searched configuration is re-measured only when its search rate is at least this share of
the best search rate (for ``time_to_train_s``: a time at most 1/this of the best): a busy
machine was seen to halve a rate between search and re-measurement (56.4 -> 30.4 samples/sec),
so a configuration below half the best cannot overtake it."""

TRIAL_OVERHEAD_S = 1.5
"""Seconds Ray Tune adds to a trial beyond what its row records (a new trial process: 1.25 s
measured with Ray 2.60), for sizing rounds to the time budget left."""

_TRANSIENT = ("DataLoader worker failure", "died", "killed")
"""Error texts of a failure that may not recur: a DataLoader worker died (``tuner.failures``'s
prefix), Ray lost the trial's process or node ('The actor died ...'), a process was killed.
Out-of-memory is a status of its own (``oom``), never transient."""


def _trial_cost_s(rows: list[dict], knobs: Knobs, windows: int, window_s: float) -> float:
    """Seconds one more trial of ``knobs`` takes with ``windows`` windows: its last search
    trial's wall time less what that trial measured, plus the new windows (each at least one
    of that trial's steps: ddpm's batch 256 takes 8-67 s a step on 2 CPU cores) and Ray's
    overhead. Knobs never searched (the machine's compute limit at the largest batch) take
    the search trial nearest in batch size, its step time scaled to the batch (samples/sec
    held) and its warm-up with it; without any timed search row: the windows and the
    overhead."""
    search = [r for r in rows if phase_of(r) == Phase.SEARCH and r.get("started_at")
              and r.get("finished_at")]
    mine = [r for r in search if Knobs.from_dict(r, strict=False) == knobs]
    timed = [r for r in search if r.get("step_time_ms_p50") and r.get("batch_size")]
    scale = 1.0
    if mine:
        r = mine[-1]
    elif timed:
        r = min(timed, key=lambda x: abs(math.log(x["batch_size"] / knobs.batch_size)))
        scale = max(1.0, knobs.batch_size / r["batch_size"])
    else:
        return windows * window_s + TRIAL_OVERHEAD_S
    setup = max(0.0, (r["finished_at"] - r["started_at"]).total_seconds()
                - (r.get("measured_s") or 0.0))
    setup += (scale - 1.0) * (r.get("warmup_s") or 0.0)
    step_s = scale * (r.get("step_time_ms_p50") or 0.0) / 1000
    return setup + windows * max(window_s, step_s) + TRIAL_OVERHEAD_S


def _type_rows(plan: Plan, writer: "LeaderboardWriter") -> list[dict]:
    """The run's rows of the accelerator type being tuned (all of them on one type)."""
    return [r for r in writer.rows if r.get("accelerator_type") == plan.accelerator_type]


def _holds(plan: Plan, rows: list[dict], knobs: list[Knobs]) -> bool:
    """Whether the time budget left holds one more trial of each of ``knobs``
    (``_trial_cost_s``); always without a budget. A trial started without it is stopped
    before a window: its set-up and warm-up measured nothing."""
    left = plan.time_left_s()
    return left is None or left >= sum(
        _trial_cost_s(rows, k, plan.settings.windows, plan.settings.window_s) for k in knobs)


def _transient(row: dict) -> bool:
    """True for an ``error`` row whose error may not recur (``_TRANSIENT``)."""
    return row["status"] == Status.ERROR and any(p in (row.get("error") or "") for p in _TRANSIENT)


def _retry_references(plan: Plan, writer: "LeaderboardWriter",
                      on_event: Callable[[str, dict], None]) -> Iterator[Batch]:
    """Measure once more (a search-phase trial) each reference whose only search trial failed
    for a transient reason (``_transient``: a killed DataLoader worker or trial process, never
    an out-of-memory): without it the run has no speed-up over that reference. A reference is
    retried once: a resumed run whose rows hold the retry does not retry again. Skipped when
    the time budget left cannot hold the trial."""
    rows = _type_rows(plan, writer)
    todo = []
    for name, _ in plan.references:
        mine = [r for r in rows if r.get("reference") == name and phase_of(r) == Phase.SEARCH]
        if len(mine) == 1 and _transient(mine[0]):
            todo.append((Knobs.from_dict(mine[0], strict=False), name))
    if not todo or not _holds(plan, rows, [k for k, _ in todo]):
        return
    on_event("phase", {"phase": Phase.SEARCH, "count": len(todo), "retry": [n for _, n in todo]})
    yield Batch(todo, Phase.SEARCH)


def _rounds(plan: Plan, writer: "LeaderboardWriter", configs: list[tuple[Knobs, str | None]],
            on_event: Callable[[str, dict], None]) -> Iterator[Batch]:
    """Re-measure ``configs`` interleaved: round r measures each of them once, in order, and
    the ``REMEASURE_ROUNDS`` rounds run one after another as one batch (A B C A B C ...). One
    more round when a re-measurement recorded a figure that cannot be true
    (``tuner.noise.impossible``: measured again). Round r runs the configurations with fewer
    than r re-measurement rows, so a resumed run measures only what is missing; rounds the
    time budget left cannot hold are not started, and where it cannot hold all three rounds of
    every configuration, lower-ranked searched ones are left out first (``_fitting_configs``)."""
    windows = plan.round_windows
    configs, dropped = _fitting_configs(plan, _type_rows(plan, writer), configs, windows)
    first = 1
    while True:
        rows = _type_rows(plan, writer)
        again = [x for x in rows if phase_of(x) == Phase.REMEASURE and x["status"] == Status.OK
                 and noise.impossible(x)]
        rounds = REMEASURE_ROUNDS + (1 if again else 0)
        todo = _rounds_todo(plan, rows, configs, range(first, rounds + 1), windows)
        if not todo:
            if first == 1:
                _say_no_round_fits(plan, rows, configs, windows, on_event)
            return
        last = todo[-1][0]  # in round order
        on_event("phase", {"phase": Phase.REMEASURE, "count": len(todo), "round": todo[0][0],
                           "last_round": last, "rounds": rounds, "windows": windows,
                           "dropped": dropped if first == 1 else 0})
        yield Batch([config for _, config in todo], Phase.REMEASURE, {"windows": windows})
        first = last + 1


def _say_no_round_fits(plan: Plan, rows: list[dict], configs: list[tuple[Knobs, str | None]],
                       windows: int, on_event: Callable[[str, dict], None]) -> None:
    """Say that the re-measurement is left out when the time left cannot hold its first round
    (a run of ``--time-budget 60`` on 2 CPU cores measured its two references and then said
    nothing of the re-measurement its first lines had announced). Silent when nothing is left
    to re-measure (a resumed run whose rounds are recorded)."""
    first = _rounds_todo(plan, rows, configs, range(1, 2), windows, timed=False)
    if not first:
        return
    need_s = sum(_trial_cost_s(rows, k, windows, plan.settings.window_s) for _, (k, _) in first)
    on_event("phase", {"phase": Phase.REMEASURE, "count": 0, "no_time": True,
                       "configs": len(first), "need_s": need_s,
                       "left_s": plan.time_left_s() or 0.0})


def _fitting_configs(plan: Plan, rows: list[dict], configs: list[tuple[Knobs, str | None]],
                     windows: int) -> tuple[list[tuple[Knobs, str | None]], int]:
    """``configs`` less their lowest-ranked searched ones while the time budget left cannot
    hold all ``REMEASURE_ROUNDS`` rounds of them, and how many were left out: three rounds of
    fewer configurations give every speed-up a t-interval, two rounds of more give none worth
    reading (quantile 12.7; a default CPU run re-measured 4 configurations in 2 rounds). The
    first-ranked configuration and the references stay, and so does a configuration already
    re-measured (a resumed run)."""
    rounds = range(1, REMEASURE_ROUNDS + 1)
    remeasured = {Knobs.from_dict(x, strict=False) for x in rows if phase_of(x) == Phase.REMEASURE}
    kept = list(configs)
    droppable = [c for c in kept[1:] if c[1] is None and c[0] not in remeasured]
    while droppable and (len(_rounds_todo(plan, rows, kept, rounds, windows))
                         < len(_rounds_todo(plan, rows, kept, rounds, windows, timed=False))):
        kept.remove(droppable.pop())  # the lowest-ranked first
    return kept, len(configs) - len(kept)


def _rounds_todo(plan: Plan, rows: list[dict], configs: list[tuple[Knobs, str | None]],
                 rounds: range, windows: int,
                 timed: bool = True) -> list[tuple[int, tuple[Knobs, str | None]]]:
    """(round, configuration) of the re-measurements still to run in ``rounds``, in order:
    round r holds the configurations with fewer than r re-measurement rows; it ends at the
    first round the time left cannot hold too (unless ``timed`` is False)."""
    counts: dict[Knobs, int] = {}
    for x in rows:
        if phase_of(x) == Phase.REMEASURE:
            knobs = Knobs.from_dict(x, strict=False)
            counts[knobs] = counts.get(knobs, 0) + 1
    left = plan.time_left_s() if timed else None
    todo: list[tuple[int, tuple[Knobs, str | None]]] = []
    cost = 0.0
    for r in rounds:
        round_todo = [(k, ref) for k, ref in configs if counts.get(k, 0) < r]
        cost += sum(_trial_cost_s(rows, k, windows, plan.settings.window_s) for k, _ in round_todo)
        if left is not None and left < cost:
            break
        todo += [(r, config) for config in round_todo]
    return todo


def _remeasure_configs(plan: Plan, rows: list[dict]) -> tuple[list[Knobs], list[tuple[Knobs, str | None]]]:
    """The ``--confirm`` best configurations of the search that can still win
    (``CAN_WIN_FRACTION``), and what the re-measurement phase measures: those and, beside them,
    the references that succeeded (nothing with fewer than two configurations to compare).
    A best whose figures cannot be true (``tuner.noise.impossible``) is among them: measured
    again; it does not set the bar for the others."""
    ok = [r for r in rows if r["status"] == Status.OK and r[plan.metric] is not None
          and phase_of(r) == Phase.SEARCH]
    ok.sort(key=lambda r: r[plan.metric], reverse=plan.mode == "max")
    sound = [r[plan.metric] for r in ok if noise.impossible(r) is None]
    top: list[Knobs] = []
    for r in ok:
        knobs = Knobs.from_dict(r, strict=False)
        can_win = not sound or (r[plan.metric] >= CAN_WIN_FRACTION * sound[0]
                                if plan.mode == "max" else
                                r[plan.metric] <= sound[0] / CAN_WIN_FRACTION)
        if knobs not in top and can_win:
            top.append(knobs)
    top = top[:plan.options.confirm]
    refs: dict[Knobs, str] = {}
    for r in ok:
        if r["reference"] and r["reference"] not in refs.values():
            refs.setdefault(Knobs.from_dict(r, strict=False), r["reference"])
    configs = [(k, refs.get(k)) for k in top] + [(k, name) for k, name in refs.items()
                                                 if k not in top]
    return top, (configs if top and len(configs) >= 2 else [])


def _ceiling_again(plan: Plan, writer: "LeaderboardWriter",
                   on_event: Callable[[str, dict], None]) -> Iterator[Batch]:
    """The winner's compute-only ceiling; measured once more when it came out below the
    winner by more than the noise (``tuner.winner.Answer.ceiling_far_below``: a disturbed
    measurement, never an efficiency over 100 %; within the noise it is the pipeline's own rate, and a
    second trial, 14 s of the default CPU run, could not change that reading), and not again
    when this run's rows already hold it."""
    for _ in range(2):
        rows = _type_rows(plan, writer)
        winner = winning(rows)
        if winner is None:
            return
        knobs = winner.knobs
        measured = [r for r in rows if phase_of(r) == Phase.CEILING
                    and (r.get("ceiling") or "compute") == "compute"
                    and Knobs.from_dict(r, strict=False) == knobs]
        if (measured and not winner.ceiling_far_below) or len(measured) >= 2:
            return
        if not _holds(plan, rows, [knobs]):
            return
        on_event("phase", {"phase": Phase.CEILING, "count": 1, "again": bool(measured)})
        yield Batch([(knobs, None)], Phase.CEILING, {"compute_only": True, "ceiling": "compute"})


def _limits(plan: Plan, writer: "LeaderboardWriter",
            on_event: Callable[[str, dict], None]) -> Iterator[Batch]:
    """What bounds the winner, as one batch: its compute-only ceiling ('compute'), its own
    DataLoader alone ('loader'), and the machine's two limits, whose minimum is the attainable
    rate: the loader-only rate with every CPU a trial may have as workers ('machine-loader')
    and the compute-only rate at the largest batch the search allows in the fastest precision
    ('machine-compute'). Each is measured once per run (a resumed run measures what its rows
    lack)."""
    rows = _type_rows(plan, writer)
    winner = winning(rows)
    if winner is None:
        return
    knobs = winner.knobs
    have = {r.get("ceiling") or "compute" for r in rows if phase_of(r) == Phase.CEILING}
    workers = plan.node_cpus
    machine_loader = knobs.replace(num_workers=workers, persistent_workers=True,
                                   prefetch_factor=max(knobs.prefetch_factor or 2, 4))
    largest = max(candidates(plan.device_space))  # the batch sizes the search allows
    machine_compute = knobs.replace(batch_size=max(largest, knobs.batch_size),
                                    amp="bf16" if plan.device == "cuda" else knobs.amp)
    todo = [(label, config.clamp(plan.device)[0], mode) for label, config, mode in (
        ("compute", knobs, "compute_only"), ("loader", knobs, "loader_only"),
        ("machine-loader", machine_loader, "loader_only"),
        ("machine-compute", machine_compute, "compute_only")) if label not in have]
    if _holds(plan, rows, [knobs]):
        todo, left_out = _fitting_ceilings(plan, rows, todo)
    else:  # not even the winner's own: none is started, and the run says so
        todo, left_out = [], [label for label, _, _ in todo]
    if todo or left_out:  # a ceiling left out is said even when none is measured
        on_event("phase", {"phase": Phase.CEILING, "count": len(todo),
                           "ceilings": [label for label, _, _ in todo], "left_out": left_out})
    if not todo:
        return
    yield Batch([(config, None) for _, config, _ in todo], Phase.CEILING,
                per_trial=[{"ceiling": label, mode: True} for label, _, mode in todo])


def _fitting_ceilings(plan: Plan, rows: list[dict], todo: list[tuple[str, Knobs, str]]
                      ) -> tuple[list[tuple[str, Knobs, str]], list[str]]:
    """The ceilings of ``todo`` (label, knobs, mode) whose trials the time budget left holds,
    one after another in order (``_trial_cost_s``), and the labels of those left out. A
    ceiling started without the time for it measures nothing: on 2 CPU cores the machine's
    compute limit at batch 256 (8-67 s a step) ended ``timeout`` after 12.6 s of the default
    run's 220 s."""
    left = plan.time_left_s()
    if left is None:
        return todo, []
    kept, left_out, total = [], [], 0.0
    for entry in todo:
        cost = _trial_cost_s(rows, entry[1], plan.settings.windows, plan.settings.window_s)
        if total + cost <= left:
            kept.append(entry)
            total += cost
        else:
            left_out.append(entry[0])
    return kept, left_out
