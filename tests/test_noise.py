"""Winners inside the noise: speed-ups with a confidence interval from interleaved rounds, the
tie rule (a tie goes to the simpler configuration), impossible figures set aside, references
retried after a transient failure, and the re-measurement's rounds (sized, resumed). All in
process: synthetic leaderboard rows, the driver's phase functions with Ray Tune replaced."""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from rich.console import Console
from scipy import stats

import tuner.budget as budget
import tuner.costs as costs
import tuner.driver as driver
import tuner.followups as followups
import tuner.leaderboard as leaderboard
import tuner.noise as noise
import tuner.windows as windows
import tuner.winner as winner
from tests.test_leaderboard import T0, row
from tuner.knobs import Knobs
from tuner.plan import Plan
from tuner.progress import Progress
from tuner.summary import print_best, verdict_lines
from tuner.trial.measure import Window, summarise

BASE = Knobs(batch_size=8, num_workers=2, prefetch_factor=2)
FAST = Knobs(batch_size=32, num_workers=2, prefetch_factor=2)
BUSY = Knobs(batch_size=32, num_workers=6, prefetch_factor=4, persistent_workers=True)


def rounds(configs: list[tuple[Knobs, str | None, list[float]]], *, cv: float = 0.02,
           windows: int = 2, run: str = "run-a", phase: str = "remeasure") -> list[dict]:
    """Rows of interleaved rounds: round r measures each configuration in order (A B C, A B C),
    configuration i at ``rates[r]`` samples/sec."""
    out, n = [], 0
    for r in range(len(configs[0][2])):
        for knobs, ref, rates in configs:
            out.append({**row(n, run=run, sps=rates[r], reference=ref, knobs=knobs,
                              samples_per_sec_cv=cv, windows=windows, phase=phase),
                        "started_at": T0 + dt.timedelta(seconds=10 * n),
                        "finished_at": T0 + dt.timedelta(seconds=10 * n + 5)})
            n += 1
    return out


# ------------------------------------------------------------------------- the interval


def test_three_rounds_give_a_t_interval_on_the_per_round_log_ratios():
    a, b = [110.0, 124.0, 100.0], [100.0, 100.0, 100.0]
    pairs = [({"samples_per_sec": x, "samples_per_sec_cv": 0.001, "windows": 4},
              {"samples_per_sec": y, "samples_per_sec_cv": 0.001, "windows": 4})
             for x, y in zip(a, b)]
    sp = noise.speedup(pairs)
    d = [math.log(x / y) for x, y in zip(a, b)]
    low, high = stats.t.interval(0.95, len(d) - 1, loc=sum(d) / 3, scale=stats.sem(d))
    assert sp.ratio == pytest.approx(math.exp(sum(d) / 3))
    assert (sp.low, sp.high) == (pytest.approx(math.exp(low)), pytest.approx(math.exp(high)))
    assert sp.pairs == 3 and sp.tie                  # +10 %, +24 %, 0 %: 1 is inside
    assert sp.text().startswith("tie within the noise (speed-up 1.11, 95 % CI [")
    assert "x faster" not in sp.text()


def test_rounds_that_agree_by_chance_keep_the_windows_spread():
    """Two rounds with the same ratio have a sample deviation of 0: the interval falls back to
    what the windows say (Welch), never a zero width."""
    pair = ({"samples_per_sec": 120.0, "samples_per_sec_cv": 0.05, "windows": 3},
            {"samples_per_sec": 100.0, "samples_per_sec_cv": 0.05, "windows": 3})
    sp = noise.speedup([pair, pair])
    v = math.pi / 2 * 0.05 ** 2 / 2                 # var(ln median) per row: cv^2/(n-1) x pi/2
    se = math.sqrt(4 * v) / 2
    df = (4 * v) ** 2 / (4 * v * v / 2)
    half = stats.t.ppf(0.975, df) * se
    assert sp.low == pytest.approx(1.2 * math.exp(-half))
    assert sp.high == pytest.approx(1.2 * math.exp(half))
    assert not sp.tie and sp.text().startswith("1.20x faster (95 % CI [")


def test_one_pair_has_no_interval_and_ties_only_within_the_floor():
    """One measurement each (--confirm 0): the windows cannot see the drift between trials, so
    no interval (a Welch interval on 2 windows read a 2.4x lead as [0.10, 54.9] on a busy
    machine); within 10 % of 1 it is a tie, beyond it a speed-up."""
    a = {"samples_per_sec": 150.0, "samples_per_sec_cv": 0.3, "windows": 2}
    b = {"samples_per_sec": 100.0, "samples_per_sec_cv": 0.3, "windows": 2}
    ab, ba = noise.speedup([(a, b)]), noise.speedup([(b, a)])
    assert ab.pairs == 1 and ab.ratio == pytest.approx(1.5) and ba.ratio == pytest.approx(1 / 1.5)
    assert ab.low is None and not ab.tie and ab.text().startswith("1.50x faster (one measurement")
    close = noise.speedup([({**a, "samples_per_sec": 104.0}, b)])
    assert close.tie and close.text().startswith("tie within the noise (speed-up 1.04, one")


def test_a_single_window_is_no_interval_either():
    a = {"samples_per_sec": 101.0, "samples_per_sec_cv": 0.0, "windows": 1}
    sp = noise.speedup([(a, {**a, "samples_per_sec": 100.0})])
    assert sp.low is None and sp.tie and "no interval" in sp.text()
    assert noise.speedup([]) is None


def test_time_to_train_speedup_is_the_inverse_time_ratio():
    a = {"time_to_train_s": 50.0, "samples_per_sec_cv": 0.01, "windows": 3}
    b = {"time_to_train_s": 100.0, "samples_per_sec_cv": 0.01, "windows": 3}
    assert noise.speedup([(a, b)], "time_to_train_s", higher_is_better=False).ratio == \
        pytest.approx(2.0)


def test_simplicity_orders_compile_then_workers_then_distance_to_the_baseline():
    base = BASE.to_dict()
    compiled = FAST.replace(compile="default").to_dict()
    order = sorted([compiled, BUSY.to_dict(), FAST.to_dict(), base],
                   key=lambda k: noise.simplicity(k, base))
    assert order == [base, FAST.to_dict(), BUSY.to_dict(), compiled]


@pytest.mark.parametrize("changes, reason", [
    ({"samples_per_sec": 0.0}, "non-positive samples/sec"),
    ({"step_time_ms_p50": -1.0}, "non-positive step time"),
    ({"mfu_pct": 140.0, "mfu_impossible": True}, "MFU 140 % is above 100 %"),
])
def test_impossible_figures_are_named(changes, reason):
    assert reason in noise.impossible({**row(0), **changes})
    assert noise.impossible(row(0)) is None


# ----------------------------------------------- one disturbed window (a host's, not a config's)

