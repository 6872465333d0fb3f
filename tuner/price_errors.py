"""How far the cost model's prices (``tuner.costs``) were from the trials' wall times, per kind
of trial, read from a run's leaderboard rows (``priced_s`` against ``finished_at`` -
``started_at``): the run's summary names a kind mispriced by a median over ``MISPRICED``
(``tuner.summary``), and ``bench/price_error.py`` prints the table. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from tuner.costs import RowTimes
from tuner.status import Phase, Status

MISPRICED = 0.25
"""A kind of trial whose median price error (``PriceError.median``) passes this fraction is
named in the run's summary: its time was planned a quarter off or more."""


@dataclass(frozen=True)
class PriceError:
    """How far the price of one kind of trial was from its wall time: the error of a trial is
    ``|priced_s / wall - 1|`` (wall: ``finished_at`` - ``started_at``), over its ``ok`` rows
    with a price."""

    kind: str
    """'reference', 'screen', 'search', 'round of N windows', 'ceiling' or 'probe'
    (``trial_kind``)."""
    count: int
    median: float
    """The median error, a fraction."""
    p90: float
    """Its 90th percentile (linear interpolation, numpy's default), a fraction."""
    priced_s: float
    """The median price, s."""
    wall_s: float
    """The median wall time, s."""


def trial_kind(row: RowTimes, full_windows: int | None) -> str:
    """The kind of trial ``row`` is: the memory probe's ('probe'), a 'ceiling', a re-measurement
    'round of N windows', a 'reference', a 'screen' (a searched trial planned with fewer
    windows than ``full_windows``, the references'), else a 'search' trial."""
    phase = Phase(row.phase or Phase.SEARCH)
    if "-probe-" in (row.trial_id or ""):
        return "probe"
    if phase == Phase.CEILING:
        return "ceiling"
    if phase == Phase.REMEASURE:
        n = row.windows_planned
        return f"round of {n or '?'} window{'' if n == 1 else 's'}"
    if row.reference:
        return "reference"
    screened = full_windows and row.windows_planned and row.windows_planned < full_windows
    return "screen" if screened else "search"


def price_errors(rows: Iterable[Mapping[str, Any]]) -> list[PriceError]:
    """The price error of each kind of trial (``trial_kind``) in ``rows`` (leaderboard rows of
    one run), over its ``ok`` rows with a ``priced_s`` and a wall time; kinds without such a
    row are left out. Ordered as a run measures them."""
    views = [RowTimes.of(r) for r in rows]
    full = max((r.windows_planned or 0 for r in views if r.reference), default=0) or None
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for r in views:
        if r.status == Status.OK and r.priced_s and r.wall_s:
            by_kind.setdefault(trial_kind(r, full), []).append((r.priced_s, r.wall_s))
    order = ["probe", "reference", "screen", "search"]
    kinds = sorted(by_kind, key=lambda k: (order.index(k) if k in order else len(order), k))
    return [_error(kind, by_kind[kind]) for kind in kinds]


def _error(kind: str, pairs: list[tuple[float, float]]) -> PriceError:
    priced, wall = np.array(pairs).T
    errors = np.abs(priced / wall - 1)
    return PriceError(kind, len(pairs), float(np.median(errors)),
                      float(np.percentile(errors, 90)), float(np.median(priced)),
                      float(np.median(wall)))


def mispriced_lines(rows: Iterable[Mapping[str, Any]], limit: float = MISPRICED) -> list[str]:
    """One line for each kind of trial whose median price error passes ``limit`` (a fraction,
    ``MISPRICED``): the planner's time for it was that far off."""
    return [f"the cost model mispriced {e.kind} trials by a median {e.median:.0%}: "
            f"{e.count} priced at a median {e.priced_s:.1f} s took {e.wall_s:.1f} s "
            f"(90th percentile of the error {e.p90:.0%})"
            for e in price_errors(rows) if e.median > limit]
