"""Noise-aware comparison of configurations: speed-ups with a confidence interval from paired
measurements, the tie rule, and the figures that cannot be true.

The re-measurement phase (``tuner.driver``) measures the best configurations and the
references in interleaved rounds, A B C, A B C, ... Round r of A and round r of B ran next to
each other, under the same load, so the ratio of the two cancels most of what the machine's
load does to both; the spread of that ratio across rounds is the noise that is left.

Statistics (``speedup``), on the natural log of the rate, so a ratio's interval is symmetric
in log space and ``A/B`` and ``B/A`` get reciprocal intervals:

* Two or more rounds: ``d_r = ln A_r - ln B_r`` per round; the speed-up is ``exp(mean d)``
  (the ratio of the geometric means) and its 95 % interval a Student-t interval on the mean
  of the ``d_r``. With 2-3 rounds the sample deviation of the ``d_r`` is itself very uncertain
  (two rounds that happen to agree give a deviation near 0), so the standard error is never
  taken below what the rows' own windows give (``samples_per_sec_cv``, see
  ``_log_variance``); where that floor binds, the t quantile takes the windows' degrees of
  freedom (Welch-Satterthwaite), else the rounds' (R - 1). A bootstrap needs more than 3
  rounds to say anything; a t-interval with R - 1 degrees of freedom pays for the few
  rounds in its quantile (12.7 for 2 rounds, 4.3 for 3).
* One pair (a run without re-measurement, ``--confirm 0``): no interval. The rows' windows
  see the noise within each trial, not the drift between trials, which is the larger
  (``bench/repeatability.py``: 2.6-3.4x), and with 2-3 windows a Welch interval on them has
  one or two degrees of freedom (t = 12.7 or 4.3): a 2.4x lead read as [0.1, 55] on a busy
  machine. Instead a one-pair speed-up within ``SINGLE_PAIR_FLOOR`` of 1 is a tie.

A speed-up is a *tie within the noise* when its interval contains 1 (one pair: within the
floor). Where the fastest
configuration ties with a simpler one, the simpler one is the answer (``simplicity``).

A figure that cannot be true (``impossible``) marks a disturbed measurement: such a row never
wins and never serves as a reference; the driver measures it again.

Torch-free: the leaderboard and the CLI use it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from tuner._deprecated import moved
from tuner.status import Phase, Status, phase_of

CONFIDENCE = 0.95
"""Two-sided confidence of every speed-up interval."""

SINGLE_PAIR_FLOOR = 0.10
"""|ln ratio| below which a speed-up read from one measurement of each configuration is a tie
(a ratio within 0.905..1.105): above the median pass-to-pass spread of the search-quality
benchmark on a quiet machine (docs/defaults.md), as ``tuner.pruning.MIN_MARGIN``."""

_MEDIAN_VARIANCE = math.pi / 2
"""Variance of the median of normal windows over that of their mean (a row's rate is the
median of its windows)."""


@dataclass(frozen=True)
class Speedup:
    """How much faster configuration A is than B, from paired measurements."""

    ratio: float
    """Point estimate: exp(mean of the per-pair log ratios), > 0 (1.10: A is 10 % faster)."""
    low: float | None
    """Lower end of the ``CONFIDENCE`` interval; None when no spread could be measured (a
    single window per row)."""
    high: float | None
    """Upper end of the interval; None with ``low``."""
    pairs: int
    """Paired measurements it is read from (interleaved rounds, or 1)."""

    @property
    def tie(self) -> bool:
        """True when the interval contains 1: A and B are equal within the noise; without an
        interval, when the ratio is within ``SINGLE_PAIR_FLOOR`` of 1."""
        if self.low is None:
            return abs(math.log(self.ratio)) < SINGLE_PAIR_FLOOR
        return self.low <= 1.0 <= self.high

    def text(self) -> str:
        """'1.16x faster (95 % CI [1.10, 1.22])', '1.25x slower (speed-up 0.80, 95 % CI
        [0.75, 0.85])', or, where the interval contains 1, 'tie within the noise (speed-up 1.01,
        95 % CI [0.97, 1.05])': never 'x faster' for a tie."""
        ci = (f"{100 * CONFIDENCE:.0f} % CI [{self.low:.2f}, {self.high:.2f}]"
              if self.low is not None else
              f"one measurement each, no interval; within ±{100 * SINGLE_PAIR_FLOOR:.0f} % is a "
              f"tie; re-measured rounds (--confirm) give one")
        if self.tie:
            return f"tie within the noise (speed-up {self.ratio:.2f}, {ci})"
        if self.ratio < 1:
            return f"{self.short()} (speed-up {self.ratio:.2f}, {ci})"
        return f"{self.short()} ({ci})"

    def short(self) -> str:
        """'tie', '1.16x faster' or, below 1, '1.25x slower' (the inverse ratio)."""
        if self.tie:
            return "tie"
        if self.ratio >= 1:
            return f"{self.ratio:.2f}x faster"
        return f"{1 / self.ratio:.2f}x slower"


def _log_variance(row: Mapping) -> tuple[float, float] | None:
    """(variance of ln(rate), its degrees of freedom) of one row, from its windows: the
    coefficient of variation ``samples_per_sec_cv`` (population deviation over the mean) of
    ``windows`` windows gives var(ln mean) = cv^2 / (n - 1), times pi/2 for the median. None
    with fewer than two windows or no cv."""
    cv, n = row.get("samples_per_sec_cv"), row.get("windows")
    if cv is None or n is None or n < 2:
        return None
    return _MEDIAN_VARIANCE * cv * cv / (n - 1), n - 1


