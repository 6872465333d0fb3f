"""One rank of a data-parallel trial: its place in the process group and the lockstep of the
measured loop.

Rank 0 runs the harness's measured loop (warm-up, windows and every decision they take on
time); before each of its optimizer steps it tells the other ranks to step too, and at the end
to stop. The commands travel over a gloo group of the hosts, so no device synchronises for
them, and every rank runs exactly the steps rank 0 runs: DDP's all-reduces always pair up,
whatever a loaded machine does to one rank's clock. Each rank times its own wait for data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

STEP, STOP = 1, 0
"""Commands rank 0 broadcasts before each step and at the end."""


class TimedBatches:
    """An iterator of batches that adds the seconds each ``next`` waited to ``wait_s``."""

    def __init__(self, batches: Iterator):
        self.batches = batches
        self.wait_s = 0.0

    def __iter__(self) -> "TimedBatches":
        return self

    def __next__(self) -> Any:
        started = time.perf_counter()
        try:
            return next(self.batches)
        finally:
            self.wait_s += time.perf_counter() - started

    def close(self) -> None:
        close = getattr(self.batches, "close", None)
        if close is not None:
            close()


@dataclass
class Rank:
    """This process's rank in an initialised process group, with the host-side control
    group (gloo) the lockstep commands and the end-of-trial figures travel on. Creating it is
    a collective: every rank creates one, in the same order."""
    rank: int
    world_size: int
    group: Any = field(repr=False, default=None)
    batches: TimedBatches | None = field(repr=False, default=None)
    samples: int = 0
    """Samples this rank processed so far (warm-up included)."""

    @classmethod
    def joined(cls) -> "Rank":
        """The rank of this process (``torch.distributed`` initialised, as Ray Train does)."""
        return cls(dist.get_rank(), dist.get_world_size(), dist.new_group(backend="gloo"))

    @property
    def shard(self) -> tuple[int, int]:
        """(rank, world size): which share of the samples this rank's DataLoader reads."""
        return self.rank, self.world_size

    def timed(self, stepper: Any) -> Any:
        """``stepper`` with its batches timed (``data_wait_s``); on rank 0 also leading: each
        step first tells the other ranks to step."""
        self.batches = stepper.batches = TimedBatches(stepper.batches)
        return Leader(stepper, self) if self.rank == 0 else stepper

    @property
    def data_wait_s(self) -> float | None:
        return None if self.batches is None else self.batches.wait_s

    def send(self, command: int) -> None:
        """Rank 0: broadcast ``command`` (STEP or STOP)."""
        dist.broadcast(torch.tensor([command], dtype=torch.int64), src=0, group=self.group)

    def receive(self) -> int:
        """Ranks > 0: the next command of rank 0."""
        command = torch.zeros(1, dtype=torch.int64)
        dist.broadcast(command, src=0, group=self.group)
        return int(command.item())

    def gather(self, item: Any) -> list[Any]:
        """Every rank's ``item`` (picklable), in rank order, on every rank."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, item, group=self.group)
        return out


class Leader:
    """Rank 0's stepper: the harness's ``Stepper`` that tells the other ranks to step before
    each of its own steps (the stepper interface otherwise unchanged)."""

    def __init__(self, stepper: Any, rank: "Rank"):
        self._stepper = stepper
        self._rank = rank

    def step(self, timer: Callable[[str], None] | None = None) -> int:
        self._rank.send(STEP)
        samples = self._stepper.step(timer)
        self._rank.samples += samples
        return samples

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stepper, name)


def follow(stepper: Any, rank: Rank) -> int:
    """Ranks > 0: step whenever rank 0 says so, until it says stop. Returns the samples
    processed. Raises what a step raises (an OOM: Ray Train then ends every rank)."""
    try:
        while rank.receive() == STEP:
            rank.samples += stepper.step()
    finally:
        stepper.batches.close()
    return rank.samples


@dataclass(frozen=True)
class RankFigures:
    """What one rank measured, gathered by rank 0 at the end of a trial."""
    rank: int
    samples: int
    """Samples this rank processed, warm-up included."""
    data_wait_s: float | None
    """Seconds its training loop waited for batches."""
    peak_device_memory_mb: float | None
    node_id: str | None


def merge(result: dict, figures: list[RankFigures], backend: str) -> dict:
    """Rank 0's ``result`` as the trial's: ``samples_per_sec`` and each ``<unit>_per_sec`` the
    global figure (rank 0's windows, scaled by the samples all ranks processed over rank 0's:
    the ranks step together, so the sum over ranks), ``rank_samples_per_sec`` rank 0's own,
    ``world_size``, ``backend``, the slowest rank's data wait and which rank it was (the
    straggler), the largest peak device memory of any rank."""
    out = dict(result, world_size=len(figures), backend=backend)
    lead = figures[0].samples
    scale = sum(f.samples for f in figures) / lead if lead else float(len(figures))
    rate = result.get("samples_per_sec")
    out["rank_samples_per_sec"] = rate
    if rate is not None:
        for key, value in result.items():
            if key.endswith("_per_sec") and key != "samples_per_sec_iqr" and value is not None:
                out[key] = value * scale
        if result.get("samples_per_sec_iqr") is not None:
            out["samples_per_sec_iqr"] = result["samples_per_sec_iqr"] * scale
    waits = [(f.data_wait_s, f.rank) for f in figures if f.data_wait_s is not None]
    if waits:
        out["slowest_rank_data_wait_s"], out["slowest_rank"] = max(waits)
    peaks = [f.peak_device_memory_mb for f in figures if f.peak_device_memory_mb is not None]
    if peaks:
        out["peak_device_memory_mb"] = max(peaks)
    return out
