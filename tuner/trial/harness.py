"""One measured trial: build, apply knobs, warm up, measure in windows, report.

The loop reads like nanoGPT's ``bench.py``: warm-up steps (compile, cuDNN autotuning and worker
start-up land there and are recorded, not measured), then timed windows between device
synchronisations. Windows cross epoch boundaries, so the per-epoch worker restart that
``persistent_workers`` removes is part of the measured cost. Whether the trial had reached its
steady state is judged from the windows themselves: a first window out of line with the others
is warm-up, dropped and replaced (the rule: ``tuner.windows``).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch

import tuner.budget as budget
import tuner.windows as rule
from tuner.errors import DeadlineReached, TrialFailure  # noqa: F401  (re-exported)
from tuner.hardware import node_id
from tuner.knobs import Knobs
from tuner.settings import PHASES, TrialSettings, default_cache_dir
from tuner.status import Status
from tuner.trial import compile_artifacts
from tuner.trial.apply import (
    build_training,
    cycle,
    keep_cpu_trial_off_the_gpus,
    move_batch,
    trial_state,
)
from tuner.trial.measure import (
    GpuTelemetry,
    HostMemorySampler,
    LimitExceeded,
    LoadMonitor,
    Stopwatch,
    Window,
    counted_window,
    peak_device_memory_mb,
    summarise,
    synchronize,
)
from tuner.trial.prefetch import QueueWatch
from tuner.trial.ranks import Rank, RankFigures, follow
from tuner.trial.result_columns import (
    WINDOW_REPORT_KEYS,
    compile_columns,
    environment_columns,
    failure_columns,
    fallback_columns,
    rate_columns,
    timeout_columns,
)
from tuner.trial.steppers import (
    LoaderStepper,
    Stepper,
    batch_source,
    held_cache_bytes,
    on_device,
    phase_columns,
    phase_timer,
    resident,
)
from tuner.trial.steppers import breakdown as _breakdown
from tuner.workload import Workload

Report = Callable[[dict], None]


def _check_deadline(settings: TrialSettings, where: str) -> None:
    """Raise DeadlineReached("<where>") once the trial's deadline has passed."""
    if settings.deadline_unix_s is not None and time.time() >= settings.deadline_unix_s:
        raise DeadlineReached(where)


def _check_compile_fits(workload: Workload, knobs: Knobs, settings: TrialSettings) -> None:
    """Raise DeadlineReached before a compile that cannot finish in the run's time left
    (``tuner.budget.compile_refusal``; warm where the run's compile cache holds it,
    ``tuner.trial.compile_artifacts.compiled_before``): the trial is recorded as ``timeout``
    without starting it. A loader-only trial (a ceiling: the configuration's DataLoader, no
    model) compiles nothing, whatever its knobs say."""
    if settings.loader_only or settings.deadline_unix_s is None:
        return
    device = torch.device(settings.device).type
    refusal = budget.compile_refusal(
        knobs.compile, workload, device, settings.deadline_unix_s - time.time(),
        warm=compile_artifacts.compiled_before(workload.name, knobs, settings, device))
    if refusal is not None:
        raise DeadlineReached(refusal)


def make_trainable(workload: Workload) -> Callable[[dict], None]:
    """A Ray Tune function trainable for ``workload``.

    The config holds knob values (see ``tuner.knobs.Knobs``) and, under the key ``"tuner"``, the
    trial settings (``tuner.trial.harness.TrialSettings`` fields: scale, device, data_dir,
    windows...).
    Each measurement window is reported with ``ray.tune.report``.
    """

    return named_trainable(workload, run_tune_trial, "trainable")


def named_trainable(workload: Workload, run: Callable[[Workload, dict], Any],
                    suffix: str) -> Callable[[dict], None]:
    """``run(workload, config)`` as a fresh function named ``<workload>_<suffix>`` (Ray Tune
    names trial directories after it; ``tune.with_resources`` marks the function object)."""

    def trainable(config: dict) -> None:
        run(workload, config)

    trainable.__name__ = f"{workload.name}_{suffix}"
    trainable.__qualname__ = trainable.__name__
    return trainable


