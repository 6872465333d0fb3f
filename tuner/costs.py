"""One price for a trial: what it costs in seconds, from the run's rows, for every phase that
decides what runs in the time left (the search's proposals, the re-measurement rounds, the
ceilings).

``CostModel(rows, ...)`` reads the run's rows once (``RowTimes``, a typed view of the columns
it needs) and ``CostModel.price(knobs, shape)`` answers a ``TrialCost``: a frozen breakdown
whose ``total_s`` sizes the follow-ups and whose ``first_window_s`` decides whether the search
starts a proposal. The rules, each in one place:

* step time: the last search row of the same knobs, else the search row nearest in batch size
  (log ratio), its median step and its warm-up steps after the first scaled up to a larger
  batch (samples/sec held, never scaled down);
* one-off costs, paid once per process and shape and never scaled: cuDNN's autotuning at a
  shape new to the process (``tuner.knobs.new_cudnn_shapes`` over the rows this command
  recorded, where trial processes are reused: ``tuner.plan.Plan.reuses_trial_processes``), and
  a ``torch.compile`` (the longest compile measured in the same mode);
* the rest of the row's wall time outside its windows (set-up, first step, what follows the
  windows) carried over as measured;
* steady-state probes a one-window trial adds (``tuner.windows.least_steady_probes``);
* ``TRIAL_OVERHEAD_S`` per trial for what Ray Tune adds around it.

Without a search row with a step time, a trial costs its windows and the overhead.

Torch-free and Ray-free (base floor, beside ``budget`` and ``windows``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, fields
from typing import Any, Container, Iterable, Mapping, NamedTuple, Sequence

import tuner.windows as rule
from tuner.knobs import Knobs, new_cudnn_shapes
from tuner.status import Phase

TRIAL_OVERHEAD_S = 1.5
"""Seconds Ray Tune adds to a trial beyond what its row records, for sizing the follow-ups to
the time left. Between trials of one experiment Ray reuses the trial process (18-26 ms on an
H200); the first trial's process start (5.7-7 s on 2 CPU cores, 6.7-10.6 s on an H200) is
spent before the budget is split (the search's deadline is set once a trial has measured,
``tuner.budget.split_deadline_unix_s``), so it is not counted here."""

CUDNN_AUTOTUNE_S = 10.4
"""Seconds cuDNN's benchmark mode adds to a first step at new shapes when a run's rows cannot
tell (``cudnn_autotune_s``). Source: ddpm's first step on one H200, 12.2 s with it on against
1.8 s off (docs/defaults.md)."""


# ------------------------------------------------------------------------- the inputs

@dataclass(frozen=True)
class RowTimes:
    """The columns of a leaderboard row (or a trial's final result with its knobs) that the
    price and its error (``tuner.price_errors``) read, typed once. Seconds unless named
    otherwise; None or 0 where not recorded."""

    trial_id: str | None = None
    phase: str | None = None
    batch_size: int | None = None
    step_time_ms_p50: float | None = None
    measured_s: float | None = None
    setup_s: float | None = None
    warmup_s: float | None = None
    first_step_s: float | None = None
    compile: str | None = None
    compile_s: float | None = None
    cudnn_benchmark: bool | None = None
    steady_probes: int | None = None
    started_at: Any = None
    finished_at: Any = None
    status: str | None = None
    reference: str | None = None
    windows_planned: int | None = None
    priced_s: float | None = None
    knobs: Knobs | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> "RowTimes":
        """The view of ``row`` (columns of ``tuner.leaderboard.SCHEMA``; missing ones read as
        None). Knobs the row cannot describe read as None."""
        values = {f.name: row.get(f.name) for f in fields(cls) if f.name != "knobs"}
        try:
            knobs = Knobs.from_dict(row, strict=False)
        except (TypeError, ValueError):
            knobs = None
        return cls(**values, knobs=knobs)

    @property
    def is_search(self) -> bool:
        return Phase(self.phase or Phase.SEARCH) == Phase.SEARCH

    @property
    def step_s(self) -> float:
        """The median step, s (0 when not measured)."""
        return (self.step_time_ms_p50 or 0.0) / 1000

    @property
    def wall_s(self) -> float | None:
        """Seconds from ``started_at`` to ``finished_at``; None without both."""
        if not (self.started_at and self.finished_at):
            return None
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def eager(self) -> bool:
        """Whether its first step compiled nothing (a compile would be in it)."""
        return (self.compile or "off") == "off"

    @property
    def compiled_s(self) -> float:
        """Seconds its first step spent compiling: ``compile_s``, else the first step beyond
        a steady one; 0 for an eager row."""
        if self.eager:
            return 0.0
        return self.compile_s or max(0.0, (self.first_step_s or 0.0) - self.step_s)

    @property
    def per_step_warmup_s(self) -> float:
        """Seconds of its warm-up that grow with the batch: ``warmup_s`` less its first step,
        >= 0."""
        return max(0.0, (self.warmup_s or 0.0) - (self.first_step_s or 0.0))

    @property
    def before_windows_s(self) -> float:
        """Its set-up and warm-up (first step, probes and dropped windows included; the first
        step at least)."""
        return (self.setup_s or 0.0) + max(self.warmup_s or 0.0, self.first_step_s or 0.0)


@dataclass(frozen=True)
class TrialShape:
    """What of a trial's settings (``tuner.settings.TrialSettings``) its price reads."""

    windows: int
    window_s: float
    warmup_steps: int = 1
    max_steady_probes: int = 0
    max_warmup_s: float | None = None

    @classmethod
    def of(cls, settings: Any, changes: Mapping[str, Any] | None = None) -> "TrialShape":
        """From ``settings`` (a ``TrialSettings`` or anything with its fields) with the
        trial's ``changes`` (``TrialSettings`` field -> value) over them."""
        values = {f.name: getattr(settings, f.name, f.default) for f in fields(cls)}
        values.update({k: v for k, v in (changes or {}).items() if k in values})
        return cls(**values)


# ------------------------------------------------------------------------- the price

@dataclass(frozen=True)
class TrialCost:
    """What one trial costs, seconds, by part."""

    start_s: float
    """What Ray Tune adds around the trial (``TRIAL_OVERHEAD_S``)."""
    setup_s: float
    """Set-up and first step, as the row read measured them, less its one-off costs."""
    one_off_s: float
    """cuDNN's autotuning at a shape new to the process, and a ``torch.compile``."""
    warmup_s: float
    """Warm-up steps after the first, scaled to the batch."""
    probes_s: float
    """Steady-state probes beyond those of the row read."""
    window_s: float
    """One window: the window's length, one step at least."""
    windows_s: float
    """Every window."""
    tail_s: float = 0.0
    """What the row read spent after its windows (the breakdown's steps, its last report)."""

    @property
    def first_window_s(self) -> float:
        """Seconds from the trial's start in its process to the end of its first window."""
        return self.setup_s + self.one_off_s + self.warmup_s + self.probes_s + self.window_s

    @property
    def trial_s(self) -> float:
        """Seconds the trial itself takes: what its row times (``finished_at`` -
        ``started_at``), Ray Tune's overhead around it (``start_s``) left out. A row's
        ``priced_s``."""
        return (self.setup_s + self.one_off_s + self.warmup_s + self.probes_s + self.windows_s
                + self.tail_s)

    @property
    def total_s(self) -> float:
        """Seconds the whole trial takes in the run's time: ``trial_s`` and ``start_s``."""
        return self.start_s + self.trial_s


class CostModel:
    """Prices trials from a run's rows (see the module docstring for the rules).

    Args:
        rows: leaderboard rows (or final results with their knobs), any phase, in the order
            recorded; the search rows give step times, every row of this command the shapes
            cuDNN has tuned.
        reused: whether trials run in processes earlier trials of the run ran in
            (``Plan.reuses_trial_processes``): cuDNN keeps what it tuned there.
        earlier: ``trial_id`` of rows an earlier command recorded (a resumed run's,
            ``Plan.earlier_trial_ids``): their processes are gone.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]] = (), *, reused: bool = True,
                 earlier: Container[str] = frozenset()):
        self.reused = reused
        self.earlier = earlier
        self.rows: list[RowTimes] = []
        for row in rows:
            self.add(row)

    @classmethod
    def of_plan(cls, plan: Any, rows: Iterable[Mapping[str, Any]]) -> "CostModel":
        """The model of ``plan``'s run (its ``reuses_trial_processes`` and
        ``earlier_trial_ids``) from ``rows``."""
        return cls(rows, reused=plan.reuses_trial_processes, earlier=plan.earlier_trial_ids)

    def add(self, row: Mapping[str, Any]) -> None:
        """Read one more row (a trial just finished)."""
        self.rows.append(RowTimes.of(row))

    @property
    def search(self) -> list[RowTimes]:
        """The search rows with a wall time or a step time."""
        return [r for r in self.rows if r.is_search and (r.wall_s is not None or r.step_s)]

    def price(self, knobs: Knobs, shape: TrialShape, *,
              planned: Sequence[Knobs] = ()) -> TrialCost:
        """The cost of one more trial of ``knobs`` measured as ``shape`` says, run after the
        rows read and after ``planned`` (trials planned before it in this command's process,
        not recorded yet)."""
        priced = self._priced_from(knobs)
        if priced is None:
            return TrialCost(TRIAL_OVERHEAD_S, 0.0, 0.0, 0.0, 0.0, shape.window_s,
                             shape.windows * shape.window_s)
        r, scale = priced
        step_s = scale * r.step_s
        window_s = window_of_s(step_s, shape.window_s)
        row_cudnn_s = autotuned_s(r, self.search)
        setup_s = ((r.setup_s or 0.0) + (r.first_step_s or 0.0) - row_cudnn_s
                   - r.compiled_s)
        wall_s = r.wall_s
        tail_s = 0.0
        if wall_s is not None:
            tail_s = max(0.0, wall_s - (r.measured_s or 0.0) - r.before_windows_s)
        return TrialCost(
            start_s=TRIAL_OVERHEAD_S, setup_s=max(0.0, setup_s),
            one_off_s=self._cudnn_s(knobs, r, row_cudnn_s, planned) + self.compile_s(knobs),
            warmup_s=scale * r.per_step_warmup_s,
            probes_s=_probes_s(r, scale, step_s, shape), window_s=window_s,
            windows_s=shape.windows * window_s, tail_s=tail_s)

    def step_s(self, knobs: Knobs) -> float | None:
        """Seconds of one step of ``knobs`` as ``price`` reads it; None without a search row
        to read it from."""
        priced = self._priced_from(knobs)
        return None if priced is None else priced[1] * priced[0].step_s

    def compile_s(self, knobs: Knobs) -> float:
        """Seconds a trial of ``knobs`` compiles: the longest compile measured in its mode
        (0 eager, or none measured yet: the trial's own set-up check refuses a compile
        without the time for it, ``tuner.budget.compile_refusal``)."""
        mode = knobs.compile or "off"
        if mode == "off":
            return 0.0
        return max((r.compiled_s for r in self.rows if (r.compile or "off") == mode),
                   default=0.0)

    def tuned_in_process(self, knobs: Knobs, planned: Sequence[Knobs] = ()) -> bool:
        """Whether cuDNN has tuned the shape of ``knobs`` (``tuner.knobs.CUDNN_SHAPE_KNOBS``)
        in the process it will run in: trial processes are reused, and a row of this command
        or a ``planned`` trial had ``cudnn_benchmark`` on at that shape."""
        if not self.reused:
            return False
        here = [r.knobs.to_dict() for r in self.rows
                if r.knobs is not None and r.trial_id not in self.earlier]
        configs = [*here, *(k.to_dict() for k in planned), knobs.to_dict()]
        return knobs.cudnn_benchmark and not new_cudnn_shapes(configs)[-1]

    def _cudnn_s(self, knobs: Knobs, r: RowTimes, row_cudnn_s: float,
                 planned: Sequence[Knobs]) -> float:
        """cuDNN's autotuning in a trial of ``knobs`` priced from ``r`` (which autotuned
        ``row_cudnn_s``): none at a shape tuned in the process; else the row's own, or where
        the row had it off the run's (``cudnn_autotune_s``). A trial with it off read from a
        row with it on keeps the row's (its wall time holds it)."""
        if not knobs.cudnn_benchmark:
            return row_cudnn_s
        if self.tuned_in_process(knobs, planned):
            return 0.0
        return row_cudnn_s if r.cudnn_benchmark else cudnn_autotune_s(self.search)

    def _priced_from(self, knobs: Knobs) -> tuple[RowTimes, float] | None:
        """The search row read for ``knobs`` and the batch ratio its steps are scaled by
        (>= 1): the last of ``knobs`` (1.0), else the nearest in batch size (log ratio) with a
        step time; None without either."""
        search = self.search
        same = [r for r in search if r.knobs == knobs]
        if same:
            return same[-1], 1.0
        timed = [r for r in search if r.step_s and r.batch_size]
        if not timed:
            return None
        r = min(timed, key=lambda x: abs(math.log(x.batch_size / knobs.batch_size)))
        return r, max(1.0, knobs.batch_size / r.batch_size)