def _t_quantile(df: float) -> float:
    from scipy import stats  # here: scipy takes a moment to import; the CLI starts without it
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def speedup(pairs: Sequence[tuple[Mapping, Mapping]], metric: str = "samples_per_sec",
            higher_is_better: bool = True) -> Speedup | None:
    """How much faster the first row of each pair is than the second (see the module's
    docstring for the statistics).

    Args:
        pairs: (row of A, row of B) measured side by side (round r of each); each row has
            ``metric`` > 0 and, for the interval, ``samples_per_sec_cv`` and ``windows``.
        metric: the leaderboard column compared (``samples_per_sec``, or ``time_to_train_s``
            with ``higher_is_better=False``: the speed-up is then B's time over A's).

    Returns:
        A ``Speedup``, or None without a pair.
    """
    if not pairs:
        return None
    sign = 1.0 if higher_is_better else -1.0
    d = [sign * (math.log(a[metric]) - math.log(b[metric])) for a, b in pairs]
    mean = sum(d) / len(d)
    if len(d) == 1:  # no drift between trials measured: no interval (module docstring)
        return Speedup(math.exp(mean), None, None, 1)
    within = [(_log_variance(a), _log_variance(b)) for a, b in pairs]
    if any(va is None or vb is None for va, vb in within):
        se_within, df_within = None, None
    else:
        parts = [v for pair in within for v in pair]
        total = sum(v for v, _ in parts)
        se_within = math.sqrt(total) / len(pairs)
        df_within = (total * total / sum(v * v / df for v, df in parts)) if total > 0 else None
    se, df = se_within, df_within
    if len(d) >= 2:
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
        if se_within is None or sd / math.sqrt(len(d)) >= se_within:
            se, df = sd / math.sqrt(len(d)), len(d) - 1
    if se is None or df is None or se == 0:
        return Speedup(math.exp(mean), None, None, len(d))
    half = _t_quantile(df) * se
    return Speedup(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(d))


def simplicity(knobs: Mapping, baseline: Mapping | None) -> tuple[int, int, int]:
    """Sort key, simplest first, of a configuration (a row or ``Knobs.to_dict()``): no
    ``torch.compile`` before compile (compile time, and one more thing to break), then fewer
    DataLoader workers (fewer processes, less host memory), then fewer knobs that differ from
    the baseline's values (``baseline``: its knobs; None counts none as differing)."""
    from tuner.knobs import Knobs  # the knob names only
    differing = 0 if baseline is None else sum(
        knobs.get(name) != baseline.get(name) for name in Knobs.names())
    return (0 if knobs.get("compile") in (None, "off") else 1,
            knobs.get("num_workers") or 0, differing)


def impossible(row: Mapping) -> str | None:
    """Why a measured row's figures cannot be true, or None: a non-positive samples/sec or
    step time, or a model FLOPs utilisation above 100 % of the card's peak (``mfu_pct``). Such
    a row is a disturbed measurement (or a wrong ``--peak-tflops``), never a result."""
    sps, step = row.get("samples_per_sec"), row.get("step_time_ms_p50")
    if sps is not None and sps <= 0:
        return f"non-positive samples/sec ({sps:g})"
    if step is not None and step <= 0:
        return f"non-positive step time ({step:g} ms)"
    mfu = row.get("mfu_pct")
    if row.get("mfu_impossible") or (mfu is not None and mfu > 100):
        return f"MFU {mfu:.0f} % is above 100 % of the card's peak" if mfu is not None else \
            "MFU above 100 % of the card's peak"
    return None


DRIFT_NOTE_CV = 0.05
"""Between-round CV (a configuration re-measured in interleaved rounds, median over the
configurations) above which a run says the machine drifted: with 3 rounds a paired speed-up's
95 % interval is then about +-17 % wide (t = 4.3, sqrt 2 for the pair, sqrt 3 rounds), so
most differences between configurations read as ties. On a quiet machine rounds repeat within
1-5 % (docs/defaults.md)."""


@dataclass(frozen=True)
class RoundDrift:
    """How far the machine's speed moved between re-measured rounds, beside how closely each
    trial's own windows agreed: a large gap is the host's drift, which no window sees."""
    between_cv: float
    """Median over configurations of the CV (stdev / mean) of their round rates."""
    within_cv: float | None
    """Median of the rounds' window CV (``samples_per_sec_cv``); None where none has one."""
    configurations: int
    """Configurations re-measured in two rounds or more."""


def round_drift(rows: Sequence[Mapping]) -> RoundDrift | None:
    """The between-round spread of the ``ok`` re-measurement rows (phase ``remeasure``), per
    run, hardware (a run over several accelerator types measures the same configuration on
    each: their rates differ by the card, not by drift) and configuration (the knob values);
    None without a configuration measured in two rounds."""
    from tuner.knobs import Knobs  # a configuration as a key
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        if (phase_of(r) == Phase.REMEASURE and r.get("status") == Status.OK
                and (r.get("samples_per_sec") or 0) > 0):
            key = (r.get("run_id"), r.get("hardware_key"), r.get("accelerator_type"),
                   Knobs.from_dict(r, strict=False))
            groups.setdefault(key, []).append(r)
    spreads = [statistics.stdev(rates) / statistics.mean(rates) for g in groups.values()
               if len(rates := [r["samples_per_sec"] for r in g]) >= 2]
    if not spreads:
        return None
    within = [r["samples_per_sec_cv"] for g in groups.values() if len(g) >= 2 for r in g
              if r.get("samples_per_sec_cv") is not None]
    return RoundDrift(statistics.median(spreads),
                      statistics.median(within) if within else None, len(spreads))


__getattr__ = moved(__name__, {name: "tuner.windows" for name in (
    "STEADY_Z", "MIN_NOISE_ROWS", "window_noise", "steady_tolerance")})
