"""One price per trial (``tuner.costs``): the search and the follow-ups price a trial alike, cuDNN's
autotuning is paid once per process and shape (``tuner.knobs.CUDNN_SHAPE_KNOBS``), a compile
by its mode, and every trial's configuration carries its price to its row (``priced_s``)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

import tuner.costs as costs
import tuner.followups as followups
import tuner.price_errors as price_errors
from tests.test_followups import BASE, BUSY, fake_plan, make_row
from tuner.costs import CostModel, RowTimes, TrialCost, TrialShape
from tuner.followups import Batch
from tuner.knobs import Knobs
from tuner.status import Phase

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def timed_row(n: int, knobs: Knobs, *, wall_s: float, measured_s: float, setup_s: float,
              first_step_s: float, warmup_s: float, step_ms: float, **extra) -> dict:
    """A search row whose parts add up: set-up, warm-up (first step included), windows, and
    what follows them (wall less the three)."""
    return {"trial_id": f"t{n}", "phase": "search", "started_at": T0,
            "finished_at": T0 + dt.timedelta(seconds=wall_s), "measured_s": measured_s,
            "setup_s": setup_s, "first_step_s": first_step_s, "warmup_s": warmup_s,
            "step_time_ms_p50": step_ms, **knobs.to_dict(), **extra}


def test_the_breakdown_adds_up_to_the_rows_wall_time_for_the_same_trial():
    """The same knobs and windows as a row: its wall time again, plus Ray's overhead."""
    knobs = Knobs(batch_size=16)
    row = timed_row(0, knobs, wall_s=10.0, measured_s=4.0, setup_s=1.0, first_step_s=2.0,
                    warmup_s=2.5, step_ms=100.0)
    shape = TrialShape(windows=4, window_s=1.0, warmup_steps=6)
    price = CostModel([row]).price(knobs, shape)
    assert price == TrialCost(start_s=costs.TRIAL_OVERHEAD_S, setup_s=3.0, one_off_s=0.0,
                              warmup_s=pytest.approx(0.5), probes_s=0.0, window_s=1.0,
                              windows_s=4.0, tail_s=2.5)
    assert price.total_s == pytest.approx(10.0 + costs.TRIAL_OVERHEAD_S)
    assert price.trial_s == pytest.approx(10.0)                    # its row's priced_s
    assert price.first_window_s == pytest.approx(3.0 + 0.5 + 1.0)


def test_the_first_step_holds_one_step_that_grows_with_the_batch():
    """A first step is one step plus its one-offs (set-up, worker start): at twice the batch
    the step in it doubles, the one-offs do not. Read as a whole one-off, a 256-sample
    screen priced from a small batch's row missed its 18-s first step by 16 s."""
    row = timed_row(0, Knobs(batch_size=16), wall_s=10.0, measured_s=4.0, setup_s=1.0,
                    first_step_s=2.0, warmup_s=2.5, step_ms=100.0)
    shape = TrialShape(windows=4, window_s=0.1, warmup_steps=6, max_warmup_s=5.0)
    double = CostModel([row]).price(Knobs(batch_size=32), shape)
    assert double.setup_s == pytest.approx(1.0 + 1.9 + 0.2)
    assert (double.warmup_s, double.window_s) == (pytest.approx(1.0), pytest.approx(0.2))
    big = CostModel([row]).price(Knobs(batch_size=256), TrialShape(windows=1, window_s=1.0))
    assert big.setup_s == pytest.approx(1.0 + 1.9 + 1.6)


