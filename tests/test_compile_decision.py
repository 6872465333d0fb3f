"""``torch.compile`` decided at the finalists: the plan screens eager and measures the
first-ranked compiled in the re-measurement rounds (``tuner.search_policy``,
``tuner.followups``, ``tuner.compile_finalists``), and the answer is compiled exactly when its
pay-back says so (``tuner.compile_payback``, ``tuner.winner``). Fake rows with a fake compile
clock (each compiled row's ``compile_s``); nothing compiles."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
from rich.console import Console

import tuner.compile_payback as payback
import tuner.followups as followups
import tuner.summary as summary
import tuner.winner as winner
from tests.test_followups import BASE, BUSY, FAST, fake_plan, make_row, search_rows
from tuner.budget import COMPILE_NEEDS_CPU_S
from tuner.compile_finalists import (
    COMPILE_OVERRUN,
    WARM_COMPILE_SHARE,
    budget_to_measure_s,
    compile_deadlines,
    finalist_mode,
    with_compiled,
    with_deadlines,
)
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.plan import Resources
from tuner.progress import _phase_text
from tuner.settings import RunOptions

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
EAGER = Knobs(batch_size=64)
COMPILED = EAGER.replace(compile="default")


def row(n: int, knobs: Knobs, sps: float, *, compile_s: float | None = None,
        reference: str | None = None, status: str = "ok", **extra) -> dict:
    """Round ``n // 3``'s re-measurement row of ``knobs`` (trial ``n`` of run 'run-c')."""
    return {"run_id": "run-c", "trial_id": f"run-c-{n}", "workload": "fake", "scale": "tiny",
            "hardware_key": "cpu:test:2cpu", "device": "cpu", "phase": "remeasure",
            "status": status, "reference": reference, "is_baseline": reference == "baseline",
            "samples_per_sec": sps if status == "ok" else None, "samples_per_sec_cv": 0.01,
            "windows": 2, "step_time_ms_p50": 64_000 / sps if sps else None,
            "first_step_s": (compile_s or 0.0) + 1.0, "compile_s": compile_s,
            "recompiles": 0 if compile_s is not None else None,
            "error": None if status == "ok" else "failed",
            "started_at": T0 + dt.timedelta(seconds=60 * n),
            "finished_at": T0 + dt.timedelta(seconds=60 * n + 30), **knobs.to_dict(), **extra}


def rounds(eager: list[float], compiled: list[float], compile_s: list[float],
           **extra) -> list[dict]:
    """Three interleaved rounds: the baseline (batch 8), the eager first-ranked, its compiled
    twin whose first step compiles ``compile_s[r]`` seconds in round r."""
    out = []
    for r, (e, c, s) in enumerate(zip(eager, compiled, compile_s)):
        out += [row(3 * r, Knobs(batch_size=8), 40.0 + r, reference="baseline", **extra),
                row(3 * r + 1, EAGER, e, **extra),
                row(3 * r + 2, COMPILED, c, compile_s=s, **extra)]
    return out


def pairs_of(rows: list[dict]) -> list[tuple[dict, dict]]:
    compiled = [r for r in rows if r["compile"] == "default"]
    eager = [r for r in rows if r["compile"] == "off" and r["batch_size"] == 64]
    return winner.pairs(compiled, eager)


def decision_of(rows: list[dict], **kwargs) -> payback.CompileDecision:
    return payback.decide(pairs_of(rows), [r for r in rows if r["compile"] == "default"],
                          mode="default", **kwargs)


FAST_ROUNDS = rounds([100.0, 102.0, 99.0], [150.0, 151.0, 149.0], [30.0, 5.0, 6.0])
"""Compiled 1.50x with a tight interval; a 30-s cold compile, 5 s warm."""
SLOW_PAYBACK = rounds([100.0, 102.0, 99.0], [110.0, 112.0, 109.0], [2000.0, 50.0, 60.0])
"""Compiled 1.10x, clearly faster; a 2,000-s cold compile."""


