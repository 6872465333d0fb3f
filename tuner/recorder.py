"""The leaderboard recorder: a Ray Tune callback in the driver that writes one row per
finished trial (workers on other nodes share no disk with the driver)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable

from ray.tune import Callback

import tuner.leaderboard as leaderboard
from tuner.errors import TunerError
from tuner.knobs import Knobs
from tuner.plan import Plan
from tuner.status import Phase, Status


def _stamp(trial, result: dict) -> None:
    """started_at/finished_at for a trial that never reported its final result (its process
    died): when Ray Tune started it, and now."""
    now = dt.datetime.now(dt.timezone.utc)
    start = getattr(getattr(trial, "run_metadata", None), "start_time", None)
    if result.get("started_at") is None:
        result["started_at"] = dt.datetime.fromtimestamp(start, dt.timezone.utc) if start else now
    if result.get("finished_at") is None:
        result["finished_at"] = now


def _error_file_text(trial) -> str | None:
    """What Ray Tune wrote to the trial's error.txt (a driver-side failure has no pickled
    error), or None."""
    try:
        path = trial.error_file
        return Path(path).read_text() if path else None
    except OSError:
        return None


def ignore_event(kind: str, data: dict) -> None:
    """on_event of a restored LeaderboardWriter (no console attached)."""


def _one_line(text: str) -> str:
    """A multi-line error (a DataLoader worker's wrapped traceback) as one line: the first
    line and the final cause."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0]} -> {lines[-1]}"


class LeaderboardWriter(Callback):
    """Writes one leaderboard row per finished trial, from the driver (workers on other nodes
    share no disk with it)."""

    def __init__(self, plan: Plan, on_event: Callable[[str, dict], None], versions: dict):
        self.plan = plan
        self.on_event = on_event
        self.versions = versions
        self.rows: list[dict] = list(plan.prior_rows)  # a resumed run's rows count as done
        self.expected = plan.trials
        """Trials expected in all (None without a trial budget); follow-up phases add theirs."""
        self._done: set[str] = set()

    def __getstate__(self) -> dict:
        # Ray Tune pickles its run config (callbacks included) for restore; the live console
        # behind on_event holds locks and is not part of the run's state.
        state = self.__dict__.copy()
        state["on_event"] = ignore_event
        return state

    def _row(self, trial, result: dict) -> dict:
        config = trial.config
        reference = config.get("reference")
        row: dict[str, Any] = {}
        try:
            row.update(Knobs.from_dict(config, strict=False).to_dict())
        except ValueError:
            pass
        row.update(result)
        row.update(self.versions)
        row.update(run_id=self.plan.run_id, trial_id=trial.trial_id,
                   workload=self.plan.workload.name, scale=self.plan.scale,
                   reference=reference, is_baseline=reference == "baseline",
                   phase=Phase(config.get("phase", Phase.SEARCH)).value, objective=self.plan.metric,
                   train_steps=self.plan.options.train_steps,
                   max_host_memory_mb=self.plan.max_host_memory_mb,
                   global_batch_size=self.plan.options.global_batch_size)
        if row.get("trial_cpus") is None:  # died before its first report: Ray's record of it
            given = trial.placement_group_factory.required_resources
            row.update(trial_cpus=given.get("CPU"), trial_gpus=given.get("GPU", 0.0))
        row.setdefault("device", self.plan.device)
        if row.get("error"):
            row["error"] = _one_line(row["error"])
        return row

    def _write(self, row: dict) -> None:
        self.rows.append(leaderboard.write_row(self.plan.options.results, row))
        self.on_event("trial", {"row": self.rows[-1], "index": len(self.rows),
                                "total": self.expected})

    def on_trial_complete(self, iteration, trials, trial, **info):
        if trial.trial_id in self._done:
            return
        self._done.add(trial.trial_id)
        result = dict(trial.last_result or {})
        if not result:
            result = {"status": Status.ERROR.value, "error": "the trial ended without reporting a result"}
        elif result.get("status") == Status.RUNNING:
            result["status"] = Status.PRUNED.value  # stopped by the scheduler between windows
        _stamp(trial, result)
        self._write(self._row(trial, result))

    def on_trial_error(self, iteration, trials, trial, **info):
        if trial.trial_id in self._done:
            return
        self._done.add(trial.trial_id)
        error = trial.get_error()
        text = str(error) if error else _error_file_text(trial)
        result = {k: v for k, v in (trial.last_result or {}).items()
                  if k not in leaderboard.MEASURED_COLUMNS}
        result.update(status=Status.ERROR.value, error=_one_line(text) if text else "the trial process failed",
                      traceback=text)
        _stamp(trial, result)
        self._write(self._row(trial, result))
