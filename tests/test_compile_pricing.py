"""What a compiled finalist costs the plan, on a fake compile clock (each compiled row's
``compile_s``; nothing compiles): the compile once per process and shape, cold where the run
has not compiled that shape, warm from the run's compile cache as the run measured it; a time
budget's follow-ups keep the time for it; and where they could not, the ``--time-budget`` named
is the one that would.

The rows follow a ``chargpt --time-budget 900`` run on 2 loaded CPU cores
(bench/results/compile-finalists-2026-12-02-chargpt.txt): its compiled recommended reference
compiled 346.6 s cold in the search and 7.1 s and 8.3 s warm in its rounds, and the summary
asked for ``--time-budget 4,030`` by pricing the compiled finalist's two warm rounds at 30 % of
the cold compile (104 s each) instead."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

import tuner.budget as budget
import tuner.followups as followups
from tests.test_followups import BASE, BUSY, FAST, fake_plan, make_row, search_rows
from tuner.compile_finalists import (
    WARM_COMPILE_SHARE,
    budget_to_measure_s,
    compile_price_s,
    with_compiled,
)
from tuner.costs import TRIAL_OVERHEAD_S, CostModel, TrialShape
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.settings import RunOptions

REC = BUSY.replace(compile="default")
"""The compiled recommended reference (batch 32)."""
TOP = Knobs(batch_size=256, num_workers=2, prefetch_factor=2, amp="bf16")
"""The search's first-ranked: a shape (batch 256, bf16) no trial has compiled."""
TWIN = TOP.replace(compile="default")
COLD_S, WARM_S = 346.6, (7.1, 8.3)


def chargpt_like_rows() -> list[dict]:
    """The search (the compiled reference's trial compiles cold) and two rounds of the
    references and the first-ranked (the reference's compiles warm)."""
    rows = [make_row(0, BASE, reference="baseline", sps=50.0),
            make_row(1, REC, reference="recommended", sps=40.0, compile_s=COLD_S,
                     first_step_s=COLD_S + 1.0, seconds=COLD_S + 10.0),
            make_row(2, TOP, sps=90.0), make_row(3, FAST, sps=56.4)]
    for r, warm_s in enumerate(WARM_S):
        n = 4 + 3 * r
        rows += [make_row(n, TOP, sps=90.0, phase="remeasure"),
                 make_row(n + 1, BASE, reference="baseline", sps=50.0, phase="remeasure"),
                 make_row(n + 2, REC, reference="recommended", sps=45.0, phase="remeasure",
                          compile_s=warm_s, first_step_s=warm_s + 1.0, seconds=warm_s + 10.0)]
    return rows


def test_a_new_shape_compiles_cold_once_then_warm_at_the_share_the_run_measured():
    """The cold compile as measured (the longest in the mode); its later rounds at the warm
    share measured at the reference's shape (7.1 / 346.6), never 30 % of the cold one."""
    rows = chargpt_like_rows()
    assert compile_price_s(rows, TWIN, 150.0, warm=False) == pytest.approx(COLD_S)
    assert compile_price_s(rows, TWIN, 150.0, warm=True) == pytest.approx(min(WARM_S))
    # the same shape compiled before: its own later compiles, as measured
    assert compile_price_s(rows, REC, 150.0, warm=True) == pytest.approx(min(WARM_S))
    # nothing compiled twice: the share is the prior's
    search_only = chargpt_like_rows()[:4]
    assert compile_price_s(search_only, TWIN, 150.0, warm=True) == pytest.approx(
        WARM_COMPILE_SHARE * COLD_S)
    assert compile_price_s(rows, TOP, 150.0, warm=True) == 0.0      # eager


def cpu_plan(tmp_path, data, budget_s: float = 900.0, **changes):
    """The plan of ``run --time-budget budget_s`` on CPU of a space that offers compile."""
    space = tmp_path / "compile.yaml"
    space.write_text("knobs:\n  batch_size: {low: 4, high: 64, log: true}\n"
                     "  compile: {choices: ['off', default]}\ncpu:\n  compile: 'off'\n")
    return make_plan(RunOptions(workload="tests.fake_workloads:paced", device="cpu",
                                data=str(data), results=str(tmp_path / "r"),
                                time_budget_s=budget_s, space_file=str(space), **changes))


