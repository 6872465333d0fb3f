"""The follow-up planning (``tuner.followups``) as pure functions of a plan and leaderboard rows:
fake rows, a plan with a fixed time left, no Ray and no training."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

import tuner.budget as budget
import tuner.costs as costs
import tuner.followups as followups
import tuner.winner as winner_rule
from tuner.followup_policy import FollowupPolicy
from tuner.history import History
from tuner.knobs import Knobs
from tuner.plan import REMEASURE_ROUNDS, Plan
from tuner.progress import _phase_text
from tuner.space import Choices, Space
from tuner.status import Phase

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
BASE = Knobs(batch_size=8, num_workers=2, prefetch_factor=2)
FAST = Knobs(batch_size=32, num_workers=2, prefetch_factor=2)
BUSY = Knobs(batch_size=32, num_workers=6, prefetch_factor=4, persistent_workers=True)


def make_row(n: int, knobs: Knobs, *, sps: float | None = 100.0, reference: str | None = None,
             phase: str = "search", status: str = "ok", seconds: float = 5.0, **extra) -> dict:
    """A leaderboard row of trial ``n`` of run 'run-a' on one CPU machine: ``seconds`` of wall
    time, 0.4 s of it measured, 2.5-ms steps."""
    return {"run_id": "run-a", "trial_id": f"run-a-{n}", "workload": "fake", "scale": "tiny",
            "status": status, "reference": reference, "is_baseline": reference == "baseline",
            "samples_per_sec": sps, "samples_per_sec_cv": 0.01, "step_time_ms_p50": 2.5,
            "step_time_ms_p95": 3.0, "windows": 2, "measured_s": 0.4, "warmup_s": 0.1,
            "device": "cpu", "hardware_key": "cpu:test:2cpu", "phase": phase,
            "error": None if status == "ok" else f"{status} happened",
            "started_at": T0 + dt.timedelta(seconds=10 * n),
            "finished_at": T0 + dt.timedelta(seconds=10 * n + seconds),
            **knobs.to_dict(), **extra}


def search_rows() -> list[dict]:
    return [make_row(0, BASE, reference="baseline", sps=50.0),
            make_row(1, BUSY, reference="recommended", sps=60.0),
            make_row(2, FAST, sps=56.4), make_row(3, Knobs(batch_size=4), sps=4.8)]


def long_step_rows(rows: list[dict] | None = None, step_ms: float = 600.0) -> list[dict]:
    """``rows`` (the ``search_rows``) with steps of ``step_ms``: half a window of 1 s or more,
    long steps (``tuner.windows.long_step``) for the default ``window_s``."""
    return [{**r, "step_time_ms_p50": step_ms} for r in (rows or search_rows())]


def fake_plan(*, left: float | None = None, confirm: int = 3, ceiling: bool = True,
              windows: int = 3, accelerator: str | None = None, device: str = "cpu",
              space: Space | None = None, cudnn_at_finalists: bool = False,
              reused: bool = True, earlier: frozenset[str] = frozenset(),
              warmup_steps: int = 1) -> SimpleNamespace:
    """The attributes of a ``Plan`` the follow-up planning reads, with a fixed time left, the
    tiny scale's one warm-up step (``warmup_steps`` 10: the full scale's) and the default
    steady-state probes."""
    settings = SimpleNamespace(windows=windows, window_s=1.0, warmup_steps=warmup_steps,
                               max_steady_probes=6, max_warmup_s=None)
    return SimpleNamespace(
        metric="samples_per_sec", mode="max", accelerator_type=accelerator,
        options=SimpleNamespace(confirm=confirm, ceiling=ceiling), settings=settings,
        round_windows=Plan.round_windows.fget(SimpleNamespace(settings=settings)),
        references=(("baseline", BASE), ("recommended", BUSY)), time_left_s=lambda: left,
        node_cpus=2, device=device, cudnn_at_finalists=cudnn_at_finalists,
        reuses_trial_processes=reused, earlier_trial_ids=earlier,
        device_space=space or Space("test", {"batch_size": Choices((8, 32, 256))}, {}))


def policy_for(plan, rows: list[dict]) -> tuple:
    """The follow-up policy of ``plan``, the run's typed rows and their prices."""
    history = followups.history_of(plan, rows)
    return FollowupPolicy.of(plan), history, followups.Pricer(plan, history)


