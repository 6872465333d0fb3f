"""The leaderboard recorder: a Ray Tune callback in the driver that writes one row per
finished trial (workers on other nodes share no disk with the driver)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from ray.tune import Callback

import tuner.leaderboard as leaderboard
from tuner._deprecated import moved
from tuner.budget import kill_at_unix_s
from tuner.errors import RecordFailed, one_line
from tuner.knobs import Knobs
from tuner.plan import Plan
from tuner.ray_runtime import NODE_DEATH_WAIT_S, node_lost_error
from tuner.runlock import active_runs
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


def _deadline(trial) -> float | None:
    """The trial's deadline (``TrialSettings.deadline_unix_s``, time.time()), or None."""
    return (trial.config.get("tuner") or {}).get("deadline_unix_s")


def ignore_event(kind: str, data: dict) -> None:
    """on_event of a restored LeaderboardWriter (no console attached)."""


class LeaderboardWriter(Callback):
    """Writes one leaderboard row per finished trial, from the driver (workers on other nodes
    share no disk with it)."""

    def __init__(self, plan: Plan, on_event: Callable[[str, dict], None], versions: dict,
                 known_dead: frozenset[str] = frozenset()):
        self.plan = plan
        self.on_event = on_event
        self.versions = versions
        self.rows: list[dict] = list(plan.prior_rows)  # a resumed run's rows count as done
        self.expected = plan.trials
        """Trials expected in all (None without a trial budget); follow-up phases add theirs."""
        self._done: set[str] = set()
        self.failed: RecordFailed | None = None
        """The first row that could not be written; ``on_step_end`` raises it."""
        self._overdue: set[str] = set()
        """Trials killed past their deadline (``on_step_begin``)."""
        self.known_dead = known_dead
        """Ray nodes dead before the run (``tuner.ray_runtime.dead_nodes``): no trial of the
        run was lost with them."""

    def __getstate__(self) -> dict:
        # Ray Tune pickles its run config (callbacks included) for restore; the live console
        # behind on_event holds locks and is not part of the run's state.
        # Tuner never restores Ray's state (--resume reads the leaderboard), and rows pickled
        # with every experiment made <results>/ray larger than the leaderboard itself.
        state = self.__dict__.copy()
        state["on_event"] = ignore_event
        state.update(rows=[], failed=None, _done=set(),
                     plan=dataclasses.replace(self.plan, prior_rows=()))
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
                   global_batch_size=self.plan.options.global_batch_size,
                   priced_s=config.get("priced_s"))
        if row.get("trial_cpus") is None:  # died before its first report: Ray's record of it
            given = trial.placement_group_factory.required_resources
            row.update(trial_cpus=None if not given.get("CPU") else float(given["CPU"]),
                       trial_gpus=given.get("GPU", 0.0))
        row.setdefault("device", self.plan.device)
        if self.plan.options.address is None:  # the runs registered on this machine
            row["other_runs"] = sum(r.pid != os.getpid() for r in active_runs())
        if row.get("error"):
            row["error"] = one_line(row["error"])
        return row

    def _write(self, row: dict) -> None:
        """Write the row, or keep the first failure for ``on_step_end`` (Ray Tune catches
        what a trial callback raises, logs it and goes on, so the run would continue and lose
        every later row without a word)."""
        if self.failed is not None:
            return
        try:
            written = leaderboard.write_row(self.plan.options.results, row)
        except OSError as exc:
            self.failed = RecordFailed(f"to {self.plan.options.results}/leaderboard", exc,
                                       self.plan, len(self.rows), lost=row.get("trial_id"))
            return
        self.rows.append(written)
        self.on_event("trial", {"row": self.rows[-1], "index": len(self.rows),
                                "total": self.expected})

    def record_result(self, trial_id: str, config: dict, result: dict) -> None:
        """Write the row of a measurement made outside the run's Tune experiment (the memory
        probe's at its largest batch: the 'machine-compute' ceiling); ``config`` as a trial's
        (knobs, ``reference``, ``phase``), ``result`` as a trial's final result."""
        self._done.add(trial_id)
        self._write(self._row(SimpleNamespace(trial_id=trial_id, config=config), result))

    def recorded(self, trial_id: str) -> bool:
        """Whether the trial's row is written (or could not be: ``failed``)."""
        return trial_id in self._done

    def on_trial_complete(self, iteration, trials, trial, **info):
        if trial.trial_id in self._done:
            return
        self._done.add(trial.trial_id)
        result = dict(trial.last_result or {})
        if not result:
            result = {
                "status": Status.ERROR.value,
                "error": "the trial ended without reporting a result",
            }
        elif result.get("status") == Status.RUNNING:
            result["status"] = Status.PRUNED.value  # stopped by the scheduler between windows
        _stamp(trial, result)
        self._write(self._row(trial, result))

    def on_step_end(self, iteration, trials, **info):
        """Stop the experiment when a row could not be written: raised here, outside the
        trial callbacks, the error leaves ``Tuner.fit`` (Ray Tune stops the trials first)."""
        if self.failed is not None:
            raise self.failed

    def on_step_begin(self, iteration, trials, **info):
        """End a trial still running past its deadline (inside a step longer than the grace,
        such as a long compile, so it cannot stop itself at a step boundary) at ``kill_at``:
        its process is killed, and ``on_trial_error`` records it ``timeout``. Ray Tune's own
        stop (``time_budget_s``) would wait up to 10 s more for such a process."""
        now = time.time()
        for trial in trials:
            deadline = _deadline(trial)
            actor = trial.temporary_state.ray_actor
            if (deadline is None or now < self.kill_at(trial, deadline) or actor is None
                    or trial.status != trial.RUNNING or trial.trial_id in self._overdue):
                continue
            import ray
            self._overdue.add(trial.trial_id)
            ray.kill(actor, no_restart=True)

    def kill_at(self, trial, deadline: float) -> float:
        """When a trial still running past its ``deadline`` (time.time()) is killed
        (``tuner.budget.kill_at_unix_s``, from its last report's ``step_time_ms_p95``)."""
        return kill_at_unix_s(deadline, self.plan.settings.deadline_unix_s,
                              (trial.last_result or {}).get("step_time_ms_p95"))

    def on_experiment_end(self, trials, **info):
        """Rows of the trials Ray Tune stopped at its time budget (``TuneConfig.time_budget_s``
        stops them without ``on_trial_complete``). Each is recorded ``timeout`` with what its
        last window's report carried, not lost. Trials stopped before their deadline (an
        interrupted run) are left to ``--resume``."""
        for trial in trials:
            deadline = _deadline(trial)
            started = getattr(getattr(trial, "run_metadata", None), "start_time", None)
            if (trial.trial_id in self._done or deadline is None or time.time() < deadline
                    or trial.status != trial.TERMINATED or started is None):
                continue  # recorded, no deadline, not past it, or never started
            self._write_timeout(trial)

    def _write_timeout(self, trial) -> None:
        """A ``timeout`` row from the trial's last report (set-up, compile and warm-up times
        and the windows it finished; none when it reported nothing)."""
        self._done.add(trial.trial_id)
        result = dict(trial.last_result or {})
        windows = int(result.get("windows") or 0) if result.get("status") == Status.RUNNING else 0
        if not windows:
            result = {k: v for k, v in result.items() if k not in leaderboard.MEASURED_COLUMNS}
        plural = "" if windows == 1 else "s"
        result.update(status=Status.TIMEOUT.value, error=(
            f"stopped by the time budget after {windows} window{plural}" if windows else
            "stopped by the time budget before its first window (set-up, compile or warm-up)"))
        result.setdefault("samples_per_sec", None)
        _stamp(trial, result)
        self._write(self._row(trial, result))

    def on_trial_error(self, iteration, trials, trial, **info):
        if trial.trial_id in self._done:
            return
        if trial.trial_id in self._overdue:  # killed past its deadline (on_step_begin)
            self._write_timeout(trial)
            return
        self._done.add(trial.trial_id)
        error = trial.get_error()
        text = str(error) if error else _error_file_text(trial)
        result = {k: v for k, v in (trial.last_result or {}).items()
                  if k not in leaderboard.MEASURED_COLUMNS}
        result.update(
            status=Status.ERROR.value,
            error=one_line(text) if text else "the trial process failed",
            traceback=text,
        )
        lost = node_lost_error(text, (trial.last_result or {}).get("node_id"),
                               known_dead=self.known_dead, wait_s=NODE_DEATH_WAIT_S)
        if lost is not None:
            result.update(status=Status.NODE_LOST.value, error=lost)
        _stamp(trial, result)
        self._write(self._row(trial, result))


__getattr__ = moved(__name__, {name: "tuner.budget" for name in (
    "OVERDUE_S", "STEP_GRACE", "STEP_GRACE_MAX_S")})
