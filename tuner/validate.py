"""Validation: does a trial's prediction hold in real training?

``validate`` trains with a configuration as a plain training loop — the loop a user writes,
one epoch (or a given number of steps), no windows, no Ray — and compares its steady-state
samples/sec with what the trial measured.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from tuner.harness import move_batch, to_channels_last
from tuner.knobs import Knobs
from tuner.measure import synchronize
from tuner.workload import Workload

MIN_MEASURED_STEPS = 20


@dataclass
class Validation:
    steps: int
    """Optimizer steps run in all."""
    warmup_steps: int
    """Leading steps left out of the steady-state figure (as in the trial)."""
    samples_per_sec: float
    """Steady state: samples after the warm-up steps / their wall time."""
    total_s: float
    """Wall time of the whole loop, warm-up included, s."""
    epochs: float


def train_loop(workload: Workload, knobs: Knobs, *, scale: str, device: str, data_dir: Path,
               steps: int | None = None, warmup_steps: int = 3, seed: int = 0) -> Validation:
    """Train ``steps`` optimizer steps (default: one epoch, at least warm-up + 20 steps) as a
    plain loop and time it. Raises whatever training raises (OOM included)."""
    torch.manual_seed(seed)
    dev = torch.device(device)
    applied, _ = knobs.clamp(dev.type)
    saved = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = applied.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = applied.tf32
        torch.backends.cudnn.allow_tf32 = applied.tf32
    try:
        dataset = workload.build_dataset(Path(data_dir), scale)
        loader = DataLoader(dataset, shuffle=True, drop_last=True, collate_fn=workload.collate_fn(),
                            **applied.dataloader_kwargs())
        per_epoch = len(loader) // applied.grad_accum
        total = steps or max(per_epoch, warmup_steps + MIN_MEASURED_STEPS)
        model = workload.build_model(scale).to(dev)
        if applied.channels_last:
            model._apply(to_channels_last)
        optimizer = workload.build_optimizer(model.parameters(), applied.fused_optimizer)
        if applied.compile != "off":
            model = torch.compile(model, mode=None if applied.compile == "default" else applied.compile)
        scaler = torch.amp.GradScaler(dev.type) if applied.amp == "fp16" else None
        autocast = (contextlib.nullcontext if applied.amp == "off" else partial(
            torch.autocast, dev.type,
            dtype=torch.float16 if applied.amp == "fp16" else torch.bfloat16))
        model.train()

        start = time.perf_counter()
        steady_start, steady_samples, done, micro = None, 0, 0, 0
        while done < total:
            for batch in loader:  # a new epoch: workers restart unless persistent
                batch = move_batch(batch, dev, applied)
                with autocast():
                    loss = workload.training_step(model, batch) / applied.grad_accum
                (scaler.scale(loss) if scaler else loss).backward()
                if done >= warmup_steps:
                    steady_samples += workload.samples_in(batch)
                micro += 1
                if micro % applied.grad_accum:
                    continue
                if scaler:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                done += 1
                if done == warmup_steps:
                    synchronize(dev)
                    steady_start = time.perf_counter()
                if done >= total:
                    break
        synchronize(dev)
        end = time.perf_counter()
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
         torch.backends.cudnn.allow_tf32) = saved
        if knobs.compile != "off":
            torch._dynamo.reset()
    return Validation(steps=total, warmup_steps=warmup_steps,
                      samples_per_sec=steady_samples / (end - steady_start),
                      total_s=end - start, epochs=total / max(per_epoch, 1))
