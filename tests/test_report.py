"""tuner.report on a synthetic leaderboard: the PNGs and the self-contained HTML page."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser

import pytest

from tuner import leaderboard, winner
from tuner.errors import TunerError
from tuner.noise import Speedup
from tuner.report import write_report
from tuner.report_figures import (
    FIGURES,
    knob_importances,
    memory_column,
    plot_best_vs_references,
    plot_throughput_vs_batch,
    plot_throughput_vs_memory,
    training_trials,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WORKLOAD = "fake-regression"
HARDWARE = "cpu:Test CPU:4cpu"
T0 = datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc)


def _row(i: int, *, status: str = "ok", batch_size: int = 32, num_workers: int = 0,
         amp: str = "off", samples_per_sec: float | None = None, reference: str | None = None,
         hardware_key: str = HARDWARE, run_id: str = "run-a", **extra) -> dict:
    """A leaderboard row with valid values for the schema; throughput grows with batch size
    and workers unless given."""
    if samples_per_sec is None and status == "ok":
        samples_per_sec = 100.0 + batch_size * 2 + num_workers * 40 + (30 if amp == "bf16" else 0)
    row = {
        "run_id": run_id, "trial_id": f"t{i:03d}", "workload": WORKLOAD, "scale": "tiny",
        "status": status, "reference": reference, "is_baseline": reference == "baseline",
        "samples_per_sec": samples_per_sec,
        "samples_per_sec_iqr": None if samples_per_sec is None else samples_per_sec * 0.02,
        "samples_per_sec_cv": 0.01, "step_time_ms_p50": None if samples_per_sec is None
        else 1000 * batch_size / samples_per_sec, "step_time_ms_p95": None, "windows": 3,
        "measured_s": 3.0, "warmup_s": 1.5, "first_step_s": 0.4,
        "peak_device_memory_mb": None, "peak_host_memory_mb": 300.0 + batch_size * 4.0,
        "final_loss": 0.5, "batch_size": batch_size, "grad_accum": 1, "num_workers": num_workers,
        "prefetch_factor": 2 if num_workers else None, "amp": amp, "compile": "off",
        "persistent_workers": False, "pin_memory": False, "non_blocking": False,
        "channels_last": False, "cudnn_benchmark": False, "tf32": False,
        "fused_optimizer": False, "clamped": None, "trial_cpus": 1.0, "trial_gpus": 0.0,
        "device": "cpu", "hardware_key": hardware_key, "cpu_model": "Test CPU", "cpu_count": 4,
        "host_memory_mb": 16000.0,
        "error": "CPU out of memory" if status == "oom" else None,
        "started_at": T0 + timedelta(minutes=i),
        "finished_at": T0 + timedelta(minutes=i, seconds=30),
        "tuner_version": "0.1.0",
    }
    row.update(extra)
    return row


def _leaderboard_rows() -> list[dict]:
    rows = [_row(0, batch_size=16, reference="baseline", samples_per_sec=120.0),
            _row(1, batch_size=32, num_workers=2, reference="recommended", samples_per_sec=210.0)]
    grid = [(8, 0, "off"), (16, 0, "bf16"), (32, 0, "off"), (64, 0, "bf16"), (128, 0, "off"),
            (16, 2, "off"), (32, 2, "bf16"), (64, 2, "off"), (128, 2, "bf16"), (64, 4, "off"),
            (128, 4, "bf16"), (256, 4, "off")]
    rows += [_row(i, batch_size=bs, num_workers=nw, amp=amp)
             for i, (bs, nw, amp) in enumerate(grid, start=2)]
    rows += [_row(20, status="oom", batch_size=512, num_workers=2),
             _row(21, status="oom", batch_size=1024, num_workers=4, peak_host_memory_mb=None)]
    return rows


class _CheckedParser(HTMLParser):
    """Collects <img src> values and checks that non-void elements nest and close."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.srcs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.srcs.append(dict(attrs)["src"])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


@pytest.fixture
def results(tmp_path):
    leaderboard.append(tmp_path / "results", _leaderboard_rows())
    return tmp_path / "results"


