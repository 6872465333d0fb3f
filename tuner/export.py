"""Leaderboard rows as an Optuna study, for ``optuna-dashboard`` and Optuna's own analysis.

One Optuna trial per leaderboard row, numbered in the order the trials started. The study is
single-objective, ``maximize``: the value is ``samples_per_sec`` (median over the measurement
windows), whatever ``--objective`` the run optimised (``time_to_train_s`` is a user attribute).

How a row becomes a trial:

* params: the knobs, one per knob column (a knob the row leaves empty, ``prefetch_factor``
  without workers, is not a param of that trial, as in Optuna's define-by-run spaces). The
  distributions cover every value of the exported rows: ``IntDistribution(low, high)`` over the
  values seen for an integer knob, ``CategoricalDistribution((False, True))`` for a boolean
  one, the knob's accepted values (``KnobInfo.choices``) for a string one.
* state and value, by ``status``: ``ok`` -> COMPLETE with samples/sec; the other statuses
  that carry a throughput (``status.MEASURED``: ``pruned`` by early stopping, ``timeout`` by the
  time budget) -> PRUNED, their partial samples/sec (if a window finished) an intermediate value
  at step ``windows``; ``oom``, ``over_limit``, ``error`` (and any other status) -> FAIL, no
  value (a failure is never a throughput of zero, Optuna's taxonomy too). An ``ok`` row without
  a finite samples/sec is PRUNED, as the searcher tells Optuna.
* rows of the ceiling phase (compute-only or loader-only rates, not reachable in training) are
  PRUNED, their rate an intermediate value at step ``windows``: as COMPLETE trials they would be
  the study's best (``optuna-dashboard`` and ``Study.best_trial`` rank COMPLETE trials by value;
  the dashboard ignores constraints).
* user attributes: the non-empty ``USER_ATTRS`` columns (which row, how it ended, what it
  measured, its memory and the limits it ran under). Optuna's RDB storage writes each attribute
  and param as its own statement (60 trials: 35 s with every column, 21 s with these, on a
  loaded 2-core machine), so the rest (breakdown, versions, ``traceback``...) stays in the
  leaderboard
  (``tuner leaderboard --format json``). The row ``tuner best`` picks gets ``best: true``: the
  dashboard's best trial is the highest single measurement, while ``tuner best`` chooses among
  a run's re-measurements.
* ``datetime_start`` / ``datetime_complete``: the row's ``started_at`` / ``finished_at``, in
  local time as Optuna records it.

The leaderboard is only read; the study is written to the database URL given.
"""

from __future__ import annotations

import datetime as dt
import math
import warnings
from typing import Any, Mapping, Sequence

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import TunerError
from tuner.knobs import KNOB_INFO, Knobs
from tuner.status import MEASURED, Phase, Status, phase_of
from tuner.winner import best

METRIC = "samples_per_sec"
"""The study's objective value (maximised)."""

USER_ATTRS = ("run_id", "trial_id", "phase", "reference", "ceiling", "status", "error",
              "memory_exceeded", "samples_per_sec", "tokens_per_sec", "step_time_ms_p50",
              "time_to_train_s", "mfu_pct", "peak_device_memory_mb", "peak_host_memory_mb",
              "max_memory_mb", "max_host_memory_mb", "global_batch_size", "clamped",
              "hardware_key", "device", "scale", "objective")
"""Leaderboard columns copied into each trial's user attributes (when not empty)."""

_ROW_KEY = ("run_id", "trial_id", "phase")
"""Columns that identify one leaderboard row."""


def default_study_name(workload: str, hardware_key: str) -> str:
    """``<workload>@<hardware_key>``: one study per workload and machine, as the read
    commands show them."""
    return f"{workload}@{hardware_key}"


def knob_distributions(rows: Sequence[Mapping[str, Any]]) -> dict[str, BaseDistribution]:
    """One Optuna distribution per knob that has a value in ``rows``, covering every value
    seen (see the module docstring). A knob empty in every row has none."""
    out: dict[str, BaseDistribution] = {}
    for name, info in KNOB_INFO.items():
        seen = [r[name] for r in rows if r.get(name) is not None]
        if not seen:
            continue
        if info.kind == "int":
            out[name] = IntDistribution(low=min(seen), high=max(seen))
        elif info.kind == "bool":
            out[name] = CategoricalDistribution((False, True))
        else:  # a value no longer accepted (an older row) is still a choice of the study
            extra = sorted(set(seen) - set(info.choices))
            out[name] = CategoricalDistribution((*info.choices, *extra))
    return out


def _state(row: Mapping[str, Any]) -> tuple[TrialState, float | None, dict[int, float]]:
    """The trial state, value and intermediate values of one row."""
    sps, status = row.get(METRIC), row.get("status")
    measured = sps is not None and math.isfinite(sps)
    if status == Status.OK and measured and phase_of(row) != Phase.CEILING:
        return TrialState.COMPLETE, sps, {}
    if status in MEASURED:  # stopped before every window ran (pruned, timeout)
        return TrialState.PRUNED, None, {int(row.get("windows") or 0): sps} if measured else {}
    return TrialState.FAIL, None, {}