# ddpm on a 2-core CPU host, 3 interleaved rounds of 2 windows each (samples/sec per window): the
# best's first round lost one window to the host (median 99.8, window CV 0.49); every round is
# >= 1.9x the baseline's. The rounds' medians are the printed 99.8, 136.2, 150.0 and 52.6, 53.5,
# 55.7.
DDPM_BEST_WINDOWS = [[50.9, 148.7], [133.5, 138.9], [147.0, 153.0]]
DDPM_BASE_WINDOWS = [[51.8, 53.4], [52.4, 54.6], [54.6, 56.8]]
CLEAN_FIRST_ROUND = [146.0, 151.4]       # the same round as an undisturbed host gives it


def measured(rates: list[float]) -> dict:
    """A row's measured figures from its windows' samples/sec, as the harness summarises them."""
    return summarise([Window(steps=10, samples=1000, seconds=1000 / x) for x in rates])


def interleaved(configs: list[tuple[Knobs, str | None, list[list[float]]]]) -> list[dict]:
    """Leaderboard rows of interleaved rounds, configuration i's round r from its windows."""
    out = []
    for r in range(len(configs[0][2])):
        for knobs, ref, windows_r in configs:
            n = len(out)
            out.append({**row(n, sps=None, reference=ref, knobs=knobs, phase="remeasure"),
                        **measured(windows_r[r]),
                        "started_at": T0 + dt.timedelta(seconds=10 * n),
                        "finished_at": T0 + dt.timedelta(seconds=10 * n + 5)})
    return out


def log_width(sp: noise.Speedup) -> float:
    return math.log(sp.high / sp.low)


def test_the_ddpm_rounds_are_the_printed_figures():
    """The constructed windows give the rows the run printed: the medians, one window CV of 0.49."""
    best = [measured(w) for w in DDPM_BEST_WINDOWS]
    base = [measured(w) for w in DDPM_BASE_WINDOWS]
    assert [round(r["samples_per_sec"], 1) for r in best] == [99.8, 136.2, 150.0]
    assert [round(r["samples_per_sec"], 1) for r in base] == [52.6, 53.5, 55.7]
    assert round(best[0]["samples_per_sec_cv"], 2) == 0.49
    assert max(r["samples_per_sec_cv"] for r in best[1:] + base) < 0.025
    assert min(a["samples_per_sec"] / b["samples_per_sec"] for a, b in zip(best, base)) > 1.89


def test_one_disturbed_window_leaves_a_clear_win_a_win():
    """The twelve rows: the disturbed window no longer sets the floor (its own spread had one
    degree of freedom, t = 12.7: [0.19, 29.2]); the answer drops it from its round and reads the
    win from the rounds, within a tenth of the interval the undisturbed rounds give."""
    rows = interleaved([(FAST, None, DDPM_BEST_WINDOWS), (BASE, "baseline", DDPM_BASE_WINDOWS)])
    answer = winner.best(rows)
    assert answer.knobs == FAST and not answer.baseline.is_best
    sp = answer.baseline.speedup
    assert not sp.tie and sp.text().startswith("2.69x faster (95 % CI [2.36, 3.06])")
    assert answer.samples_per_sec == pytest.approx((148.7 * 136.2 * 150.0) ** (1 / 3), rel=1e-3)

    clean = winner.best(interleaved([(FAST, None, [CLEAN_FIRST_ROUND, *DDPM_BEST_WINDOWS[1:]]),
                                     (BASE, "baseline", DDPM_BASE_WINDOWS)]))
    assert clean.baseline.speedup.ratio == pytest.approx(sp.ratio, rel=1e-3)
    assert log_width(sp) == pytest.approx(log_width(clean.baseline.speedup), rel=0.1)

    # Without dropping the window (the raw rows straight to the interval), the disturbed round's
    # median (99.8 where the others ran near 140) widens the interval 3.6x in log terms, from the
    # rounds' own spread, and the win stays a win.
    pairs = [(measured(a), measured(b)) for a, b in zip(DDPM_BEST_WINDOWS, DDPM_BASE_WINDOWS)]
    raw = noise.speedup(pairs)
    assert not raw.tie and raw.text().startswith("2.35x faster (95 % CI [1.47, 3.75])")
    assert 3 < log_width(raw) / log_width(clean.baseline.speedup) < 4


def test_the_disturbed_row_takes_the_pooled_window_noise_not_its_own():
    """The floor: a disturbed row's variance is the undisturbed rows' pooled window variance
    (their degrees of freedom), one Welch term; the others keep their own."""
    a = {"samples_per_sec": 120.0, "samples_per_sec_cv": 0.05, "windows": 2}
    b = {"samples_per_sec": 100.0, "samples_per_sec_cv": 0.05, "windows": 2}
    wild = {**a, "samples_per_sec_cv": 0.49}
    sp = noise.speedup([(wild, b), (a, b), (a, b)])     # rounds agree: the floor binds
    v_row = math.pi / 2 * 0.05 ** 2 / 1                 # var(ln median): cv^2/(n-1) x pi/2
    pooled = math.pi / 2 * (2 * 0.05 ** 2) / 2          # pooled window var 2cv^2, median of 2
    parts = [(v_row, 1)] * 5 + [(pooled, 5)]
    total = sum(v for v, _ in parts)
    df = total ** 2 / sum(v * v / d for v, d in parts)
    half = stats.t.ppf(0.975, df) * math.sqrt(total) / 3
    assert (sp.low, sp.high) == (pytest.approx(1.2 * math.exp(-half)),
                                 pytest.approx(1.2 * math.exp(half)))
    assert df > 4 and not sp.tie                        # was df 1.0 and t = 12.7


@pytest.mark.parametrize("wild_round", [[34.3, 100.0], [100.0, 292.0]],
                         ids=["slow-window", "fast-window"])
def test_a_real_tie_stays_a_tie_with_one_wild_window(wild_round):
    """Two configurations equal within the noise: a wild window in either direction neither
    makes one of them a win nor moves the answer off the simpler one."""
    a_windows = [wild_round, [97.0, 99.0], [101.0, 103.5]]
    b_windows = [[99.0, 101.0], [99.5, 101.5], [99.0, 100.5]]
    rows = interleaved([(FAST, None, a_windows), (BASE, "baseline", b_windows)])
    answer = winner.best(rows)
    assert answer.baseline.is_best                      # the simpler configuration
    cleaned = noise.undisturbed(rows, winner.RATE_COLUMNS)
    sp = noise.speedup(winner.pairs(cleaned[0::2], cleaned[1::2]))
    assert sp.tie and sp.pairs == 3
    if answer.tied_faster:
        assert answer.tied_faster.speedup == sp
    raw = noise.speedup([(measured(a), measured(b)) for a, b in zip(a_windows, b_windows)])
    assert raw.tie and "x faster" not in raw.text()


