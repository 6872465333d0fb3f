"""A whole run as one Ray Tune experiment: the search's searcher first, then the follow-up
phases (re-measurement, ceilings) batch after batch, each planned from the rows recorded before
it (``Staged``). The search itself is ``tuner.searcher``."""

from __future__ import annotations

import pickle
import time
from typing import Any, Callable, Sequence

from ray.tune.search import Searcher

__all__ = ["Staged"]


class Staged(Searcher):
    """A whole run as ONE Ray Tune experiment: the search's own searcher first, then the
    follow-up phases' configurations, batch after batch. Which configurations a follow-up
    measures depends on the rows before it (the re-measured winner's ceilings, a round more
    for a figure that cannot be true), so each batch is asked for (``next_batch``) only once
    every trial suggested before it is recorded (``recorded``: its leaderboard row written).
    One experiment keeps one trial process from the first trial to the last (Ray Tune reuses
    it, ``reuse_actors``), where an experiment per phase would start a new one each time
    (torch and the workload imported again).

    Args:
        next_batch: the next batch of whole trial configurations (knobs, ``reference``,
            ``phase``, ``tuner`` settings changes), or None when there is none; called in
            Ray Tune's loop. What it raises ends the experiment and is kept in ``error``.
        recorded: whether a trial id's row is written.
        search: the search's searcher (``ConstrainedSearch``), first; None: no search.
        search_trials: trials the search may start (None: until its searcher is finished).
        settings: trial settings changes (``TrialSettings`` fields) for the trial suggested
            now, whatever its phase, read from the rows recorded so far (the driver's: the
            steady-state tolerance this machine's noise calls for); merged into each
            configuration's ``"tuner"`` entries. None: none.
        deadline_unix_s: when the run's time is up (``time.time()``): no follow-up trial is
            started after it, queued or not (one started then measures nothing before the
            trial is stopped, and costs its start and stop). None: no deadline.
    """

    def __init__(self, next_batch: Callable[[], Sequence[dict] | None],
                 recorded: Callable[[str], bool], search: Searcher | None = None,
                 search_trials: int | None = None,
                 settings: Callable[[], dict] | None = None,
                 deadline_unix_s: float | None = None):
        super().__init__()
        self._deadline_unix_s = deadline_unix_s
        self._next_batch = next_batch
        self._recorded = recorded
        self._settings = settings
        self._search = search
        self._searching = search is not None
        self._search_left = search_trials
        self._search_ids: set[str] = set()
        self._unrecorded: set[str] = set()
        self._queue: list[dict] = []
        self._finished = False
        self.error: Exception | None = None
        """What ``next_batch`` raised (the driver raises it once the experiment has ended)."""

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        if self._search is not None:
            self._search.set_search_properties(metric, mode, config, **spec)
        return True

    def suggest(self, trial_id: str) -> dict | str | None:
        config = self._suggest(trial_id)
        if isinstance(config, dict):
            self._unrecorded.add(trial_id)
            if self._settings is not None:  # Ray Tune merges "tuner" into the experiment's
                config = {**config, "tuner": {**config.get("tuner", {}), **self._settings()}}
        return config

    def _suggest(self, trial_id: str) -> dict | str | None:
        if self._searching:
            config = (Searcher.FINISHED if self._search_left == 0
                      else self._search.suggest(trial_id))
            if config != Searcher.FINISHED:
                if isinstance(config, dict):
                    self._search_ids.add(trial_id)
                    if self._search_left is not None:
                        self._search_left -= 1
                return config
            self._searching = False  # the follow-ups next, once the search is recorded
        if self._deadline_unix_s is not None and time.time() >= self._deadline_unix_s:
            self._queue, self._finished = [], True  # the run's time is up: start nothing more
        if not self._queue:
            if self._finished:
                return Searcher.FINISHED
            self._unrecorded = {t for t in self._unrecorded if not self._recorded(t)}
            if self._unrecorded:
                return None  # the next batch is planned from these trials' rows
            try:
                self._queue = list(self._next_batch() or [])
            except Exception as exc:  # noqa: BLE001 -- kept for the driver to raise
                self.error = exc
            if not self._queue:
                self._finished = True
                return Searcher.FINISHED
        return self._queue.pop(0)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self._search_ids:
            self._search.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        """The search's trials teach its searcher; the follow-ups' configurations are fixed."""
        if trial_id in self._search_ids:
            self._search.on_trial_complete(trial_id, result=result, error=error)

    def save(self, checkpoint_path: str) -> None:
        """What Ray Tune checkpoints with its experiment: this searcher's state, the search's
        study with it, less the driver's callables (``__getstate__``); tuner itself resumes a
        run from its leaderboard."""
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__getstate__(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))

    def __getstate__(self) -> dict:
        # Ray Tune pickles the tune config (this searcher with it) into <results>/ray; the
        # callables are the driver's live state (a generator over its rows), never restored.
        return {**self.__dict__, "_next_batch": None, "_recorded": None, "_settings": None}
