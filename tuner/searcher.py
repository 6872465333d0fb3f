"""The constrained Optuna searcher Ray Tune drives (the run's phases after it are staged by
``tuner.staging``).

* The workload's reference configurations (baseline first) are evaluated before anything the
  sampler proposes, so every run reports its speed-up over them; then the machine's structured
  points (``SearchSpec.anchors``: the knee of the compute curve, the doubling answer, the
  knee with each compute switch on), each enqueued in the study as a searched trial, so the
  sampler starts from where the machine's limit is instead of from one random point.
* Screening (``SearchSpec.screen_windows``): the structured points and the sampler's
  proposals are measured over a few windows (one by default), the references over the full
  windows (every speed-up is read against them); the best few
  then get the full measurement in the interleaved re-measurement
  (``tuner.followups.remeasure_configs``): two rungs of successive halving, the second rung's
  promotion interleaved with the references so that its figures compare. A screened CUDA
  search decides ``cudnn_benchmark`` there, not here (``tuner.plan.Plan.cudnn_at_finalists``:
  the space holds it off).
* The sampler (``--sampler``): Gaussian-process Bayesian optimisation (Optuna's ``GPSampler``)
  by default, TPE or random search on request. On the reduced spaces of
  ``bench/search_quality.py`` the GP found configurations within 0.95 of the grid's best in
  fewer trials than TPE, which at a budget of 20% of the grid did no better than random search
  (docs/benchmarks.md, "CPU: search quality").
* Memory is a constraint (``Trial.set_constraint``; <= 0 is feasible), so the sampler learns
  where configurations stop fitting instead of scoring them 0; Optuna ignores FAIL trials and
  would keep sampling there (Optuna's samplers skip FAIL trials). A measured trial's value
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
* A trial stopped between windows (``pruned`` by ``tuner.pruning.EarlyStopping``, or
  ``timeout`` at the time budget) is told as COMPLETE with the median of the windows it ran:
  a shorter but real measurement, which the GP (it learns from COMPLETE trials only) and TPE
  both use. One stopped before any window is told FAIL (nothing measured).
* The time budget: the references run to the run's deadline (``SearchSpec.deadline_unix_s``);
  once a trial has measured, the search ends ``SearchSpec.followup_share`` of the time left
  then before it (``ConstrainedSearch.deadline_unix_s``): the follow-ups need a winner, and
  the fixed start-up (plan, Ray, probe, the trial process) is spent by then, not assumed. No
  trial is started past its deadline, nor one whose first window would end past it (its
  set-up and first step, paid once, its warm-up steps and one window scaled to the batch, from
  the finished trial nearest in batch size: ``tuner.costs.TrialCost.first_window_s``). Each
  trial's configuration carries its price (``priced_s``), for its row.
* A resumed run's rows (and, with warm start, earlier runs' rows) seed the study; their
  constraint is worked out against this run's limits.
"""

from __future__ import annotations

import math
import pickle
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ray.tune.search import Searcher

from tuner._deprecated import moved
from tuner.budget import split_deadline_unix_s
from tuner.costs import CostModel, TrialCost, TrialShape
from tuner.errors import TunerError
from tuner.history import TrialRow
from tuner.knobs import COMPUTE_SWITCHES, HOST_MEMORY_KNOBS, NO_MEMORY_KNOBS, Knobs
from tuner.screening import (
    pipeline_noise,
    reference_settings,
    screen_window_s,
    screening_settings,
)
from tuner.settings import SAMPLERS, MemoryLimit, device_limit_mb
from tuner.space import Space
from tuner.status import Status

OOM_VIOLATION = 1.0
"""Constraint value of an out-of-memory trial: over by an unknown amount."""

PARTIAL_OR_OK = (Status.OK, Status.PRUNED, Status.TIMEOUT, Status.RUNNING)
"""Statuses of a trial's last result that carry its (possibly partial) measurement."""

SAMPLER_ATTEMPTS = 3
"""Known configurations the sampler may propose in a row before a trial is drawn at random."""

RANDOM_ATTEMPTS = 32
"""Random draws looking for an unknown configuration (``KnownInfeasible.risky`` ones not taken)
before the best configuration is measured again instead."""


@contextmanager
def sampler_threads(sampler: str):
    """Torch on one thread while the 'gp' sampler proposes (Optuna's ``GPSampler`` fits and
    optimises with torch), put back afterwards: its tensors hold a few dozen trials, and on 2
    busy cores 25 proposals took 28 s on one thread, 71 s on two (optuna 5.0, load 10-18)."""
    if sampler != "gp":
        yield
        return
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