def rounds_todo(plan, rows: list[dict], configs: list, rounds: range, windows: int,
                timed: bool = True) -> list:
    """``FollowupPolicy.rounds_todo`` in ``plan``'s time left (``timed``; else unlimited)."""
    policy, history, prices = policy_for(plan, rows)
    return policy.rounds_todo(history, configs, rounds, windows, prices,
                              plan.time_left_s() if timed else None)


def reserve_s(plan, rows: list[dict], configs: list) -> float:
    """``FollowupPolicy.reserve_s``: the compute-only ceiling's time beside the rounds."""
    policy, history, prices = policy_for(plan, rows)
    return policy.reserve_s(history, configs, prices)


def run_all(plan, rows: list[dict], sps: float = 100.0) -> tuple[list, list]:
    """Drive ``followups.followups`` as the driver does: each batch's trials append one ok row
    each before the next batch is asked for. Returns (batches, events)."""
    batches, events = [], []
    for batch in followups.followups(plan, rows, lambda kind, data: events.append((kind, data))):
        batches.append(batch)
        changes = batch.per_trial or [{} for _ in batch.configs]
        for (knobs, ref), change in zip(batch.configs, changes):
            settings = {**batch.settings, **change}
            rows.append(make_row(len(rows), knobs, reference=ref, phase=str(batch.phase),
                                 sps=sps, ceiling=settings.get("ceiling")))
    return batches, events


def test_a_run_with_time_plans_rounds_then_the_ceilings_each_from_the_rows_before_it():
    rows = search_rows()
    batches, events = run_all(fake_plan(), rows)
    assert [b.phase for b in batches] == [Phase.REMEASURE, Phase.CEILING]
    remeasure, ceilings = batches
    # the three best that can win (BUSY, FAST, BASE) are also the references' configurations
    assert remeasure.configs == [(BUSY, "recommended"), (FAST, None), (BASE, "baseline")] * 3
    assert remeasure.settings == {"windows": 2}
    assert [change["ceiling"] for change in ceilings.per_trial] == [
        "compute", "loader", "machine-loader", "machine-compute", "core-compute", "core-loader"]
    assert [kind for kind, _ in events] == ["phase", "phase"]
    assert events[0][1] == remeasure.event.data() and events[1][1] == ceilings.event.data()
    # done: a second pass over the same rows (a resumed run) plans nothing more
    assert run_all(fake_plan(), rows) == ([], [])


def test_the_machine_compute_ceiling_is_not_planned_when_the_probe_recorded_it():
    """The memory probe's timed steps record the run's machine-compute row before the
    search (on another data path than the winner's: a compute-only trial reads no data):
    the ceilings after the search leave it out; a failed one does not count."""
    probe_row = make_row(9, Knobs(batch_size=256, data_path="loader"), phase="ceiling",
                         sps=900.0, ceiling="machine-compute")
    rows = search_rows() + [probe_row]
    _, ceilings = run_all(fake_plan(), rows)[0]
    assert "machine-compute" not in [change["ceiling"] for change in ceilings.per_trial]
    assert [r.get("ceiling") for r in rows].count("machine-compute") == 1
    failed = {**probe_row, "status": "error"}
    assert not followups.has_machine_compute(search_rows() + [failed])
    assert followups.has_machine_compute(search_rows() + [probe_row])


def test_a_machine_compute_limit_without_the_winners_switches_is_measured_again():
    """A probe row that ran without a compute switch the winner has on (its channels_last)
    is no limit for the winner: the ceilings measure the machine's limit at its knobs."""
    probe_row = make_row(9, Knobs(batch_size=256, data_path="loader"), phase="ceiling",
                         sps=900.0, ceiling="machine-compute")
    winner = Knobs(batch_size=256, channels_last=True)
    assert not followups.has_machine_compute([probe_row], winner)
    assert followups.has_machine_compute([probe_row], Knobs(batch_size=256))
    with_cl = {**probe_row, "channels_last": True}
    assert followups.has_machine_compute([with_cl], winner)
    plan = fake_plan()
    planned = followups.planned_ceilings(plan, search_rows() + [probe_row], winner)
    assert "machine-compute" in [name for name, _, _ in planned]


def test_nothing_is_planned_with_less_time_left_than_a_phase_needs():
    rows = search_rows()
    assert run_all(fake_plan(left=budget.MIN_PHASE_S - 0.1), rows) == ([], [])


def test_no_ceiling_without_the_ceiling_option():
    batches, _ = run_all(fake_plan(ceiling=False), search_rows())
    assert [b.phase for b in batches] == [Phase.REMEASURE]


