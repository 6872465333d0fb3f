"""The steady-state window rule (``tuner.windows``): pure functions of window rates, lengths and
step times, checked without torch or timing."""

from __future__ import annotations

import math

import pytest

import tuner.windows as windows

RULE = dict(window_s=1.0, tolerance=0.10, max_drops=6, settle_s=100.0)


def stand(rates, dropped_s=(), faster=None, *, seconds=None, step_ms=None, **rule) -> bool:
    """``windows_stand`` for windows of ``rates`` (1-s windows of 10-ms steps unless given)."""
    return windows.windows_stand(rates, seconds or [1.0] * len(rates),
                                 step_ms or [10.0] * len(rates), list(dropped_s), faster,
                                 **{**RULE, **rule})


def test_deviation_is_the_first_rate_against_the_median_of_the_others():
    assert windows.deviation([80.0, 100.0, 100.0, 120.0]) == pytest.approx(-0.2)
    assert windows.deviation([125.0, 100.0, 100.0]) == pytest.approx(0.2)
    assert windows.deviation([0.0, 0.0]) == 0.0
    assert windows.unsteady([80.0, 100.0, 100.0], 0.10)
    assert not windows.unsteady([95.0, 100.0, 100.0], 0.10)


def test_windows_within_the_tolerance_stand():
    assert stand([95.0, 100.0, 101.0])
    assert not stand([70.0, 100.0, 101.0])                      # a slow first window: transient


def test_a_first_window_on_the_other_side_of_the_dropped_ones_is_noise():
    # a slower window was dropped (faster=False); now the first is faster: alternating, noise
    assert stand([130.0, 100.0, 101.0], dropped_s=[1.0], faster=False)
    assert not stand([70.0, 100.0, 101.0], dropped_s=[1.0], faster=False)


@pytest.mark.parametrize("rule", [
    dict(settle_s=0.0),                     # nothing to judge with
    dict(max_drops=1),                      # one window dropped already: the cap
    dict(settle_s=2.5),                     # dropped 1 s + first 1 s + one more 1 s > 2.5 s
])
def test_the_caps_let_unsteady_windows_stand(rule):
    assert stand([70.0, 100.0, 101.0], dropped_s=[1.0], faster=True, **rule)


def test_windows_of_whole_long_steps_judge_nothing():
    assert windows.long_step(0.5, 1.0) and not windows.long_step(0.49, 1.0)
    assert windows.long_windows([400.0, 600.0, 700.0], 1.0)      # median 0.6 s of a 1-s window
    assert stand([50.0, 100.0, 100.0], step_ms=[400.0, 600.0, 700.0])


def test_warm_up_probes_agree_within_the_tolerance_of_the_larger():
    assert windows.rates_agree(91.0, 100.0, 0.10)
    assert not windows.rates_agree(89.0, 100.0, 0.10)


def noisy_row(cv: float, n: int = 3, status: str = "ok", step_ms: float = 10.0) -> dict:
    return {"samples_per_sec_cv": cv, "windows": n, "status": status, "step_time_ms_p50": step_ms}


def test_the_window_noise_is_the_median_sample_cv_of_rows_of_short_steps():
    rows = [noisy_row(0.02), noisy_row(0.04), noisy_row(0.9, step_ms=900.0),
            noisy_row(0.5, status="error")]
    assert windows.window_noise(rows, window_s=1.0) == pytest.approx(0.03 * math.sqrt(1.5))
    assert windows.window_noise(rows[:1], window_s=1.0) is None          # too few rows


def test_the_tolerance_grows_with_the_noise_from_its_floor():
    quiet = [noisy_row(0.01), noisy_row(0.01)]
    noisy = [noisy_row(0.08), noisy_row(0.08)]
    assert windows.steady_tolerance(quiet, 0.10, 1.0) == 0.10
    assert windows.steady_tolerance(noisy, 0.10, 1.0) == pytest.approx(
        windows.STEADY_Z * math.sqrt(2) * 0.08 * math.sqrt(1.5))
