"""The follow-up policy: what the re-measurement measures and how, decided once as a value.

``FollowupPolicy`` holds the parameters (checked when made: the objective, ``--confirm``,
rounds, the can-win fraction, the most and least windows of a round) and one decision,
``plan(history, time_left_s, prices) -> FollowupPlan``: it tries the candidates (configurations
kept, windows per round, the compute-only ceiling's time kept) in one declared order
(``candidates``) and returns the first whose priced rounds fit the time left. The budget's
split asks the same policy what the follow-ups need (``need``), so the split and the schedule
count the same trials; the ceilings after the rounds fit in their order
(``fitting_ceilings``). Shaped like Optuna's ``SuccessiveHalvingPruner`` (parameters checked in
``__init__``, one decision, private helpers); ``tuner.followups`` executes the plan.

Pure and torch-free: prices come from a ``Prices`` (``tuner.followups.Pricer`` prices with
``tuner.costs.CostModel``), rows from a ``tuner.history.History``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Protocol, Sequence

import tuner.compile_finalists as compiling
from tuner.history import History
from tuner.knobs import Knobs

REMEASURE_ROUNDS = 3
"""Interleaved re-measurement rounds (A B C, A B C, A B C). Each round gives one paired ratio
per configuration; three give a t-interval with 2 degrees of freedom (quantile 4.3, where two
rounds have 12.7: ``tuner.noise``)."""

CAN_WIN_FRACTION = 0.5
"""A searched configuration is re-measured only when its search rate is at least this share of
the best search rate (for ``time_to_train_s``: a time at most 1/this of the best): a busy
machine can halve a rate between search and re-measurement, so a configuration below half the
best cannot overtake it (docs/defaults.md)."""

OWN_CEILINGS = ("compute", "loader", "machine-loader", "machine-compute")
"""The winner's own ceilings, in the order they are measured (``tuner.followups
.planned_ceilings`` adds the other data paths' and, on CPU, the one-core ones after them), and
the ceiling trials the budget's split keeps time for (``need``)."""

Config = tuple[Knobs, "str | None"]
"""A configuration to measure: its knobs and the reference it is (None: a searched one)."""


class PlanTerms(Protocol):
    """What the policy reads of a ``tuner.plan.Plan`` (``FollowupPolicy.of``)."""
    metric: str
    mode: str
    options: Any
    """``confirm`` and ``ceiling`` (``tuner.settings.RunOptions``)."""
    round_windows: int
    cudnn_at_finalists: bool
    compile_at_finalists: str | None
    """(A plan without it reads as None.)"""


class Prices(Protocol):
    """What a trial costs, in seconds of the run's time (``tuner.costs.TrialCost.total_s``)."""

    def round_s(self, knobs: Knobs, windows: int, tuned: bool) -> float:
        """One re-measurement trial of ``knobs`` with ``windows`` windows; ``tuned``: a trial
        of ``knobs`` planned before it runs first, in the same process."""

    def trial_s(self, knobs: Knobs) -> float:
        """One trial of ``knobs`` with the run's windows (a ceiling, a retried reference)."""


@dataclass(frozen=True)
class FollowupNeed:
    """What the follow-ups measure, counted before the search (the budget's split): the
    configurations re-measured, in ``rounds`` rounds of ``round_windows`` windows, and the
    ceiling trials."""
    configs: int
    rounds: int
    round_windows: int
    ceilings: int


@dataclass(frozen=True)
class FollowupPlan:
    """The re-measurement as decided (``FollowupPolicy.plan``), printed as is.

    ``configs``: what is re-measured, ranked (the references beside the searched ones);
    ``dropped``: lower-ranked searched ones left out for time; ``windows``: per round;
    ``rounds``: rounds in all; ``reserve_s``: seconds kept for the winner's compute-only
    ceiling beside every round (0: none kept); ``fits``: every round fits (False: the rounds
    run as far as the time left holds)."""
    configs: tuple[Config, ...]
    dropped: int
    windows: int
    rounds: int
    reserve_s: float
    fits: bool


