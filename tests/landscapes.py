"""Synthetic workloads whose step time is spent in sleeps, with throughput landscapes shaped like
those measured on one H200 for ddpm (2026-11-27, torch 2.11), and their known optimum.

Importable as ``tests.landscapes`` (tests/ is a package), so a CPU run tunes one as a user's
workload::

    python -m tuner run --workload tests.landscapes:launch_bound --time-budget 120 --seed 0

Each landscape searches ddpm's built-in space (``space = "ddpm"``: on CPU the batch size,
``num_workers``, ``prefetch_factor``, ``persistent_workers``, ``channels_last``,
``fused_optimizer`` and ``data_path`` are searched) and has ddpm's references (baseline batch 8,
4 workers; recommended batch 32, 6 workers, persistent). Because the time is slept, not
computed, a landscape holds its shape on a loaded 2-core machine, and its optimum follows from
its ``Shape`` (``Landscape.optimum``).

A landscape stands in for a GPU: its memory limit is a device's (``Workload.device_memory_bound``),
so a run probes it under ``--probe auto`` as a CUDA run probes the card (the probe's timed steps
give the compute curve, the search starts from the machine's structured points).

The model of one configuration (``Landscape.samples_per_sec``), all times in seconds:

* step time ``T(b) = max(overhead_s x f, per_sample_s x b x c)``: a per-step overhead (kernel
  launches; H200 ddpm: 45 ms flat from batch 8 to 104) up to the knee, compute linear in the
  batch after it. ``f = FUSED_OVERHEAD`` with ``fused_optimizer`` (fewer launches), ``c =
  CHANNELS_LAST_COMPUTE`` with ``channels_last`` (faster convolutions), else 1.
* host work per sample: ``decode_s`` (the deterministic part, cached by ``data_path=cache`` and
  ``device``; with ``decode_waits`` a wait, as a read from network storage is, not CPU work)
  and ``augment_s`` (the random part, on the host for ``loader`` and ``cache``);
  ``augment_batch_s`` per batch on the ``device`` path. The host has ``HOST_CORES`` cores: in a
  DataLoader worker each sample's sleep is stretched by ``max(1, num_workers / HOST_CORES)``,
  so workers beyond the cores add nothing, on any machine; a decode that waits is not
  stretched, so there each worker adds its own ``1 / decode_s``.
* rate: ``b / (T + b x host)`` without workers (``host`` = decode + augment for ``loader``,
  augment for ``cache``), ``min(b / T, min(nw, HOST_CORES) / host)`` with ``nw`` workers
  (persistent ones: a worker restart per epoch is a cost the model leaves out), ``b / (T +
  augment_batch_s)`` on the ``device`` path. With ``decode_waits`` the workers deliver ``nw /
  (decode_s + augment_s x max(1, nw / HOST_CORES))`` instead.
* ``first_step_s``: a one-off cost of a trial's first step (cuDNN autotuning at a new shape),
  during which the DataLoader workers fill their prefetch queue.
* memory ``memory_base_mb + memory_per_sample_mb x b``; a batch over ``memory_limit_mb`` raises
  ``torch.OutOfMemoryError`` in its first step (the trial ends ``oom``): the fake device's limit.

How the sleeps realise the model: the training step sleeps until ``T(b)`` plus the host work
done in the training process (decoding with ``num_workers=0``, device augmentation) has passed
since the previous training step's modelled end, so the real cost of a step (backward,
optimizer, collate: ~2 ms of CPU, tens of ms of wall time on a machine loaded 10x its cores)
and a late wake-up are absorbed while they stay under ``T(b)``; DataLoader workers sleep in
parallel to it. Steps are long for that (90-300 ms, the H200's shape at a quarter of its
rates). The harness's pause between two windows overlaps a step, as a device's queue would: a
window can read faster than the model by that pause (~1 % of a 2-s window on a loaded machine).
"""

from __future__ import annotations

import itertools
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, get_worker_info

from tests.fake_workloads import _Augmented  # the loader path: decode, then augment per item
from tuner.data import SamplePath
from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.workload import Workload
from tuner.workloads._data import write_once