def run_tune_trial(workload: Workload, config: dict) -> None:
    """Ray Tune entry point: config = knob values + ``"tuner"`` (TrialSettings fields). Every
    report carries the CPUs and GPUs Ray gave the trial (``trial_cpus``, ``trial_gpus``)."""
    import ray
    from ray import tune

    settings = TrialSettings(**config["tuner"])
    keep_cpu_trial_off_the_gpus(settings.device)
    assigned = ray.get_runtime_context().get_assigned_resources()
    # The CPUs Ray gave the trial: its own num_workers + 1 beside other trials, the whole node
    # when it runs alone (TrialResources.whole_node), where the training process then gets
    # every CPU its DataLoader workers leave (training_threads).
    cpus = int(assigned["CPU"]) if assigned.get("CPU") else None
    given = {"trial_cpus": None if cpus is None else float(cpus),
             "trial_gpus": assigned.get("GPU", 0.0)}
    run_trial(workload, config, settings, report=lambda result: tune.report({**result, **given}),
              cpus=cpus)


def training_threads(num_workers: int, cpus: int) -> int:
    """Intra-op threads of the training process: the trial's ``cpus`` less one per DataLoader
    worker (``num_workers``), at least 1, so that workers and training do not oversubscribe
    the same CPUs (docs/defaults.md has the measurements)."""
    return max(1, cpus - num_workers)


# One trial top to bottom (build, warm up, windows, breakdown, result): kept whole so that its
# order, which the measurement depends on, reads in one place.
def run_trial(workload: Workload, knobs: Knobs | dict, settings: TrialSettings,
              report: Report | None = None, cpus: int | None = None,
              rank: Rank | None = None) -> dict:
    """Run one trial and return its final result (also the last thing reported).

    Args:
        workload, knobs: what to train, and how (a Knobs, or a mapping: a Ray Tune config).
        settings: measurement settings.
        report: called with each window's result and then the final one (``ray.tune.report``).
        cpus: CPUs given to the trial: a CPU trial trains on ``training_threads`` of them.
        rank: rank 0 of a data-parallel trial (``tuner.trial.ranks``, ``tuner.trial.distributed``).

    Returns:
        A dict: ``status`` ('ok', 'oom', 'over_limit', 'error'; 'timeout' past the deadline,
        with the windows finished by then), the knobs, ``clamped`` notes, ``samples_per_sec``
        (median over windows; 0.0 unless ok: Ray Tune requires the metric), spread, step time
        p50/p95 (ms), warm-up, peak memory (MiB), hardware and versions. Failures are caught
        and returned, never raised: the run goes on."""
    report = report or (lambda result: None)
    device = torch.device(settings.device)
    started_at = _now()
    result: dict[str, Any] = {"status": Status.ERROR, "error": None, "samples_per_sec": 0.0,
                              "windows_planned": settings.windows,
                              "world_size": settings.world_size,
                              **environment_columns(device, settings.accelerator_type)}
    try:
        applied, clamped = _clamp(knobs, device)
    except ValueError as exc:
        result.update(error=f"invalid knobs: {exc}", started_at=started_at, finished_at=_now())
        report(result)
        return result
    result.update(applied.to_dict(), clamped="; ".join(clamped) or None, ceiling=settings.ceiling)
    units = workload.units_per_sample(settings.scale)
    # The compute-only ceiling trains with the configuration's threads (given the workers'
    # CPUs too it would beat the configuration); a one-core ceiling runs on one of them.
    cpus = settings.cpus or cpus
    threads = None if cpus is None else training_threads(applied.num_workers, cpus)

    def on_window(window: dict) -> None:
        # the compile columns so far: a row the run writes from this report (stopped past
        # the time budget) says whether the trial had fallen back to eager
        report({**result, **window, **compile_columns(applied), "status": Status.RUNNING})

    sampler = HostMemorySampler(limit_mb=settings.max_host_memory_mb,
                                held_bytes=held_cache_bytes(applied, settings.keep_cache))
    with trial_state(applied, device, threads=threads, max_memory=settings.max_memory,
                     compile_cache_dir=settings.compile_cache_dir) as state:
        result.update(torch_threads=state.threads, omp_num_threads=state.omp_num_threads,
                      max_memory_mb=state.limit_mb,
                      max_host_memory_mb=settings.max_host_memory_mb)
        sofar: dict[str, Any] = {}  # what _measure has measured, kept when the budget runs out
        try:  # caught inside trial_state, so that the failure's frames are freed on its exit
            with sampler:
                result.update(_measure(workload, applied, settings, device, sampler, on_window,
                                       sofar, rank), status=Status.OK)
            _check_limits(result["peak_device_memory_mb"], state.limit_mb, sampler)
        except DeadlineReached as exc:  # the run's time budget: the finished windows are kept
            result.update(timeout_columns(sofar, str(exc), settings))
        except Exception as exc:  # recorded with its traceback and status; the run goes on
            result.update(failure_columns(exc, device))
        result.update(compile_columns(applied))  # before trial_state's compiler reset
        result.update(fallback_columns(result))
    if result["status"] in (Status.OK, Status.TIMEOUT) and result["samples_per_sec"] is not None:
        result.update(rate_columns(units, settings, applied, result))
    result.update(peak_host_memory_mb=sampler.peak_mb, started_at=started_at, finished_at=_now())
    report(result)
    return result


