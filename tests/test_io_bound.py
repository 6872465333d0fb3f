"""An input pipeline that waits rather than computes (``tests.landscapes.IoBound``: a sleep per
sample, as a read from network storage is): a window reads no more than its DataLoader workers
sustain, however many batches they prefetched before it (``tuner.trial.prefetch``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.landscapes import io_bound
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.status import Status
from tuner.trial.harness import run_trial


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return io_bound.prepare_default_data(tmp_path_factory.mktemp("io-bound"), "tiny")


def _screen(data_dir: Path, windows: int = 1) -> TrialSettings:
    """A screening trial's settings: one warm-up step (the 3-s first step, while the workers
    fill their queue), then ``windows`` window of 1 s."""
    return TrialSettings(scale="tiny", device="cpu", data_dir=str(data_dir), warmup_steps=1,
                         windows=windows, window_s=1.0, breakdown_steps=0, max_steady_probes=0)


def test_a_screen_reads_what_the_workers_sustain_not_their_queue(data_dir, one_torch_thread):
    """Two workers prefetching eight batches each fill their queue during the 3-s first step;
    the 1-s window after it took those batches at the model's rate (2.6x the workers' 99
    samples/sec before the window counted only what they deliver). Bounds for a loaded
    machine: the workers' batches arrive in bursts (each takes 1.28 s), so a window of 1 s reads
    them within a quarter."""
    knobs = Knobs(batch_size=64, num_workers=2, prefetch_factor=8, persistent_workers=True)
    sustained = io_bound.samples_per_sec(knobs)
    result = run_trial(io_bound, knobs, _screen(data_dir), cpus=2)
    assert result["status"] == Status.OK, result["error"]
    assert 0.75 * sustained <= result["samples_per_sec"] <= 1.25 * sustained
