"""What a timed window may count when DataLoader workers prefetch: batches the workers finished
before the window (during set-up, a long first step, the warm-up) are consumed at the model's
rate, not the workers'. A window of one long step after a warm-up that let the queue fill reads
the queue (a screen of a 1.13-s step read 3,626 samples/sec where full trials of the same
knobs sustain 794-877). A window here counts only what the pipeline sustains:

* ``ready_batches``: the batches finished and not yet taken (the workers' result queue, the
  pin-memory thread's queue and the batches that arrived out of order), read from the
  DataLoader's multi-process iterator; None without workers, or where the queue cannot be read.
* ``QueueWatch``: through one window, the queue at its start and whether a step found it
  empty. A queue that holds (it lost at most ``HOLD_SHARE`` of the batches taken, or it is full
  but for the batch being made: a compute-bound pipeline, its workers keep up) changes nothing.
  One that shrinks more makes the window go on until steps find it empty: the window then
  counts from the end of the first such step to the end of the latest (each ends as a batch
  has just arrived), at least ``SINCE_EMPTY_SHARE`` of a window and ``DELIVERIES`` batches per
  worker apart. A queue that ran empty once (the workers
  starting an epoch) and then holds counts from that step. A queue that drains without running
  empty twice stops the window at ``MAX_DRAIN_WINDOWS`` windows, which then counts its batches
  less those the queue lost (``QueueWatch.counted``).

Torch-free: the iterator's attributes are read by name (torch's
``_MultiProcessingDataLoaderIter``: ``_worker_result_queue``, ``_data_queue``, ``_task_info``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_DRAIN_WINDOWS = 4
"""A window whose prefetch queue drains without running empty goes on for at most this many
times its length; past it, the batches drained are left out of its count instead."""

HOLD_SHARE = 0.1
"""A queue holds through a window that lost at most this share of the batches taken from it
(the workers made the rest): the window then reads at most about 1 / (1 - HOLD_SHARE) of what
they sustain."""

DELIVERIES = 4
"""A window whose queue ran empty counts at least this many batches per worker after that:
workers started together deliver in bursts of up to one batch each, and a span that ends
inside a burst misreads by up to a burst; over four, by at most a quarter (eight workers of
121-sample batches read 1,185 samples/sec over a 0.5-s span, against the 741 they sustain)."""

SINCE_EMPTY_SHARE = 0.5
"""A window whose queue ran empty holds at least this share of its length after that point."""


def ready_batches(batches: Any) -> int | None:
    """Batches the DataLoader workers behind ``batches`` (``tuner.trial.apply.Cycle``) have
    finished and the loop has not taken yet; None without workers (a single-process iterator
    has no queue) or where the queue's size cannot be read (``qsize`` is not implemented on
    macOS)."""
    iterator = getattr(batches, "iterator", None)
    results = getattr(iterator, "_worker_result_queue", None)
    if results is None:
        return None
    queues = {id(q): q for q in (results, getattr(iterator, "_data_queue", None)) if q is not None}
    try:
        queued = sum(q.qsize() for q in queues.values())
        arrived = sum(len(info) == 2 for info in list(iterator._task_info.values()))
    except (NotImplementedError, AttributeError, RuntimeError):
        return None
    return queued + arrived


Mark = tuple[int, int, float, int]
"""(steps, samples, seconds into the window, ready batches) at the end of a step."""


@dataclass
class QueueWatch:
    """The prefetch queue through one timed window (see the module docstring). ``start``: ready
    batches when the window began (None: nothing to watch); ``since`` and ``last``: the ends
    of the first and of the latest step that found the queue empty (each ends when a batch has
    just arrived)."""

    batches: Any
    start: int | None
    window_s: float
    batches_per_step: int = 1
    """Batches each step takes (``grad_accum``)."""
    workers: int = 0
    """Its DataLoader workers."""
    capacity: int = 0
    """Batches the workers may have outstanding (``num_workers`` x ``prefetch_factor``): a
    queue with all but one of them ready is full, its workers keeping up."""
    since: Mark | None = None
    last: Mark | None = None
    _waiting: bool = False

    @classmethod
    def begin(cls, stepper: Any, window_s: float) -> "QueueWatch":
        """The watch of a window of ``window_s`` seconds starting now over ``stepper``'s
        batches (without knobs, nothing to watch)."""
        batches = getattr(stepper, "batches", None)
        knobs = getattr(stepper, "knobs", None)
        workers = int(getattr(knobs, "num_workers", 0) or 0)
        prefetch = int(getattr(knobs, "prefetch_factor", None) or 2)  # torch's default
        return cls(batches, ready_batches(batches) if workers else None, window_s,
                   int(getattr(knobs, "grad_accum", 1) or 1), workers, workers * prefetch)

    def before_step(self) -> None:
        """Called before each step of the window: whether it finds the queue empty."""
        self._waiting = self.start is not None and ready_batches(self.batches) == 0

    def after_step(self, steps: int, samples: int, elapsed_s: float) -> None:
        """Called after each step (``steps`` and ``samples`` so far, ``elapsed_s`` into the
        window): the end of a step that found the queue empty is marked."""
        if not self._waiting:
            return
        mark = (steps, samples, elapsed_s, ready_batches(self.batches) or 0)
        if self.since is None:
            self.since = mark
        else:
            self.last = mark

    def _lost(self, since: Mark | None) -> int:
        """Batches the queue lost from ``since`` (None: from the window's start) to now; 0
        when it held or cannot be read."""
        now = None if self.start is None else ready_batches(self.batches)
        if now is None:
            return 0
        return max(0, (self.start if since is None else since[3]) - now)

    def _holds(self, ready_then: int, batches_since: int) -> bool:
        """Whether the queue held since it had ``ready_then`` batches, ``batches_since`` ago:
        it lost at most ``HOLD_SHARE`` of them (the workers made the rest), or it is full but
        for the one batch being made (its workers keep up)."""
        now = ready_batches(self.batches)
        return (now is None or ready_then - now <= HOLD_SHARE * batches_since
                or now >= self.capacity - 1)

    def done(self, steps: int, elapsed_s: float) -> bool:
        """Whether the window, ``elapsed_s`` seconds and ``steps`` steps in (at least its
        length), counts what the pipeline sustains: no queue to watch, a queue that never ran
        empty and held (``_holds``), ``SINCE_EMPTY_SHARE`` of a window between the first and
        the latest step that found it empty, or as long since the first where the queue then
        held (its workers keep up); past ``MAX_DRAIN_WINDOWS`` windows, always."""
        if self.start is None or elapsed_s >= MAX_DRAIN_WINDOWS * self.window_s:
            return True
        if self.since is not None:
            at_steps, _, at_s, ready = self.since
            end_steps, _, end_s, _ = self.last or (steps, 0, elapsed_s, 0)
            batches = (end_steps - at_steps) * self.batches_per_step
            holds = self.last is not None or self._holds(ready, batches)
            return (holds and end_s - at_s >= SINCE_EMPTY_SHARE * self.window_s
                    and batches >= DELIVERIES * self.workers)
        return self._holds(self.start, steps * self.batches_per_step)

    def counted(self, steps: int, samples: int, seconds: float) -> tuple[int, int, float]:
        """(steps, samples, seconds) the window counts: between the first and the latest step
        that found the queue empty (both end as a batch arrives: what the workers delivered in
        between); else from the first, or from the start, and where the queue did not hold
        over that span, less the batches it lost (made before it), at least one step."""
        if self.since is not None and self.last is not None:
            return tuple(b - a for a, b in zip(self.since[:3], self.last[:3]))
        if self.since is not None and steps > self.since[0]:
            at_steps, at_samples, at_s, _ = self.since
            steps, samples, seconds = steps - at_steps, samples - at_samples, seconds - at_s
        ready_then = self.start if self.since is None else self.since[3]
        if ready_then is None or self._holds(ready_then, steps * self.batches_per_step):
            return steps, samples, seconds
        lost_steps = math.ceil(self._lost(self.since) / self.batches_per_step)
        if not lost_steps:
            return steps, samples, seconds
        kept = max(1, steps - lost_steps)
        return kept, samples * kept // steps, seconds
