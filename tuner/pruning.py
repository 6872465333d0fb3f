"""Early stopping of search trials that are clearly slower than the best so far: a Ray Tune
trial scheduler that decides after each measurement window (``--no-early-stop`` turns it off).

**The rule.** After window k of a searched trial (k >= 1 windows finished; never a reference,
never after its last window, which would save nothing), its objective so far m (the median of
its windows, what each window's report carries) is compared with the best value b any trial of
the search has reported. The comparison is a ratio, in logarithms. The trial stops, and its
row is ``pruned`` with the windows it measured, when it is slower than the best by more than
the noise:

    log(b / m) > margin      (for a 'min' objective such as time_to_train_s: log(m / b))
    margin = max(MIN_MARGIN, Z * DRIFT * s)

* ``s`` is the window-to-window noise measured in this run: the pooled standard deviation of
  log(window samples/sec) within trials (each trial's windows about their own mean), over every
  window reported so far (for small values, the coefficient of variation of one window). The
  references run first, so their windows give it before any searched trial can be stopped;
  until there are ``MIN_NOISE_DOF`` degrees of freedom nothing is stopped. Trials whose
  windows hold one or two whole steps (``windows_long``: a large batch on a CPU) are left out
  of it while other trials give it: their spread is that of single steps, with any transient
  kept (such windows drop none), not the noise of a window of many steps: one such trial
  can double the pooled noise of a dozen others, and the margin with it.
* ``DRIFT`` = 3: one configuration measured again in another trial moves more than its own
  windows scatter: ``bench/repeatability.py`` measures the CV across repeats at about three
  times the median within-trial CV (figures in docs/defaults.md).
* ``Z`` = 2: two between-trial standard deviations. That alone would stop a configuration as
  fast as the best with a chance of about 2 % (one sided, normal noise) at one decision if
  the best were known exactly; it is measured as noisily (the chance is then ~8 %), and it is
  the highest of the trials so far, which the noise lifts (with 8 equally fast trials, by ~1.4
  deviations on average). Where the margin is this term and not the floor (a noisy machine), a
  configuration within the noise of the best is therefore stopped now and then. What that
  costs is bounded by the noise: a configuration stopped so is not faster
  than the best by more than the noise, and the run's answer comes from re-measured rounds.
* ``MIN_MARGIN`` = 0.10 (a ratio of 0.905): above the median pass-to-pass spread of the
  search-quality benchmark on a quiet machine (docs/defaults.md), for noise that a run's
  windows do not show yet.

At a window CV of ~1 % (a quiet GPU) the margin is the 10 % floor; at ~5 % it is ~30 %.

**Steps of seconds.** A trial whose steps take half a window or more (a large batch on a CPU)
measures whole steps, each window one or a few of them: it reports its last warm-up step before
any window (``window`` -1), and stops there when that step is behind the best by more than
``WARM_UP_FACTOR`` margins. That figure is never a best and adds nothing to the noise.

**Windows still settling.** When the steady state is judged from the windows
(``tuner.windows``), the first window may be a transient the trial drops once all
its windows are in (workers starting: slower; a prefetched queue draining: faster), and the
median before then holds it. Until then a trial is never a best (the best comes from whole
trials), and it is judged on one window: after its first, that window against
``WARM_UP_FACTOR`` margins, as a warm-up step; from its second on (samples/sec objective), its
fastest window so far against one margin. A slow transient is then outweighed by the window
after it and a fast one only makes the trial look better, so neither stops a trial that is
not behind; only a transient longer than two windows could. (Two margins for every settling
window would let trials well behind the best run to their end with three windows, the
default.) A dropped window leaves the noise.

**Why not ASHA or the median-stopping rule as they are.** Both cut at a quantile of the other
trials (ASHA's rungs keep the top 1/reduction_factor; the median rule stops what is below the
median): when several good configurations lie within the noise of each other, they stop some of
them, and neither knows the noise. The decision here is the same kind (a Ray Tune
``TrialScheduler`` returning STOP on a window's result, the window index its time attribute),
measured against the best and the noise instead of a quantile.
"""

from __future__ import annotations

import math
from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from tuner.status import Phase, Status, phase_of

Z = 2.0
"""Standard deviations of the between-trial noise a trial must be below the best by."""

DRIFT = 3.0
"""Between-trial noise over within-trial (window-to-window) noise (bench/repeatability.py)."""

MIN_MARGIN = 0.10
"""The smallest margin, in log ratio (a trial at 0.905 of the best or slower is beyond it)."""

WARM_UP_FACTOR = 2.0
"""A trial whose steps take half a window or more reports its last warm-up step before any
window (``tuner.trial.harness``: on the 2-core CPU, ddpm at batch 256 in bf16 took 33-67 s a step,
198 s a trial); judged on that one step, it stops when it is behind the best by more than this
many margins (one step is noisier than a window's median)."""

MIN_NOISE_DOF = 2
"""Degrees of freedom (windows less one per trial) the noise estimate needs before any stop."""