HOST_CORES = 2
"""Cores of the landscapes' modelled host: decoding scales with DataLoader workers up to this."""
MAX_WORKERS = 8
MAX_BATCH = 256
"""The most DataLoader workers and the largest batch ddpm's space allows."""
FUSED_OVERHEAD = 0.85
"""Per-step overhead with ``fused_optimizer`` relative to without (one kernel per group)."""
CHANNELS_LAST_COMPUTE = 0.8
"""Per-sample compute with ``channels_last`` relative to without."""
CHANNELS = 2
SIDE = 4
"""A sample: a (CHANNELS, SIDE, SIDE) image, stored as uint8, and a float target."""

QUANTUM_S = 0.005
"""Host work is slept in pieces of at least this: a sleep per sample of 50 us would add a
scheduler wake-up (up to milliseconds on a loaded machine) to every sample."""
CATCH_UP_S = 0.05
"""A late wake-up is made up by sleeping less afterwards, up to this far behind: host work
runs at its modelled rate however late the scheduler wakes the process, while an idle spell
(a worker waiting for room in its queue) is not turned into a burst."""

_host_s = 0.0
"""Seconds of host work done in the training process (not in a DataLoader worker) since the
last training step: the next step's period includes them."""
_clock = {"pid": None, "due": 0.0}
"""This process's host-work clock: when its host work so far is due to end."""


@dataclass(frozen=True)
class Shape:
    """The parameters of one landscape (seconds, samples, MiB)."""

    overhead_s: float
    """Per-step overhead: the step time below the knee, without fused_optimizer."""
    per_sample_s: float
    """Compute per sample: the step time above the knee is ``per_sample_s x batch``."""
    decode_s: float
    """Host time to decode one sample (loader path; the cache fill)."""
    augment_s: float
    """Host time to augment one sample (loader and cache paths)."""
    augment_batch_s: float
    """Time to augment one batch on the device path."""
    samples: int
    """Samples in the dataset."""
    memory_base_mb: float
    memory_per_sample_mb: float
    memory_limit_mb: float
    """The fake device's memory: a batch whose modelled memory is above the limit is OOM."""
    decode_waits: bool = False
    """The decode waits (remote storage) rather than computes: workers past the cores add."""
    first_step_s: float = 0.0
    """One-off seconds of a trial's first training step (autotuning at a new shape)."""


@dataclass(frozen=True)
class Optimum:
    """The best configuration of a landscape by its model: samples/sec, and the simplest knobs
    that reach it (the device path first, then fewer workers, then the smallest batch)."""

    samples_per_sec: float
    knobs: Knobs


def _slept(seconds: float, waits: bool = False) -> None:
    """Spend ``seconds`` of host work on this process's host-work clock (``QUANTUM_S``,
    ``CATCH_UP_S``): in a DataLoader worker stretched by the workers beyond ``HOST_CORES``
    (not where the work ``waits``: a wait takes no core); in the training process also added
    to the next training step's period."""
    global _host_s
    info = get_worker_info()
    if info is None:
        _host_s += seconds
    elif not waits:
        seconds *= max(1.0, info.num_workers / HOST_CORES)
    now = time.perf_counter()
    if _clock["pid"] != os.getpid():  # a new process (a forked worker): its clock starts now
        _clock.update(pid=os.getpid(), due=now)
    _clock["due"] = max(_clock["due"], now - CATCH_UP_S) + seconds
    if _clock["due"] - now >= QUANTUM_S:
        time.sleep(_clock["due"] - now)