HELD_COMPUTE_KNOBS = (*COMPUTE_SWITCHES, "amp", "compile")
"""Knobs that change how the model computes: a row measured with one of them at another value
than the space holds it is another configuration than the point it would project to."""


def computes_otherwise(space: Space, knobs: Knobs) -> bool:
    """Whether ``knobs`` has a ``HELD_COMPUTE_KNOBS`` knob at another value than ``space``
    holds it constant (``Space.project`` reads the sampled knobs only): an earlier row measured
    with ``cudnn_benchmark`` on, say, is not the rate of a screen that holds it off
    (``tuner.plan.Plan.cudnn_at_finalists``), nor a compiled row that of an eager point."""
    values = knobs.to_dict()
    return any(values[name] != value for name, value in space.constants.items()
               if name in HELD_COMPUTE_KNOBS)


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
        on, in MiB; None on CPU."""
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
        if status == Status.OOM:
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
        if status == Status.OVER_LIMIT:
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


@dataclass(frozen=True, kw_only=True)
class SearchSpec:
    """What the searcher needs from a run, and nothing more (``Plan.search_spec`` builds it)."""

    space: Space
    """The space sampled (the run's device space)."""
    metric: str
    """Leaderboard column to optimise ('samples_per_sec' or 'time_to_train_s')."""
    mode: str
    """'max' or 'min'."""
    sampler: str = "gp"
    """'gp', 'tpe' or 'random' (``make_sampler``)."""
    seed: int = 0
    """Seed of the sampler and of the random fallback (a resumed run passes a new one: it must
    not replay the proposals it already ran)."""
    trials: int | None = None
    """The run's trial budget (None: none; the TPE start-up is sized as for 40)."""
    references: tuple[tuple[str, dict, Knobs], ...] = ()
    """References still to measure, first: (name, parameters in ``space``, knobs as run)."""
    reference_count: int = 0
    """All of the workload's references (the GP's start-up counts them, measured or not)."""
    limits: MemoryLimits = MemoryLimits()
    seed_rows: tuple[tuple[dict, bool], ...] = ()
    """Rows the study starts from (a resumed run's, with warm start earlier runs'), each with
    whether a proposal equal to it is answered from it instead of measured again."""
    deadline_unix_s: float | None = None
    """When the run's time is up (``time.time()``): no trial is started after it, and the
    references run to it (None: no deadline)."""
    followup_share: float = 0.0
    """Share of the time left kept for the follow-ups once a trial has measured: the search's
    trials end that much before ``deadline_unix_s`` (``ConstrainedSearch.deadline_unix_s``);
    0: they run to it."""
    window_s: float = 0.0
    """Seconds of one measurement window (``TrialSettings.window_s``), for costing a proposal
    against the deadline."""
    anchors: tuple[tuple[str, dict, Knobs], ...] = ()
    """The machine's structured points, measured after the references and before the
    sampler's proposals: (name, parameters in ``space``, knobs as run); see
    ``tuner.search_policy.anchor_points``."""
    screen_windows: int = 0
    """Windows of a screening trial (the structured points and the sampler's proposals); 0:
    every trial measures the run's full windows."""
    screen_window_s: float = 0.0
    """The longest a screening trial's window is, seconds (each is as long as its step time
    and its pipeline's noise need: ``tuner.screening.screen_window_s``); 0 without
    screening."""
    settings: Any = None
    """The run's ``TrialSettings``, which a proposal's price reads with its own changes over
    them (None: one window of ``window_s``, no steady-state probes)."""
    reused: bool = True
    """Whether trials run in processes earlier trials ran in (``Plan.reuses_trial_processes``):
    cuDNN's autotuning at a shape is then paid once (``tuner.costs.CostModel``)."""

    @property
    def worst(self) -> float:
        """Objective value given to an infeasible trial; the sampler ranks those by violation."""
        return 0.0 if self.mode == "max" else 1e12


class ConstrainedSearch(Searcher):
    """The tuner's Ray Tune searcher: an ``optuna.Study`` driven through ask/tell (see the
    module docstring for what it adds to a plain Optuna search).

    Public state, for benchmarks and tests: ``study`` (the Optuna study), ``infeasible``
    (``KnownInfeasible``), ``measured`` (parameters -> (value, constraint) answered without a
    trial), ``answered`` (proposals answered that way) and ``params(trial_id)``.
    """

    def __init__(self, spec: SearchSpec):
        import optuna
        super().__init__(metric=spec.metric, mode=spec.mode)
        self.spec = spec
        self.study = optuna.create_study(
            direction="maximize" if spec.mode == "max" else "minimize",
            sampler=make_sampler(spec.sampler, spec.seed, spec.reference_count,
                                 spec.trials or 40))
        self._fallback = optuna.samplers.RandomSampler(seed=spec.seed)
        self._define_by_run = spec.space.sampler()
        self._references = list(spec.references)
        self._anchors = list(spec.anchors)
        self._live: dict[str, Any] = {}
        """Ray trial id -> its running Optuna trial."""
        self._params: dict[str, dict] = {}
        self.measured: dict[tuple, tuple[float, float]] = {}
        self.infeasible = KnownInfeasible()
        self.answered = 0
        """Proposals answered without a trial (known outcome)."""
        self._configs: dict[str, dict] = {}
        """Ray trial id -> its configuration (knobs and settings changes)."""
        self.costs = CostModel(reused=spec.reused)
        """The prices of proposals (``price``), read from the finished trials' results."""
        self._finished: list[dict] = []
        """Finished trials' results with their configurations (``pipeline_noise`` reads)."""
        self._out_of_time = False
        """A proposal's first window would have ended past the deadline: nothing more starts."""
        self._split_unix_s: float | None = None
        """The search's deadline, fixed at the first measurement (``deadline_unix_s``)."""
        self.skipped_references: list[str] = []
        """References not started: their first window would have ended past the run's
        deadline."""
        self._seed(spec.seed_rows)

    def params(self, trial_id: str) -> dict:
        """The Optuna parameters suggested for a Ray trial (knobs the space samples)."""
        return dict(self._params[trial_id])

    def deadline_unix_s(self) -> float | None:
        """When the search's own trials must end (``time.time()``; None: no deadline): the
        run's (``SearchSpec.deadline_unix_s``) until a trial has measured (there is nothing to
        follow up yet); from the first measurement on, that less ``followup_share`` of the
        time left then (``tuner.budget.split_deadline_unix_s``), fixed there."""
        deadline = self.spec.deadline_unix_s
        if deadline is None or self.spec.followup_share <= 0:
            return deadline
        if self._split_unix_s is None and self._has_measured():
            self._split_unix_s = split_deadline_unix_s(time.time(), deadline,
                                                       self.spec.followup_share)
        return deadline if self._split_unix_s is None else self._split_unix_s

    def _has_measured(self) -> bool:
        """Whether a trial (or a seeded row) measured a feasible configuration."""
        return any(violation <= 0 and value != self.spec.worst
                   for value, violation in self.measured.values())

    def suggest(self, trial_id: str) -> dict | str | None:
        if self._out_of_time:
            return Searcher.FINISHED
        deadline = self.spec.deadline_unix_s
        while self._references and not self._first_window_fits(
                self._references[0][2], deadline_unix_s=deadline):
            # A reference runs to the run's deadline, if it can measure one window by then;
            # a smaller batch searched after it may still.
            self.skipped_references.append(self._references.pop(0)[0])
        if self._references:
            name, params, knobs = self._references.pop(0)
            self.study.enqueue_trial(params)
            trial = self.study.ask()
            config = {**self._config(trial), **knobs.to_dict(), "reference": name}
            changes = (reference_settings(self.spec.settings.windows)  # rounds re-measure it
                       if self.spec.screen_windows and self.spec.settings is not None else {})
            config.update({"tuner": changes} if changes else {})
        elif self._next_anchor() is not None:
            name, params, knobs = self._anchors.pop(0)
            self.study.enqueue_trial(params)
            trial = self.study.ask()
            config = {**self._config(trial), **knobs.to_dict(), "reference": None,
                      "anchor": name}
            self._screened(config)  # a candidate as any other: screened, then finalist
        else:
            deadline = self.deadline_unix_s()
            if deadline is not None and time.time() >= deadline:
                return Searcher.FINISHED  # the search's time is up: start nothing more
            with sampler_threads(self.spec.sampler):
                trial, config = self._propose()
            config["reference"] = None
            self._screened(config)  # the finalists are measured in full later
            if not self._first_window_fits(Knobs.from_dict(config, strict=False),
                                           config.get("tuner"), deadline):
                from optuna.trial import TrialState
                self.study.tell(trial, state=TrialState.FAIL)
                self._out_of_time = True
                return Searcher.FINISHED  # it would end before its first window: measure nothing
        config["priced_s"] = self.price(Knobs.from_dict(config, strict=False),
                                        config.get("tuner")).trial_s
        if deadline is not None:  # Ray Tune merges it into the trial's settings
            config["tuner"] = {**config.get("tuner", {}), "deadline_unix_s": deadline}
        self._live[trial_id] = trial
        self._configs[trial_id] = config
        self._params[trial_id] = dict(trial.params)
        return config

    def _screened(self, config: dict) -> None:
        """With screening (``SearchSpec.screen_windows``), ``config``'s trial screens over
        windows as long as its step time and its input pipeline's noise need
        (``tuner.screening.screen_window_s``), ``screen_window_s`` at most."""
        if not self.spec.screen_windows:
            return
        knobs = Knobs.from_dict(config, strict=False)
        noise = pipeline_noise(self._finished, knobs.data_path, self.spec.window_s)
        window_s = screen_window_s(self.costs.step_s(knobs), noise, self.spec.window_s,
                                   self.spec.screen_window_s)
        config["tuner"] = screening_settings(
            self.spec.screen_windows, window_s, longest_s=self.spec.screen_window_s,
            warmup_steps=getattr(self.spec.settings, "warmup_steps", None))

    def _next_anchor(self) -> tuple[str, dict, Knobs] | None:
        """The next anchor still to measure (one whose parameters the study has measured, or
        knows not to fit, is dropped), or None."""
        while self._anchors and self._known(self._anchors[0][1]) is not None:
            self._anchors.pop(0)
        return self._anchors[0] if self._anchors else None

    def price(self, knobs: Knobs, changes: Mapping[str, Any] | None = None) -> TrialCost:
        """The price of a trial of ``knobs`` with the settings ``changes`` it runs with
        (``tuner.costs.CostModel.price`` over the trials finished so far): the finished trial
        nearest in batch size gives its one-off set-up and first step (not scaled: worker
        start, cuDNN autotuning, a cache fill are paid once), its warm-up steps and step time,
        scaled up to a larger batch (samples/sec held), and a compiling proposal adds the
        longest compile measured in its mode (none measured yet: the trial's own set-up
        check, ``tuner.budget.compile_refusal``, refuses a compile that cannot finish). A
        compile of 80-100 s (the ddpm U-Net on an H100) so neither ends the search for an
        uncompiled proposal near its batch nor is forgotten for a compiled one. Without a
        finished trial to go by: its windows."""
        base = self.spec.settings
        shape = (TrialShape.of(base, changes) if base is not None
                 else TrialShape.of(TrialShape(1, self.spec.window_s), changes))
        return self.costs.price(knobs, shape)

    def _first_window_fits(self, knobs: Knobs, changes: Mapping[str, Any] | None = None,
                           deadline_unix_s: float | None = None) -> bool:
        """Whether a trial of ``knobs`` with the settings ``changes`` started now ends its
        first window (``TrialCost.first_window_s`` of ``price``) before ``deadline_unix_s``
        (None: the search's, ``deadline_unix_s()``). True without a deadline."""
        deadline = self.deadline_unix_s() if deadline_unix_s is None else deadline_unix_s
        if deadline is None:
            return True
        return time.time() + self.price(knobs, changes).first_window_s <= deadline

    def _config(self, trial) -> dict:
        """The trial's knob values: the sampled parameters and the space's constants."""
        constants = self._define_by_run(trial)
        return {**trial.params, **constants}

    def _propose(self) -> tuple[Any, dict]:
        """The sampler's proposal, unless its outcome is known; then (``SAMPLER_ATTEMPTS``
        times) it is told that outcome and asked again, and after that configurations are drawn
        at random (a draw is not told); when nothing new turns up, the best is measured again."""
        import optuna
        sampler = self.study.sampler
        try:
            for attempt in range(SAMPLER_ATTEMPTS + RANDOM_ATTEMPTS):
                drawn = attempt >= SAMPLER_ATTEMPTS
                if attempt == SAMPLER_ATTEMPTS:
                    # The sampler keeps proposing what is known (it has converged, or the
                    # space is small): spend the trial on a configuration drawn at random.
                    self.study.sampler = self._fallback
                trial = self.study.ask()
                config = self._config(trial)
                known = self._known(trial.params)
                if known is None and not (drawn and self.infeasible.risky(trial.params)):
                    return trial, config
                if drawn:  # a draw not taken: invisible to the sampler
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:      # the sampler's proposal: told its known outcome again
                    value, violation = known
                    trial.set_constraint("memory", violation)
                    self.study.tell(trial, value)
                self.answered += 1
            # Nothing new turned up: measure the best configuration again.
            self.study.enqueue_trial(self._best_params())
            trial = self.study.ask()
            return trial, self._config(trial)
        finally:
            self.study.sampler = sampler

    def _known(self, params: Mapping[str, Any]) -> tuple[float, float] | None:
        known = self.measured.get(_params_key(params))
        if known is None and self.infeasible.implies(params):
            known = (self.spec.worst, OOM_VIOLATION)
        return known

    def _best_params(self) -> dict:
        """Parameters of the best feasible trial (Optuna's best_trial skips infeasible ones),
        or of the first trial when none is feasible yet."""
        try:
            return dict(self.study.best_trial.params)
        except ValueError:
            return dict(self.study.trials[0].params)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """A window's interim result, reported to the trial (for pruning)."""
        trial = self._live.get(trial_id)
        if trial is not None and result.get(self.metric) is not None:
            trial.report(result[self.metric], result.get("training_iteration", 0))

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        """Tell the study how the trial ended: measured (value and memory constraint), out of
        memory or over a limit (infeasible: the worst value and the violation), or failed."""
        import optuna
        trial = self._live.pop(trial_id, None)
        if trial is None:  # completed already, or not ours
            return
        result = result or {}
        config = self._configs.pop(trial_id, None)
        if config is not None and result.get("step_time_ms_p50"):
            self.costs.add({**config, **result, "phase": "search"})
            self._finished.append({**config, **result})
        status, value = result.get("status"), result.get(self.metric)
        key = _params_key(trial.params)
        if status in (Status.OOM, Status.OVER_LIMIT):
            violation = self.spec.limits.constraint(result)
            violation = OOM_VIOLATION if violation is None else violation
            trial.set_constraint("memory", violation)
            self.measured[key] = (self.spec.worst, violation)
            self.infeasible.add(trial.params, result.get("memory_exceeded"))
            self.study.tell(trial, self.spec.worst)
        elif status in PARTIAL_OR_OK and value is not None and (status == Status.OK or value > 0):
            # ok; or stopped between windows (pruned: the last window's report, still
            # 'running'; timeout): told COMPLETE with the median of its windows, a real if
            # shorter measurement. GPSampler learns from COMPLETE trials only (PRUNED ones
            # are invisible to it), so telling PRUNED would leave the slow region unlearnt.
            violation = self.spec.limits.constraint({**result, "status": Status.OK})
            trial.set_constraint("memory", violation)
            self.measured[key] = (value, violation)
            self.study.tell(trial, value)
            self.deadline_unix_s()  # the first measurement splits the budget, here
        else:  # failed (or an ok trial without its metric): nothing for the sampler to learn
            state = (optuna.trial.TrialState.PRUNED if status == Status.OK and not error
                     else optuna.trial.TrialState.FAIL)
            self.study.tell(trial, state=state)

    def _seed(self, rows: Sequence[tuple[dict, bool]]) -> None:
        """Add earlier rows to the study as finished trials, their constraint worked out against
        this run's limits (a row that says nothing under them, or was measured in another
        space, is left out)."""
        import optuna
        distributions = self.spec.space.distributions()
        for row, dedupe in rows:
            try:
                knobs = Knobs.from_dict(row, strict=False)
                params = self.spec.space.project(knobs)
            except (TunerError, ValueError):
                continue  # measured in another space: not a point of this one
            if computes_otherwise(self.spec.space, knobs):
                continue  # e.g. cudnn_benchmark on where this run screens with it off
            violation = self.spec.limits.constraint(row)
            if violation is None:
                continue
            infeasible, typed = violation > 0, TrialRow.of(row)
            value = self.spec.worst if infeasible else typed.figure(self.spec.metric)
            if value is None:
                continue
            self.study.add_trial(optuna.trial.create_trial(
                params=params, distributions={k: distributions[k] for k in params}, value=value,
                constraints={"memory": violation}))
            if infeasible and typed.status != Status.OK:
                self.infeasible.add(params, typed.memory_exceeded)
            if dedupe:
                self.measured[_params_key(params)] = (value, violation)

    def save(self, checkpoint_path: str) -> None:
        """Ray Tune checkpoints a searcher with its experiment (tuner resumes from its own
        leaderboard instead, but a searcher that cannot save makes Tune warn)."""
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__dict__, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))


def make_searcher(spec: SearchSpec) -> ConstrainedSearch:
    """The run's searcher (Optuna's logging quietened to warnings)."""
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return ConstrainedSearch(spec)


__getattr__ = moved(__name__, {"Staged": "tuner.staging", "Timing": "tuner.costs"})
