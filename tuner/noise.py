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
* A window far out of line with its trial's others is the host's, not the configuration's
  (``window_spread``): a row whose windows spread beyond the ``OUTLIER_P`` point of what the
  machine's window noise (a robust scale over the compared rows) gives is *disturbed*. Its own
  spread, read from one or two degrees of freedom, would set the floor alone and take the
  Welch degrees of freedom to about 1 (t = 12.7: a 2.35x lead measured in three rounds of
  1.9x or more read as [0.21, 26.4]); instead it is dropped from the floor, and the disturbed
  row (like a row of one window) takes the pooled window variance of the undisturbed rows,
  with their pooled degrees of freedom. ``undisturbed`` drops the disturbed window of a
  two-window round from the row's rate (``tuner.winner.best`` applies it before any mean or
  speed-up): the host takes time from a trial, it does not give any, so the faster window
  is the configuration's.
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

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from tuner._deprecated import moved
from tuner.history import impossible  # noqa: F401  (the rule lives with the rows)
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
              f"tie; two or more interleaved rounds give one (--confirm, with the time to run "
              f"them)")
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


OUTLIER_P = 0.001
"""Chance that a trial whose windows scatter as the machine's do is called disturbed
(``window_spread``): its window variance is beyond the ``1 - OUTLIER_P`` quantile of the
chi-square distribution that the machine's window noise gives it."""

_MIN_SPREAD_ROWS = 3
"""Rows of two windows or more ``window_spread`` needs before it calls one disturbed: the
median of fewer is no robust scale."""


def _window_variance(row: Mapping) -> tuple[float, int] | None:
    """(sample variance of one window's ln rate, its degrees of freedom n - 1) of a row of
    ``windows`` n >= 2: cv^2 n / (n - 1), ``samples_per_sec_cv`` being a population deviation
    over the mean. None with fewer than two windows or no cv."""
    cv, n = row.get("samples_per_sec_cv"), row.get("windows")
    if cv is None or n is None or n < 2:
        return None
    n = int(n)
    return cv * cv * n / (n - 1), n - 1


@dataclass(frozen=True)
class WindowSpread:
    """The machine's window noise over a set of rows, and which rows are disturbed."""

    variance: float | None
    """Pooled sample variance of one window's ln rate over the undisturbed rows of two windows
    or more (their variances weighted by their degrees of freedom); None without such a row."""
    df: int
    """Degrees of freedom of ``variance``: the sum of those rows' n - 1."""
    disturbed: tuple[bool, ...]
    """Per row given, in order: its windows spread beyond the machine's noise."""


@functools.lru_cache(maxsize=None)
def _chi2(df: int) -> tuple[float, float]:
    """(median, ``1 - OUTLIER_P`` quantile) of chi2(df): the answer's printer asks often."""
    from scipy import stats  # here: scipy takes a moment to import; the CLI starts without it
    return float(stats.chi2.median(df)), float(stats.chi2.ppf(1 - OUTLIER_P, df))


def window_spread(rows: Sequence[Mapping]) -> WindowSpread:
    """The window noise of ``rows`` (``samples_per_sec_cv`` and ``windows`` each) and which of
    them are disturbed.

    The scale is robust: the median over the rows of two windows or more of
    ``v df / median(chi2(df))`` (``v``: a row's window variance, ``_window_variance``), which
    one wild row cannot move. A row is disturbed where ``v df / scale`` is above the
    ``1 - OUTLIER_P`` quantile of chi2(df): with two windows, a CV about 5x the rows' median
    CV. Fewer than ``_MIN_SPREAD_ROWS`` such rows, or a scale of 0, call none disturbed."""
    own = [_window_variance(r) for r in rows]
    with_windows = [vd for vd in own if vd is not None]
    flagged = [False] * len(rows)
    if len(with_windows) >= _MIN_SPREAD_ROWS:
        scale = statistics.median(v * df / _chi2(df)[0] for v, df in with_windows)
        if scale > 0:
            flagged = [vd is not None and vd[0] * vd[1] / scale > _chi2(vd[1])[1] for vd in own]
    kept = [vd for vd, bad in zip(own, flagged) if vd is not None and not bad]
    df = sum(d for _, d in kept)
    return WindowSpread(sum(v * d for v, d in kept) / df if df else None, df, tuple(flagged))


