"""CPU time per optimizer step of tuner's harness step and of Lightning's ``Trainer.fit()``, on
one torch thread, for ``bench/trainer_validate.py --step-cpu`` (see its docstring).

Both sides train the row's knobs over the same dataset: the harness as a trial builds it
(``batch_source``, ``build_training``, ``Stepper``), the Trainer as ``validate`` does
(``LightningWorkload.trainer_parts``, the DataLoader and Trainer arguments of the answer). The
first ``SKIPPED`` steps of each run (start-up, allocator growth) are left out.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from functools import partial

import torch

from tuner.knobs import Knobs, knob_text
from tuner.settings import default_cache_dir

SKIPPED = 2
"""Leading steps of each run left out of its figures."""


def _mark() -> tuple[float, int, float]:
    """(CPU seconds user + system, minor page faults, wall seconds) of this process now."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt, time.perf_counter()


def _per_step(marks: list[tuple[float, int, float]]) -> tuple[float, float, float]:
    """Median CPU ms, minor faults and wall ms per step between consecutive marks."""
    steps = list(zip(marks, marks[1:]))[SKIPPED:]
    return (statistics.median(1000 * (b[0] - a[0]) for a, b in steps),
            statistics.median(b[1] - a[1] for a, b in steps),
            statistics.median(1000 * (b[2] - a[2]) for a, b in steps))


def harness_marks(workload, knobs: Knobs, steps: int) -> list:
    """Marks around each of ``steps`` steps of the harness's Stepper, on one thread."""
    from tuner.trial.apply import build_training, cycle, move_batch, trial_state
    from tuner.trial.measure import HostMemorySampler
    from tuner.trial.steppers import Stepper, batch_source
    dev = torch.device("cpu")
    data_dir = workload.prepare_default_data(default_cache_dir() / "data", "tiny")
    with trial_state(knobs, dev, threads=1):
        loader, _, _ = batch_source(workload, knobs, data_dir, "tiny", dev, lambda: None)
        stepper = Stepper(build_training(workload, knobs, "tiny", dev), cycle(loader),
                          partial(move_batch, device=dev, knobs=knobs), HostMemorySampler())
        marks = [_mark()]
        try:
            for _ in range(steps):
                stepper.step()
                marks.append(_mark())
        finally:
            stepper.batches.close()
    return marks


def trainer_marks(workload, knobs: Knobs, steps: int) -> list:
    """Marks at each optimizer step's ``on_train_batch_end`` of ``Trainer.fit()``, one thread."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from tuner.integrations.lightning_args import dataloader_arguments, trainer_arguments
    from tuner.integrations.lightning_fit import quiet_lightning
    from tuner.trial.apply import trial_state

    class Marks(pl.Callback):
        def __init__(self):
            self.marks = [_mark()]

        def on_train_batch_end(self, *args) -> None:
            self.marks.append(_mark())

    marks = Marks()
    with trial_state(knobs, torch.device("cpu"), threads=1), quiet_lightning():
        module, dataset = workload.trainer_parts(knobs.fused_optimizer)
        loader = DataLoader(dataset, shuffle=True, drop_last=True,
                            collate_fn=workload.collate_fn(), **dataloader_arguments(knobs))
        trainer = pl.Trainer(**trainer_arguments(knobs, "cpu"), max_steps=steps, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", devices=1,
                             callbacks=[marks], num_sanity_val_steps=0)
        trainer.fit(module, train_dataloaders=loader)
    return marks.marks


def compare_step_cpu(workload, row: dict, steps: int, rounds: int) -> None:
    """Print, per round, each side's median CPU ms, minor faults and wall ms per step, then
    the geometric means of the CPU figures and their ratio."""
    knobs = Knobs.from_dict(row, strict=False).clamp("cpu")[0]
    print(f"step CPU time, 1 thread, {steps} steps per run ({SKIPPED} left out): "
          f"{knob_text(row)}")
    cpu: dict[str, list[float]] = {"harness": [], "trainer": []}
    for round_ in range(1, rounds + 1):
        for side, run in (("harness", harness_marks), ("trainer", trainer_marks)):
            cpu_ms, faults, wall_ms = _per_step(run(workload, knobs, steps))
            cpu[side].append(cpu_ms)
            print(f"round {round_} {side}: {cpu_ms:.1f} CPU ms/step, {faults:.0f} minor faults/"
                  f"step, {wall_ms:.1f} wall ms/step; load {os.getloadavg()[0]:.2f}", flush=True)
    h, t = (statistics.geometric_mean(cpu[s]) for s in ("harness", "trainer"))
    print(f"CPU ms/step: harness {h:.1f}, Trainer.fit() {t:.1f}: trainer/harness {t / h:.3f}")
