"""The vocabulary of results: how a trial ended (``Status``) and which phase of a run measured
it (``Phase``). Torch-free: the driver, the leaderboard and the report share it.

Both are ``str`` enums, so a member equals its text ('ok' == Status.OK) and is written to the
leaderboard as that text.
"""

from __future__ import annotations

from enum import Enum
from typing import Mapping


class _Text(str, Enum):
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Status(_Text):
    """How a trial ended (Optuna's taxonomy: a failure keeps its message, never a zero)."""
    OK = "ok"
    """Measured: every window ran."""
    OOM = "oom"
    """Out of memory (``memory_exceeded`` says which: device or host)."""
    OVER_LIMIT = "over_limit"
    """Ran, but its peak memory went over ``--max-memory`` / ``--max-host-memory``."""
    PRUNED = "pruned"
    """Stopped early between windows, clearly slower than the best so far
    (``tuner.pruning.EarlyStopping``); its partial measurement is kept."""
    TIMEOUT = "timeout"
    """Stopped by the run's time budget (``--time-budget``); the windows it finished are kept
    (none: no throughput), with its set-up, compile and warm-up times. One that finished a
    window or more is a measurement over fewer windows (``windows`` of ``windows_planned``),
    which may be the answer (``budget_stopped``)."""
    NODE_LOST = "node_lost"
    """Its Ray node (or a rank's node) went away mid-trial; the error names the node, Ray's
    own text is kept as the traceback. A reference lost this way is measured again."""
    ERROR = "error"
    """Anything else; the error and traceback are kept."""
    RUNNING = "running"
    """A window's interim report; never a leaderboard row's final status."""


STATUSES = (Status.OK, Status.OOM, Status.OVER_LIMIT, Status.PRUNED, Status.TIMEOUT,
            Status.NODE_LOST, Status.ERROR)
"""Final statuses, in the order tables list them."""

MEASURED = (Status.OK, Status.PRUNED, Status.TIMEOUT)
"""Statuses whose row carries a throughput (a timeout row only when a window finished)."""

FAILED = (Status.OOM, Status.OVER_LIMIT, Status.NODE_LOST, Status.ERROR)
"""Statuses of a trial that did not measure."""

TELLS_MEMORY = (Status.OK, Status.OOM, Status.OVER_LIMIT)
"""Statuses that say whether a configuration fits (they seed the searcher's constraint)."""


class Phase(_Text):
    """Which phase of a run measured a row."""
    SEARCH = "search"
    """The search proper (references first, then the sampler)."""
    REMEASURE = "remeasure"
    """The best configurations and the references measured again, side by side."""
    CEILING = "ceiling"
    """The winner's compute-only ceiling (batches already on the device)."""


def budget_stopped(row: Mapping) -> bool:
    """Whether a leaderboard row (or a trial's result) is a measurement the time budget cut
    short: ``timeout`` after at least one complete window, with its throughput (the median of
    the ``windows`` it finished of ``windows_planned``). Such a row competes for the answer
    as an ``ok`` one does; its fewer windows widen its interval (``tuner.noise``)."""
    return (row.get("status") == Status.TIMEOUT and (row.get("windows") or 0) >= 1
            and row.get("samples_per_sec") is not None)


def answers(row: Mapping) -> bool:
    """Whether a row's status lets it be the answer: ``ok``, or ``budget_stopped``."""
    return row.get("status") == Status.OK or budget_stopped(row)


def phase_of(row: dict) -> Phase:
    """The phase of a leaderboard row; rows written before the column existed are search rows."""
    return Phase(row.get("phase") or Phase.SEARCH)