def window_of_s(step_s: float, window_s: float) -> float:
    """Seconds one window of ``window_s`` takes with steps of ``step_s``: it ends on the first
    step past ``window_s`` (``tuner.trial.harness``), so it holds a whole number of steps, one
    at least; ``window_s`` for steps too short to tell (0)."""
    if step_s <= 0:
        return window_s
    return max(1, math.ceil(window_s / step_s - 1e-9)) * step_s


def _probes_s(row: RowTimes, scale: float, step_s: float, shape: TrialShape) -> float:
    """Seconds of the steady-state probes a trial of ``shape`` runs at the least
    (``tuner.windows.least_steady_probes``) beyond those of ``row``, whose wall time holds its
    own (``steady_probes``: a window it dropped as warm-up counts as one), for steps of
    ``step_s`` seconds. The warm-up cap is taken less ``row``'s warm-up after its first step
    scaled by ``scale``. A trial whose first step outlasts the whole cap (full scale, compile
    off) times no second warm-up step and runs no probes for a long first step: priced from
    its row's median step, it is priced as probing, about one window too many."""
    cap_s = (shape.max_warmup_s if shape.max_warmup_s is not None
             else 2 * shape.windows * shape.window_s)
    probes = rule.least_steady_probes(
        step_s, shape.window_s, windows=shape.windows, warmup_steps=shape.warmup_steps,
        max_probes=shape.max_steady_probes, cap_left_s=cap_s - scale * row.per_step_warmup_s)
    return max(0, probes - (row.steady_probes or 0)) * rule.probe_s(step_s, shape.window_s)