def test_a_compile_outside_the_noise_that_pays_back_within_the_horizon_is_the_answer():
    d = decision_of(FAST_ROUNDS)
    assert (d.outcome, d.reason) == ("compiled", "pays back within the horizon")
    assert d.speedup.low > 1.0 and d.speedup.pairs == 3
    assert (d.compile_s_cold, d.compile_s_warm) == (30.0, 5.0)
    # a step of 64 samples: 0.638 s eager, 0.427 s compiled; 30 s / 0.211 s = 143 steps
    assert d.saving_s_per_step == pytest.approx(64 / d.eager_samples_per_sec
                                                - 64 / d.compiled_samples_per_sec)
    assert d.payback_steps == math.ceil(30.0 / d.saving_s_per_step) == 143
    assert d.payback_min == pytest.approx(143 * 64 / d.eager_samples_per_sec / 60)
    assert d.horizon_s == payback.PAYBACK_HORIZON_S and d.train_steps is None
    text = d.text()
    assert text.startswith(f"compile (default): 1.50x [{d.speedup.low:.2f}, "
                           f"{d.speedup.high:.2f}] at bs=64; first step 30 s cold / 5 s warm; "
                           "pays back after 143 steps (1.5 min of training; the 60-min horizon)")
    assert text.endswith("-> compiled answer")
    answer = winner.best(FAST_ROUNDS)
    assert answer.knobs == COMPILED and answer.compile.outcome == "compiled"
    assert answer.samples_per_sec == pytest.approx(d.compiled_samples_per_sec)
    doc = json.loads(json.dumps(answer.to_dict()))
    assert doc["knobs"]["compile"] == "default"
    assert doc["compile"]["outcome"] == "compiled" and doc["compile"]["payback_steps"] == 143
    assert doc["compile"]["eager_samples_per_sec"] == pytest.approx(d.eager_samples_per_sec)
    assert doc["compile"]["speedup_ci"] == [d.speedup.low, d.speedup.high]


def test_a_compiled_rate_inside_the_noise_is_no_gain_and_the_answer_stays_eager():
    rows = rounds([100.0, 102.0, 99.0], [104.0, 97.0, 101.0], [30.0, 5.0, 6.0])
    d = decision_of(rows)
    assert (d.outcome, d.reason) == ("eager", "no gain")
    assert d.speedup.tie
    assert "no gain inside the noise" in d.text() and "-> eager answer" in d.text()
    assert "pays back" not in d.text()
    answer = winner.best(rows)
    assert answer.knobs == EAGER and answer.compile.outcome == "eager"
    assert answer.tied_faster is None   # the compiled twin is not the tie rule's


def test_a_pay_back_beyond_the_horizon_keeps_the_eager_answer_and_says_why():
    d = decision_of(SLOW_PAYBACK)
    assert (d.outcome, d.reason) == ("eager", "pay-back beyond the horizon")
    assert d.speedup.low > 1.0
    assert d.payback_min * 60 > payback.PAYBACK_HORIZON_S
    assert "pays back after" in d.text() and d.text().endswith("-> eager answer")
    assert winner.best(SLOW_PAYBACK).knobs == EAGER


@pytest.mark.parametrize("steps, outcome, reason", [
    (1_000_000, "compiled", "pays back within --train-steps"),
    (10_000, "eager", "pay-back beyond --train-steps"),
])
def test_with_train_steps_the_jobs_length_decides_both_ways(steps, outcome, reason):
    """The 2,000-s compile pays back after ~35,000 steps: a job of a million steps compiles,
    one of 10,000 does not, whatever the horizon."""
    d = decision_of(SLOW_PAYBACK, train_steps=steps)
    assert (d.outcome, d.reason) == (outcome, reason)
    assert d.horizon_s is None and f"--train-steps {steps:,}" in d.text()
    rows = [{**r, "objective": "time_to_train_s", "train_steps": steps,
             "time_to_train_s": 1000.0 + 64 * steps / r["samples_per_sec"]} for r in SLOW_PAYBACK]
    answer = winner.best(rows)
    assert answer.compile.outcome == outcome
    assert answer.knobs == (COMPILED if outcome == "compiled" else EAGER)


def test_a_compiled_finalist_the_budget_could_not_hold_is_not_measured_with_the_budget_it_needs():
    d = payback.decide([], [], mode="default", budget_needed_s=1200.0)
    assert (d.outcome, d.reason) == ("not measured", "the time left held no compiled finalist")
    assert d.text() == ("compile (default): not measured: the time left held no compiled "
                        "finalist; --time-budget 1,200 would measure it -> eager answer")