def undisturbed(rows: Sequence[Mapping], scaled: Sequence[str] = ()) -> list[dict]:
    """The rows, with the disturbed window of a re-measured round dropped from its rate.

    Per run, the ``ok`` rows of phase ``remeasure`` are compared (``window_spread``). A round
    of two windows that is disturbed, where the other rounds of its configuration (knob
    values, hardware) are mostly not (a configuration disturbed in most rounds spreads by
    itself), keeps its faster window: ``samples_per_sec`` becomes ``median x (1 + cv)`` (the
    median of two windows is their mean), ``windows`` 1, ``samples_per_sec_cv`` and
    ``samples_per_sec_iqr`` 0, and each column of ``scaled`` (rates proportional to
    samples/sec: tokens/sec, TFLOP/s, MFU) is scaled alike. A round of three windows or more
    keeps its rate (its median already leaves one wild window out); every other row is
    returned as given (a copy). The time to train (from the median step time) is unchanged.
    """
    from tuner.knobs import Knobs  # a configuration as a key
    out = [dict(r) for r in rows]
    runs: dict[object, list[int]] = {}
    for i, r in enumerate(out):
        if (phase_of(r) == Phase.REMEASURE and r.get("status") == Status.OK
                and (r.get("samples_per_sec") or 0) > 0):
            runs.setdefault(r.get("run_id"), []).append(i)
    for members in runs.values():
        flagged = dict(zip(members, window_spread([out[i] for i in members]).disturbed))
        configs: dict[tuple, list[int]] = {}
        for i in members:
            r = out[i]
            configs.setdefault((r.get("hardware_key"), r.get("accelerator_type"),
                                Knobs.from_dict(r, strict=False)), []).append(i)
        for group in configs.values():
            bad = [i for i in group if flagged[i]]
            if not bad or len(bad) > len(group) - len(bad):
                continue
            for i in bad:
                r = out[i]
                if int(r.get("windows") or 0) != 2:
                    continue
                factor = 1 + r["samples_per_sec_cv"]
                r.update({c: r[c] * factor for c in ("samples_per_sec", *scaled)
                          if r.get(c) is not None})
                r.update(windows=1, samples_per_sec_cv=0.0, samples_per_sec_iqr=0.0)
    return out


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
    se_within, df_within = _within(pairs)
    se, df = se_within, df_within
    if len(d) >= 2:
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
        if se_within is None or sd / math.sqrt(len(d)) >= se_within:
            se, df = sd / math.sqrt(len(d)), len(d) - 1
    if se is None or df is None or se == 0:
        return Speedup(math.exp(mean), None, None, len(d))
    half = _t_quantile(df) * se
    return Speedup(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(d))


def _within(pairs: Sequence[tuple[Mapping, Mapping]]) -> tuple[float | None, float | None]:
    """(standard error of the mean log ratio that the rows' windows give, its Welch degrees of
    freedom), or (None, None) where a row has neither a spread of its own nor the pooled one.
    An undisturbed row of two windows or more gives its own (``_log_variance``); a disturbed
    row or a row of one window takes the pooled window variance (``window_spread``) instead,
    one term for all of them (one estimate) with the pooled degrees of freedom."""
    rows = [r for pair in pairs for r in pair]
    spread = window_spread(rows)
    parts, pooled = [], 0.0
    for r, bad in zip(rows, spread.disturbed):
        own = None if bad else _log_variance(r)
        n = int(r.get("windows") or 0)
        if own is not None:
            parts.append(own)
        elif spread.variance is not None and n >= 1 and r.get("samples_per_sec_cv") is not None:
            pooled += spread.variance * (_MEDIAN_VARIANCE / n if n >= 2 else 1.0)
        else:
            return None, None
    if pooled > 0:
        parts.append((pooled, spread.df))
    total = sum(v for v, _ in parts)
    if total <= 0:
        return math.sqrt(total) / len(pairs), None
    return math.sqrt(total) / len(pairs), total * total / sum(v * v / df for v, df in parts)


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
    """Median of the rounds' window CV (``samples_per_sec_cv``) over the rows of two windows or
    more; None where none has one (rounds of one window each)."""
    configurations: int
    """Configurations re-measured in two rounds or more."""
    pooled_cv: float = 0.0
    """The configurations' round CVs pooled (root mean square weighted by their degrees of
    freedom): the estimate ``degrees_of_freedom`` belongs to."""
    degrees_of_freedom: int = 0
    """Sum over those configurations of their rounds less one."""


def share_in_drift(share: float, rounds: int, rows: Sequence[Mapping]) -> float | None:
    """The rounds' between-round CV (``round_drift``) where a ceiling measured in one trial lies
    above the best by no more than that drift gives one measurement against the mean of the
    best's ``rounds`` rounds at 95 %: ``1 / share - 1 <= t * cv * sqrt(1 + 1 / rounds)``, cv
    the configurations' round CVs pooled and t the Student-t quantile (``CONFIDENCE``) on
    their degrees of freedom (``RoundDrift.pooled_cv``, ``degrees_of_freedom``: the drift is
    the machine's, read from every configuration's rounds); else None (a headroom beyond the
    drift, or no rounds to read a drift from). ``share`` is best / ceiling, in (0, 1]. Such a
    share is a figure of the machine's drift, not room left above the best."""
    drift = round_drift(rows)
    if drift is None or rounds < 2:
        return None
    band = (_t_quantile(drift.degrees_of_freedom) * drift.pooled_cv
            * math.sqrt(1 + 1 / rounds))
    return drift.between_cv if 1 / share - 1 <= band else None


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
    spreads, dfs = [], []
    for g in groups.values():
        if len(rates := [r["samples_per_sec"] for r in g]) >= 2:
            spreads.append(statistics.stdev(rates) / statistics.mean(rates))
            dfs.append(len(rates) - 1)
    if not spreads:
        return None
    pooled = math.sqrt(sum(df * cv ** 2 for df, cv in zip(dfs, spreads)) / sum(dfs))
    # a row of one window has no spread of its own (its cv reads 0): it says nothing of them
    within = [r["samples_per_sec_cv"] for g in groups.values() if len(g) >= 2 for r in g
              if _window_variance(r) is not None]
    return RoundDrift(statistics.median(spreads),
                      statistics.median(within) if within else None, len(spreads),
                      pooled, sum(dfs))


__getattr__ = moved(__name__, {name: "tuner.windows" for name in (
    "STEADY_Z", "MIN_NOISE_ROWS", "window_noise", "steady_tolerance")})
