"""One measured trial without Ray: warm-up, windows across epochs, reports, and every failure
caught with its status (the run goes on)."""

from __future__ import annotations

import os
import traceback
from dataclasses import replace

import psutil
import pytest
import torch

from tests.fake_workloads import N_FILES, Regression, StepClock, broken, oom, regression
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.trial.apply import keep_cpu_trial_off_the_gpus
from tuner.trial.failures import free_device_memory, is_oom, oom_memory
from tuner.trial.harness import run_trial
from tuner.trial.result_columns import WINDOW_REPORT_KEYS


@pytest.fixture
def settings(regression_data) -> TrialSettings:
    return TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data), windows=2,
                         window_s=0.2, warmup_steps=2)


def test_ok_trial_measures_and_reports_every_window(settings):
    reports = []
    result = run_trial(regression, Knobs(batch_size=32), settings, report=reports.append)
    assert result["status"] == "ok", result.get("error")
    assert result["error"] is None
    assert result["samples_per_sec"] > 0
    assert result["windows"] == 2
    assert result["step_time_ms_p50"] > 0
    assert result["step_time_ms_p95"] >= result["step_time_ms_p50"]
    assert result["warmup_s"] > 0
    assert 0 < result["first_step_s"] <= result["warmup_s"]
    assert result["measured_s"] >= 2 * settings.window_s
    assert result["peak_host_memory_mb"] > 0
    assert result["peak_device_memory_mb"] is None          # CPU: no device allocator
    assert result["batch_size"] == 32 and result["clamped"] is None
    assert result["device"] == "cpu" and result["hardware_key"].startswith("cpu:")
    assert result["started_at"] < result["finished_at"]
    # a plain str, not torch's TorchVersion: a process that unpickles the result (a
    # data-parallel trial's result queue, the driver) does not import torch for it
    assert type(result["torch_version"]) is str
    measured = 2 + result["steady_probes"]                    # windows dropped as warm-up too
    # A loaded machine can stretch a step past half the 0.2-s window: the warm-up then reports
    # its last step first (window -1, for early stopping), before the windows.
    warm_up = [r for r in reports if r.get("window") == -1]
    assert len(warm_up) <= 1 and reports[:len(warm_up)] == warm_up
    windows = reports[len(warm_up):-1]
    assert [r["status"] for r in reports] == ["running"] * (len(reports) - 1) + ["ok"]
    assert result["load_avg_1m"] is not None                  # the machine's load, recorded
    assert [r.get("window") for r in windows] == list(range(measured))
    assert all(r["window_samples_per_sec"] > 0 for r in windows)
    assert reports[-1] == result


def test_windows_cross_epoch_boundaries(regression_data, step_clock):
    """64 samples at batch 32 are 2 steps per epoch; a window runs on across epochs (the
    DataLoader is started again, as in a training loop) instead of stopping at the first.
    Steps of 10 ms on the step clock: 30 to a window however busy the machine is."""
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=2, window_s=0.3, warmup_steps=1)

    class Steps(Regression):
        def training_step(self, model, batch):
            step_clock.now += 0.01
            return super().training_step(model, batch)

    reports = []
    result = run_trial(Steps(), Knobs(batch_size=32), settings, report=reports.append)
    assert result["status"] == "ok", result.get("error")
    for window in reports[:2]:
        samples_in_window = window["window_samples_per_sec"] * settings.window_s  # lower bound
        assert samples_in_window > 2 * N_FILES                    # several epochs per window
    measured_samples = result["samples_per_sec"] * result["measured_s"]
    assert measured_samples > 4 * N_FILES


def test_workers_with_persistent_workers_run_and_shut_down(settings):
    knobs = Knobs(batch_size=8, num_workers=1, persistent_workers=True)
    before = _alive_children()
    result = run_trial(regression, knobs, settings)
    assert result["status"] == "ok", result.get("error")
    assert result["samples_per_sec"] > 0
    assert (result["num_workers"], result["persistent_workers"], result["prefetch_factor"]) == (
        1, True, 2)
    assert _alive_children() - before == set()                  # DataLoader workers are gone