def test_recompiles_and_fallbacks_are_recorded_never_as_a_compiled_rate():
    rows = rounds([100.0, 102.0, 99.0], [150.0, 151.0, 149.0], [30.0, 5.0, 6.0])
    rows[5]["recompiles"] = 3            # round 2's compiled trial recompiled
    rows[8] = {**rows[8], "status": "error", "samples_per_sec": None, "compile_fallback": True,
               "error": "compile fell back to eager"}
    d = decision_of(rows)
    assert d.recompiles == 3 and d.fallbacks == 1 and d.speedup.pairs == 2
    assert "recompiled 3 times" in d.text() and "ran eagerly (not counted as compiled)" in d.text()
    only_fallbacks = [{**r, "status": "error", "samples_per_sec": None,
                       "compile_fallback": True} if r["compile"] == "default" else r for r in rows]
    none = decision_of(only_fallbacks)
    assert none.outcome == "not measured" and "recompile limit" in none.reason
    answer = winner.best(only_fallbacks)
    assert answer.knobs == EAGER and answer.compile.outcome == "not measured"


def test_a_pair_of_another_configuration_than_the_answer_says_so_and_the_answer_stays_eager():
    """The re-measurement chose a configuration other than the search's first-ranked (whose
    compiled twin it measured): the line gives that pair's figures, never a compiled answer."""
    faster = Knobs(batch_size=128)
    rows = FAST_ROUNDS + [row(20 + r, faster, 300.0 + r) for r in range(3)]
    answer = winner.best(rows)
    assert answer.knobs == faster
    assert (answer.compile.outcome, answer.compile.reason) == (
        "eager", "measured for another configuration")
    assert answer.compile.speedup.low > 1.0
    assert answer.compile.text().endswith(
        "measured for bs=64, the search's first-ranked, not the answer's configuration "
        "-> eager answer")


# ------------------------------------------------------------------------- the plan

def test_finalist_mode_takes_cuda_graphs_on_cuda_only():
    modes = ("off", "default", "reduce-overhead", "max-autotune")
    assert finalist_mode(modes, "cuda") == "reduce-overhead"
    assert finalist_mode(modes, "cpu") == "default"
    assert finalist_mode(("off", "default"), "cuda") == "default"
    assert finalist_mode(("off",), "cpu") is None


def test_a_time_budget_screens_eager_and_decides_compile_at_the_finalists(regression_data,
                                                                          tmp_path):
    """Under a time budget with finalists no compile mode is sampled, on CPU even where the
    space's CPU override holds compile off for the search; without finalists or without a
    budget the search samples the modes as before."""
    space = tmp_path / "compile.yaml"
    space.write_text("knobs:\n  batch_size: {low: 4, high: 64, log: true}\n"
                     "  compile: {choices: ['off', default, reduce-overhead]}\n"
                     "cpu:\n  compile: 'off'\n")
    options = RunOptions(workload="tests.fake_workloads:paced", data=str(regression_data),
                         device="cpu", results=str(tmp_path / "r"), time_budget_s=900,
                         space_file=str(space))
    cpu = make_plan(options)
    assert cpu.compile_at_finalists == "default"
    assert cpu.device_space.constants["compile"] == "off"
    cuda = make_plan(options, Resources("cuda", 1, 16))
    assert cuda.compile_at_finalists == "reduce-overhead"
    assert "compile" not in cuda.device_space.domains
    assert cuda.followup_share() >= replace(cuda, compile_at_finalists=None).followup_share()
    searched = make_plan(replace(options, confirm=0), Resources("cuda", 1, 16))
    assert searched.compile_at_finalists is None
    assert "reduce-overhead" in searched.device_space.domains["compile"].values
    assert make_plan(replace(options, time_budget_s=None, trials=6)).compile_at_finalists is None


def test_the_first_ranked_compiled_comes_right_after_it():
    assert with_compiled([FAST, BUSY], "default") == [FAST, FAST.replace(compile="default"),
                                                      BUSY]
    assert with_compiled([], "default") == []
    compiled = FAST.replace(compile="default")
    assert with_compiled([compiled, BUSY], "default") == [compiled, compiled.replace(compile="off"),
                                                           BUSY]


def test_a_compiled_reference_that_won_is_weighed_against_its_eager_self():
    """The finalists of a search a compiled reference won take its eager twin, and the answer
    is the compiled reference only where the pair says compile pays back."""
    top = with_compiled([COMPILED, Knobs(batch_size=8)], "default")
    assert top[:2] == [COMPILED, EAGER]
    slow = [dict(r, reference="recommended") if r["compile"] == "default" else r
            for r in SLOW_PAYBACK]
    answer = winner.best(slow)
    assert answer.knobs == EAGER and answer.compile.outcome == "eager"
    assert answer.compile.reason == "pay-back beyond the horizon"
    fast = [dict(r, reference="recommended") if r["compile"] == "default" else r
            for r in FAST_ROUNDS]
    assert winner.best(fast).knobs == COMPILED