def test_a_trial_is_priced_from_rows_of_its_own_input_pipeline():
    """Batches the main process loads itself (``num_workers`` 0) step at another rate than
    batches workers prefetch: a trial is priced from its own pipeline's line, not from the
    row nearest in batch size of another (ddpm on 2 cores: bs=23 with two workers 0.53 s a
    step, bs=24 without 3.68 s)."""
    cache = Knobs(batch_size=23, data_path="cache", num_workers=2, amp="bf16")
    main = Knobs(batch_size=24, data_path="cache", amp="bf16")
    row = dict(wall_s=5.0, measured_s=2.0, setup_s=0.1, warmup_s=1.0)
    rows = [timed_row(0, cache, first_step_s=1.0, step_ms=530.0, **row),
            timed_row(1, main.replace(batch_size=256), first_step_s=18.0, step_ms=12_330.0,
                      **row),
            timed_row(2, main.replace(batch_size=64), first_step_s=8.0, step_ms=4_500.0, **row)]
    model = CostModel(rows)
    assert model.step_s(main.replace(batch_size=24)) > 2.0
    line = model.fit.line(main.replace(batch_size=24))
    assert line.beta_s == pytest.approx((12.33 - 4.5) / (256 - 64))
    assert model.step_s(main.replace(batch_size=24)) == pytest.approx(line.at(24))
    assert 0.53 < model.step_s(cache.replace(batch_size=24)) < 0.6


def test_a_screen_does_not_pay_the_probes_of_the_row_it_is_priced_from():
    """The row read probed (its warm-up after the first step is two probes); a screen runs
    none (``max_steady_probes`` 0): its price holds no warm-up beyond its first step."""
    probed = timed_row(0, Knobs(batch_size=32), wall_s=14.0, measured_s=8.0, setup_s=0.03,
                       first_step_s=2.6, warmup_s=4.8, step_ms=890.0, steady_probes=2)
    screen = CostModel([probed]).price(Knobs(batch_size=36),
                                       TrialShape(1, 1.0, max_steady_probes=0))
    assert screen.warmup_s == 0.0 and screen.probes_s == 0.0
    one = CostModel([probed]).price(Knobs(batch_size=36), TrialShape(1, 2.0, max_steady_probes=6))
    assert one.probes_s == pytest.approx(2 * 0.89 * 36 / 32)     # two steps longer than a half


def test_the_search_and_the_followups_price_a_trial_alike(monkeypatch):
    """The searcher's ``price`` and ``followups.cost_s`` are one price: the same rows, knobs
    and settings give the same seconds."""
    from tuner.searcher import ConstrainedSearch, SearchSpec
    from tuner.space import Choices, Space
    rows = [make_row(0, BASE, first_step_s=0.05, setup_s=0.5),
            make_row(1, BUSY, first_step_s=0.05, setup_s=0.5)]
    plan = fake_plan(windows=3)
    space = Space("test", {"batch_size": Choices((8, 32, 256))}, {})
    search = ConstrainedSearch(SearchSpec(space=space, metric="samples_per_sec", mode="max",
                                          sampler="random", settings=plan.settings))
    for row in rows:
        search.costs.add(row)
    for knobs in (BASE, BUSY, Knobs(batch_size=256)):
        assert search.price(knobs).total_s == pytest.approx(
            followups.cost_s(plan, rows, knobs, 3))


def test_cudnn_is_autotuned_once_per_process_and_shape():
    """One definition of 'already tuned': a row of this command with cudnn_benchmark on at the
    same batch, precision and layout. Another DataLoader (num_workers) is the same shape;
    another batch is a new one; an earlier command's process is gone."""
    off = Knobs(batch_size=32)
    on = off.replace(cudnn_benchmark=True)
    rows = [timed_row(0, off, wall_s=6.0, measured_s=2.0, setup_s=0.5, first_step_s=1.8,
                      warmup_s=2.0, step_ms=50.0),
            timed_row(1, on, wall_s=16.0, measured_s=2.0, setup_s=0.5, first_step_s=12.2,
                      warmup_s=12.4, step_ms=50.0)]
    model = CostModel(rows)
    assert costs.cudnn_autotune_s(model.search) == pytest.approx(10.4)
    shape = TrialShape(windows=2, window_s=1.0)
    assert model.tuned_in_process(on.replace(num_workers=2))
    assert model.price(on.replace(num_workers=2), shape).one_off_s == 0.0
    assert not model.tuned_in_process(on.replace(batch_size=64))
    assert model.price(on.replace(batch_size=64), shape).one_off_s == pytest.approx(10.4)
    assert model.price(on.replace(amp="bf16"), shape).one_off_s == pytest.approx(10.4)
    gone = CostModel(rows, earlier={"t1"})
    assert gone.price(on, shape).one_off_s == pytest.approx(10.4)
    fresh = CostModel(rows, reused=False)
    assert fresh.price(on, shape).one_off_s == pytest.approx(10.4)
    # a trial planned before it in the process tunes the shape for it
    new = on.replace(batch_size=64)
    assert model.price(new, shape, planned=[new]).one_off_s == 0.0
    assert model.price(new, shape, planned=[new.replace(cudnn_benchmark=False)]).one_off_s > 0


