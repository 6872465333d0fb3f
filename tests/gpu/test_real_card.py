"""GPU checks on a real card: ``pytest -m gpu`` (needs CUDA; skipped with the reason without).

Each test is a CUDA path the CPU tests can only fake: the memory limit through the allocator's
per-process fraction, real ``OutOfMemoryError`` followed by a fitting trial in the same process,
AMP fp16/bf16, channels_last, compile, flags restored, NVML telemetry.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.fake_workloads import Regression
from tuner.knobs import Knobs
from tuner.probe import probe_batch_limit
from tuner.settings import MemoryLimit, TrialSettings
from tuner.space import IntRange, Space
from tuner.trial.harness import run_trial

NO_CUDA = ("needs a CUDA device (tests/conftest.py hides the GPUs unless the -m expression "
           "names gpu or TUNER_TEST_KEEP_CUDA=1)")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]

GIB = 2**30


class GibPerSample(Regression):
    """The regression MLP, plus 1 GiB of device memory per sample during the step: a batch of
    B needs B GiB (plus the CUDA context, ~0.5 GiB), so out-of-memory under a limit is real
    and predictable."""
    name = "gpu-gib-per-sample"

    def training_step(self, model, batch):
        x, y = batch
        ballast = torch.ones(x.shape[0], GIB // 4, device=x.device)  # (B, 2**28) float32
        return super().training_step(model, batch) + 0.0 * ballast.sum()


gib = GibPerSample()


@pytest.fixture
def settings(regression_data) -> TrialSettings:
    return TrialSettings(scale="tiny", device="cuda", data_dir=str(regression_data), windows=2,
                         window_s=0.2, warmup_steps=2)


def test_max_memory_turns_a_batch_over_the_limit_into_oom_and_the_next_trial_fits(settings):
    """--max-memory on a real card (``set_per_process_memory_fraction`` given an index): a big
    card behaves like the smaller one."""
    limited = replace(settings, max_memory=MemoryLimit.parse("3GB"))      # 2.79 GiB
    over = run_trial(gib, Knobs(batch_size=4), limited)                  # 4 GiB + grads
    assert over["status"] in ("oom", "over_limit"), over.get("error")
    assert over["memory_exceeded"] == "device"
    fits = run_trial(gib, Knobs(batch_size=1), limited)                  # same process
    assert fits["status"] == "ok", fits.get("error")
    assert fits["max_memory_mb"] == pytest.approx(3e9 / 2**20)
    assert fits["peak_device_memory_mb"] <= fits["max_memory_mb"]
    assert torch.cuda.memory_allocated() < GIB                             # freed after the oom


def test_max_memory_12gb_makes_a_24gib_batch_fail(settings):
    limited = replace(settings, max_memory=MemoryLimit.parse("12GB"))
    result = run_trial(gib, Knobs(batch_size=24), limited)
    assert result["status"] in ("oom", "over_limit") and result["memory_exceeded"] == "device"


def test_the_memory_probe_under_a_limit_on_a_real_card(settings):
    """The limit is set from this card's own batch-1 peak (CUDA context, cuBLAS workspace and
    1 GiB of ballast: 2,824 MiB on an H200 with torch 2.11), plus 1.5 GiB: batch 2 (one GiB
    more) fits, batch 3 (two more) does not, whatever the context costs on this card."""
    space = Space("gpu-test", {"batch_size": IntRange(1, 8)}, {"num_workers": 0})
    one = run_trial(gib, Knobs(batch_size=1), settings)
    assert one["status"] == "ok", one.get("error")
    limit_mib = one["peak_device_memory_mb"] + 1536
    limited = replace(settings, max_memory=MemoryLimit.parse(f"{limit_mib:.0f}MiB"))
    found = probe_batch_limit(space, Knobs(batch_size=1), limited,
                              lambda knobs, s: run_trial(gib, knobs, s))
    assert found.max_batch == 2 and found.first_failure == 3, (limit_mib, found.probes)


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_amp_and_channels_last_train_on_the_card(regression_data, amp):
    from tuner.workload_loader import resolve
    classifier = resolve("classifier")
    data = classifier.prepare_default_data(regression_data.parent / "classifier", "tiny")
    settings = TrialSettings(scale="tiny", device="cuda", data_dir=str(data), windows=2,
                             window_s=0.2, warmup_steps=3)
    result = run_trial(classifier, Knobs(batch_size=16, amp=amp, channels_last=True), settings)
    assert result["status"] == "ok", result.get("error")
    assert result["amp"] == amp and result["clamped"] is None
    assert result["samples_per_sec"] > 0


def test_compile_trains_and_flags_are_restored(settings):
    before = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.allow_tf32)
    result = run_trial(gib, Knobs(batch_size=1, compile="default", cudnn_benchmark=not before[0],
                                  tf32=not before[1]), settings)
    assert result["status"] == "ok", result.get("error")
    assert result["warmup_s"] > 0
    # compile's time is recorded apart, inside the warm-up, never in the measured windows
    assert 0 < result["compile_s"] <= result["first_step_s"] <= result["warmup_s"]
    after = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    assert after == before


def test_nvml_telemetry_and_context_memory_are_read_from_the_card(settings):
    result = run_trial(gib, Knobs(batch_size=2), replace(settings, window_s=1.0))
    assert result["status"] == "ok", result.get("error")
    assert result["gpu_util_pct"] is not None and result["gpu_util_pct"] > 0
    assert result["gpu_power_w"] is not None and result["gpu_power_w"] > 10
    # peak = allocator's peak reserved (batch 2: at least its 2 GiB of ballast) + the CUDA
    # context NVML attributes to this process (the allocator's own peak is reset when a trial
    # ends, so it cannot be read here)
    assert result["peak_device_memory_mb"] > 2 * 1024
    assert result["gpu_memory_mb"] > 10_000


CPU_TRIAL_SCRIPT = """
import sys
import torch
from tuner.trial.apply import keep_cpu_trial_off_the_gpus
if sys.argv[1] == "hide":
    assert keep_cpu_trial_off_the_gpus("cpu")
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.AdamW(model.parameters())
model(torch.randn(8, 16)).sum().backward()
optimizer.step()
print(torch.cuda.is_initialized())
"""


def _optimizer_step_initialises_cuda() -> bool:
    """Whether this torch's optimizers initialise CUDA at their first step on a machine with a
    GPU: torch 2.14 asks ``torch.accelerator.current_stream()`` whether it is capturing, which
    initialises CUDA; torch 2.11 (the GPU machine's) asks
    ``torch.cuda.is_current_stream_capturing()``, which does not ("returns False without
    initializing the context")."""
    import inspect
    check = torch.optim.Optimizer._accelerator_graph_capture_health_check
    return "accelerator.current_stream()" in inspect.getsource(check)


@pytest.mark.parametrize("mode", ["hide", "leave"])
def test_a_cpu_trial_process_holds_no_cuda_context(mode):
    """A CPU training step on a machine with a GPU initialises CUDA in torch itself (its
    optimizers' graph-capture check, in the torch versions ``_optimizer_step_initialises_cuda``
    names), a context per trial process; a CPU trial's process prevents it: ``hide`` never
    holds a context; ``leave`` shows what this torch does without the hiding."""
    import subprocess
    import sys
    initialised = "False" if mode == "hide" else str(_optimizer_step_initialises_cuda())
    out = subprocess.run([sys.executable, "-c", CPU_TRIAL_SCRIPT, mode], capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    assert out[-1] == initialised