def _attr(value: Any) -> Any:
    """A column value as JSON for a user attribute; None for what JSON cannot hold (NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _local(when: dt.datetime | None) -> dt.datetime | None:
    """A UTC timestamp as the naive local time Optuna stores (``datetime.now()``)."""
    if when is None:
        return None
    return when.astimezone().replace(tzinfo=None) if when.tzinfo else when


def to_trial(row: Mapping[str, Any], distributions: Mapping[str, BaseDistribution], *,
             best: bool = False) -> FrozenTrial:
    """One leaderboard row as a finished Optuna trial (see the module docstring).

    Args:
        row: a leaderboard row (``leaderboard.SCHEMA`` columns).
        distributions: from ``knob_distributions`` over every row exported with it.
        best: the row ``tuner best`` picks (user attribute ``best: true``).

    Raises:
        ValueError: a knob value outside ``distributions`` (they were built from other rows).
    """
    state, value, intermediate = _state(row)
    params = {n: row[n] for n in Knobs.names() if row.get(n) is not None}
    attrs = {k: _attr(row.get(k)) for k in USER_ATTRS}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    if best:
        attrs["best"] = True
    trial = optuna.trial.create_trial(
        state=state, value=value, params=params,
        distributions={n: distributions[n] for n in params}, user_attrs=attrs,
        intermediate_values=intermediate)
    start = _local(row.get("started_at")) or _local(row.get("finished_at"))
    if start is not None:
        trial.datetime_start = start
        trial.datetime_complete = max(_local(row.get("finished_at")) or start, start)
    return trial


def to_trials(rows: Sequence[Mapping[str, Any]]) -> list[FrozenTrial]:
    """Every row as a trial, in the order the trials started (rows without a start time
    last, by trial id); the row ``tuner best`` picks is marked ``best``."""
    distributions = knob_distributions(rows)
    answer = best(rows)
    top_key = tuple(answer.row[k] for k in _ROW_KEY) if answer else None
    ordered = sorted(rows, key=lambda r: (r.get("started_at") is None,
                                          _local(r.get("started_at")) or dt.datetime.min,
                                          str(r.get("trial_id"))))
    return [to_trial(r, distributions, best=tuple(r.get(k) for k in _ROW_KEY) == top_key)
            for r in ordered]


def shown_url(url: str) -> str:
    """``url`` for messages, its password (if any) as ``***``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:  # not a URL SQLAlchemy parses: shown as given (it holds no password)
        return url


_ACCEPTED = ("expected a database URL such as sqlite:///tuner.db or "
             "postgresql://user@host/db (with its driver installed)")


def _storage_error(url: str, exc: BaseException,
                   doing: str = "open it as an Optuna storage") -> TunerError:
    text = str(exc).split("(Background on this error", 1)[0].strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return TunerError(f"--optuna-storage {shown_url(url)}: cannot {doing} ({first}); "
                      f"{_ACCEPTED}")


def write_study(rows: Sequence[Mapping[str, Any]], storage: str, study_name: str, *,
                overwrite: bool = False,
                study_attrs: Mapping[str, Any] | None = None) -> optuna.Study:
    """Write ``rows`` as a new Optuna study ``study_name`` (direction ``maximize``, metric
    ``samples_per_sec``) in the database ``storage``, one trial per row (``to_trials``).

    The trials are built before the database is touched; a write that fails part-way removes
    the half-written study.

    Args:
        rows: leaderboard rows, at least one.
        storage: an SQLAlchemy database URL, e.g. ``sqlite:///tuner.db`` (Optuna's RDB storage).
        study_name: the study to create.
        overwrite: replace a study of that name; without it, an existing one is an error.
        study_attrs: the study's user attributes (JSON values).

    Returns:
        The study written.

    Raises:
        TunerError: ``storage`` cannot be opened (bad URL, missing driver, unwritable file) or
            written; a study named ``study_name`` exists and ``overwrite`` is False.
    """
    import sqlalchemy.exc
    trials = to_trials(rows)
    failures = (ImportError, ValueError, sqlalchemy.exc.SQLAlchemyError)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line
    try:
        try:
            db = optuna.storages.RDBStorage(storage)
            names = optuna.get_all_study_names(storage=db)
        except failures as exc:
            raise _storage_error(storage, exc) from None
        if study_name in names and not overwrite:
            raise TunerError(f"--optuna-storage {shown_url(storage)} already holds a study "
                             f"named {study_name!r}; pass --overwrite to replace it, or "
                             "--study-name to write another")
        try:
            if study_name in names:
                optuna.delete_study(study_name=study_name, storage=db)
            study = optuna.create_study(storage=db, study_name=study_name, direction="maximize")
        except failures as exc:
            raise _storage_error(storage, exc) from None
        try:
            _fill(study, trials, study_attrs or {})
        except failures as exc:
            optuna.delete_study(study_name=study_name, storage=db)
            raise _storage_error(storage, exc, f"write study {study_name!r} there") from None
    finally:
        optuna.logging.set_verbosity(verbosity)
    return study


def _fill(study: optuna.Study, trials: list[FrozenTrial], attrs: Mapping[str, Any]) -> None:
    with warnings.catch_warnings():  # set_metric_names is "experimental" (Optuna 3.2+)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([METRIC])
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    study.add_trials(trials)
