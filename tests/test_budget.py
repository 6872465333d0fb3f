"""The hard time budget and early stopping: a trial stops at its deadline keeping
the windows it finished, warm-up is capped in time, the early-stopping rule stops clearly
slower searched trials and never a reference, and the sampler learns from a stopped trial.
(Whole runs under a budget on Ray: tests/test_budget_runs.py.)"""

from __future__ import annotations

import time
from dataclasses import replace

import optuna
import pytest

from tests.fake_workloads import ClockedPaced, StepClock, paced
from tuner.budget import (
    BUDGET_GRACE_S,
    COMPILE_TRIALS_IN_SEARCH,
    DEFAULT_CPU_TIME_BUDGET_S,
    DEFAULT_CUDA_TIME_BUDGET_S,
    FOLLOWUP_SHARE,
    MAX_FOLLOWUP_SHARE,
    PLAN_AGE_S,
)
from tuner.costs import PRIOR_ONCE_S, CostModel, TrialShape
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.plan import Resources
from tuner.pruning import MIN_MARGIN, EarlyStopping
from tuner.search_policy import SCREENED_TRIALS_FACTOR
from tuner.searcher import ConstrainedSearch, SearchSpec
from tuner.settings import RunOptions, TrialSettings
from tuner.space import load_space
from tuner.status import budget_stopped
from tuner.trial.harness import run_trial

PACED = "tests.fake_workloads:paced"


@pytest.fixture
def settings(regression_data) -> TrialSettings:
    return TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data), windows=3,
                         window_s=0.25, warmup_steps=2, breakdown_steps=0)


@pytest.fixture
def paced_space(tmp_path) -> str:
    """Batch 4, 5 and 6 are 5x, 4x and 3.3x slower than 20; 32 has a 15 s first step."""
    path = tmp_path / "paced.yaml"
    path.write_text("knobs:\n  batch_size: {choices: [4, 5, 6, 20, 32]}\n  num_workers: 0\n")
    return str(path)


# ------------------------------------------------------------------------- in the trial

@pytest.fixture
def clock(step_clock) -> StepClock:
    """The harness's and the stopwatches' clock, moved only by a ``ClockedPaced`` trial's
    steps: its deadlines and caps fall at exact steps however busy the machine is."""
    return step_clock


def test_a_trial_stops_at_its_deadline_keeping_the_windows_it_finished(settings, clock):
    """On a clock only the steps move (0.05 s each): a trial due to run 40 windows of 0.25 s
    stops at the first step boundary past a deadline 4 s away, with the windows it finished."""
    workload = ClockedPaced(clock)
    # Past the deadline before it starts: recorded with nothing measured, not run.
    late = run_trial(workload, Knobs(batch_size=20),
                     replace(settings, deadline_unix_s=clock.time()))
    assert late["status"] == "timeout" and late["samples_per_sec"] is None
    assert late["windows"] == 0 and "set-up" in late["error"]
    assert clock.now == 0.0                                    # not a step run
    reports = []
    deadline = clock.time() + 4.0
    result = run_trial(workload, Knobs(batch_size=20),
                       replace(settings, windows=40, deadline_unix_s=deadline),
                       report=reports.append)
    # Stopped at a step boundary past it, not after the 40 windows' 10 s.
    assert deadline <= clock.time() < deadline + workload.STEP_S + 1e-9
    assert result["status"] == "timeout", result.get("error")
    assert 12 <= result["windows"] <= 15                       # 4 s less warm-up, 0.25-s windows
    assert "time budget" in result["error"] and "of 40 windows" in result["error"]
    # a measurement over fewer windows than planned, which may be the answer
    assert result["windows_planned"] == 40 and budget_stopped(result)
    assert late["windows_planned"] == 3 and not budget_stopped(late)
    # The finished windows' median: 20 samples per step of 0.05 s.
    assert result["samples_per_sec"] == pytest.approx(400)
    assert 0 < result["first_step_s"] <= result["warmup_s"]
    assert result["step_time_ms_p50"] == pytest.approx(50) and result["samples_per_sec_cv"] < 1e-6
    assert reports[-1] == result
    assert all(r["status"] == "running" for r in reports[:-1])


def test_warm_up_stops_at_its_time_cap(settings, clock):
    """200 warm-up steps of 0.05 s would take 10 s; the cap ends warm-up after 0.5 s (on a
    clock only the steps move)."""
    capped = run_trial(ClockedPaced(clock), Knobs(batch_size=20),
                       replace(settings, warmup_steps=200, max_warmup_s=0.5, windows=1))
    assert capped["status"] == "ok", capped.get("error")
    # the cap, then the half-window probes that judge a one-window trial's steady state
    assert 0.45 <= capped["warmup_s"] - capped["first_step_s"] < 1.0     # 10 s uncapped
    assert capped["windows"] == 1 and capped["samples_per_sec"] == pytest.approx(400)