def _alive_children() -> set[int]:
    alive = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_oom_is_recorded_and_the_next_trial_still_runs(settings):
    reports = []
    result = run_trial(oom, Knobs(batch_size=32), settings, report=reports.append)
    assert result["status"] == "oom"
    assert result["samples_per_sec"] == 0.0                      # Tune needs the metric
    assert "OutOfMemoryError" in result["error"]
    assert "OutOfMemoryError" in result["traceback"]
    assert result["memory_exceeded"] == "host"                   # the CPU device's memory
    assert reports == [result]                                   # no window was measured
    after = run_trial(oom, Knobs(batch_size=16), settings)       # same process
    assert after["status"] == "ok", after.get("error")
    assert after["samples_per_sec"] > 0


def test_trial_threads_come_from_its_cpus_and_are_restored_also_after_a_failure(settings):
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        result = run_trial(regression, Knobs(batch_size=16), settings, cpus=2)
        assert result["status"] == "ok", result.get("error")
        assert result["torch_threads"] == 2                          # no workers: both CPUs
        assert torch.get_num_threads() == 3
        failed = run_trial(oom, Knobs(batch_size=32), settings, cpus=1)
        assert (failed["status"], failed["torch_threads"]) == ("oom", 1)
        assert failed["time_to_train_s"] is None
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_sample_failing_in_a_worker_is_an_error_naming_the_file(settings):
    result = run_trial(broken, Knobs(batch_size=4, num_workers=1), settings)
    assert result["status"] == "error"
    assert "0003.npy" in result["error"]
    assert result["traceback"]
    assert result["samples_per_sec"] == 0.0


def test_batch_larger_than_dataset_is_a_clear_error(settings):
    result = run_trial(regression, Knobs(batch_size=128), settings)
    assert result["status"] == "error"
    assert "batch_size 128" in result["error"]
    assert f"{N_FILES} samples" in result["error"]


def test_invalid_knobs_from_a_config_are_an_error_not_a_crash(settings):
    reports = []
    result = run_trial(regression, {"batch_size": 0, "reference": None}, settings,
                       report=reports.append)
    assert result["status"] == "error"
    assert "invalid knobs" in result["error"] and "batch_size" in result["error"]
    assert reports == [result]


def test_clamped_knobs_are_recorded(settings):
    result = run_trial(regression, Knobs(batch_size=16, pin_memory=True), settings)
    assert result["status"] == "ok", result.get("error")
    assert result["pin_memory"] is False                          # what was applied
    assert result["clamped"] == "pin_memory: true -> false (cpu)"


def test_trial_settings_validate():
    with pytest.raises(ValueError, match="scale 'huge'"):
        TrialSettings(scale="huge", device="cpu", data_dir=".")
    with pytest.raises(ValueError, match="device 'tpu'"):
        TrialSettings(scale="tiny", device="tpu", data_dir=".")
    with pytest.raises(ValueError, match="warmup_steps"):
        TrialSettings(scale="tiny", device="cpu", data_dir=".", windows=0)


@pytest.mark.parametrize("exc, expected", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"), True),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"), True),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                  "memory: you tried to allocate 1000000 bytes"), True),
    (MemoryError(), True),
    (ValueError("out of memory"), False),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
    (KeyError("memory"), False),
])
def test_is_oom(exc, expected):
    assert is_oom(exc) is expected


@pytest.mark.parametrize("exc, device, expected", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "cuda", "device"),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"), "cuda",
     "device"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes"),
     "cuda", "host"),
    (MemoryError(), "cuda", "host"),
    (torch.OutOfMemoryError("out of memory (fake)"), "cpu", "host"),
])
def test_oom_memory_names_what_ran_out(exc, device, expected):
    assert oom_memory(exc, torch.device(device)) == expected


def test_the_compute_only_ceiling_trains_with_the_configurations_threads(settings):
    """Every condition but the input pipeline is the configuration's: with 1 worker on 2 CPUs
    the configuration trains on 1 thread, and so does its ceiling (with 2 it would come out up
    to 8x faster on CPU than the configuration could ever be)."""
    from dataclasses import replace
    knobs = Knobs(batch_size=16, num_workers=1)
    threads = torch.get_num_threads()
    config = run_trial(regression, knobs, settings, cpus=2)
    ceiling = run_trial(regression, knobs, replace(settings, compute_only=True), cpus=2)
    assert config["status"] == ceiling["status"] == "ok"
    assert config["torch_threads"] == ceiling["torch_threads"] == 1
    assert torch.get_num_threads() == threads