def test_window_spread_calls_a_window_cv_about_5x_the_median_disturbed():
    """Two windows (df 1): disturbed above chi2(1)'s 99.9 % point over the robust scale, a CV
    about 4.9x the median; the pooled variance is the others' (2 cv^2 each)."""
    def rows(cv):
        return [{"samples_per_sec_cv": 0.02, "windows": 2}] * 5 + [
            {"samples_per_sec_cv": cv, "windows": 2}]
    assert noise.window_spread(rows(0.09)).disturbed == (False,) * 6
    spread = noise.window_spread(rows(0.10))
    assert spread.disturbed == (False,) * 5 + (True,)
    assert spread.variance == pytest.approx(2 * 0.02 ** 2) and spread.df == 5
    # Two rows are no robust scale: neither is called disturbed.
    assert noise.window_spread(rows(0.5)[-2:]).disturbed == (False, False)


def test_a_configuration_disturbed_in_most_rounds_keeps_its_rates():
    """A configuration whose windows spread wide in most rounds spreads by itself: its rounds
    keep their medians; one disturbed round among calm ones keeps its faster window."""
    calm = [[99.0, 101.0], [98.0, 100.0], [100.5, 102.0]]
    erratic = [[40.0, 120.0], [41.0, 121.0], [80.0, 82.0]]
    once = [[60.0, 180.0], [149.0, 151.0], [150.0, 152.0]]
    rows = interleaved([(BASE, "baseline", calm), (BUSY, None, erratic), (FAST, None, once)])
    out = noise.undisturbed(rows, winner.RATE_COLUMNS)
    by_knobs = {k: [r for r in out if Knobs.from_dict(r, strict=False) == k]
                for k in (BASE, BUSY, FAST)}
    assert [r["samples_per_sec"] for r in by_knobs[BUSY]] == [80.0, 81.0, 81.0]
    assert [r["samples_per_sec"] for r in by_knobs[FAST]] == [
        pytest.approx(180.0), 150.0, 151.0]
    assert by_knobs[FAST][0]["windows"] == 1 and by_knobs[FAST][0]["samples_per_sec_cv"] == 0
    assert [r["samples_per_sec"] for r in by_knobs[BASE]] == [100.0, 99.0, 101.25]
    assert rows[2]["samples_per_sec"] == 120.0          # the input rows are not modified


# ------------------------------------------------------------ tuner.winner.best's answer


def test_two_configurations_identical_in_speed_are_a_tie_not_a_speedup():
    """The search's best and the baseline measure the same within the noise:
    the answer is the baseline itself (simpler), never '1.00x faster' than itself."""
    rows = rounds([(FAST, None, [101.0, 97.0, 102.0]),
                   (BASE, "baseline", [99.0, 100.0, 98.0])])
    top = winner.best(rows)
    assert top.knobs.batch_size == BASE.batch_size and top.baseline.is_best
    assert top.rounds == 3
    assert top.samples_per_sec == pytest.approx((99.0 * 100.0 * 98.0) ** (1 / 3))
    row_fast, sp = top.tied_faster.row, top.tied_faster.speedup
    assert row_fast["batch_size"] == FAST.batch_size and sp.tie
    lines = verdict_lines(top)
    assert any("tie within the noise (speed-up 1.01, 95 % CI [" in ln for ln in lines), lines
    assert not any("x faster" in ln for ln in lines), lines


def test_a_tie_between_searched_configurations_goes_to_fewer_workers():
    rows = rounds([(BUSY, None, [110.0, 99.0, 106.0]), (FAST, None, [104.0, 103.0, 101.0]),
                   (BASE, "baseline", [50.0, 51.0, 49.0])])
    top = winner.best(rows)
    assert top.knobs.num_workers == FAST.num_workers        # slower by 1 %, within the noise
    assert top.tied_faster.row["num_workers"] == BUSY.num_workers
    sp = top.baseline.speedup
    assert not sp.tie and sp.ratio == pytest.approx((104 * 103 * 101 / (50 * 51 * 49)) ** (1 / 3))
    assert sp.low < sp.ratio < sp.high
    assert sp.pairs == 3
    assert top.recommended.ratio is None                    # no recommended in this run


def test_the_answers_tflops_and_mfu_belong_to_its_mean_samples_per_sec():
    """The winner's samples/sec is the geometric mean of its rounds; its MFU, TFLOP/s and
    tokens/sec are that rate's, not the figures of the one round nearest it."""
    rows = rounds([(FAST, None, [150.0, 120.0, 180.0]), (BASE, "baseline", [50.0, 51.0, 49.0])])
    for r in rows:
        r.update(achieved_tflops=r["samples_per_sec"] / 100, mfu_pct=r["samples_per_sec"] / 10,
                 tokens_per_sec=r["samples_per_sec"] * 256)
    top = winner.best(rows)
    mean = (150.0 * 120.0 * 180.0) ** (1 / 3)
    assert top.samples_per_sec == pytest.approx(mean)
    assert top.row["achieved_tflops"] == pytest.approx(mean / 100)
    assert top.row["mfu_pct"] == pytest.approx(mean / 10)
    assert top.row["tokens_per_sec"] == pytest.approx(mean * 256)


def test_a_tie_never_goes_to_a_configuration_clearly_slower_than_another_tied_one():
    """The fastest (noisy rounds) ties with the baseline and with a simpler configuration
    (no workers) that is clearly slower than the baseline: the answer is not that one."""
    simple = Knobs(batch_size=16, num_workers=0)
    rows = rounds([(BUSY, None, [110.0, 90.0, 120.0]), (simple, None, [90.0, 91.0, 89.0]),
                   (BASE, "baseline", [100.0, 101.0, 99.0])])
    sp = noise.speedup(winner.pairs(*[[r for r in rows if r["batch_size"] == k]
                                       for k in (BASE.batch_size, simple.batch_size)],
                                     "samples_per_sec"))
    assert not sp.tie and sp.ratio > 1                    # the baseline beats it, clearly
    top = winner.best(rows)
    assert top.knobs.batch_size == BASE.batch_size and top.baseline.is_best
    assert top.tied_faster.row["num_workers"] == BUSY.num_workers


def test_a_clear_win_is_a_speedup_with_its_interval():
    rows = rounds([(FAST, None, [150.0, 148.0, 153.0]), (BASE, "baseline", [100.0, 99.0, 101.0])])
    top = winner.best(rows)
    assert top.knobs.batch_size == FAST.batch_size and top.tied_faster is None
    assert not top.baseline.tie and top.baseline.speedup.low > 1.4
    (line,) = verdict_lines(top)
    assert line.startswith("vs baseline: 1.50x faster (95 % CI [")
    assert "3 interleaved rounds" in line