def test_a_compile_is_priced_by_its_mode_not_by_the_row_read():
    """An eager trial read from a compiled row does not pay that compile; a compiled trial
    read from an eager row pays the longest compile measured in its mode."""
    eager = Knobs(batch_size=8)
    compiled = eager.replace(compile="default")
    rows = [timed_row(0, compiled, wall_s=90.0, measured_s=2.0, setup_s=1.0,
                      first_step_s=80.1, warmup_s=81.0, step_ms=100.0, compile_s=80.0),
            timed_row(1, eager.replace(batch_size=16), wall_s=6.0, measured_s=2.0,
                      setup_s=1.0, first_step_s=0.2, warmup_s=1.0, step_ms=200.0)]
    model = CostModel(rows)
    shape = TrialShape(windows=2, window_s=1.0)
    assert model.price(eager, shape).one_off_s == 0.0
    assert model.price(eager, shape).setup_s == pytest.approx(1.1)
    assert model.price(compiled.replace(batch_size=16), shape).one_off_s == 80.0
    assert model.price(compiled.replace(compile="reduce-overhead"), shape).one_off_s == 0.0


def test_without_a_row_a_trial_costs_its_windows_and_the_priors_one_offs():
    """Before any row (the first reference): its windows, the prior's set-up and what follows
    the windows, its workers' start, and a compile as the workload's hint says."""
    price = CostModel().price(Knobs(batch_size=8, num_workers=4),
                              TrialShape(windows=3, window_s=2.0))
    once_s = costs.PRIOR_ONCE_S + 4 * costs.PRIOR_WORKER_START_S
    assert price.total_s == pytest.approx(6.0 + once_s + costs.TRIAL_OVERHEAD_S)
    assert price.first_window_s == pytest.approx(2.0 + once_s)
    assert CostModel().step_s(Knobs(batch_size=8)) is None
    hinted = CostModel(prior=costs.Prior.of(SimpleNamespace(compile_s_hint=80.0)))
    compiled = Knobs(batch_size=8, compile="default")
    assert hinted.price(compiled, TrialShape(1, 1.0)).one_off_s == 80.0
    assert hinted.price(Knobs(batch_size=8), TrialShape(1, 1.0)).one_off_s == 0.0
    assert costs.Prior.of(SimpleNamespace(compile_s_hint=None)).compile_s == 0.0
    tuned = CostModel().price(Knobs(batch_size=8, cudnn_benchmark=True), TrialShape(1, 1.0))
    assert tuned.one_off_s == costs.CUDNN_AUTOTUNE_S