# ------------------------------------------------------------------ the early-stop rule

def _window(index: int, rate: float, median: float | None = None) -> dict:
    return {"status": "running", "window": index, "window_samples_per_sec": rate,
            "samples_per_sec": rate if median is None else median}


def test_early_stopping_stops_clearly_slower_trials_and_never_a_reference():
    rule = EarlyStopping("samples_per_sec", "max", windows=3)
    # Nothing stops before the noise is known (no trial has two windows yet).
    assert not rule.decide("first", False, _window(0, 80.0))
    for i, rate in enumerate((400.0, 404.0, 398.0)):      # the fast reference
        assert not rule.decide("fast-ref", True, _window(i, rate))
    for i, rate in enumerate((80.0, 81.0, 79.5)):         # 5x slower, but a reference
        assert not rule.decide("slow-ref", True, _window(i, rate))
    assert rule.noise() is not None and rule.noise() < 0.02
    assert rule.margin() == pytest.approx(MIN_MARGIN)       # quiet windows: the floor
    assert rule.decide("slow", False, _window(0, 80.0))     # 5x slower: stopped at once
    assert not rule.decide("close", False, _window(0, 380.0))  # within the margin: runs on
    assert not rule.decide("close", False, _window(1, 370.0, median=375.0))
    # After its last window nothing is saved by stopping: it finishes as measured.
    assert not rule.decide("late", False, _window(2, 80.0))
    # A final result (not a window's report) is never a reason to stop.
    assert not rule.decide("done", False, {"status": "ok", "samples_per_sec": 1.0})


def test_a_follow_up_trial_of_the_runs_one_experiment_is_never_judged():
    """The search and its follow-ups share one Ray Tune experiment, and so this scheduler: a
    re-measurement or a ceiling is measured whole, and adds nothing to the best or the noise
    (a compute-only ceiling is no configuration's rate)."""
    from types import SimpleNamespace

    from ray.tune.schedulers import TrialScheduler
    rule = EarlyStopping("samples_per_sec", "max", windows=3)
    search = SimpleNamespace(trial_id="s", config={"phase": "search", "reference": None})
    for i, rate in enumerate((400.0, 404.0, 398.0)):
        assert rule.on_trial_result(None, search, _window(i, rate)) == TrialScheduler.CONTINUE
    ceiling = SimpleNamespace(trial_id="c", config={"phase": "ceiling", "reference": None})
    for i, rate in enumerate((4000.0, 9000.0, 2000.0)):                # never the best
        assert rule.on_trial_result(None, ceiling, _window(i, rate)) == TrialScheduler.CONTINUE
    slow = SimpleNamespace(trial_id="r", config={"phase": "remeasure", "reference": None})
    assert rule.on_trial_result(None, slow, _window(0, 40.0)) == TrialScheduler.CONTINUE
    assert rule.noise() < 0.02 and rule.stopped == []
    behind = SimpleNamespace(trial_id="b", config={"phase": "search", "reference": None})
    assert rule.on_trial_result(None, behind, _window(0, 80.0)) == TrialScheduler.STOP


def test_a_long_step_trial_is_judged_on_its_warm_up_step_with_a_stricter_margin():
    """Steps of seconds (a large batch on a CPU) report their last warm-up step as window -1:
    far behind the best it stops before any window; it never becomes the best nor noise."""
    rule = EarlyStopping("samples_per_sec", "max", windows=3)
    assert not rule.decide("early", False, _window(-1, 1.0))   # no best, no noise yet: runs
    for i, rate in enumerate((400.0, 404.0, 398.0)):
        rule.decide("ref", True, _window(i, rate))
    assert rule.margin() == pytest.approx(MIN_MARGIN)
    noise = rule.noise()
    assert rule.decide("huge-batch", False, _window(-1, 40.0))     # 10x behind: stopped
    # 1.15x behind is beyond one margin (a window would stop) but not two: one step is noisy.
    assert not rule.decide("big-batch", False, _window(-1, 400.0 / 1.15))
    assert rule.decide("big-batch", False, _window(0, 400.0 / 1.15))
    assert not rule.decide("ref2", True, _window(-1, 1.0))         # a reference: never
    rule.decide("fast", False, _window(-1, 4000.0))                 # not a best from one step
    assert rule.gap(400.0) == pytest.approx(0.0, abs=0.02) and rule.noise() == noise