def test_without_a_remeasurement_the_ceilings_are_the_search_bests():
    batches, _ = run_all(fake_plan(confirm=0), search_rows())
    assert [b.phase for b in batches] == [Phase.CEILING]
    winner = Knobs.from_dict(winner_rule.best(search_rows()).row, strict=False)
    assert batches[0].configs[0] == (winner, None) and winner in (BUSY, FAST)
    assert [c["ceiling"] for c in batches[0].per_trial][:2] == ["compute", "loader"]


def test_rows_of_another_accelerator_type_are_not_this_types():
    rows = search_rows() + [make_row(9, FAST, phase="remeasure", accelerator_type="A10G")]
    assert followups.history_of(fake_plan(), rows).dicts() == search_rows()
    assert len(followups.history_of(fake_plan(accelerator="A10G"), rows)) == 1


def test_the_remeasured_configurations_can_win_and_compare_with_a_reference():
    top, configs = followups.remeasure_configs(fake_plan(confirm=1), search_rows())
    assert top == [BUSY]
    assert configs == [(BUSY, "recommended"), (BASE, "baseline")]
    only = [make_row(0, FAST, sps=56.4)]          # one configuration: nothing to compare with
    assert followups.remeasure_configs(fake_plan(), only) == ([FAST], [])
    slow = search_rows()[:1] + [make_row(5, FAST, sps=200.0)]
    top, _ = followups.remeasure_configs(fake_plan(), slow)
    assert BASE not in top                         # 50 is under CAN_WIN_FRACTION of 200


def test_round_batch_runs_the_rounds_from_the_first_one_missing():
    configs = [(FAST, None), (BASE, "baseline")]
    rows = search_rows() + [make_row(9, FAST, phase="remeasure")]
    decided = followups.round_plan(fake_plan(), rows, configs)
    assert (decided.configs, decided.windows, decided.fits) == (tuple(configs), 2, True)
    batch = followups.round_batch(fake_plan(), rows, decided, first=1)
    assert batch.configs == [(BASE, "baseline")] + configs * (REMEASURE_ROUNDS - 1)
    assert (batch.event.round, batch.event.last_round) == (1, REMEASURE_ROUNDS)
    assert followups.round_batch(fake_plan(), rows, decided, first=REMEASURE_ROUNDS + 1) is None


def test_rounds_todo_stops_at_the_first_round_the_time_left_cannot_hold():
    configs = [(FAST, None), (BASE, "baseline")]
    rows = search_rows()
    one_round_s = sum(costs.trial_cost_s(rows, k, 2, 1.0) for k, _ in configs)
    plan = fake_plan(left=2.5 * one_round_s)
    todo = rounds_todo(plan, rows, configs, range(1, 4), 2)
    assert [r for r, _ in todo] == [1, 1, 2, 2]
    assert len(rounds_todo(plan, rows, configs, range(1, 4), 2, timed=False)) == 6


def test_the_rounds_leave_the_compute_only_ceiling_its_time_when_they_fit_beside_it():
    """A short budget's follow-up share held three rounds of three configurations and no
    ceiling: the summary showed no bound at all. The rounds now leave out the lowest-ranked
    searched configuration to keep one compute-only trial's time; where even the references'
    and the winner's rounds do not fit beside it, the rounds go first."""
    rows = search_rows()
    configs = [(BUSY, "recommended"), (FAST, None), (BASE, "baseline")]
    round_s = {k: costs.trial_cost_s(rows, k, 2, 1.0) for k, _ in configs}
    ceiling_s = reserve_s(fake_plan(), rows, configs)
    assert ceiling_s == costs.trial_cost_s(rows, BUSY, 3, 1.0) > 0
    every_round_s = REMEASURE_ROUNDS * sum(round_s.values())
    plan = fake_plan(left=every_round_s + ceiling_s / 2)   # all rounds, or rounds less FAST
    decided = followups.round_plan(plan, rows, configs)
    assert (decided.configs, decided.dropped, decided.windows) == (
        ((BUSY, "recommended"), (BASE, "baseline")), 1, 2)
    assert decided.reserve_s == ceiling_s and decided.fits
    batch = followups.round_batch(plan, rows, decided, first=1)
    assert len(batch.configs) == 2 * REMEASURE_ROUNDS and batch.event.ceiling_kept
    assert plan.time_left_s() - sum(round_s[k] for k, _ in batch.configs) >= ceiling_s
    # without --ceiling, or with the ceiling measured, nothing is kept back
    roomy = followups.round_plan(fake_plan(left=plan.time_left_s(), ceiling=False), rows, configs)
    assert (roomy.configs, roomy.dropped, roomy.windows) == (tuple(configs), 0, 2)
    measured = rows + [make_row(9, BUSY, phase="ceiling", ceiling="compute")]
    assert reserve_s(plan, measured, configs) == 0.0
    # the references' and the winner's rounds alone do not fit beside it: they run first
    tight = fake_plan(left=REMEASURE_ROUNDS * (round_s[BUSY] + round_s[BASE]) + ceiling_s / 2)
    batch = followups.round_batch(tight, rows, decided, first=1)
    assert len(batch.configs) == 2 * REMEASURE_ROUNDS and not batch.event.ceiling_kept