def test_a_measured_trial_carries_its_flops_and_achieved_tflops_and_no_mfu_on_cpu(settings):
    """FLOPs are counted once per run (TrialSettings); the trial turns its throughput into
    TFLOP/s; MFU needs a card's peak, so on CPU it is empty unless one is given."""
    from dataclasses import replace
    counted = replace(settings, model_flops_per_sample=6 * 16 * 32 * 1.0e3)
    result = run_trial(regression, Knobs(batch_size=16), counted)
    assert result["status"] == "ok", result.get("error")
    assert result["model_flops_per_sample"] == counted.model_flops_per_sample
    assert result["achieved_tflops"] == pytest.approx(
        counted.model_flops_per_sample * result["samples_per_sec"] / 1e12)
    assert result["mfu_pct"] is None and result["mfu_impossible"] is False
    peaked = run_trial(regression, Knobs(batch_size=16), replace(counted, peak_tflops=1e-6))
    assert peaked["mfu_pct"] == pytest.approx(100 * peaked["achieved_tflops"] / 1e-6)
    assert peaked["mfu_impossible"] is (peaked["mfu_pct"] > 100)


def test_the_loader_only_ceiling_measures_the_dataloader_without_a_model(settings):
    from dataclasses import replace
    loader = replace(settings, loader_only=True, ceiling="loader", model_flops_per_sample=1e6)
    result = run_trial(regression, Knobs(batch_size=16, num_workers=1), loader, cpus=2)
    assert result["status"] == "ok", result.get("error")
    assert result["ceiling"] == "loader" and result["samples_per_sec"] > 0
    assert result["final_loss"] is None and result["achieved_tflops"] is None
    assert result["h2d_ms"] is not None and result["forward_ms"] == 0.0   # no model ran


def test_on_cpu_the_breakdown_is_timed_inside_the_windows_not_in_extra_steps(settings,
                                                                             monkeypatch):
    """Three synchronised steps after the windows cost 1.5-3 s of each searched ddpm trial on
    the 2-core CPU (7-9 % of a default run), where nothing needs synchronising: the windows'
    own steps are timed by phase instead. A step sleeping 100 ms in its forward pass reads as
    such: at least that long, and the longest phase (a loaded machine stretches every phase's
    CPU work, so its share of the step is no fixed figure)."""
    from dataclasses import replace

    import tuner.trial.harness as harness
    from tests.fault_workloads import slow
    real = harness._breakdown

    def no_extra_steps(train_step, device, steps):
        assert steps == 0, "extra synchronised steps on CPU"
        return real(train_step, device, steps)

    monkeypatch.setattr(harness, "_breakdown", no_extra_steps)
    monkeypatch.setenv("TUNER_TEST_STEP_SLEEP", "0.1")
    settings = replace(settings, window_s=1.0)       # steps well under half a window
    result = run_trial(slow, Knobs(batch_size=16), replace(settings, breakdown_steps=3))
    assert result["status"] == "ok", result.get("error")
    phases = [result[f"{p}_ms"] for p in ("data_wait", "h2d", "forward", "backward", "optimizer")]
    assert sum(phases) == pytest.approx(result["breakdown_step_ms"])
    assert result["breakdown_step_ms"] == pytest.approx(result["step_time_ms_p50"], rel=0.25)
    assert result["forward_ms"] >= 100.0 and result["forward_ms"] == max(phases)
    off = run_trial(slow, Knobs(batch_size=16), replace(settings, breakdown_steps=0))
    assert off.get("breakdown_step_ms") is None                # 0 still turns it off


def test_steps_longer_than_half_a_window_skip_the_steady_state_probes(settings, step_clock):
    """A configuration whose step is as long as a window is measured in whole steps; probing
    for a steady state would repeat multi-second steps (a bf16 batch-256 ddpm trial on CPU
    spent over 10 minutes doing so)."""
    from dataclasses import replace

    def steps_of(step_s: float) -> _ClockedTransient:
        workload = _ClockedTransient(step_clock)
        workload.SLOW_STEPS, workload.FAST_S = 0, step_s
        return workload
    result = run_trial(steps_of(0.15), Knobs(batch_size=16),    # a step >= window_s / 2
                       replace(settings, max_steady_probes=6, breakdown_steps=3))
    assert settings.window_s / 2 <= 0.15
    assert result["status"] == "ok", result.get("error")
    assert result["steady_probes"] == 0 and result["steady_state"] is None
    assert result["windows"] == settings.windows
    quick = run_trial(steps_of(0.005), Knobs(batch_size=16),    # quick steps: judged
                      replace(settings, max_steady_probes=6))
    assert quick["steady_state"] is not None