def test_the_fit_recovers_alpha_and_beta_from_noisy_rows_with_an_outlier():
    """Steps of 0.2 s + 0.01 s a sample with ±2 % noise at eight batch sizes, one of them
    slowed threefold by another process: the line comes back within 3 %, the outlier
    dropped; the price of a batch never run reads it."""
    import numpy as np

    from tuner.step_fit import StepFit, fit_line
    rng = np.random.default_rng(0)
    batches = [4, 8, 16, 24, 32, 64, 96, 128]
    steps = [(0.2 + 0.01 * b) * (1 + rng.uniform(-0.02, 0.02)) for b in batches]
    steps[5] *= 3
    line = fit_line(batches, steps)
    assert line.alpha_s == pytest.approx(0.2, rel=0.03)
    assert line.beta_s == pytest.approx(0.01, rel=0.03)
    fit = StepFit([(Knobs(batch_size=b), s) for b, s in zip(batches, steps)])
    assert fit.at(Knobs(batch_size=48)) == pytest.approx(0.2 + 0.48, rel=0.03)
    assert fit_line([8, 8], [0.1, 0.2]) is None                  # one batch size: no line
    flat = fit_line([8, 16, 32], [0.5, 0.4, 0.45])               # no growth: flat, not negative
    assert flat.beta_s == 0.0 and flat.at(1000) == pytest.approx(0.45)
    origin = fit_line([8, 16], [0.05, 0.3])                      # negative intercept: origin
    assert origin.alpha_s == 0.0 and origin.beta_s > 0


def test_a_compile_is_paid_cold_once_per_shape_then_as_the_warm_cache_measured():
    """The first compile of a mode and shape fills the results folder's cache (80 s); the
    next at that shape read it warm (12 s, then 10 s): a third is priced at their median, a
    new shape at the cold compile, another mode at none measured (the prior, 0)."""
    knobs = Knobs(batch_size=8, compile="default")
    rows = [timed_row(i, knobs, wall_s=w, measured_s=2.0, setup_s=1.0, first_step_s=c + 0.1,
                      warmup_s=c + 0.1, step_ms=100.0, compile_s=c)
            for i, (w, c) in enumerate([(90.0, 80.0), (20.0, 12.0), (18.0, 10.0)])]
    model = CostModel(rows[:1])
    assert model.compile_s(knobs) == 80.0 and model.compile_warm(knobs)
    assert CostModel(rows).compile_s(knobs) == pytest.approx(11.0)
    assert CostModel(rows).compile_s(knobs.replace(batch_size=16)) == 80.0
    assert not CostModel(rows).compile_warm(knobs.replace(batch_size=16))
    assert CostModel(rows).compile_s(knobs.replace(compile="max-autotune")) == 0.0
    assert CostModel(rows).compile_s(knobs.replace(compile="off")) == 0.0
    shape = TrialShape(windows=2, window_s=1.0)
    assert CostModel(rows).price(knobs, shape).one_off_s == pytest.approx(11.0)


def test_a_fitted_model_pickles_with_the_searcher_that_holds_it():
    """Ray Tune pickles the searcher, and with it its model and the lines it fitted."""
    import pickle
    rows = [timed_row(i, Knobs(batch_size=b), wall_s=5.0, measured_s=1.0, setup_s=0.1,
                      first_step_s=0.5, warmup_s=0.5, step_ms=10.0 * b)
            for i, b in enumerate((8, 16))]
    model = CostModel(rows)
    price = model.price(Knobs(batch_size=32), TrialShape(1, 1.0))
    assert pickle.loads(pickle.dumps(model)).price(Knobs(batch_size=32), TrialShape(1, 1.0)) == (
        price)


def test_the_row_view_reads_what_it_needs_once():
    row = timed_row(0, Knobs(batch_size=8), wall_s=5.0, measured_s=1.0, setup_s=0.5,
                    first_step_s=0.3, warmup_s=0.2, step_ms=20.0)
    view = RowTimes.of(row)
    assert view.wall_s == 5.0 and view.step_s == 0.02 and view.is_search
    assert view.per_step_warmup_s == 0.0 and view.before_windows_s == pytest.approx(0.8)
    assert RowTimes.of({"phase": "remeasure"}).wall_s is None
    assert TrialShape.of(SimpleNamespace(windows=5, window_s=1.0, warmup_steps=5,
                                         max_steady_probes=6, max_warmup_s=None),
                         {"windows": 1, "max_steady_probes": 0, "ceiling": "compute"}) == (
        TrialShape(1, 1.0, 5, 0, None))


