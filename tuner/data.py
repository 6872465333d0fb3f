"""The data path: how samples reach the training step, and the code to use a chosen one.

A workload may split how it makes a sample into a deterministic part (read, decode, resize:
the same every epoch, so it can be done once) and a random part (augmentation: drawn anew for
every sample in every epoch). ``Workload.sample_path`` returns that split as a ``SamplePath``;
the ``data_path`` knob then picks one of three ways to feed the training step:

* ``loader``: the workload's own dataset through a DataLoader, as a training script does
  without tuner (decode and augment in the workers, every epoch);
* ``cache``: the decoded samples held once in host memory (``DecodedCache``, shared with the
  DataLoader's workers without a copy); the workers apply only the random part
  (``CachedDataset``);
* ``device``: the decoded samples resident in device memory (uint8 images: a quarter of
  float32), whole batches gathered and augmented on the device with random parameters drawn
  per sample (``DeviceBatches``); no DataLoader workers.

A training script uses a chosen path with the same objects::

    from tuner.data import DecodedCache, CachedDataset, DeviceBatches
    path = workload.sample_path(data_dir, scale)         # or a SamplePath of your own
    cache = DecodedCache.fill(path.decoded, workers=4)   # one pass of decoding
    # cache:
    loader = torch.utils.data.DataLoader(CachedDataset(cache, path.augment), batch_size=64,
                                         shuffle=True, drop_last=True, num_workers=2)
    # device:
    loader = DeviceBatches(cache.to("cuda"), batch_size=64, augment=path.augment_batch)
    for batch in loader: ...                             # one epoch, shuffled, last batch dropped

Memory: a cache holds ``len(decoded) x sample_bytes(decoded[0])`` bytes (``cache_bytes``),
in host memory for ``cache`` and in device memory for ``device``; nothing is written to disk,
so a fill that fails or is interrupted leaves nothing a later run could read.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from tuner.knobs import DATA_PATHS

__all__ = ["DATA_PATHS", "SamplePath", "DecodedCache", "CachedDataset", "DeviceBatches",
           "sample_bytes", "cache_bytes"]


Sample = tuple
"""A decoded sample: a tuple of tensors of fixed shapes and dtypes (scalars as 0-d tensors)."""


@dataclass(frozen=True)
class SamplePath:
    """A workload's sample path split at the cache boundary (``Workload.sample_path``).

    The three parts must agree: ``augment(decoded[i])`` is distributed as the workload's own
    dataset's item ``i`` (its ``build_dataset``), and ``augment_batch`` applied to the decoded
    samples stacked on a device gives each sample the same distribution, its random parameters
    drawn per sample (never one draw for the whole batch).
    """

    decoded: Dataset
    """Index -> the deterministic part of sample i: a tuple of tensors whose shapes and dtypes
    are the same for every i (images as uint8 ``(C, H, W)``). Raises ``tuner.errors.DataError``
    naming the file for one that fails to decode. Optional attribute ``distinct`` (int): item
    i equals item ``i % distinct`` (several random samples per decoded one in an epoch, e.g.
    patches of a volume); a cache then holds ``distinct`` samples, ``len`` per epoch."""
    augment: Callable[[Sample], Any]
    """The random part for one decoded sample, on the CPU (in DataLoader workers; torch's
    random generator, which DataLoader seeds per worker): returns the item the workload's own
    dataset returns."""
    augment_batch: Callable[[Sample], Any]
    """The random part for a batch of decoded samples stacked on a device (each tensor with a
    leading batch dimension B), parameters drawn per sample from torch's generator on that
    device: returns what the DataLoader's collate gives for B items of the workload's own
    dataset."""


def sample_bytes(sample: Sample) -> int:
    """Bytes of one decoded sample's tensors."""
    return sum(_as_tensor(t).nelement() * _as_tensor(t).element_size() for t in sample)


def cache_bytes(path: SamplePath) -> int:
    """Bytes the decoded samples of ``path`` take in a cache (host or device): the sample count
    times the first sample's bytes (every sample has the same shapes)."""
    return distinct(path.decoded) * sample_bytes(path.decoded[0])


def distinct(decoded: Dataset) -> int:
    """The decoded samples a cache holds: ``decoded.distinct`` where set, else ``len``."""
    return int(getattr(decoded, "distinct", len(decoded)))


def _as_tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


def _stack(items: Sequence[Sample]) -> Sample:
    """Collate for the fill: decoded samples -> one tensor per field, leading dimension B.
    Raises ValueError when two of them differ in shape or dtype."""
    fields = [[_as_tensor(value) for value in fields] for fields in zip(*items)]
    for values in fields:
        kinds = {(tuple(v.shape), v.dtype) for v in values}
        if len(kinds) > 1:
            seen = ", ".join(sorted(f"{list(shape)} {dtype}" for shape, dtype in kinds))
            raise ValueError(f"decoded samples differ in shape or dtype ({seen}): a cache "
                             "needs fixed shapes")
    return tuple(torch.stack(values) for values in fields)