def test_rounds_pair_by_position_and_a_failed_round_drops_only_its_pair():
    rows = rounds([(FAST, None, [150.0, 10.0, 153.0]), (BASE, "baseline", [100.0, 99.0, 101.0])])
    failed = rows[2]                                 # round 2 of FAST
    failed.update(status="error", samples_per_sec=None, error="boom")
    top = winner.best(rows)
    assert top.baseline.speedup.pairs == 2
    assert top.baseline.ratio == pytest.approx(math.sqrt(1.5 * 153 / 101))


def test_an_impossible_measurement_never_wins_and_is_reported():
    rows = rounds([(FAST, None, [150.0, 148.0, 153.0]), (BASE, "baseline", [100.0, 99.0, 101.0])])
    rows[0].update(samples_per_sec=900.0, mfu_pct=180.0, mfu_impossible=True)
    top = winner.best(rows)
    assert top.rounds == 2 and top.samples_per_sec < 200
    assert top.disturbed == (winner.Disturbed(rows[0]["trial_id"],
                                              "MFU 180 % is above 100 % of the card's peak"),)
    assert any("set aside as disturbed" in ln and "MFU 180 %" in ln for ln in verdict_lines(top))


def test_a_retried_reference_counts_its_successful_trial():
    rows = [row(0, reference="baseline", status="error", sps=None, knobs=BASE,
                error="DataLoader worker failure: RuntimeError: killed"),
            row(1, knobs=FAST, sps=300.0),
            row(2, reference="baseline", sps=100.0, knobs=BASE)]        # the retry
    top = winner.best(rows)
    assert top.baseline.samples_per_sec == 100.0
    assert top.baseline.ratio == pytest.approx(3.0)