def test_each_followup_trial_carries_the_price_it_was_planned_at():
    """The driver's configurations of a batch carry ``priced_s``: the follow-ups' own price
    of each trial, a configuration's second trial in the batch without its autotuning."""
    from tuner.driver import _trial_configs
    on = BUSY.replace(cudnn_benchmark=True)
    rows = [make_row(0, BASE, first_step_s=1.8), make_row(1, BUSY, first_step_s=1.9)]
    plan = fake_plan(windows=3)
    plan.settings.deadline_unix_s = None
    batch = Batch([(on, None), (BASE, "baseline"), (on, None)], Phase.REMEASURE,
                  {"windows": 2})
    writer = SimpleNamespace(expected=None, rows=rows)
    configs = _trial_configs(plan, writer, batch)
    prices = [c["priced_s"] for c in configs]
    assert prices[0] == pytest.approx(followups.cost_s(plan, rows, on, 2)
                                      - costs.TRIAL_OVERHEAD_S)
    assert prices[1] == pytest.approx(followups.price(plan, rows, BASE, 2).trial_s)
    assert prices[2] == pytest.approx(followups.price(plan, rows, on, 2, tuned=True).trial_s)
    assert prices[0] - prices[2] == pytest.approx(costs.CUDNN_AUTOTUNE_S)


def test_the_recorder_writes_the_price_beside_the_wall_time(tmp_path):
    """A trial's ``priced_s`` reaches its leaderboard row; one without (the memory probe's)
    records null."""
    import tuner.leaderboard as leaderboard
    from tuner.recorder import LeaderboardWriter
    plan = SimpleNamespace(
        run_id="run-a", workload=SimpleNamespace(name="fake"), scale="tiny",
        metric="samples_per_sec",
        options=SimpleNamespace(train_steps=None, global_batch_size=None, address="ray://x",
                                results=str(tmp_path)),
        max_host_memory_mb=None, device="cpu", prior_rows=(), trials=None)
    writer = LeaderboardWriter(plan, lambda kind, data: None, versions={})
    result = {"status": "ok", "samples_per_sec": 10.0, "started_at": T0,
              "finished_at": T0 + dt.timedelta(seconds=7.0), "trial_cpus": 2.0}
    writer.record_result("t0", {**BASE.to_dict(), "priced_s": 6.5, "phase": "search"}, result)
    writer.record_result("t1", {**BASE.to_dict(), "phase": "ceiling"}, result)
    rows = {r["trial_id"]: r for r in leaderboard.read(tmp_path).to_pylist()}
    assert rows["t0"]["priced_s"] == 6.5 and rows["t1"]["priced_s"] is None


def priced_row(n: int, *, priced_s: float, wall_s: float, phase: str = "search",
               reference: str | None = None, windows_planned: int = 5, status: str = "ok",
               **extra) -> dict:
    row = make_row(n, BASE, reference=reference, phase=phase, status=status, seconds=wall_s,
                   windows_planned=windows_planned, priced_s=priced_s, **extra)
    return row


def fabricated_run() -> list[dict]:
    """Two references (5 windows), three screens (1 window), a search trial of 5 windows, a
    round of 2 windows, a ceiling priced 50 % high, the memory probe's row (no price) and a
    pruned screen (left out)."""
    return [priced_row(0, priced_s=10.0, wall_s=10.0, reference="baseline"),
            priced_row(1, priced_s=11.0, wall_s=10.0, reference="recommended"),
            priced_row(2, priced_s=4.0, wall_s=4.0, windows_planned=1),
            priced_row(3, priced_s=4.4, wall_s=4.0, windows_planned=1),
            priced_row(4, priced_s=3.0, wall_s=4.0, windows_planned=1),
            priced_row(5, priced_s=6.0, wall_s=6.0),
            priced_row(6, priced_s=5.0, wall_s=5.0, phase="remeasure", windows_planned=2),
            priced_row(7, priced_s=9.0, wall_s=6.0, phase="ceiling", ceiling="compute"),
            {**priced_row(8, priced_s=1.0, wall_s=3.0, phase="ceiling"),
             "trial_id": "run-a-probe-64", "priced_s": None},
            priced_row(9, priced_s=4.0, wall_s=1.0, windows_planned=1, status="pruned")]