def compile_plan(left: float | None) -> SimpleNamespace:
    plan = fake_plan(left=left, ceiling=False)
    plan.compile_at_finalists = "default"
    return plan


def drive(plan, rows: list[dict], configs, compiled: dict) -> list:
    """Run ``followups.rounds`` as the driver does: each trial appends its row before the next
    batch is planned; a compiled trial's row has ``compiled`` (its columns: compile_s, status)."""
    batches = []
    for batch in followups.rounds(plan, rows, configs, lambda kind, data: None):
        batches.append(batch)
        for knobs, ref in batch.configs:
            extra = compiled if knobs.compile != "off" else {}
            rows.append(make_row(len(rows), knobs, reference=ref, phase="remeasure", **extra))
    return batches


def test_the_finalists_include_the_compiled_one_when_the_time_left_holds_its_rounds():
    """The compiled twin of the first-ranked is priced cold (COMPILE_NEEDS_CPU_S: no compile
    measured yet) in a first round of its own, then, from its row, warm from the run's compile
    cache (WARM_COMPILE_SHARE of the measured cold one) in the next; without the time for it
    the rounds leave it out and measure the eager ones."""
    rows = search_rows()
    top, configs = followups.remeasure_configs(compile_plan(None), rows)
    twin = BUSY.replace(compile="default")             # the recommended ranked first
    assert top[:3] == [BUSY, twin, FAST] and (twin, None) in configs
    plan = compile_plan(600.0)
    first, *later = batches = drive(plan, rows, configs, {"compile_s": 40.0})
    assert first.configs.count((twin, None)) == 1 and first.event["last_round"] == 1
    assert "round 1 of 3 (alone: the next are planned from its cold compile's time)" in (
        _phase_text(first.event))
    assert not later[0].event["compile_cold"]
    assert sum(b.configs.count((twin, None)) for b in batches) == 3
    cold = [p for p, c in zip(followups.batch_prices_s(plan, search_rows(), first),
                              first.configs) if c == (twin, None)]
    assert cold[0] > COMPILE_NEEDS_CPU_S["default"]
    measured = rows[:len(search_rows()) + len(first.configs)]
    warm = [p for p, c in zip(followups.batch_prices_s(plan, measured, later[0]),
                              later[0].configs) if c == (twin, None)]
    assert warm[0] == pytest.approx(cold[0] - COMPILE_NEEDS_CPU_S["default"]
                                    + WARM_COMPILE_SHARE * 40.0, rel=0.05)
    short = drive(compile_plan(100.0), search_rows(), configs, {"compile_s": 40.0})
    assert short and all(config != (twin, None) for b in short for config in b.configs)
    assert not short[0].event["compile_cold"]  # a compiled reference runs all its rounds
    compiled_refs = [(k.replace(compile="default") if ref else k, ref) for k, ref in configs]
    (whole,) = followups.rounds(compile_plan(None), search_rows(), compiled_refs[2:],
                                lambda kind, data: None)
    assert whole.event["last_round"] == 3 and not whole.event["compile_cold"]
    assert {config for config, _ in short[0].configs} == {BASE, BUSY}   # the references stay


def test_a_compiled_finalist_that_measured_nothing_is_not_measured_again():
    """A compile stopped at its own deadline (or refused, or fallen back to eager) leaves a row
    without a rate: the later rounds measure the eager finalists only."""
    rows = search_rows()
    _, configs = followups.remeasure_configs(compile_plan(None), rows)
    twin = BUSY.replace(compile="default")
    batches = drive(compile_plan(600.0), rows, configs,
                    {"status": "timeout", "sps": None, "compile_s": None})
    assert [b.configs.count((twin, None)) for b in batches] == [1, 0]
    assert sum(b.configs.count((BUSY, "recommended")) for b in batches) == 3


