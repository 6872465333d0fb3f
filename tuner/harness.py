"""One measured trial: build, apply knobs, warm up, measure in windows, report.

The loop reads like nanoGPT's ``bench.py``: warm-up steps (compile, cuDNN autotuning and worker
start-up land there and are recorded, not measured), then timed windows between device
synchronisations. Windows cross epoch boundaries, so the per-epoch worker restart that
``persistent_workers`` removes is part of the measured cost.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import statistics
import time
import traceback
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import DataLoader

from tuner import __version__
from tuner.failures import free_device_memory, is_oom, is_worker_failure
from tuner.hardware import fingerprint, node_id, node_ip
from tuner.knobs import Knobs
from tuner.measure import HostMemorySampler, Stopwatch, Window, peak_device_memory_mb, summarise, synchronize
from tuner.workload import SCALES, Workload

Report = Callable[[dict], None]


@dataclass(frozen=True, kw_only=True)
class TrialSettings:
    """How one trial measures (the same for every trial of a run)."""

    scale: str
    """'seed' (faithful to the source report) or 'tiny' (CPU-test size)."""
    device: str
    """'cpu' or 'cuda' (the GPU Ray assigned to the trial)."""
    data_dir: str
    """Dataset path given to ``Workload.build_dataset``."""
    warmup_steps: int = 5
    """Optimizer steps run before measuring (compile and autotuning happen here), >= 1."""
    windows: int = 5
    """Measurement windows, >= 1; samples/sec is their median."""
    window_s: float = 1.0
    """Minimum wall time of one window, seconds (a window ends on the first step past it)."""
    seed: int = 0
    """Seed for torch (model init, augmentation, shuffling)."""

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"scale {self.scale!r}: accepted values are {', '.join(SCALES)}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device {self.device!r}: accepted values are cpu, cuda")
        if self.warmup_steps < 1 or self.windows < 1 or self.window_s <= 0:
            raise ValueError("warmup_steps and windows must be >= 1 and window_s > 0, got "
                             f"{self.warmup_steps}, {self.windows}, {self.window_s}")


class TrialFailure(Exception):
    """A trial cannot run as configured (e.g. batch larger than the dataset)."""


def run_tune_trial(workload: Workload, config: dict) -> None:
    """Ray Tune entry point: config = knob values + ``"tuner"`` (TrialSettings fields)."""
    from ray import tune

    settings = TrialSettings(**config["tuner"])
    run_trial(workload, config, settings, report=tune.report)


def run_trial(workload: Workload, knobs: Knobs | dict, settings: TrialSettings,
              report: Report | None = None) -> dict:
    """Run one trial and return its final result (also the last thing reported).

    Args:
        workload: what to train.
        knobs: the configuration (a Knobs, or a mapping such as a Ray Tune config).
        settings: measurement settings.
        report: called with each window's result and then the final one (``ray.tune.report``).

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

    restore = _set_global_flags(applied, device)
    sampler = HostMemorySampler()
    try:
        with sampler:
            measured = _measure(workload, applied, settings, device, on_window)
        result.update(measured, status="ok")
        for unit, per_sample in units.items():
            result[f"{unit}_per_sec"] = measured["samples_per_sec"] * per_sample
    except Exception as exc:  # recorded with its traceback and status; the run goes on
        result["status"] = "oom" if is_oom(exc) else "error"
        kind = "DataLoader worker failure: " if is_worker_failure(exc) else ""
        result["error"] = f"{kind}{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc(limit=20)
        result["samples_per_sec"] = 0.0
    finally:
        restore()
        if applied.compile != "off":
            torch._dynamo.reset()
        free_device_memory()
    result["peak_host_memory_mb"] = sampler.peak_mb
    result["started_at"], result["finished_at"] = started_at, _now()
    report(result)
    return result