def _clamp(knobs: Knobs | dict, device: torch.device) -> tuple[Knobs, list[str]]:
    """The knobs as applied on ``device`` and the clamping notes. Raises ValueError."""
    if not isinstance(knobs, Knobs):
        knobs = Knobs.from_dict(knobs, strict=False)
    bf16 = device.type != "cuda" or torch.cuda.is_bf16_supported()
    return knobs.clamp(device.type, bf16_supported=bf16)


def _check_limits(peak_device_mb: float | None, limit_mb: float | None,
                  sampler: HostMemorySampler) -> None:
    """Raise LimitExceeded when the trial's peak device or host memory went over its limit."""
    if limit_mb is not None and peak_device_mb is not None and peak_device_mb > limit_mb:
        raise LimitExceeded(f"peak device memory {peak_device_mb:,.0f} MB (allocator + CUDA "
                            f"context) is over the limit of {limit_mb:,.0f} MB", "device")
    if sampler.limit_mb is not None and sampler.peak_mb > sampler.limit_mb:
        raise LimitExceeded(f"peak host memory {sampler.peak_mb:,.0f} MB (process + workers) "
                            f"is over the limit of {sampler.limit_mb:,.0f} MB", "host")


# One function: the set-up, warm-up, windows and breakdown fill one ``sofar`` in order, and a
# trial stopped in any of them keeps what it holds.
def _measure(workload: Workload, knobs: Knobs, settings: TrialSettings, device: torch.device,
             sampler: HostMemorySampler, on_window: Report, sofar: dict, rank: Rank | None = None
             ) -> dict:
    """Build, warm up, measure windows, time the phases. ``sofar`` collects the measurement as
    it goes (set-up, compile and warm-up times, the windows' summary), so that a trial the time
    budget stops (DeadlineReached) keeps it. Raises on any failure."""
    _check_deadline(settings, "set-up")
    _check_compile_fits(workload, knobs, settings)
    compile_artifacts.start_trial(knobs)
    stepper, setup_s = _build(workload, knobs, settings, device, sampler, sofar, rank)
    sofar["setup_s"] = setup_s  # a fresh job fills its cache: a kept one counts in its time
    fresh_setup_s = setup_s + (sofar["cache_fill_s"] if sofar.pop("cache_kept") else 0.0)
    try:
        # Warm-up: compile, autotuning, allocator growth, worker start-up. Recorded, not measured.
        last_step, settle_s = _warm_up(stepper, device, settings, sofar)
        compile_artifacts.save_trial(workload.name, knobs, settings, device.type,
                                     0 if rank is None else rank.rank)
        if not torch.isfinite(stepper.loss):
            raise TrialFailure(f"loss is {stepper.loss.item()} after warm-up")

        warm_steps = [stepper.steps_run]  # steps of the warm-up, windows dropped included

        def time_to_train(step_time_ms: float) -> float:  # warm-up as measured when asked
            return _time_to_train(settings, fresh_setup_s, sofar["warmup_s"], warm_steps[0],
                                  step_time_ms)

        if last_step is not None:  # steps of seconds: early stopping may judge one already
            on_window(_warm_up_report(sofar, *last_step, settings, time_to_train))

        def window_done(window: dict) -> None:  # each report carries the memory peaks so far
            sofar.update(window, peak_device_memory_mb=peak_device_memory_mb(device),
                         peak_host_memory_mb=sampler.peak_mb)
            on_window(dict(sofar))

        def window_dropped(window: Window, kept: list[Window]) -> None:
            # Warm-up from now on: a trial the budget stops in the window measured in its
            # place is recorded with the windows kept, not with the transient.
            warm_steps[0] += window.steps + window.skipped
            sofar.update(summarise(kept), warmup_s=sofar["warmup_s"] + window.seconds,
                         steady_probes=sofar["steady_probes"] + 1)

        # The per-phase breakdown: inside the windows on CPU (free), after them on CUDA.
        phases = [] if device.type == "cpu" and settings.breakdown_steps > 0 else None
        with GpuTelemetry(device) as telemetry, LoadMonitor(device) as load, sampler.measuring():
            windows, dropped = _windows(stepper, device, settings, window_done, time_to_train,
                                        settle_s, phases, window_dropped)
        # The steady state was judged from the windows (not for steps of half a window or
        # more, which keep steady_state null): dropped ones warmed up (``window_dropped``).
        if settle_s > 0 and (dropped or not _long_windows(windows, settings)):
            sofar.update(steady_state=not rule.unsteady([w.samples_per_sec for w in windows],
                                                        settings.steady_tolerance))
        summary = summarise(windows)
        out = {**sofar, **summary, **load.as_columns(summary["samples_per_sec"])}
        out.update(peak_device_memory_mb=peak_device_memory_mb(device),
                   gpu_util_pct=telemetry.util_pct, gpu_power_w=telemetry.power_w,
                   final_loss=None if settings.loader_only
                   else float(stepper.loss.detach().float().item()) * knobs.grad_accum)
        for key in WINDOW_REPORT_KEYS:
            out.pop(key, None)
        out.update(_breakdown_after(stepper, device, settings, windows, phases))
        if settings.train_steps is not None:
            out["time_to_train_s"] = time_to_train(out["step_time_ms_p50"])
        return out
    finally:
        stepper.batches.close()  # shuts DataLoader workers down, also after a failure