def test_a_compiled_trial_stops_at_its_own_deadline_the_others_at_the_runs():
    """Twice its price, or where later its price and the time its set-up check wants left
    for a compile (``tuner.budget.compile_refusal``): a warm compile priced at a few seconds
    is not refused at its set-up."""
    knobs = [BASE, BASE.replace(compile="default"), FAST]
    needs = {"default": 90.0}
    ends = compile_deadlines(1000.0, 1500.0, knobs, [10.0, 100.0, 10.0], needs)
    assert ends == [None, 1000.0 + 10.0 + COMPILE_OVERRUN * 100.0, None]
    warm = compile_deadlines(1000.0, 1500.0, knobs, [10.0, 20.0, 10.0], needs)
    assert warm[1] == 1000.0 + 10.0 + 90.0 + 20.0
    assert compile_deadlines(1000.0, 1100.0, knobs, [10.0, 100.0, 10.0], needs)[1] == 1100.0
    plan = compile_plan(500.0)
    plan.settings.deadline_unix_s = 2000.0
    changes = with_deadlines(plan, knobs, [{}, {}, {"max_steady_probes": 0}], [8.5, 98.5, 8.5])
    cpu_needs_s = COMPILE_NEEDS_CPU_S["default"]      # the plan's CPU: its compile's prior
    assert changes == [{}, {"deadline_unix_s": 1500.0 + 10.0 + max(COMPILE_OVERRUN * 100.0,
                                                                   cpu_needs_s + 100.0)},
                       {"max_steady_probes": 0}]


def test_the_summary_says_what_budget_would_measure_a_compiled_finalist_it_left_out():
    rows = [r for r in FAST_ROUNDS if r["compile"] == "off"]
    plan = SimpleNamespace(compile_at_finalists="default", time_budget_s=900.0,
                           followup_share=lambda: 0.5, device="cpu", workload=None,
                           round_windows=2, remeasure_rounds=3, settings=SimpleNamespace(
                               windows=3, window_s=2.0, warmup_steps=1, max_steady_probes=0,
                               max_warmup_s=None))
    answer = winner.best(rows)
    assert answer.compile is None and answer.to_dict()["compile"] is None
    need_s = budget_to_measure_s(plan, rows, COMPILED)
    assert need_s >= 900 + (1 + 2 * WARM_COMPILE_SHARE) * COMPILE_NEEDS_CPU_S["default"] / 0.5
    line = summary.compile_line(answer, plan, rows)
    assert line == (f"compile (default): not measured: the time left held no compiled "
                    f"finalist; --time-budget {need_s:,.0f} would measure it -> eager answer")
    assert summary.compile_line(answer, None, rows) is None   # compile not at the finalists
    # a compiled reference's rounds are not the compiled finalist's (chargpt's recommended)
    with_ref = rows + [row(30 + r, Knobs(batch_size=16, compile="default"), 50.0,
                           compile_s=20.0, reference="recommended") for r in range(3)]
    assert summary.compile_line(winner.best(with_ref), plan, with_ref).startswith(
        "compile (default): not measured: the time left held no compiled finalist")
    # no round ran at all: the budget named holds the winner's and the references' rounds too
    searched = [{**r, "phase": "search"} for r in rows[:2]]
    line = summary.compile_line(winner.best(searched), plan, searched)
    need_all_s = budget_to_measure_s(plan, searched, COMPILED, [EAGER, Knobs(batch_size=8)])
    assert need_all_s > budget_to_measure_s(plan, searched, COMPILED)
    assert f"--time-budget {need_all_s:,.0f} would measure it" in line


def test_the_summary_prints_the_pay_back_under_the_table():
    out = io.StringIO()
    console = Console(file=out, width=200)
    summary.print_best(console, FAST_ROUNDS, SimpleNamespace(workload="fake", scale="tiny"))
    printed = out.getvalue()
    assert winner.best(FAST_ROUNDS).compile.text() in printed
    assert "-> compiled answer" in printed


def test_a_compiled_answer_no_round_weighed_is_never_called_eager():
    """chargpt's compiled recommended reference won the search and no round ran (a 507-s cold
    compile on a loaded host): the line says what budget would weigh it and that the answer
    compiles as measured, never '-> eager answer' beside a compiled answer."""
    plan = SimpleNamespace(compile_at_finalists="default", time_budget_s=900.0,
                           followup_share=lambda: 0.2, device="cpu", workload=None,
                           round_windows=2, remeasure_rounds=3, settings=SimpleNamespace(
                               windows=3, window_s=2.0, warmup_steps=1, max_steady_probes=0,
                               max_warmup_s=None, deadline_unix_s=None))
    rows = [{**row(0, Knobs(batch_size=8), 80.0, reference="baseline"), "phase": "search"},
            {**row(1, COMPILED, 120.0, compile_s=500.0, reference="recommended"),
             "phase": "search"}]
    answer = winner.best(rows)
    assert answer.knobs == COMPILED and answer.compile is None
    line = summary.compile_line(answer, plan, rows)
    assert line.startswith("compile (default): not measured: the time left held no compiled "
                           "finalist; --time-budget ")
    assert line.endswith("-> the answer compiles as measured, its pay-back not weighed "
                         "against its eager self") and "eager answer" not in line
