"""A step the fp16 GradScaler skips (inf/NaN gradients: nothing is updated) is not a measured
step: it leaves the window's steps and samples, its time stays, and the row says how many
there were."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.fake_workloads import Regression, StepClock
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.trial.apply import build_training, repeat
from tuner.trial.harness import TrialFailure, _windows
from tuner.trial.measure import HostMemorySampler, counted_window, summarise
from tuner.trial.steppers import Stepper
from tuner.trial.steppers import on_device as _on_device


def test_each_halving_of_the_scale_is_one_skipped_step_taken_out_of_the_window():
    window = counted_window(10, 80, 2.0, 65536.0, 16384.0)      # two halvings
    assert (window.steps, window.samples, window.seconds, window.skipped) == (8, 64, 2.0, 2)
    assert window.samples_per_sec == 32.0                      # 64 samples in 2 s, not 40
    assert window.step_time_ms == 250.0
    assert summarise([window, counted_window(10, 80, 2.0, 16384.0, 16384.0)])["skipped_steps"] == 2


def test_no_scaler_or_a_growing_scale_skips_nothing():
    assert counted_window(10, 80, 2.0, None, None).skipped == 0
    assert counted_window(10, 80, 2.0, 1024.0, 2048.0).steps == 10  # growth after 2,000 clean steps


def test_a_window_whose_every_step_was_skipped_is_an_error():
    with pytest.raises(ValueError, match="skipped all 4 steps"):
        counted_window(4, 32, 1.0, 1024.0, 64.0)


class OverflowsEveryThirdStep(Regression):
    """The regression MLP whose loss is inf on every third micro-batch: fp16 gradients
    overflow there and the GradScaler skips that optimizer step. Each step moves ``clock``
    (when given) by ``STEP_S``."""
    name = "fake-fp16-overflow"
    STEP_S = 1 / 128                      # a power of two: six steps make 6/128 s exactly

    def __init__(self, clock: StepClock | None = None):
        self.calls = 0
        self.clock = clock

    def training_step(self, model, batch):
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.STEP_S
        loss = super().training_step(model, batch)
        return loss * float("inf") if self.calls % 3 == 0 else loss


def test_steps_the_grad_scaler_skips_are_not_counted_as_measured(regression_data, monkeypatch):
    """A real GradScaler (fp16 autocast on the CPU device, which tuner clamps off in trials
    but torch runs) skipping every third step: a third of the steps leave the count. The
    harness runs on a clock that only the steps move, so each window holds exactly six steps
    (two of them skipped) however busy the machine is."""
    from tuner.trial import harness
    clock = StepClock()
    monkeypatch.setattr(harness, "time", clock)
    workload = OverflowsEveryThirdStep(clock)
    training = build_training(workload, Knobs(batch_size=8, amp="fp16"), "tiny",
                              torch.device("cpu"))
    assert training.scaler is not None
    dataset = workload.build_dataset(regression_data, "tiny")
    batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=8)))
    stepper = Stepper(training, repeat([batch]), _on_device, HostMemorySampler())
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=2, window_s=6 * workload.STEP_S)
    # Warm-up first, as every trial's windows follow one: at the scaler's initial scale of
    # 2**16 this MLP's first step overflows fp16 by itself for about 2 in 5 random
    # initialisations (a real skip the scaler counts, beside the injected ones).
    for _ in range(30):
        stepper.step()
    seen = []
    windows, dropped = _windows(stepper, torch.device("cpu"), settings, seen.append,
                                lambda ms: 0.0)
    assert dropped == []  # no settle_s: no window is dropped as warm-up
    assert [(w.steps, w.skipped, w.samples, w.seconds) for w in windows] == [
        (4, 2, 32, 6 * workload.STEP_S)] * 2
    assert windows[0].samples_per_sec == 32 / (6 * workload.STEP_S)   # 4 measured steps' samples
    assert summarise(windows)["skipped_steps"] == 4
    assert len(seen) == 2


def test_a_trial_whose_every_step_overflows_fails_with_the_reason(regression_data):
    class AlwaysInf(OverflowsEveryThirdStep):
        def training_step(self, model, batch):
            return Regression.training_step(self, model, batch) * float("inf")

    workload = AlwaysInf()
    training = build_training(workload, Knobs(batch_size=8, amp="fp16"), "tiny",
                              torch.device("cpu"))
    batch = next(iter(torch.utils.data.DataLoader(
        workload.build_dataset(regression_data, "tiny"), batch_size=8)))
    stepper = Stepper(training, repeat([batch]), _on_device, HostMemorySampler())
    settings = replace(TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data)),
                       windows=1, window_s=0.05)
    with pytest.raises(TrialFailure, match="window 1: the fp16 GradScaler skipped all"):
        _windows(stepper, torch.device("cpu"), settings, lambda w: None, lambda ms: 0.0)