def _warm_up(stepper: "Stepper", device: torch.device, settings: TrialSettings,
             sofar: dict) -> tuple[tuple[int, float] | None, float]:
    """Warm-up steps, recorded in ``sofar`` (``first_step_s``, ``warmup_s``, ``steady_state``,
    ``steady_probes``). After the first step (compile and autotuning land there, however long)
    the warm-up stops at ``max_warmup_s`` (default: twice the windows' length); without
    torch.compile a step the last one says would end past it is not started.

    Returns (last step, settle seconds). Last step: when a warm-up step after the first is a
    ``tuner.windows.long_step`` (no steady state is judged, ``steady_state`` null), the
    samples and seconds of the last one, which ``_measure`` reports for early stopping; None
    otherwise. With one warm-up step the windows alone judge the steady state. Settle seconds:
    what is left of the cap for windows dropped as warm-up (``_windows``, with two windows or
    more); 0 when nothing is judged there: one window (half-window probes judge it here,
    ``_probe_until_steady``), long steps, the cap spent, or ``max_steady_probes`` 0."""
    clock = Stopwatch()
    stepper.step()
    synchronize(device)
    first_step_s = step_s = clock.elapsed()
    last = None
    sofar.update(first_step_s=first_step_s, warmup_s=first_step_s)
    cap_s = (settings.max_warmup_s if settings.max_warmup_s is not None
             else 2 * settings.windows * settings.window_s)
    # Without torch.compile (whose first steps may compile again) a step the last one says
    # would end past the cap is not started: the first step held the one-time costs, and a
    # repeated step of tens of seconds would measure nothing.
    predictable = stepper.knobs.compile == "off"
    for _ in range(settings.warmup_steps - 1):
        spent_s = clock.elapsed() - first_step_s
        if spent_s >= cap_s or (predictable and spent_s + step_s > cap_s):
            break
        _check_deadline(settings, "warm-up")
        step = Stopwatch()
        samples = stepper.step()
        synchronize(device)
        step_s = step.elapsed()
        last = (samples, step_s) if step_s > 0 else None
        sofar["warmup_s"] = clock.elapsed()
    # With one warm-up step (the tiny scale's default) nothing says how long a step is: the
    # first holds the one-time costs, so the windows judge the steady state.
    long_steps = settings.warmup_steps > 1 and rule.long_step(step_s, settings.window_s)
    left_s = cap_s - (clock.elapsed() - first_step_s)
    judged = not long_steps and left_s > 0 and settings.max_steady_probes > 0
    # the rule the cost model prices a trial's probes with (``budget.trial_cost_s``)
    probing = rule.least_steady_probes(
        step_s, settings.window_s, windows=settings.windows, warmup_steps=settings.warmup_steps,
        max_probes=settings.max_steady_probes, cap_left_s=left_s) > 0
    steady, probes = (_probe_until_steady(stepper.step, device, settings, left_s) if probing
                      else (None, 0))
    synchronize(device)
    sofar.update(warmup_s=clock.elapsed(), steady_state=steady, steady_probes=probes)
    settle_s = left_s if judged and settings.windows >= 2 else 0.0
    return last if long_steps else None, settle_s


