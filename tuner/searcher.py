"""The constrained Optuna searcher Ray Tune drives.

* The workload's reference configurations (baseline first) are evaluated before anything the
  sampler proposes, so every run reports its speed-up over them.
* A trial that ran out of memory (or went over a limit) reaches Optuna as a COMPLETE trial with
  a positive constraint violation (``Trial.set_constraint``), so TPE learns to avoid that
  region; Optuna ignores FAIL trials and would keep sampling there
  (shared/notes/ray-tune-facts.md section 1). Other errors reach it as FAIL.
* A configuration TPE proposes again is answered from its measurement, not measured twice.
* A resumed run's rows (and, with warm start, earlier runs' rows) seed the study.
"""

from __future__ import annotations

from tuner import leaderboard
from tuner.errors import TunerError
from tuner.knobs import Knobs
from tuner.plan import Plan

def _worst(plan: "Plan") -> float:
    """Objective value given to an infeasible trial; TPE ranks those by violation instead."""
    return 0.0 if plan.mode == "max" else 1e12


def _params_key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def make_searcher(plan: Plan, trials: int | None):
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    worst = _worst(plan)

    class ConstrainedOptunaSearch(OptunaSearch):
        """OptunaSearch that evaluates the reference configurations first, passes memory
        failures to TPE as constraint violations, and does not measure a configuration twice
        (TPE with few observations re-proposes its best point: that point's measured value is
        told again instead)."""

        def __init__(self, *args, references=(), **kwargs):
            super().__init__(*args, **kwargs)
            self._references = list(references)
            self._measured: dict[tuple, tuple[float, float]] = {}

        def suggest(self, trial_id: str):
            if self._references and trial_id not in self._ot_trials:
                name, params, knobs = self._references.pop(0)
                self._ot_study.enqueue_trial(params)
                config = super().suggest(trial_id)
                if config is not None:
                    config.update(knobs.to_dict(), reference=name)
                return config
            for attempt in range(8):
                config = super().suggest(trial_id)
                if config is None:
                    return None
                ot_trial = self._ot_trials[trial_id]
                known = self._measured.get(_params_key(ot_trial.params))
                if known is None or attempt == 7:
                    break  # new, or 8 known proposals in a row: measure this one again
                value, violation = known
                ot_trial.set_constraint("memory", violation)
                self._ot_study.tell(ot_trial, value)
                del self._ot_trials[trial_id]
            config["reference"] = None
            return config

        def on_trial_result(self, trial_id: str, result: dict):
            if result.get(self.metric) is not None:
                super().on_trial_result(trial_id, result)

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
            status = (result or {}).get("status")
            ot_trial = self._ot_trials.get(trial_id)
            if ot_trial is not None and status in ("oom", "over_limit"):
                result = {**result, self.metric: worst}
                ot_trial.set_constraint("memory", 1.0)  # > 0: infeasible
                self._measured[_params_key(ot_trial.params)] = (worst, 1.0)
            elif ot_trial is not None and status == "ok" and result.get(self.metric) is not None:
                ot_trial.set_constraint("memory", 0.0)
                self._measured[_params_key(ot_trial.params)] = (result[self.metric], 0.0)
            elif status != "ok":
                result, error = None, True
            super().on_trial_complete(trial_id, result=result, error=error)

    n_trials = trials or 40
    seeds = _seed_rows(plan)
    sampler = optuna.samplers.TPESampler(  # a resumed run must not replay the first proposals
        seed=plan.options.seed + len(plan.prior_rows), n_startup_trials=min(10, max(3, n_trials // 3)))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    searcher = ConstrainedOptunaSearch(
        space=plan.device_space.sampler(), metric=plan.metric, mode=plan.mode, sampler=sampler,
        references=plan.reference_params)
    distributions = plan.device_space.distributions()
    for row, dedupe in seeds:
        try:
            params = plan.device_space.project(Knobs.from_dict(row, strict=False))
        except (TunerError, ValueError):
            continue  # measured in another space: not a point of this one
        infeasible = row["status"] in ("oom", "over_limit")
        value = worst if infeasible else row[plan.metric]
        if value is None:
            continue
        searcher._ot_study.add_trial(optuna.trial.create_trial(
            params=params, distributions={k: distributions[k] for k in params}, value=value,
            constraints={"memory": 1.0 if infeasible else 0.0}))
        if dedupe:
            searcher._measured[_params_key(params)] = (value, 1.0 if infeasible else 0.0)
    return searcher


def _seed_rows(plan: Plan) -> list[tuple[dict, bool]]:
    """Rows the search starts from, each with whether a TPE proposal equal to it is answered
    from it instead of measured: the resumed run's own rows (always), and with --warm-start
    earlier rows of this workload, scale and hardware (unless --remeasure)."""
    usable = ("ok", "oom", "over_limit")
    seeds = [(r, True) for r in plan.prior_search_rows if r["status"] in usable]
    if plan.options.warm_start:
        table = leaderboard.read(plan.options.results, workload=plan.workload.name,
                                 hardware_key=plan.hardware_key)
        for r in table.to_pylist():
            if (r["run_id"] != plan.run_id and r["scale"] == plan.scale and r["status"] in usable
                    and (r["phase"] or "search") in ("search", "remeasure")):
                seeds.append((r, not plan.options.remeasure))
    return seeds