def test_windows_still_settling_are_judged_like_a_warm_up_step_and_dropped_from_noise():
    """With the steady state judged from the windows, a trial's first window may be a
    transient it drops once all its windows are in: a slow one (workers starting) must not
    stop a trial only one margin behind, a fast one (a prefetched queue draining) must not make
    the best, and once dropped it leaves the noise."""
    rule = EarlyStopping("samples_per_sec", "max", windows=3)
    for i, rate in enumerate((400.0, 404.0, 398.0)):
        rule.decide("ref", True, _window(i, rate))
    noise = rule.noise()
    settling = {"window_settling": True}
    slow = 400.0 / 1.15                           # beyond one margin, not two
    assert rule.decide("unsettled", False, _window(1, slow))           # no settling: one margin
    assert not rule.decide("slow-start", False, {**_window(0, slow), **settling})
    # its second window is at the best's rate: the first was a transient, it runs on
    assert not rule.decide("slow-start", False, {**_window(1, 400.0, median=370.0), **settling})
    rule.decide("slow-start", False, {**_window(2, 401.0, median=400.0), "windows_dropped": 1})
    assert rule.decide("far-behind", False, {**_window(0, 40.0), **settling})
    rule.decide("burst", False, {**_window(0, 4000.0), **settling})     # not a best
    rule.decide("burst", False, {**_window(1, 410.0, median=2205.0), **settling})
    assert rule.gap(400.0) == pytest.approx(0.0, abs=0.02)
    rule.decide("burst", False, _window(2, 405.0, median=410.0))       # all in: the median
    assert rule.noise() > 3 * noise                                     # the burst counts ...
    rule.decide("burst", False, {**_window(3, 408.0, median=408.0), "windows_dropped": 1})
    assert rule.noise() < 2 * noise                                     # ... until dropped


def test_a_settling_trial_whose_fastest_window_is_behind_stops_at_its_second_window():
    """From its second window on, a trial whose windows may still hold a transient is judged
    on its fastest window against one margin: slow in both windows, it stops there (it would
    have run to its end under the two-margin rule); fast in one of them, it runs on."""
    rule = EarlyStopping("samples_per_sec", "max", windows=3)
    for i, rate in enumerate((400.0, 404.0, 398.0)):
        rule.decide("ref", True, _window(i, rate))
    settling = {"window_settling": True}
    slow = 400.0 / 1.15                           # beyond one margin, not two
    assert not rule.decide("slow", False, {**_window(0, slow), **settling})
    assert rule.decide("slow", False, {**_window(1, slow * 1.01, median=slow), **settling})
    assert not rule.decide("one-fast", False, {**_window(0, 395.0), **settling})
    assert not rule.decide("one-fast", False, {**_window(1, slow, median=371.0), **settling})
    # never after the last window, never a reference, and time-to-train keeps two margins
    assert not rule.decide("ref2", True, {**_window(0, slow), **settling})
    assert not rule.decide("ref2", True, {**_window(1, slow), **settling})
    ttt = EarlyStopping("time_to_train_s", "min", windows=3)
    for i in range(3):
        ttt.decide("ref", True, {**_window(i, 400.0), "time_to_train_s": 100.0 + i})
    assert not ttt.decide("slow", False, {**_window(0, slow), "time_to_train_s": 115.0, **settling})
    assert not ttt.decide("slow", False, {**_window(1, slow), "time_to_train_s": 115.0, **settling})


def test_windows_of_whole_long_steps_leave_the_noise_to_the_other_trials():
    """A trial whose windows are whole long steps (ddpm at batch 232 on a 2-core VM: three
    one-step windows, CV 0.27, a transient kept) leaves the noise pooled over the other
    trials, which it would double, and the margin with it."""
    rule = EarlyStopping("samples_per_sec", "max", windows=3)
    long = {"windows_long": True}
    for i, rate in enumerate((30.0, 40.0, 45.0)):                   # the long one, alone
        rule.decide("bs232", True, {**_window(i, rate), **long})
    alone = rule.noise()
    assert alone == pytest.approx(0.209, abs=0.002)               # no other: it counts
    for i, rate in enumerate((400.0, 404.0, 398.0)):
        rule.decide("ref", True, _window(i, rate))
    assert rule.noise() < 0.02 and rule.margin() == pytest.approx(MIN_MARGIN)
    # a long-step trial is still judged, against the margin the other trials give
    assert rule.decide("bs256", False, {**_window(0, 200.0), **long})
    assert not rule.decide("bs128", False, {**_window(0, 380.0), **long})