class DecodedCache:
    """The decoded samples of a ``SamplePath``, one tensor per field with the sample index as
    its leading dimension (N x the sample's shape), filled once.

    On the CPU the tensors are in shared memory: DataLoader workers (forked or spawned) read
    them without a copy, and ``tuner.trial.measure``'s host-memory figure (proportional set size)
    counts them once.
    """

    def __init__(self, tensors: Sample, fill_s: float = 0.0, length: int | None = None):
        self.tensors = tensors
        self.length = len(tensors[0]) if length is None else length
        """Samples per epoch; item i is stored sample ``i % len(tensors[0])``."""
        self.fill_s = fill_s
        """Seconds the fill took (decoding every sample once)."""

    @classmethod
    def fill(cls, decoded: Dataset, workers: int = 0, batch: int = 16,
             deadline: Callable[[], None] | None = None) -> "DecodedCache":
        """Decode every sample of ``decoded`` once, with ``workers`` DataLoader worker
        processes (0: in this process), into shared host memory.

        Args:
            decoded: a ``SamplePath.decoded``.
            workers: DataLoader workers for the fill (>= 0).
            batch: samples per worker task.
            deadline: called between batches; raises to stop the fill (a time budget).

        Raises:
            tuner.errors.DataError: a sample fails to decode (from ``decoded``, naming the file;
                inside a worker DataLoader re-raises it with the worker's traceback).
            ValueError: ``decoded`` is empty or its samples differ in shape or dtype.
        """
        started = time.perf_counter()
        length, n = len(decoded), distinct(decoded)
        if n == 0:
            raise ValueError("the decoded dataset is empty: nothing to cache")
        loader = DataLoader(Subset(decoded, range(n)), batch_size=batch, shuffle=False,
                            num_workers=workers, collate_fn=_stack)
        tensors: Sample | None = None
        at = 0
        for chunk in loader:
            if tensors is None:
                tensors = tuple(torch.empty((n, *t.shape[1:]), dtype=t.dtype).share_memory_()
                                for t in chunk)
            if len(chunk) != len(tensors) or any(
                    c.shape[1:] != t.shape[1:] or c.dtype != t.dtype
                    for c, t in zip(chunk, tensors)):
                raise ValueError(f"decoded samples {at}..{at + len(chunk[0]) - 1} differ in "
                                 "shape or dtype from sample 0: a cache needs fixed shapes")
            for c, t in zip(chunk, tensors):
                t[at:at + len(c)] = c
            at += len(chunk[0])
            if deadline is not None:
                deadline()
        return cls(tensors, time.perf_counter() - started, length)

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds."""
        return sum(t.nelement() * t.element_size() for t in self.tensors)

    def __getitem__(self, index: int) -> Sample:
        return tuple(t[index % len(self.tensors[0])] for t in self.tensors)

    def to(self, device: torch.device | str) -> "DecodedCache":
        """The cache resident on ``device`` (one copy; the dtypes kept)."""
        return DecodedCache(tuple(t.to(device) for t in self.tensors), self.fill_s, self.length)


class CachedDataset(Dataset):
    """A ``DecodedCache`` with the random part applied per item: the dataset of the ``cache``
    path (a DataLoader over it shuffles, batches and runs ``augment`` in its workers)."""

    def __init__(self, cache: DecodedCache, augment: Callable[[Sample], Any]):
        self.cache = cache
        self.augment = augment

    def __len__(self) -> int:
        return len(self.cache)

    def __getitem__(self, index: int) -> Any:
        return self.augment(self.cache[index])


class DeviceBatches:
    """Batches of the ``device`` path: iterating gives one epoch of a resident
    ``DecodedCache``, shuffled (a new permutation per epoch, as ``DataLoader(shuffle=True)``)
    and cut into ``len(cache) // batch_size`` batches (the last incomplete one dropped), each
    gathered on the cache's device and passed through ``augment`` (``SamplePath.augment_batch``).

    Raises:
        ValueError: ``batch_size`` < 1 or above the number of samples.
    """

    def __init__(self, cache: DecodedCache, batch_size: int,
                 augment: Callable[[Sample], Any]):
        if not 1 <= batch_size <= len(cache):
            raise ValueError(f"batch_size {batch_size}: accepted 1..{len(cache)} (the cached "
                             "samples; the last incomplete batch is dropped)")
        self.cache, self.batch_size, self.augment = cache, batch_size, augment
        self.device = cache.tensors[0].device

    def __len__(self) -> int:
        return len(self.cache) // self.batch_size

    def __iter__(self) -> Iterator[Any]:
        order = torch.randperm(len(self.cache), device=self.device)
        for first in range(0, len(self) * self.batch_size, self.batch_size):
            index = order[first:first + self.batch_size] % len(self.cache.tensors[0])
            yield self.augment(tuple(t.index_select(0, index) for t in self.cache.tensors))


def describe_bytes(n: float) -> str:
    """'1.5 GiB', '240.0 MiB', '12 KiB'."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{math.ceil(n / 1024)} KiB"