class _Decoded(Dataset):
    """The deterministic part: sample i of the data file, a uint8 (CHANNELS, SIDE, SIDE)
    image and a float32 target, after ``decode_s`` of host time (views of the file's arrays:
    a few microseconds of real work, so that the sleeps are the cost)."""

    def __init__(self, data_dir: Path, decode_s: float, waits: bool = False):
        path = Path(data_dir) / "samples.npy"
        if not path.is_file():
            raise DataError(f"data directory {data_dir} holds no samples.npy")
        rows = np.load(path)
        self.images = torch.from_numpy(
            np.ascontiguousarray(rows[:, :-1]).reshape(len(rows), CHANNELS, SIDE, SIDE))
        self.targets = torch.from_numpy(rows[:, -1].astype(np.float32) / 255)
        self.decode_s = decode_s
        self.waits = waits

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        _slept(self.decode_s, self.waits)
        return self.images[i], self.targets[i]


class _Augment:
    """The random part on the host, per sample (``augment_s``), or on the device path per
    batch (``augment_batch_s``): its time only, the sample unchanged (the training step
    scales the image to [0, 1])."""

    def __init__(self, augment_s: float):
        self.augment_s = augment_s

    def __call__(self, sample):
        _slept(self.augment_s)
        return sample


class Landscape(Workload):
    """A workload whose samples/sec follows ``shape`` (see the module's docstring)."""

    shape: Shape
    description = "sleeps shaped like a measured GPU landscape (engine tests and bench)"
    source = "tests: the H200 ddpm measurements of 2026-11-27"
    space = "ddpm"
    learning_rate = 1e-3
    device_memory_bound = True  # the fake device's memory: a run probes it as on CUDA
    references = {
        "baseline": Knobs(batch_size=8, num_workers=4, amp="fp16"),
        "recommended": Knobs(batch_size=32, num_workers=6, amp="fp16", pin_memory=True,
                             persistent_workers=True, prefetch_factor=2,
                             cudnn_benchmark=True),
    }

    # ------------------------------------------------------------------ the workload

    def build_model(self, scale: str) -> nn.Module:
        # One 3x3 convolution: a 4-D weight, so channels_last is searched; little real work.
        return nn.Conv2d(CHANNELS, 1, 3, padding=1, bias=False)

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        return _Augmented(_Decoded(data_dir, self.shape.decode_s, self.shape.decode_waits),
                          _Augment(self.shape.augment_s))

    def sample_path(self, data_dir: Path, scale: str) -> SamplePath:
        return SamplePath(decoded=_Decoded(data_dir, self.shape.decode_s),
                          augment=_Augment(self.shape.augment_s),
                          augment_batch=_Augment(self.shape.augment_batch_s))

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        samples = self.shape.samples

        def write(tmp: Path) -> None:
            rng = np.random.default_rng(0)
            rows = rng.integers(0, 256, size=(samples, CHANNELS * SIDE * SIDE + 1))
            np.save(tmp / "samples.npy", rows.astype(np.uint8))
        return write_once(Path(cache_dir) / f"{self.name}-{samples}-v1", write)

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        return {"image": [CHANNELS, SIDE, SIDE], "target": []}

    def build_optimizer(self, params, fused: bool) -> torch.optim.Optimizer:
        params = list(params)
        for p in params:  # the training step reads it (the workload sees no knobs)
            p.landscape_fused = bool(fused)
        return super().build_optimizer(params, fused)

    def training_step(self, model: nn.Module, batch) -> torch.Tensor:
        global _host_s
        image, target = batch
        loss = nn.functional.mse_loss(model(image.float() / 255).mean(dim=(1, 2, 3)), target)
        if image.device.type == "meta":  # the run's FLOP count (tuner.trial.flops): no time
            return loss
        weight = model.weight
        fused = getattr(weight, "landscape_fused", False)
        channels_last = (weight.is_contiguous(memory_format=torch.channels_last)
                         and not weight.is_contiguous())
        batch_size = image.shape[0]
        self.check_memory(batch_size)
        step_s = self.step_s(batch_size, fused, channels_last)
        last = getattr(model, "landscape_step_end", None)  # a new model per trial
        now = time.perf_counter()
        if last is None:  # the first step: nothing before it to pace from
            time.sleep(step_s + self.shape.first_step_s)
            end = time.perf_counter()
        else:
            # A late wake-up is made up in the next step; a step that starts late (waiting
            # for data, or a slow host) is not.
            end = max(now, last + step_s + _host_s)
            if end > now:
                time.sleep(end - now)
        _host_s = 0.0
        model.landscape_step_end = end
        _clock.update(pid=os.getpid(), due=end)
        return loss

    # ------------------------------------------------------------------ the model

    def memory_mb(self, batch_size: int) -> float:
        """Modelled device memory of one step at ``batch_size``, MiB."""
        return self.shape.memory_base_mb + self.shape.memory_per_sample_mb * batch_size

    def max_batch(self) -> int:
        """The largest batch whose memory fits the fake device."""
        s = self.shape
        return int(math.floor((s.memory_limit_mb - s.memory_base_mb) / s.memory_per_sample_mb))

    def check_memory(self, batch_size: int) -> None:
        """Raise torch.OutOfMemoryError when ``batch_size`` does not fit the fake device."""
        if batch_size > self.max_batch():
            raise torch.OutOfMemoryError(
                f"CUDA out of memory (modelled): batch {batch_size} needs "
                f"{self.memory_mb(batch_size):,.0f} MiB of {self.shape.memory_limit_mb:,.0f} MiB")

    def step_s(self, batch_size: int, fused: bool, channels_last: bool) -> float:
        """Modelled step time ``T(b)``, s."""
        s = self.shape
        return max(s.overhead_s * (FUSED_OVERHEAD if fused else 1.0),
                   s.per_sample_s * batch_size * (CHANNELS_LAST_COMPUTE if channels_last else 1.0))

    def samples_per_sec(self, knobs: Knobs) -> float | None:
        """Modelled samples/sec of ``knobs`` as applied on CPU (None: out of memory)."""
        s, b = self.shape, knobs.batch_size
        if b > self.max_batch() or b > s.samples:
            return None
        step = self.step_s(b, knobs.fused_optimizer, knobs.channels_last)
        if knobs.data_path == "device":
            return b / (step + s.augment_batch_s)
        host = s.augment_s + (s.decode_s if knobs.data_path == "loader" else 0.0)
        nw = knobs.num_workers
        if nw == 0:
            return b / (step + b * host)
        if s.decode_waits and knobs.data_path == "loader":
            return min(b / step, nw / (s.decode_s + s.augment_s * max(1.0, nw / HOST_CORES)))
        return min(b / step, min(nw, HOST_CORES) / host)

    def data_paths(self) -> tuple[str, ...]:
        """The data paths a run of it searches: the three, or 'loader' alone without a
        sample path (``sample_path`` None)."""
        return ("device", "cache", "loader")

    def optimum(self) -> Optimum:
        """The best modelled configuration over every batch that fits, its data paths, 0..
        ``MAX_WORKERS`` workers (persistent), fused_optimizer and channels_last."""
        best: Optimum | None = None
        top = min(self.max_batch(), self.shape.samples, MAX_BATCH)
        for path, workers, fused, cl in itertools.product(
                self.data_paths(), range(MAX_WORKERS + 1), (False, True), (False, True)):
            if path == "device" and workers:
                continue
            extra = {"persistent_workers": True} if workers else {}
            for b in range(1, top + 1):
                knobs = Knobs(batch_size=b, data_path=path, num_workers=workers,
                              fused_optimizer=fused, channels_last=cl, **extra)
                rate = self.samples_per_sec(knobs)
                if best is None or rate > best.samples_per_sec * (1 + 1e-9):
                    best = Optimum(rate, knobs)
        return best

    def doubling_answer(self) -> Optimum:
        """What doubling the recommended's batch until it no longer fits gives (Lightning's
        ``BatchSizeFinder`` in power mode), with the recommended's other knobs as on CPU."""
        knobs = self.references["recommended"].clamp("cpu")[0]
        b = knobs.batch_size
        while 2 * b <= min(self.max_batch(), self.shape.samples):
            b *= 2
        knobs = knobs.replace(batch_size=b)
        return Optimum(self.samples_per_sec(knobs), knobs)


