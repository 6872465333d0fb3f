"""Compile is a first-class cost: a compile that cannot finish in the run's time left is not
started, and a compiled trial records ``compile_s`` apart from its throughput."""

from __future__ import annotations

import time
from dataclasses import replace

from tests.fake_workloads import regression
from tuner.harness import COMPILE_NEEDS_S, run_trial
from tuner.knobs import Knobs
from tuner.settings import TrialSettings


def settings(data, **changes) -> TrialSettings:
    return replace(TrialSettings(scale="tiny", device="cpu", data_dir=str(data), windows=2,
                                 window_s=0.2, warmup_steps=2), **changes)


def test_a_compile_that_cannot_finish_in_the_time_left_is_not_started(regression_data):
    left_s = COMPILE_NEEDS_S["max-autotune"] / 2
    started = time.perf_counter()
    row = run_trial(regression, Knobs(batch_size=8, compile="max-autotune"),
                    settings(regression_data, deadline_unix_s=time.time() + left_s))
    assert time.perf_counter() - started < 10                   # no compile was started
    assert row["status"] == "timeout" and row["samples_per_sec"] is None
    assert "torch.compile mode=max-autotune was not started" in row["error"]
    assert f"needs about {COMPILE_NEEDS_S['max-autotune']:.0f} s" in row["error"]


def test_without_compile_the_same_time_left_measures(regression_data):
    left_s = COMPILE_NEEDS_S["max-autotune"] / 2
    row = run_trial(regression, Knobs(batch_size=8),
                    settings(regression_data, deadline_unix_s=time.time() + left_s))
    assert row["status"] == "ok" and row["samples_per_sec"] > 0
    assert row["compile_s"] is None                              # compile off: no compile time


def test_the_loader_only_ceiling_of_a_compiled_configuration_is_not_held_back(regression_data):
    """Its DataLoader alone, no model: nothing compiles, so the compile's time is not asked."""
    left_s = COMPILE_NEEDS_S["max-autotune"] / 2
    row = run_trial(regression, Knobs(batch_size=8, compile="max-autotune"),
                    settings(regression_data, deadline_unix_s=time.time() + left_s,
                             loader_only=True))
    assert row["status"] == "ok" and row["samples_per_sec"] > 0, row["error"]
    assert row["compile_s"] is None
