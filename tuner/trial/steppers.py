"""What one optimizer step of a trial is: the training step over a batch source
(``Stepper``), or the loader-only ceiling's batches alone (``LoaderStepper``), with optional
per-phase timing (``phase_timer``, ``phase_columns``). ``tuner.trial.harness`` warms them up and
times them in windows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from tuner.data import CachedDataset, DecodedCache, DeviceBatches, distinct
from tuner.errors import TrialFailure
from tuner.knobs import Knobs
from tuner.settings import PHASES
from tuner.trial.apply import Training, cycle, move_batch, repeat
from tuner.trial.measure import HostMemorySampler, LimitExceeded, synchronize
from tuner.workload import Workload


def batch_source(workload: Workload, knobs: Knobs, data_dir: Path, scale: str,
                 device: torch.device, check: Callable[[], None],
                 shard: tuple[int, int] | None = None, keep: bool = False,
                 only: int | None = None) -> tuple[Iterable, float | None, bool]:
    """The batches of the knobs' data path (``tuner.data``), one epoch per ``iter``: a
    DataLoader over the workload's dataset ('loader') or over a ``CachedDataset`` ('cache'),
    or ``DeviceBatches`` of a cache resident on ``device`` ('device'). The cache is filled
    here with the trial's CPUs as fill workers, ``check`` called between its batches (the
    trial's deadline). With ``shard`` (rank, world size: one rank of a data-parallel trial)
    the DataLoader reads that rank's share of the samples through a ``DistributedSampler``;
    the device path keeps every sample on each rank's device. With ``keep``, the cache is
    kept for the next trial of this process and one kept from an earlier trial is used
    (``kept_cache``); a 'loader' trial, which does not read it, leaves it kept while it is small
    (``held_cache_bytes``). With ``only`` (samples a compute-only trial reads: its resident batches;
    ``TrialSettings.sample_limit``) the trial reads the first that many samples: the cache and
    device paths decode them, not the whole dataset (``decoded_prefix``).
    Returns the batches, the fill's seconds (None for 'loader'; for a kept
    cache the seconds its fill took) and whether the cache was kept from an earlier trial.

    Raises:
        TrialFailure: a 'cache' or 'device' path for a workload without ``sample_path``, or a
            batch larger than the dataset.
        tuner.errors.DataError: a sample that fails to decode (naming its file).
    """
    if knobs.data_path == "loader":
        if not held_cache_bytes(knobs, keep):  # none kept, or too large to keep through it
            _KEPT.clear()
        dataset = workload.build_dataset(data_dir, scale)
        if only is not None and shard is None:
            dataset = Subset(dataset, range(min(only, len(dataset))))
        return _loader(workload, knobs, dataset, shard), None, False
    path = workload.sample_path(data_dir, scale)
    if path is None:
        raise TrialFailure(f"data_path={knobs.data_path}: workload {workload.name!r} does not "
                           "split its sample path (Workload.sample_path)")
    if only is not None and shard is None:
        cache = decoded_prefix(workload, path, data_dir, scale, only)
        if knobs.data_path == "cache":
            return _loader(workload, knobs, CachedDataset(cache, path.augment)), None, False
        _check_batch(knobs, len(cache))
        return DeviceBatches(cache.to(device), knobs.batch_size, path.augment_batch), None, False
    cache, kept = kept_cache(workload, path, data_dir, scale, knobs.num_workers, check, keep)
    if knobs.data_path == "cache":
        return (_loader(workload, knobs, CachedDataset(cache, path.augment), shard),
                cache.fill_s, kept)
    _check_batch(knobs, len(cache))
    return (DeviceBatches(cache.to(device), knobs.batch_size, path.augment_batch),
            cache.fill_s, kept)


_KEPT: dict[tuple, DecodedCache] = {}
"""The last cache this process filled (at most one), by (workload name, data directory, scale,
samples): what a reused trial process already paid for."""

KEEP_ACROSS_RAM_SHARE = 0.1
"""A kept cache stays through a 'loader' trial (which does not read it) while it holds at most
this share of the machine's RAM, for the 'cache' or 'device' trial after it; a larger one is
dropped, so that the loader trial's DataLoader workers have the memory a fresh process would."""


