"""How long a screening trial measures (``tuner.screening``), and what the searcher gives a
screen and a reference of a screened run."""

from __future__ import annotations

import pytest

from tuner.costs import TrialShape
from tuner.knobs import Knobs
from tuner.screening import (
    REFERENCE_WINDOWS,
    SCREEN_NOISE,
    SCREEN_STEPS,
    SCREEN_WARMUP_STEPS,
    pipeline_noise,
    reference_settings,
    screen_window_s,
)
from tuner.searcher import ConstrainedSearch, SearchSpec
from tuner.settings import TrialSettings
from tuner.space import IntRange, Space


def test_a_short_step_screens_over_a_few_steps_not_the_run_s_screening_window():
    """45-ms steps (one H200's ddpm below the knee) on a quiet pipeline: eight steps, not the
    1 s planned for any step; a step of 0.2 s is capped at the run's screening window."""
    assert screen_window_s(0.045, 0.005, 2.0, 1.0) == pytest.approx(SCREEN_STEPS * 0.045)
    assert screen_window_s(0.2, 0.005, 2.0, 1.0) == 1.0
    assert screen_window_s(None, 0.005, 2.0, 1.0) == 1.0  # no step time yet: the plan's


def test_a_noisy_pipeline_screens_longer_until_its_window_reads_within_the_screen_noise():
    """The CV of a window falls with the square root of its length: a pipeline whose 2-s
    windows scatter by 4.5 % needs 2 x (4.5 / 3)^2 = 4.5 s, capped at the run's 1 s; at 3 %
    the run's 2 s would be needed, at 1.5 % half a second."""
    assert screen_window_s(0.045, 0.045, 2.0, 1.0) == 1.0
    assert screen_window_s(0.045, SCREEN_NOISE / 2, 2.0, 1.0) == pytest.approx(0.5)
    assert screen_window_s(0.045, 0.0, 2.0, 1.0) == pytest.approx(SCREEN_STEPS * 0.045)


def _row(data_path: str, cv: float) -> dict:
    return {"data_path": data_path, "samples_per_sec_cv": cv, "windows": 5,
            "step_time_ms_p50": 45.0, "status": "ok"}


def test_the_noise_is_read_per_input_pipeline():
    """DataLoader workers on a busy host scatter (the loader references: 20-30 %); batches on
    the device do not: a device-path screen is not lengthened by the loader's noise."""
    rows = [_row("loader", 0.2), _row("loader", 0.3), _row("device", 0.004),
            _row("device", 0.006)]
    assert pipeline_noise(rows, "loader", 2.0) == pytest.approx(0.25 * (5 / 4) ** 0.5)
    assert pipeline_noise(rows, "device", 2.0) == pytest.approx(0.005 * (5 / 4) ** 0.5)
    assert pipeline_noise(rows, "cache", 2.0) is None  # no row of it


def test_a_screened_run_s_references_measure_fewer_windows_than_its_finalists_rounds():
    assert reference_settings(5) == {"windows": REFERENCE_WINDOWS}
    assert reference_settings(REFERENCE_WINDOWS) == {}


def _reference(name: str, batch_size: int) -> tuple[str, dict, Knobs]:
    return name, {"batch_size": batch_size}, Knobs(batch_size=batch_size, data_path="device")


def test_the_searcher_screens_a_proposal_over_its_measured_step_time(tmp_path):
    """Two references measured a flat 45-ms step (batch 8 and 64) on the device path: a
    screen of that pipeline is run over ``SCREEN_STEPS`` steps, not the plan's 1-s window, and
    its price reads the same window; the references measured ``REFERENCE_WINDOWS`` windows,
    not the run's 5 (the finalists' rounds measure them again)."""
    space = Space("test", {"batch_size": IntRange(8, 64)},
                  {"data_path": "device", "num_workers": 0})
    settings = TrialSettings(scale="full", device="cuda", data_dir=str(tmp_path), windows=5,
                             window_s=2.0, warmup_steps=10)
    spec = SearchSpec(space=space, metric="samples_per_sec", mode="max", sampler="random",
                      references=(_reference("baseline", 8), _reference("recommended", 64)),
                      reference_count=2, window_s=2.0, screen_windows=1, screen_window_s=1.0,
                      settings=settings)
    search = ConstrainedSearch(spec)
    for trial_id in ("b", "r"):
        reference = search.suggest(trial_id)
        assert reference["tuner"] == {"windows": REFERENCE_WINDOWS}
        search.on_trial_complete(trial_id, {
            "status": "ok", "samples_per_sec": reference["batch_size"] / 0.045,
            "step_time_ms_p50": 45.0, "samples_per_sec_cv": 0.004, "windows": 3,
            "setup_s": 0.1, "first_step_s": 1.0, "warmup_s": 1.4, "measured_s": 6.0,
            "data_path": "device", "batch_size": reference["batch_size"]})
    screen = search.suggest("s")
    assert screen["tuner"]["windows"] == 1
    assert screen["tuner"]["window_s"] == pytest.approx(SCREEN_STEPS * 0.045, abs=0.002)
    # the warm-up: the cap a screen of the plan's 1-s window has, 4 of the run's 10 steps
    assert screen["tuner"]["max_warmup_s"] == 2.0
    assert screen["tuner"]["warmup_steps"] == SCREEN_WARMUP_STEPS
    shape = TrialShape.of(settings, screen["tuner"])
    assert search.price(Knobs.from_dict(screen, strict=False), screen["tuner"]).window_s == \
        pytest.approx(shape.window_s, abs=0.05)