@dataclass(frozen=True)
class RoundsTodo:
    """The rounds one batch runs (``FollowupPolicy.next_rounds``): (round, configuration) in
    order, whether they leave the compute-only ceiling its time, and the rounds in all now
    (``FollowupPolicy.rounds_total``: a figure that cannot be true adds one)."""
    todo: tuple[tuple[int, Config], ...]
    ceiling_kept: bool
    rounds: int


@dataclass(frozen=True)
class FollowupPolicy:
    """The follow-ups' parameters; ``ValueError`` names a bad one.

    ``metric``/``mode``: the objective ('samples_per_sec'/'max', 'time_to_train_s'/'min');
    ``confirm``: searched configurations re-measured at most (``--confirm``); ``ceiling``:
    ceilings measured (``--ceiling``); ``round_windows``: the most windows of a round
    (``Plan.round_windows``); ``cudnn_at_finalists``/``compile_at_finalists``: the finalists'
    variants (``tuner.search_policy``); ``rounds``, ``can_win_fraction``: the defaults above;
    ``least_windows``: the fewest windows a round is cut to."""
    metric: str
    mode: str
    confirm: int
    ceiling: bool
    round_windows: int
    cudnn_at_finalists: bool = False
    compile_at_finalists: str | None = None
    rounds: int = REMEASURE_ROUNDS
    can_win_fraction: float = CAN_WIN_FRACTION
    least_windows: int = 1

    def __post_init__(self) -> None:
        checks = {"mode": self.mode in ("max", "min"), "confirm": self.confirm >= 0,
                  "rounds": self.rounds >= 1, "can_win_fraction": 0 < self.can_win_fraction <= 1,
                  "least_windows": 1 <= self.least_windows <= self.round_windows}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"bad follow-up policy {bad[0]}={getattr(self, bad[0])!r}; accepted:"
                             " mode max|min, confirm >= 0, rounds >= 1, can_win_fraction in "
                             "(0, 1], 1 <= least_windows <= round_windows")

    @classmethod
    def of(cls, plan: PlanTerms) -> "FollowupPolicy":
        """The policy of a ``tuner.plan.Plan`` (its options, ``round_windows`` and finalist
        variants)."""
        return cls(metric=plan.metric, mode=plan.mode, confirm=plan.options.confirm,
                   ceiling=plan.options.ceiling, round_windows=plan.round_windows,
                   cudnn_at_finalists=plan.cudnn_at_finalists,
                   compile_at_finalists=getattr(plan, "compile_at_finalists", None))

    # ------------------------------------------------------------- what is re-measured

    def finalists(self, history: History) -> tuple[list[Knobs], list[Config]]:
        """The ``confirm`` best searched configurations that can still win
        (``can_win_fraction`` of the best sound figure), with the finalists' variants, and
        what the re-measurement measures: those and, beside them, the references that
        succeeded (nothing with fewer than two configurations to compare). A best whose
        figures cannot be true is among them, measured again; it sets no bar."""
        ranked = history.ranked(self.metric, self.mode)
        sound = [r.figure(self.metric) for r in ranked if r.impossible is None]
        top: list[Knobs] = []
        for r in ranked:
            if r.knobs not in top and self._can_win(r.figure(self.metric), sound):
                top.append(r.knobs)
        top = top[:self.confirm]
        if self.cudnn_at_finalists:
            top = with_cudnn_benchmark(top)
        if self.compile_at_finalists:
            top = compiling.with_compiled(top, self.compile_at_finalists)
        refs: dict[Knobs, str] = {}
        for r in ranked:
            if r.reference and r.reference not in refs.values():
                refs.setdefault(r.knobs, r.reference)
        configs = [(k, refs.get(k)) for k in top] + [(k, name) for k, name in refs.items()
                                                     if k not in top]
        return top, (configs if top and len(configs) >= 2 else [])

    def _can_win(self, figure: float, sound: list[float]) -> bool:
        if not sound:
            return True
        if self.mode == "max":
            return figure >= self.can_win_fraction * sound[0]
        return figure <= sound[0] / self.can_win_fraction

    def rounds_total(self, history: History) -> int:
        """``rounds``, one more once a re-measurement row records a figure that cannot be true
        (``tuner.history.impossible``)."""
        return self.rounds + any(r.ok and r.impossible for r in history.remeasured())

    @staticmethod
    def required(history: History, configs: Sequence[Config]) -> list[Config]:
        """The configurations never left out for time: the first-ranked, the references, and
        any already re-measured (a resumed run)."""
        done = {r.knobs for r in history.remeasured()}
        return [c for i, c in enumerate(configs) if i == 0 or c[1] is not None or c[0] in done]

    def reserve_s(self, history: History, configs: Sequence[Config], prices: Prices) -> float:
        """Seconds the rounds leave for the winner's compute-only ceiling: one trial of the
        first-ranked (``Prices.trial_s``); 0 without ``ceiling``, without configurations, or
        when the rows hold a compute-only ceiling already."""
        if not configs or not self.ceiling or history.ceilings("compute"):
            return 0.0
        return prices.trial_s(configs[0][0])

    # ------------------------------------------------------------------ the rounds

    def rounds_todo(self, history: History, configs: Sequence[Config], rounds: range,
                    windows: int, prices: Prices, left_s: float | None = None
                    ) -> list[tuple[int, Config]]:
        """(round, configuration) of the re-measurements still to run in ``rounds``, in order:
        round r holds the configurations with fewer than r re-measurement rows; it ends at the
        first round ``left_s`` (None: no limit) cannot hold. A configuration's trials after its
        first here are priced as run where that one ran (``Prices.round_s``'s ``tuned``)."""
        todo: list[tuple[int, Config]] = []
        cost, planned = 0.0, set()
        for r in rounds:
            this = [c for c in configs if len(history.remeasured(c[0])) < r]
            cost += sum(prices.round_s(k, windows, k in planned) for k, _ in this)
            if left_s is not None and left_s < cost:
                break
            planned.update(k for k, _ in this)
            todo += [(r, c) for c in this]
        return todo

    def candidates(self, history: History, configs: Sequence[Config]
                   ) -> Iterator[tuple[list[Config], int, bool]]:
        """(configurations kept, windows per round, ceiling's time kept), in the declared
        order: the ceiling's time kept before not; the most windows before fewer (three rounds
        of fewer windows give every speed-up an interval); all configurations before fewer,
        the lowest-ranked searched one left out first, never a ``required`` one."""
        required = self.required(history, configs)
        droppable = [c for c in configs if c not in required]
        for keep_ceiling in (True, False):
            for windows in range(self.round_windows, self.least_windows - 1, -1):
                for n in range(len(droppable), -1, -1):
                    kept = [c for c in configs if c in required or c in droppable[:n]]
                    yield kept, windows, keep_ceiling

    def plan(self, history: History, time_left_s: float | None, prices: Prices,
             configs: Sequence[Config] | None = None) -> FollowupPlan:
        """The first candidate (``candidates``) whose rounds, every one still to run, fit
        ``time_left_s`` (None: no budget) beside the ceiling's reserve where it keeps it.
        Where none does: the required configurations at the most windows that hold the next
        round (``round_windows`` where none does), run as far as the time holds.
        ``configs``: what is re-measured (None: ``finalists``)."""
        configs = self.finalists(history)[1] if configs is None else list(configs)
        total = self.rounds_total(history)
        every = range(1, total + 1)
        reserve = self.reserve_s(history, configs, prices)
        for kept, windows, keep_ceiling in self.candidates(history, configs):
            reserve_s = reserve if keep_ceiling else 0.0
            left = None if time_left_s is None else time_left_s - reserve_s
            wanted = len(self.rounds_todo(history, kept, every, windows, prices))
            if len(self.rounds_todo(history, kept, every, windows, prices, left)) == wanted:
                return FollowupPlan(tuple(kept), len(configs) - len(kept), windows, total,
                                    reserve_s, True)
        kept = self.required(history, configs)
        windows = self._next_round_windows(history, kept, every, prices, time_left_s)
        return FollowupPlan(tuple(kept), len(configs) - len(kept), windows, total, 0.0, False)

    def _next_round_windows(self, history: History, configs: list[Config], every: range,
                            prices: Prices, left_s: float | None) -> int:
        """The most windows that let ``left_s`` hold the next round with something to run
        (fewer windows for two rounds instead of one trade a ratio for an interval of quantile
        12.7); ``round_windows`` where none does or nothing is left."""
        untimed = self.rounds_todo(history, configs, every, self.round_windows, prices)
        if not untimed:
            return self.round_windows
        nxt = range(untimed[0][0], untimed[0][0] + 1)
        return next((w for w in range(self.round_windows, self.least_windows - 1, -1)
                     if self.rounds_todo(history, configs, nxt, w, prices, left_s)),
                    self.round_windows)

    def next_rounds(self, history: History, plan: FollowupPlan, configs: Sequence[Config],
                    first: int, time_left_s: float | None, prices: Prices,
                    cold: bool = False) -> RoundsTodo:
        """The rounds from ``first`` on (only ``first`` when ``cold``: a cold compile's round
        alone, the next planned from its row) of ``configs`` at ``plan.windows``, as many as
        ``time_left_s`` holds (the rounds in all read anew: ``rounds_total``): beside the
        ceiling's reserve where all of them fit beside it, else without it (a speed-up
        matters more than what bounds it)."""
        total = self.rounds_total(history)
        wanted = range(first, (first if cold else total) + 1)
        reserve_s = self.reserve_s(history, configs, prices)
        every = self.rounds_todo(history, configs, wanted, plan.windows, prices)
        if time_left_s is None:
            return RoundsTodo(tuple(every), reserve_s > 0, total)
        todo = self.rounds_todo(history, configs, wanted, plan.windows, prices,
                                time_left_s - reserve_s)
        if len(todo) == len(every):
            return RoundsTodo(tuple(todo), reserve_s > 0, total)
        return RoundsTodo(tuple(self.rounds_todo(history, configs, wanted, plan.windows,
                                                 prices, time_left_s)), False, total)

    # ------------------------------------------------------------------ the ceilings

    @staticmethod
    def fitting_ceilings(todo: Sequence[Any], time_left_s: float | None, prices: Prices
                         ) -> tuple[list[Any], list[str]]:
        """The ceilings of ``todo`` (name, knobs, mode), most important first, whose trials
        ``time_left_s`` holds one after another (``Prices.trial_s``), and the names of those
        left out: a ceiling started without the time for it measures nothing."""
        if time_left_s is None:
            return list(todo), []
        kept, left_out, total = [], [], 0.0
        for entry in todo:
            cost = prices.trial_s(entry[1])
            if total + cost <= time_left_s:
                kept.append(entry)
                total += cost
            else:
                left_out.append(entry[0])
        return kept, left_out

    # ------------------------------------------------------------------ the split

    def need(self, references: int) -> FollowupNeed:
        """What the follow-ups measure, for the budget's split before the search
        (``tuner.budget.followup_share``): ``confirm`` finalists with their variants and the
        ``references`` in ``rounds`` rounds of ``round_windows``, and the winner's
        ``OWN_CEILINGS``; nothing for a part that is off."""
        variants = int(self.cudnn_at_finalists) + int(bool(self.compile_at_finalists))
        configs = self.confirm + references + variants if self.confirm > 0 else 0
        return FollowupNeed(configs, self.rounds, self.round_windows,
                            len(OWN_CEILINGS) if self.ceiling else 0)


def with_cudnn_benchmark(top: list[Knobs]) -> list[Knobs]:
    """The finalists of a search that screened with ``cudnn_benchmark`` off
    (``Plan.cudnn_at_finalists``), in rank order: the first-ranked as screened, then each
    finalist with it on. The rounds then decide whether cuDNN's autotuning pays for the
    first-ranked (a tie goes to the simpler: ``tuner.winner.best``), and the others are
    measured as a user would run them at a fixed shape."""
    out: list[Knobs] = []
    for knobs in [*top[:1], *(k.replace(cudnn_benchmark=True) for k in top)]:
        if knobs not in out:
            out.append(knobs)
    return out