# ------------------------------------------------------------------------- cuDNN's share

def _eager_first_steps(rows: Sequence[RowTimes], cudnn_benchmark: bool | None = None
                       ) -> list[RowTimes]:
    """The rows with a first step that compiled nothing, those with ``cudnn_benchmark`` at
    the value given (None: either)."""
    return [r for r in rows if r.first_step_s and r.eager
            and (cudnn_benchmark is None or bool(r.cudnn_benchmark) == cudnn_benchmark)]


def autotuned_s(row: RowTimes | Mapping[str, Any],
                rows: Sequence[RowTimes | Mapping[str, Any]]) -> float:
    """Seconds of ``row``'s first step that cuDNN's benchmark mode spent autotuning: the first
    step less the median of ``rows``' eager first steps with it off, >= 0; 0 for a row with it
    off, a compiling row (its first step holds the compile), or without a row to compare."""
    row, rows = _view(row), [_view(r) for r in rows]
    off = [r.first_step_s for r in _eager_first_steps(rows, cudnn_benchmark=False)]
    if not off or not row.cudnn_benchmark or not _eager_first_steps([row]):
        return 0.0
    return max(0.0, row.first_step_s - statistics.median(off))


def cudnn_autotune_s(rows: Sequence[RowTimes | Mapping[str, Any]]) -> float:
    """Seconds cuDNN's benchmark mode adds to a trial's first step at shapes new to its
    process, read from ``rows`` (search rows with a first step; a compiling trial's first
    step holds its compile and is left out): the longest first step with ``cudnn_benchmark``
    on less the median with it off, >= 0; ``CUDNN_AUTOTUNE_S`` without both kinds (a run whose
    references leave it off)."""
    rows = [_view(r) for r in rows]
    on = _eager_first_steps(rows, cudnn_benchmark=True)
    if not on or not _eager_first_steps(rows, cudnn_benchmark=False):
        return CUDNN_AUTOTUNE_S
    return max(autotuned_s(r, rows) for r in on)