def test_a_cpu_budget_keeps_the_compiled_finalists_compiles_beside_the_followups_share(
        tmp_path, regression_data):
    """900 s on CPU: the follow-ups keep their share (``FOLLOWUP_SHARE`` with
    ``--time-budget`` alone) and the compiled finalist's cold compile (the CPU prior, 150 s)
    and two warm ones beside it; the search keeps the rest. A budget whose share could not
    hold them beside its cap keeps its search; without compile at the finalists nothing is
    added."""
    plan = cpu_plan(tmp_path, regression_data)
    assert plan.compile_at_finalists == "default"
    cold_s = budget.compile_needs_s("default", plan.workload, "cpu")
    assert cold_s == budget.COMPILE_NEEDS_CPU_S["default"] >= 112.0   # measured 112-347 s
    reserve_s = cold_s * (1 + 2 * WARM_COMPILE_SHARE)
    assert plan.followup_share() * 900 == pytest.approx(
        budget.FOLLOWUP_SHARE * 900 + reserve_s)
    short = cpu_plan(tmp_path, regression_data, budget_s=300.0)   # 0.2 + 240 / 300 > 0.5
    assert short.compile_at_finalists == "default"
    assert short.followup_share() == budget.FOLLOWUP_SHARE       # the search keeps its time
    unfinalised = cpu_plan(tmp_path, regression_data, confirm=0)     # the ceilings' share alone
    assert unfinalised.compile_at_finalists is None
    assert unfinalised.followup_share() == budget.FOLLOWUP_SHARE


def test_the_time_a_900_s_plan_keeps_holds_the_compiled_finalists_rounds(tmp_path,
                                                                          regression_data):
    """The follow-ups of a 900-s CPU plan (its share of the time left once the first trial has
    measured, ~30 s in) plan the compiled twin's rounds, priced from the CPU prior; the
    share alone (``FOLLOWUP_SHARE``) leaves the twin out."""
    share = cpu_plan(tmp_path, regression_data).followup_share()
    rows = search_rows()
    top, configs = followups.remeasure_configs(compile_plan(None), rows)
    twin = top[1]
    assert twin == BUSY.replace(compile="default") and top == with_compiled(top[:1] + top[2:],
                                                                           "default")
    for kept, expected in ((share, True), (budget.FOLLOWUP_SHARE, False)):
        plan = compile_plan(kept * (900 - 30))
        batches = drive(plan, search_rows(), configs)
        assert any((twin, None) in b.configs for b in batches) is expected, kept


def compile_plan(left: float | None) -> SimpleNamespace:
    plan = fake_plan(left=left, ceiling=True)
    plan.compile_at_finalists = "default"
    return plan


def drive(plan, rows: list[dict], configs) -> list:
    """``followups.rounds`` as the driver runs it; a compiled trial compiles the CPU prior's
    seconds cold, then warm at ``WARM_COMPILE_SHARE`` of it."""
    batches = []
    cold_s = budget.COMPILE_NEEDS_CPU_S["default"]
    for batch in followups.rounds(plan, rows, configs, lambda kind, data: None):
        batches.append(batch)
        for knobs, ref in batch.configs:
            done = sum(1 for r in rows if Knobs.from_dict(r, strict=False) == knobs)
            extra = {} if knobs.compile == "off" else {
                "compile_s": cold_s * (WARM_COMPILE_SHARE if done else 1.0)}
            rows.append(make_row(len(rows), knobs, reference=ref, phase="remeasure", **extra))
    return batches


def test_the_budget_named_prices_the_compile_once_and_warm_as_measured(tmp_path,
                                                                       regression_data):
    """The budget that would hold the compiled first-ranked's rounds: the run's, plus what
    the follow-ups lacked (the rounds that ran, as timed, and the compiled one's: one cold
    compile, two warm at the measured share, three round trials, less the 100 s from the
    search's end to the deadline), over the share each second more of budget gives the
    follow-ups (``FOLLOWUP_SHARE`` with ``--time-budget`` alone: the compiles' reserve is the
    same in a larger budget). Where the follow-ups had the time, the compiled rounds' whole
    price."""
    plan = cpu_plan(tmp_path, regression_data)
    rows = chargpt_like_rows()
    search_end = max(r["finished_at"] for r in rows if r["phase"] == "search").timestamp()
    plan = replace(plan, settings=replace(plan.settings, deadline_unix_s=search_end + 100.0))
    model = CostModel(rows)
    shape = TrialShape.of(plan.settings, {"windows": plan.round_windows})
    trial_s = model.price(TWIN, shape).total_s - model.compile_s(TWIN)
    rounds_s = sum((r["finished_at"] - r["started_at"]).total_seconds() + TRIAL_OVERHEAD_S
                   for r in rows if r["phase"] == "remeasure")
    compiled_s = COLD_S + 2 * min(WARM_S) + 3 * trial_s
    need_s = budget_to_measure_s(plan, rows, TWIN)
    assert need_s == math.ceil((900 + (rounds_s + compiled_s - 100.0)
                                / budget.FOLLOWUP_SHARE) / 10) * 10
    today_s = 900 + (COLD_S * (1 + 2 * WARM_COMPILE_SHARE) + 3 * trial_s) / budget.FOLLOWUP_SHARE
    assert need_s < today_s - 800       # the warm rounds at 30 % of cold: 969 s more
    roomy = replace(plan, settings=replace(plan.settings, deadline_unix_s=search_end + 1e4))
    assert budget_to_measure_s(roomy, rows, TWIN) == math.ceil(
        (900 + compiled_s / budget.FOLLOWUP_SHARE) / 10) * 10
