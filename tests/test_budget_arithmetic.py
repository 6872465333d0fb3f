"""The time-budget arithmetic (``tuner.budget``) as pure functions (the old import paths of the
names that moved into ``tuner.budget``: tests/test_deprecations.py)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

import tuner.budget as budget
import tuner.costs as costs
from tuner.knobs import Knobs

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def search_row(knobs: Knobs, wall_s: float, **extra) -> dict:
    return {"phase": "search", "started_at": T0, "finished_at": T0 + dt.timedelta(seconds=wall_s),
            **knobs.to_dict(), **extra}


def test_the_default_budget_depends_on_the_device_and_a_trial_count():
    assert budget.default_time_budget_s("cuda", None) == budget.DEFAULT_CUDA_TIME_BUDGET_S
    assert budget.default_time_budget_s("cuda", 10) == budget.DEFAULT_CUDA_TIME_BUDGET_S
    assert budget.default_time_budget_s("cpu", None) == budget.DEFAULT_CPU_TIME_BUDGET_S
    assert budget.default_time_budget_s("cpu", 10) is None


def test_the_budget_counts_from_launch_or_from_at_most_plan_age_ago():
    assert budget.budget_start(None, False, now=500.0) == 500.0
    assert budget.budget_start(100.0, True, now=500.0) == 100.0
    assert budget.budget_start(100.0, False, now=500.0) == 500.0 - budget.PLAN_AGE_S
    assert budget.budget_start(480.0, False, now=500.0) == 480.0


@pytest.mark.parametrize("kwargs, share", [
    (dict(remeasured=0, ceilings=0, trials=12), 0.0),                    # no follow-ups
    (dict(remeasured=5, ceilings=4, trials=None), budget.FOLLOWUP_SHARE),  # no trial count
    (dict(remeasured=5, ceilings=4, trials=12), budget.MAX_FOLLOWUP_SHARE),
    (dict(remeasured=0, ceilings=4, trials=1000), budget.FOLLOWUP_SHARE),
    # 5 configurations x 3 rounds, each weighing (2 + 2) / (2 x 2) = 1 search trial, + 4
    (dict(remeasured=5, ceilings=4, trials=40), 19 / (19 + 40)),
])
def test_the_followup_share_weighs_their_trials_against_the_search(kwargs, share):
    got = budget.followup_share(windows=2, round_windows=2, rounds=3, **kwargs)
    assert got == pytest.approx(share)


def test_a_short_budget_keeps_a_bounded_share_for_the_followups():
    assert budget.max_followup_share(None) == budget.MAX_FOLLOWUP_SHARE
    assert budget.max_followup_share(budget.FULL_SHARE_BUDGET_S) == budget.MAX_FOLLOWUP_SHARE
    assert budget.max_followup_share(1800.0) == budget.MAX_FOLLOWUP_SHARE
    assert budget.max_followup_share(0.0) == budget.FOLLOWUP_SHARE
    assert budget.max_followup_share(60.0) == pytest.approx(0.2 + 0.3 * 60 / 210)
    # the 60-s quick run on an H200: 3 trials, 4 ceilings kept 0.5 of the budget; now 0.29
    quick = dict(trials=3, windows=5, round_windows=4, remeasured=0, rounds=3, ceilings=4)
    assert budget.followup_share(**quick) == budget.MAX_FOLLOWUP_SHARE
    assert budget.followup_share(**quick, budget_s=60.0) == pytest.approx(0.2 + 0.3 * 60 / 210)
    assert budget.followup_share(**quick, budget_s=1800.0) == budget.MAX_FOLLOWUP_SHARE


def test_the_search_gets_the_time_left_less_the_followups_share_of_it():
    # what ran before (plan, Ray, probe, a trial process) is not taken from the search again
    assert budget.search_time_s(100.0, 0.2, 200.0) == pytest.approx(80.0)
    assert budget.search_time_s(10.0, 0.5, 200.0) == pytest.approx(5.0)
    assert budget.search_time_s(0.0, 0.5, 200.0) == 0.0
    assert budget.search_time_s(None, 0.2, 200.0) is None
    assert budget.search_time_s(100.0, 0.2, None) is None


def test_the_budget_is_split_at_the_time_left_when_it_is_split():
    assert budget.split_deadline_unix_s(1000.0, 1100.0, 0.2) == pytest.approx(1080.0)
    assert budget.split_deadline_unix_s(1000.0, 1100.0, 0.0) == pytest.approx(1100.0)
    assert budget.split_deadline_unix_s(1200.0, 1100.0, 0.2) == 1200.0  # passed already


def test_a_phase_starts_only_with_the_least_time_it_needs():
    assert budget.has_time(None) and budget.has_time(budget.MIN_PHASE_S)
    assert not budget.has_time(budget.MIN_PHASE_S - 0.01)
    assert budget.tune_time_budget_s(None) is None
    assert budget.tune_time_budget_s(10.0) == 10.0 + budget.TUNE_STOP_GRACE_S


def test_a_trial_costs_its_search_trials_set_up_plus_the_new_windows():
    knobs = Knobs(batch_size=16)
    rows = [search_row(knobs, 6.0, measured_s=2.0, step_time_ms_p50=100.0, first_step_s=0.1,
                       warmup_s=0.1)]
    # 6 s of wall time less 2 s measured, 3 windows of 1 s, the overhead
    assert costs.trial_cost_s(rows, knobs, 3, 1.0) == pytest.approx(
        4 + 3 + costs.TRIAL_OVERHEAD_S
    )
    # a batch four times larger: the step in its first step and its windows' steps scaled up
    # (samples/sec held from one row), windows of whole steps; the rest as measured
    big = Knobs(batch_size=64)
    assert costs.trial_cost_s(rows, big, 3, 0.2) == pytest.approx(
        0.4 + 3 * 0.4 + 3.9 + costs.TRIAL_OVERHEAD_S)
    # its first step beyond a step (worker start, cuDNN autotuning) is paid once: not scaled
    rows[0].update(first_step_s=0.75, warmup_s=0.75)
    assert costs.trial_cost_s(rows, big, 3, 0.2) == pytest.approx(
        0.65 + 0.4 + 3 * 0.4 + 3.25 + costs.TRIAL_OVERHEAD_S)
    assert costs.trial_cost_s([], big, 3, 1.0) == 3 + costs.PRIOR_ONCE_S + costs.TRIAL_OVERHEAD_S
    assert budget.trials_fit(None, [1e9]) and budget.trials_fit(10.0, [4.0, 6.0])
    assert not budget.trials_fit(9.9, [4.0, 6.0])


def test_the_machine_compute_ceiling_is_costed_without_scaling_a_one_off_first_step():
    # ddpm on an H200: the recommended (bs=32) took 23.2 s, 12.2 s of them its first step
    # (cuDNN autotuning); its machine-compute ceiling at bs=384 was costed ~162 s, and took
    # 11-13 s in other runs.
    recommended = Knobs(batch_size=32)
    rows = [search_row(recommended, 23.22, measured_s=10.12, setup_s=0.14, first_step_s=12.19,
                       warmup_s=12.52, step_time_ms_p50=45.0)]
    cost = costs.trial_cost_s(rows, Knobs(batch_size=384), 5, 2.0)
    # set-up and the first step beyond a step as measured, one step of 12 x 45 ms in it, each
    # window of 2 s holding four whole steps, what followed the row's windows
    assert cost == pytest.approx(0.14 + 12.145 + 0.54 + 5 * 4 * 0.54 + 0.44
                                 + costs.TRIAL_OVERHEAD_S)
    assert cost < 30.0


def test_a_first_window_needs_the_one_offs_once_the_scaled_steps_and_one_window():
    assert costs.first_window_need_s(once_s=1.5, warm_s=0.5, step_s=0.5, scale=2.0,
                                      compile_s=10.0, window_s=0.5) == pytest.approx(
        1.5 + 1.0 + 10.0 + 1.0)
    # the H200 search proposal bs=45 refused by 0.54 s (19.80 s needed, 19.26 s left), from
    # the recommended at bs=32: set-up 0.14 s, a 12.19-s first step, 0.33 s more warm-up
    need_s = costs.first_window_need_s(once_s=0.14 + 12.19, warm_s=0.33, step_s=0.045,
                                        scale=45 / 32, compile_s=0.0, window_s=2.0)
    assert need_s == pytest.approx(14.79, abs=0.01) and need_s < 19.26


def test_a_compile_is_refused_without_the_time_it_needs():
    hinted = SimpleNamespace(compile_s_hint=20.0)
    assert budget.compile_needs_s("default", hinted, "cuda") == 20.0 * budget.COMPILE_MARGIN
    assert budget.compile_needs_s("default", hinted, "cpu") == budget.COMPILE_NEEDS_CPU_S["default"]
    assert budget.compile_needs_s("max-autotune", hinted, "cuda") == 600.0
    assert budget.compile_refusal("off", hinted, "cuda", 0.0) is None
    assert budget.compile_refusal("default", hinted, "cuda", None) is None
    assert budget.compile_refusal("default", hinted, "cuda", 25.0) is None
    assert budget.compile_refusal("default", hinted, "cuda", 24.0) == (
        "set-up: torch.compile mode=default was not started (it needs about 25 s; 24 s were left)")
    with pytest.raises(KeyError):
        budget.compile_needs_s("fastest", hinted, "cuda")


@pytest.mark.parametrize("run_deadline, step_ms, grace", [
    (None, 5_000, budget.OVERDUE_S),          # the run's own deadline: no step grace
    (150.0, None, budget.OVERDUE_S),          # no step measured (a compile)
    (150.0, 100, budget.OVERDUE_S),           # short steps
    (150.0, 5_000, 7.5),                      # STEP_GRACE steps
    (150.0, 20_000, budget.STEP_GRACE_MAX_S),
    (103.0, 5_000, 3.0),                      # never past the run's deadline
])
def test_a_trial_past_its_deadline_is_killed_after_its_grace(run_deadline, step_ms, grace):
    assert budget.kill_at_unix_s(100.0, run_deadline, step_ms) == pytest.approx(100.0 + grace)