def test_a_trial_of_long_steps_reports_its_warm_up_step_before_any_window(settings, clock):
    """Steps of 0.05 s (on a clock only the steps move) are as long as a 0.05-s window: the
    warm-up step's rate is reported first; steps shorter than half a window report none."""
    reports = []
    result = run_trial(ClockedPaced(clock), Knobs(batch_size=20), replace(settings, window_s=0.05),
                       report=reports.append)
    assert result["status"] == "ok", result.get("error")
    early = [r for r in reports if r.get("window") == -1]
    assert len(early) == 1 and reports[0] is early[0]              # first, before the windows
    assert early[0]["status"] == "running" and early[0]["window_samples_per_sec"] is None
    assert early[0]["samples_per_sec"] == pytest.approx(20 / paced.STEP_S)
    quick = []  # steps shorter than half a window
    run_trial(ClockedPaced(clock), Knobs(batch_size=20), replace(settings, window_s=1.0),
              report=quick.append)
    assert not [r for r in quick if r.get("window") == -1]


def test_the_margin_grows_with_the_noise_and_works_for_a_min_objective():
    rule = EarlyStopping("time_to_train_s", "min", windows=4)
    for i, (rate, ttt) in enumerate(((100.0, 50.0), (110.0, 48.0), (92.0, 52.0))):
        rule.decide("ref", True, {**_window(i, rate), "time_to_train_s": ttt})
    # Windows with a CV of ~9 %: 2 x 3 x 0.09, a margin of ~0.53 (a ratio of 1.7).
    assert rule.margin() == pytest.approx(0.53, abs=0.03)
    # 2x slower to train is beyond even that margin; 1.2x is not.
    assert rule.decide("slow", False, {**_window(0, 50.0), "time_to_train_s": 100.0})
    assert not rule.decide("near", False, {**_window(0, 90.0), "time_to_train_s": 60.0})


def test_a_stopped_trial_is_told_to_the_sampler_as_its_partial_measurement(paced_space):
    space = load_space(paced_space, is_file=True).for_device("cpu", max_workers=2, max_batch=64)
    search = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                          sampler="random"))
    search.suggest("pruned")
    search.on_trial_complete("pruned", {"status": "running", "window": 0,
                                        "samples_per_sec": 80.0, "windows": 1.0})
    search.suggest("nothing")
    search.on_trial_complete("nothing", {"status": "timeout", "samples_per_sec": None})
    pruned, nothing = search.study.trials
    # GPSampler learns from COMPLETE trials only: a pruned trial is one, with its median.
    assert pruned.state == optuna.trial.TrialState.COMPLETE and pruned.value == 80.0
    assert nothing.state == optuna.trial.TrialState.FAIL        # nothing measured
    # Past the search's deadline nothing more is suggested.
    late = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                        sampler="random", deadline_unix_s=time.time() - 1))
    assert late.suggest("t") == "FINISHED"


def test_a_proposal_whose_first_window_would_end_past_the_deadline_is_not_started(paced_space,
                                                                                   monkeypatch):
    """A default CPU run started batch 256 with 15 s of its search left: set-up and one 5.8-s
    step measured nothing before the budget stopped it. A proposal is costed from the finished
    trial nearest in batch size (batch 4: 0.1 s steps, 1.5 s of set-up paid once), its steps
    scaled to the batch: at batch 20 that is 1.5 s, a first step of 0.5 s and a window of
    0.5 s (one warm-up step: no more warm-up). The searcher's clock stands still (a fixed
    ``time`` in tuner.searcher), so the time left is exact however slow the machine is."""
    from types import SimpleNamespace

    from tuner import searcher
    time = SimpleNamespace(time=lambda: 1.8e9)
    monkeypatch.setattr(searcher, "time", time)
    space = load_space(paced_space, is_file=True).for_device("cpu", max_workers=2, max_batch=64)

    def search(left_s: float) -> ConstrainedSearch:
        one = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                           sampler="random", window_s=0.25,
                                           deadline_unix_s=time.time() + left_s))
        one.suggest("first")
        one._configs["first"]["batch_size"] = 4
        one.on_trial_complete("first", {"status": "ok", "samples_per_sec": 40.0,
                                        "step_time_ms_p50": 100.0, "setup_s": 1.5,
                                        "warmup_s": 0.5})
        price = one.price(Knobs(batch_size=20))
        assert (price.setup_s, price.warmup_s, price.one_off_s) == (2.0, 0.0, 0.0)
        assert price.first_window_s == pytest.approx(2.5)
        return one

    def fits(one: ConstrainedSearch, batch_size: int) -> bool:
        return one._first_window_fits(Knobs(batch_size=batch_size))

    assert fits(search(60.0), 20) and fits(search(60.0), 4)
    assert fits(search(2.0), 4) and not fits(search(2.0), 20)
    assert fits(search(2.5), 20) and not fits(search(2.4), 20)
    short = search(2.0)                       # batch 10 or less fits: 4, 5, 6 of the space
    answers = [short.suggest(f"t{i}") for i in range(8)]
    finished = answers.index("FINISHED")      # the first proposal of batch 20 or 32
    assert all(a["batch_size"] <= 6 for a in answers[:finished])
    assert set(answers[finished:]) == {"FINISHED"}                 # and nothing after it
    told = [t.params["batch_size"] for t in short.study.trials
            if t.state == optuna.trial.TrialState.FAIL]
    assert len(told) == 1 and told[0] >= 20                        # the sampler learns nothing
    no_deadline = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec",
                                               mode="max", sampler="random"))
    assert no_deadline._first_window_fits(Knobs(batch_size=10_000))


