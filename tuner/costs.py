"""One price for a trial: what it costs in seconds, from the run's rows, for every phase that
decides what runs in the time left (the search's proposals, the re-measurement rounds, the
ceilings).

``CostModel(rows, ...)`` reads the run's rows once (``RowTimes``, a typed view of the columns
it needs) and ``CostModel.price(knobs, shape)`` answers a ``TrialCost``: a frozen breakdown
whose ``total_s`` sizes the follow-ups and whose ``first_window_s`` decides whether the search
starts a proposal. The rules, each in one place, read from the run's timed rows (search and
re-measurement rows; a ceiling's batches are on the device):

* step time: the median of the same knobs' last steps, else a line in the batch, ``α + β ·
  batch_size``, fitted per precision, memory layout, compile mode and input pipeline
  (``tuner.step_fit``: robust least squares, coarser groups where a group holds one batch
  size);
* the first step: one step at that time, and its one-off costs as measured (worker start, the
  first batch's load: a line in the batch per input pipeline, ``CostModel.once_s``);
* one-off costs paid once per process and shape: cuDNN's autotuning at a shape new to the
  process (``tuner.knobs.new_cudnn_shapes`` over the rows this command recorded, where trial
  processes are reused: ``tuner.plan.Plan.reuses_trial_processes``), and a ``torch.compile``
  (cold, or from the results folder's warm cache as measured: ``CostModel.compile_s``);
* the warm-up steps after the first, the steady-state probes the harness's own rule runs
  (``tuner.windows.least_steady_probes``) and the windows, each of whole steps;
* set-up and what follows the windows as measured (the median of the latest rows of the same
  input pipeline);
* ``TRIAL_OVERHEAD_S`` per trial for what Ray Tune adds around it.

Before any row, a trial costs its windows, the prior's set-up and worker start (``Prior``),
cuDNN's autotuning (``CUDNN_AUTOTUNE_S``) and a compile as the workload's hint says, and the
overhead.

Torch-free and Ray-free (base floor, beside ``budget`` and ``windows``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, fields
from typing import Any, Callable, Container, Iterable, Mapping, NamedTuple, Sequence

import tuner.windows as rule
from tuner.knobs import CUDNN_SHAPE_KNOBS, Knobs, new_cudnn_shapes
from tuner.status import Phase
from tuner.step_fit import StepFit, every_row

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

PRIOR_ONCE_S = 0.5
"""Seconds a trial spends outside its windows and its workers' start (set-up, first step,
what follows the windows: the breakdown's steps, the last report, the loader's shutdown)
before any row of the run measured one (``Prior.once_s``). Source: the first reference of
nine default runs on 2 CPU cores (ddpm, the Transformers and Lightning examples): what
followed the windows 0.39-0.68 s on a quiet host (1.53 s at a load of 10), set-up 0.02-0.12
s, a first step beyond its workers' start of 0.02-0.3 s."""

PRIOR_WORKER_START_S = 0.25
"""Seconds the first step of a trial before any row waits per DataLoader worker started
(``Prior.worker_start_s``). Source: ddpm's baseline (four workers) on 2 CPU cores, first
step 0.9-2.1 s over a step of 0.2-0.44 s at loads 1-9."""


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
    def first_step_beyond_s(self) -> float:
        """Seconds its first step took beyond a steady step (``step_s``), >= 0: worker start,
        the first batch's load, cuDNN's autotuning, a compile."""
        return max(0.0, (self.first_step_s or 0.0) - self.step_s)

    @property
    def tail_s(self) -> float | None:
        """Seconds after its windows (the breakdown's steps, its last report, the loader's
        shutdown): its wall time less ``before_windows_s`` and ``measured_s``, >= 0; None
        without a wall time."""
        wall_s = self.wall_s
        if wall_s is None:
            return None
        return max(0.0, wall_s - (self.measured_s or 0.0) - self.before_windows_s)

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
    """Set-up and first step: one step, and the one-offs measured beside it
    (``CostModel.once_s``)."""
    one_off_s: float
    """cuDNN's autotuning at a shape new to the process, and a ``torch.compile``."""
    warmup_s: float
    """Warm-up steps after the first (``warmup_steps`` - 1, none past the warm-up's cap)."""
    probes_s: float
    """The steady-state probes the harness runs at the least."""
    window_s: float
    """One window: whole steps, up to the first past the window's length (``window_of_s``)."""
    windows_s: float
    """Every window."""
    tail_s: float = 0.0
    """What follows the windows (the breakdown's steps, the last report, the loader's
    shutdown), as measured."""

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


