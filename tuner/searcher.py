"""The constrained Optuna searcher Ray Tune drives.

* The workload's reference configurations (baseline first) are evaluated before anything the
  sampler proposes, so every run reports its speed-up over them.
* The sampler (``--sampler``): Gaussian-process Bayesian optimisation (Optuna's ``GPSampler``)
  by default, TPE or random search on request. On the reduced spaces of
  ``bench/search_quality.py`` the GP found configurations within 0.95 of the grid's best in
  fewer trials than TPE, which at a budget of 20% of the grid did no better than random search
  (docs/benchmarks.md).
* Memory is a constraint (``Trial.set_constraint``; <= 0 is feasible), so the sampler learns
  where configurations stop fitting instead of scoring them 0; Optuna ignores FAIL trials and
  would keep sampling there (shared/notes/ray-tune-facts.md section 1). A measured trial's value
  is its peak memory / the memory this run allows - 1 (the larger of device and host), so the
  GP's constraint model learns memory against the knobs from every trial, not only from
  failures; an out-of-memory trial counts 1.0 (how far over is unknown).
* Memory grows with the micro-batch: a trial out of memory at batch B means every batch >= B with
  the same memory-relevant knobs does not fit either (``KnownInfeasible``). Such a proposal is
  told to the sampler as infeasible without spending a trial on it.
* A configuration proposed again is answered from its measurement, not measured twice; when
  the sampler proposes only known configurations (it has converged, or the space is small),
  the trial goes to an unknown configuration drawn at random below the smallest batch that
  failed, or, when none turns up, to the best configuration, measured again.
* A resumed run's rows (and, with warm start, earlier runs' rows) seed the study; their
  constraint is worked out against this run's limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from tuner import leaderboard
from tuner.errors import TunerError
from tuner.knobs import HOST_MEMORY_KNOBS, NO_MEMORY_KNOBS, Knobs
from tuner.plan import Plan
from tuner.settings import SAMPLERS, MemoryLimit, device_limit_mb

OOM_VIOLATION = 1.0
"""Constraint value of an out-of-memory trial: over by an unknown amount."""

SAMPLER_ATTEMPTS = 3
"""Known configurations the sampler may propose in a row before a trial is drawn at random."""

RANDOM_ATTEMPTS = 32
"""Random draws looking for an unknown configuration (``KnownInfeasible.risky`` ones not taken)
before the best configuration is measured again instead."""



def _worst(plan: "Plan") -> float:
    """Objective value given to an infeasible trial; the sampler ranks those by violation."""
    return 0.0 if plan.mode == "max" else 1e12


def _params_key(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


@dataclass(frozen=True)
class MemoryLimits:
    """The memory a run's trials may use: ``max_memory`` (a fraction or a size, None: the whole
    device; text is parsed once, here) and the host limit in MiB (None: the machine's RAM)."""
    max_memory: MemoryLimit | None = None
    max_host_memory_mb: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_memory", MemoryLimit.coerce(self.max_memory))

    def device_mb(self, record: Mapping[str, Any]) -> float | None:
        """The device limit on the hardware ``record`` (a trial result or leaderboard row) ran
        on, in MB; None on CPU."""
        return device_limit_mb(self.max_memory, record.get("gpu_memory_mb"))

    def host_mb(self, record: Mapping[str, Any]) -> float | None:
        return self.max_host_memory_mb or record.get("host_memory_mb")

    def constraint(self, record: Mapping[str, Any]) -> float | None:
        """Constraint value of a finished trial (<= 0: fits) under these limits, or None when
        the record says nothing about them (an out-of-memory trial under a tighter limit than
        this run's; a trial stopped over a limit that this run's would have allowed).

        * measured (ok): peak / limit - 1, the larger of device and host (-1 < value; 0 when
          no peak was recorded);
        * over_limit: the same, from the peak it reached (positive under the same limits);
        * oom: ``OOM_VIOLATION`` when the memory that ran out had at most as much room then.
        """
        status = record.get("status")
        if status == "oom":
            memory = record.get("memory_exceeded") or "host"
            then = record.get("max_memory_mb" if memory == "device" else "max_host_memory_mb")
            now = self.device_mb(record) if memory == "device" else self.host_mb(record)
            if then is None:  # no limit then: the whole device (or machine) ran out
                then = record.get("gpu_memory_mb" if memory == "device" else "host_memory_mb")
            if now is not None and then is not None and now > then * 1.001:
                return None
            return OOM_VIOLATION
        fractions = [peak / limit - 1 for peak, limit in (
            (record.get("peak_device_memory_mb"), self.device_mb(record)),
            (record.get("peak_host_memory_mb"), self.host_mb(record))) if peak and limit]
        value = max(fractions, default=0.0)
        if status == "over_limit":
            return value if value > 0 else None
        return value


class KnownInfeasible:
    """Configurations known not to fit, from trials that did not: memory grows with the
    micro-batch, so a trial out of memory at batch B implies the same at every batch >= B whose
    memory-relevant knobs are equal. Device memory does not depend on the DataLoader's knobs
    (``HOST_MEMORY_KNOBS``); host memory does, and on the CPU device (whose memory is the host's)
    every knob counts. Knobs are compared as the sampler records them (Optuna params)."""

    def __init__(self) -> None:
        self._smallest: dict[tuple, int] = {}

    @staticmethod
    def _key(params: Mapping[str, Any], memory: str) -> tuple:
        ignored = {"batch_size", *NO_MEMORY_KNOBS}
        if memory == "device":
            ignored.update(HOST_MEMORY_KNOBS)
        return memory, _params_key({k: v for k, v in params.items() if k not in ignored})

    def add(self, params: Mapping[str, Any], memory: str | None) -> None:
        """Record that ``params`` ran out of ``memory`` ('device' or 'host'; None: unknown,
        recorded as host, where every knob counts)."""
        if "batch_size" not in params:
            return
        key = self._key(params, memory or "host")
        self._smallest[key] = min(self._smallest.get(key, math.inf), params["batch_size"])

    def implies(self, params: Mapping[str, Any]) -> bool:
        """True when a recorded failure means ``params`` cannot fit either."""
        if "batch_size" not in params:
            return False
        return any(self._smallest.get(self._key(params, memory), math.inf) <= params["batch_size"]
                   for memory in ("device", "host"))

    def risky(self, params: Mapping[str, Any]) -> bool:
        """True when ``params`` is implied not to fit, or its batch is at least the smallest
        that failed with any knobs: a random draw is not spent there."""
        return self.implies(params) or params.get("batch_size", 0) >= min(
            self._smallest.values(), default=math.inf)


def make_sampler(name: str, seed: int, references: int, trials: int):
    """The Optuna sampler behind ``--sampler``.

    Args:
        name: 'gp', 'tpe' or 'random'.
        seed: sampler seed.
        references: reference configurations enqueued before the sampler's own proposals;
            they count as start-up trials.
        trials: the run's trial budget.

    Raises:
        TunerError: an unknown name.
    """
    import optuna
    if name == "gp":
        # The references and one random configuration, then the GP (conditional knobs, such
        # as prefetch_factor that only exists with workers, are drawn at random: quietly).
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=references + 1,
                                         warn_independent_sampling=False)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed,
                                          n_startup_trials=min(10, max(3, trials // 3)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise TunerError(f"--sampler {name!r}: accepted values are {', '.join(SAMPLERS)}")


def make_searcher(plan: Plan, trials: int | None):
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    worst = _worst(plan)
    limits = MemoryLimits(plan.options.max_memory, plan.max_host_memory_mb)

    class ConstrainedOptunaSearch(OptunaSearch):
        """OptunaSearch that evaluates the reference configurations first, passes memory to
        the sampler as a constraint, and spends no trial on a configuration whose outcome is
        known: measured already (the sampler proposes its best point again when few trials
        are in), or implied not to fit by a failure (``KnownInfeasible``)."""

        def __init__(self, *args, references=(), fallback, **kwargs):
            super().__init__(*args, **kwargs)
            self._references = list(references)
            self._fallback = fallback
            self._measured: dict[tuple, tuple[float, float]] = {}
            self._infeasible = KnownInfeasible()
            self.answered = 0
            """Proposals answered without a trial (known outcome)."""

        def _known(self, params: Mapping[str, Any]) -> tuple[float, float] | None:
            known = self._measured.get(_params_key(params))
            if known is None and self._infeasible.implies(params):
                known = (worst, OOM_VIOLATION)
            return known

        def suggest(self, trial_id: str):
            if self._references and trial_id not in self._ot_trials:
                name, params, knobs = self._references.pop(0)
                self._ot_study.enqueue_trial(params)
                config = super().suggest(trial_id)
                if config is not None:
                    config.update(knobs.to_dict(), reference=name)
                return config
            sampler = self._ot_study.sampler
            try:
                for attempt in range(SAMPLER_ATTEMPTS + RANDOM_ATTEMPTS):
                    drawn = attempt >= SAMPLER_ATTEMPTS
                    if attempt == SAMPLER_ATTEMPTS:
                        # The sampler keeps proposing what is known (it has converged, or the
                        # space is small): spend the trial on a configuration drawn at random.
                        self._ot_study.sampler = self._fallback
                    config = super().suggest(trial_id)
                    if config is None:
                        return None
                    ot_trial = self._ot_trials[trial_id]
                    known = self._known(ot_trial.params)
                    if known is None and not (drawn and self._infeasible.risky(ot_trial.params)):
                        break
                    if drawn:  # a draw not taken: invisible to the sampler
                        self._ot_study.tell(ot_trial, state=optuna.trial.TrialState.FAIL)
                    else:      # the sampler's proposal: told its known outcome again
                        value, violation = known
                        ot_trial.set_constraint("memory", violation)
                        self._ot_study.tell(ot_trial, value)
                    del self._ot_trials[trial_id]
                    self.answered += 1
                else:
                    # Nothing new turned up: measure the best configuration again.
                    self._ot_study.enqueue_trial(self._best_params())
                    config = super().suggest(trial_id)
            finally:
                self._ot_study.sampler = sampler
            config["reference"] = None
            return config

        def _best_params(self) -> dict:
            """Parameters of the best feasible trial (Optuna's best_trial skips infeasible
            ones), or of the first reference when none is feasible yet."""
            try:
                return dict(self._ot_study.best_trial.params)
            except ValueError:
                return dict(self._ot_study.trials[0].params)

        def on_trial_result(self, trial_id: str, result: dict):
            if result.get(self.metric) is not None:
                super().on_trial_result(trial_id, result)

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
            status = (result or {}).get("status")
            ot_trial = self._ot_trials.get(trial_id)
            violation = limits.constraint(result) if status in ("ok", "oom", "over_limit") else None
            if ot_trial is not None and status in ("oom", "over_limit"):
                violation = OOM_VIOLATION if violation is None else violation
                result = {**result, self.metric: worst}
                ot_trial.set_constraint("memory", violation)
                self._measured[_params_key(ot_trial.params)] = (worst, violation)
                self._infeasible.add(ot_trial.params, result.get("memory_exceeded"))
            elif ot_trial is not None and status == "ok" and result.get(self.metric) is not None:
                ot_trial.set_constraint("memory", violation)
                self._measured[_params_key(ot_trial.params)] = (result[self.metric], violation)
            elif status != "ok":
                result, error = None, True
            super().on_trial_complete(trial_id, result=result, error=error)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seed = plan.options.seed + len(plan.prior_rows)  # a resumed run must not replay proposals
    sampler = make_sampler(plan.options.sampler, seed, len(plan.references), trials or 40)
    searcher = ConstrainedOptunaSearch(
        space=plan.device_space.sampler(), metric=plan.metric, mode=plan.mode, sampler=sampler,
        references=plan.reference_params, fallback=optuna.samplers.RandomSampler(seed=seed))
    _seed(searcher, plan, limits, worst)
    return searcher


def _seed(searcher, plan: Plan, limits: MemoryLimits, worst: float) -> None:
    """Add the rows of ``_seed_rows`` to the study as finished trials, their constraint worked
    out against this run's ``limits`` (a row that says nothing under them is left out)."""
    import optuna
    distributions = plan.device_space.distributions()
    for row, dedupe in _seed_rows(plan):
        try:
            params = plan.device_space.project(Knobs.from_dict(row, strict=False))
        except (TunerError, ValueError):
            continue  # measured in another space: not a point of this one
        violation = limits.constraint(row)
        if violation is None:
            continue
        infeasible = violation > 0
        value = worst if infeasible else row[plan.metric]
        if value is None:
            continue
        searcher._ot_study.add_trial(optuna.trial.create_trial(
            params=params, distributions={k: distributions[k] for k in params}, value=value,
            constraints={"memory": violation}))
        if infeasible and row["status"] != "ok":
            searcher._infeasible.add(params, row.get("memory_exceeded"))
        if dedupe:
            searcher._measured[_params_key(params)] = (value, violation)


def _seed_rows(plan: Plan) -> list[tuple[dict, bool]]:
    """Rows the search starts from, each with whether a proposal equal to it is answered from
    it instead of measured: the resumed run's own rows (always), and with --warm-start earlier
    rows of this workload, scale and hardware (unless --remeasure)."""
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