def held_cache_bytes(knobs: Knobs, keep: bool) -> int:
    """Bytes of a kept cache (``kept_cache``) that a trial of ``knobs`` (``keep``:
    ``TrialSettings.keep_cache``) holds without reading it: a 'loader' trial with ``keep``
    leaves a cache of at most ``KEEP_ACROSS_RAM_SHARE`` of the machine's RAM in place; else 0
    (a loader trial then drops the cache). The trial's host-memory figure leaves them out
    (``HostMemorySampler.held_bytes``): a fresh process would not have them."""
    import psutil
    held = sum(cache.nbytes for cache in _KEPT.values())
    if (knobs.data_path != "loader" or not keep
            or held > KEEP_ACROSS_RAM_SHARE * psutil.virtual_memory().total):
        return 0
    return held


def kept_cache(workload: Workload, path: Any, data_dir: Path, scale: str, num_workers: int,
               check: Callable[[], None], keep: bool = True) -> tuple[DecodedCache, bool]:
    """The decoded samples of ``path`` (a ``SamplePath``) in host memory, and whether they were
    kept from an earlier trial: with ``keep``, the cache an earlier trial of this process
    filled for the same workload, data and scale; else a new fill with the trial's CPUs
    (torch's threads and ``num_workers``) as fill workers, ``check`` called between its
    batches, kept (with ``keep``) in place of any other. The decoding is deterministic (the
    random part is applied after the cache), so a kept cache holds what a new fill would; the
    fill is set-up, before the first window, so keeping it changes no measured step and saves
    the next trial its decoding pass (every sample decoded once)."""
    key = (workload.name, str(data_dir), scale, len(path.decoded))
    if keep and key in _KEPT:
        return _KEPT[key], True
    _KEPT.clear()  # one cache at a time: the memory of another is not this trial's
    cpus = torch.get_num_threads() + num_workers  # the trial's (tuner.trial.harness)
    cache = DecodedCache.fill(path.decoded, workers=cpus if cpus > 1 else 0, deadline=check)
    if keep:
        _KEPT[key] = cache
    return cache, False


_PREFIX: dict[tuple, DecodedCache] = {}
"""The decoded samples a compute-only trial of this process read, in index order (one
workload, data and scale at a time): the next one reads only the samples beyond them."""


def decoded_prefix(workload: Workload, path: Any, data_dir: Path, scale: str,
                   samples: int) -> DecodedCache:
    """The first ``samples`` decoded samples of ``path`` (at most all of them) as a
    ``DecodedCache`` in host memory: from the cache an earlier trial kept (``kept_cache``),
    else decoded in this process, reusing the samples an earlier compute-only trial of the
    process decoded. The memory probe's trials read one batch each, of a growing size: they
    decode the largest batch once in all, not every batch again."""
    key = (workload.name, str(data_dir), scale, len(path.decoded))
    n = min(samples, distinct(path.decoded))
    if key in _KEPT:
        return DecodedCache(tuple(t[:n] for t in _KEPT[key].tensors))
    done = _PREFIX.get(key)
    have = 0 if done is None else len(done)
    if have < n:  # decode the samples beyond those read already, in this process
        more = DecodedCache.fill(Subset(path.decoded, range(have, n)))
        done = more if done is None else DecodedCache(
            tuple(torch.cat(pair) for pair in zip(done.tensors, more.tensors)))
        _PREFIX.clear()
        _PREFIX[key] = done
    return DecodedCache(tuple(t[:n] for t in done.tensors))


