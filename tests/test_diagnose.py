"""The profile's diagnosis agrees with the card: a CUDA step whose GPU idles is launch-bound,
not "99 % GPU compute" (the ddpm U-Net on an H100: NVML 20 %, 70 ms per step at bs=8 and
bs=32)."""

from __future__ import annotations

import pytest
from rich.console import Console

from tuner.diagnose import bottleneck, breakdown_table, kind


def row(device="cuda", util=None, data=0.5, h2d=0.5, forward=30.0, backward=60.0, optimizer=9.0):
    step = 70.0
    pcts = {"data_wait": data, "h2d": h2d, "forward": forward, "backward": backward,
            "optimizer": optimizer}
    r = {"device": device, "gpu_util_pct": util, "breakdown_step_ms": step}
    for phase, pct in pcts.items():
        r[f"{phase}_pct"] = pct
        r[f"{phase}_ms"] = step * pct / 100
    return r


@pytest.mark.parametrize("r, expected", [
    (row(util=20.0), "launch"),                      # the H100 ddpm case
    (row(util=95.0), "compute"),
    (row(util=None), "compute?"),                    # no NVML: said, not guessed
    (row(util=20.0, data=45.0), "input"),            # waiting for data explains the idle GPU
    (row(util=20.0, h2d=25.0), "transfer"),
    (row(device="cpu", util=None), "compute"),
])
def test_kind_of_bound(r, expected):
    assert kind(r) == expected


def test_a_launch_bound_step_is_not_called_gpu_compute():
    sentence = bottleneck(row(util=20.0))
    assert "launch-bound" in sentence and "busy only 20%" in sentence
    assert "reduce-overhead" in sentence and "larger batch" in sentence
    assert "GPU compute" not in sentence
    text = _render(breakdown_table(row(util=20.0)))
    assert "Kernel launch (GPU idle)" in text and "GPU compute" not in text


def test_a_busy_gpu_is_compute_bound_and_says_its_share():
    sentence = bottleneck(row(util=97.0))
    assert sentence.startswith("Bottleneck: GPU compute (GPU busy 97%)")
    assert "GPU compute" in _render(breakdown_table(row(util=97.0)))


def test_without_nvml_the_launch_bound_case_is_named_as_possible():
    assert "cannot be ruled out" in bottleneck(row(util=None))


def test_input_and_cpu_sentences_unchanged():
    assert bottleneck(row(util=20.0, data=45.0)).startswith("Bottleneck: the input pipeline — 45%")
    assert bottleneck(row(device="cpu")).startswith("Bottleneck: CPU compute — 99%")


def _render(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()