@pytest.mark.parametrize("step_s", [0.025, 0.15], ids=["short-steps", "long-steps"])
def test_a_one_window_trial_runs_the_probes_its_price_counts(regression_data, step_clock, step_s):
    """A trial of one window after one warm-up step (a re-measurement round cut to one window
    at the tiny scale) warms up with steady-state probes that a screen of one window does not
    run: what ``tuner.windows.least_steady_probes`` says, each ``probe_s`` long, the rule the
    cost model prices them with (``budget.trial_cost_s``). A slow host's rounds of one window
    took 13.8-14.3 s where 8.0 s was priced without them. Long steps are one probe step each."""
    from dataclasses import replace

    import tuner.windows as rule
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=1, window_s=0.2, warmup_steps=1, breakdown_steps=0,
                             max_steady_probes=6)

    def trial(**changes) -> dict:
        workload = _ClockedTransient(step_clock)
        workload.SLOW_STEPS, workload.FAST_S = 0, step_s
        result = run_trial(workload, Knobs(batch_size=8), replace(settings, **changes))
        assert result["status"] == "ok", result.get("error")
        return result
    screen, probed = trial(max_steady_probes=0), trial()
    probes = rule.least_steady_probes(step_s, settings.window_s, windows=1, warmup_steps=1,
                                      max_probes=6, cap_left_s=2 * settings.window_s)
    assert probes == 2 and probed["steady_probes"] == probes and screen["steady_probes"] == 0
    assert probed["warmup_s"] - screen["warmup_s"] == pytest.approx(   # a step past each
        probes * rule.probe_s(step_s, settings.window_s), abs=probes * step_s)
    # two windows judge the steady state themselves: no probe, none priced
    assert trial(windows=2)["steady_probes"] == 0
    assert rule.least_steady_probes(step_s, settings.window_s, windows=2, warmup_steps=1,
                                    max_probes=6, cap_left_s=4 * settings.window_s) == 0


def test_windows_of_whole_long_steps_drop_nothing_and_judge_no_steady_state(regression_data):
    """With one warm-up step nothing says how long a step is before the windows; windows of one
    or two steps of half a window or more (ddpm's batch 185-256 on 2 CPU cores) are too few to
    tell a transient from a step's own spread, and dropping one repeats a multi-second step:
    none is dropped (a tolerance of 0 would find every window unsteady), steady_state null."""
    from tests.fake_workloads import paced
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.06, warmup_steps=1, breakdown_steps=0,
                             steady_tolerance=0.0, max_steady_probes=3, max_warmup_s=5.0)
    reports = []
    result = run_trial(paced, Knobs(batch_size=20), settings, report=reports.append)
    assert result["status"] == "ok", result.get("error")
    assert result["step_time_ms_p50"] >= 500 * settings.window_s     # long steps, as built
    assert result["steady_probes"] == 0 and result["steady_state"] is None
    assert result["windows"] == 3
    running = [r for r in reports if r["status"] == "running"]
    assert len(running) == 3 and not any(r["window_settling"] for r in running)


def test_the_steady_state_is_judged_from_the_windows_and_a_transient_window_is_dropped(
        regression_data, step_clock):
    """No probes before the windows; a first window slower than the others by more than
    ``steady_tolerance`` is warm-up, dropped (its time counted in ``warmup_s``, not
    ``measured_s``) and one more measured, so the kept windows are the steady ones. The
    trial runs on a clock that moves only with its steps, so the transient is exactly 6x
    slower whatever else the machine is doing."""
    from dataclasses import replace
    clock = step_clock
    transient = _ClockedTransient(clock)
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.15, warmup_steps=1, breakdown_steps=0,
                             steady_tolerance=0.35, max_warmup_s=2.0)
    reports = []
    result = run_trial(transient, Knobs(batch_size=8), settings, report=reports.append)
    assert result["status"] == "ok", result.get("error")
    assert result["steady_state"] is True and result["steady_probes"] >= 1
    assert result["windows"] == 3                          # three kept, the transient dropped
    windows = [r["window_samples_per_sec"] for r in reports if r["status"] == "running"]
    assert len(windows) == 3 + result["steady_probes"]     # every window was reported
    assert windows[0] < 0.5 * result["samples_per_sec"]    # the slow one is not in the median
    running = [r for r in reports if r["status"] == "running"]   # what early stopping reads
    assert [r["window_settling"] for r in running[:3]] == [True, True, False]
    assert [r["windows_dropped"] for r in running] == [0, 0, 0] + list(
        range(1, result["steady_probes"] + 1))
    assert not set(WINDOW_REPORT_KEYS) & set(result)         # no leaderboard column
    dropped_s = result["warmup_s"] - result["first_step_s"]
    assert dropped_s >= result["steady_probes"] * settings.window_s
    assert result["measured_s"] < 3 * settings.window_s + 0.2

    # Caps: one dropped window at most (a tolerance of 0 finds every window unsteady), or a
    # warm-up cap that holds no more window: measured anyway, recorded not steady; 0 probes
    # turns the judgement off.
    def trial(**changes):
        return run_trial(_ClockedTransient(clock), Knobs(batch_size=8),
                         replace(settings, **changes))
    capped = trial(max_steady_probes=1, steady_tolerance=0.0)
    assert capped["status"] == "ok" and capped["steady_probes"] == 1
    assert capped["steady_state"] is False and capped["windows"] == 3
    timed = trial(max_warmup_s=0.1)
    assert timed["status"] == "ok" and timed["steady_probes"] == 0
    assert timed["steady_state"] is False and timed["windows"] == 3
    off = trial(max_steady_probes=0)
    assert off["steady_probes"] == 0 and off["steady_state"] is None


