"""A configuration measured in Lightning's own ``Trainer.fit()`` (the ``lightning`` extra): what
``LightningWorkload.trainer_samples_per_sec`` runs, so that ``tuner validate`` checks a
trial's figure in the trainer the user trains with.

The knobs go through Lightning's settings (``tuner.integrations.lightning_args``); a Callback
times the optimizer steps after the warm-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from tuner.integrations.lightning_args import dataloader_arguments, trainer_arguments
from tuner.knobs import Knobs
from tuner.trial.apply import to_channels_last, trial_state
from tuner.trial.measure import synchronize


def fit_samples_per_sec(workload: Any, knobs: Knobs, *, steps: int,
                        device: str, scale: str) -> float:
    """``Trainer.fit()`` of a fresh module of ``workload`` (a
    ``tuner.integrations.lightning.LightningWorkload``, which imports this module) for
    ``steps`` optimizer steps with ``knobs``; the
    samples/sec of the steps after the scale's warm-up steps (see
    ``LightningWorkload.trainer_samples_per_sec``). Raises ValueError for ``steps`` not above
    the warm-up; whatever ``fit`` raises."""
    from tuner.settings import MEASUREMENT_DEFAULTS
    warmup = MEASUREMENT_DEFAULTS[scale][0]
    if steps <= warmup:
        raise ValueError(f"steps={steps}: the trainer needs more than the {warmup} warm-up "
                         f"step(s) of scale {scale!r}")
    dev = torch.device(device)
    applied, _ = knobs.clamp(dev.type)
    timer = StepTimer(warmup, workload.samples_in, dev)
    with trial_state(applied, dev):  # TF32 matmuls per the knob, compile caches reset after
        module, dataset = workload.trainer_parts(applied.fused_optimizer)
        if applied.channels_last:
            module = module.to(memory_format=torch.channels_last)
            module.on_after_batch_transfer = _channels_last_batch
        loader = DataLoader(dataset, shuffle=True, drop_last=True,
                            collate_fn=workload.collate_fn(), **dataloader_arguments(applied))
        with quiet_lightning():
            trainer = pl.Trainer(**trainer_arguments(applied, dev.type), max_steps=steps,
                                 logger=False, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False,
                                 accelerator=dev.type, devices=1, callbacks=[timer],
                                 num_sanity_val_steps=0)
        fitted = module
        if applied.compile != "off":
            fitted = torch.compile(
                module, **({} if applied.compile == "default" else {"mode": applied.compile}))
        with quiet_lightning():
            trainer.fit(fitted, train_dataloaders=loader)
    return timer.samples_per_sec()


@contextlib.contextmanager
def quiet_lightning():
    """Lightning's notices (devices available, tips, "does not have many workers", the
    reached ``max_steps``) held back while the trainer is built and fits, unless
    ``TUNER_VERBOSE`` is set (``--verbose``); its errors still raise."""
    if os.environ.get("TUNER_VERBOSE"):
        yield
        return
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric",
                                                    "pytorch_lightning", "lightning_fabric")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _channels_last_batch(batch: Any, dataloader_idx: int) -> Any:
    """``on_after_batch_transfer`` for the channels_last knob: 4-D/5-D float tensors of the
    batch (nested lists, tuples, dicts) in channels_last(_3d), as a trial moves them."""
    if isinstance(batch, torch.Tensor):
        return to_channels_last(batch) if batch.is_floating_point() else batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(_channels_last_batch(b, dataloader_idx) for b in batch)
    if isinstance(batch, dict):
        return {k: _channels_last_batch(v, dataloader_idx) for k, v in batch.items()}
    return batch


class StepTimer(pl.Callback):
    """A Lightning Callback timing the optimizer steps after ``warmup_steps``: the clock
    starts at the step boundary where ``trainer.global_step`` reaches the warm-up and stops
    at the last boundary, the device synchronised at both; the samples are those of the
    micro-batches between (``samples_in``)."""

    def __init__(self, warmup_steps: int, samples_in: Any, device: torch.device):
        self.warmup_steps = warmup_steps
        self.samples_in = samples_in
        self.device = device
        self.start_s: float | None = None
        self.end_s: float | None = None
        self.samples = 0
        """Samples since the start, up to the last step boundary."""
        self._pending = 0
        self._step = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.start_s is not None:
            self._pending += self.samples_in(batch)
        if trainer.global_step == self._step:
            return  # a micro-batch inside an accumulation: no optimizer step yet
        self._step = trainer.global_step
        if self.start_s is None and self._step >= self.warmup_steps:
            synchronize(self.device)
            self.start_s = time.perf_counter()
        elif self.start_s is not None:
            synchronize(self.device)
            self.end_s = time.perf_counter()
            self.samples += self._pending
            self._pending = 0

    def samples_per_sec(self) -> float:
        """Samples/sec between the first and the last timed step boundary. Raises
        RuntimeError when fewer than one step was timed (the fit ended early)."""
        if self.start_s is None or self.end_s is None:
            raise RuntimeError(f"Trainer.fit ended after {self._step} optimizer step(s), "
                               f"before a step past the {self.warmup_steps} warm-up step(s)")
        return self.samples / (self.end_s - self.start_s)