def _measure(workload: Workload, knobs: Knobs, settings: TrialSettings, device: torch.device,
             on_window: Report) -> dict:
    """Build everything, warm up, measure windows. Raises on any failure."""
    torch.manual_seed(settings.seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    dataset = workload.build_dataset(Path(settings.data_dir), settings.scale)
    if len(dataset) < knobs.batch_size:
        raise TrialFailure(f"batch_size {knobs.batch_size} exceeds the dataset's "
                           f"{len(dataset)} samples (batches drop the incomplete last one)")
    loader = DataLoader(dataset, shuffle=True, drop_last=True, collate_fn=workload.collate_fn(),
                        **knobs.dataloader_kwargs())
    model = workload.build_model(settings.scale).to(device)
    if knobs.channels_last:
        model._apply(_channels_last)
    optimizer = workload.build_optimizer(model.parameters(), knobs.fused_optimizer)
    step_model = model if knobs.compile == "off" else torch.compile(
        model, mode=None if knobs.compile == "default" else knobs.compile)
    scaler = torch.amp.GradScaler(device.type) if knobs.amp == "fp16" else None
    autocast = (contextlib.nullcontext if knobs.amp == "off" else partial(
        torch.autocast, device.type, dtype=torch.float16 if knobs.amp == "fp16" else torch.bfloat16))
    model.train()
    batches = _cycle(loader)
    loss = None

    def train_step() -> int:
        """One optimizer step over grad_accum micro-batches; returns samples processed."""
        nonlocal loss
        samples = 0
        for _ in range(knobs.grad_accum):
            batch = _to_device(next(batches), device, knobs)
            with autocast():
                loss = workload.training_step(step_model, batch) / knobs.grad_accum
            (scaler.scale(loss) if scaler else loss).backward()
            samples += workload.samples_in(batch)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return samples

    try:
        # Warm-up: compile, autotuning, allocator growth, worker start-up. Recorded, not measured.
        clock = Stopwatch()
        train_step()
        synchronize(device)
        first_step_s = clock.elapsed()
        for _ in range(settings.warmup_steps - 1):
            train_step()
        synchronize(device)
        warmup_s = clock.elapsed()
        if not torch.isfinite(loss):
            raise TrialFailure(f"loss is {loss.item()} after warm-up")

        windows: list[Window] = []
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
            on_window({"window": index,
                       "window_samples_per_sec": windows[-1].samples_per_sec,
                       "samples_per_sec": statistics.median(w.samples_per_sec for w in windows)})
        out = summarise(windows)
        out.update(warmup_s=warmup_s, first_step_s=first_step_s,
                   peak_device_memory_mb=peak_device_memory_mb(device),
                   final_loss=float(loss.detach().float().item()) * knobs.grad_accum)
        return out
    finally:
        batches.close()  # shuts DataLoader workers down, also after a failure


def _cycle(loader: DataLoader) -> Iterator:
    """Batches forever, epoch after epoch, as a training loop sees them: without persistent
    workers each epoch starts its workers again. Closing the generator shuts workers down."""
    iterator = None
    try:
        while True:
            iterator = iter(loader)  # with persistent_workers, the same iterator reset
            yield from iterator
    finally:
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t


def _to_device(batch: Any, device: torch.device, knobs: Knobs) -> Any:
    """Move every tensor of a (nested) batch; 4-D/5-D float inputs get channels_last(_3d)."""
    if isinstance(batch, torch.Tensor):
        t = batch.to(device, non_blocking=knobs.non_blocking)
        return _channels_last(t) if knobs.channels_last and t.is_floating_point() else t
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device, knobs) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device, knobs) for k, v in batch.items()}
    return batch


def _set_global_flags(knobs: Knobs, device: torch.device) -> Callable[[], None]:
    """Apply process-wide torch flags for this trial; return a function restoring them (a Ray
    actor may run the next trial in the same process)."""
    saved = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = knobs.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = knobs.tf32
        torch.backends.cudnn.allow_tf32 = knobs.tf32

    def restore() -> None:
        (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
         torch.backends.cudnn.allow_tf32) = saved

    return restore


def _environment(device: torch.device) -> dict:
    info = fingerprint(device)
    info.update(node_id=node_id(), node_ip=node_ip(), tuner_version=__version__,
                torch_version=torch.__version__)
    return info


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