def _loader(workload: Workload, knobs: Knobs, dataset: Dataset,
            shard: tuple[int, int] | None = None) -> DataLoader:
    if shard is None:
        _check_batch(knobs, len(dataset))
        return DataLoader(dataset, shuffle=True, drop_last=True,
                          collate_fn=workload.collate_fn(), **knobs.dataloader_kwargs())
    rank, world_size = shard
    _check_batch(knobs, len(dataset) // world_size)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 drop_last=True)
    return DataLoader(dataset, sampler=sampler, drop_last=True,
                      collate_fn=workload.collate_fn(), **knobs.dataloader_kwargs())


def _check_batch(knobs: Knobs, samples: int) -> None:
    if samples < knobs.batch_size:
        raise TrialFailure(f"batch_size {knobs.batch_size} exceeds the dataset's "
                           f"{samples} samples (batches drop the incomplete last one)")


def resident(loader: Iterable, device: torch.device, knobs: Knobs, count: int) -> Iterator:
    """``count`` batches moved to the device once, cycled: no loading, decoding or copying is
    measured (the compute-only ceiling; the memory probe)."""
    source = cycle(loader)
    try:
        resident = [move_batch(next(source), device, knobs) for _ in range(count)]
    finally:
        source.close()  # workers are not needed any more
    return repeat(resident)


def on_device(batch: Any) -> Any:
    """The move of resident batches: they are on the device already."""
    return batch


@dataclass
class Stepper:
    """Optimizer steps over a batch source: each step runs ``grad_accum`` micro-batches (next
    batch, move it to the device, forward, backward), then the optimizer step."""
    training: Training
    batches: Iterator
    """Batches forever: the DataLoader cycled across epochs, or resident batches."""
    move: Callable[[Any], Any]
    """Puts a batch from ``batches`` on the device."""
    sampler: HostMemorySampler
    """Checked after each step: a host memory limit ends the trial as soon as it is crossed."""
    loss: torch.Tensor | None = None
    """The last micro-batch's loss (scaled for gradient accumulation)."""
    steps_run: int = 0
    """Optimizer steps run so far (warm-up, probes and windows; skipped ones too)."""

    @property
    def knobs(self) -> Knobs:
        return self.training.knobs

    def step(self, timer: Callable[[str], None] | None = None) -> int:
        """One optimizer step; returns the samples processed. With ``timer``, calls
        timer(phase) at the end of each phase (``tuner.settings.PHASES``)."""
        mark = timer or no_timer
        samples = 0
        accum = self.training.knobs.grad_accum
        for micro in range(accum):
            raw = next(self.batches)
            mark("data_wait")
            batch = self.move(raw)
            mark("h2d")
            with self.training.sync(last=micro == accum - 1):
                self.loss = self.training.forward(batch)
                mark("forward")
                self.training.backward(self.loss)
            mark("backward")
            samples += self.training.workload.samples_in(batch)
        self.training.step()
        mark("optimizer")
        self.steps_run += 1
        if self.sampler.exceeded.is_set():
            raise LimitExceeded(f"host memory (process + DataLoader workers) went over the "
                                f"limit of {self.sampler.limit_mb:,.0f} MB", "host")
        return samples

    def loss_scale(self) -> float | None:
        """The fp16 GradScaler's scale (synchronises with the device), None without one."""
        scaler = self.training.scaler
        return None if scaler is None else scaler.get_scale()


@dataclass
class LoaderStepper:
    """The loader-only ceiling's steps: ``grad_accum`` batches taken from the DataLoader and
    moved to the device, no model (the stepper interface: ``step``, ``batches``, ``loss``)."""
    workload: Workload
    knobs: Knobs
    batches: Iterator
    move: Callable[[Any], Any]
    loss: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
    """No loss: zero, so the warm-up's finiteness check passes."""
    steps_run: int = 0
    """Steps run so far."""

    def step(self, timer: Callable[[str], None] | None = None) -> int:
        mark = timer or no_timer
        samples = 0
        for _ in range(self.knobs.grad_accum):
            raw = next(self.batches)
            mark("data_wait")
            samples += self.workload.samples_in(self.move(raw))
            mark("h2d")
        self.steps_run += 1
        return samples

    def loss_scale(self) -> None:
        """No optimizer, no GradScaler."""
        return None


def no_timer(phase: str) -> None:
    pass


def phase_timer(phases: dict[str, float], start: float) -> Callable[[str], None]:
    """A ``Stepper.step`` timer adding to ``phases`` the seconds since the last mark (the
    first: ``start``); the loop's own time between steps lands in the next data wait."""
    last = start

    def timer(phase: str) -> None:
        nonlocal last
        now = time.perf_counter()
        phases[phase] += now - last
        last = now
    return timer


def phase_columns(totals: dict[str, float], steps: int) -> dict:
    """The breakdown columns from each phase's seconds over ``steps`` steps: mean ms per
    optimizer step in each phase (``<phase>_ms``), its share (``<phase>_pct``) and their sum
    (``breakdown_step_ms``); none without a step."""
    if steps <= 0:
        return {}
    step_ms = sum(totals[phase] for phase in PHASES) * 1000 / steps
    out = {"breakdown_step_ms": step_ms}
    for phase in PHASES:
        ms = totals[phase] * 1000 / steps
        out[f"{phase}_ms"] = ms
        out[f"{phase}_pct"] = 100 * ms / step_ms if step_ms > 0 else None
    return out


def breakdown(train_step: Callable, device: torch.device, steps: int) -> dict:
    """Mean ms per optimizer step in each phase over ``steps`` synchronised steps, and each
    phase's share (CUDA; on CPU the windows time it, ``_timed_window``). Kept apart from the
    windows: the synchronisations slow the step down."""
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
    return phase_columns(totals, steps)