def test_a_compile_is_costed_for_compiled_proposals_only(paced_space):
    """The ddpm U-Net's first compiled step takes ~80 s on an H100: that trial's warm-up is no
    guide to an uncompiled proposal at a batch near it (which would end the search), and is
    one to the next proposal compiling in that mode."""
    space = load_space(paced_space, is_file=True).for_device("cpu", max_workers=2, max_batch=64)
    search = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                          sampler="random", window_s=0.25,
                                          deadline_unix_s=time.time() + 30.0))
    search.suggest("compiled")
    search._configs["compiled"]["batch_size"] = 8
    search.on_trial_complete("compiled", {
        "status": "ok", "samples_per_sec": 80.0, "step_time_ms_p50": 100.0, "setup_s": 1.0,
        "warmup_s": 81.0, "first_step_s": 80.1, "compile": "default", "compile_s": 80.0})
    compiled = Knobs(batch_size=8, compile="default")
    price = search.price(compiled)
    assert (price.setup_s, price.warmup_s, price.one_off_s) == (    # one warm-up step
        pytest.approx(1.1), 0.0, 80.0)
    assert search._first_window_fits(Knobs(batch_size=8))
    assert search._first_window_fits(compiled.replace(compile="reduce-overhead"))
    assert not search._first_window_fits(compiled)
    # A trial stopped between windows carries no compile_s: its first step tells it.
    pruned = CostModel([{"batch_size": 8, "step_time_ms_p50": 100.0, "setup_s": 1.0,
                         "warmup_s": 50.5, "first_step_s": 50.1, "compile": "reduce-overhead"}])
    price = pruned.price(compiled.replace(compile="reduce-overhead"), TrialShape(1, 0.25))
    assert (price.setup_s, price.warmup_s, price.one_off_s) == (
        pytest.approx(1.1), 0.0, pytest.approx(50.0))


def test_a_one_off_first_step_is_not_scaled_to_a_larger_batch(paced_space, monkeypatch):
    """ddpm on an H200: the recommended (bs=32) had a 12.19-s first step (cuDNN autotuning at
    new shapes), 0.14 s of set-up and 0.33 s more warm-up; the proposal bs=45 was refused by
    0.54 s with 19.26 s left, its first step scaled by 45/32. Its one-offs priced once, the
    step in its first step and its window's steps scaled, it needs ~14.4 s."""
    from types import SimpleNamespace

    from tuner import searcher
    monkeypatch.setattr(searcher, "time", SimpleNamespace(time=lambda: 1.8e9))
    space = load_space(paced_space, is_file=True).for_device("cpu", max_workers=2, max_batch=64)
    search = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                          sampler="random", window_s=2.0,
                                          deadline_unix_s=1.8e9 + 19.26))
    search.costs.add({"batch_size": 32, "step_time_ms_p50": 45.0, "setup_s": 0.14,
                      "first_step_s": 12.19, "warmup_s": 12.52})
    assert search._first_window_fits(Knobs(batch_size=45))
    assert not search._first_window_fits(Knobs(batch_size=45), deadline_unix_s=1.8e9 + 14.3)


