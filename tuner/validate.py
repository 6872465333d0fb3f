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
               threads: int | None = None, warmup_s: float = 0.0,
               min_measured_s: float = 0.0) -> Validation:
    """Train ``steps`` optimizer steps (default: one epoch, at least warm-up + 20 steps) as a
    plain loop and time it, in the process-wide state a trial runs in (``trial_state``), with
    ``threads`` torch threads on the CPU device (None: leave torch's setting).

    The steady-state figure starts after ``warmup_steps`` steps and ``warmup_s`` seconds, and
    the loop goes on past ``steps`` (across epochs) until it has lasted ``min_measured_s``:
    given the trial's warm-up and measured time, the loop warms up and measures as long as the
    trial did. (A short loop measures the batches the DataLoader's workers prefetched during
    the warm-up, faster than they can be produced: on an H100 a 20-step loop read 1.17x
    the trial's figure for ddpm's recommended configuration.)

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
        loop = _Loop(start=time.perf_counter(), warmup_steps=warmup_steps, warmup_s=warmup_s,
                     total=total, min_measured_s=min_measured_s)
        while not loop.finished:
            for batch in loader:  # a new epoch: workers restart unless persistent
                batch = move_batch(batch, dev, applied)
                training.backward(training.forward(batch))
                if loop.steady_start is not None:
                    loop.steady_samples += workload.samples_in(batch)
                loop.micro += 1
                if loop.micro % applied.grad_accum:
                    continue
                training.step()
                loop.done += 1
                if loop.steady_start is None and loop.warmed_up():
                    synchronize(dev)
                    loop.steady_start, loop.steady_steps = time.perf_counter(), loop.done
                if loop.finished:
                    break
        synchronize(dev)
        end = time.perf_counter()
    return Validation(steps=loop.done, warmup_steps=loop.steady_steps,
                      samples_per_sec=loop.steady_samples / (end - loop.steady_start),
                      total_s=end - loop.start, epochs=loop.done / max(per_epoch, 1))


@dataclass
class _Loop:
    """Where ``train_loop`` is: steps done, micro-batches, the steady part's start and samples."""
    start: float
    warmup_steps: int
    warmup_s: float
    total: int
    min_measured_s: float
    done: int = 0
    micro: int = 0
    steady_start: float | None = None
    steady_steps: int = 0
    steady_samples: int = 0

    def warmed_up(self) -> bool:
        return (self.done >= self.warmup_steps
                and time.perf_counter() - self.start >= self.warmup_s)

    @property
    def finished(self) -> bool:
        """``total`` steps done, the steady part begun and ``min_measured_s`` long (at least
        one step past its start)."""
        return (self.done >= self.total and self.steady_start is not None
                and self.done > self.steady_steps
                and time.perf_counter() - self.steady_start >= self.min_measured_s)
