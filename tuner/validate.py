"""Validation: does a trial's prediction hold in real training?

``validate`` trains with a configuration as a plain training loop — the loop a user writes,
one epoch (or a given number of steps), no windows, no Ray — and compares its steady-state
samples/sec with what the trial measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from tuner.apply import build_training, move_batch, trial_state
from tuner.errors import DataError
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
               steps: int | None = None, warmup_steps: int = 3, seed: int = 0,
               threads: int | None = None) -> Validation:
    """Train ``steps`` optimizer steps (default: one epoch, at least warm-up + 20 steps) as a
    plain loop and time it, in the process-wide state a trial runs in (``trial_state``), with
    ``threads`` torch threads on the CPU device (None: leave torch's setting).

    Raises:
        DataError: the dataset holds fewer samples than one batch.
        Whatever training raises (OOM included; an error in a DataLoader worker arrives as
        torch raises it again, with the worker's traceback in its message).
    """
    torch.manual_seed(seed)
    dev = torch.device(device)
    applied, _ = knobs.clamp(dev.type)
    with trial_state(applied, dev, threads=threads):
        dataset = workload.build_dataset(Path(data_dir), scale)
        loader = DataLoader(dataset, shuffle=True, drop_last=True, collate_fn=workload.collate_fn(),
                            **applied.dataloader_kwargs())
        if len(loader) == 0:  # every epoch would be empty: the loop below would never end
            raise DataError(f"data {data_dir}: its {len(dataset)} samples make no batch of "
                            f"batch_size {applied.batch_size} (batches drop the incomplete "
                            "last one)")
        per_epoch = len(loader) // applied.grad_accum
        total = steps or max(per_epoch, warmup_steps + MIN_MEASURED_STEPS)
        training = build_training(workload, applied, scale, dev)

        start = time.perf_counter()
        steady_start, steady_samples, done, micro = None, 0, 0, 0
        while done < total:
            for batch in loader:  # a new epoch: workers restart unless persistent
                batch = move_batch(batch, dev, applied)
                training.backward(training.forward(batch))
                if done >= warmup_steps:
                    steady_samples += workload.samples_in(batch)
                micro += 1
                if micro % applied.grad_accum:
                    continue
                training.step()
                done += 1
                if done == warmup_steps:
                    synchronize(dev)
                    steady_start = time.perf_counter()
                if done >= total:
                    break
        synchronize(dev)
        end = time.perf_counter()
    return Validation(steps=total, warmup_steps=warmup_steps,
                      samples_per_sec=steady_samples / (end - steady_start),
                      total_s=end - start, epochs=total / max(per_epoch, 1))