def test_summary_and_best_command_say_tie(tmp_path):
    rows = rounds([(FAST, None, [101.0, 97.0, 102.0]), (BASE, "baseline", [99.0, 100.0, 98.0]),
                   (BUSY, "recommended", [100.0, 102.0, 97.0])])
    console = Console(record=True, width=200)
    summary = SimpleNamespace(workload="fake-regression", scale="tiny", results_dir="res")
    print_best(console, rows, summary)
    out = console.export_text()
    assert "the best itself" in out and "x faster" not in out
    assert "vs recommended: tie within the noise (speed-up" in out
    leaderboard.append(tmp_path, rows)
    from tuner.cli import main
    result = CliRunner().invoke(main, ["best", "--workload", "fake-regression", "--results",
                                       str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["baseline_is_best"] and doc["knobs"]["batch_size"] == BASE.batch_size
    assert doc["tie_vs_recommended"] is True and doc["rounds"] == 3
    low, high = doc["speedup_ci_vs_recommended"]
    assert low <= 1 <= high
    assert doc["chosen_over_faster"]["knobs"]["batch_size"] == FAST.batch_size
    text = CliRunner().invoke(main, ["best", "--workload", "fake-regression", "--results",
                                     str(tmp_path), "--format", "python"]).output
    assert "the baseline itself" in text.splitlines()[0]


def test_a_loader_ceiling_below_the_best_is_printed_as_disturbed_not_as_a_bound(tmp_path):
    rows = rounds([(FAST, None, [150.0, 148.0, 153.0]), (BASE, "baseline", [100.0, 99.0, 101.0])])
    rows.append({**row(9, sps=120.0, knobs=FAST, phase="ceiling", ceiling="loader"),
                 "started_at": T0 + dt.timedelta(minutes=5)})
    console = Console(record=True, width=250)
    summary = SimpleNamespace(workload="fake-regression", scale="tiny", results_dir="res")
    print_best(console, rows, summary)
    line = next(ln for ln in console.export_text().splitlines() if "loader-only ceiling" in ln)
    assert "disturbed" in line and "not a bound" in line


def test_the_live_best_counts_no_ceiling_and_no_disturbed_row():
    progress = Progress(Console(record=True, width=200))
    progress._trial(row(0, sps=40.0), 1, None)
    progress._trial(row(1, sps=1078.0, phase="ceiling", ceiling="loader"), 2, None)
    progress._trial(row(2, sps=900.0, mfu_pct=180.0, mfu_impossible=True), 3, None)
    assert progress.best_sps == 40.0


def test_validate_refuses_a_row_without_a_whole_measurement_in_one_line(tmp_path):
    """A pruned trial's figure is partial, a ceiling is no configuration's rate, an impossible
    row was disturbed: ``validate --trial`` names the trial and what it accepts, exit 2,
    before it trains anything."""
    rows = rounds([(FAST, None, [150.0, 148.0, 153.0]), (BASE, "baseline", [100.0, 99.0, 101.0])])
    rows += [row(20, status="pruned", sps=5.0, knobs=FAST),
             row(21, status="error", sps=None, knobs=FAST),
             row(22, sps=400.0, knobs=FAST, phase="ceiling", ceiling="compute"),
             row(23, sps=900.0, knobs=FAST, mfu_pct=180.0, mfu_impossible=True)]
    leaderboard.append(tmp_path, rows)
    from tuner.cli import main
    for trial, says in (("run-a-20", "ended pruned"), ("run-a-21", "ended error"),
                        ("run-a-22", "compute-only ceiling"), ("run-a-23", "MFU 180 %")):
        result = CliRunner().invoke(main, ["validate", "--workload",
                                           "tests.fake_workloads:regression",
                                           "--results", str(tmp_path), "--trial", trial])
        assert result.exit_code == 2, (trial, result.output)
        assert says in result.output and "accepted:" in result.output, result.output
        assert "Traceback" not in result.output and "validating" not in result.output


# ------------------------------------------------------------- the driver's follow-ups


def plan_for(confirm: int = 3, left: float | None = None, windows: int = 3):
    """What the follow-up functions read of a plan: a run without ``--ceiling`` (the time the
    rounds keep for a ceiling is tested in tests/test_followups.py)."""
    plan = SimpleNamespace(
        metric="samples_per_sec", mode="max", accelerator_type=None,
        options=SimpleNamespace(confirm=confirm, ceiling=False),
        settings=SimpleNamespace(windows=windows, window_s=1.0, warmup_steps=1,
                                 max_steady_probes=6, max_warmup_s=None),
        round_windows=Plan.round_windows.fget(SimpleNamespace(settings=SimpleNamespace(
            windows=windows))),
        references=(("baseline", BASE), ("recommended", BUSY)), time_left_s=lambda: left,
        cudnn_at_finalists=False, reuses_trial_processes=True, earlier_trial_ids=frozenset())
    return plan


class Fits(list):
    """Ray Tune replaced: ``measure(batches, writer)`` runs a follow-up's batches as the run's
    experiment would, appending one ok row per configuration to the writer (as the
    LeaderboardWriter does) before the next batch is planned, and records each batch as
    (phase, [(batch size, reference)], settings). ``impossible_first``: the first row of
    each batch has a figure that cannot be true."""

    def measure(self, batches, writer, impossible_first: bool = False) -> None:
        for batch in batches:
            self.append((str(batch.phase), [(k.batch_size, ref) for k, ref in batch.configs],
                         batch.settings))
            for i, (knobs, ref) in enumerate(batch.configs):
                bad = {"step_time_ms_p50": 0.0} if impossible_first and i == 0 else {}
                writer.rows.append(row(len(writer.rows), knobs=knobs, reference=ref,
                                       phase=str(batch.phase), sps=100.0, **bad))


@pytest.fixture
def fits():
    return Fits()


def search_rows() -> list[dict]:
    return [row(0, knobs=BASE, reference="baseline", sps=50.0),
            row(1, knobs=BUSY, reference="recommended", sps=60.0),
            row(2, knobs=FAST, sps=56.4), row(3, knobs=Knobs(batch_size=4), sps=4.8)]


def test_only_configurations_that_can_win_are_remeasured():
    top, configs = followups.remeasure_configs(plan_for(confirm=4), search_rows())
    assert [k.batch_size for k in top] == [32, 32, 8]            # BUSY, FAST, BASE; not 4.8
    assert Knobs(batch_size=4) not in [k for k, _ in configs]
    assert [ref for _, ref in configs] == ["recommended", None, "baseline"]


def test_rounds_interleave_and_a_resumed_run_measures_only_what_is_missing(fits):
    plan = plan_for(windows=3)
    configs = [(FAST, None), (BASE, "baseline")]
    writer = SimpleNamespace(rows=search_rows())
    events = []
    fits.measure(followups.rounds(plan, writer.rows, configs,
                                  lambda kind, data: events.append(data)), writer)
    # One batch: A B, A B, A B.
    assert [(phase, done) for phase, done, _ in fits] == [
        ("remeasure", [(32, None), (8, "baseline")] * 3)]
    assert [(e["round"], e["last_round"]) for e in events] == [(1, 3)]
    assert {c["windows"] for *_, c in fits} == {2}               # 3 rounds x 2 = twice 3
    # Stopped after round 2's first trial: the resumed run measures the rest only.
    fits.clear()
    events.clear()
    writer.rows = writer.rows[:4 + 2 + 1]
    fits.measure(followups.rounds(plan, writer.rows, configs,
                                  lambda kind, data: events.append(data)), writer)
    assert [done for _, done, _ in fits] == [[(8, "baseline"), (32, None), (8, "baseline")]]
    assert [(e["round"], e["last_round"]) for e in events] == [(2, 3)]
    fits.clear()
    fits.measure(followups.rounds(plan, writer.rows, configs, lambda kind, data: None), writer)
    assert fits == []                                            # complete: nothing to run


def test_an_impossible_round_is_measured_again_once(fits):
    writer = SimpleNamespace(rows=search_rows())
    writer.rows.append(row(9, knobs=FAST, phase="remeasure", sps=100.0, step_time_ms_p50=0.0))
    events = []
    fits.measure(followups.rounds(plan_for(), writer.rows, [(FAST, None), (BASE, "baseline")],
                                lambda kind, data: events.append(data)), writer)
    assert [(e["round"], e["last_round"]) for e in events] == [(1, 4)]  # 3 rounds and one more
    assert fits[0][1] == [(8, "baseline")] + [(32, None), (8, "baseline")] * 3  # FAST had round 1


def test_an_impossible_figure_found_in_the_rounds_adds_one_round_after_them(fits):
    """The batch of rounds 1-3 records a figure that cannot be true: one more round is
    planned from those rows, as a batch of its own, once."""
    writer = SimpleNamespace(rows=search_rows())
    events = []
    fits.measure(followups.rounds(plan_for(), writer.rows, [(FAST, None), (BASE, "baseline")],
                                lambda kind, data: events.append(data)),
                 writer, impossible_first=True)
    assert [(e["round"], e["last_round"]) for e in events] == [(1, 3), (4, 4)]
    assert fits[1][1] == [(32, None), (8, "baseline")]


def test_rounds_the_time_budget_cannot_hold_are_not_started_and_the_run_says_so(fits):
    """A run of --time-budget 60 on 2 CPU cores measured its references, then said nothing
    of the re-measurement its first lines announced: none is started, and one line says why
    (a resumed run whose rounds are all recorded says nothing)."""
    writer = SimpleNamespace(rows=search_rows())
    events = []
    fits.measure(followups.rounds(plan_for(left=2.0), writer.rows,
                                  [(FAST, None), (BASE, "baseline")],
                                  lambda kind, data: events.append(data)), writer)
    assert fits == []
    assert [(e["count"], e["configs"], e["left_s"]) for e in events] == [(0, 2, 2.0)]
    assert events[0]["need_s"] > 2.0
    from tuner.progress import _phase_text
    assert _phase_text(events[0]).startswith(
        "re-measurement left out: the time left (2 s) cannot hold one round of its 2 "
        "configurations")
    done = [row(20 + i, knobs=k, sps=50.0, phase="remeasure") for i in range(3)
            for k in (FAST, BASE)]
    writer, events = SimpleNamespace(rows=search_rows() + done), []
    fits.measure(followups.rounds(plan_for(left=2.0), writer.rows,
                                  [(FAST, None), (BASE, "baseline")],
                                  lambda kind, data: events.append(data)), writer)
    assert fits == [] and events == []


def test_three_rounds_of_fewer_configurations_rather_than_two_of_all(fits):
    """A default CPU run re-measured 4 configurations in 2 rounds (no interval worth reading):
    the lowest-ranked searched configuration is left out so that 3 rounds fit; the best and the
    references always stay. A trial costs 2 windows of 1 s + 1.5 s, plus 4.6 s of set-up and
    warm-up from its search row (``mid``, never searched: from the nearest batch's): a round of
    the 4 configurations 32.4 s, of 3 24.3 s."""
    mid = Knobs(batch_size=16)
    writer = SimpleNamespace(rows=search_rows())
    configs = [(FAST, None), (BUSY, "recommended"), (mid, None), (BASE, "baseline")]
    events = []
    fits.measure(followups.rounds(plan_for(left=75.0), writer.rows, configs,
                                lambda kind, data: events.append(data)), writer)
    assert [done for _, done, _ in fits] == [
        [(32, None), (32, "recommended"), (8, "baseline")] * 3]
    assert events[0]["dropped"] == 1
    from tuner.progress import _phase_text
    assert "1 lower-ranked searched configuration(s) left out" in _phase_text(events[0])
    fits.clear()
    writer = SimpleNamespace(rows=search_rows())                  # time for all: none left out
    fits.measure(followups.rounds(plan_for(left=100.0), writer.rows, configs,
                                  lambda kind, data: None), writer)
    assert [len(done) for _, done, _ in fits] == [12]
    fits.clear()
    writer = SimpleNamespace(rows=search_rows())   # not even 3 rounds of the best and references
    fits.measure(followups.rounds(plan_for(left=50.0), writer.rows, configs,
                                  lambda kind, data: None), writer)
    assert fits[0][1] == [(32, None), (32, "recommended"), (8, "baseline")] * 2   # 2 rounds fit


def test_no_ceiling_is_started_without_the_time_for_one(fits):
    """A run past its follow-up time starts no ceiling experiment (each costs 5-6 s on 2 cores
    and would end the run past its deadline), and says that all four ceilings were left out."""
    from tuner.space import Choices, Space
    writer = SimpleNamespace(rows=search_rows())
    for left in (2.0, 0.0):
        plan, events = plan_for(left=left), []
        plan.node_cpus, plan.device = 2, "cpu"
        plan.device_space = Space("test", {"batch_size": Choices((8, 32, 256))}, {})
        fits.measure(followups.ceilings(plan, writer.rows, lambda kind, data: events.append(data)),
                     writer)
        fits.measure(followups.ceiling_again(plan_for(left=left), writer.rows,
                                             lambda kind, data: None), writer)
        assert [(e["ceilings"], e["left_out"]) for e in events] == [
            ([], ["compute", "loader", "machine-loader", "machine-compute", "core-compute",
                  "core-loader"])]
    assert fits == []
    fits.measure(followups.ceiling_again(plan_for(left=None), writer.rows,            # no budget
                                       lambda kind, data: None), writer)
    assert [(phase, done) for phase, done, _ in fits] == [("ceiling", [(32, None)])]


@pytest.mark.parametrize("ceiling_sps, again", [(55.0, False), (48.0, True), (70.0, False)])
def test_a_compute_ceiling_is_measured_again_only_when_it_is_below_the_best_beyond_the_noise(
        fits, ceiling_sps, again):
    """A ceiling within CEILING_NOISE below the winner is the pipeline's own compute-bound rate
    ('at it'): a second trial (14 s of the default CPU run) could not change that reading.
    Further below it is disturbed and measured again; above the winner it is a ceiling."""
    answer = winner.best(search_rows())
    assert answer.samples_per_sec == 56.4                       # FAST, the searched best
    rows = search_rows() + [row(9, knobs=answer.knobs,
                                sps=ceiling_sps, phase="ceiling", ceiling="compute")]
    events = []
    writer = SimpleNamespace(rows=rows)
    fits.measure(followups.ceiling_again(plan_for(), writer.rows,
                                       lambda kind, data: events.append(data)), writer)
    assert [done for _, done, _ in fits] == ([[(32, None)]] if again else [])
    assert [e["again"] for e in events] == ([True] if again else [])


def test_a_ceiling_the_time_left_cannot_hold_is_left_out_and_said():
    """The default CPU run started the machine's compute limit (batch 256: a 7.6-s step on 2
    cores) with 12.6 s left: it measured nothing. Its price counts each window as at least one
    of its steps: 1.5 s start + its first step 7.6 s + 3 x 7.6 s + 6.9 s after the windows (as
    its row took) = 38.8 s; the others 1.5 + 0.05 + 3 x 1 s + 4.5 s = 9.05 s."""
    big = Knobs(batch_size=256)
    rows = search_rows() + [row(9, knobs=big, sps=33.7, measured_s=7.6,
                                step_time_ms_p50=7600.0,
                                started_at=T0 + dt.timedelta(seconds=100),
                                finished_at=T0 + dt.timedelta(seconds=117))]
    todo = [("compute", FAST, "compute_only"), ("loader", FAST, "loader_only"),
            ("machine-compute", big, "compute_only")]
    kept, left_out = followups.fitting_ceilings(plan_for(left=35.0), rows, todo)
    assert [label for label, _, _ in kept] == ["compute", "loader"]
    assert left_out == ["machine-compute"]
    assert followups.fitting_ceilings(plan_for(left=57.0), rows, todo) == (todo, [])
    assert followups.fitting_ceilings(plan_for(left=None), rows, todo) == (todo, [])
    from tuner.progress import _phase_text
    text = _phase_text({"phase": "ceiling", "ceilings": ["compute", "loader"],
                        "left_out": ["machine-compute"]})
    assert text.endswith("left out, the time left cannot hold it: machine-compute")
    text = _phase_text({"phase": "ceiling", "ceilings": [],
                        "left_out": ["machine-loader", "machine-compute"]})
    assert text == "left out, the time left cannot hold them: machine-loader, machine-compute"


def test_ceilings_all_left_out_are_said_and_none_is_started(fits):
    """A resumed run with every ceiling but one measured and no time for the machine's compute
    limit said nothing: the phase event came only with a ceiling to measure."""
    big = BUSY.replace(batch_size=256)   # the machine's compute limit: the winner's knobs
    rows = search_rows() + [
        row(9, knobs=big, sps=33.7, measured_s=7.6, step_time_ms_p50=7600.0),
        row(10, knobs=BUSY, sps=59.0, phase="ceiling", ceiling="compute"),
        row(11, knobs=BUSY, sps=900.0, phase="ceiling", ceiling="loader"),
        row(12, knobs=BUSY, sps=1500.0, phase="ceiling", ceiling="machine-loader"),
        row(13, knobs=BUSY, sps=30.0, phase="ceiling", ceiling="core-compute"),
        row(14, knobs=BUSY, sps=450.0, phase="ceiling", ceiling="core-loader")]
    from tuner.space import Choices, Space
    plan = plan_for(left=12.0)
    plan.node_cpus, plan.device = 2, "cpu"
    plan.device_space = Space("test", {"batch_size": Choices((8, 32, 256))}, {})
    events = []
    writer = SimpleNamespace(rows=rows)
    fits.measure(followups.ceilings(plan, writer.rows,
                                    lambda kind, data: events.append((kind, data))), writer)
    assert fits == []
    assert [(kind, data["ceilings"], data["left_out"]) for kind, data in events] == [
        ("phase", [], ["machine-compute"])]


def test_the_machines_compute_limit_never_searched_is_costed_from_the_nearest_batch():
    """The machine's compute limit runs the winner's knobs at the largest batch, which no
    search trial matches: costed at the windows alone it would start with 12.6 s left and
    measure nothing. Its step is read from the line of its input pipeline's rows (one worker:
    batch 64 at a 2-s step, 8 and 32 at 2.5 ms): 5.29 s at 256, every window one such step,
    1.5 s start + the first step + 3 windows + 3.6 s after them = 26.2 s."""
    near = Knobs(batch_size=64, num_workers=1)
    rows = search_rows() + [row(9, knobs=near, sps=32.0, measured_s=0.4, warmup_s=1.0,
                                step_time_ms_p50=2000.0)]
    big = Knobs(batch_size=256, num_workers=1)
    assert costs.trial_cost_s(rows, big, 3, 1.0) == pytest.approx(26.24, abs=0.01)
    todo = [("compute", FAST, "compute_only"), ("machine-compute", big, "compute_only")]
    kept, left_out = followups.fitting_ceilings(plan_for(left=20.0), rows, todo)
    assert [label for label, _, _ in kept] == ["compute"] and left_out == ["machine-compute"]
    # nothing timed yet: 1.5 s start + the prior's 0.5 s + 0.25 s a worker + 3 windows of 1 s
    assert costs.trial_cost_s([], big, 3, 1.0) == pytest.approx(5.25)


@pytest.mark.parametrize("error, status, retried", [
    ("DataLoader worker failure: RuntimeError: DataLoader worker (pid 12) is killed", "error",
     True),
    ("RayActorError: The actor died unexpectedly before finishing this task.", "error", True),
    ("DataLoader worker failure: RuntimeError: worker killed: out of memory", "oom", False),
    ("ValueError: bad config", "error", False),
])
def test_a_reference_failed_for_a_transient_reason_is_retried_once(fits, error, status, retried):
    rows = search_rows()
    rows[0].update(status=status, samples_per_sec=None, error=error)
    writer = SimpleNamespace(rows=rows)
    events = []
    fits.measure(followups.retry_references(plan_for(), writer.rows,
                                          lambda kind, data: events.append(data)), writer)
    assert bool(fits) == retried
    if retried:
        assert fits == [("search", [(8, "baseline")], {})]
        assert events[0]["retry"] == ["baseline"]
        writer.rows[-1].update(status="error", error=error)           # failed again
        fits.measure(followups.retry_references(plan_for(), writer.rows, lambda kind, data: None),
                     writer)
        assert len(fits) == 1                                          # once only


def test_only_impossible_measurements_print_no_result_but_the_reason():
    rows = [row(0, reference="baseline", step_time_ms_p50=0.0), row(1, mfu_pct=250.0)]
    assert winner.best(rows) is None
    console = Console(record=True, width=200)
    summary = SimpleNamespace(workload="fake-regression", scale="tiny", results_dir="res")
    print_best(console, rows, summary)
    out = console.export_text()
    assert out.startswith("no result: every measurement had a figure that cannot be true")
    assert "MFU 250 %" in out and "non-positive step time (0 ms)" in out
    assert "best" not in out and "faster" not in out                  # never a result


def test_a_ratio_below_one_reads_slower_never_faster():
    sp = noise.Speedup(0.8, 0.75, 0.85, 3)
    assert sp.short() == "1.25x slower"
    assert sp.text().startswith("1.25x slower (speed-up 0.80, 95 % CI [0.75")
    assert noise.Speedup(1.02, 0.97, 1.07, 3).short() == "tie"
    # one measurement each (a run whose time left held one round): the way to an interval
    assert noise.Speedup(1.79, None, None, 1).text() == (
        "1.79x faster (one measurement each, no interval; within ±10 % is a tie; two or more "
        "interleaved rounds give one (--confirm, with the time to run them))")


def _best_table(rows: list[dict]) -> str:
    console = Console(record=True, width=300)
    print_best(console, rows, SimpleNamespace(workload="fake-regression", scale="tiny",
                                              results_dir="res"))
    return " ".join(console.export_text().replace("│", " ").split())


def _with_ceilings(rates: list[float]) -> list[dict]:
    rows = rounds([(FAST, None, [100.0, 101.0, 99.0]), (BASE, "baseline", [50.0, 51.0, 49.0])])
    return rows + [{**row(90 + i, knobs=FAST, sps=rate, phase="ceiling"), "ceiling": "compute"}
                   for i, rate in enumerate(rates)]


@pytest.mark.parametrize("rates, how", [
    ([90.0], "once (the time budget left none"), ([90.0, 90.1], "twice")])
def test_a_disturbed_ceiling_says_how_often_it_was_measured(rates, how):
    """The default CPU run measured its compute ceiling once (no time left for a second) and
    the table said 'twice'."""
    out = _best_table(_with_ceilings(rates))
    assert f"compute-only ceiling 90.{len(rates) - 1} disturbed" in out
    assert f"measured below the pipeline it bounds, {how}" in out
    assert "no efficiency shown (the machine was busy" in out and "% of it" not in out


def test_a_ceiling_just_below_the_pipeline_reads_as_its_own_rate_not_as_disturbed():
    """A ceiling 2 % under a compute-bound pipeline on a quiet machine (53.0 against 53.8
    samples/sec) is the pipeline's own compute-bound rate: neither blamed on a busy machine
    nor shown as 'disturbed'."""
    out = _best_table(_with_ceilings([98.0]))
    assert "compute-only ceiling 98.0 at it same knobs, batches on the device: 2 % below" in out
    assert "within the noise: it runs at its compute-only rate, bound by compute" in out
    assert "disturbed" not in out and "% of it" not in out


def test_a_ceiling_above_the_best_by_no_more_than_the_rounds_drift_is_no_headroom():
    """A default CPU ddpm run re-measured its best at 44.8, 50.3 and 43.4 samples/sec (10 %
    between rounds) and measured its compute-only ceiling once, at 52.2: '88% of it' read as
    12 % left to the input pipeline. The share stays, and a line under the table says the gap
    lies within the rounds' drift; beside rounds that repeat within 1 % the same gap is
    headroom."""
    ceiling = {**row(90, knobs=FAST, sps=52.2, phase="ceiling"), "ceiling": "compute"}
    drifting = rounds([(FAST, None, [44.8, 50.3, 43.4]), (BASE, "baseline", [30.1, 24.0, 27.8])])
    out = _best_table(drifting + [ceiling])
    assert "compute-only ceiling 52.2 88% of it same knobs, batches on the device" in out
    assert "compute-only ceiling: the best's 88% of it lies within the rounds' drift (" in out
    assert "the ceiling is one trial): the gap may be the machine's, not headroom" in out
    steady = rounds([(FAST, None, [46.0, 46.3, 45.8]), (BASE, "baseline", [27.0, 27.2, 26.9])])
    out = _best_table(steady + [ceiling])
    assert "compute-only ceiling 52.2 88% of it same knobs, batches on the device" in out
    assert "drift" not in out
    # the ceiling at the best (100 %): nothing to say of a gap
    at = {**ceiling, "samples_per_sec": 46.2}
    assert "drift" not in _best_table(drifting + [at])
    # the band: one ceiling against the mean of 3 rounds, t x cv x sqrt(1 + 1/3), the cv the
    # 2 configurations' pooled (7.9 % and 11.3 %: 9.7 %), t on their 2 + 2 degrees of freedom
    drift = noise.round_drift(drifting)
    assert drift.configurations == 2 and drift.between_cv == pytest.approx(0.0960, abs=5e-4)
    assert drift.degrees_of_freedom == 4 and drift.pooled_cv == pytest.approx(0.0974, abs=5e-4)
    band = 2.776 * drift.pooled_cv * math.sqrt(1 + 1 / 3)              # 0.312
    # a configuration of two rounds adds one degree of freedom, not two
    two = drifting + rounds([(BUSY, "recommended", [30.0, 31.0])])
    assert noise.round_drift(two).degrees_of_freedom == 5
    assert noise.share_in_drift(0.88, 3, drifting) is not None
    assert noise.share_in_drift(1 / (1 + band) + 0.005, 3, drifting) is not None
    assert noise.share_in_drift(1 / (1 + band) - 0.005, 3, drifting) is None
    assert noise.share_in_drift(0.70, 3, drifting) is None
    assert noise.share_in_drift(0.88, 1, drifting) is None  # one round: no drift to read


# ------------------------------------------------------------ the steady-state tolerance


def test_window_noise_is_the_median_sample_cv_of_measured_rows_of_short_steps():
    """One window's CV on this machine: each row's population CV of n windows made a sample
    one (x sqrt(n / (n - 1))), the median over rows; rows of long steps (windows of one or
    two whole steps), of one window, or that measured nothing are left out."""
    rows = [row(0, samples_per_sec_cv=0.02, windows=3),
            row(1, samples_per_sec_cv=0.06, windows=3, status="pruned"),
            row(2, samples_per_sec_cv=0.04, windows=2),
            row(3, samples_per_sec_cv=0.30, windows=3, step_time_ms_p50=1500.0),  # long steps
            row(4, samples_per_sec_cv=0.50, windows=1),
            row(5, samples_per_sec_cv=0.90, windows=3, status="error")]
    assert windows.window_noise(rows, window_s=2.0) == pytest.approx(
        statistics.median([0.02 * math.sqrt(1.5), 0.06 * math.sqrt(1.5), 0.04 * math.sqrt(2)]))
    assert windows.window_noise(rows[:1] + rows[3:], window_s=2.0) is None   # one row: unknown
    # The same steps are short against longer windows.
    assert windows.window_noise(rows[3:4] + rows[:1], window_s=4.0) is not None


def test_the_steady_tolerance_is_the_floor_on_a_quiet_host_and_grows_with_the_noise():
    """A first window is a transient only beyond two SDs of the difference of two windows: on
    a host whose windows scatter by 7 % (on a 2-core VM like that, a fixed 10 % drops up to
    four windows in a row from one steady trial) the tolerance is ~0.20 (population CV
    0.057 of 3 windows); on a quiet one it stays at the floor."""
    quiet = [row(i, samples_per_sec_cv=0.01, windows=3) for i in range(4)]
    noisy = [row(i, samples_per_sec_cv=0.057, windows=3) for i in range(4)]
    assert windows.steady_tolerance(quiet, 0.10, window_s=2.0) == 0.10
    assert windows.steady_tolerance([], 0.10, window_s=2.0) == 0.10        # before any row
    expected = windows.STEADY_Z * math.sqrt(2) * 0.057 * math.sqrt(1.5)
    assert windows.steady_tolerance(noisy, 0.10, window_s=2.0) == pytest.approx(expected)
    assert 0.19 < expected < 0.21


def test_each_trial_of_a_run_gets_the_tolerance_of_its_own_rows_so_far():
    """The driver's settings for the next trial read this run's rows on this accelerator type
    only: another run's (or another card's) noise says nothing about this machine now."""
    plan = SimpleNamespace(run_id="run-a", accelerator_type=None,
                           settings=SimpleNamespace(steady_tolerance=0.10, window_s=2.0))
    noisy = [row(i, samples_per_sec_cv=0.08, windows=3) for i in range(3)]
    other_run = [row(i, run="run-b", samples_per_sec_cv=0.08, windows=3) for i in range(3)]
    other_card = [{**r, "accelerator_type": "A10G"} for r in noisy]
    assert driver._trial_settings(plan, other_run + other_card) == {"steady_tolerance": 0.10}
    widened = driver._trial_settings(plan, noisy + other_run)["steady_tolerance"]
    assert widened == pytest.approx(windows.STEADY_Z * math.sqrt(2) * 0.08 * math.sqrt(1.5))


def test_a_resumed_run_has_nothing_left_only_when_no_batch_would_run():
    """``driver.nothing_left`` lets a resumed run end without Ray's start or the memory
    probe: only where the search is done and no follow-up batch would be planned from the
    rows (a reference's retry, a round an impossible figure added, a ceiling the probe's
    bound would size), on this machine."""
    from tests.test_followups import fake_plan, make_row, run_all, search_rows

    def plan_of(rows: list[dict], *, remaining: int = 0, left: float | None = None,
                address: str | None = None, probe: bool = False) -> SimpleNamespace:
        plan = fake_plan(left=left)
        plan.prior_rows, plan.remaining_trials, plan.should_probe = tuple(rows), remaining, probe
        plan.options.address = address
        return plan

    done = search_rows()
    run_all(fake_plan(), done)                     # rounds and ceilings recorded
    assert driver.nothing_left(plan_of(done))
    assert not driver.nothing_left(plan_of([]))                        # a fresh run
    assert not driver.nothing_left(plan_of(done, address="10.0.0.1:6379"))  # a cluster
    assert not driver.nothing_left(plan_of(done, remaining=2))         # search trials left
    assert driver.nothing_left(plan_of(done, remaining=2, left=budget.MIN_PHASE_S / 2))
    assert not driver.nothing_left(plan_of(search_rows()))             # rounds to run
    killed = [make_row(0, followups.Knobs(batch_size=8, num_workers=2, prefetch_factor=2),
                       reference="baseline", status="error", error="The actor died")]
    retry = killed + [r for r in done if r["reference"] != "baseline"]
    assert not driver.nothing_left(plan_of(retry))                     # a reference retry
    impossible = [dict(r) for r in done]
    next(r for r in reversed(impossible) if r["phase"] == "remeasure")["mfu_pct"] = 140.0
    assert not driver.nothing_left(plan_of(impossible))                # a fourth round
    # the machine-compute ceiling left out for time: where the probe runs, its bound sizes
    # that ceiling's batch (and time), so the run starts; a recorded one needs none
    unmeasured = [r for r in done if r.get("ceiling") != "machine-compute"]
    short = budget.MIN_PHASE_S + 0.5
    assert not driver.nothing_left(plan_of(unmeasured))                # it would run
    assert driver.nothing_left(plan_of(unmeasured, left=short))        # no time for it
    assert not driver.nothing_left(plan_of(unmeasured, left=short, probe=True))
    assert driver.nothing_left(plan_of(done, left=short, probe=True))