def test_writes_pngs_and_self_contained_html(results, tmp_path):
    out = tmp_path / "report"
    paths = write_report(results, WORKLOAD, out, max_memory_mb=900)

    assert paths == [out / f"{name}.png" for name in FIGURES] + [out / "report.html"]
    for name in ("throughput_vs_batch", "knob_importance", "throughput_vs_memory",
                 "best_vs_references"):
        assert (out / f"{name}.png").read_bytes().startswith(PNG_SIGNATURE)
    page = (out / "report.html").read_text(encoding="utf-8")
    parser = _CheckedParser()
    parser.feed(page)
    parser.close()
    assert parser.stack == []
    assert page.count('<img src="data:image/png;base64,') == 4
    assert all(src.startswith("data:image/png;base64,") for src in parser.srcs)
    assert not re.search(r'(src|href)="(https?:|//)', page)
    assert "<script" not in page and "<link" not in page
    best = max(r["samples_per_sec"] for r in _leaderboard_rows() if r["status"] == "ok")
    assert f"{best:,.1f}" in page
    assert HARDWARE in page
    assert f"{best / 120.0:.2f}x" in page  # speed-up over the baseline (120 samples/sec)


def test_html_counts_trials_by_status(results, tmp_path):
    write_report(results, WORKLOAD, tmp_path / "r")
    page = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert re.search(r"<td>ok</td><td class=\"num\">14</td>", page)
    assert re.search(r"<td>oom</td><td class=\"num\">2</td>", page)


def test_importance_over_varying_knobs_only(results):
    rows = leaderboard.ranked(leaderboard.read(results, workload=WORKLOAD))
    importances, note = knob_importances(rows)
    assert importances is not None, note
    # batch_size, num_workers, prefetch_factor (absent without workers) and amp vary; the
    # constant knobs (compile, grad_accum, the booleans) are left out.
    assert {"batch_size", "num_workers", "amp"} <= set(importances)
    assert not {"compile", "grad_accum", "tf32"} & set(importances)
    assert sum(importances.values()) == pytest.approx(1.0)


def test_throughput_figure_has_series_per_num_workers_and_failed_marks(results):
    rows = leaderboard.ranked(leaderboard.read(results, workload=WORKLOAD))
    ax = plot_throughput_vs_batch(rows).axes[0]
    assert ax.get_xscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["num_workers=0", "num_workers=2", "num_workers=4"]
    failed = [line for line in ax.get_lines() if line.get_label().startswith("failed")]
    assert len(failed) == 1 and list(failed[0].get_xdata()) == [512, 1024]


def test_memory_figure_draws_the_limit(results):
    rows = leaderboard.ranked(leaderboard.read(results, workload=WORKLOAD))
    assert memory_column(rows) == "peak_host_memory_mb"
    ax = plot_throughput_vs_memory(rows, max_memory_mb=900).axes[0]
    assert "host" in ax.get_xlabel()
    limit = [line for line in ax.get_lines() if line.get_label().startswith("limit")]
    assert len(limit) == 1 and list(limit[0].get_xdata()) == [900, 900]
    assert limit[0].get_linestyle() == "--"


def test_device_memory_preferred_when_recorded():
    rows = [_row(0, peak_device_memory_mb=512.0), _row(1)]
    assert memory_column(rows) == "peak_device_memory_mb"
    assert "device" in plot_throughput_vs_memory(rows).axes[0].get_xlabel()


def test_two_ok_rows_say_not_enough_trials(tmp_path):
    results = tmp_path / "results"
    leaderboard.append(results, [_row(0, batch_size=16), _row(1, batch_size=32),
                                 _row(2, status="oom", batch_size=64)])
    paths = write_report(results, WORKLOAD, tmp_path / "out")
    assert all(p.exists() for p in paths)
    assert (tmp_path / "out" / "knob_importance.png").read_bytes().startswith(PNG_SIGNATURE)
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "not enough trials" in page
    assert page.count('<img src="data:image/png;base64,') == 4


def test_compute_only_ceiling_rows_are_not_trials():
    rows = [_row(0, phase="search"), _row(1, phase="ceiling"), _row(2)]
    assert [r["trial_id"] for r in training_trials(rows)] == ["t000", "t002"]


def test_no_varying_knob_says_not_enough_trials():
    rows = [_row(i, batch_size=32, samples_per_sec=100.0 + i) for i in range(4)]
    importances, note = knob_importances(rows)
    assert importances is None and "not enough trials" in note