class LaunchBound(Landscape):
    """H200 ddpm's compute curve, slowed down: 180 ms of per-step overhead (153 ms with
    fused_optimizer) up to the knee, then 2 ms a sample (1.6 with channels_last): samples/sec
    grows with the batch to the knee (batch 90; 96 with both knobs) and is flat after it (500;
    625 with channels_last) up to the memory limit at batch 192. Light host work (0.8 ms a
    sample): one worker, the cache or the device path feed it."""

    name = "landscape-launch-bound"
    shape = Shape(overhead_s=0.180, per_sample_s=0.002, decode_s=0.0006, augment_s=0.0002,
                  augment_batch_s=0.004, samples=4096, memory_base_mb=500.0,
                  memory_per_sample_mb=40.0, memory_limit_mb=8192.0)


class DecodeBound(Landscape):
    """Slow decoding (10 ms a sample) and host augmentation (6 ms a sample) on a 2-core host:
    the loader path gives at most 125 samples/sec, the cache 333, the device path (8 ms of
    augmentation per batch) 760 at the memory limit (batch 224) with channels_last (612
    without); compute is small beside decoding (120 ms of overhead, 1.6 ms a sample)."""

    name = "landscape-decode-bound"
    shape = Shape(overhead_s=0.120, per_sample_s=0.0016, decode_s=0.010, augment_s=0.006,
                  augment_batch_s=0.008, samples=512, memory_base_mb=1000.0,
                  memory_per_sample_mb=40.0, memory_limit_mb=9980.0)