def test_the_search_keeps_the_followups_share_of_what_is_left_once_a_trial_measured(
        paced_space, monkeypatch):
    """The references run to the run's deadline; the search's own trials end where the
    follow-ups' share of the time left at the first measurement begins. The start-up spent
    before (plan, Ray, probe, the trial process) is not taken from the search again."""
    from types import SimpleNamespace

    from tuner import searcher
    clock = SimpleNamespace(now=1.8e9)
    monkeypatch.setattr(searcher, "time", SimpleNamespace(time=lambda: clock.now))
    space = load_space(paced_space, is_file=True).for_device("cpu", max_workers=2, max_batch=64)
    refs = (("baseline", {"batch_size": 4}, Knobs(batch_size=4)),
            ("recommended", {"batch_size": 20}, Knobs(batch_size=20)))
    run_deadline = 1.8e9 + 60.0
    search = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                          sampler="random", window_s=0.25, references=refs,
                                          deadline_unix_s=run_deadline, followup_share=0.25))
    assert search.deadline_unix_s() == run_deadline          # nothing measured: no split
    clock.now += 20.0                                         # the start-up ran
    first = search.suggest("baseline")
    assert first["reference"] == "baseline"
    assert first["tuner"] == {"deadline_unix_s": run_deadline}
    assert first["priced_s"] == 0.25 + PRIOR_ONCE_S  # one window, the prior: no row yet
    clock.now += 8.0
    search.on_trial_complete("baseline", {"status": "ok", "samples_per_sec": 40.0,
                                          "step_time_ms_p50": 100.0, "setup_s": 1.0,
                                          "first_step_s": 0.5, "warmup_s": 0.5})
    split = 1.8e9 + 28.0 + 0.75 * 32.0                       # 32 s were left: 8 kept
    assert search.deadline_unix_s() == pytest.approx(split)
    second = search.suggest("recommended")                    # a reference: the run's deadline
    assert second["tuner"] == {"deadline_unix_s": run_deadline}
    search.on_trial_complete("recommended", {"status": "error"})
    third = search.suggest("searched")
    assert third["reference"] is None
    assert third["tuner"] == {"deadline_unix_s": pytest.approx(split)}
    clock.now = split
    assert search.suggest("late") == "FINISHED"


def test_a_reference_that_cannot_measure_a_window_before_the_runs_deadline_is_not_started(
        paced_space, monkeypatch):
    """A classifier run on an H200 started its recommended 2.86 s before the deadline: a
    2.3-s first step, no window. A reference is admitted as a search proposal is, against
    the run's deadline."""
    from types import SimpleNamespace

    from tuner import searcher
    clock = SimpleNamespace(now=1.8e9)
    monkeypatch.setattr(searcher, "time", SimpleNamespace(time=lambda: clock.now))
    space = load_space(paced_space, is_file=True).for_device("cpu", max_workers=2, max_batch=64)
    refs = (("baseline", {"batch_size": 4}, Knobs(batch_size=4)),
            ("recommended", {"batch_size": 20}, Knobs(batch_size=20)))
    search = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                          sampler="random", window_s=2.0, references=refs,
                                          deadline_unix_s=1.8e9 + 30.0))
    assert search.suggest("baseline")["reference"] == "baseline"
    search.on_trial_complete("baseline", {"status": "ok", "samples_per_sec": 40.0,
                                          "step_time_ms_p50": 100.0, "setup_s": 0.2,
                                          "first_step_s": 2.3, "warmup_s": 2.3})
    clock.now = 1.8e9 + 30.0 - 2.86        # 2.5 s of set-up and first step + a window: 4.5 s
    assert search.suggest("recommended") == "FINISHED"   # nor a searched batch: none fits
    assert search.skipped_references == ["recommended"]
    # the baseline, and a searched proposal told FAIL; the recommended was never asked
    assert [t.state for t in search.study.trials] == [optuna.trial.TrialState.COMPLETE,
                                                      optuna.trial.TrialState.FAIL]
    late = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                        sampler="random", window_s=2.0, references=refs,
                                        deadline_unix_s=1.8e9 + 1.0))
    assert late.suggest("baseline") == "FINISHED"   # not even one window left
    assert late.skipped_references == ["baseline", "recommended"]


# ------------------------------------------------------------------------------ the plan