def test_only_failed_rows_still_writes_a_report(tmp_path):
    results = tmp_path / "results"
    leaderboard.append(results, [_row(0, status="oom", batch_size=64),
                                 _row(1, status="error", batch_size=8, error="boom")])
    write_report(results, WORKLOAD, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "No successful trial." in page and "boom" in page


def test_no_rows_is_an_error_naming_workload_and_results(tmp_path):
    leaderboard.append(tmp_path / "results", [_row(0)])
    with pytest.raises(TunerError, match=r"'other-workload'.*results"):
        write_report(tmp_path / "results", "other-workload", tmp_path / "out")
    with pytest.raises(TunerError, match=WORKLOAD):
        write_report(tmp_path / "empty", WORKLOAD, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_several_hardware_keys_need_hardware(tmp_path):
    results = tmp_path / "results"
    leaderboard.append(results, [_row(i, batch_size=8 * 2**i) for i in range(3)]
                       + [_row(10 + i, batch_size=8 * 2**i, hardware_key="cuda:H100:80GiB",
                               run_id="run-b") for i in range(3)])
    with pytest.raises(TunerError, match=r"--hardware.*cpu:Test CPU:4cpu, cuda:H100:80GiB"):
        write_report(results, WORKLOAD, tmp_path / "out")
    write_report(results, WORKLOAD, tmp_path / "out", hardware="cuda:H100:80GiB")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "cuda:H100:80GiB" in page and "3 trials in 1 run(s)" in page
    with pytest.raises(TunerError, match="no rows for it; hardware keys in .*cpu:Test CPU:4cpu"):
        write_report(results, WORKLOAD, tmp_path / "out", hardware="cuda:nope")


def test_bad_memory_limit_is_rejected(results, tmp_path):
    with pytest.raises(ValueError, match="max_memory_mb"):
        write_report(results, WORKLOAD, tmp_path / "out", max_memory_mb=0)


def _text(fragment: str) -> str:
    """HTML without its tags, whitespace collapsed, entities undone."""
    import html
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _section(page: str, heading: str) -> str:
    """The page from the <h2> starting with ``heading`` to the next <h2> (or the end)."""
    start = page.index(f"<h2>{heading}")
    end = page.find("<h2>", start + 4)
    return page[start:end if end != -1 else len(page)]


def _top_rows(page: str) -> list[str]:
    """The text of each body row of the top-trials table."""
    table = _section(page, "Top")
    body = table[table.index("<tbody>"):table.index("</tbody>")]
    return [_text(tr) for tr in re.split(r"<tr[^>]*>", body)[1:]]


def _tied_remeasure_rows() -> list[dict]:
    """A run whose best (no workers) was re-measured against the baseline (4 workers, so not
    the simpler of the two) in 3 interleaved rounds that spread too much for a verdict: the
    speed-up's point estimate is 1.07 and its 95 % interval contains 1."""
    rows = [_row(0, batch_size=16, num_workers=4, reference="baseline", samples_per_sec=110.0),
            _row(1, batch_size=64, samples_per_sec=130.0)]
    for k, (best, base) in enumerate([(130.0, 110.0), (100.0, 115.0), (125.0, 105.0)]):
        rows += [_row(10 + 2 * k, batch_size=64, samples_per_sec=best, phase="remeasure"),
                 _row(11 + 2 * k, batch_size=16, num_workers=4, reference="baseline",
                      samples_per_sec=base, phase="remeasure")]
    return rows


def test_tie_with_a_reference_reads_as_a_tie_with_its_interval(tmp_path):
    leaderboard.append(tmp_path / "results", _tied_remeasure_rows())
    write_report(tmp_path / "results", WORKLOAD, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    best = _text(_section(page, "Best configuration"))
    # 109.9: the baseline's geometric mean over its rounds (110, 115, 105)
    assert re.search(r"baseline 109\.9 tie within the noise \(speed-up 1\.07, 95 % CI "
                     r"\[0\.\d\d, 1\.\d\d\]\); 3 interleaved rounds", best), best
    assert not re.search(r"\d\.\d\dx", best), best  # never a bare '1.07x' for a tie


def _top(baseline: Speedup | None = None, recommended: Speedup | None = None,
         baseline_sps: float = 38.0) -> winner.Answer:
    """An answer (``tuner.winner.Answer``) with one measurement of each by default: the best at
    40.8 samples/sec, the baseline at ``baseline_sps`` (38.0: a 1.07x lead, a tie within the
    single-pair floor) and the recommended at 20.0 (2.04x); ``baseline`` / ``recommended``
    replace a speed-up."""
    refs = [winner.Reference(name, sps, False, given or Speedup(40.8 / sps, None, None, 1))
            for name, sps, given in (("baseline", baseline_sps, baseline),
                                     ("recommended", 20.0, recommended))]
    return winner.Answer(row=_row(0, samples_per_sec=40.8, rounds=1), baseline=refs[0],
                         recommended=refs[1], tied_faster=None, disturbed=(),
                         ceilings=winner.Ceilings(None, 0, False, None, None, False),
                         attainable=winner.Attainable(None, None, None))


def test_bar_chart_says_tie_and_shows_each_interval():
    top = _top(baseline=Speedup(1.15, 0.97, 1.36, 3), recommended=Speedup(2.04, 1.80, 2.30, 3),
               baseline_sps=35.5)
    labels = [t.get_text() for t in plot_best_vs_references(top).axes[0].texts]
    baseline = next(t for t in labels if t.startswith("35.5"))
    recommended = next(t for t in labels if t.startswith("20.0"))
    assert "tie" in baseline and "[0.97, 1.36]" in baseline and "1.15x" not in baseline
    assert "2.04x faster" in recommended and "[1.80, 2.30]" in recommended


def test_bar_chart_says_when_a_speed_up_has_no_interval():
    labels = [t.get_text() for t in plot_best_vs_references(_top()).axes[0].texts]
    baseline = next(t for t in labels if t.startswith("38.0"))
    assert "1.07x" not in baseline and "tie" in baseline and "no interval" in baseline
    recommended = next(t for t in labels if t.startswith("20.0"))
    assert "2.04x faster" in recommended and "no interval" in recommended


def _disturbed_and_ceiling_rows() -> list[dict]:
    """A run with a baseline, one believable trial, a trial at 180 % MFU (the fastest rate), one
    with a negative step time, and the winner's and the machine's ceilings."""
    return [_row(0, batch_size=8, reference="baseline", samples_per_sec=100.0, mfu_pct=20.0),
            _row(1, batch_size=32, samples_per_sec=150.0, mfu_pct=30.0),
            _row(2, batch_size=64, samples_per_sec=900.0, mfu_pct=180.0, mfu_impossible=True),
            _row(3, batch_size=16, samples_per_sec=120.0, step_time_ms_p50=-3.0),
            _row(4, batch_size=32, samples_per_sec=400.0, phase="ceiling", ceiling="compute"),
            _row(5, batch_size=32, samples_per_sec=140.0, phase="ceiling", ceiling="loader"),
            _row(6, batch_size=256, samples_per_sec=500.0, phase="ceiling",
                 ceiling="machine-compute")]


def test_table_labels_ceilings_and_marks_disturbed_rows(tmp_path):
    leaderboard.append(tmp_path / "results", _disturbed_and_ceiling_rows())
    write_report(tmp_path / "results", WORKLOAD, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    rows = _top_rows(page)
    assert len(rows) == 7
    assert "disturbed" not in rows[0] and "ceiling" not in rows[0]
    assert rows[0].startswith("1 ok search 150.0")  # the believable fastest heads the table
    for kind, sps in (("compute", "400.0"), ("loader", "140.0"), ("machine-compute", "500.0")):
        row = next(r for r in rows if f" {sps} " in r)
        assert f"ceiling: {kind}" in row, row
    mfu = next(r for r in rows if " 900.0 " in r)
    assert "disturbed: MFU 180 % is above 100 %" in mfu and "not a result" in mfu
    negative = next(r for r in rows if " -3.0 " in r)
    assert "disturbed: non-positive step time" in negative
    assert page.count('<tr class="disturbed">') == 2
    counts = _text(_section(page, "Trials by status"))
    assert "ok 2" in counts and "disturbed 2" in counts
    assert "trial t002: MFU 180 %" in counts  # named, though not a top row in a long table
    best = _text(_section(page, "Best configuration"))
    assert best.startswith("Best configuration 150.0 samples/sec")


def test_disturbed_rows_are_not_starred_fastest_nor_in_importances():
    rows = [r for r in _disturbed_and_ceiling_rows() if r.get("phase") != "ceiling"]
    ax = plot_throughput_vs_memory(rows).axes[0]
    star = next(line for line in ax.get_lines() if line.get_label() == "fastest")
    assert list(star.get_ydata()) == [150.0]
    importances, note = knob_importances(rows)
    assert importances is None and "2 successful" in note