class MemoryCapped(Landscape):
    """The launch-bound shape with its knee far above the memory limit (12,000 MiB: batch 64):
    samples/sec grows with the batch up to the limit, so the best batch is the largest that
    fits, where doubling the recommended's batch 32 also ends; fused_optimizer (15 % less
    per-step overhead: 418 samples/sec at batch 64, 356 without) is what lifts the answer
    above doubling's."""

    name = "landscape-memory-capped"
    shape = Shape(overhead_s=0.180, per_sample_s=0.0004, decode_s=0.0006, augment_s=0.0002,
                  augment_batch_s=0.004, samples=4096, memory_base_mb=480.0,
                  memory_per_sample_mb=180.0, memory_limit_mb=12000.0)


class IoBound(Landscape):
    """A dataset read from network storage, too large to cache: each sample waits 10 ms for
    its bytes (no core busy) and takes 0.2 ms of host augmentation, so every DataLoader worker
    adds about 100 samples/sec: 196 with two workers (the cores), 741 with eight (ddpm's
    space's most) from batch 89 up to the memory limit at 128. Compute is fast beside it (120
    ms of overhead, then 0.5 ms a sample), and the first step pays 2 s once (an H200's first
    step without cuDNN autotuning) while the workers fill their prefetch queue: a short window
    after it can read the queue, not the workers. 16,384 samples: an epoch's end, where the
    workers start the next epoch's batches, costs under 3 %."""

    name = "landscape-io-bound"
    shape = Shape(overhead_s=0.120, per_sample_s=0.0005, decode_s=0.010, augment_s=0.0002,
                  augment_batch_s=0.004, samples=16384, memory_base_mb=500.0,
                  memory_per_sample_mb=40.0, memory_limit_mb=5620.0, decode_waits=True,
                  first_step_s=2.0)

    def sample_path(self, data_dir: Path, scale: str) -> SamplePath | None:
        return None  # too large to cache: the DataLoader path only

    def data_paths(self) -> tuple[str, ...]:
        return ("loader",)


launch_bound = LaunchBound()
decode_bound = DecodeBound()
memory_capped = MemoryCapped()
io_bound = IoBound()

LANDSCAPES = {"launch-bound": launch_bound, "decode-bound": decode_bound,
              "memory-capped": memory_capped, "io-bound": io_bound}
"""The landscapes by short name; ``tests.landscapes:<name with _>`` is each one's import path."""


def import_path(short_name: str) -> str:
    """``tests.landscapes:launch_bound`` for 'launch-bound'."""
    return f"tests.landscapes:{short_name.replace('-', '_')}"
