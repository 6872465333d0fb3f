"""Validation: does a trial's prediction hold in real training?

``validate`` trains with a configuration as a plain training loop — the loop a user writes,
one epoch (or a given number of steps), no windows, no Ray — and compares its steady-state
samples/sec with what the trial measured. Its batches come from executing the lines
``best --format python`` prints for the configuration's data path (``tuner.codegen.data_code``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from tuner.apply import build_training, move_batch, trial_state
from tuner.codegen import data_code, fill_workers, python_text, workload_lines
from tuner.errors import DataError, TunerError
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
    data_code: str
    """The lines that made the batches, as ``best --format python`` prints them."""
    batches_s: float
    """Seconds those lines took (for 'cache' and 'device': decoding every sample once)."""


def train_loop(workload: Workload, knobs: Knobs, *, scale: str, device: str, data_dir: Path,
               steps: int | None = None, warmup_steps: int = 3, seed: int = 0,
               threads: int | None = None, warmup_s: float = 0.0,
               min_measured_s: float = 0.0, fill_workers: int = 0) -> Validation:
    """Train ``steps`` optimizer steps (default: one epoch, at least warm-up + 20 steps) as a
    plain loop and time it, in the process-wide state a trial runs in (``trial_state``), with
    ``threads`` torch threads on the CPU device (None: leave torch's setting).

    The batches come from executing ``tuner.codegen.data_code`` (what ``best --format python``
    prints) with ``workload``, ``data_dir`` and, for 'loader', ``dataset`` (``build_dataset``)
    bound; ``fill_workers`` decode the samples of a 'cache' or 'device' path once.

    The steady-state figure starts after ``warmup_steps`` steps and ``warmup_s`` seconds, and
    the loop goes on past ``steps`` (across epochs) until it has lasted ``min_measured_s``:
    given the trial's warm-up and measured time, the loop warms up and measures as long as the
    trial did. (A short loop measures the batches the DataLoader's workers prefetched during
    the warm-up, faster than they can be produced: on an H100 a 20-step loop read 1.17x
    the trial's figure for ddpm's recommended configuration.)

    Raises:
        DataError: the dataset holds fewer samples than one batch, or its decoded samples
            cannot be cached (``tuner.data.DecodedCache.fill``).
        TunerError: a 'cache' or 'device' path for a workload without ``sample_path``.
        Whatever training raises (OOM included; an error in a DataLoader worker arrives as
        torch raises it again, with the worker's traceback in its message).
    """
    torch.manual_seed(seed)
    dev = torch.device(device)
    applied, _ = knobs.clamp(dev.type)
    with trial_state(applied, dev, threads=threads):
        code = data_code(applied, device=str(dev), scale=scale, workers=fill_workers,
                         collate=workload.collate_fn() is not None)
        loader, batches_s = _batches(code, workload, applied, Path(data_dir), scale)
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
                      total_s=end - loop.start, epochs=loop.done / max(per_epoch, 1),
                      data_code=code, batches_s=batches_s)


def check_data_path(workload: Workload, knobs: Knobs) -> None:
    """Raise TunerError (one line) when ``knobs.data_path`` needs a ``Workload.sample_path``
    that ``workload`` does not implement."""
    if knobs.data_path != "loader" and not workload.has_sample_path:
        raise TunerError(f"data_path={knobs.data_path}: workload {workload.name!r} does not "
                         "split its sample path (Workload.sample_path); accepted for it: "
                         "data_path=loader")


def _batches(code: str, workload: Workload, knobs: Knobs, data_dir: Path, scale: str):
    """``loader`` as ``code`` (``data_code``) binds it, and the seconds the lines took.
    Raises TunerError, DataError."""
    check_data_path(workload, knobs)
    namespace = {"workload": workload, "data_dir": data_dir}
    if knobs.data_path == "loader":
        namespace["dataset"] = workload.build_dataset(data_dir, scale)
    started = time.perf_counter()
    try:
        exec(compile(code, "<best --format python>", "exec"), namespace)
    except ValueError as exc:  # DecodedCache.fill, DeviceBatches: samples that cannot batch
        raise DataError(f"data {data_dir}: {exc}") from None
    loader = namespace["loader"]
    if len(loader) == 0:  # every epoch would be empty: the loop would never end
        samples = len(loader.dataset)  # a DataLoader: DeviceBatches refuses an empty epoch
        raise DataError(f"data {data_dir}: its {samples} samples make no batch of "
                        f"batch_size {knobs.batch_size} (batches drop the incomplete "
                        "last one)")
    return loader, time.perf_counter() - started


def best_code(spec: str, knobs: Knobs, row: dict) -> str:
    """What ``best --format python`` prints for a leaderboard row: ``knobs`` as the row's
    device applied them (``Knobs.clamp``), its scale, the trial's CPUs as the cache's fill
    workers, and the lines that import the workload ``spec`` names (``workload_source``).

    Raises:
        TunerError: a 'cache' or 'device' path for a workload without ``sample_path``.
    """
    device = row.get("device") or "cuda"
    applied, _ = knobs.clamp(device)
    workload, lines = workload_source(spec)
    if workload is not None:
        check_data_path(workload, applied)
    return python_text(applied, device, scale=row.get("scale"),
                       workers=fill_workers(row.get("trial_cpus")), workload=lines,
                       collate=workload is not None and workload.collate_fn() is not None,
                       world_size=int(row.get("world_size") or 1))


def workload_source(spec: str) -> tuple[Workload | None, list[str] | None]:
    """The workload a read command's ``--workload`` names, and the lines that import it
    (``tuner.codegen.workload_lines``): an import path, a known name (built-in or entry
    point), or a configured classifier's leaderboard name ('classifier-resnet50-224px':
    the base workload with ``configure(model=..., image_size=...)``). (None, None) for a
    name not found from here or a workload that fails to import."""
    from tuner.workload import available, configured, resolve
    known = available()
    try:
        if ":" in spec or spec in known:
            return resolve(spec), workload_lines(spec if ":" in spec else known[spec])
        for base, path in known.items():
            match = re.fullmatch(rf"{re.escape(base)}-(.+)-([0-9]+)px", spec)
            if match is None:
                continue
            model = match[1]
            model = "timm:" + model[len("timm-"):] if model.startswith("timm-") else model
            options = {"model": model, "image_size": int(match[2])}
            workload = configured(resolve(base), options)
            if workload.name == spec:
                return workload, workload_lines(path, options)
    except TunerError:
        pass
    return None, None


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
