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

from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

import tuner.budget as budget
from tuner.costs import TRIAL_OVERHEAD_S, CostModel, RowTimes, TrialCost, TrialShape
from tuner.knobs import Knobs
from tuner.status import Phase, answers, phase_of

WARM_COMPILE_SHARE = 0.3
"""A compile whose FX-graph and AOTAutograd caches an earlier trial of the run filled (the
run's one compile cache, ``TrialSettings.compile_cache_dir``) is priced at this share of the
cold compile until a warm one is measured. Source: on 2 CPU cores the warm first step took
3.5 % of the cold one for ddpm and 8-20 % for chargpt (bench/results/compile-cache-2026-12-02.txt);
30 % leaves room for dynamo's tracing, which no cache skips."""


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
    """The finalists ``top`` (rank order) with the first-ranked also compiled in ``mode``,
    right after it: where the time left cannot hold every round, the lowest-ranked finalists
    are left out first (``tuner.followups.fitting_configs``), and the compiled twin goes only
    after every other searched finalist. Unchanged for an empty ``top`` or a first-ranked that
    is compiled already."""
    if not top or (top[0].compile or "off") != "off":
        return list(top)
    twin = top[0].replace(compile=mode)
    return [top[0], twin, *(k for k in top[1:] if k != twin)]


def compile_price_s(rows: Sequence[Mapping[str, Any]], knobs: Knobs, cold_prior_s: float,
                    warm: bool) -> float:
    """Seconds the first step of one more trial of ``knobs`` spends compiling: 0 eager.
    ``warm``: a trial of the same knobs ran (or is planned to run) earlier in the run, so the
    run's compile cache holds its graphs: the shortest compile measured for the same knobs
    after their first, else ``WARM_COMPILE_SHARE`` of the cold one. Cold: the longest compile
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
    return min(later) if later else WARM_COMPILE_SHARE * cold_s


def budget_to_measure_s(plan: Any, rows: Sequence[Mapping[str, Any]], knobs: Knobs,
                        also: Iterable[Knobs] = ()) -> float | None:
    """The ``--time-budget`` (seconds, whole tens) whose follow-ups would also hold the
    re-measurement's rounds (``plan.remeasure_rounds``) of the compiled ``knobs``, and of
    each of ``also`` (configurations whose rounds did not run either): the run's budget plus
    those rounds' price (``CostModel.price`` of a round trial, a compile by
    ``compile_price_s``) over the share of the budget kept for the follow-ups
    (``plan.followup_share()``, at least ``tuner.budget.FOLLOWUP_SHARE``). None without a
    time budget. ``plan``: a ``tuner.plan.Plan`` (reads ``time_budget_s``,
    ``followup_share``, ``settings``, ``round_windows``, ``remeasure_rounds``, ``workload``,
    ``device``)."""
    if plan.time_budget_s is None:
        return None
    rounds = plan.remeasure_rounds
    model = CostModel(rows)
    shape = TrialShape.of(plan.settings, {"windows": plan.round_windows})
    prior_s = budget.compile_needs_s(knobs.compile, getattr(plan, "workload", None), plan.device)
    extra_s = sum(model.price(k, shape).total_s for k in dict.fromkeys(also)) * rounds
    for r in range(rounds):
        cost = model.price(knobs, shape)
        extra_s += (cost.total_s - model.compile_s(knobs)
                    + compile_price_s(rows, knobs, prior_s, warm=r > 0))
    share = max(plan.followup_share(), budget.FOLLOWUP_SHARE)
    return float(-(-(plan.time_budget_s + extra_s / share) // 10) * 10)


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