def test_three_rounds_of_fewer_windows_come_before_two_rounds_of_more():
    """A slow host's default run had time for two rounds of two windows: 1.58x faster in
    both rounds printed "tie" (quantile 12.7). Where only one window per round lets all three
    rounds fit, the rounds have one, beside the compute-only ceiling's reserve when that
    fits too; where no number fits all three, the most that fits one round. One window is
    cheaper where the warm-up timed the steps as long (two warm-up steps or more): such a
    trial runs no steady-state probes."""
    configs = [(FAST, None), (BASE, "baseline")]
    rows = long_step_rows()

    def round_s(windows: int) -> float:
        return sum(followups.cost_s(fake_plan(warmup_steps=2), rows, k, windows)
                   for k, _ in configs)

    ceiling_s = reserve_s(fake_plan(warmup_steps=2), rows, configs)
    assert round_s(1) < round_s(2) and ceiling_s > 0

    def windows_for(left: float) -> int:
        return followups.round_plan(fake_plan(left=left, warmup_steps=2), rows, configs).windows

    assert fake_plan().round_windows == 2
    assert windows_for(REMEASURE_ROUNDS * round_s(2) + ceiling_s) == 2
    assert windows_for(REMEASURE_ROUNDS * round_s(1) + ceiling_s) == 1   # the ceiling kept
    assert windows_for(REMEASURE_ROUNDS * round_s(2)) == 2               # the rounds first
    assert windows_for(REMEASURE_ROUNDS * round_s(1)) == 1
    assert windows_for(2 * round_s(1)) == 2            # no interval either way: one round
    assert windows_for((round_s(1) + round_s(2)) / 2) == 1   # one round of one, not none
    assert windows_for(round_s(1) / 2) == 2            # none fits (no_round_event says so)
    assert windows_for(None) == 2                      # no budget
    # the rounds run with it, and the line says so
    plan = fake_plan(left=REMEASURE_ROUNDS * round_s(1), warmup_steps=2)
    events: list[dict] = []
    batch = next(followups.rounds(plan, rows, configs, lambda _, data: events.append(data)))
    assert batch.settings == {"windows": 1} and len(batch.configs) == 2 * REMEASURE_ROUNDS
    assert (events[0]["windows"], events[0]["round_windows"]) == (1, 2)
    assert "1 window each, not 2, so that the time left holds the rounds (interleaved" in (
        _phase_text(events[0]))
    full = next(followups.rounds(fake_plan(warmup_steps=2), rows, configs,
                                 lambda _, data: events.append(data)))
    assert full.settings == {"windows": 2}
    assert "2 windows each (interleaved" in _phase_text(events[-1])


def test_a_round_of_one_window_is_priced_with_its_steady_state_probes():
    """After one warm-up step (the tiny scale's) a trial of one window probes the steady state
    (two probes of half a window at the least) where a screen runs none: priced with them, a
    round of one window costs what a round of two does, and the rounds keep two windows
    whatever the time left."""
    configs = [(FAST, None), (BASE, "baseline")]
    rows = search_rows()                          # steps of 2.5 ms, windows of 1 s
    plan = fake_plan()
    for knobs, _ in configs:
        assert followups.Pricer(plan, rows).round_changes(knobs, 1) == {}
        screen_priced = costs.trial_cost_s(rows, knobs, 1, 1.0)   # no probes
        assert followups.cost_s(plan, rows, knobs, 1) == pytest.approx(screen_priced + 2 * 0.5)
        assert followups.cost_s(plan, rows, knobs, 1) == pytest.approx(
            followups.cost_s(plan, rows, knobs, 2))
        assert followups.cost_s(plan, rows, knobs, 2) == costs.trial_cost_s(rows, knobs, 2, 1.0)
    # a row that ran the probes holds them in its warm-up, not in what its price reads
    probed = [{**r, "steady_probes": 2} for r in rows]
    assert followups.cost_s(plan, probed, FAST, 1) == pytest.approx(
        costs.trial_cost_s(probed, FAST, 1, 1.0) + 2 * 0.5)
    one_round_s = sum(followups.cost_s(plan, rows, k, 1) for k, _ in configs)
    for left in (0.5, 1.0, 2.0, 3.0, 3.5, 5.0):
        plan.time_left_s = lambda: left * one_round_s
        assert followups.round_plan(plan, rows, configs).windows == 2