def _warm_up_report(sofar: dict, samples: int, step_s: float, settings: TrialSettings,
                    time_to_train: Callable[[float], float]) -> dict:
    """The report after a warm-up of long steps (``window`` -1, before any window): the last
    warm-up step's samples/sec as the objective so far, for early stopping (``tuner.pruning``;
    a trial stopped here is recorded ``pruned`` with this figure and no window)."""
    out = {**sofar, "window": -1, "window_samples_per_sec": None,
           "samples_per_sec": samples / step_s}
    if settings.train_steps is not None:  # Ray Tune wants the objective in every result
        out["time_to_train_s"] = time_to_train(1000 * step_s)
    return out


def _build(workload: Workload, knobs: Knobs, settings: TrialSettings, device: torch.device,
           sampler: HostMemorySampler, sofar: dict,
           rank: Rank | None = None) -> tuple[Stepper, float]:
    """Seed, the data path's batches (``tuner.trial.steppers.batch_source``: a cache fill's seconds
    go to ``sofar['cache_fill_s']``, whether it was kept from an earlier trial to
    ``sofar['cache_kept']``), model and optimizer: the batches cycled across epochs,
    or for the compute-only ceiling batches already on the device. Returns the stepper and
    the set-up time, s (a cache fill included). With ``rank``: its share of the samples, a
    seed of its own, the model in DDP, the stepper timed and in lockstep (``Rank.timed``)."""
    setup = Stopwatch()
    torch.manual_seed(settings.seed + (rank.rank if rank else 0))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    data_dir = Path(settings.data_dir)
    if settings.default_data and not data_dir.exists():
        data_dir = workload.prepare_default_data(default_cache_dir() / "data", settings.scale)
    loader, fill_s, kept = batch_source(workload, knobs, data_dir, settings.scale, device,
                                        partial(_check_deadline, settings, "cache fill"),
                                        None if rank is None else rank.shard,
                                        keep=settings.keep_cache, only=(
                                            settings.resident_batches * knobs.batch_size
                                            if settings.compute_only else settings.sample_limit))
    sofar["cache_fill_s"] = fill_s
    sofar["cache_kept"] = kept  # for _measure (not a column)
    if settings.loader_only:  # no model: what the input pipeline alone delivers
        return LoaderStepper(workload, knobs, cycle(loader),
                             partial(move_batch, device=device, knobs=knobs)), setup.elapsed()
    training = build_training(workload, knobs, settings.scale, device, rank is not None)
    if settings.compute_only:
        batches, move = resident(loader, device, knobs, settings.resident_batches), on_device
    else:
        batches, move = cycle(loader), partial(move_batch, device=device, knobs=knobs)
    stepper = Stepper(training, batches, move, sampler)
    return (stepper if rank is None else rank.timed(stepper)), setup.elapsed()


def follow_trial(workload: Workload, knobs: Knobs | dict, settings: TrialSettings, rank: Rank,
                 cpus: int | None = None) -> RankFigures:
    """A rank > 0 of a data-parallel trial: rank 0's knobs, threads, data path and model,
    stepping whenever rank 0 does (``tuner.trial.ranks.follow``). Raises what a step raises."""
    device = torch.device(settings.device)
    applied, _ = _clamp(knobs, device)
    threads = None if cpus is None else training_threads(applied.num_workers, cpus)
    sampler = HostMemorySampler(limit_mb=settings.max_host_memory_mb,
                                held_bytes=held_cache_bytes(applied, settings.keep_cache))
    with trial_state(applied, device, threads=threads, max_memory=settings.max_memory,
                     compile_cache_dir=settings.compile_cache_dir), sampler:
        stepper, _ = _build(workload, applied, settings, device, sampler, {}, rank)
        follow(stepper, rank)
        return RankFigures(rank.rank, rank.samples, rank.data_wait_s,
                           peak_device_memory_mb(device), node_id())