def test_the_plan_carries_the_budget_and_a_default_on_cuda(regression_data, tmp_path,
                                                           monkeypatch):
    """The plan's clocks stand still (a fixed ``time`` in tuner.plan), so the time left and
    the trials' wall-clock deadline are exact however long the machine takes between reads."""
    from types import SimpleNamespace

    from tuner import plan as plan_module
    still = SimpleNamespace(monotonic=lambda: 5000.0, time=lambda: 1.8e9)
    monkeypatch.setattr(plan_module, "time", still)
    options = RunOptions(workload=PACED, data=str(regression_data), device="cpu",
                         results=str(tmp_path / "r"), time_budget_s=100)
    plan = make_plan(options)
    assert plan.time_budget_s == 100 and plan.time_left_s() is None   # not started yet
    started = plan.with_deadline(still.monotonic() + 100)
    assert started.time_left_s() == 100
    assert started.settings.deadline_unix_s == still.time() + 100
    # The follow-ups (re-measurement, ceilings) keep their share; without them, none.
    assert started.search_time_s() == pytest.approx(100 * (1 - FOLLOWUP_SHARE))
    bare = make_plan(replace(options, confirm=0, ceiling=False)).with_deadline(
        still.monotonic() + 100)
    assert bare.search_time_s() == 100
    # CPU: the default run (no --trials) ends within 4 minutes; asked for N trials, it runs them
    default = make_plan(replace(options, time_budget_s=None))
    assert default.time_budget_s == DEFAULT_CPU_TIME_BUDGET_S
    assert default.trials == 12 * SCREENED_TRIALS_FACTOR   # screened trials: a third the cost
    assert DEFAULT_CPU_TIME_BUDGET_S + BUDGET_GRACE_S <= 235
    assert make_plan(replace(options, time_budget_s=None, trials=3)).time_budget_s is None
    # With a trial count the follow-ups keep their trials' share: the default CPU run (36
    # screened trials of one window; 5 configurations x 3 rounds, 4 ceilings) 0.42, the
    # default CUDA run (120 screened trials) less
    assert default.followup_share() == pytest.approx(0.424)
    cuda_share = make_plan(replace(options, time_budget_s=None),
                           Resources("cuda", 1, 2)).followup_share()
    assert FOLLOWUP_SHARE < cuda_share < default.followup_share() < MAX_FOLLOWUP_SHARE
    assert make_plan(replace(options, trials=12, confirm=0, ceiling=False)).followup_share() == 0
    cuda = make_plan(replace(options, time_budget_s=None), Resources("cuda", 1, 2))
    assert cuda.time_budget_s == DEFAULT_CUDA_TIME_BUDGET_S
    assert cuda.trials == 40 * SCREENED_TRIALS_FACTOR


def test_the_command_lines_budget_counts_from_the_launch(regression_data, tmp_path,
                                                          monkeypatch):
    """``run --time-budget S`` bounds what a user times: the process's imports before planning
    (4-10 s on a busy 2-core machine) are inside it."""
    import psutil

    import tuner.cli as cli
    created = psutil.Process().create_time()
    # A process started for the command: its creation, on the monotonic clock.
    monkeypatch.setattr(cli, "_IMPORTED", (time.monotonic(), created + 3.0))
    assert cli._launched_monotonic() == pytest.approx(cli._IMPORTED[0] - 3.0)
    # One that imported the command line long after it started (a notebook, this test
    # runner): its budget counts from planning.
    monkeypatch.setattr(cli, "_IMPORTED", (time.monotonic(), created + cli.LAUNCH_AGE_S + 1))
    assert cli._launched_monotonic() is None
    plan = make_plan(RunOptions(workload=PACED, data=str(regression_data), device="cpu",
                                results=str(tmp_path / "r"), time_budget_s=100))
    early = plan.launched_at(plan.planned_at - 30)
    assert early.planned_at == plan.planned_at - 30 and early.from_launch
    assert plan.launched_at(plan.planned_at + 5).planned_at == plan.planned_at  # never later
    assert early.budget_start() == early.planned_at           # 30 s ago, all of it counted
    left = early.with_deadline(early.budget_start() + early.time_budget_s).time_left_s()
    assert left < 100 - 29
    # A plan the Python API made long before its run: at most PLAN_AGE_S of its age counts,
    # while a launch counts however long ago (a slow first run preparing its data).
    from dataclasses import replace as with_
    old = with_(plan, planned_at=time.monotonic() - 300)
    assert old.budget_start() == pytest.approx(time.monotonic() - PLAN_AGE_S, abs=1)
    assert old.launched_at(old.planned_at).budget_start() == old.planned_at