def test_a_round_of_one_window_of_long_steps_runs_no_probes():
    """A slow host's default run cut its rounds to one window, priced at 8.0 s a trial at
    batch 123; they took 13.8-14.3 s: steps of 2.6 s, and after one warm-up step the trial
    probed the steady state with two of them before its window, although steps that long
    judge none (``tuner.windows.long_step``). A round's trial of one window whose steps the
    search timed as long runs no probes, priced so; its rounds of two windows are as before."""
    window_s = 2.0
    configs = [(FAST, None), (BASE, "baseline")]
    rows = long_step_rows(step_ms=2600.0)
    plan = fake_plan(ceiling=False)
    plan.settings.window_s = window_s
    for knobs, _ in configs:
        pricer = followups.Pricer(plan, rows)
        assert pricer.round_changes(knobs, 1) == {"max_steady_probes": 0}
        assert pricer.round_changes(knobs, 2) == {}
        unprobed = pricer.round_changes(knobs, 1)
        assert followups.cost_s(plan, rows, knobs, 1, changes=unprobed) == (
            costs.trial_cost_s(rows, knobs, 1, window_s))
        assert followups.cost_s(plan, rows, knobs, 1) == pytest.approx(   # were they run
            costs.trial_cost_s(rows, knobs, 1, window_s) + 2 * 2.6)
    round_s = {w: sum(costs.trial_cost_s(rows, k, w, window_s) for k, _ in configs)
               for w in (1, 2)}
    plan.time_left_s = lambda: REMEASURE_ROUNDS * round_s[1] + 0.1
    assert plan.time_left_s() < REMEASURE_ROUNDS * round_s[2]
    batch = next(followups.rounds(plan, rows, configs, lambda *_: None))
    assert batch.settings == {"windows": 1} and len(batch.configs) == 2 * REMEASURE_ROUNDS
    assert batch.per_trial == [{"max_steady_probes": 0}] * len(batch.configs)
    plan.time_left_s = lambda: None
    roomy = next(followups.rounds(plan, rows, configs, lambda *_: None))
    assert roomy.settings == {"windows": 2} and roomy.per_trial is None


def test_a_configuration_that_fits_at_the_windows_the_rounds_get_is_not_left_out():
    """Where the first-ranked's and the references' rounds fit only at one window each, a
    lower-ranked finalist whose rounds also fit at one window is re-measured with them: it
    was left out at the planned two windows, before the windows were cut to one, and the
    line then said the time left held the rounds without it. (Steps of 6 s, long for the
    windows, timed by ten warm-up steps: a round of one window runs no probes.)"""
    rows = long_step_rows(step_ms=6000.0)
    configs = [(BUSY, "recommended"), (FAST, None), (BASE, "baseline")]
    window_s = 10.0   # windows long beside the trials' set-up: one window less saves much

    def plan_with(left: float | None) -> SimpleNamespace:
        plan = fake_plan(left=left, ceiling=False, warmup_steps=10)
        plan.settings.window_s = window_s
        return plan

    def rounds_s(windows: int, which: list) -> float:
        return REMEASURE_ROUNDS * sum(followups.cost_s(plan_with(None), rows, k, windows)
                                      for k, _ in which)

    required = [configs[0], configs[2]]
    assert FollowupPolicy.required(History.of(rows), configs) == required
    # every round of all three fits at one window, not the two's at two windows
    left = rounds_s(1, configs) + 0.1
    assert left < rounds_s(2, required)
    plan = plan_with(left)
    events: list[dict] = []
    batch = next(followups.rounds(plan, rows, configs, lambda _, data: events.append(data)))
    assert batch.settings == {"windows": 1}
    assert [k for k, _ in batch.configs[:3]] == [BUSY, FAST, BASE]
    assert len(batch.configs) == 3 * REMEASURE_ROUNDS and events[0]["dropped"] == 0
    # where the two fit at two windows, the finalist goes before the windows do
    roomy = plan_with(rounds_s(2, required) + 0.1)
    batch = next(followups.rounds(roomy, rows, configs, lambda _, data: events.append(data)))
    assert batch.settings == {"windows": 2} and events[-1]["dropped"] == 1
    assert FAST not in [k for k, _ in batch.configs]