def test_the_price_error_is_measured_per_kind_of_trial():
    errors = {e.kind: e for e in price_errors.price_errors(fabricated_run())}
    assert list(errors) == ["reference", "screen", "search", "ceiling", "round of 2 windows"]
    assert errors["reference"].count == 2
    assert errors["reference"].median == pytest.approx(0.05)
    assert errors["screen"].count == 3                      # the pruned one left out
    assert errors["screen"].median == pytest.approx(0.1)
    assert errors["screen"].p90 == pytest.approx(0.1 + 0.8 * (0.25 - 0.1))
    assert errors["search"].median == 0.0 and errors["round of 2 windows"].count == 1
    one = {**fabricated_run()[6], "windows_planned": 1}
    assert [e.kind for e in price_errors.price_errors([one])] == ["round of 1 window"]
    assert errors["ceiling"].median == pytest.approx(0.5)
    assert errors["ceiling"].priced_s == 9.0 and errors["ceiling"].wall_s == 6.0


def test_the_summary_names_a_kind_mispriced_by_more_than_a_quarter():
    from rich.console import Console

    from tuner.driver import RunSummary
    from tuner.summary import print_summary
    lines = price_errors.mispriced_lines(fabricated_run())
    assert lines == ["the cost model mispriced ceiling trials by a median 50%: 1 priced at a "
                     "median 9.0 s took 6.0 s (90th percentile of the error 50%)"]
    assert price_errors.mispriced_lines(fabricated_run()[:7]) == []
    console = Console(record=True, width=200)
    print_summary(console, None, RunSummary("run-a", "fake", "cpu", "tiny", fabricated_run(),
                                            60.0, "/tmp/results"))
    assert "note: the cost model mispriced ceiling trials by a median 50%" in console.export_text()