@dataclass(frozen=True)
class Prior:
    """What a trial costs before any row of the run measured one (the first reference), from
    the workload's hints where it gives them."""

    once_s: float = PRIOR_ONCE_S
    """Set-up, the first step and what follows the windows (``PRIOR_ONCE_S``)."""
    worker_start_s: float = PRIOR_WORKER_START_S
    """Each DataLoader worker's start (``PRIOR_WORKER_START_S``)."""
    compile_s: float = 0.0
    """A first ``torch.compile``: the workload's ``compile_s_hint``; 0 without one (the
    trial's own set-up check refuses a compile without the time for it,
    ``tuner.budget.compile_refusal``)."""

    @classmethod
    def of(cls, workload: Any) -> "Prior":
        """From ``workload``'s hints (``Workload.compile_s_hint``; None reads as 0)."""
        return cls(compile_s=getattr(workload, "compile_s_hint", None) or 0.0)


class CostModel:
    """Prices trials from a run's rows (see the module docstring for the rules).

    Args:
        rows: leaderboard rows (or final results with their knobs), any phase, in the order
            recorded; the search and re-measurement rows give step times and one-off costs,
            every row of this command the shapes cuDNN has tuned.
        reused: whether trials run in processes earlier trials of the run ran in
            (``Plan.reuses_trial_processes``): cuDNN keeps what it tuned there.
        earlier: ``trial_id`` of rows an earlier command recorded (a resumed run's,
            ``Plan.earlier_trial_ids``): their processes are gone.
        prior: what a trial costs before any row (``Prior``; default ``Prior()``).
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]] = (), *, reused: bool = True,
                 earlier: Container[str] = frozenset(), prior: Prior | None = None):
        self.reused = reused
        self.earlier = earlier
        self.prior = prior or Prior()
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
        self._fit = self._once = self._timed = None

    @property
    def search(self) -> list[RowTimes]:
        """The search rows with a wall time or a step time."""
        return [r for r in self.rows if r.is_search and (r.wall_s is not None or r.step_s)]

    @property
    def timed(self) -> list[RowTimes]:
        """The rows that timed a trial as the search and the rounds run one: search and
        re-measurement rows with knobs and a step time (not a ceiling's, whose batches are on
        the device, nor the memory probe's)."""
        if getattr(self, "_timed", None) is None:
            self._timed = [r for r in self.rows if r.knobs is not None and r.step_s
                           and Phase(r.phase or Phase.SEARCH) != Phase.CEILING
                           and "-probe-" not in (r.trial_id or "")]
        return self._timed

    @property
    def fit(self) -> StepFit:
        """The lines of step time in the batch over ``timed`` (``tuner.step_fit``)."""
        if getattr(self, "_fit", None) is None:
            self._fit = StepFit([(r.knobs, r.step_s) for r in self.timed])
        return self._fit

    def price(self, knobs: Knobs, shape: TrialShape, *,
              planned: Sequence[Knobs] = ()) -> TrialCost:
        """The cost of one more trial of ``knobs`` measured as ``shape`` says, run after the
        rows read and after ``planned`` (trials planned before it in this command's process,
        not recorded yet)."""
        step_s = self.step_s(knobs)
        if step_s is None:
            once_s = self.prior.once_s + knobs.num_workers * self.prior.worker_start_s
            one_off_s = self._cudnn_s(knobs, planned) + self._compile_prior(knobs)
            return TrialCost(TRIAL_OVERHEAD_S, once_s, one_off_s,
                             0.0, 0.0, shape.window_s, shape.windows * shape.window_s)
        window_s = window_of_s(step_s, shape.window_s)
        warmup_s = _warmup_s(step_s, shape)
        return TrialCost(
            start_s=TRIAL_OVERHEAD_S, setup_s=self.once_s(knobs) + step_s,
            one_off_s=self._cudnn_s(knobs, planned) + self.compile_s(knobs),
            warmup_s=warmup_s, probes_s=_probes_s(step_s, warmup_s, shape), window_s=window_s,
            windows_s=shape.windows * window_s,
            tail_s=self._as_measured(knobs, lambda row: row.tail_s))

    def step_s(self, knobs: Knobs) -> float | None:
        """Seconds of one step of ``knobs`` as ``price`` reads it (``tuner.step_fit.StepFit``:
        its own rows' median step where it ran, else the line of its group); None without a
        row to read it from."""
        return self.fit.at(knobs)

    def compile_s(self, knobs: Knobs) -> float:
        """Seconds a trial of ``knobs`` compiles, once per process and shape (its mode and
        ``tuner.knobs.CUDNN_SHAPE_KNOBS``):

        * a mode and shape a row of the run compiled before: the results folder's compile
          cache is warm, priced as measured: the median of the warm compiles measured at that
          mode and shape (the rows after the first), else the first one's (an upper bound);
        * a shape new to the mode: the longest compile measured in the mode (a cold compile);
        * none measured in the mode: the prior (``Prior.compile_s``, the workload's
          ``compile_s_hint``; 0 without one);
        * 0 eager.

        A row's compile is ``RowTimes.compiled_s``: its ``compile_s``, else its first step
        beyond a steady one."""
        mode = knobs.compile or "off"
        if mode == "off":
            return 0.0
        compiled = [r for r in self.rows if r.knobs is not None and r.compiled_s > 0
                    and (r.compile or "off") == mode]
        same = [r.compiled_s for r in compiled if _shape(r.knobs) == _shape(knobs)]
        if same:
            return statistics.median(same[1:]) if len(same) > 1 else same[0]
        return max((r.compiled_s for r in compiled), default=self._compile_prior(knobs))

    def compile_warm(self, knobs: Knobs) -> bool:
        """Whether a trial of ``knobs`` compiles from a warm cache: a row of the run compiled
        its mode and shape before (``compile_s``). False eager."""
        return (knobs.compile or "off") != "off" and any(
            r.knobs is not None and r.compiled_s > 0 and r.compile == knobs.compile
            and _shape(r.knobs) == _shape(knobs) for r in self.rows)

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

    def _compile_prior(self, knobs: Knobs) -> float:
        return 0.0 if (knobs.compile or "off") == "off" else self.prior.compile_s

    def _cudnn_s(self, knobs: Knobs, planned: Sequence[Knobs]) -> float:
        """cuDNN's autotuning in a trial of ``knobs``: none with it off or at a shape tuned in
        the process, else the run's (``cudnn_autotune_s``)."""
        if not knobs.cudnn_benchmark or self.tuned_in_process(knobs, planned):
            return 0.0
        return cudnn_autotune_s(self.timed)

    def _first_step_once_s(self, row: RowTimes) -> float:
        """``row``'s first step beyond a steady step, less its cuDNN autotuning and its
        compile (priced apart, once per process and shape), >= 0."""
        return max(0.0, row.first_step_beyond_s - autotuned_s(row, self.timed)
                   - row.compiled_s)

    def once_s(self, knobs: Knobs) -> float:
        """Seconds of a trial of ``knobs``'s set-up and first step beyond a steady step,
        cuDNN's autotuning and a compile left out, as the timed rows measured them: the set-up
        the median of the latest rows of its group (``ONE_OFF_GROUPINGS``: the first trial
        of a cache fills it, once); the first step's one-offs (worker start, the first batch's
        load, which grows with the batch) a line in the batch over the rows of its input
        pipeline (``StepFit`` in the groups of ``ONE_OFF_GROUPINGS`` but the last, flat for
        one batch size), else the median of the latest rows. 0 without a row."""
        if getattr(self, "_once", None) is None:
            self._once = StepFit([(r.knobs, self._first_step_once_s(r)) for r in self.timed],
                                 ONE_OFF_GROUPINGS[:-1], proportional=False)
        first_s = self._once.at(knobs)
        if first_s is None:        # no row of its input pipeline: the median of every row's
            first_s = self._as_measured(knobs, self._first_step_once_s)
        return self._as_measured(knobs, lambda row: row.setup_s) + first_s

    def _as_measured(self, knobs: Knobs, value: Callable[[RowTimes], float | None]) -> float:
        """The median ``value`` of the last ``RECENT_ROWS`` timed rows of the finest of
        ``ONE_OFF_GROUPINGS`` that holds one with ``knobs`` (0 without any)."""
        for key in ONE_OFF_GROUPINGS:
            values = [v for r in self.timed if key(r.knobs) == key(knobs)
                      and (v := value(r)) is not None]
            if values:
                return statistics.median(values[-RECENT_ROWS:])
        return 0.0


def _shape(knobs: Knobs) -> tuple:
    return tuple(getattr(knobs, name) for name in CUDNN_SHAPE_KNOBS)


def _input_pipeline(k: Knobs) -> tuple:
    return (k.data_path, k.num_workers, k.persistent_workers)


def _data_path(k: Knobs) -> tuple:
    return (k.data_path, k.num_workers == 0)


ONE_OFF_GROUPINGS: tuple[Callable[[Knobs], Any], ...] = (_input_pipeline, _data_path, every_row)
"""Rows whose one-off costs (set-up, first step beyond a step, what follows the windows) price
a trial, finest first: the same input pipeline; the same data path with or without workers;
every row. The input pipeline is what they hold: worker start, a cache's
fill, the first batch's load."""

RECENT_ROWS = 5
"""One-off costs are the median of this many of the latest rows of their group: the host's
pace now, not at the start of the run."""


def window_of_s(step_s: float, window_s: float) -> float:
    """Seconds one window of ``window_s`` takes with steps of ``step_s``: it ends on the first
    step past ``window_s`` (``tuner.trial.harness``), so it holds a whole number of steps, one
    at least; ``window_s`` for steps too short to tell (0)."""
    if step_s <= 0:
        return window_s
    return max(1, math.ceil(window_s / step_s - 1e-9)) * step_s


def _cap_s(shape: TrialShape) -> float:
    """The warm-up's cap after the first step (``TrialSettings.max_warmup_s``, default twice
    the windows' length)."""
    return (shape.max_warmup_s if shape.max_warmup_s is not None
            else 2 * shape.windows * shape.window_s)


def _warmup_s(step_s: float, shape: TrialShape) -> float:
    """Seconds of the warm-up steps after the first (``tuner.trial.harness``): steps of
    ``step_s`` up to ``warmup_steps`` - 1 of them, none started that would end past the cap."""
    if step_s <= 0:
        return 0.0
    steps = min(shape.warmup_steps - 1, math.floor(_cap_s(shape) / step_s + 1e-9))
    return max(0, steps) * step_s


def _probes_s(step_s: float, warmup_s: float, shape: TrialShape) -> float:
    """Seconds of the steady-state probes a trial of ``shape`` runs at the least
    (``tuner.windows.least_steady_probes``, the harness's own rule) after a warm-up of
    ``warmup_s`` seconds, for steps of ``step_s`` seconds. More probes and windows dropped as
    warm-up happen where the windows disagree; they are not priced."""
    probes = rule.least_steady_probes(
        step_s, shape.window_s, windows=shape.windows, warmup_steps=shape.warmup_steps,
        max_probes=shape.max_steady_probes, cap_left_s=_cap_s(shape) - warmup_s)
    return probes * rule.probe_s(step_s, shape.window_s)


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