def test_no_finalist_is_left_out_for_a_ceiling_the_rounds_leave_no_time_for():
    """A slow host's default run: the first-ranked's and the references' rounds fitted only
    without the compute-only ceiling's time, yet two finalists were left out "so that the time
    left holds more rounds (and the compute-only ceiling)", and no ceiling ran. Where the
    required rounds leave the ceiling no time, the rounds go first: the finalists kept and
    the rounds' windows are those of the same run without a ceiling, and the line names the
    ceiling only where its time is kept."""
    rows = long_step_rows([   # steps of 1.6 s, long for the windows: no probes
        make_row(0, BASE, reference="baseline", sps=50.0),
        make_row(1, BUSY, reference="recommended", sps=60.0, seconds=10.0),
        make_row(2, FAST, sps=56.4, seconds=1.0), make_row(3, Knobs(batch_size=4), sps=4.8)],
        step_ms=1600.0)
    configs = [(BUSY, "recommended"), (FAST, None), (BASE, "baseline")]

    def first_round(ceiling: bool, left: float) -> tuple[dict, int, dict]:
        plan = fake_plan(warmup_steps=2, windows=8, ceiling=ceiling)  # an 8-window ceiling
        plan.settings.window_s = 3.0
        plan.time_left_s = lambda: left
        events: list[dict] = []
        batch = next(followups.rounds(plan, rows, configs, lambda _, data: events.append(data)))
        return batch.settings, len(batch.configs), events[0]

    plan = fake_plan(warmup_steps=2, windows=8)
    plan.settings.window_s = 3.0
    ceiling_s = reserve_s(plan, rows, configs)
    required_1_s = REMEASURE_ROUNDS * (followups.cost_s(plan, rows, BUSY, 1)
                                       + followups.cost_s(plan, rows, BASE, 1))
    fast_1_s = REMEASURE_ROUNDS * followups.cost_s(plan, rows, FAST, 1)
    for left in (required_1_s + fast_1_s + 0.1, required_1_s + 0.5 * ceiling_s):
        assert left < required_1_s + ceiling_s   # the ceiling never fits beside the rounds
        with_ceiling = first_round(True, left)
        without = first_round(False, left)
        assert with_ceiling[:2] == without[:2]
        assert with_ceiling[2]["dropped"] == without[2]["dropped"]
        assert with_ceiling[2]["ceiling_kept"] is False
    # the line names the ceiling only where the rounds keep its time
    event = {**with_ceiling[2], "dropped": 1}
    assert _phase_text(event).endswith(
        "1 lower-ranked searched configuration(s) left out: the time left holds more rounds "
        "without them")
    assert _phase_text({**event, "ceiling_kept": True}).endswith(
        "the time left holds more rounds (and the compute-only ceiling) without them")


def test_a_finalist_stays_where_the_required_rounds_leave_the_ceiling_no_time(monkeypatch):
    """On a price of 10 s a window for the first-ranked and the baseline and 2 s for a
    finalist: the time left holds the three's rounds of one window (66 s) but not the
    required rounds beside an 8-window ceiling (60 + 80 s), so the ceiling's time is not kept
    and the finalist is not left out for it."""
    per_window_s = {BUSY: 10.0, BASE: 10.0, FAST: 2.0}
    monkeypatch.setattr(followups.Pricer, "round_s",
                        lambda self, knobs, windows, tuned: per_window_s[knobs] * windows)
    monkeypatch.setattr(followups.Pricer, "trial_s",
                        lambda self, knobs: per_window_s[knobs] * self.plan.settings.windows)
    rows = search_rows()
    configs = [(BUSY, "recommended"), (FAST, None), (BASE, "baseline")]
    plan = fake_plan(windows=8, left=REMEASURE_ROUNDS * (10.0 + 10.0 + 2.0) + 0.1)
    assert reserve_s(plan, rows, configs) == 80.0
    decided = followups.round_plan(plan, rows, configs)
    assert (decided.configs, decided.dropped, decided.windows) == (tuple(configs), 0, 1)
    assert decided.reserve_s == 0.0