def test_a_compile_mode_the_search_cannot_hold_three_times_is_not_searched(regression_data,
                                                                          tmp_path):
    """Without finalists (--confirm 0: with them compile is decided at the finalists,
    tests/test_compile_decision.py) a compile mode is searched when the search holds
    COMPILE_TRIALS_IN_SEARCH of its compiles. With 300 s and 20 % kept for the follow-ups the
    search has 240 s: default (90 s
    assumed without a workload hint: 270 s for three), reduce-overhead (120 s) and max-autotune
    (600 s) are not searched, and one note names the budget that searches the cheapest of them;
    that budget does. CUDA's default budget (10 minutes) keeps default and reduce-overhead, drops
    max-autotune. Without a time budget nothing is dropped."""
    assert COMPILE_TRIALS_IN_SEARCH == 3
    space = tmp_path / "compile.yaml"
    space.write_text("knobs:\n  batch_size: {low: 4, high: 64, log: true}\n"
                     "  compile: {choices: ['off', default, reduce-overhead, max-autotune]}\n")
    options = RunOptions(workload=PACED, data=str(regression_data), device="cpu",
                         results=str(tmp_path / "r"), time_budget_s=300, space_file=str(space),
                         confirm=0)
    plan = make_plan(options, Resources("cuda", 1, 16))
    assert "compile" not in plan.device_space.domains and plan.compile_at_finalists is None
    assert plan.device_space.constants["compile"] == "off"
    (note,) = [n for n in plan.notes if "compile" in n]
    assert note == ("compile=default/reduce-overhead/max-autotune are not searched: they need "
                    "about 90/120/600 s to compile, and the search's 240 s of the 300-s time "
                    "budget hold fewer than 3 such compiles (--time-budget 340 or more searches "
                    "default)")
    longest = make_plan(replace(options, time_budget_s=1000), Resources("cuda", 1, 16))
    assert longest.notes[-1] == (
        "compile=max-autotune is not searched: it needs about 600 s to compile, and the search's "
        "800 s of the 1000-s time budget hold fewer than 3 such compiles (--time-budget 2250 or "
        "more searches max-autotune)")
    for budget_s, searched in ((340, ("off", "default")),
                               (450, ("off", "default", "reduce-overhead"))):
        longer = make_plan(replace(options, time_budget_s=budget_s), Resources("cuda", 1, 16))
        assert longer.device_space.domains["compile"].values == searched
    assert make_plan(replace(options, time_budget_s=330), Resources("cuda", 1, 16)
                     ).device_space.constants["compile"] == "off"          # 264 s < 270 s
    # CUDA's default budget (10 minutes) leaves max-autotune out, the other modes in
    default = make_plan(replace(options, time_budget_s=None), Resources("cuda", 1, 16))
    assert default.time_budget_s == DEFAULT_CUDA_TIME_BUDGET_S
    assert default.device_space.domains["compile"].values == ("off", "default", "reduce-overhead")
    unbounded = make_plan(replace(options, time_budget_s=None, trials=4),
                          Resources("cpu", 0, 16))                      # --trials on CPU
    assert unbounded.time_budget_s is None
    assert "max-autotune" in unbounded.device_space.domains["compile"].values


def test_a_budget_is_printed_to_the_second_under_ten_minutes():
    """The default CPU budget of 210 s prints as '3 min 30 s', not '4 min'."""
    from tuner.progress import _duration
    assert [_duration(s) for s in (20, 210, 240, 599, 1800, 5400)] == [
        "20 s", "3 min 30 s", "4 min", "9 min 59 s", "30 min", "1 h 30 min"]


class _RunningTrial:
    """What LeaderboardWriter.on_step_begin reads of a running Ray Tune trial."""
    RUNNING, TERMINATED = "RUNNING", "TERMINATED"

    def __init__(self, deadline: float, step_ms: float | None):
        self.trial_id, self.status = f"t{deadline}-{step_ms}", self.RUNNING
        self.config = {"tuner": {"deadline_unix_s": deadline}, "phase": "search"}
        self.last_result = {} if step_ms is None else {"step_time_ms_p95": step_ms}
        self.temporary_state = type("State", (), {"ray_actor": object()})()


@pytest.mark.parametrize("before_run_end_s, step_ms, grace_s", [
    (50, 5_000, 7.5),        # the search's deadline: one and a half of its steps
    (50, 20_000, 10.0),      # at most STEP_GRACE_MAX_S: about what a new process costs
    (50, 100, 2.0),          # short steps: OVERDUE_S
    (50, None, 2.0),         # no step measured yet (a compile): OVERDUE_S
    (3, 5_000, 3.0),         # never past the run's deadline
    (0, 5_000, 2.0),         # the run's own deadline (a follow-up): OVERDUE_S
])
def test_a_trial_past_the_searchs_deadline_gets_a_step_to_stop_itself_before_it_is_killed(
        regression_data, monkeypatch, before_run_end_s, step_ms, grace_s):
    """Killing it ends its process, and the re-measurement's first trial then starts a new
    one (5.7 s on the 2-core CPU); a trial past the run's own deadline is killed at
    ``OVERDUE_S``."""
    import ray

    from tuner.recorder import LeaderboardWriter
    plan = make_plan(RunOptions(workload="tests.fake_workloads:regression", device="cpu",
                                data=str(regression_data), time_budget_s=100)
                     ).with_deadline(time.monotonic() + 100)
    writer = LeaderboardWriter(plan, lambda kind, data: None, versions={})
    deadline = plan.settings.deadline_unix_s - before_run_end_s
    trial = _RunningTrial(deadline, step_ms)
    assert writer.kill_at(trial, deadline) == pytest.approx(deadline + grace_s)
    killed = []
    monkeypatch.setattr(ray, "kill", lambda actor, no_restart: killed.append(actor))
    for now, expected in ((deadline + grace_s - 0.5, []), (deadline + grace_s + 0.5, [1])):
        monkeypatch.setattr(time, "time", lambda: now)
        writer.on_step_begin(0, [trial])
        assert len(killed) == len(expected)
