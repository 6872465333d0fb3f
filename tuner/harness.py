"""One measured trial: build, apply knobs, warm up, measure in windows, report.

The loop reads like nanoGPT's ``bench.py``: warm-up steps (compile, cuDNN autotuning and worker
start-up land there and are recorded, not measured), then timed windows between device
synchronisations. Windows cross epoch boundaries, so the per-epoch worker restart that
``persistent_workers`` removes is part of the measured cost.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader

from tuner import __version__
from tuner.failures import free_device_memory, is_oom, is_worker_failure, oom_memory
from tuner.apply import (apply_device_limit, build_training, cycle, move_batch,
                         release_device_limit, repeat, set_global_flags)
from tuner.hardware import fingerprint, node_id, node_ip
from tuner.knobs import Knobs
from tuner.measure import (GpuTelemetry, HostMemorySampler, LimitExceeded, Stopwatch, Window,
                           peak_device_memory_mb, release_host_memory, summarise, synchronize)
from tuner.settings import PHASES, TrialSettings, default_cache_dir
from tuner.workload import Workload

Report = Callable[[dict], None]


class TrialFailure(Exception):
    """A trial cannot run as configured (e.g. batch larger than the dataset)."""


def make_trainable(workload: Workload) -> Callable[[dict], None]:
    """A Ray Tune function trainable for ``workload``.

    The config holds knob values (see ``tuner.knobs.Knobs``) and, under the key ``"tuner"``, the
    trial settings (``tuner.harness.TrialSettings`` fields: scale, device, data_dir, windows...).
    Each measurement window is reported with ``ray.tune.report``.
    """

    def trainable(config: dict) -> None:
        run_tune_trial(workload, config)

    trainable.__name__ = f"{workload.name}_trainable"
    trainable.__qualname__ = trainable.__name__
    return trainable


def run_tune_trial(workload: Workload, config: dict) -> None:
    """Ray Tune entry point: config = knob values + ``"tuner"`` (TrialSettings fields)."""
    from ray import tune

    import ray
    settings = TrialSettings(**config["tuner"])
    knobs = {**config, **config.get("fixed", {})}  # follow-up phases pass fixed configurations
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    run_trial(workload, knobs, settings, report=tune.report, cpus=int(cpus) if cpus else None)


def training_threads(num_workers: int, cpus: int) -> int:
    """Intra-op threads of the training process: the trial's CPUs less one per DataLoader
    worker, at least 1. (Ray sets OMP_NUM_THREADS to all of the trial's CPUs; with workers
    on the same CPUs that oversubscribes them, and on a busy 2-core machine 2 threads ran
    10-30x slower than 1.)"""
    return max(1, cpus - num_workers)


def run_trial(workload: Workload, knobs: Knobs | dict, settings: TrialSettings,
              report: Report | None = None, cpus: int | None = None) -> dict:
    """Run one trial and return its final result (also the last thing reported).

    Args:
        workload: what to train.
        knobs: the configuration (a Knobs, or a mapping such as a Ray Tune config).
        settings: measurement settings.
        report: called with each window's result and then the final one (``ray.tune.report``).
        cpus: CPUs given to the trial; on the CPU device the training process then runs
            ``training_threads(num_workers, cpus)`` torch threads (None: leave torch's setting).

    Returns:
        A dict with ``status`` ('ok', 'oom' or 'error'), the knobs applied, ``clamped`` notes,
        ``samples_per_sec`` (median over windows; 0.0 unless ok, because Ray Tune requires the
        metric: the status says what it means), spread, step time p50/p95 (ms), ``warmup_s``,
        ``first_step_s``, peak device/host memory (MB), hardware and versions.
        Failures are caught and returned, never raised: the run goes on.
    """
    report = report or (lambda result: None)
    device = torch.device(settings.device)
    started_at = _now()
    result: dict[str, Any] = {"status": "error", "error": None, "samples_per_sec": 0.0}
    result.update(_environment(device))
    if settings.accelerator_type is not None:
        result["accelerator_type"] = settings.accelerator_type
        result["hardware_key"] = f"{result['hardware_key']}@{settings.accelerator_type}"
    try:
        if not isinstance(knobs, Knobs):
            knobs = Knobs.from_dict(knobs, strict=False)
        bf16 = device.type != "cuda" or torch.cuda.is_bf16_supported()
        applied, clamped = knobs.clamp(device.type, bf16_supported=bf16)
    except ValueError as exc:
        result.update(error=f"invalid knobs: {exc}", started_at=started_at, finished_at=_now())
        report(result)
        return result
    result.update(applied.to_dict())
    result["clamped"] = "; ".join(clamped) or None
    units = workload.units_per_sample(settings.scale)

    def on_window(partial_result: dict) -> None:
        report({**result, **partial_result, "status": "running"})

    restore = set_global_flags(applied, device)
    threads = torch.get_num_threads()
    if cpus is not None and device.type == "cpu":
        # The compute-only ceiling runs no DataLoader workers: all of the trial's CPUs train.
        workers = 0 if settings.compute_only else applied.num_workers
        torch.set_num_threads(training_threads(workers, cpus))
    result["torch_threads"] = torch.get_num_threads()
    limit_mb = apply_device_limit(settings.max_memory, device)
    result["max_memory_mb"] = limit_mb
    result["max_host_memory_mb"] = settings.max_host_memory_mb
    sampler = HostMemorySampler(limit_mb=settings.max_host_memory_mb)
    try:
        with sampler:
            measured = _measure(workload, applied, settings, device, on_window, sampler)
        result.update(measured, status="ok")
        for unit, per_sample in units.items():
            result[f"{unit}_per_sec"] = measured["samples_per_sec"] * per_sample
        peak = measured["peak_device_memory_mb"]
        if limit_mb is not None and peak is not None and peak > limit_mb:
            raise LimitExceeded(f"peak device memory {peak:,.0f} MB (allocator + CUDA context) "
                                f"is over the limit of {limit_mb:,.0f} MB", "device")
        if settings.max_host_memory_mb is not None and sampler.peak_mb > settings.max_host_memory_mb:
            raise LimitExceeded(f"peak host memory {sampler.peak_mb:,.0f} MB (process + workers) "
                                f"is over the limit of {settings.max_host_memory_mb:,.0f} MB", "host")
    except Exception as exc:  # recorded with its traceback and status; the run goes on
        if isinstance(exc, LimitExceeded):
            result["status"] = "over_limit"
            result["memory_exceeded"] = exc.memory
        else:
            result["status"] = "oom" if is_oom(exc) else "error"
            if result["status"] == "oom":
                result["memory_exceeded"] = oom_memory(exc, device)
        kind = "DataLoader worker failure: " if is_worker_failure(exc) else ""
        result["error"] = f"{kind}{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc(limit=20)
        result["samples_per_sec"] = 0.0
    finally:
        release_device_limit(limit_mb, device)
        restore()
        torch.set_num_threads(threads)
        if applied.compile != "off":
            torch._dynamo.reset()
        free_device_memory()
        release_host_memory()
    result["peak_host_memory_mb"] = sampler.peak_mb
    if result["status"] != "ok":
        result["time_to_train_s"] = None
    result["started_at"], result["finished_at"] = started_at, _now()
    report(result)
    return result


def _measure(workload: Workload, knobs: Knobs, settings: TrialSettings, device: torch.device,
             on_window: Report, sampler: HostMemorySampler) -> dict:
    """Build everything, warm up, measure windows, time the phases. Raises on any failure."""
    setup = Stopwatch()
    torch.manual_seed(settings.seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    data_dir = Path(settings.data_dir)
    if settings.default_data and not data_dir.exists():
        data_dir = workload.prepare_default_data(default_cache_dir() / "data", settings.scale)
    dataset = workload.build_dataset(data_dir, settings.scale)
    if len(dataset) < knobs.batch_size:
        raise TrialFailure(f"batch_size {knobs.batch_size} exceeds the dataset's "
                           f"{len(dataset)} samples (batches drop the incomplete last one)")
    loader = DataLoader(dataset, shuffle=True, drop_last=True, collate_fn=workload.collate_fn(),
                        **knobs.dataloader_kwargs())
    training = build_training(workload, knobs, settings.scale, device)
    if settings.compute_only:
        # Batches already on the device, cycled: no loading, decoding or copying is measured.
        source = cycle(loader)
        try:
            resident = [move_batch(next(source), device, knobs) for _ in range(4)]
        finally:
            source.close()  # workers are not needed any more
        batches = repeat(resident)
        move = lambda batch: batch  # noqa: E731  (already on the device)
    else:
        batches = cycle(loader)
        move = partial(move_batch, device=device, knobs=knobs)
    setup_s = setup.elapsed()
    loss = None

    def train_step(timer: Callable[[str], None] | None = None) -> int:
        """One optimizer step over grad_accum micro-batches; returns samples processed.
        With ``timer``, synchronises after each phase and calls timer(phase)."""
        nonlocal loss
        mark = timer or (lambda phase: None)
        samples = 0
        for _ in range(knobs.grad_accum):
            raw = next(batches)
            mark("data_wait")
            batch = move(raw)
            mark("h2d")
            loss = training.forward(batch)
            mark("forward")
            training.backward(loss)
            mark("backward")
            samples += workload.samples_in(batch)
        training.step()
        mark("optimizer")
        if sampler.exceeded.is_set():
            raise LimitExceeded(f"host memory (process + DataLoader workers) went over the "
                                f"limit of {sampler.limit_mb:,.0f} MB", "host")
        return samples

    try:
        # Warm-up: compile, autotuning, allocator growth, worker start-up. Recorded, not measured.
        clock = Stopwatch()
        train_step()
        synchronize(device)
        first_step_s = clock.elapsed()
        for _ in range(settings.warmup_steps - 1):
            train_step()
        steady, probes = _settle(train_step, device, settings)
        synchronize(device)
        warmup_s = clock.elapsed()
        if not torch.isfinite(loss):
            raise TrialFailure(f"loss is {loss.item()} after warm-up")

        windows: list[Window] = []
        with GpuTelemetry(device) as telemetry:
            for index in range(settings.windows):
                synchronize(device)
                t0 = time.perf_counter()
                steps = samples = 0
                while True:
                    samples += train_step()
                    steps += 1
                    if time.perf_counter() - t0 >= settings.window_s:
                        break
                synchronize(device)  # the window ends when the device has finished its work
                windows.append(Window(steps, samples, time.perf_counter() - t0))
                partial_result = {"window": index,
                                  "window_samples_per_sec": windows[-1].samples_per_sec,
                                  "samples_per_sec": statistics.median(w.samples_per_sec for w in windows)}
                if settings.train_steps is not None:  # Ray Tune wants the objective in every result
                    partial_result["time_to_train_s"] = _time_to_train(
                        settings, setup_s, warmup_s, statistics.median(w.step_time_ms for w in windows))
                on_window(partial_result)
        out = summarise(windows)
        out.update(setup_s=setup_s, warmup_s=warmup_s, first_step_s=first_step_s,
                   steady_state=steady, steady_probes=probes,
                   peak_device_memory_mb=peak_device_memory_mb(device),
                   gpu_util_pct=telemetry.util_pct, gpu_power_w=telemetry.power_w,
                   final_loss=float(loss.detach().float().item()) * knobs.grad_accum)
        out.update(_breakdown(train_step, device, settings.breakdown_steps))
        if settings.train_steps is not None:
            out["time_to_train_s"] = _time_to_train(settings, setup_s, warmup_s, out["step_time_ms_p50"])
        return out
    finally:
        batches.close()  # shuts DataLoader workers down, also after a failure


def _settle(train_step: Callable, device: torch.device, settings: TrialSettings) -> tuple[bool, int]:
    """Warm up until throughput is steady: synchronised probes of half a window each, until two
    consecutive ones agree within ``steady_tolerance``. Returns (steady, probes run)."""
    previous = None
    for probe in range(1, settings.max_steady_probes + 1):
        synchronize(device)
        t0 = time.perf_counter()
        samples = 0
        while time.perf_counter() - t0 < settings.window_s / 2:
            samples += train_step()
        synchronize(device)
        rate = samples / (time.perf_counter() - t0)
        if previous is not None and abs(rate - previous) <= settings.steady_tolerance * max(rate, previous):
            return True, probe
        previous = rate
    return False, settings.max_steady_probes


def _time_to_train(settings: TrialSettings, setup_s: float, warmup_s: float,
                   step_time_ms: float) -> float:
    """Predicted wall time of the user's ``train_steps``-step job: setup (dataset, model,
    workers), the warm-up steps as measured (compile included), the rest at steady state."""
    remaining = max(0, settings.train_steps - settings.warmup_steps)
    return setup_s + warmup_s + remaining * step_time_ms / 1000


def _breakdown(train_step: Callable, device: torch.device, steps: int) -> dict:
    """Mean ms per optimizer step in each phase over ``steps`` synchronised steps, and each
    phase's share. Kept apart from the windows: the synchronisations slow the step down."""
    if steps <= 0:
        return {}
    totals = dict.fromkeys(PHASES, 0.0)
    for _ in range(steps):
        synchronize(device)
        last = time.perf_counter()

        def timer(phase: str) -> None:
            nonlocal last
            synchronize(device)
            now = time.perf_counter()
            totals[phase] += now - last
            last = now

        train_step(timer)
    step_ms = sum(totals.values()) * 1000 / steps
    out = {"breakdown_step_ms": step_ms}
    for phase in PHASES:
        ms = totals[phase] * 1000 / steps
        out[f"{phase}_ms"] = ms
        out[f"{phase}_pct"] = 100 * ms / step_ms if step_ms > 0 else None
    return out


def _environment(device: torch.device) -> dict:
    info = fingerprint(device)
    info.update(node_id=node_id(), node_ip=node_ip(), tuner_version=__version__,
                torch_version=torch.__version__)
    return info


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