def _windows(stepper: "Stepper | LoaderStepper", device: torch.device, settings: TrialSettings,
             on_window: Report, time_to_train: Callable[[float], float],
             settle_s: float = 0.0, phases: list[dict[str, float]] | None = None,
             on_drop: Callable[[Window, list[Window]], None] | None = None
             ) -> tuple[list[Window], list[Window]]:
    """``settings.windows`` timed windows of at least ``window_s`` each, between device
    synchronisations (nothing synchronises inside one). Each window's result goes to
    ``on_window``, with the median so far of the windows kept (and ``time_to_train_s`` when
    ``train_steps`` is set).

    With ``settle_s`` > 0 the steady state is judged from the windows themselves: until the
    window rule says they stand (``tuner.windows.windows_stand``), the first kept window is
    dropped as warm-up and one more measured. With ``phases`` (a list, CPU only) each kept
    window's per-phase seconds are appended to it (``_timed_window``). ``on_drop(window,
    kept)`` is called for each window dropped, with the windows kept. Returns (windows kept,
    windows dropped)."""
    kept: list[Window] = []
    dropped: list[Window] = []
    faster: bool | None = None  # whether the windows dropped were faster than the rest
    index = 0
    while True:
        window_phases = None if phases is None else {**dict.fromkeys(PHASES, 0.0), "steps": 0}
        kept.append(_timed_window(stepper, device, settings, index, window_phases))
        if phases is not None:
            phases.append(window_phases)
        # The summary so far (median, spread, windows): a trial stopped after this window
        # (pruned, or at the time budget) is recorded with it.
        # ``window_settling``: until all windows are in, the first may still be dropped as a
        # transient and the median holds it (early stopping judges it as one warm-up step,
        # never a best); ``windows_dropped``: windows dropped so far; ``windows_long``: each
        # holds one or two whole steps (``_long_windows``), whose spread is not window noise.
        long = _long_windows(kept, settings)
        partial_result = {"window": index, "window_samples_per_sec": kept[-1].samples_per_sec,
                          "window_settling": (settle_s > 0 and index < settings.windows - 1
                                              and not long),
                          "windows_dropped": len(dropped), "windows_long": long,
                          **summarise(kept)}
        if settings.train_steps is not None:  # Ray Tune wants the objective in every result
            partial_result["time_to_train_s"] = time_to_train(
                statistics.median(w.step_time_ms for w in kept))
        on_window(partial_result)
        index += 1
        if len(kept) < settings.windows:
            continue
        if _windows_stand(kept, dropped, faster, settings, settle_s):
            return kept, dropped
        faster = rule.deviation([w.samples_per_sec for w in kept]) > 0
        dropped.append(kept.pop(0))
        if phases is not None:
            phases.pop(0)
        if on_drop is not None:
            on_drop(dropped[-1], kept)


def _timed_window(stepper: "Stepper | LoaderStepper", device: torch.device,
                  settings: TrialSettings, index: int,
                  phases: dict[str, float] | None = None) -> Window:
    """One timed window (``index`` counts from 0): steps until ``window_s`` has passed, then a
    device synchronisation; where DataLoader workers prefetch, only what they sustain is
    counted (``tuner.trial.prefetch.QueueWatch``: the window may run on past ``window_s``
    until the batches queued before it are used up). Steps the fp16 GradScaler skipped are not
    counted as measured ones
    (``counted_window``): its scale is read at the synchronised ends, outside the timed span.
    With ``phases`` (CPU only: nothing to synchronise, so timing costs two clock reads a
    phase), each phase's seconds over the window's steps are added to it, with ``"steps"``.
    Raises DeadlineReached past the run's deadline, before its first step too (an unfinished
    window is dropped: a window begun past it would run a step for nothing, and one longer
    than ``tuner.budget.OVERDUE_S`` gets its process killed), and TrialFailure when the
    scaler skipped every step."""
    _check_deadline(settings, f"window {index + 1}")
    synchronize(device)
    scale_before = stepper.loss_scale()
    queue = QueueWatch.begin(stepper, settings.window_s)  # batches prefetched before it
    t0 = time.perf_counter()
    timer = None if phases is None else phase_timer(phases, t0)
    steps = samples = 0
    while True:
        queue.before_step()
        samples += stepper.step(timer)
        steps += 1
        if phases is not None:
            phases["steps"] += 1
        elapsed_s = time.perf_counter() - t0
        queue.after_step(steps, samples, elapsed_s)
        if elapsed_s >= settings.window_s and queue.done(steps, elapsed_s):
            break
        _check_deadline(settings, f"window {index + 1}")
    synchronize(device)  # the window ends when the device has finished its work
    steps, samples, seconds = queue.counted(steps, samples, time.perf_counter() - t0)
    try:
        return counted_window(steps, samples, seconds, scale_before, stepper.loss_scale())
    except ValueError as exc:
        raise TrialFailure(f"window {index + 1}: {exc}") from None


