"""A run's plan: the options of ``python -m tuner run``, validated and resolved before any trial.

Everything a user can get wrong (workload, search space, data, limits, objective, device) is
checked by ``make_plan`` and raised as ``TunerError`` with one clear line; nothing is written
before it passes. A cluster address is checked where Ray connects (``tuner.ray_runtime``).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import tuner.budget as budget
import tuner.leaderboard as leaderboard
from tuner._deprecated import moved
from tuner.budget import default_time_budget_s
from tuner.errors import DataError, TunerError
from tuner.hardware import cpu_has_native_bf16
from tuner.knobs import COMPUTE_SWITCHES, Knobs
from tuner.probe import ComputeCurve, InputRate, feeding, offered_paths
from tuner.searcher import MemoryLimits, SearchSpec
from tuner.settings import (
    DEVICES,
    MEASUREMENT_DEFAULTS,
    MemoryLimit,
    RunOptions,
    TrialSettings,
    default_cache_dir,
    default_scale,
    device_limit_mb,
)
from tuner.space import Choices, Space, load_space
from tuner.status import TELLS_MEMORY, Phase, Status, phase_of
from tuner.trial.flops import conv_flops_share, has_image_layout, model_flops_per_sample
from tuner.workload import Workload
from tuner.workload_loader import configured, resolve

REMEASURE_ROUNDS = 3
"""Interleaved re-measurement rounds (A B C, A B C, A B C). Each round gives one paired ratio
per configuration; three give a t-interval with 2 degrees of freedom (quantile 4.3, where two
rounds have 12.7: ``tuner.noise``)."""

CEILING_TRIALS = 4
"""Ceiling trials after the re-measurement: the winner's compute-only and loader-only rates,
the machine's loader and compute limits (``tuner.followups.ceilings``)."""


SCREENED_TRIALS_FACTOR = 3
"""A run without ``--trials`` whose searched trials are screened (``RunOptions.screen_windows``)
plans this many times the trials of one that measures each in full (40 on CUDA, 12 on CPU):
a screening trial of one window costs about a third of one of three to five."""

SCREEN_WINDOW_SHARE = 0.5
"""A screening trial's window is this share of the run's ``window_s`` (a window still ends at
the first step past it, so it holds at least one step): a screened trial's time is mostly its
window, and its figure only has to pick the finalists, which are measured in full windows."""

KNEE_LOW_FRACTION = 0.25
"""The searched batch range starts at this fraction of the knee (``ComputeCurve.knee_batch``)
once the probe has timed its steps: below it the step time is the per-step overhead, and a
log-uniform range down to the space's low end would spend most of its draws there."""


@dataclass(frozen=True)
class Resources:
    """Where the trials run: the device type, the GPUs, and the CPUs of the smallest node that
    runs trials (this machine, or a connected cluster: ``tuner.ray_runtime.cluster_resources``)."""
    device: str
    gpus: int
    node_cpus: int


def local_cpus() -> int:
    """This machine's CPUs: the node a local run's trials have, one at a time
    (``TrialResources.whole_node``), and so what ``profile`` measures a configuration with."""
    return os.cpu_count() or 1


def local_resources(device: str) -> Resources:
    """This machine's resources for ``--device`` ('auto', 'cpu' or 'cuda'). Raises TunerError."""
    device = resolve_device(device)
    import torch
    return Resources(device, torch.cuda.device_count() if device == "cuda" else 0, local_cpus())


@dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
    """A run, resolved and validated before any trial (bad input fails in ``make_plan``).

    A value: what changes during a run (the memory probe's batch cap, the accelerator type
    being tuned, the hardware key Ray reports) makes a new plan (``with_batch_bound``,
    ``for_accelerator``, ``with_hardware_key``)."""

    options: RunOptions
    workload: Workload
    space: Space
    """The search space as loaded (the workload's or --space)."""
    device: str
    """'cpu' or 'cuda'."""
    gpus: int
    node_cpus: int
    """CPUs of the smallest node that runs trials (caps num_workers)."""
    scale: str
    data_dir: Path
    samples: int
    """Samples in the dataset (caps batch_size)."""
    device_space: Space
    """The space this run samples: device-specific, capped, global batch applied."""
    references: tuple[tuple[str, Knobs], ...]
    """(name, knobs as run) of the workload's reference configurations."""
    settings: TrialSettings
    trials: int | None
    """Search trials in all, references included (None: until the time budget)."""
    run_id: str
    max_host_memory_mb: float | None
    prior_rows: tuple[dict, ...] = ()
    """A resumed run's rows."""
    hardware_key: str | None = None
    """The trials' hardware key, known once Ray runs (on a cluster a GPU worker decides)."""
    accelerator_type: str | None = None
    """The accelerator type being tuned on a heterogeneous cluster (one search per type)."""
    type_slots: int = 0
    """Trials that run at once on that accelerator type."""
    notes: tuple[str, ...] = ()
    """One line each about an option that does nothing in this run (``--max-memory`` on the
    CPU device, ``--warm-start`` with no earlier rows), for the CLI to print."""
    time_budget_s: float | None = None
    """Seconds the whole run may take: ``--time-budget``, or without it the default
    (``default_time_budget_s``); None: no time budget."""
    deadline_monotonic: float | None = None
    """When the run must end, on the driver's ``time.monotonic()`` clock (``with_deadline``,
    as the run starts); None: no deadline."""
    planned_at: float | None = None
    """When the run began (``time.monotonic()``): ``make_plan``'s start, so that the data
    checks and the FLOP count (seconds on a busy machine) are inside the time budget, or the
    process's launch for the command line (``launched_at``)."""
    from_launch: bool = False
    """``planned_at`` is the process's launch (``launched_at``): the run counts its budget from
    there however long ago, not from at most 60 s ago as for a plan made long before."""
    compute_curve: ComputeCurve | None = None
    """The machine's compute curve from the memory probe's timed steps (``with_compute_curve``);
    None: no probe, or one that timed too little."""
    anchors: tuple[tuple[str, Knobs], ...] = ()
    """(name, knobs as run) of the machine's structured points the search starts from after
    the references (``anchor_points``)."""
    input_rates: tuple[InputRate, ...] = ()
    """The input pipeline's rates the memory probe measured (``tuner.probe.measure_input``)."""
    cudnn_at_finalists: bool = False
    """``cudnn_benchmark`` is decided at the finalists (``_cudnn_benchmark``): the screening
    trials run with it off, and the re-measurement measures each finalist with it on and the
    first-ranked with it off too (``tuner.followups.remeasure_configs``)."""

    @property
    def metric(self) -> str:
        return self.options.metric

    @property
    def mode(self) -> str:
        return self.options.mode

    @property
    def prior_search_rows(self) -> list[dict]:
        """The resumed run's search rows for the accelerator type being tuned."""
        return [r for r in self.prior_rows if phase_of(r) == Phase.SEARCH
                and r.get("accelerator_type") == self.accelerator_type]

    @property
    def remaining_trials(self) -> int | None:
        """Search trials still to run (None: no trial budget)."""
        if self.trials is None:
            return None
        return max(0, self.trials - len(self.prior_search_rows))

    @property
    def reference_params(self) -> list[tuple[str, dict, Knobs]]:
        """References still to measure: (name, their parameters in the device space, knobs)."""
        done = {r["reference"] for r in self.prior_rows if r.get("reference")
                and r.get("accelerator_type") == self.accelerator_type}
        return [(name, self.device_space.project(knobs), knobs)
                for name, knobs in self.references if name not in done]

    @property
    def anchor_params(self) -> list[tuple[str, dict, Knobs]]:
        """The anchors as (name, their parameters in the device space, knobs); one the space
        cannot describe is left out."""
        from tuner.errors import SpaceError
        out = []
        for name, knobs in self.anchors:
            try:
                out.append((name, self.device_space.project(knobs), knobs))
            except (SpaceError, ValueError):
                continue
        return out

    @property
    def screen_windows(self) -> int:
        """Windows of a screening trial; 0 (no screening) without finalists (``--confirm 0``)
        or when it would not be shorter than a full trial."""
        n = self.options.screen_windows
        return n if 0 < n < self.settings.windows and self.options.confirm > 0 else 0

    @property
    def screen_window_s(self) -> float:
        """Seconds of a screening trial's window (``SCREEN_WINDOW_SHARE`` of the run's); 0
        when nothing is screened."""
        return SCREEN_WINDOW_SHARE * self.settings.window_s if self.screen_windows else 0.0

    @property
    def should_probe(self) -> bool:
        """Whether the memory probe runs: ``--probe on|off``; with 'auto', on CUDA, with
        ``--max-host-memory``, or for a workload that declares a device memory of its own
        (``Workload.device_memory_bound``)."""
        if self.options.probe != "auto":
            return self.options.probe == "on"
        return (self.device == "cuda" or self.max_host_memory_mb is not None
                or self.workload.device_memory_bound)

    def search_spec(self) -> SearchSpec:
        """What the searcher needs from this plan."""
        return SearchSpec(
            space=self.device_space, metric=self.metric, mode=self.mode,
            sampler=self.options.sampler,
            # a resumed run must not replay proposals
            seed=self.options.seed + len(self.prior_rows),
            trials=self.trials, references=tuple(self.reference_params),
            reference_count=len(self.references),
            limits=MemoryLimits(self.options.max_memory, self.max_host_memory_mb),
            seed_rows=tuple(self._seed_rows()),
            deadline_unix_s=self.settings.deadline_unix_s,
            followup_share=self.followup_share(),
            window_s=self.settings.window_s, anchors=tuple(self.anchor_params),
            screen_windows=self.screen_windows, screen_window_s=self.screen_window_s,
            settings=self.settings, reused=self.reuses_trial_processes)

    def _seed_rows(self) -> list[tuple[dict, bool]]:
        """Rows the search starts from, each with whether a proposal equal to it is answered
        from it instead of measured: the resumed run's own rows (always), and with --warm-start
        earlier rows of this workload, scale and hardware (unless --remeasure)."""
        # A stopped trial's partial measurement too, as the searcher was told it when it ran.
        seeds = [(r, True) for r in self.prior_search_rows if r["status"] in TELLS_MEMORY
                 or (r["status"] in (Status.PRUNED, Status.TIMEOUT) and r[self.metric])]
        if self.options.warm_start:
            table = leaderboard.read(self.options.results, workload=self.workload.name,
                                     hardware_key=self.hardware_key)
            for r in table.to_pylist():
                if _is_earlier_row(r, self.run_id, self.scale):
                    seeds.append((r, not self.options.remeasure))
        return seeds

    def launched_at(self, launched_monotonic: float) -> "Plan":
        """The plan whose time budget counts from ``launched_monotonic`` (``time.monotonic()``
        of this process, before ``make_plan``: the command line's launch), not from planning."""
        return replace(self, planned_at=min(launched_monotonic, self.planned_at or math.inf),
                       from_launch=True)

    def budget_start(self) -> float:
        """When the time budget started (``time.monotonic()``): the command's launch
        (``from_launch``), else planning, at most ``budget.PLAN_AGE_S`` ago
        (``tuner.budget.budget_start``)."""
        return budget.budget_start(self.planned_at, self.from_launch, time.monotonic())

    def with_batch_bound(self, max_batch: int) -> "Plan":
        """The plan with the searched batch size ending at the memory probe's bound, which may
        lie above the space file's ``high`` (``Space.with_batch_high``)."""
        return replace(self, device_space=self.device_space.with_batch_high(max_batch))

    def with_compute_curve(self, curve: ComputeCurve | None, probe_knobs: Knobs | None,
                           input_rates: Sequence[InputRate] = ()) -> "Plan":
        """The plan that starts its search from the machine's limit: the batch range's low end
        at ``KNEE_LOW_FRACTION`` of the knee, and the anchors (``anchor_points``, their data
        path from ``input_rates``). Unchanged for None (no curve: the search starts from the
        references alone)."""
        if curve is None:
            return self
        low = max(1, int(curve.knee_batch * KNEE_LOW_FRACTION))
        plan = replace(self, compute_curve=curve, input_rates=tuple(input_rates),
                       device_space=self.device_space.with_batch_low(low))
        return replace(plan, anchors=anchor_points(plan, curve, probe_knobs))

    def with_hardware_key(self, key: str) -> "Plan":
        return replace(self, hardware_key=key)

    def with_deadline(self, deadline_monotonic: float | None) -> "Plan":
        """The plan whose run ends at ``deadline_monotonic`` (``time.monotonic()`` of this
        process; None: no deadline). Its trials get the same instant on the wall clock
        (``TrialSettings.deadline_unix_s``: they run in other processes, maybe on other nodes,
        whose monotonic clocks differ) and stop at the first step boundary past it."""
        unix = (None if deadline_monotonic is None
                else time.time() + (deadline_monotonic - time.monotonic()))
        return replace(self, deadline_monotonic=deadline_monotonic,
                       settings=replace(self.settings, deadline_unix_s=unix))

    def time_left_s(self) -> float | None:
        """Seconds until the run's deadline, >= 0; None when the run has no time budget."""
        if self.deadline_monotonic is None:
            return None
        return max(0.0, self.deadline_monotonic - time.monotonic())

    def search_time_s(self) -> float | None:
        """Seconds the search may take if the budget were split now: the time left less
        ``followup_share()`` of it, kept for the re-measurement and the ceilings; None: no
        budget. The searcher splits the budget itself, once a trial has measured
        (``tuner.searcher.ConstrainedSearch.deadline_unix_s``)."""
        return budget.search_time_s(self.time_left_s(), self.followup_share(), self.time_budget_s)

    @property
    def reuses_trial_processes(self) -> bool:
        """Whether a trial runs in a process an earlier trial of the run ran in, keeping what
        cuDNN autotuned there: Ray Tune reuses trial processes except under
        ``--max-host-memory`` (``tuner.driver``), and a data-parallel trial starts its ranks
        anew (Ray Train); with several trials at once (``one_trial_at_a_time``) the next one
        may run in another process."""
        return (self.max_host_memory_mb is None and self.options.world_size <= 1
                and self.one_trial_at_a_time)

    def trials_at_once(self, alive_nodes: int = 1) -> int:
        """Trials run at once (``tuner.driver``): one per device (a data-parallel trial's
        world size of them: Ray Train starts its run only when every rank's resources are
        free), one per node of a CPU cluster of ``alive_nodes``, else one."""
        n = self.settings.world_size
        if self.accelerator_type is not None:
            return max(1, self.type_slots // n)
        if self.device == "cuda":
            return max(1, self.gpus // n)
        if n > 1 or self.options.address is None:
            return 1
        return max(1, alive_nodes)

    @property
    def one_trial_at_a_time(self) -> bool:
        """Whether the run's trials run one after another in one place, so that the next
        trial runs where the last one ran: on this machine, ``trials_at_once`` 1. On a
        cluster a trial may run on another node: never assumed."""
        return self.options.address is None and self.trials_at_once() == 1

    @property
    def earlier_trial_ids(self) -> frozenset[str]:
        """The ``trial_id`` of the rows an earlier command of this run recorded (``--resume``):
        their trial processes are gone, and what they kept (cuDNN's autotuning at their
        shapes) with them."""
        return frozenset(r["trial_id"] for r in self.prior_rows if r.get("trial_id"))

    @property
    def round_windows(self) -> int:
        """Windows per re-measurement round: the rounds together about twice the search's
        windows (as one re-measurement with twice the windows was), at least 2 per round (a
        spread)."""
        return max(2, math.ceil(2 * self.settings.windows / REMEASURE_ROUNDS))

    def followup_share(self) -> float:
        """Share of the time left kept for the follow-ups (``tuner.budget.followup_share``):
        0 without them; with a trial count, the ``--confirm`` best and the references re-measured
        in ``REMEASURE_ROUNDS`` rounds and the ``CEILING_TRIALS`` ceilings, weighed against the
        search's trials, at most ``budget.max_followup_share`` of this run's budget; without
        one ``budget.FOLLOWUP_SHARE``."""
        confirm = self.options.confirm > 0
        return budget.followup_share(  # a screened search trial measures its screening windows
            trials=self.trials, windows=self.screen_windows or self.settings.windows,
            round_windows=self.round_windows,
            remeasured=(self.options.confirm + len(self.references)
                        + (1 if self.cudnn_at_finalists else 0)) if confirm else 0,
            rounds=REMEASURE_ROUNDS, ceilings=CEILING_TRIALS if self.options.ceiling else 0,
            budget_s=self.time_budget_s)

    def for_accelerator(self, accelerator: str | None, *, type_slots: int,
                        node_cpus: int) -> "Plan":
        """The plan of one accelerator type's search (trials pinned to its nodes)."""
        return replace(self, accelerator_type=accelerator, type_slots=type_slots,
                       node_cpus=node_cpus,
                       settings=replace(self.settings, accelerator_type=accelerator))


def make_plan(options: RunOptions, resources: Resources | None = None) -> Plan:
    """Resolve and validate a run: workload, space, results location, device, data, references,
    trial settings, and the run to resume. Starts nothing: with ``--address`` the caller
    connects first and passes the cluster's ``resources`` (default: this machine's).

    Raises:
        TunerError (DataError, SpaceError): anything a user can get wrong, in one line.
    """
    planned_at = time.monotonic()  # the time budget counts from here (Plan.planned_at)
    ceiling_note = []
    if options.world_size > 1 and options.ceiling:
        options = replace(options, ceiling=False)
        ceiling_note.append(f"--world-size {options.world_size}: the ceilings (compute-only, "
                            "loader-only, the machine's) are measured in one-rank runs only")
    workload = resolve_workload(options)
    space = (load_space(options.space_file, is_file=True) if options.space_file
             else load_space(workload.space_name))
    leaderboard.check_results(options.results)
    resources = resources or local_resources(options.device)
    device = resources.device
    notes = ceiling_note + check_limits(options, device)
    scale = options.scale or default_scale(device)
    data_dir, samples = checked_data(workload, options.data, scale)
    device_space = _device_space(space, workload, options, resources, scale, samples, notes)
    references = device_space.fit_references(
        {name: knobs.clamp(device)[0] for name, knobs in workload.references.items()})
    max_host_memory_mb = _host_limit_mb(options.max_host_memory)
    warmup, windows, window_s = MEASUREMENT_DEFAULTS[scale]
    settings = TrialSettings(
        scale=scale, device=device, data_dir=str(data_dir),
        warmup_steps=options.warmup_steps or warmup, windows=options.windows or windows,
        window_s=options.window_s or window_s, seed=options.seed,
        max_memory=options.max_memory, max_host_memory_mb=max_host_memory_mb,
        train_steps=options.train_steps, default_data=options.data is None,
        model_flops_per_sample=model_flops_per_sample(workload, scale, data_dir),
        conv_flops_share=conv_flops_share(workload, scale, data_dir),
        peak_tflops=options.peak_tflops, world_size=options.world_size,
        rank_cpus=_rank_cpus(options, resources),
        keep_cache=max_host_memory_mb is None)  # as trial processes are reused (the driver)
    screened = options.screen_windows > 0 and options.confirm > 0
    trials = options.trials or (None if options.time_budget_s else (
        (40 if device == "cuda" else 12) * (SCREENED_TRIALS_FACTOR if screened else 1)))
    time_budget_s = options.time_budget_s or default_time_budget_s(device, options.trials)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id, prior_rows = f"{workload.name}-{stamp}-{secrets.token_hex(2)}", ()
    if options.resume is not None:
        run_id, prior_rows = _resumed_run(options, workload.name, scale, device)
    if options.warm_start and not _has_earlier_rows(options, workload.name, scale, device, run_id):
        where = f" on {_local_hardware_key(device)}" if options.address is None else ""
        notes.append(f"--warm-start: no earlier rows of {workload.name} at {scale} scale{where} "
                     f"in {options.results}; the search starts from scratch")
    plan = Plan(options=options, workload=workload, space=space, device=device,
                gpus=resources.gpus, node_cpus=resources.node_cpus, scale=scale,
                data_dir=data_dir, samples=samples, device_space=device_space,
                references=references, settings=settings, trials=trials, run_id=run_id,
                max_host_memory_mb=max_host_memory_mb, prior_rows=prior_rows,
                notes=tuple(notes), time_budget_s=time_budget_s, planned_at=planned_at)
    plan = _without_unaffordable_compile(_cudnn_benchmark(_data_paths(plan)))
    plan.reference_params  # a reference outside the space fails here, before Ray starts
    return plan


def anchor_points(plan: Plan, curve: ComputeCurve,
                  probe_knobs: Knobs | None) -> tuple[tuple[str, Knobs], ...]:
    """The machine's structured points, from the last reference (the recommended, or the
    baseline alone) and the compute curve:

    * 'machine': at the knee batch, in the precision the probe ran (the fastest the space
      searches), on the cheapest data path and worker count whose input pipeline alone feeds
      the knee's compute rate (``tuner.probe.feeding`` of ``Plan.input_rates``; none does: the
      fastest measured); without input rates, on the cheapest data path the space allows
      (``tuner.probe.offered_paths``; 'device' without DataLoader workers) and the
      reference's workers;
    * 'machine+<switch>': the machine point with one of ``COMPUTE_SWITCHES`` turned on, for
      each the space searches and the machine point has off: the probe ran the model with the
      reference's layout and optimizer, and a switch such as ``channels_last`` or the fused
      optimizer changes the compute rate at that batch by a factor the probe cannot see
      (one screening trial each, where the sampler would need luck in a space of a dozen
      knobs to pair one with the knee batch and the cheapest data path); right after the
      machine point, so that a trial process keeps its decoded cache between them;
    * 'doubling': the reference's knobs at its batch doubled while it stays within the probe's
      bound (what Lightning's ``BatchSizeFinder`` in 'power' mode answers), when that is
      larger than its own batch.

    Each is clamped to the device and fitted to ``--global-batch-size`` (one whose batch does
    not divide it is left out); one equal to a reference or an earlier anchor is left out."""
    if not plan.references:
        return ()
    base = plan.references[-1][1]
    if plan.cudnn_at_finalists:  # screened with it off, as the sampler's proposals are
        base = base.replace(cudnn_benchmark=False)
    space = plan.device_space
    amp = probe_knobs.amp if probe_knobs is not None else base.amp
    machine = base.replace(batch_size=curve.knee_batch, amp=amp).updated(
        _machine_input(space, base, feeding(plan.input_rates,
                                            curve.samples_per_sec(curve.knee_batch))))[0]
    doubled = base.batch_size
    while doubled * 2 <= curve.max_batch:
        doubled *= 2
    points = [("machine", machine)]
    for name in COMPUTE_SWITCHES:  # one step from the machine point along each switch
        dom = space.domains.get(name)
        if isinstance(dom, Choices) and True in dom.values and not getattr(machine, name):
            points.append((f"machine+{name}", machine.replace(**{name: True})))
    if doubled > base.batch_size:
        points.append(("doubling", base.replace(batch_size=doubled)))
    out: list[tuple[str, Knobs]] = []
    seen = {knobs for _, knobs in plan.references}
    for name, knobs in points:
        try:
            knobs = space.fit_reference(knobs.clamp(plan.device)[0])
        except TunerError:  # under --global-batch-size, a batch that does not divide it
            continue
        if knobs not in seen:
            seen.add(knobs)
            out.append((name, knobs))
    return tuple(out)


def _machine_input(space: Space, base: Knobs, fed: InputRate | None) -> dict[str, Any]:
    """The knob changes that put the reference ``base`` on the machine point's input pipeline:
    the data path and worker count of ``fed`` (``tuner.probe.feeding``), or without one the
    cheapest data path the space allows (``tuner.probe.offered_paths``) with the reference's
    workers ('device': none)."""
    path = next(iter(offered_paths(space, base.data_path)), base.data_path)
    change: dict[str, Any] = {}
    if fed is not None:
        path = fed.data_path
        if path != "device" and fed.num_workers != base.num_workers:
            change.update(num_workers=fed.num_workers, persistent_workers=fed.num_workers > 0,
                          prefetch_factor=(base.prefetch_factor or 2) if fed.num_workers
                          else None)
    if path != base.data_path:
        change["data_path"] = path
        if path == "device":
            change.update(num_workers=0, pin_memory=False)
    return change


def _rank_cpus(options: RunOptions, resources: Resources) -> int | None:
    """CPUs each rank of a data-parallel trial asks for: the node's CPUs shared among the
    ranks on it (all of them on CPU or on one node's GPUs). None with world size 1.

    Raises:
        TunerError: more ranks than the machine has GPUs (CUDA) or CPUs (CPU).
    """
    n = options.world_size
    if n == 1:
        return None
    have = resources.gpus if resources.device == "cuda" else resources.node_cpus
    what = "GPUs" if resources.device == "cuda" else "CPUs"
    if n > have and options.address is None:
        raise TunerError(f"--world-size {n}: this machine has {have} {what}; a rank needs one "
                         f"(accepted: 1..{have})")
    per_node = min(n, resources.gpus) if resources.device == "cuda" else n
    return max(1, resources.node_cpus // max(1, per_node))


def _without_unaffordable_compile(plan: Plan) -> Plan:
    """The plan whose space no longer samples a ``torch.compile`` mode whose compiles
    (``tuner.budget.compile_needs_s``) the search (the time budget less the follow-ups' share)
    cannot hold ``tuner.budget.COMPILE_TRIALS_IN_SEARCH`` times, with a note naming the
    budget that would search it; unchanged without a time budget. A proposal of such a mode
    would spend most of the search on one configuration, or be refused at its set-up
    (``tuner.budget.compile_refusal``) and told to the sampler as a failure it learns nothing
    from. A reference using the mode keeps it: it runs as written."""
    dom = plan.device_space.domains.get("compile")
    if plan.time_budget_s is None or not isinstance(dom, Choices):
        return plan
    search_s = budget.search_time_s(plan.time_budget_s, plan.followup_share(), plan.time_budget_s)
    used = {knobs.compile for _, knobs in plan.references}
    space, dropped = plan.device_space, {}
    for mode in dom.values:
        needs_s = 0.0 if mode == "off" else budget.compile_needs_s(mode, plan.workload, plan.device)
        if budget.compile_searched_from_s(needs_s) > search_s and mode not in used:
            space, dropped[mode] = space.without("compile", mode), needs_s
    if not dropped:
        return plan
    cheapest = min(dropped, key=dropped.get)
    verb, pronoun = ("is", "it needs") if len(dropped) == 1 else ("are", "they need")
    needs = "/".join(f"{needs_s:.0f}" for needs_s in dropped.values())
    note = (f"compile={'/'.join(dropped)} {verb} not searched: {pronoun} about {needs} s to "
            f"compile, and the search's {search_s:.0f} s of the {plan.time_budget_s:.0f}-s time "
            f"budget hold fewer than {budget.COMPILE_TRIALS_IN_SEARCH} such compiles "
            f"(--time-budget {_budget_searching_s(plan, dropped[cheapest]):.0f} or more "
            f"searches {cheapest})")
    return replace(plan, device_space=space, notes=(*plan.notes, note))


def _cudnn_benchmark(plan: Plan) -> Plan:
    """The plan whose search leaves ``cudnn_benchmark`` to where it can change a rate cheaply:

    * not searched (held off, with a note) for a model that runs no convolution
      (``TrialSettings.conv_flops_share`` 0): cuDNN's benchmark mode chooses convolution
      algorithms only;
    * with screening (``Plan.screen_windows``), decided at the finalists
      (``Plan.cudnn_at_finalists``): the screening trials hold it off, as the machine's
      structured points do (``anchor_points``). With it on, cuDNN autotunes each batch size,
      precision and layout new to the trial process in its first step
      (``tuner.knobs.CUDNN_SHAPE_KNOBS``), seconds on a GPU against a screening window of
      about one; the finalists' few shapes are autotuned once each in the re-measurement,
      whose rounds decide whether it pays (docs/measurement.md has the H100/H200 figures).

    Unchanged when the space does not search the knob (the CPU device, a space that fixes
    it); a reference keeps its own value."""
    dom = plan.device_space.domains.get("cudnn_benchmark")
    if not isinstance(dom, Choices) or set(dom.values) != {False, True}:
        return plan
    held = plan.device_space.fixed("cudnn_benchmark", False)
    if plan.settings.conv_flops_share == 0:
        note = ("cudnn_benchmark is not searched: the model runs no convolution, the only "
                "operation whose algorithm cuDNN's benchmark mode chooses")
        return replace(plan, device_space=held, notes=(*plan.notes, note))
    if not plan.screen_windows:
        return plan
    return replace(plan, device_space=held, cudnn_at_finalists=True)


def _budget_searching_s(plan: Plan, needs_s: float) -> float:
    """The least time budget, in whole tens of seconds, whose search holds
    ``budget.COMPILE_TRIALS_IN_SEARCH`` compiles of ``needs_s`` seconds each (the follow-ups'
    share depends on the budget: ``Plan.followup_share``)."""
    wanted_s = budget.compile_searched_from_s(needs_s)
    budget_s = math.ceil(max(plan.time_budget_s or 0.0, wanted_s) / 10) * 10
    while True:
        share = replace(plan, time_budget_s=budget_s).followup_share()
        if budget.search_time_s(budget_s, share, budget_s) >= wanted_s:
            return budget_s
        budget_s += 10


CACHE_SHARE = 0.5
"""The most of the host memory (``--max-host-memory``, else the machine's RAM) a decoded cache
may take: the trial's process, its DataLoader workers and their batches need the rest."""


def _data_paths(plan: Plan) -> Plan:
    """The plan whose space samples only the data paths (``tuner.data``) that apply: none but
    'loader' for a workload without ``Workload.sample_path`` (said once, whatever its space);
    not 'cache' when the decoded
    samples need more than ``CACHE_SHARE`` of the host memory, not 'device' when they need more
    than the device memory a trial may use (``--max-memory``; on the CPU device the host's
    share). Each path left out is said once, with the bytes it would need."""
    dom = plan.device_space.domains.get("data_path")
    space, notes = plan.device_space, list(plan.notes)
    workload = plan.workload
    path = workload.sample_path(plan.data_dir, plan.scale) if workload.has_sample_path else None
    if path is None:
        notes.append(f"data_path: only the loader path is tuned: workload {workload.name!r} "
                     "does not split its samples into a decoded, cacheable part and a random "
                     "augmentation (Workload.sample_path; docs/bring-your-own.md)")
        if isinstance(dom, Choices):
            space = space.fixed("data_path", "loader")
        return replace(plan, device_space=space, notes=tuple(notes))
    if not isinstance(dom, Choices) or dom.values == ("loader",):
        return plan
    from tuner.data import cache_bytes, describe_bytes
    need_mb = cache_bytes(path) / 2**20
    host_mb = CACHE_SHARE * (plan.max_host_memory_mb or _machine_ram_mb())
    device_mb = host_mb if plan.device == "cpu" else _device_memory_mb(plan.options.max_memory)
    for value, have_mb, where in (("cache", host_mb, "host memory"),
                                  ("device", device_mb, "device memory")):
        if value in dom.values and have_mb is not None and need_mb > have_mb:
            space = space.without("data_path", value)
            notes.append(f"data_path={value} is not searched: the decoded samples need "
                         f"{describe_bytes(need_mb * 2**20)} of {where}, more than the "
                         f"{describe_bytes(have_mb * 2**20)} a trial may use there")
    return replace(plan, device_space=space, notes=tuple(notes))


def _machine_ram_mb() -> float:
    import psutil
    return psutil.virtual_memory().total / 2**20


def _device_memory_mb(max_memory: MemoryLimit | str | None) -> float | None:
    """The memory a trial may use on this machine's first CUDA device, MiB (None: none)."""
    import torch
    if not torch.cuda.is_available():
        return None
    total_mb = torch.cuda.get_device_properties(0).total_memory / 2**20
    return device_limit_mb(MemoryLimit.coerce(max_memory), total_mb)


def _resumed_run(options: RunOptions, workload: str, scale: str,
                 device: str) -> tuple[str, tuple[dict, ...]]:
    """(run id, rows) of the run ``--resume`` names ('latest': the newest of this workload,
    scale and device). Raises TunerError when there is none."""
    which = options.resume
    rows = [r for r in leaderboard.read(options.results, workload=workload).to_pylist()
            if r["scale"] == scale and r["device"] == device]
    runs: dict[str, list[dict]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], []).append(r)
    if not runs:
        raise TunerError(f"--resume: no run of {workload} at {scale} scale on "
                         f"{device} in {options.results}")
    if which == "latest":
        earliest = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        which = max(runs, key=lambda rid: max(
            (r["started_at"] for r in runs[rid] if r["started_at"] is not None),
            default=earliest))
    if which not in runs:
        raise TunerError(f"--resume {which}: no such run; runs of {workload} here: "
                         f"{', '.join(sorted(runs))}")
    return which, tuple(leaderboard.normalise_row(r) for r in runs[which])


def checked_data(workload: Workload, data: str | None, scale: str) -> tuple[Path, int]:
    """The data a command reads (``run``, ``profile``, ``validate``), checked before anything
    is measured: ``data`` (``--data``; None: the workload's embedded data, written to the
    cache once) must exist in the form the workload takes (a directory, not empty; or one
    file), and ``workload.check_data`` must pass (the built-ins decode every file).

    Returns:
        (the resolved data path, the number of samples ``check_data`` counted).

    Raises:
        DataError: naming ``--data`` or the file that fails, in one line.
    """
    data_dir = _data_dir(workload, data, scale)
    return data_dir, workload.check_data(data_dir, scale)


def _device_space(space: Space, workload: Workload, options: RunOptions, resources: Resources,
                  scale: str, samples: int, notes: list[str]) -> Space:
    """The space a run samples on its device (``Space.for_device``), less what cannot change
    anything there: ``channels_last`` for a model without Conv2d/3d, bf16 on a CPU that only
    emulates it (said in ``notes``); fitted to ``--global-batch-size``."""
    device = resources.device
    device_space = space.for_device(device, max_workers=resources.node_cpus, max_batch=samples)
    if options.world_size > 1:
        device_space = device_space.for_world_size(options.world_size, resources.node_cpus)
    if not has_image_layout(workload, scale):  # no Conv2d/3d: channels_last changes nothing
        device_space = device_space.fixed("channels_last", False)
    amp = device_space.domains.get("amp")
    if (device == "cpu" and options.address is None
            and "bf16" in getattr(amp, "values", ()) and not cpu_has_native_bf16()):
        device_space = device_space.without("amp", "bf16")
        notes.append("amp=bf16 is not searched: this CPU has no native bf16 (AVX512-BF16, AMX "
                     "or Arm BF16 in /proc/cpuinfo), where torch emulates it through fp32 (~10x "
                     "slower than fp32 for ddpm on a 2-core AVX2 EPYC); a reference using it "
                     "still runs")
    if options.global_batch_size is not None:
        n = options.world_size
        if options.global_batch_size % n:
            raise TunerError(f"--global-batch-size {options.global_batch_size} is not a multiple "
                             f"of --world-size {n}: each rank takes an equal share")
        device_space = device_space.with_global_batch(options.global_batch_size // n)
    return device_space


def check_limits(options: RunOptions, device: str) -> list[str]:
    """Check ``--max-memory`` and ``--max-host-memory`` against the machine the trials run on
    (this one; on a cluster, ``--address``, the nodes' memory is not known here and a size
    larger than a node's is that node's memory, ``MemoryLimit.resolve_mib``).

    Returns:
        Notes for options that do nothing here: ``--max-memory`` on the CPU device.

    Raises:
        TunerError: a size larger than this machine's RAM (psutil) or, on CUDA, than the
            smallest visible GPU's memory (torch), naming that figure.
    """
    notes = []
    if options.max_memory is not None and device != "cuda":
        notes.append(f"--max-memory {_shown(options.max_memory)} does nothing on the CPU "
                     "device (it limits GPU memory); host memory is --max-host-memory")
    if options.address is not None:
        return notes
    if options.max_memory is not None and device == "cuda":
        import torch
        props = min((torch.cuda.get_device_properties(i)
                     for i in range(torch.cuda.device_count())), key=lambda p: p.total_memory)
        _check_size("--max-memory", options.max_memory, props.total_memory / 2**20,
                    f"the memory of this machine's GPU ({props.name})")
    if options.max_host_memory is not None:
        import psutil
        _check_size("--max-host-memory", options.max_host_memory,
                    psutil.virtual_memory().total / 2**20, "this machine's RAM")
    return notes


def _check_size(flag: str, limit: MemoryLimit, total_mib: float, what: str) -> None:
    """Raise TunerError when ``limit`` is a size above ``total_mib`` MiB (``what`` has it)."""
    if limit.mib is not None and limit.mib > total_mib:
        raise TunerError(f"{flag} {_shown(limit)}: more than {what}, {total_mib / 1024:,.1f} GiB "
                         f"({total_mib:,.0f} MiB); give a size up to that, or a fraction such "
                         "as 0.8")


def _shown(limit: MemoryLimit) -> str:
    return limit.text or str(limit)


def _local_hardware_key(device: str) -> str:
    import torch

    from tuner.hardware import fingerprint
    return fingerprint(torch.device(device))["hardware_key"]


def _has_earlier_rows(options: RunOptions, workload: str, scale: str, device: str,
                      run_id: str) -> bool:
    """Whether ``--warm-start`` finds rows to seed from (``Plan._seed_rows`` reads them once
    Ray knows the hardware key: here, without ``--address``, this machine's key)."""
    key = _local_hardware_key(device) if options.address is None else None
    table = leaderboard.read(options.results, workload=workload, hardware_key=key)
    return any(_is_earlier_row(r, run_id, scale) for r in table.to_pylist())


def _is_earlier_row(row: dict, run_id: str, scale: str) -> bool:
    """A row ``--warm-start`` seeds the search with: another run's measured search or
    re-measure row at this scale."""
    return (row["run_id"] != run_id and row["scale"] == scale
            and row["status"] in TELLS_MEMORY and phase_of(row) in (Phase.SEARCH, Phase.REMEASURE))


def resolve_workload(options: RunOptions) -> Workload:
    """The run's workload: ``options.workload`` resolved (``tuner.workload_loader.resolve``) and
    configured with ``options.workload_options`` (--model, --image-size).

    Raises:
        TunerError: an unknown workload, an option it does not take, or a value it rejects.
    """
    return configured(resolve(options.workload), options.workload_options)


def _data_dir(workload: Workload, data: str | None, scale: str) -> Path:
    if data is None:
        return workload.prepare_default_data(default_cache_dir() / "data", scale)
    path = Path(data).expanduser().resolve()
    if workload.data_is_file:
        if not path.is_file():
            raise DataError(f"--data {data}: no such file (workload {workload.name} "
                            "takes one text file)")
    elif not path.is_dir():
        raise DataError(f"--data {data}: no such directory")
    elif not any(path.iterdir()):
        raise DataError(f"--data {data}: the directory is empty")
    return path


def _host_limit_mb(limit: MemoryLimit | None) -> float | None:
    """The host memory limit in MiB, a fraction resolved against this machine's RAM."""
    if limit is None:
        return None
    import psutil
    return limit.resolve_mib(psutil.virtual_memory().total / 2**20)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA device is visible, else 'cpu'. Raises TunerError."""
    import torch
    if device not in DEVICES:
        raise TunerError(f"--device {device!r}: accepted values are {', '.join(DEVICES)}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise TunerError("--device cuda: no CUDA device is visible to torch on this machine")
    return device


__getattr__ = moved(__name__, {name: "tuner.budget" for name in (
    "FOLLOWUP_SHARE", "MAX_FOLLOWUP_SHARE", "PLAN_AGE_S")})