def test_a_resumed_run_sizes_the_windows_of_its_next_round_not_of_a_recorded_one():
    """A resumed run whose first round is recorded and whose time left holds one more round
    of one window (not of two, nor every round left): round 2 runs with one window. The
    windows were sized on round 1, which has nothing left to run: the planned two, and then
    no round fitted. (Long steps timed by ten warm-up steps: a round of one window runs no
    probes.)"""
    configs = [(FAST, None), (BASE, "baseline")]
    rows = long_step_rows(search_rows() + [make_row(10 + i, k, reference=ref, phase="remeasure")
                                           for i, (k, ref) in enumerate(configs)])
    one_round_s = {w: sum(followups.cost_s(fake_plan(warmup_steps=10), rows, k, w)
                          for k, _ in configs) for w in (1, 2)}
    left = one_round_s[1] + 0.1
    assert left < one_round_s[2] and left < 2 * one_round_s[1]
    plan = fake_plan(left=left, ceiling=False, warmup_steps=10)
    assert followups.round_plan(plan, rows, configs).windows == 1
    events: list[dict] = []
    batch = next(followups.rounds(plan, rows, configs, lambda _, data: events.append(data)))
    assert batch.settings == {"windows": 1} and events[0]["round"] == 2
    assert len(batch.configs) == len(configs)


def test_a_resumed_run_sizes_the_windows_of_the_round_an_impossible_figure_added():
    """Rounds 1-3 recorded, one of them a figure that cannot be true: round 4 is due, and
    the time left holds it at one window, not at two. The windows were sized on rounds 1-3
    alone (nothing left: the planned two), and round 4 was left out without a word. (Long
    steps timed by ten warm-up steps: a round of one window runs no probes.)"""
    configs = [(FAST, None), (BASE, "baseline")]
    rows = long_step_rows(search_rows() + [
        make_row(10 + 2 * r + i, k, reference=ref, phase="remeasure")
        for r in range(REMEASURE_ROUNDS) for i, (k, ref) in enumerate(configs)])
    policy = FollowupPolicy.of(fake_plan())
    assert policy.rounds_total(History.of(rows)) == REMEASURE_ROUNDS
    rows[-1]["mfu_pct"] = 140.0      # above the card's peak: a disturbed measurement
    assert policy.rounds_total(History.of(rows)) == REMEASURE_ROUNDS + 1
    one_round_s = {w: sum(followups.cost_s(fake_plan(warmup_steps=10), rows, k, w)
                          for k, _ in configs) for w in (1, 2)}
    plan = fake_plan(left=one_round_s[1] + 0.1, ceiling=False, warmup_steps=10)
    assert plan.time_left_s() < one_round_s[2]
    assert followups.round_plan(plan, rows, configs).windows == 1
    events: list[dict] = []
    batch = next(followups.rounds(plan, rows, configs, lambda _, data: events.append(data)))
    assert batch.settings == {"windows": 1} and events[0]["round"] == REMEASURE_ROUNDS + 1


def test_no_round_event_says_what_the_first_round_needs():
    configs = [(FAST, None), (BASE, "baseline")]
    event = followups.no_round_event(fake_plan(left=1.0), search_rows(), configs)
    assert (event["count"], event["configs"], event["left_s"]) == (0, 2, 1.0)
    assert event["need_s"] > 1.0
    done = [make_row(20 + i, k, phase="remeasure") for i in range(3) for k, _ in configs]
    assert followups.no_round_event(fake_plan(left=1.0), search_rows() + done, configs) is None


def test_a_transient_failure_of_a_reference_is_retried_once():
    rows = search_rows()
    rows[0].update(status="error", samples_per_sec=None, error="RayActorError: The actor died")
    batch = followups.retry_batch(fake_plan(), rows)
    assert batch.configs == [(BASE, "baseline")] and batch.phase == Phase.SEARCH
    assert batch.event["retry"] == ["baseline"]
    rows.append(make_row(9, BASE, reference="baseline", status="error"))   # the retry failed
    assert followups.retry_batch(fake_plan(), rows) is None
    assert not followups.transient({"status": "oom", "error": "worker killed: out of memory"})
    for world_size in (1, 2):                   # a lost node's trial runs on the nodes left
        assert followups.transient({"status": "node_lost", "world_size": world_size,
                                    "error": "rank 1: lost with Ray node ..."})


def test_limits_left_out_for_lack_of_time_are_said_without_a_batch():
    batch, event = followups.ceilings_batch(fake_plan(left=0.5), search_rows())
    assert batch is None
    assert event["left_out"] == ["compute", "loader", "machine-loader", "machine-compute",
                                 "core-compute", "core-loader"]
    assert followups.ceilings_batch(fake_plan(), []) == (None, None)     # no winner


