"""A run's history as typed values: ``TrialRow``, one leaderboard row read once into the fields
the planner asks about (like Optuna's ``FrozenTrial``), and ``History``, the rows in order with
the questions asked of them (``search()``, ``remeasured(knobs)``, ``ceilings(kind)``,
``screens()``, ``budget_stopped_best(...)``, ``cudnn_both_ways()``).

Rows of every leaderboard version read: a column a row lacks reads as what
``tuner.leaderboard.OLDER_FILES_READ_AS`` says it meant (a search row, the loader path, a
ceiling row without ``ceiling`` is a compute-only ceiling), and columns this module does not
know are kept in ``TrialRow.raw`` only. Torch-free and Ray-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from tuner.knobs import Knobs
from tuner.status import Phase, Status, budget_stopped, phase_of

METRICS = ("samples_per_sec", "time_to_train_s")
"""The objectives a run ranks rows by (``RunOptions.metric``): higher samples/sec wins, lower
time to train wins."""


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


def _knobs(row: Mapping) -> Knobs | None:
    """The row's knobs (other columns ignored); None for a row without a batch size."""
    try:
        return Knobs.from_dict(row, strict=False)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class TrialRow:
    """One leaderboard row, read once (``of``). ``raw`` is the row as given, for the modules
    that read other columns; it takes no part in equality."""
    knobs: Knobs | None
    """The configuration measured; None for a row without a batch size."""
    status: Status
    phase: Phase
    reference: str | None = None
    """The reference it measured ('baseline', 'recommended', ...); None: a searched one."""
    ceiling: str | None = None
    """A ceiling row's kind ('compute', 'loader', 'machine-loader', ...); None elsewhere."""
    data_path: str = "loader"
    accelerator_type: str | None = None
    trial_id: str | None = None
    run_id: str | None = None
    scale: str | None = None
    error: str | None = None
    memory_exceeded: str | None = None
    """What ran out ('device' or 'host') in an ``oom`` or ``over_limit`` row."""
    samples_per_sec: float | None = None
    time_to_train_s: float | None = None
    windows: int | None = None
    """Windows measured (a ``timeout`` row may have fewer than ``windows_planned``)."""
    windows_planned: int | None = None
    impossible: str | None = None
    """Why its figures cannot be true (``impossible``); None: they can."""
    budget_stopped: bool = False
    """A measurement the time budget cut short (``tuner.status.budget_stopped``)."""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> "TrialRow":
        """The typed row of a leaderboard row (a dict of ``tuner.leaderboard.SCHEMA``'s
        columns, of any version: missing ones read as older files do). Raises ValueError for a
        ``status`` that is not a ``Status``."""
        get = row.get
        phase = phase_of(row)  # type: ignore[arg-type]
        ceiling = (get("ceiling") or "compute") if phase == Phase.CEILING else None
        return cls(knobs=_knobs(row), status=Status(get("status") or Status.ERROR), phase=phase,
                   reference=get("reference"), ceiling=ceiling,
                   data_path=get("data_path") or "loader",
                   accelerator_type=get("accelerator_type"), trial_id=get("trial_id"),
                   run_id=get("run_id"), scale=get("scale"),
                   error=get("error"), memory_exceeded=get("memory_exceeded"),
                   samples_per_sec=get("samples_per_sec"),
                   time_to_train_s=get("time_to_train_s"), windows=get("windows"),
                   windows_planned=get("windows_planned"), impossible=impossible(row),
                   budget_stopped=budget_stopped(row), raw=row)

    def figure(self, metric: str) -> float | None:
        """The row's figure for the objective ``metric`` (one of ``METRICS``); None: not
        measured. Raises ValueError for another metric."""
        if metric == "samples_per_sec":
            return self.samples_per_sec
        if metric == "time_to_train_s":
            return self.time_to_train_s
        raise ValueError(f"unknown metric {metric!r}; accepted: {', '.join(METRICS)}")

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


@dataclass(frozen=True)
class History:
    """A run's rows in the order recorded, typed (``TrialRow``), with the questions the
    planner, the reports and the benches ask of them."""
    rows: tuple[TrialRow, ...] = ()

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]]) -> "History":
        """The history of leaderboard rows (dicts), each read once (``TrialRow.of``); a
        ``History`` as it is."""
        if isinstance(rows, History):
            return rows
        return cls(tuple(TrialRow.of(r) for r in rows))

    def __iter__(self) -> Iterator[TrialRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def dicts(self) -> list[Mapping[str, Any]]:
        """The rows as given (``TrialRow.raw``), for modules that read leaderboard dicts."""
        return [r.raw for r in self.rows]

    def on_type(self, accelerator_type: str | None) -> "History":
        """The rows of one accelerator type (all of them on one type: None)."""
        return History(tuple(r for r in self.rows if r.accelerator_type == accelerator_type))

    def search(self) -> list[TrialRow]:
        """The search phase's rows (references and structured points included)."""
        return [r for r in self.rows if r.phase == Phase.SEARCH]

    def ranked(self, metric: str, mode: str, *, sound: bool = False) -> list[TrialRow]:
        """The ``ok`` search rows with a ``metric`` figure, best first (``mode`` 'max' or
        'min'); with ``sound``, only those whose figures can be true (``impossible``)."""
        ok = [r for r in self.search() if r.ok and r.figure(metric) is not None
              and not (sound and r.impossible)]
        return sorted(ok, key=lambda r: r.figure(metric), reverse=mode == "max")

    def remeasured(self, knobs: Knobs | None = None) -> list[TrialRow]:
        """The re-measurement rows (of ``knobs``; None: of every configuration)."""
        return [r for r in self.rows if r.phase == Phase.REMEASURE
                and (knobs is None or r.knobs == knobs)]

    def ceilings(self, kind: str | None = None) -> list[TrialRow]:
        """The ceiling rows (of ``kind``, e.g. 'compute'; None: every kind)."""
        return [r for r in self.rows if r.phase == Phase.CEILING
                and (kind is None or r.ceiling == kind)]

    def screens(self) -> list[TrialRow]:
        """The screening trials: search rows planned to measure fewer windows than the most
        any search row planned (a reference's full measurement)."""
        search = self.search()
        full = max((r.windows_planned or 0 for r in search), default=0)
        return [r for r in search if 0 < (r.windows_planned or 0) < full]

    def budget_stopped_best(self, metric: str = "samples_per_sec",
                            mode: str = "max") -> TrialRow | None:
        """The best search or re-measurement row the time budget stopped
        (``TrialRow.budget_stopped``) by ``metric`` (``mode`` 'max' or 'min'); None without
        one."""
        stopped = [r for r in self.rows if r.budget_stopped and r.phase != Phase.CEILING
                   and r.figure(metric) is not None]
        pick = max if mode == "max" else min
        return pick(stopped, key=lambda r: r.figure(metric), default=None)

    def cudnn_both_ways(self) -> tuple[list[TrialRow], list[TrialRow]] | None:
        """The cuDNN decision at the finalists (``Plan.cudnn_at_finalists``): the ``ok``
        re-measurement rounds of the first configuration re-measured both without and with
        ``cudnn_benchmark``, as (without, with); None where none was."""
        ways: dict[Knobs, tuple[list[TrialRow], list[TrialRow]]] = {}
        for r in self.remeasured():
            if r.ok and r.knobs is not None and r.samples_per_sec:
                pair = ways.setdefault(r.knobs.replace(cudnn_benchmark=False), ([], []))
                pair[bool(r.knobs.cudnn_benchmark)].append(r)
        return next((pair for pair in ways.values() if all(pair)), None)
