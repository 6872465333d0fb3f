"""The simulated H200 (``tests.simulated_gpu``, ``tests.simulated_h200``): its own contract,
driven through the product's own knob application (``tuner.trial.apply``) and failure
classification, trial harness and planner, all in this process (whole runs on it are
benches: ``bench/simulated_h200.py`` counts a 300-s run's screens, ``bench/simulated_builtins.py``
runs each simulated built-in at its acceptance budget; each takes a minute or more of the
suite's 12).

The contract tests read what the card charged (``simulated_gpu.STATE.charges``, the model's
``sim_last_step``), not the wall clock; their one-off costs are slept at 1 % of the measured
seconds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests import simulated_gpu
from tests.simulated_h200 import (
    COMPILE_S,
    CUDNN_AUTOTUNE_S,
    FIRST_STEP_S,
    SimulatedH200,
    applied_precision,
)
from tuner.knobs import Knobs
from tuner.option_checks import local_resources, make_plan
from tuner.settings import MemoryLimit, RunOptions, TrialSettings
from tuner.status import Status
from tuner.trial.apply import (
    apply_device_limit,
    build_training,
    move_batch,
    release_device_limit,
    set_global_flags,
)
from tuner.trial.failures import classify, free_device_memory
from tuner.trial.harness import run_trial

CUDA = torch.device("cuda")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def card(monkeypatch):
    """The simulated card in this process, one-offs slept at 1 %; put back afterwards."""
    monkeypatch.setenv(simulated_gpu.SCALE_ENV, "0.01")
    monkeypatch.setenv(simulated_gpu.RAY_RESOURCES_ENV, "{}")  # install() must not set it
    simulated_gpu.install()
    yield simulated_gpu
    simulated_gpu.uninstall()


def _step(workload: SimulatedH200, knobs: Knobs) -> dict:
    """One training step of ``knobs`` as the harness applies them (flags, model, autocast,
    batch moved to the card); returns what the card modelled for it."""
    restore = set_global_flags(knobs, CUDA)
    try:
        training = build_training(workload, knobs, "full", CUDA)
        image = torch.randint(0, 256, (knobs.batch_size, 2, 4, 4), dtype=torch.uint8)
        batch = move_batch((image, torch.rand(knobs.batch_size)), CUDA, knobs)
        with training.autocast():
            workload.training_step(training.step_model, batch)
        return training.model.sim_last_step
    finally:
        restore()


def test_the_card_answers_as_an_h200_and_keeps_tensors_on_the_host(card):
    assert torch.cuda.is_available() and torch.cuda.device_count() == 1
    assert torch.cuda.get_device_name(0) == "NVIDIA H200"
    assert round(torch.cuda.get_device_properties(0).total_memory / 2**30) == 140
    assert torch.zeros(3).to(CUDA).device.type == "cpu"
    card.uninstall()
    assert not torch.cuda.is_available()  # put back: the rest of the suite sees no card
    card.install()


def test_the_device_hook_gives_every_process_that_imports_tuner_the_card(tmp_path):
    """``TUNER_DEVICE_HOOK`` (what the bench sets, and Ray's workers inherit) installs the card
    when ``tuner`` is imported; unset, importing tuner stays as light as before (no torch)."""
    code = (
        "import tuner, torch; print(torch.cuda.is_available() and torch.cuda.get_device_name(0))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    hooked = subprocess.run([sys.executable, "-c", code],
                            env={**env, **simulated_gpu.hook_environment()},
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert hooked.stdout.strip() == "NVIDIA H200", hooked.stderr[-2000:]
    env.pop(simulated_gpu.HOOK_ENV, None)  # unset: importing tuner loads nothing more
    plain = subprocess.run(
        [sys.executable, "-c", "import sys, tuner; print('torch' in sys.modules)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.stdout.strip() == "False", plain.stderr[-2000:]


def test_cudnn_benchmark_pays_its_autotuning_once_per_new_shape(card):
    """cuDNN's autotuning at a shape new to the process with cudnn_benchmark on; the same
    shape later (a new model) pays the first step alone, as does a new shape with it off."""
    w = SimulatedH200()
    on = Knobs(batch_size=32, amp="fp16", cudnn_benchmark=True)
    assert _step(w, on)["one_off_s"] == pytest.approx(FIRST_STEP_S + CUDNN_AUTOTUNE_S)
    assert _step(w, on)["one_off_s"] == pytest.approx(FIRST_STEP_S)
    assert _step(w, on.replace(batch_size=64))["one_off_s"] == pytest.approx(
        FIRST_STEP_S + CUDNN_AUTOTUNE_S)
    assert _step(w, on.replace(batch_size=128, cudnn_benchmark=False))["one_off_s"] == \
        pytest.approx(FIRST_STEP_S)
    assert CUDNN_AUTOTUNE_S == pytest.approx(12.19 - 2.16, abs=0.05)  # the measured pair


def test_memory_past_the_max_memory_cap_is_a_cuda_out_of_memory(card):
    """``--max-memory 12GB`` through the harness's own limit: the largest batch that fits runs,
    one more sample fails with CUDA's error, which the harness classifies as device OOM."""
    limit_mb = apply_device_limit(MemoryLimit.parse("12GB"), CUDA)
    try:
        w = SimulatedH200(memory_limit_mb=limit_mb)
        top = w.max_batch_at("bf16")
        assert 300 < top < 652  # 990 MiB + 26.5 MiB a sample under 11,444 MiB
        knobs = Knobs(batch_size=top, amp="bf16")
        _step(w, knobs)
        assert torch.cuda.max_memory_allocated() / 2**20 == pytest.approx(
            w.memory_mb_at(top, "bf16"))
        with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory") as caught:
            _step(w, knobs.replace(batch_size=top + 1))
        status, memory, _ = classify(caught.value, CUDA)
        assert (status, memory) == (Status.OOM, "device")
    finally:
        release_device_limit(limit_mb, CUDA)
    _step(w, Knobs(batch_size=top + 1, amp="bf16"))  # the whole card: it fits again
    free_device_memory()
    assert torch.cuda.memory_allocated() == 0


def test_the_step_reads_precision_and_layout_from_what_the_harness_applied(card):
    """bf16 autocast and channels_last, applied by ``build_training``, shorten a step above
    the knee; fp32 doubles its memory; below the knee the flat 45 ms holds."""
    w = SimulatedH200()
    fast = _step(w, Knobs(batch_size=512, amp="bf16", channels_last=True))
    plain = _step(w, Knobs(batch_size=512))
    assert (fast["precision"], fast["channels_last"]) == ("bf16", True)
    assert (plain["precision"], plain["channels_last"]) == ("fp32", False)
    assert fast["step_s"] == pytest.approx(0.189e-3 * 512)
    assert plain["step_s"] > 2 * fast["step_s"]
    assert _step(w, Knobs(batch_size=8, amp="fp16"))["step_s"] == pytest.approx(0.045)
    assert w.memory_mb_at(8, "fp32") > w.memory_mb_at(8, "bf16")
    with torch.autocast("cuda", dtype=torch.float16):
        assert applied_precision() == "fp16"


def test_a_compiled_model_pays_its_compile_at_the_first_step_then_runs_faster(card):
    """``build_training`` compiles as the knob says; the card charges the compile once, at
    the model's first step, and the compiled step's compute is 1/1.65 of eager's."""
    w = SimulatedH200()
    eager = _step(w, Knobs(batch_size=512, amp="bf16"))
    compiled = _step(w, Knobs(batch_size=512, amp="bf16", compile="default"))
    assert compiled["compile"] == "default"
    assert compiled["one_off_s"] == pytest.approx(FIRST_STEP_S + COMPILE_S["default"])
    assert compiled["step_s"] == pytest.approx(eager["step_s"] / 1.65)


def test_a_step_after_a_synchronize_takes_its_full_time(card):
    """Time the host spends between windows is not device time banked for the next window:
    after ``torch.cuda.synchronize`` a step sleeps its whole modelled time (a lower bound on
    the wall clock, which a loaded machine can only lengthen)."""
    w = SimulatedH200()
    knobs = Knobs(batch_size=512, amp="bf16", channels_last=True)
    restore = set_global_flags(knobs, CUDA)
    try:
        training = build_training(w, knobs, "full", CUDA)
        batch = move_batch((torch.zeros(512, 2, 4, 4, dtype=torch.uint8), torch.rand(512)),
                           CUDA, knobs)
        with training.autocast():
            w.training_step(training.step_model, batch)
            step_s = training.model.sim_last_step["step_s"]
            time.sleep(2 * step_s)  # the harness between two windows
            torch.cuda.synchronize(CUDA)
            started = time.perf_counter()
            w.training_step(training.step_model, batch)
            assert time.perf_counter() - started >= 0.95 * step_s
    finally:
        restore()


def test_the_model_answers_follow_the_measured_figures():
    """The machine limit is the measured eager compute ceiling's (5,304 samples/sec at batch
    652) less the device path's augmentation; doubling the recommended stops at the cap."""
    w = SimulatedH200()
    assert 4900 < w.machine_limit().samples_per_sec < 5304
    capped = SimulatedH200(memory_limit_mb=MemoryLimit.parse("12GB").resolve_mib(
        simulated_gpu.TOTAL_MB))
    assert capped.doubling_answer().knobs.batch_size == 256
    assert capped.machine_limit().knobs.batch_size == capped.max_batch_at("bf16")


def test_a_trial_on_the_card_runs_the_harness_unchanged_and_fails_oom_past_the_cap(
        card, tuner_cache):
    """``run_trial`` on ``--device cuda`` with ``--max-memory 12GB``: the row names the H200,
    its peak device memory is the model's and under the cap; one sample more is an ``oom``
    row charged to the device, as on a card."""
    w = SimulatedH200()
    settings = TrialSettings(scale="full", device="cuda", max_memory="12GB", windows=1,
                             window_s=0.3, warmup_steps=2, breakdown_steps=0,
                             max_steady_probes=0,
                             data_dir=str(w.prepare_default_data(tuner_cache, "full")))
    cap_mb = MemoryLimit.parse("12GB").resolve_mib(simulated_gpu.TOTAL_MB)
    top = SimulatedH200(memory_limit_mb=cap_mb).max_batch_at("bf16")
    knobs = Knobs(batch_size=top, data_path="device", amp="bf16", channels_last=True)
    row = run_trial(w, knobs, settings)
    assert row["status"] == "ok", row.get("error")
    assert (row["device"], row["gpu_name"]) == ("cuda", "NVIDIA H200")
    assert row["peak_device_memory_mb"] == pytest.approx(w.memory_mb_at(top, "bf16"))
    assert row["peak_device_memory_mb"] <= cap_mb
    over = run_trial(w, knobs.replace(batch_size=top + 1), settings)
    assert over["status"] == "oom" and "CUDA out of memory" in over["error"]
    assert torch.cuda.memory_allocated() == 0  # the harness freed the card after the trial


def test_the_planner_on_the_card_plans_for_a_cuda_machine(card, tmp_path, tuner_cache):
    """The product's own device resolution sees the simulated card, and its plan for a 300-s
    ddpm-like run is a CUDA plan: the memory probe on, cuDNN benchmark held off while
    screening and decided at the finalists, compile modes left out of a 300-s budget."""
    resources = local_resources("auto")
    assert (resources.device, resources.gpus) == ("cuda", 1)
    options = RunOptions(workload="tests.simulated_h200:ddpm", device="cuda",
                         time_budget_s=300, max_memory="12GB",
                         results=str(tmp_path / "results"))
    plan = make_plan(options, resources)
    assert plan.should_probe
    assert plan.screen_windows and plan.cudnn_at_finalists
    assert plan.device_space.constants["cudnn_benchmark"] is False
    assert "compile" not in plan.device_space.domains


# ------------------------------------------------------------------ the other built-ins

def test_the_simulated_builtins_follow_their_measured_figures():
    """Each built-in's references and machine limit by its cost model, against the H200's
    acceptance rows (2026-11-27) and the H100's compute-only figures (2026-11-23): chargpt's
    fp32 baseline 2,210.4, classifier299's 199.7, classifier's 994.2 samples/sec; compute-only
    limits 8,926 (chargpt), ~3,987 (headpose), ~2,220 (classifier299), 52.6 (segmentation3d)."""
    from tests.simulated_builtins import BUILTINS

    def baseline(name: str) -> float:
        w = BUILTINS[name]
        return w.samples_per_sec(w.references["baseline"].clamp("cuda")[0])

    assert baseline("chargpt") == pytest.approx(2210.4, rel=0.05)
    assert baseline("classifier299") == pytest.approx(199.7, rel=0.05)
    assert baseline("classifier") == pytest.approx(994.2, rel=0.05)
    for name, limit in (("chargpt", 8926), ("headpose", 3987), ("classifier299", 2220),
                        ("segmentation3d", 52.6)):
        assert BUILTINS[name].machine_limit().samples_per_sec == pytest.approx(limit, rel=0.05)
    assert {w.space for w in BUILTINS.values()} == {
        "chargpt", "headpose", "classifier299", "segmentation3d", "classifier"}
