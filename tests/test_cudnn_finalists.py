"""Where a CUDA run decides ``cudnn_benchmark``: screening trials hold it off (cuDNN's autotuning
at every new shape would cost more than their one window), the finalists are re-measured with
it on and the first-ranked without it too, and a model without a convolution does not search
it. Planned on CPU for a CUDA machine (``Resources('cuda', ...)``); nothing runs on a GPU."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from types import SimpleNamespace

import pytest

import tuner.costs as costs
import tuner.followups as followups
import tuner.winner as winner_rule
from tests.test_followups import BASE, BUSY, fake_plan, make_row, rounds_todo
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.plan import REMEASURE_ROUNDS, Resources
from tuner.probe import ComputeCurve
from tuner.progress import _followups_text
from tuner.search_policy import with_compute_curve
from tuner.settings import RunOptions
from tuner.space import builtin_path

CUDA = Resources("cuda", 1, 16)
CURVE = ComputeCurve(alpha_ms=30.0, beta_ms=0.15, points=((8, 31.2), (256, 68.4)),
                     max_batch=512, knee_batch=128, limit_samples_per_sec=3400.0)


@pytest.fixture
def options(tmp_path, tuner_cache) -> RunOptions:
    return RunOptions(workload="tests.landscapes:launch_bound", device="cpu", time_budget_s=300,
                      results=str(tmp_path / "results"))


def test_a_screened_cuda_search_holds_cudnn_benchmark_off_and_its_anchors_too(options):
    """ddpm's space searches cudnn_benchmark on CUDA; with screening (the default) the plan
    holds it off for the sampler and the machine's structured points (the recommended has it
    on: the anchors built from it do not), while the references keep their own value."""
    plan = make_plan(options, CUDA)
    assert plan.screen_windows and plan.cudnn_at_finalists
    assert "cudnn_benchmark" not in plan.device_space.domains
    assert plan.device_space.constants["cudnn_benchmark"] is False
    assert dict(plan.references)["recommended"].cudnn_benchmark
    anchored = with_compute_curve(plan, CURVE, Knobs(batch_size=512, amp="fp16"))
    assert [name for name, _ in anchored.anchors][:1] == ["machine"]
    assert "machine+cudnn_benchmark" not in dict(anchored.anchors)
    assert not any(knobs.cudnn_benchmark for _, knobs in anchored.anchors)
    assert "doubling" in dict(anchored.anchors)
    # the follow-ups' share counts the first-ranked's second configuration
    counted = make_plan(replace(options, trials=100), CUDA)
    assert counted.followup_share() > replace(counted, cudnn_at_finalists=False).followup_share()
    assert "with cudnn_benchmark on (off while screening), the first also without it" in (
        _followups_text(plan))


@pytest.mark.parametrize("change", [{"screen_windows": 0}, {"confirm": 0}])
def test_a_search_without_finalists_keeps_cudnn_benchmark_searched(options, change):
    """Without screening (or without finalists, which turns screening off) each searched
    configuration is measured in full, so the sampler decides the knob as any other."""
    plan = make_plan(replace(options, **change), CUDA)
    assert not plan.cudnn_at_finalists
    assert set(plan.device_space.domains["cudnn_benchmark"].values) == {False, True}
    assert "cudnn_benchmark" not in _followups_text(plan)


def test_the_cpu_device_and_a_model_without_convolutions_do_not_search_it(options):
    """On the CPU device the knob does nothing (not in the space at all); on CUDA a model whose
    FLOPs hold no convolution (an MLP in ddpm's space here) holds it off, with one note."""
    cpu = make_plan(options, Resources("cpu", 0, 2))
    assert not cpu.cudnn_at_finalists and "cudnn_benchmark" not in cpu.device_space.domains
    mlp = make_plan(replace(options, workload="tests.fake_workloads:regression",
                            space_file=builtin_path("ddpm")), CUDA)
    assert mlp.settings.conv_flops_share == 0
    assert not mlp.cudnn_at_finalists
    assert mlp.device_space.constants.get("cudnn_benchmark") is False
    assert [n for n in mlp.notes if "cudnn" in n] == [
        "cudnn_benchmark is not searched: the model runs no convolution, the only operation "
        "whose algorithm cuDNN's benchmark mode chooses"]


A = Knobs(batch_size=64, num_workers=2, prefetch_factor=2, amp="fp16")
B = Knobs(batch_size=128, num_workers=2, prefetch_factor=2, amp="fp16")
C = Knobs(batch_size=32, num_workers=2, prefetch_factor=2, amp="fp16")


def screened_rows() -> list[dict]:
    """References as the workload gives them (the recommended with cudnn_benchmark on and a
    12.2-s first step, the baseline 1.8 s) and three screens with it off (1.8-2.0 s)."""
    on = BUSY.replace(cudnn_benchmark=True)
    return [make_row(0, BASE, reference="baseline", sps=50.0, first_step_s=1.8),
            make_row(1, on, reference="recommended", sps=60.0, first_step_s=12.2, seconds=16),
            make_row(2, A, sps=90.0, first_step_s=1.9), make_row(3, B, sps=80.0, first_step_s=2.0),
            make_row(4, C, sps=70.0, first_step_s=1.8)]


def test_the_finalists_are_remeasured_with_it_on_and_the_first_ranked_also_without():
    """The first-ranked as screened, then every finalist with cudnn_benchmark on, in rank
    order, beside the references; an on-variant that is a reference keeps its name."""
    plan = fake_plan(cudnn_at_finalists=True)
    rows = screened_rows()
    top, configs = followups.remeasure_configs(plan, rows)
    on = [k.replace(cudnn_benchmark=True) for k in (A, B, C)]
    assert top == [A, *on]
    assert configs == [(A, None), *[(k, None) for k in on],
                       (BUSY.replace(cudnn_benchmark=True), "recommended"), (BASE, "baseline")]
    assert followups.with_cudnn_benchmark([BUSY, A]) == [
        BUSY, BUSY.replace(cudnn_benchmark=True), A.replace(cudnn_benchmark=True)]
    # without the rule: the three best as screened
    assert followups.remeasure_configs(fake_plan(), rows)[0] == [A, B, C]


def test_an_on_variant_pays_the_autotuning_once_in_its_cost():
    """A configuration with cudnn_benchmark on that no row has yet is priced from its screen
    (the nearest search row, with it off) plus the autotuning the rows show: the longest
    first step with it on less the median with it off (12.2 - 1.85 s). Once a row of it
    exists, the process has its shapes: not again."""
    rows = screened_rows()
    assert costs.cudnn_autotune_s(rows) == pytest.approx(10.35)
    on = A.replace(cudnn_benchmark=True)
    screen = costs.trial_cost_s(rows, A, 2, 1.0)
    assert costs.trial_cost_s(rows, on, 2, 1.0) == pytest.approx(screen + 10.35)
    measured = rows + [make_row(5, on, phase="remeasure", first_step_s=12.05, seconds=15.15)]
    # (its own first step's one-offs read as the eager median, 1.85 s, A's as its own 1.9 s)
    assert costs.trial_cost_s(measured, on, 2, 1.0) == pytest.approx(
        costs.trial_cost_s(measured, A, 2, 1.0), abs=0.1)


def test_the_autotuning_is_read_from_eager_rows_with_a_default_and_never_counted_twice():
    """A compiling trial's first step holds its compile: not an autotune. Without a row with it
    on (headpose's references leave it off) the H200's figure stands in, so an on-variant is
    never free. A configuration read from a row that had it on carries that row's autotune
    already; where trial processes are not reused (``--max-host-memory``, data-parallel
    ranks), every trial pays it."""
    rows = screened_rows()
    compiled = make_row(9, B.replace(cudnn_benchmark=True, compile="default"), sps=95.0,
                        first_step_s=100.0)
    assert costs.cudnn_autotune_s([*rows, compiled]) == pytest.approx(10.35)
    off_only = [rows[0], *rows[2:]]
    assert costs.cudnn_autotune_s(off_only) == costs.CUDNN_AUTOTUNE_S == 10.4
    on = A.replace(cudnn_benchmark=True)
    assert costs.trial_cost_s(off_only, on, 2, 1.0) == pytest.approx(
        costs.trial_cost_s(off_only, A, 2, 1.0) + 10.4)
    # priced from the recommended's row (cudnn on): its autotune is left out of the one-offs
    # read from it, and a new batch size is a new shape, autotuned once
    near = BUSY.replace(cudnn_benchmark=True, batch_size=33)
    refs = rows[:2]
    assert costs.trial_cost_s(refs, near, 2, 1.0) == pytest.approx(
        costs.trial_cost_s(refs, near.replace(cudnn_benchmark=False), 2, 1.0) + 10.4)
    measured = rows + [make_row(5, on, phase="remeasure", first_step_s=12.05, seconds=15.15)]
    assert costs.trial_cost_s(measured, on, 2, 1.0, reused=False) == pytest.approx(
        costs.trial_cost_s(measured, A, 2, 1.0) + 10.35, abs=0.1)
    assert followups.cost_s(fake_plan(reused=False), measured, on, 2) == pytest.approx(
        costs.trial_cost_s(measured, A, 2, 1.0) + 10.35, abs=0.1)


def test_a_configuration_run_again_in_its_process_does_not_pay_its_autotuning_again():
    """The recommended with cudnn_benchmark on screened with a 12.2-s first step (its shapes
    autotuned; 1.85 s the eager median without it): its re-measurement rounds in the same
    process are priced without those 10.35 s, in every other case with them (no reuse, a row
    of an earlier run, a compiling first step)."""
    rows = screened_rows()
    rec = BUSY.replace(cudnn_benchmark=True)
    assert costs.autotuned_s(rows[1], rows) == pytest.approx(10.35)
    assert costs.autotuned_s(rows[0], rows) == 0.0           # off: nothing autotuned
    full = costs.trial_cost_s(rows, rec, 2, 1.0, reused=False)
    assert full == pytest.approx(16 - 0.4 + 2 * 1.0 + costs.TRIAL_OVERHEAD_S)
    assert costs.trial_cost_s(rows, rec, 2, 1.0) == pytest.approx(full - 10.35)
    assert followups.cost_s(fake_plan(), rows, rec, 2) == pytest.approx(full - 10.35)
    # a resumed run (--resume keeps the run id): the rows are an earlier command's, whose
    # process is gone, also once this command has recorded a row of its own
    earlier = frozenset(r["trial_id"] for r in rows)
    resumed = rows + [make_row(9, A, phase="remeasure")]
    assert costs.trial_cost_s(resumed, rec, 2, 1.0, earlier=earlier) == pytest.approx(full)
    assert followups.cost_s(fake_plan(earlier=earlier), resumed, rec, 2) == pytest.approx(full)
    # ... and a finalist an earlier command measured pays its autotuning in this one
    on = A.replace(cudnn_benchmark=True)
    before = rows + [make_row(5, on, phase="remeasure", first_step_s=12.05, seconds=15.15)]
    assert costs.trial_cost_s(before, on, 2, 1.0) == pytest.approx(
        costs.trial_cost_s(before, A, 2, 1.0), abs=0.1)
    assert costs.trial_cost_s(before, on, 2, 1.0, earlier=earlier | {"run-a-5"}) == (
        pytest.approx(costs.trial_cost_s(before, A, 2, 1.0) + 10.35, abs=0.1))
    compiled = [*rows[:1], {**rows[1], "compile": "default"}, *rows[2:]]
    assert costs.autotuned_s(compiled[1], compiled) == 0.0


def test_the_rounds_price_the_autotuning_once_not_in_every_round():
    """Three rounds of a finalist with cudnn_benchmark on (read from its screen, with it off)
    pay its autotuning in the first only: the rounds run in the process that tuned its
    shapes. Priced in each, a budget that holds the rounds held one round fewer."""
    rows = screened_rows()
    on = A.replace(cudnn_benchmark=True)
    configs = [(A, None), (on, None)]
    screen = costs.trial_cost_s(rows, A, 2, 1.0)
    assert followups.cost_s(fake_plan(), rows, on, 2) == pytest.approx(screen + 10.35)
    assert followups.cost_s(fake_plan(), rows, on, 2, tuned=True) == pytest.approx(screen)
    plan = fake_plan(left=2 * REMEASURE_ROUNDS * screen + 10.35 + 0.1)
    todo = rounds_todo(plan, rows, configs, range(1, REMEASURE_ROUNDS + 1), 2)
    assert [r for r, _ in todo] == [1, 1, 2, 2, 3, 3]
    # where processes are not reused, every round pays it
    plan = fake_plan(left=plan.time_left_s(), reused=False)
    todo = rounds_todo(plan, rows, configs, range(1, REMEASURE_ROUNDS + 1), 2)
    assert [r for r, _ in todo] == [1, 1, 2, 2]


def test_only_trials_run_one_after_another_on_one_device_keep_their_process(options):
    """The autotuning a trial paid is priced as kept only where the next trial runs in the
    same process: one device, no cluster, no host-memory limit; with two GPUs a finalist's
    round may run in the other trial process."""
    one = make_plan(options, CUDA)
    assert one.one_trial_at_a_time and one.reuses_trial_processes
    two = make_plan(options, Resources("cuda", 2, 16))
    assert not two.one_trial_at_a_time and not two.reuses_trial_processes
    assert (one.trials_at_once(), two.trials_at_once()) == (1, 2)
    cluster = replace(one, options=replace(one.options, address="10.0.0.1:6379"))
    assert not cluster.reuses_trial_processes
    cpu_cluster = replace(make_plan(options), options=replace(options, address="10.0.0.1:6379"))
    assert cpu_cluster.trials_at_once(alive_nodes=3) == 3   # one per node (tuner.driver)
    assert not cpu_cluster.one_trial_at_a_time
    # two ranks on two GPUs: one trial at a time, but its ranks start anew (Ray Train)
    ranks = make_plan(replace(options, world_size=2), Resources("cuda", 2, 16))
    assert ranks.trials_at_once() == 1 and ranks.one_trial_at_a_time
    assert not ranks.reuses_trial_processes
    assert not replace(one, max_host_memory_mb=4096.0).reuses_trial_processes
    assert make_plan(options).reuses_trial_processes      # this machine's CPU
    assert one.earlier_trial_ids == frozenset()
    resumed = replace(one, prior_rows=({"trial_id": "r-1"}, {"trial_id": "r-2"}))
    assert resumed.earlier_trial_ids == {"r-1", "r-2"}


def test_a_short_re_measurement_leaves_out_the_lower_ranked_on_variants_first():
    """The follow-up policy drops from the end of the searched finalists: the third's
    on-variant, then the second's, and keeps the first-ranked as screened."""
    rows = screened_rows()
    on = [k.replace(cudnn_benchmark=True) for k in (A, B, C)]
    kept_searched = set()
    for left in range(60, 400, 10):
        plan = fake_plan(left=float(left), ceiling=False, cudnn_at_finalists=True)
        _, configs = followups.remeasure_configs(plan, rows)
        decided = followups.round_plan(plan, rows, configs)
        kept, dropped = decided.configs, decided.dropped
        searched = [k for k, ref in kept if ref is None]
        assert searched == [A, *on][:len(searched)]
        assert len(kept) + dropped == len(configs)
        kept_searched.add(len(searched))
    assert {1, 2, 3, 4} <= kept_searched


def test_a_warm_start_row_that_computes_otherwise_is_not_a_point_of_the_screens(options):
    """``Space.project`` reads the sampled knobs only: an earlier run's row with
    cudnn_benchmark on would stand for the screens' point with it off (its rate learnt, and a
    proposal there answered from it). Such a row is left out of the study; one with the value
    the space holds is seeded."""
    from tuner.searcher import ConstrainedSearch, computes_otherwise
    plan = make_plan(options, CUDA)
    space = plan.device_space
    knobs = Knobs(batch_size=256, num_workers=4, prefetch_factor=2, amp="bf16")
    assert not computes_otherwise(space, knobs)
    assert computes_otherwise(space, knobs.replace(cudnn_benchmark=True))
    on_row = make_row(1, knobs.replace(cudnn_benchmark=True), sps=900.0)
    off_row = make_row(2, knobs.replace(batch_size=100), sps=800.0)
    search = ConstrainedSearch(replace(plan.search_spec(),
                                       seed_rows=((on_row, True), (off_row, True))))
    assert [t.params["batch_size"] for t in search.study.trials] == [100]
    assert [value for value, _ in search.measured.values()] == [800.0]


def remeasured(knobs: Knobs, rates: list[float], first: int) -> list[dict]:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return [make_row(first + i, knobs, phase="remeasure", sps=rate,
                     finished_at=t0 + dt.timedelta(minutes=first + i))
            for i, rate in enumerate(rates)]


def test_the_rounds_decide_and_a_tie_keeps_it_off():
    """What the finalists' rows give with the winner's rule: cudnn_benchmark on wins where its
    rounds are clearly faster; within the noise the first-ranked as screened is the answer
    (the simpler: the baseline has it off)."""
    on = A.replace(cudnn_benchmark=True)
    base = remeasured(BASE, [50.0, 50.5, 49.5], 10)
    faster = screened_rows() + base + remeasured(A, [90.0, 91.0, 89.0], 20) + remeasured(
        on, [120.0, 121.0, 119.5], 30)
    assert Knobs.from_dict(winner_rule.best(faster).row, strict=False) == on
    tied = screened_rows() + base + remeasured(A, [90.0, 91.0, 89.0], 20) + remeasured(
        on, [90.5, 89.5, 90.4], 30)
    assert Knobs.from_dict(winner_rule.best(tied).row, strict=False) == A


def test_the_plan_line_names_the_rule_only_when_it_applies():
    plan = SimpleNamespace(options=SimpleNamespace(confirm=3, ceiling=False),
                           cudnn_at_finalists=False)
    assert _followups_text(plan) == ("after the search, beyond its budget: the 3 best "
                                     "re-measured beside the references (--confirm 3)")