def _view(row: RowTimes | Mapping[str, Any]) -> RowTimes:
    return row if isinstance(row, RowTimes) else RowTimes.of(row)


# ------------------------------------------------------------------------- shortcuts

def trial_cost_s(rows: Sequence[Mapping], knobs: Knobs, windows: int, window_s: float, *,
                 reused: bool = True, earlier: Container[str] = frozenset(),
                 tuned: bool = False, warmup_steps: int = 1, max_steady_probes: int = 0,
                 max_warmup_s: float | None = None) -> float:
    """``CostModel(rows, reused=, earlier=).price(knobs, TrialShape(...)).total_s``: seconds
    one more trial of ``knobs`` with ``windows`` windows of ``window_s`` takes. ``tuned``: a
    trial of ``knobs`` is planned before it in this command's process."""
    shape = TrialShape(windows, window_s, warmup_steps, max_steady_probes, max_warmup_s)
    model = CostModel(rows, reused=reused, earlier=earlier)
    return model.price(knobs, shape, planned=[knobs] if tuned else ()).total_s


def priced_step_s(rows: Sequence[Mapping], knobs: Knobs) -> float | None:
    """``CostModel(rows).step_s(knobs)``: seconds of one step of ``knobs`` as priced."""
    return CostModel(rows).step_s(knobs)


