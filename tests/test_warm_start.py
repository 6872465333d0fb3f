"""Warm start and resume seed the search from leaderboard rows (no Ray needed)."""

from __future__ import annotations

import datetime as dt

import pytest

from tuner import leaderboard
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.ray_runtime import hardware_key_task as _hardware_key_task
from tuner.searcher import make_searcher
from tuner.settings import RunOptions

REGRESSION = "tests.fake_workloads:regression"


def _rows(run_id: str, hardware_key: str) -> list[dict]:
    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    for i, (bs, status, sps) in enumerate([(8, "ok", 100.0), (32, "ok", 300.0), (64, "oom", None),
                                           (12, "error", None)]):
        rows.append({**Knobs(batch_size=bs).to_dict(), "run_id": run_id, "trial_id": f"t{i}",
                     "workload": "fake-regression", "scale": "tiny", "device": "cpu",
                     "hardware_key": hardware_key, "status": status, "samples_per_sec": sps,
                     "phase": "search", "started_at": now, "finished_at": now})
    return rows


@pytest.fixture
def earlier_run(tmp_path, tuner_cache):
    key = _hardware_key_task("cpu")
    leaderboard.append(tmp_path, _rows("earlier-run", key))
    leaderboard.append(tmp_path, _rows("other-machine", "cuda:Some GPU:80GiB"))
    return tmp_path


def _searcher(results, **options):
    plan = make_plan(RunOptions(workload=REGRESSION, results=str(results), device="cpu", trials=10,
                           probe="off", **options))
    plan = plan.with_hardware_key(_hardware_key_task("cpu"))
    return plan, make_searcher(plan.search_spec())


def test_warm_start_seeds_the_study_with_this_hardware_s_usable_rows(earlier_run):
    _, searcher = _searcher(earlier_run, warm_start=True)
    trials = searcher.study.trials
    # ok, ok and oom rows of this machine; the error row and the other machine's rows are not.
    assert sorted(t.params["batch_size"] for t in trials) == [8, 32, 64]
    oom = next(t for t in trials if t.params["batch_size"] == 64)
    assert oom.constraints == {"memory": 1.0}  # infeasible for the sampler
    assert {t.value for t in trials if t.params["batch_size"] != 64} == {100.0, 300.0}


def test_warm_start_answers_identical_configs_from_rows_unless_remeasure(earlier_run):
    _, searcher = _searcher(earlier_run, warm_start=True)
    assert (("batch_size", 32), ("num_workers", 0)) in searcher.measured
    assert len(searcher.measured) == 3
    _, searcher = _searcher(earlier_run, warm_start=True, remeasure=True)
    assert searcher.measured == {} and len(searcher.study.trials) == 3


def test_without_warm_start_the_study_starts_empty(earlier_run):
    _, searcher = _searcher(earlier_run)
    assert searcher.study.trials == [] and searcher.measured == {}


def test_resume_continues_the_run_with_the_rest_of_the_budget(earlier_run):
    plan, searcher = _searcher(earlier_run, resume="earlier-run")
    assert plan.run_id == "earlier-run"
    assert plan.remaining_trials == 10 - 4            # four search rows are recorded
    assert len(searcher.study.trials) == 3        # the error row is not a point
    with pytest.raises(Exception, match="no such run"):
        _searcher(earlier_run, resume="nope")
