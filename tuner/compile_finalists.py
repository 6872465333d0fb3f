"""``torch.compile`` decided at the finalists, as the plan and the cost model see it: which mode
the re-measurement measures (``finalist_mode``), where the compiled configuration stands among
the finalists (``with_compiled``), what its compile costs in a round (``compile_price_s``:
cold once, then warm from the run's shared compile cache) and what time budget would have
held it (``budget_to_measure_s``).

The search screens eager configurations; the first-ranked is then measured compiled beside its
eager self in the interleaved rounds, and ``tuner.compile_payback`` decides from the paired
rates whether the answer is compiled.

Torch-free and Ray-free (base floor, beside ``budget`` and ``costs``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

import tuner.budget as budget
from tuner.budget import COMPILE_WARM_SHARE
from tuner.costs import TRIAL_OVERHEAD_S, CostModel, RowTimes, TrialCost, TrialShape
from tuner.knobs import CUDNN_SHAPE_KNOBS, Knobs
from tuner.status import Phase, answers, phase_of

WARM_COMPILE_SHARE = COMPILE_WARM_SHARE
"""A compile whose FX-graph and AOTAutograd caches an earlier trial of the run filled (the
run's one compile cache, ``TrialSettings.compile_cache_dir``) is priced at this share of the
cold compile until the run measures a warm one (``warm_share``): 0.3, the trial's own set-up
check's (``tuner.budget.COMPILE_WARM_SHARE``, where its source is)."""


def finalist_mode(modes: Iterable[str], device: str) -> str | None:
    """The ``torch.compile`` mode measured at the finalists, from the ``modes`` a workload's
    space offers (its ``compile`` choices, before a device's override): on CUDA
    'reduce-overhead' where the space offers it (a built-in space offers it where its shapes
    are static, so CUDA graphs apply), else 'default'; on any other device 'default' (CUDA
    graphs do not exist there). None: the space offers no compile mode this rule measures."""
    offered = set(modes)
    if device == "cuda" and "reduce-overhead" in offered:
        return "reduce-overhead"
    return "default" if "default" in offered else None


def with_compiled(top: Sequence[Knobs], mode: str) -> list[Knobs]:
    """The finalists ``top`` (rank order) with the first-ranked's twin right after it: the
    same knobs compiled in ``mode`` where it ran eager, eager where it ran compiled (a
    compiled reference that won the search is weighed against its eager self as any compiled
    configuration is). Where the time left cannot hold every round, the lowest-ranked
    finalists are left out first (``tuner.followup_policy.FollowupPolicy.plan``), and the twin
    goes only after every other searched finalist. Unchanged for an empty ``top``."""
    if not top:
        return []
    first = top[0]
    twin = first.replace(compile=mode if (first.compile or "off") == "off" else "off")
    return [first, twin, *(k for k in top[1:] if k != twin)]


def warm_share(rows: Sequence[Mapping[str, Any]], mode: str) -> float | None:
    """A warm compile's share of the cold one as the run measured it in ``mode``: for each
    shape (``tuner.knobs.CUDNN_SHAPE_KNOBS``) compiled more than once, its shortest later
    compile over its first (the run's compile cache warm after that one); the median over
    such shapes. None where no shape was compiled twice."""
    firsts: dict[tuple, float] = {}
    ratios: dict[tuple, float] = {}
    for times in map(RowTimes.of, rows):
        if times.knobs is None or (times.compile or "off") != mode or times.compiled_s <= 0:
            continue
        shape = tuple(getattr(times.knobs, name) for name in CUDNN_SHAPE_KNOBS)
        if shape not in firsts:
            firsts[shape] = times.compiled_s
        else:
            ratio = times.compiled_s / firsts[shape]
            ratios[shape] = min(ratios.get(shape, ratio), ratio)
    return statistics.median(ratios.values()) if ratios else None


def compile_price_s(rows: Sequence[Mapping[str, Any]], knobs: Knobs, cold_prior_s: float,
                    warm: bool) -> float:
    """Seconds the first step of one more trial of ``knobs`` spends compiling: 0 eager.
    ``warm``: a trial of the same knobs ran (or is planned to run) earlier in the run, so the
    run's compile cache holds its graphs: the shortest compile measured for the same knobs
    after their first; else the cold one times the warm share the run measured at another
    shape (``warm_share``), else times ``WARM_COMPILE_SHARE``. Cold: the longest compile
    measured in the mode (``CostModel.compile_s``), else ``cold_prior_s``
    (``tuner.budget.compile_needs_s``)."""
    mode = knobs.compile or "off"
    if mode == "off":
        return 0.0
    cold_s = CostModel(rows).compile_s(knobs) or cold_prior_s
    if not warm:
        return cold_s
    same = [RowTimes.of(r).compiled_s for r in rows if RowTimes.of(r).knobs == knobs]
    later = [s for s in same[1:] if s > 0]
    if later:
        return min(later)
    share = warm_share(rows, mode)
    return (WARM_COMPILE_SHARE if share is None else share) * cold_s


def compile_reserve_s(plan: Any) -> float:
    """Seconds a run's follow-ups keep for the compiled finalist's compiles beyond its share of
    the time left (``followup_share``), priced before any row: its first round's cold compile
    (``tuner.budget.compile_needs_s`` of ``plan``'s workload and device), then warm from the
    run's compile cache in each later round (``WARM_COMPILE_SHARE`` of it). Once per process
    and shape: its round trials are priced with the other finalists'. 0 without compile at the
    finalists (``plan.compile_at_finalists``) or without a time budget. ``plan``: reads
    ``compile_at_finalists``, ``time_budget_s``, ``workload``, ``device``,
    ``remeasure_rounds``."""
    mode = getattr(plan, "compile_at_finalists", None)
    if not mode or plan.time_budget_s is None:
        return 0.0
    cold_s = budget.compile_needs_s(mode, getattr(plan, "workload", None), plan.device)
    return cold_s * (1 + WARM_COMPILE_SHARE * (plan.remeasure_rounds - 1))


def followup_share(plan: Any, share: float) -> float:
    """The follow-ups' ``share`` of the time left (``tuner.budget.followup_share``) with the
    compiled finalist's compiles (``compile_reserve_s``) added as a share of ``plan``'s time
    budget, where the sum is at most ``tuner.budget.max_followup_share`` of it: a budget that
    can hold a compiled finalist keeps the time for it; one that cannot (the default CPU
    run's 210 s beside a 150-s compile) keeps its search, and its summary names the budget
    that would (``budget_to_measure_s``). ``share`` unchanged without follow-ups (0)."""
    reserve_s = compile_reserve_s(plan)
    if share <= 0 or reserve_s <= 0:
        return share
    budget_s = plan.time_budget_s
    held = share + reserve_s / budget_s
    return held if held <= budget.max_followup_share(budget_s) else share


@dataclass(frozen=True)
class BudgetNeed:
    """What ``budget_to_measure_s`` priced, seconds: what the follow-ups had, what the rounds
    took, what the compiled finalist's rounds would have cost, and the follow-ups' share of
    each second more of budget."""

    budget_s: float
    """The run's ``--time-budget``."""
    followup_s: float
    """The time the follow-ups had: from the search's last trial to the run's deadline."""
    rounds_s: float
    """The rounds that ran, as planned (each row's ``priced_s``, else its wall time, and
    ``TRIAL_OVERHEAD_S``), and those of configurations whose rounds did not run either."""
    cold_compile_s: float
    """The compiled configuration's first compile (cold: ``compile_price_s``)."""
    warm_compiles_s: float
    """Its compiles in the later rounds, warm from the run's compile cache."""
    trials_s: float
    """Its round trials without their compile."""
    share: float
    """The follow-ups' share of each second more of budget (their share less the compiled
    finalist's reserve, ``compile_reserve_s``, which a larger budget keeps the same)."""

    @property
    def missing_s(self) -> float:
        """Seconds the follow-ups lacked for the rounds and the compiled finalist's; its
        whole price where they had the time (the rounds were priced dearer than they ran)."""
        compiled_s = self.cold_compile_s + self.warm_compiles_s + self.trials_s
        missing_s = self.rounds_s + compiled_s - self.followup_s
        return missing_s if missing_s > 0 else compiled_s

    @property
    def need_s(self) -> float:
        """The ``--time-budget`` that holds them, whole tens: the run's plus ``missing_s``
        over ``share``."""
        return float(-(-(self.budget_s + self.missing_s / self.share) // 10) * 10)

    def text(self) -> str:
        """One line: each part, seconds."""
        return (f"--time-budget {self.need_s:,.0f} = {self.budget_s:,.0f} + (rounds "
                f"{self.rounds_s:,.1f} + cold compile {self.cold_compile_s:,.1f} + warm "
                f"compiles {self.warm_compiles_s:,.1f} + its round trials {self.trials_s:,.1f}"
                f" - follow-ups' time {self.followup_s:,.1f}) / follow-up share "
                f"{self.share:.2f}")


def _followups_had_s(plan: Any, rows: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """(the follow-ups' time: the search's last trial's end to the run's deadline,
    ``plan.settings.deadline_unix_s``, else the last row's end; the rounds that ran, as
    planned)."""
    times = [RowTimes.of(r) for r in rows]
    ends = [t.finished_at.timestamp() for t in times if t.finished_at is not None]
    search_ends = [t.finished_at.timestamp() for t, r in zip(times, rows)
                   if t.finished_at is not None and phase_of(r) == Phase.SEARCH]
    deadline = getattr(plan.settings, "deadline_unix_s", None) or max(ends, default=0.0)
    followup_s = max(0.0, deadline - max(search_ends, default=deadline))
    rounds_s = sum((t.priced_s or t.wall_s or 0.0) + TRIAL_OVERHEAD_S
                   for t, r in zip(times, rows) if phase_of(r) == Phase.REMEASURE)
    return followup_s, rounds_s


def budget_need(plan: Any, rows: Sequence[Mapping[str, Any]], knobs: Knobs,
                also: Iterable[Knobs] = ()) -> BudgetNeed | None:
    """The priced parts of ``budget_to_measure_s`` (its arguments); None without a time
    budget."""
    if plan.time_budget_s is None:
        return None
    rounds = plan.remeasure_rounds
    model = CostModel(rows)
    shape = TrialShape.of(plan.settings, {"windows": plan.round_windows})
    prior_s = budget.compile_needs_s(knobs.compile, getattr(plan, "workload", None), plan.device)
    followup_s, rounds_s = _followups_had_s(plan, rows)
    rounds_s += sum(model.price(k, shape).total_s for k in dict.fromkeys(also)) * rounds
    budget_s = plan.time_budget_s
    return BudgetNeed(
        budget_s=budget_s, followup_s=followup_s, rounds_s=rounds_s,
        cold_compile_s=compile_price_s(rows, knobs, prior_s, warm=False),
        warm_compiles_s=(rounds - 1) * compile_price_s(rows, knobs, prior_s, warm=True),
        trials_s=rounds * (model.price(knobs, shape).total_s - model.compile_s(knobs)),
        share=max(budget.FOLLOWUP_SHARE,
                  plan.followup_share() - compile_reserve_s(plan) / budget_s))


def budget_to_measure_s(plan: Any, rows: Sequence[Mapping[str, Any]], knobs: Knobs,
                        also: Iterable[Knobs] = ()) -> float | None:
    """The ``--time-budget`` (seconds, whole tens) whose follow-ups would also hold the
    re-measurement's rounds (``plan.remeasure_rounds``) of the compiled ``knobs``, and of
    each of ``also`` (configurations whose rounds did not run either): the rounds that ran
    as planned (their rows' ``priced_s``), those of ``also`` and the compiled ``knobs``'
    (``CostModel.price`` of a round trial; the compile once cold, then warm as the run
    measured it, ``compile_price_s``) less the time the follow-ups had (the search's end to the
    run's deadline), over the share of each second more of budget the follow-ups keep
    (``plan.followup_share()`` less the compiled finalist's reserve, ``compile_reserve_s``,
    at least ``tuner.budget.FOLLOWUP_SHARE``); ``budget_need`` gives the parts. None without
    a time budget. ``plan``: a ``tuner.plan.Plan`` (reads ``time_budget_s``, ``followup_share``,
    ``settings``, ``round_windows``, ``remeasure_rounds``, ``workload``, ``device``,
    ``compile_at_finalists``)."""
    need = budget_need(plan, rows, knobs, also)
    return None if need is None else need.need_s


COMPILE_OVERRUN = 2.0
"""A compiled finalist's trial is stopped (its own ``deadline_unix_s``) once it has run this
many times its price: the cold compile is priced from a guess where nothing was measured
(``tuner.budget.COMPILE_NEEDS_S``, 90 s, where ddpm's first compile took 878 s on the loaded
2-core CPU, bench/results/compile-cache-2026-12-02.txt), and a compile that runs on would
take the other finalists' rounds."""


def _remeasured(rows: Sequence[Mapping[str, Any]], knobs: Knobs) -> list[Mapping[str, Any]]:
    return [r for r in rows if phase_of(r) == Phase.REMEASURE
            and Knobs.from_dict(r, strict=False) == knobs]


def compiles_cold(rows: Sequence[Mapping[str, Any]], knobs: Iterable[Knobs]) -> bool:
    """Whether one of ``knobs`` is compiled and has no re-measurement row yet: its first round
    compiles cold, at a price not measured, so the rounds after it are planned from its row
    (``tuner.followups.round_batch`` plans that round alone)."""
    return any((k.compile or "off") != "off" and not _remeasured(rows, k) for k in knobs)


def compile_failed(rows: Sequence[Mapping[str, Any]], knobs: Knobs) -> bool:
    """Whether compiled ``knobs`` have a re-measurement row that measured nothing (stopped at
    its compile, refused, fallen back to eager): not measured again in later rounds."""
    return (knobs.compile or "off") != "off" and any(
        not answers(r) for r in _remeasured(rows, knobs))


def compile_deadlines(now_unix_s: float, run_deadline_unix_s: float, knobs: Sequence[Knobs],
                      prices_s: Sequence[float], needs_s: Mapping[str, float]
                      ) -> list[float | None]:
    """Each trial's own deadline (``time.time()``), for trials of ``knobs`` run in order from
    ``now_unix_s``, each priced ``prices_s`` (seconds in the run's time): a compiled one stops
    ``COMPILE_OVERRUN`` times its price after the trials before it were priced to end, or,
    where that is later, its price plus ``needs_s[mode]`` after (the time its set-up check
    wants left before it starts a compile, ``tuner.budget.compile_refusal``), never past the
    run's deadline; None (the run's) for an eager one."""
    out: list[float | None] = []
    start = now_unix_s
    for k, price_s in zip(knobs, prices_s):
        mode = k.compile or "off"
        out.append(None if mode == "off" else min(
            run_deadline_unix_s, start + max(COMPILE_OVERRUN * price_s, needs_s[mode] + price_s)))
        start += price_s
    return out


def with_deadlines(plan: Any, knobs: Sequence[Knobs], per_trial: Sequence[dict],
                   trial_prices_s: Sequence[float]) -> list[dict]:
    """The trials' settings changes ``per_trial``, a compiled one's with its own
    ``deadline_unix_s`` (``compile_deadlines``; each trial priced ``trial_prices_s`` plus
    ``TRIAL_OVERHEAD_S``, a mode's compile needing ``tuner.budget.compile_needs_s`` of
    ``plan``'s workload and device) where the run has a deadline
    (``plan.settings.deadline_unix_s``, ``plan.time_left_s()``)."""
    left, deadline = plan.time_left_s(), getattr(plan.settings, "deadline_unix_s", None)
    if left is None or deadline is None:
        return list(per_trial)
    needs = {k.compile: budget.compile_needs_s(k.compile, getattr(plan, "workload", None),
                                               plan.device)
             for k in knobs if (k.compile or "off") != "off"}
    ends = compile_deadlines(deadline - left, deadline, knobs,
                             [p + TRIAL_OVERHEAD_S for p in trial_prices_s], needs)
    return [{**change, **({"deadline_unix_s": end} if end else {})}
            for change, end in zip(per_trial, ends)]


def repriced(plan: Any, rows: Sequence[Mapping[str, Any]], model: CostModel, knobs: Knobs,
             tuned: bool, cost: TrialCost) -> TrialCost:
    """``cost`` (``model.price`` of a trial of ``knobs``) with its compile priced by
    ``compile_price_s``: warm after a trial of the same knobs (``tuned``: one planned before
    it; or one in ``rows``), cold from ``tuner.budget.compile_needs_s`` of ``plan``'s workload
    and device until one is measured. Unchanged for eager ``knobs``."""
    if (knobs.compile or "off") == "off":
        return cost
    warm = tuned or any(Knobs.from_dict(r, strict=False) == knobs for r in rows)
    prior_s = budget.compile_needs_s(knobs.compile, getattr(plan, "workload", None), plan.device)
    return replace(cost, one_off_s=cost.one_off_s - model.compile_s(knobs)
                   + compile_price_s(rows, knobs, prior_s, warm))