class EarlyStopping(FIFOScheduler):
    """Stops a search trial after a window when it is clearly slower than the best so far (the
    module docstring gives the rule and where its constants come from). Trials run in the
    order the searcher suggests them (FIFO); a trial whose config names a ``reference`` is
    never stopped, nor a follow-up trial (its config's ``phase`` is not the search's: the run's
    one experiment holds them too), whose windows count neither for the best nor the noise.

    Args:
        metric: the objective column each window reports ('samples_per_sec',
            'time_to_train_s').
        mode: 'max' or 'min'.
        windows: windows per trial (``TrialSettings.windows``): nothing is saved by stopping
            after the last.

    Public state, for tests and benchmarks: ``stopped`` (trial ids stopped, in order) and
    ``noise()`` (the window-to-window noise ``s`` now, or None).
    """

    def __init__(self, metric: str, mode: str, windows: int):
        super().__init__()
        self._metric = metric
        self._mode = mode
        self.windows = windows
        self._best: float | None = None
        self._logs: dict[str, list[float]] = {}
        """Trial id -> log of each window's samples/sec."""
        self._dropped: dict[str, int] = {}
        """Trial id -> its first windows dropped as transients (``tuner.windows.windows_stand``)."""
        self._long: set[str] = set()
        """Trials whose windows hold one or two whole steps (``windows_long``): not noise."""
        self.stopped: list[str] = []

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        """Ray Tune passes TuneConfig's metric and mode (none here): this scheduler keeps its
        own."""
        return True

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if phase_of(trial.config) != Phase.SEARCH:
            return TrialScheduler.CONTINUE  # a follow-up trial: measured whole, not judged
        # A screening trial plans fewer windows than the run's (its config's "tuner" settings)
        planned = (trial.config.get("tuner") or {}).get("windows")
        stop = self.decide(trial.trial_id, bool(trial.config.get("reference")), result,
                           windows=planned)
        if stop:
            self.stopped.append(trial.trial_id)
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def decide(self, trial_id: str, is_reference: bool, result: dict,
               windows: int | None = None) -> bool:
        """Record a window's report (``window``, ``window_samples_per_sec`` and the objective
        so far) and say whether the trial should stop now. Results that are not a window's
        report (a trial's final result) are ignored. ``windows``: the trial's own windows
        (a screening trial's; None: the run's); nothing is stopped after its last."""
        last = (windows or self.windows) - 1
        window, value = result.get("window"), result.get(self._metric)
        rate = result.get("window_samples_per_sec")
        if result.get("status") != Status.RUNNING or window is None:
            return False
        settling = window < 0 or bool(result.get("window_settling"))
        if window >= 0 and rate is not None and rate > 0:
            self._logs.setdefault(trial_id, []).append(math.log(rate))
        self._dropped[trial_id] = int(result.get("windows_dropped") or 0)
        (self._long.add if result.get("windows_long") else self._long.discard)(trial_id)
        if settling:  # a warm-up step, or windows that may hold a transient: never a best
            if is_reference or self._best is None or window >= last:
                return False
            logs = self._logs.get(trial_id, [])
            if window >= 1 and self._metric == "samples_per_sec" and len(logs) >= 2:
                return self.gap(math.exp(max(logs))) > self.margin()  # its fastest window
            return (value is not None and value > 0
                    and self.gap(value) > WARM_UP_FACTOR * self.margin())
        if value is None or value <= 0:
            return False
        better = (lambda a, b: a > b) if self._mode == "max" else (lambda a, b: a < b)
        if self._best is None or better(value, self._best):
            self._best = value
        if is_reference or window >= last:
            return False
        return self.gap(value) > self.margin()

    def gap(self, value: float) -> float:
        """How far ``value`` is behind the best so far, in log ratio (<= 0: not behind)."""
        ratio = self._best / value if self._mode == "max" else value / self._best
        return math.log(ratio)

    def noise(self) -> float | None:
        """Pooled within-trial standard deviation of log window samples/sec (None until there
        are ``MIN_NOISE_DOF`` degrees of freedom), from the trials whose windows hold several
        steps; from all while those alone have too few degrees of freedom."""
        short = self._pooled(leaving_out=self._long)
        return short if short is not None else self._pooled(leaving_out=set())

    def _pooled(self, leaving_out: set[str]) -> float | None:
        squares, dof = 0.0, 0
        for trial_id, logs in self._logs.items():
            if trial_id in leaving_out:
                continue
            logs = logs[self._dropped.get(trial_id, 0):]  # dropped: transients, not noise
            if len(logs) > 1:
                mean = sum(logs) / len(logs)
                squares += sum((x - mean) ** 2 for x in logs)
                dof += len(logs) - 1
        return math.sqrt(squares / dof) if dof >= MIN_NOISE_DOF else None

    def margin(self) -> float:
        """The margin a trial must be behind the best by to stop, in log ratio (infinite until
        the noise is known)."""
        s = self.noise()
        return math.inf if s is None else max(MIN_MARGIN, Z * DRIFT * s)

    def debug_string(self) -> str:
        return f"EarlyStopping: {len(self.stopped)} trials stopped, margin {self.margin():.3f}"
