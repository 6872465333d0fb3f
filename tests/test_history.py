"""Typed rows (``tuner.history``): built once from leaderboard dicts of any version, with the
questions the planner and the benches ask of a run's rows."""

from __future__ import annotations

import pytest

from tuner.history import History, TrialRow, impossible
from tuner.knobs import Knobs
from tuner.status import Phase, Status

A = Knobs(batch_size=8)
B = Knobs(batch_size=32)


def row(knobs: Knobs = A, **columns) -> dict:
    return {**knobs.to_dict(), "status": "ok", "phase": "search", "samples_per_sec": 10.0,
            "windows": 3, "windows_planned": 3, **columns}


def test_a_row_is_read_once_into_typed_fields():
    r = TrialRow.of(row(B, reference="baseline", trial_id="t1", accelerator_type="H200",
                        data_path="cache", error=None, extra_column="kept raw"))
    assert r.knobs == B.replace(data_path="cache") and r.status is Status.OK
    assert r.phase is Phase.SEARCH
    assert (r.reference, r.trial_id, r.accelerator_type, r.data_path) == (
        "baseline", "t1", "H200", "cache")
    assert r.raw["extra_column"] == "kept raw" and r.ok and r.ceiling is None
    assert r.figure("samples_per_sec") == 10.0 and r.figure("time_to_train_s") is None
    with pytest.raises(ValueError, match="unknown metric 'loss'"):
        r.figure("loss")


def test_an_older_row_reads_as_older_files_meant_it():
    """Before ``phase``, ``data_path`` and ``ceiling`` existed: a search row on the loader
    path; a ceiling row without ``ceiling`` is a compute-only ceiling."""
    old = {"batch_size": 8, "status": "ok", "samples_per_sec": 5.0}
    r = TrialRow.of(old)
    assert (r.phase, r.data_path, r.ceiling, r.windows) == (Phase.SEARCH, "loader", None, None)
    assert TrialRow.of({**old, "phase": "ceiling"}).ceiling == "compute"
    assert TrialRow.of({"status": "error"}).knobs is None  # no batch size: no knobs


def test_typed_rows_compare_by_their_fields_not_their_raw_dict():
    assert TrialRow.of(row(unread=1)) == TrialRow.of(row(unread=2))
    assert TrialRow.of(row()) != TrialRow.of(row(status="pruned"))


def test_impossible_and_budget_stopped_are_read_with_the_row():
    assert TrialRow.of(row(samples_per_sec=-1.0)).impossible == "non-positive samples/sec (-1)"
    assert "MFU 140 %" in impossible({"mfu_pct": 140.0})
    assert TrialRow.of(row(status="timeout", windows=1)).budget_stopped
    assert not TrialRow.of(row(status="timeout", windows=0)).budget_stopped
    assert not TrialRow.of(row()).budget_stopped


def history() -> History:
    return History.of([
        row(A, reference="baseline", windows_planned=3, accelerator_type="T4"),
        row(B, windows_planned=1, samples_per_sec=30.0),
        row(B.replace(batch_size=64), windows_planned=1, samples_per_sec=-2.0),
        row(A, phase="remeasure", samples_per_sec=11.0),
        row(A.replace(cudnn_benchmark=True), phase="remeasure", samples_per_sec=12.0),
        row(B, phase="remeasure", status="timeout", windows=1, samples_per_sec=40.0),
        row(A, phase="ceiling", ceiling=None),
        row(A, phase="ceiling", ceiling="loader"),
    ])


def test_the_history_answers_the_planners_questions():
    h = history()
    assert len(h) == 8 and len(h.dicts()) == 8
    assert [r.knobs.batch_size for r in h.search()] == [8, 32, 64]
    assert [r.knobs.batch_size for r in h.ranked("samples_per_sec", "max")] == [32, 8, 64]
    assert [r.knobs.batch_size for r in h.ranked("samples_per_sec", "min", sound=True)] == [8, 32]
    assert [r.samples_per_sec for r in h.remeasured(A)] == [11.0]
    assert len(h.remeasured()) == 3
    assert [r.ceiling for r in h.ceilings()] == ["compute", "loader"]
    assert len(h.ceilings("compute")) == 1 and h.ceilings("machine-loader") == []
    assert [r.knobs for r in h.screens()] == [B, B.replace(batch_size=64)]
    assert len(h.on_type("T4")) == 1 and len(h.on_type(None)) == 7


def test_the_budget_stopped_best_and_the_cudnn_decision():
    h = history()
    assert h.budget_stopped_best().samples_per_sec == 40.0
    assert History.of([row()]).budget_stopped_best() is None
    without, with_ = h.cudnn_both_ways()
    assert [r.samples_per_sec for r in without] == [11.0]
    assert [r.samples_per_sec for r in with_] == [12.0]
    assert History.of([row(A, phase="remeasure")]).cudnn_both_ways() is None


def test_a_history_reads_as_itself():
    h = history()
    assert History.of(h) is h