class _ClockedTransient(Regression):
    """``tests.fake_workloads.Transient`` on ``clock``: after the first step, ``SLOW_STEPS``
    steps of ``SLOW_S``, then steps of ``FAST_S``, each moving the clock by exactly that."""
    name = "fake-clocked-transient"
    SLOW_STEPS, SLOW_S, FAST_S = 5, 0.03, 0.005

    def __init__(self, clock: "StepClock"):
        self.clock = clock

    def training_step(self, model, batch):
        step = model.__dict__.setdefault("_steps", 0)
        model.__dict__["_steps"] = step + 1
        self.clock.now += self.SLOW_S if 1 <= step <= self.SLOW_STEPS else self.FAST_S
        return super().training_step(model, batch)


class _PacedStepper:
    """Steps of 10 ms on ``clock``, each of ``rates[i]`` samples in window i (10 steps to a
    0.095-s window): window i runs at 100 x ``rates[i]`` samples/sec exactly."""
    def __init__(self, clock: StepClock, rates: list[float]):
        self.clock, self.rates, self.steps = clock, rates, 0

    def step(self, timer=None) -> int:
        rate = self.rates[min(self.steps // 10, len(self.rates) - 1)]
        self.steps += 1
        self.clock.now += 0.01
        if timer is not None:
            timer("forward")                         # the whole step, as one phase
        return rate

    def loss_scale(self):
        return None


@pytest.mark.parametrize("rates, dropped", [
    ([50, 70, 85, 100, 100, 100, 100], 3),    # workers starting: slower, then less so
    ([160, 130, 100, 100, 100, 100, 100], 2),  # a prefetched queue draining: faster
    ([80, 120, 100, 100, 100, 100, 100], 1),   # slow, then fast: the machine's noise
    ([120, 80, 100, 100, 100, 100, 100], 1),   # fast, then slow
], ids=["slow-transient", "fast-transient", "slow-then-fast", "fast-then-slow"])
def test_windows_dropped_as_warm_up_lie_on_one_side_of_the_steady_ones(
        regression_data, monkeypatch, rates, dropped):
    """A transient lies on one side of the steady windows, however many windows it lasts:
    all of them are dropped. A window beyond the tolerance on the other side from the one
    dropped before it is noise, not the transient going on: the windows are kept from there
    (on a noisy 2-core VM the rule without it dropped 15 windows from 15 sequences of 8
    where this one dropped 11)."""
    from tuner.trial import harness
    clock = StepClock()
    monkeypatch.setattr(harness, "time", clock)
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.095, steady_tolerance=0.10,
                             max_steady_probes=6)
    kept, gone = harness._windows(_PacedStepper(clock, rates), torch.device("cpu"), settings,
                                  lambda w: None, lambda ms: 0.0, settle_s=10.0)
    assert [round(w.samples_per_sec / 100) for w in gone] == rates[:dropped]
    assert [round(w.samples_per_sec / 100) for w in kept] == rates[dropped:dropped + 3]


def test_no_breakdown_step_is_started_that_would_end_past_the_deadline(regression_data,
                                                                        monkeypatch):
    """On CUDA the breakdown times synchronised steps after the windows: three steps of the
    windows' slowest (here 10 ms) must end before the run's deadline, or none is run."""
    from tuner.trial import harness
    from tuner.trial.measure import Window
    clock = StepClock()
    monkeypatch.setattr(harness, "time", clock)
    windows = [Window(steps=10, samples=100, seconds=0.1)] * 3
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.095, breakdown_steps=3)

    def breakdown(left_s: float) -> int:
        stepper = _PacedStepper(clock, [100])
        deadline = replace(settings, deadline_unix_s=clock.time() + left_s)
        harness._breakdown_after(stepper, torch.device("cpu"), deadline, windows, None)
        return stepper.steps
    assert breakdown(1.0) == 3
    assert breakdown(0.025) == 0                     # 3 x 10 ms would end past it
    assert harness._breakdown_after(_PacedStepper(clock, [100]), torch.device("cpu"),
                                    settings, windows, None)["breakdown_step_ms"] > 0


