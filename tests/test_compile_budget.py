"""Compile is a first-class cost: a compile that cannot finish in the run's time left is not
started, and a compiled trial records ``compile_s`` apart from its throughput."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from tests.fake_workloads import ClockedPaced, StepClock, regression
from tuner.budget import COMPILE_MARGIN, COMPILE_NEEDS_CPU_S, COMPILE_NEEDS_S, compile_needs_s
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.trial.harness import DeadlineReached, _check_compile_fits, run_trial


def settings(data, **changes) -> TrialSettings:
    return replace(TrialSettings(scale="tiny", device="cpu", data_dir=str(data), windows=2,
                                 window_s=0.2, warmup_steps=2), **changes)


@pytest.fixture
def clock(step_clock) -> StepClock:
    """The harness's and the stopwatches' clock, moved only by a ``ClockedPaced`` trial's
    steps: the time left is exact however long set-up takes on a busy machine."""
    return step_clock


def test_a_compile_that_cannot_finish_in_the_time_left_is_not_started(regression_data, clock):
    """Half the time a max-autotune compile needs: no step runs (the clock, which only the
    steps move, stands still) and the row says why."""
    left_s = COMPILE_NEEDS_S["max-autotune"] / 2
    row = run_trial(ClockedPaced(clock), Knobs(batch_size=8, compile="max-autotune"),
                    settings(regression_data, deadline_unix_s=clock.time() + left_s))
    assert clock.now == 0.0                                      # no compile was started
    assert row["status"] == "timeout" and row["samples_per_sec"] is None
    assert "torch.compile mode=max-autotune was not started" in row["error"]
    assert f"needs about {COMPILE_NEEDS_S['max-autotune']:.0f} s" in row["error"]


def test_without_compile_the_same_time_left_measures(regression_data, clock):
    left_s = COMPILE_NEEDS_S["max-autotune"] / 2
    row = run_trial(ClockedPaced(clock), Knobs(batch_size=8),
                    settings(regression_data, deadline_unix_s=clock.time() + left_s))
    assert row["status"] == "ok" and row["samples_per_sec"] == pytest.approx(8 / 0.05)
    assert row["compile_s"] is None                              # compile off: no compile time


def test_the_loader_only_ceiling_of_a_compiled_configuration_is_not_held_back(regression_data):
    """Its DataLoader alone, no model: nothing compiles, so the compile's time is not asked."""
    left_s = COMPILE_NEEDS_S["max-autotune"] / 2
    row = run_trial(regression, Knobs(batch_size=8, compile="max-autotune"),
                    settings(regression_data, deadline_unix_s=time.time() + left_s,
                             loader_only=True))
    assert row["status"] == "ok" and row["samples_per_sec"] > 0, row["error"]
    assert row["compile_s"] is None


@pytest.mark.parametrize("workload, mode, device, needs_s", [
    ("chargpt", "default", "cuda", 14.0 * COMPILE_MARGIN),
    ("chargpt", "reduce-overhead", "cuda", 14.0 * COMPILE_MARGIN + 30.0),
    ("chargpt", "max-autotune", "cuda", COMPILE_NEEDS_S["max-autotune"]),  # never timed
    ("chargpt", "default", "cpu", COMPILE_NEEDS_CPU_S["default"]),  # the hints are GPUs'
    ("ddpm", "default", "cpu", COMPILE_NEEDS_CPU_S["default"]),
    ("ddpm", "default", "cuda", 80.0 * COMPILE_MARGIN),
    ("headpose", "default", "cuda", COMPILE_NEEDS_S["default"]),  # not measured: no hint
])
def test_a_compile_is_assumed_to_need_the_workloads_measured_time(workload, mode, device,
                                                                  needs_s):
    from tuner.workload_loader import resolve
    assert compile_needs_s(mode, resolve(workload), device) == pytest.approx(needs_s)


def test_on_cuda_a_small_models_compile_starts_with_a_minute_left(regression_data):
    """chargpt's recommended reference compiles (14 s on an H100): with 60 s left it is
    started (the ddpm U-Net's ~90 s is not the measure of every compile); with 10 s it is not. (The
    check alone: nothing here needs a GPU.)"""
    from tuner.workload_loader import resolve
    chargpt = resolve("chargpt")
    knobs = Knobs(batch_size=128, compile="default")
    cuda = settings(regression_data, device="cuda", deadline_unix_s=time.time() + 60)
    _check_compile_fits(chargpt, knobs, cuda)                    # started: no exception
    with pytest.raises(DeadlineReached, match="needs about 18 s; 9 s were left"):
        _check_compile_fits(chargpt, knobs, replace(cuda, deadline_unix_s=time.time() + 9.5))
    with pytest.raises(DeadlineReached, match="needs about 150 s"):  # COMPILE_NEEDS_CPU_S
        _check_compile_fits(chargpt, knobs, replace(cuda, device="cpu"))


def test_a_compile_the_runs_cache_holds_starts_with_the_warm_compiles_time_left(
        regression_data, tmp_path):
    """On CPU a cold compile needs 150 s (``COMPILE_NEEDS_CPU_S``); once a trial of the same
    knobs saved its compile to the run's cache (``compile_artifacts.save_trial``), the next
    one needs ``COMPILE_WARM_SHARE`` of it: with 60 s left it starts, a new shape does not."""
    from tuner.budget import COMPILE_WARM_SHARE
    from tuner.trial.compile_artifacts import artifacts_path
    knobs = Knobs(batch_size=8, compile="default")
    cpu = settings(regression_data, compile_cache_dir=str(tmp_path / "cc"),
                   deadline_unix_s=time.time() + 60)
    with pytest.raises(DeadlineReached, match=r"needs about 150 s; (59|60) s were left"):
        _check_compile_fits(regression, knobs, cpu)
    saved = artifacts_path(cpu.compile_cache_dir, regression.name, cpu.scale, "cpu",
                           cpu.world_size, knobs.to_dict())
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"compiled")
    _check_compile_fits(regression, knobs, cpu)                  # warm: started
    warm_s = COMPILE_NEEDS_CPU_S["default"] * COMPILE_WARM_SHARE
    with pytest.raises(DeadlineReached, match=f"needs about {warm_s:.0f} s from the run's "
                                              r"compile cache; (29|30) s were left"):
        _check_compile_fits(regression, knobs, replace(cpu, deadline_unix_s=time.time() + 29.5))
    with pytest.raises(DeadlineReached, match="needs about 150 s"):
        _check_compile_fits(regression, knobs.replace(batch_size=16), cpu)   # a new shape
