"""Step time as a line in the micro-batch, fitted from a run's own rows: ``step_s = α + β ·
batch_size`` (Pollux's throughput model, Qiao et al., OSDI 2021: a fixed cost per step and a
cost per sample), one line per group of rows that share what changes the line besides the
batch.

Groups, finest first (``GROUPINGS``): precision, memory layout, compile mode and gradient
accumulation with the input pipeline (``data_path``, and whether the main process loads the
batches itself, ``num_workers`` 0); then without the input pipeline; then every row. A trial
is priced from the finest group that holds a line:

* two or more batch sizes in the group: a least-squares line (numpy), robust to outliers
  (from four rows on, rows whose residual from the Theil-Sen line, scipy's ``theilslopes``,
  passes ``OUTLIER_MADS`` scaled median absolute deviations are left out of it); α and β
  never below 0 (a negative intercept is refitted through the origin, a negative slope read
  as flat);
* one batch size: the line through its median step with the slope of a coarser group's line,
  else samples/sec held above that batch and the step held below (a smaller batch never
  priced faster than the step measured).

Torch-free and Ray-free (base floor, beside ``costs``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import scipy.stats

from tuner.knobs import Knobs

OUTLIER_MADS = 3.0
"""Residuals beyond this many scaled median absolute deviations (1.4826 x MAD, a standard
deviation for normal noise) are outliers: a step slowed by another process, a batch past a
cache's knee. Three is the usual cut (Leys et al., 2013)."""

MAD_TO_SD = 1.4826


def _layout(k: Knobs) -> tuple:
    return (k.amp, k.channels_last, k.compile or "off", k.grad_accum)


def _pipeline(k: Knobs) -> tuple:
    return (*_layout(k), k.data_path, k.num_workers == 0)


def every_row(k: Knobs) -> tuple:
    """The group of every row."""
    return ()


GROUPINGS: tuple[Callable[[Knobs], tuple], ...] = (_pipeline, _layout, every_row)
"""Keys of the groups a line is fitted in, finest first (see the module docstring); named
functions, so that a model pickles with the searcher that holds it (Ray Tune)."""


@dataclass(frozen=True)
class StepLine:
    """``step_s = alpha_s + beta_s * batch_size``, seconds; ``floor`` applies the held-step
    rule of a one-batch group (no smaller batch priced below ``floor_s``)."""

    alpha_s: float
    beta_s: float
    rows: int
    """Rows the line was read from (outliers included; a one-batch group's line scaled from a
    coarser one counts the coarser one's)."""
    floor_s: float = 0.0

    def at(self, batch_size: int) -> float:
        """Seconds of one step at ``batch_size`` samples (>= 0)."""
        return max(self.floor_s, self.alpha_s + self.beta_s * batch_size)


def fit_line(batches: Sequence[float], steps_s: Sequence[float]) -> StepLine | None:
    """The robust least-squares line of ``steps_s`` (seconds) on ``batches`` (samples); None
    with fewer than two batch sizes. See the module docstring for the rules."""
    x, y = np.asarray(batches, float), np.asarray(steps_s, float)
    if len(set(x.tolist())) < 2:
        return None
    alpha, beta = _lstsq(x, y)
    if len(x) >= 4:
        slope, intercept, _, _ = scipy.stats.theilslopes(y, x)
        residual = y - (intercept + slope * x)
        spread = MAD_TO_SD * float(np.median(np.abs(residual - np.median(residual))))
        keep = np.abs(residual) <= OUTLIER_MADS * spread if spread > 0 else np.ones_like(x, bool)
        if len(set(x[keep].tolist())) >= 2:
            alpha, beta = _lstsq(x[keep], y[keep])
    return StepLine(alpha, beta, len(x))


def _lstsq(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """α, β >= 0 of the least-squares line of ``y`` on ``x``."""
    (alpha, beta), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(x), x]), y, rcond=None)
    if beta < 0:                                   # flat: the steps do not grow with the batch
        return float(np.median(y)), 0.0
    if alpha < 0:                                  # through the origin: samples/sec held
        return 0.0, float(np.dot(x, y) / np.dot(x, x))
    return float(alpha), float(beta)


class StepFit:
    """Lines of a time in the batch over ``points`` ((knobs, seconds) of the run's rows, in
    the order recorded), in the groups of ``groupings`` (finest first; default
    ``GROUPINGS``). ``proportional``: the times are steps (``_anchored``); else one-off costs,
    flat in a group of one batch size."""

    def __init__(self, points: Sequence[tuple[Knobs, float]],
                 groupings: Sequence[Callable[[Knobs], Any]] = GROUPINGS,
                 proportional: bool = True):
        self.points = [(k, s) for k, s in points if s is not None and k.batch_size]
        if proportional:
            self.points = [(k, s) for k, s in self.points if s > 0]
        self.groupings = groupings
        self.proportional = proportional

    def line(self, knobs: Knobs, level: int = 0) -> StepLine | None:
        """The line pricing ``knobs`` from grouping ``level`` on; None without a row."""
        for depth in range(level, len(self.groupings)):
            key = self.groupings[depth](knobs)
            group = [(k.batch_size, s) for k, s in self.points
                     if self.groupings[depth](k) == key]
            if not group:
                continue
            line = fit_line(*zip(*group))
            return line if line is not None else self._anchored(group, knobs, depth)
        return None

    def _anchored(self, group: list[tuple[int, float]], knobs: Knobs, depth: int
                  ) -> StepLine:
        """The line through a one-batch group's median: flat for a one-off cost (not
        ``proportional``); for a step, a coarser line scaled to pass through it (its shape,
        this group's level), else samples/sec held above the batch and the step held below."""
        batch = group[0][0]
        seconds = statistics.median(s for _, s in group)
        if not self.proportional:
            return StepLine(seconds, 0.0, len(group))
        coarser = self.line(knobs, depth + 1) if depth + 1 < len(self.groupings) else None
        if coarser is not None and coarser.rows > len(group) and coarser.at(batch) > 0:
            ratio = seconds / coarser.at(batch)
            return StepLine(ratio * coarser.alpha_s, ratio * coarser.beta_s, coarser.rows)
        return StepLine(0.0, seconds / batch, len(group), floor_s=seconds)

    def at(self, knobs: Knobs, recent: int = 3) -> float | None:
        """Seconds for ``knobs``: the median of the last ``recent`` points of the same knobs
        where it ran, else of the same batch size in its finest group (knobs the groups leave
        out, such as ``cudnn_benchmark``, read from the rows that ran beside them), else its
        line's; None without a point."""
        finest = self.groupings[0]
        for same in (lambda k: k == knobs,
                     lambda k: k.batch_size == knobs.batch_size and finest(k) == finest(knobs)):
            own = [s for k, s in self.points if same(k)]
            if own:
                return statistics.median(own[-recent:])
        line = self.line(knobs)
        return None if line is None else line.at(knobs.batch_size)