def test_a_trial_stopped_in_the_window_after_a_drop_is_recorded_without_the_dropped_one(
        regression_data, monkeypatch, step_clock):
    """The time budget stops the trial in the window measured in place of a dropped one: the
    row holds the two windows kept (not the transient, nor 'after 3 of 3 windows'), the
    dropped window's time in ``warmup_s``. On the step clock: the first window holds the
    transient's slow steps whatever the machine's load, so it is the one dropped."""
    from tuner.trial import harness
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.2, warmup_steps=1, breakdown_steps=0,
                             steady_tolerance=0.0, max_steady_probes=1, max_warmup_s=5.0)

    def deadline_in_window_4(settings, where):  # the budget runs out in the 4th window
        if where == "window 4":
            raise harness.DeadlineReached(where)
    monkeypatch.setattr(harness, "_check_deadline", deadline_in_window_4)
    reports = []
    # A tolerance of 0 finds every first window unsteady: one is dropped, one measured after.
    row = run_trial(_ClockedTransient(step_clock), Knobs(batch_size=8), settings,
                    report=reports.append)
    assert row["status"] == "timeout", row["error"]
    assert "during window 4, after 2 of 3 windows" in row["error"]
    running = [r["window_samples_per_sec"] for r in reports if r["status"] == "running"]
    assert len(running) == 3                        # the 4th window never finished
    assert running[0] < running[1] == pytest.approx(running[2])  # the transient, then steady
    assert row["windows"] == 2 and row["steady_probes"] == 1
    assert row["samples_per_sec"] == pytest.approx((running[1] + running[2]) / 2)
    assert row["warmup_s"] == pytest.approx(row["first_step_s"] + settings.window_s, abs=0.01)
    assert row["measured_s"] == pytest.approx(2 * settings.window_s, abs=0.01)


def test_one_warm_up_step_of_one_time_costs_does_not_make_the_steps_long(regression_data,
                                                                          step_clock):
    """With one warm-up step (the tiny scale's default) the first step, one-time costs and all,
    is no measure of a step: a first step of 0.4 s (worker start-up, lazy initialisation)
    before steps of 5-30 ms must not be read as if a window held one step, its transient
    kept. The windows judge the steady state."""
    clock = step_clock

    class SlowStart(_ClockedTransient):
        def training_step(self, model, batch):
            if model.__dict__.get("_steps", 0) == 0:
                self.clock.now += 0.4                    # worker start-up, lazy init
            return super().training_step(model, batch)

    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.15, warmup_steps=1, breakdown_steps=0,
                             steady_tolerance=0.35, max_warmup_s=2.0)
    result = run_trial(SlowStart(clock), Knobs(batch_size=8), settings)
    assert result["status"] == "ok", result.get("error")
    assert result["first_step_s"] >= 0.4 > settings.window_s / 2
    assert result["steady_state"] is True and result["steady_probes"] >= 1   # judged, dropped
    assert result["windows"] == 3


def test_a_steady_trial_runs_no_probe_before_its_windows(regression_data, step_clock):
    """Nothing is measured twice when the windows agree: the warm-up is the warm-up steps."""
    clock = step_clock

    class Steady(_ClockedTransient):
        SLOW_STEPS = 0                                   # every step 5 ms on the clock

    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.2, warmup_steps=1, breakdown_steps=0,
                             steady_tolerance=0.1)
    result = run_trial(Steady(clock), Knobs(batch_size=16), settings)
    assert result["status"] == "ok", result.get("error")
    assert result["steady_state"] is True and result["steady_probes"] == 0
    assert result["warmup_s"] == pytest.approx(result["first_step_s"])  # no probe