def test_the_bench_prints_the_error_of_each_kind_from_a_leaderboard(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    import tuner.leaderboard as leaderboard
    leaderboard.append(tmp_path, fabricated_run())
    path = Path(__file__).resolve().parent.parent / "bench" / "price_error.py"
    spec = importlib.util.spec_from_file_location("price_error", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main([str(tmp_path), "--workload", "fake"]) == 0
    out = capsys.readouterr().out
    assert "run run-a:" in out
    assert any(line.split()[:4] == ["ceiling", "1", "50.0%", "50.0%"]
               for line in out.splitlines())
    assert "  pruned: search bs=8 priced 4.00 s, stopped after 1.00 s" in out.splitlines()
    assert "10 rows, 1 without a price" in out
    assert bench.main([str(tmp_path), "--replay"]) == 0
    replay = capsys.readouterr().out.split("priced again by this checkout's model:")[1]
    # the first row has nothing before it: priced from the prior, its windows of 2 s
    kinds = [line.split()[0] for line in replay.splitlines()[1:] if "%" in line]
    assert kinds and set(kinds) <= {"reference", "screen", "search", "ceiling", "round"}
    assert bench.main([str(tmp_path), "--pooled"]) == 0
    assert "1 runs pooled:" in capsys.readouterr().out.splitlines()


# ---------------------------------------------------------------- against a clocked trial

class ClockedLinear:
    """Steps on a ``StepClock`` whose time grows with the micro-batch (samples/sec held, as
    the price assumes): ``PER_SAMPLE_S`` a sample, and ``FIRST_S`` more in a trial's first step
    (a one-off: a cache fill, cuDNN's autotuning), paid once whatever the batch."""

    PER_SAMPLE_S = 0.00125
    FIRST_S = 0.3

    @classmethod
    def on(cls, clock):
        from tests.fake_workloads import Regression

        class Clocked(Regression):
            name = "fake-clocked-linear"

            def training_step(self, model, batch):
                if batch[0].device.type != "meta":
                    if not getattr(model, "clocked_first_step_done", False):
                        model.clocked_first_step_done = True
                        clock.now += cls.FIRST_S
                    clock.now += cls.PER_SAMPLE_S * batch[0].shape[0]
                return Regression.training_step(self, model, batch)
        return Clocked()


def clocked_trial(clock, knobs: Knobs, settings) -> dict:
    """Run one trial on ``clock``; its row with the clock's seconds as its wall time."""
    from tuner.trial.harness import run_trial
    start = clock.now
    result = run_trial(ClockedLinear.on(clock), knobs, settings)
    assert result["status"] == "ok", result.get("error")
    return {**result, **knobs.to_dict(), "phase": "search", "trial_id": f"t{start}",
            "started_at": T0, "finished_at": T0 + dt.timedelta(seconds=clock.now - start)}


@pytest.mark.parametrize("kind, knobs, changes", [
    ("screen", Knobs(batch_size=16), {"windows": 1, "max_steady_probes": 0}),
    ("search trial", Knobs(batch_size=16), {}),
    ("round of 1 window", Knobs(batch_size=8), {"windows": 1, "breakdown_steps": 0}),
    ("round of 2 windows", Knobs(batch_size=8), {"windows": 2, "breakdown_steps": 0}),
    ("ceiling", Knobs(batch_size=8), {"compute_only": True, "ceiling": "compute",
                                      "breakdown_steps": 0}),
])
def test_each_kind_of_trial_takes_its_price_on_a_step_clock(regression_data, step_clock, kind,
                                                            knobs, changes):
    """A reference of three windows at batch 8 is the row read; each kind of trial the
    planner prices from it (a screen and a search trial at twice the batch, rounds of one and
    two windows, a compute-only ceiling), run on the same clock, takes its price within 10 %
    (Ray's overhead, ``start_s``, lies outside the trial)."""
    from dataclasses import replace

    from tuner.settings import TrialSettings
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.5, warmup_steps=5, max_steady_probes=6)
    model = CostModel([clocked_trial(step_clock, Knobs(batch_size=8), settings)])
    price = model.price(knobs, TrialShape.of(settings, changes))
    row = clocked_trial(step_clock, knobs, replace(settings, **changes))
    wall_s = RowTimes.of(row).wall_s
    assert price.trial_s == pytest.approx(wall_s, rel=0.10), (kind, price, row)
    assert price.first_window_s <= wall_s + 1e-9


def test_a_window_holds_whole_steps_on_a_step_clock(regression_data, step_clock, monkeypatch):
    """A window ends on the first step past its length: with steps of 0.15 s a window of
    0.25 s holds two, 0.3 s, not the 0.25 s a window at least one step long would say."""
    from tuner.settings import TrialSettings
    assert costs.window_of_s(0.15, 0.25) == pytest.approx(0.3)
    assert costs.window_of_s(0.3, 0.25) == 0.3 and costs.window_of_s(0.0, 0.25) == 0.25
    assert costs.window_of_s(0.05, 0.25) == pytest.approx(0.25)   # five steps, exactly
    monkeypatch.setattr(ClockedLinear, "PER_SAMPLE_S", 0.15 / 8)
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.25, warmup_steps=2, breakdown_steps=0)
    knobs = Knobs(batch_size=8)
    price = CostModel([clocked_trial(step_clock, knobs, settings)]).price(
        knobs, TrialShape.of(settings))
    row = clocked_trial(step_clock, knobs, settings)
    assert price.windows_s == pytest.approx(row["measured_s"], rel=0.02)
    assert price.trial_s == pytest.approx(RowTimes.of(row).wall_s, rel=0.10)