def per_step_warmup_s(result: Mapping[str, Any]) -> float:
    """Seconds of a trial's warm-up that grow with its batch: ``warmup_s`` less its first step
    (``first_step_s``: worker start, cuDNN autotuning, a compile, each paid once), >= 0."""
    return RowTimes.of(result).per_step_warmup_s


def first_window_need_s(*, once_s: float, warm_s: float, step_s: float, scale: float,
                        compile_s: float, window_s: float) -> float:
    """Seconds a trial needs to end its first window (``TrialCost.first_window_s``): its
    one-off costs ``once_s`` (set-up and first step, not scaled), its warm-up steps after the
    first (``warm_s``) and its step (``step_s``) scaled by ``scale``, ``compile_s`` and one
    window of at least ``window_s``."""
    window = max(window_s, scale * step_s)
    return TrialCost(0.0, once_s, compile_s, scale * warm_s, 0.0, window, window).first_window_s


class Timing(NamedTuple):
    """What a finished trial took (``tuner.searcher.Timing``, deprecated: the searcher prices
    proposals with ``CostModel``)."""
    batch_size: int
    step_s: float
    once_s: float
    warm_s: float
    compile: str
    compile_s: float

    @classmethod
    def of(cls, batch_size: int, result: Mapping[str, Any]) -> "Timing":
        """From a trial's last result."""
        r = RowTimes.of(result)
        once_s = (r.setup_s or 0.0) + (r.first_step_s or 0.0) - r.compiled_s
        return cls(batch_size, r.step_s, max(0.0, once_s), r.per_step_warmup_s,
                   r.compile or "off", r.compiled_s)