def test_a_warm_up_step_that_would_end_past_the_cap_is_not_started(settings, step_clock):
    """Without torch.compile the last step predicts the next: a warm-up step that would end
    past ``max_warmup_s`` is not started (ddpm's batch 256 on 2 CPU cores repeated a 19-67 s
    step as warm-up). Before, the cap was only checked before each step, so a second 0.3 s
    step started at 0.3 s of a 0.5 s cap. Steps of 0.3 s on the step clock: a loaded machine
    cannot stretch the first one past the cap."""
    from dataclasses import replace

    class Steps(Regression):
        def training_step(self, model, batch):
            step_clock.now += 0.3
            return super().training_step(model, batch)

    result = run_trial(Steps(), Knobs(batch_size=16), replace(settings, warmup_steps=5,
                                                              max_warmup_s=0.5))
    assert result["status"] == "ok", result.get("error")
    assert result["first_step_s"] == pytest.approx(0.3)
    after_first_s = result["warmup_s"] - result["first_step_s"]
    assert after_first_s == pytest.approx(0.3)                 # one step, not two
    assert result["windows"] == settings.windows


def test_no_window_begins_past_the_deadline(regression_data):
    """The deadline passes while a window is reported: the next window runs no step (it ran
    one, as long as a step is, for a window that is dropped anyway)."""
    import time

    from tests.fake_workloads import Regression
    steps_at: list[float] = []

    class Logged(Regression):
        name = "fake-logged"

        def training_step(self, model, batch):
            steps_at.append(time.time())
            return super().training_step(model, batch)

    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=3, window_s=0.1, warmup_steps=1, breakdown_steps=0,
                             deadline_unix_s=time.time() + 600)
    passed_at: list[float] = []

    def report(result):
        if result["status"] == "running" and not passed_at:  # after window 1: time is up
            passed_at.append(time.time())
            object.__setattr__(settings, "deadline_unix_s", passed_at[0])  # frozen dataclass
    row = run_trial(Logged(), Knobs(batch_size=8), settings, report=report)
    assert row["status"] == "timeout" and "during window 2, after 1 of 3" in row["error"]
    assert row["windows"] == 1 and row["samples_per_sec"] > 0
    assert steps_at and max(steps_at) < passed_at[0]           # no step past the deadline


@pytest.fixture
def gpu_machine(monkeypatch) -> list:
    """torch sees a GPU; initialising CUDA is recorded (the calls' stacks) instead of done."""
    inits = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: inits.append(traceback.format_stack()))
    return inits


def test_a_cpu_trial_on_a_machine_with_a_gpu_initialises_no_cuda(settings, gpu_machine,
                                                                   monkeypatch):
    """A ``--device cpu`` trial must not initialise CUDA: a context costs seconds per process
    and memory on the card. ``free_device_memory`` reset the current device's peak after
    every trial, which initialises CUDA (one of the two reasons, read from the code, why the
    README's ``pytest`` ran 2.7x slower per test on the H100 machine, its trials on CPU).
    torch's own optimizer check (it asks the current CUDA stream at the first step) is
    answered as in a trial process that hides the GPUs (the test after this one): torch 2.14
    asks ``torch.accelerator``; torch 2.11 (the GPU machine's) asks
    ``torch.cuda.is_current_stream_capturing``, which reaches the driver."""
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    result = run_trial(regression, Knobs(batch_size=16, num_workers=1), settings)
    assert result["status"] == "ok", result.get("error")
    assert gpu_machine == []


@pytest.mark.parametrize("device, initialised, hidden", [
    ("cpu", False, True), ("cuda", False, False), ("cpu", True, False)])
def test_a_cpu_trial_process_hides_the_gpus_before_cuda_is_initialised(
        monkeypatch, device, initialised, hidden):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
    assert keep_cpu_trial_off_the_gpus(device) is hidden
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ("" if hidden else "0,1")


def test_device_memory_is_freed_only_where_cuda_was_initialised(gpu_machine, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: calls.append("reset"))
    free_device_memory()                                    # CUDA never initialised here
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    free_device_memory()                                    # a CUDA trial's process
    assert calls == ["empty_cache", "reset"]
    assert gpu_machine == []
