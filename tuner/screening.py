"""How long a screening trial measures, from what the run has measured: a screen is a first
reading that ranks configurations for the finalists' re-measurement, so its window needs as
many steps as a rate needs to stand, and no more.

* ``screen_window_s``: a screen's window holds ``SCREEN_STEPS`` steps at the cost model's
  step time for the configuration (``tuner.costs.CostModel.step_s``), longer where the window
  noise measured on its input pipeline (``pipeline_noise``) calls for it to read within
  ``SCREEN_NOISE``, and never longer than the run's screening window (``tuner.plan``'s
  ``SCREEN_WINDOW_SHARE`` of its window); its warm-up is ``SCREEN_WARMUP_STEPS`` steps
  under the cap a screen of the run's screening window has: a 45-ms step screens over ~0.3 s
  after 4 steps, not over the 1 s after 10 steps a run of 2-s windows planned for any step.
* ``screening_settings``: the trial settings changes of one screening trial;
  ``reference_settings``: of a reference in a screened run, ``REFERENCE_WINDOWS`` windows
  (the finalists' interleaved rounds measure the references again beside them).

The figures behind the defaults: on one H200 (2026-11-27) ddpm's step was a flat 45 ms up to
batch ~240 and 123 ms at 652; the window CV of a configuration whose batches are on the
device was 0.1-0.6 %, of one with DataLoader workers on a busy host 7-60 % (2 cores, the
simulated H200 of 2026-12-02). Torch-free (base floor, beside ``windows``).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import tuner.windows as rule

SCREEN_STEPS = 6
"""Steps a screen's window holds at the least: three times the two steps of a
``tuner.windows.long_step`` window (whose spread is a single step's). On a card the steps of
a window queue back to back between two synchronisations, so a window's rate is its samples
over its span: six steps of a step whose own spread is 1-3 % read within ``SCREEN_NOISE``."""

SCREEN_WARMUP_STEPS = 4
"""Warm-up steps of a screen, the first included (the run's ``warmup_steps`` where fewer): a
screen compiles nothing and autotunes nothing (compile and ``cudnn_benchmark`` are decided at
the finalists), so its warm-up is the first step's one-off costs (workers' start, the first
batch) and the allocator's growth over the next steps."""

SCREEN_NOISE = 0.03
"""The window CV a screen may read with: a third of the ±10 % band within which one
measurement of each configuration is a tie (``tuner.noise.SINGLE_PAIR_FLOOR``), so the
finalists (the best few, re-measured) are the best few within the noise."""


REFERENCE_WINDOWS = 3
"""Windows of a reference in a run that screens (``reference_settings``): the speed-ups a
user reads come from the finalists' interleaved rounds, which measure the references again;
the search-phase reading needs a median of a few windows, not five (a window CV of 0.1-10 %
on one H200, 2026-11-27)."""


def pipeline_noise(rows: Sequence[Mapping], data_path: str, window_s: float) -> float | None:
    """One window's CV on this machine for configurations on ``data_path`` (``'loader'``,
    ``'cache'``, ``'device'``): ``tuner.windows.window_noise`` over the rows of that data path
    (rows of two windows or more, measured at windows of ``window_s`` seconds); None where
    they are too few to say. A pipeline with DataLoader workers on a busy host scatters far
    more than batches on the device: one noise for all would lengthen every screen."""
    same = [r for r in rows if (r.get("data_path") or "loader") == data_path]
    return rule.window_noise(same, window_s)


def screen_window_s(step_s: float | None, noise: float | None, window_s: float,
                    longest_s: float) -> float:
    """Seconds of a screening trial's window.

    Args:
        step_s: the cost model's step time for the configuration, seconds (None: no row to
            read it from yet).
        noise: the window CV measured on its input pipeline at windows of ``window_s``
            (``pipeline_noise``; None: not known).
        window_s: the run's window, seconds (``TrialSettings.window_s``).
        longest_s: the run's screening window, seconds (``Plan.screen_window_s``): the most a
            screen measures.

    Returns:
        ``SCREEN_STEPS`` steps of ``step_s``, or where ``noise`` says more, the length at
        which a window's CV falls to ``SCREEN_NOISE`` (the CV of a mean of independent steps
        falls with the square root of its length: ``window_s x (noise / SCREEN_NOISE)^2``);
        at most ``longest_s``, which is also the answer without a step time."""
    if step_s is None or step_s <= 0 or longest_s <= 0:
        return longest_s
    need_s = SCREEN_STEPS * step_s
    if noise is not None and noise > 0:
        need_s = max(need_s, window_s * (noise / SCREEN_NOISE) ** 2)
    # a whole number of milliseconds: the window's length is a setting the row keeps
    return min(longest_s, math.ceil(need_s * 1000) / 1000)


def screening_settings(windows: int, window_s: float | None = None, *,
                       longest_s: float | None = None, warmup_steps: int | None = None) -> dict:
    """Trial settings changes of a screening trial: ``windows`` windows of ``window_s``
    seconds (None: the run's); with ``longest_s`` (the run's screening window) the warm-up's
    cap a screen of it has (``TrialSettings.max_warmup_s``, twice its windows: a shorter
    window must not cut the warm-up, whose first step holds the one-off costs); with
    ``warmup_steps`` (the run's) at most ``SCREEN_WARMUP_STEPS`` of them; and no half-window
    probes of the steady state before a single window (``TrialSettings.max_steady_probes``:
    up to six of them, which would cost a screening trial what the windows it saves did). Its
    rate is a first reading; the finalists' re-measurement judges the steady state."""
    out: dict = {"windows": windows, "max_steady_probes": 0}
    if window_s:
        out["window_s"] = window_s
    if longest_s and window_s and window_s < longest_s:
        out["max_warmup_s"] = 2 * windows * longest_s
    if warmup_steps is not None and warmup_steps > SCREEN_WARMUP_STEPS:
        out["warmup_steps"] = SCREEN_WARMUP_STEPS
    return out


def reference_settings(windows: int) -> dict:
    """Trial settings changes of a reference in a screened run whose trials measure
    ``windows`` windows: ``REFERENCE_WINDOWS`` windows where the run's are more, else none."""
    return {"windows": REFERENCE_WINDOWS} if windows > REFERENCE_WINDOWS else {}
