"""The steady-state window rule, in one place: whether a trial's timed windows stand or its first
one is a warm-up transient to drop, and how wide the tolerance is on this machine.

A trial measures ``windows`` timed windows (``tuner.trial.harness``). While the first window kept
differs from the median of the others by more than the tolerance, on the side of them where
the windows already dropped lay, it is taken for a transient (workers starting, a prefetched
queue draining, the allocator growing), dropped, and one more window measured, within a cap of
drops and seconds. Windows that alternate around the others are the machine's noise, not a
transient. Windows of one or two whole steps each (a step of half a window or more) judge
nothing. The tolerance of a run's next trial grows with the window noise its rows so far show.

Pure functions of window rates (samples/sec), window lengths (s) and step times (ms);
torch-free. The figures behind the defaults are in docs/defaults.md.
"""

from __future__ import annotations

import math
import statistics
from typing import Mapping, Sequence

from tuner.status import Status


def window_iqr(row: Mapping) -> float | None:
    """A row's spread over its windows (``samples_per_sec_iqr``, samples/sec) where it measured
    two windows or more; None for a row of one window (its IQR reads 0 and says nothing) or
    without the figure. What the leaderboard's ``±IQR`` column shows."""
    if (row.get("windows") or 0) < 2:
        return None
    return row.get("samples_per_sec_iqr")


def long_step(step_s: float, window_s: float) -> bool:
    """Whether a step of ``step_s`` seconds takes half a window (``window_s`` seconds) or more:
    a window then holds one or two whole steps, too few to tell a transient from a step's own
    spread. Such a trial judges no steady state, and its windows' spread is left out of the
    machine's window noise (``window_noise``)."""
    return step_s >= window_s / 2


def long_windows(step_times_ms: Sequence[float], window_s: float) -> bool:
    """Whether the median of the windows' step times (ms, one per window, at least one) is a
    ``long_step`` for windows of ``window_s`` seconds."""
    return long_step(statistics.median(step_times_ms) / 1000, window_s)


def probe_s(step_s: float, window_s: float) -> float:
    """Seconds of one synchronised steady-state probe: half a window (``window_s`` seconds), a
    step of ``step_s`` seconds at least (a probe ends on the first step past its half)."""
    return max(window_s / 2, step_s)


def least_steady_probes(step_s: float, window_s: float, *, windows: int, warmup_steps: int,
                        max_probes: int, cap_left_s: float) -> int:
    """The fewest steady-state probes a trial runs between its warm-up steps and its windows
    (``tuner.trial.harness``), with steps of ``step_s`` seconds: none with two windows or more
    (the windows judge the steady state), ``max_probes`` 0, no time left under the warm-up cap
    (``cap_left_s``: seconds of it after the warm-up steps), or steps a warm-up of more than
    one step timed as ``long_step``; else two (two consecutive ones must agree), one where the
    first takes what is left of the cap or ``max_probes`` is 1. With one warm-up step (which
    holds the one-time costs) nothing says a step is long, and each probe is one step at
    least: a trial of one window then probes longer than a second window would take."""
    if (windows >= 2 or max_probes <= 0 or cap_left_s <= 0
            or (warmup_steps > 1 and long_step(step_s, window_s))):
        return 0
    return 1 if max_probes == 1 or probe_s(step_s, window_s) >= cap_left_s else 2


def deviation(rates: Sequence[float]) -> float:
    """How far the first of ``rates`` (samples/sec, two or more) lies from the median of the
    others, as a fraction of the larger of the two: negative when it is slower; 0.0 when both
    are 0."""
    first = rates[0]
    rest = statistics.median(rates[1:])
    larger = max(first, rest)
    return (first - rest) / larger if larger > 0 else 0.0


def unsteady(rates: Sequence[float], tolerance: float) -> bool:
    """Whether the first of ``rates`` (two or more) is off the median of the others by more
    than ``tolerance`` (a fraction, ``deviation``)."""
    return abs(deviation(rates)) > tolerance