def _long_windows(windows: list[Window], settings: TrialSettings) -> bool:
    """Whether the windows' median step takes half a window or more
    (``tuner.windows.long_windows``): no steady state is judged from them."""
    return rule.long_windows([w.step_time_ms for w in windows], settings.window_s)


def _windows_stand(kept: list[Window], dropped: list[Window], faster: bool | None,
                   settings: TrialSettings, settle_s: float) -> bool:
    """``tuner.windows.windows_stand`` for the windows ``kept`` and ``dropped`` so far."""
    return rule.windows_stand(
        [w.samples_per_sec for w in kept], [w.seconds for w in kept],
        [w.step_time_ms for w in kept], [w.seconds for w in dropped], faster,
        window_s=settings.window_s, tolerance=settings.steady_tolerance,
        max_drops=settings.max_steady_probes, settle_s=settle_s)


def _probe_until_steady(train_step: Callable, device: torch.device, settings: TrialSettings,
            time_cap_s: float = math.inf) -> tuple[bool, int]:
    """Warm up until throughput is steady: synchronised probes of half a window each, until two
    consecutive ones agree within ``steady_tolerance``, at most ``max_steady_probes`` of them
    and no new one after ``time_cap_s`` seconds. Returns (steady, probes run)."""
    previous = None
    started = time.perf_counter()
    for probe in range(1, settings.max_steady_probes + 1):
        if probe > 1 and time.perf_counter() - started >= time_cap_s:
            return False, probe - 1
        _check_deadline(settings, "warm-up")
        synchronize(device)
        t0 = time.perf_counter()
        samples = 0
        while time.perf_counter() - t0 < settings.window_s / 2:
            samples += train_step()
        synchronize(device)
        rate = samples / (time.perf_counter() - t0)
        if previous is not None and rule.rates_agree(rate, previous, settings.steady_tolerance):
            return True, probe
        previous = rate
    return False, settings.max_steady_probes


def _time_to_train(settings: TrialSettings, setup_s: float, warmup_s: float,
                   warmup_steps: int, step_time_ms: float) -> float:
    """Predicted wall time of the user's ``train_steps``-step job: setup (dataset, model,
    workers), the ``warmup_steps`` steps of the warm-up as measured in ``warmup_s`` (compile,
    steady-state probes and windows dropped as warm-up included), the rest at steady state."""
    remaining = max(0, settings.train_steps - warmup_steps)
    return setup_s + warmup_s + remaining * step_time_ms / 1000


def _breakdown_after(stepper: "Stepper | LoaderStepper", device: torch.device,
                     settings: TrialSettings, windows: list[Window],
                     phases: list[dict[str, float]] | None) -> dict:
    """The per-phase breakdown columns once the windows are in: summed from the windows'
    ``phases`` (CPU), else timed in ``breakdown_steps`` synchronised steps (one for long
    steps; none that would end past the deadline at the windows' slowest step: the windows
    are measured, and a trial still stepping past the deadline is stopped by the recorder,
    ``tuner.budget.OVERDUE_S``)."""
    if phases is not None:
        return phase_columns({p: sum(w[p] for w in phases) for p in PHASES},
                              sum(w["steps"] for w in phases))
    steps = (min(1, settings.breakdown_steps) if _long_windows(windows, settings)
             else settings.breakdown_steps)
    slowest_s = max(w.step_time_ms for w in windows) / 1000
    if (settings.deadline_unix_s is not None
            and time.time() + steps * slowest_s >= settings.deadline_unix_s):
        steps = 0
    return _breakdown(stepper.step, device, steps)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