def test_the_machines_limits_use_every_cpu_and_the_largest_batch():
    batch, _ = followups.ceilings_batch(fake_plan(), search_rows())
    by_label = {change["ceiling"]: knobs
                for (knobs, _), change in zip(batch.configs, batch.per_trial)}
    assert by_label["machine-loader"].num_workers == 2          # the plan's node_cpus
    assert by_label["machine-compute"].batch_size == 256        # the space's largest
    assert [list(change) for change in batch.per_trial] == [
        ["ceiling", "compute_only"], ["ceiling", "loader_only"],
        ["ceiling", "loader_only"], ["ceiling", "compute_only"],
        ["ceiling", "compute_only", "cpus"], ["ceiling", "loader_only", "cpus"]]
    assert [change.get("cpus") for change in batch.per_trial][-2:] == [1, 1]    # one core each


@pytest.mark.parametrize("left, kept", [(None, 2), (1e6, 2), (0.0, 0)])
def test_fitting_ceilings_keeps_what_the_time_left_holds_in_order(left, kept):
    todo = [("compute", FAST, "compute_only"), ("loader", FAST, "loader_only")]
    got, left_out = followups.fitting_ceilings(fake_plan(left=left), search_rows(), todo)
    assert got == todo[:kept] and left_out == [label for label, _, _ in todo[kept:]]


def test_the_compute_ceiling_is_measured_again_only_when_far_below_the_winner():
    rows = search_rows()              # FAST wins: within the noise of BUSY, and simpler
    first = followups.ceiling_again_batch(fake_plan(), rows)
    assert first.configs == [(FAST, None)] and not first.event["again"]
    assert first.settings == {"compute_only": True, "ceiling": "compute"}
    far_below = rows + [make_row(9, FAST, phase="ceiling", ceiling="compute", sps=20.0)]
    assert followups.ceiling_again_batch(fake_plan(), far_below).event["again"]
    rows.append(make_row(9, FAST, phase="ceiling", ceiling="compute", sps=61.0))
    assert followups.ceiling_again_batch(fake_plan(), rows) is None      # at the winner: stands


def test_the_policy_checks_its_parameters_when_made():
    policy = FollowupPolicy.of(fake_plan())
    assert (policy.rounds, policy.round_windows, policy.least_windows) == (REMEASURE_ROUNDS, 2, 1)
    for bad in ({"mode": "fastest"}, {"confirm": -1}, {"rounds": 0}, {"can_win_fraction": 0.0},
                {"least_windows": 3}):
        with pytest.raises(ValueError, match=f"bad follow-up policy {next(iter(bad))}="):
            FollowupPolicy(**{"metric": "samples_per_sec", "mode": "max", "confirm": 3,
                              "ceiling": True, "round_windows": 2, **bad})


def test_the_candidates_come_in_one_declared_order():
    """The ceiling's time kept before not; the most windows before fewer; every configuration
    before fewer, the lowest-ranked searched one left out first, never a required one."""
    configs = [(BUSY, "recommended"), (FAST, None), (Knobs(batch_size=4), None),
               (BASE, "baseline")]
    policy = FollowupPolicy.of(fake_plan())
    got = [(len(kept), windows, ceiling) for kept, windows, ceiling
           in policy.candidates(History.of(search_rows()), configs)]
    assert got == [(n, w, c) for c in (True, False) for w in (2, 1) for n in (4, 3, 2)]
    kept = [k for k, _, _ in policy.candidates(History.of(search_rows()), configs)][:3]
    assert kept[1] == [configs[0], configs[1], configs[3]] and kept[2] == [configs[0], configs[3]]


def test_the_split_counts_what_the_policy_measures():
    """The budget's split (``Plan.followup_share``) asks the policy: the finalists, their
    variants and the references in its rounds, and the winner's own ceilings."""
    need = FollowupPolicy.of(fake_plan(cudnn_at_finalists=True)).need(references=2)
    assert (need.configs, need.rounds, need.round_windows, need.ceilings) == (
        3 + 2 + 1, REMEASURE_ROUNDS, 2, 4)
    assert FollowupPolicy.of(fake_plan(confirm=0, ceiling=False)).need(2).configs == 0
    assert FollowupPolicy.of(fake_plan(ceiling=False)).need(2).ceilings == 0