def rates_agree(rate: float, previous: float, tolerance: float) -> bool:
    """Whether two consecutive warm-up probes' rates (samples/sec) differ by at most
    ``tolerance`` of the larger: the steady state of a one-window trial."""
    return abs(rate - previous) <= tolerance * max(rate, previous)


def windows_stand(rates: Sequence[float], seconds: Sequence[float],
                  step_times_ms: Sequence[float], dropped_s: Sequence[float],
                  faster: bool | None, *, window_s: float, tolerance: float, max_drops: int,
                  settle_s: float) -> bool:
    """Whether the windows kept stand, none more dropped as warm-up.

    Args:
        rates, seconds, step_times_ms: the windows kept, in order (samples/sec, wall seconds,
            median step ms), two or more.
        dropped_s: the wall seconds of each window dropped so far.
        faster: whether the windows dropped were faster than the rest (None: none dropped).
        window_s: the windows' least length, s.
        tolerance: ``TrialSettings.steady_tolerance``, a fraction.
        max_drops: ``TrialSettings.max_steady_probes``.
        settle_s: seconds the warm-up cap leaves for drops (0: judge nothing).

    Returns:
        True when nothing is judged (``settle_s`` <= 0, ``max_drops`` reached, the drops so far
        plus one more window would pass ``settle_s``, or ``long_windows``); when the first is
        within ``tolerance`` of the others; or when it lies on the other side of them from the
        windows already dropped (noise alternating around the steady rate, not a transient).
    """
    spent_s = sum(dropped_s) + seconds[0]
    next_s = max(window_s, statistics.median(seconds))
    if (settle_s <= 0 or len(dropped_s) >= max_drops or spent_s + next_s > settle_s
            or long_windows(step_times_ms, window_s)):
        return True
    off = deviation(rates)
    return abs(off) <= tolerance or (faster is not None and (off > 0) != faster)


STEADY_Z = 2.0
"""Standard deviations of the difference of two windows' rates (``sqrt 2`` window CVs) that a
first window must be off the others by before it is taken for a transient
(``steady_tolerance``): about one steady trial in twenty loses a window to the noise."""

MIN_NOISE_ROWS = 2
"""Rows (the references, which run first) ``window_noise`` needs before it says anything."""


def window_noise(rows: Sequence[Mapping], window_s: float) -> float | None:
    """One window's coefficient of variation on this machine so far: the median, over the
    measured rows (``ok`` or ``pruned``) of two windows or more, of their window CV
    (``samples_per_sec_cv``, a population deviation of ``windows`` windows, times
    ``sqrt(n / (n - 1))`` for the sample deviation). Rows whose median step is a ``long_step``
    are left out: each window holds one or two whole steps, which spread as single steps do.
    None with fewer than ``MIN_NOISE_ROWS`` such rows.

    Args:
        rows: leaderboard rows (``samples_per_sec_cv``, ``windows``, ``step_time_ms_p50``,
            ``status``), any phase: a ceiling's windows see the host as a search trial's do.
        window_s: the run's window length, seconds."""
    cvs = []
    for r in rows:
        cv, n = r.get("samples_per_sec_cv"), r.get("windows") or 0
        step_ms = r.get("step_time_ms_p50")
        if (r.get("status") in (Status.OK, Status.PRUNED) and cv is not None and n >= 2
                and (step_ms is None or not long_step(step_ms / 1000, window_s))):
            cvs.append(cv * math.sqrt(n / (n - 1)))
    return statistics.median(cvs) if len(cvs) >= MIN_NOISE_ROWS else None


def steady_tolerance(rows: Sequence[Mapping], floor: float, window_s: float) -> float:
    """The ``TrialSettings.steady_tolerance`` of the run's next trial, a fraction: ``floor``
    (the setting's default, 0.10) or, where this machine's windows scatter more,
    ``STEADY_Z * sqrt(2) * window_noise(rows, window_s)``, whichever is larger. A transient
    smaller than the noise cannot be told from it; on a quiet host (window CV 1-3 %) this is
    the floor."""
    s = window_noise(rows, window_s)
    return floor if s is None else max(floor, STEADY_Z * math.sqrt(2) * s)
