"""The search's policy on a plan (``tuner.plan.Plan``): which values its device space keeps, and
where the search starts.

* ``narrow_space``, as the plan is made: the data paths whose decoded samples fit in memory,
  ``cudnn_benchmark`` where it can change a rate (decided at the finalists when the search
  screens), ``torch.compile`` decided at the finalists under a time budget (else the modes
  the budget can hold); each value left out is said once in the plan's notes.
* ``with_compute_curve``, once the memory probe has timed its steps: the batch range from
  ``KNEE_LOW_FRACTION`` of the knee, the worker range past the cores where the input pipeline
  waits (``workers_past_the_cores``), and the machine's structured points (``anchor_points``)
  the search starts from after the references.
* ``SCREENED_TRIALS_FACTOR``: the trials of a screened run without ``--trials``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

import tuner.budget as budget
from tuner.compile_finalists import finalist_mode
from tuner.errors import TunerError
from tuner.knobs import COMPUTE_SWITCHES, Knobs
from tuner.plan import Plan
from tuner.probe import ComputeCurve, InputRate, feeding, input_waits, offered_paths
from tuner.settings import MemoryLimit, device_limit_mb
from tuner.space import Choices, IntRange, Space

SCREENED_TRIALS_FACTOR = 3
"""A run without ``--trials`` whose searched trials are screened (``RunOptions.screen_windows``)
plans this many times the trials of one that measures each in full (40 on CUDA, 12 on CPU):
a screening trial of one window costs about a third of one of three to five."""


KNEE_LOW_FRACTION = 0.25
"""The searched batch range starts at this fraction of the knee (``ComputeCurve.knee_batch``)
once the probe has timed its steps: below it the step time is the per-step overhead, and a
log-uniform range down to the space's low end would spend most of its draws there."""


def narrow_space(plan: Plan) -> Plan:
    """The plan whose device space searches only what can change a rate on this run: the data
    paths that fit (``_data_paths``), ``cudnn_benchmark`` where it can (``_cudnn_benchmark``)
    and ``torch.compile`` at the finalists (``_compile_at_finalists``), else the compile modes
    the time budget holds (``_without_unaffordable_compile``); each value left out is said in
    ``Plan.notes``. A reference keeps its own values."""
    return _without_unaffordable_compile(_compile_at_finalists(_cudnn_benchmark(
        _data_paths(plan))))


def with_compute_curve(plan: Plan, curve: ComputeCurve | None, probe_knobs: Knobs | None,
                       input_rates: Sequence[InputRate] = ()) -> Plan:
    """The plan that starts its search from the machine's limit: the batch range's low end
    at ``KNEE_LOW_FRACTION`` of the knee, and the anchors (``anchor_points``, their data
    path from ``input_rates``). Unchanged for None (no curve: the search starts from the
    references alone)."""
    if curve is None:
        return plan
    low = max(1, int(curve.knee_batch * KNEE_LOW_FRACTION))
    plan = replace(plan, compute_curve=curve, input_rates=tuple(input_rates),
                   device_space=plan.device_space.with_batch_low(low))
    plan = workers_past_the_cores(plan)
    return replace(plan, anchors=anchor_points(plan, curve, probe_knobs))


def workers_past_the_cores(plan: Plan) -> Plan:
    """The plan whose ``num_workers`` range ends at the space file's own bound rather than the
    node's CPUs where the input pipeline waits (``tuner.probe.input_waits`` of
    ``Plan.input_rates``: its workers kept their cores mostly idle, as a read from network
    storage does), said in ``Plan.notes``; unchanged otherwise, or where that bound is not
    above the range's high."""
    dom = plan.device_space.domains.get("num_workers")
    bound = plan.space.workers_bound(plan.device)
    if (not isinstance(dom, IntRange) or bound is None or bound <= dom.high
            or not input_waits(plan.input_rates, plan.node_cpus)):
        return plan
    widest = max((r for r in plan.input_rates if r.samples_per_sec and r.num_workers),
                 key=lambda r: r.num_workers)
    note = (f"num_workers searched up to {bound}, past this node's {plan.node_cpus} CPUs: the "
            f"input pipeline waits on I/O ({widest.num_workers} workers kept "
            f"{widest.cpu_s_per_sample * widest.samples_per_sec:.2f} of their cores busy), "
            "so more workers than cores deliver more")
    return replace(plan, device_space=plan.device_space.with_workers_high(bound),
                   notes=(*plan.notes, note))


def anchor_points(plan: Plan, curve: ComputeCurve,
                  probe_knobs: Knobs | None) -> tuple[tuple[str, Knobs], ...]:
    """The machine's structured points, from the last reference (the recommended, or the
    baseline alone) and the compute curve:

    * 'machine': at the knee batch, in the precision the probe ran (the fastest the space
      searches), on the cheapest data path and worker count whose input pipeline alone feeds
      the knee's compute rate (``tuner.probe.feeding`` of ``Plan.input_rates``; none does: the
      fastest measured, or where the worker range goes past the node's CPUs, a pipeline that
      waits, its most workers); without input rates, on the cheapest data path the space
      allows (``tuner.probe.offered_paths``; 'device' without DataLoader workers) and the
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
    if plan.compile_at_finalists:  # screened eager: compile is decided at the finalists
        base = base.replace(compile="off")
    space = plan.device_space
    amp = probe_knobs.amp if probe_knobs is not None else base.amp
    machine = _waiting_workers(plan, base.replace(batch_size=curve.knee_batch, amp=amp).updated(
        _machine_input(space, base, feeding(plan.input_rates,
                                            curve.samples_per_sec(curve.knee_batch))))[0],
        curve.samples_per_sec(curve.knee_batch))
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


def _waiting_workers(plan: Plan, machine: Knobs, knee_samples_per_sec: float) -> Knobs:
    """The machine point ``machine`` with the most workers the search allows where its range
    goes past the node's CPUs (an input pipeline that waits: ``workers_past_the_cores``) and
    no measured input rate feeds the knee's ``knee_samples_per_sec``; else unchanged."""
    workers = plan.device_space.domains.get("num_workers")
    if (isinstance(workers, IntRange) and workers.high > plan.node_cpus and machine.num_workers
            and feeding(plan.input_rates, knee_samples_per_sec, strict=True) is None):
        return machine.replace(num_workers=workers.high, persistent_workers=True)
    return machine


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


def _compile_at_finalists(plan: Plan) -> Plan:
    """The plan that decides ``torch.compile`` at the finalists (``Plan.compile_at_finalists``)
    under a time budget with finalists (``--confirm`` > 0): the search screens eager (compile
    held 'off' for the sampler and the machine's structured points), and the re-measurement
    measures the first-ranked compiled beside its eager self, in the mode
    ``tuner.compile_finalists.finalist_mode`` picks from the space's compile choices as
    loaded. A device's override that holds compile off (the built-in spaces' on CPU) holds it
    off for the screening trials, which a compile would outlast, not for the finalists, whose
    compile is recorded apart (``compile_s``) and weighed by its pay-back
    (``tuner.compile_payback``). A compiled trial at one batch inside a screened search says
    little of the mode; at the finalists its rate pairs with the eager one of the same knobs.
    Unchanged without a time budget or finalists, or where the space offers no compile mode;
    a reference keeps its own value."""
    if plan.time_budget_s is None or plan.options.confirm <= 0:
        return plan
    dom = plan.space.domains.get("compile")
    mode = finalist_mode(dom.values if isinstance(dom, Choices) else (), plan.device)
    if mode is None:
        return plan
    return replace(plan, device_space=plan.device_space.fixed("compile", "off"),
                   compile_at_finalists=mode)


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
