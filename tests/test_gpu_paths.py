"""The GPU-only memory and telemetry code, on CPU: NVML and the CUDA allocator replaced by fakes
that record what they were asked. What this checks is the arithmetic and the NVML calls (which
device, which process, which units); that the figures match a real card needs a GPU run
(docs/benchmarks.md)."""

from __future__ import annotations

import os
import sys
import time
import types

import pytest
import torch

from tuner import settings
from tuner.trial import apply, measure

MB = 2**20
H200_MB = 143_771.0          # torch's total_memory of an H200, MB


class FakeNvml(types.ModuleType):
    """pynvml with one handle per physical index, a process table and fixed readings."""

    def __init__(self, processes=(), util=80, power_mw=300_000, fail_init=False):
        super().__init__("pynvml")
        self.processes = list(processes)
        self.util, self.power_mw, self.fail_init = util, power_mw, fail_init
        self.handles: list[int] = []
        self.inits = self.shutdowns = 0

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        self.handles.append(index)
        return ("handle", index)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self.processes

    def nvmlDeviceGetUtilizationRates(self, handle):
        return types.SimpleNamespace(gpu=self.util)

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.power_mw


@pytest.fixture
def nvml(monkeypatch):
    def install(**kwargs) -> FakeNvml:
        fake = FakeNvml(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake
    return install


def _proc(pid: int, used_mb: float | None):
    return types.SimpleNamespace(pid=pid, usedGpuMemory=None if used_mb is None else used_mb * MB)


# ------------------------------------------------------------------- --max-memory arithmetic

@pytest.mark.parametrize("max_memory, expected", [
    ("0.5", 0.5 * H200_MB),                 # a fraction of the card
    ("12GB", settings.parse_memory("12GB")[1]),
    ("24GiB", 24 * 1024.0),
    ("500GB", H200_MB),                     # larger than the card: the card
    (None, H200_MB),                        # no limit: the card
])
def test_device_limit_resolves_fraction_and_size_against_the_card(max_memory, expected):
    limit = settings.MemoryLimit.parse(max_memory) if max_memory else None
    assert settings.device_limit_mb(limit, H200_MB) == pytest.approx(expected)


def test_device_limit_is_none_without_a_device_and_rejects_garbage():
    assert settings.device_limit_mb(settings.MemoryLimit.parse("12GB"), None) is None
    with pytest.raises(ValueError, match="12 parsecs"):
        settings.MemoryLimit.parse("12 parsecs")


def _strict_fraction_setter(calls):
    """torch's set_per_process_memory_fraction as it behaves on a real card: an index or an
    indexed device, a float in [0, 1]; torch.device('cuda') without an index is rejected with
    ValueError, as torch does."""
    def set_fraction(fraction, device=None):
        if isinstance(device, torch.device):
            if device.index is None:
                raise ValueError("Expected a torch.device with a specified index or an integer, "
                                 f"but got:{device}")
            device = device.index
        if not isinstance(fraction, float) or not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}")
        calls.append((fraction, device))
    return set_fraction


@pytest.mark.parametrize("device, index", [(torch.device("cuda", 0), 0),
                                           (torch.device("cuda"), 3)])  # a trial's "cuda"
def test_a_size_below_the_card_is_enforced_with_the_per_process_fraction(monkeypatch, device,
                                                                         index):
    calls = []
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(total_memory=H200_MB * MB))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        _strict_fraction_setter(calls))
    cuda0 = device
    limit = apply.apply_device_limit(settings.MemoryLimit.parse("24GiB"), cuda0)
    assert limit == pytest.approx(24 * 1024.0)
    assert calls == [(pytest.approx(24 * 1024.0 / H200_MB), index)]   # an H200 acts as 24 GiB
    apply.release_device_limit(limit, cuda0)
    assert calls[-1] == (1.0, index)
    calls.clear()
    assert apply.apply_device_limit(settings.MemoryLimit.parse("12GB"), torch.device("cpu")) is None
    assert apply.apply_device_limit(None, cuda0) is None
    assert calls == []                                                  # nothing enforced


# ------------------------------------------------------------ peak device memory with context

def test_peak_device_memory_adds_the_cuda_context_nvml_sees(monkeypatch):
    cuda0 = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 9_000 * MB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 6_000 * MB)
    # NVML charges the process 6,520 MB now: 6,000 reserved + a 520 MB context.
    monkeypatch.setattr(measure, "cuda_process_memory_mb", lambda device: 6_520.0)
    assert measure.peak_device_memory_mb(cuda0) == pytest.approx(9_000 + 520)
    # Without NVML the allocator's peak alone (never less than it, never 0).
    monkeypatch.setattr(measure, "cuda_process_memory_mb", lambda device: None)
    assert measure.peak_device_memory_mb(cuda0) == pytest.approx(9_000)
    assert measure.peak_device_memory_mb(torch.device("cpu")) is None


@pytest.mark.parametrize("processes, expected", [
    ([_proc(os.getpid() + 1, 6_700)], 9_000 + 700),   # listed under a host PID: this one
    ([], 9_000 + 700),                     # lists none (some container drivers): this one alone
    ([_proc(os.getpid() + 1, 6_700), _proc(os.getpid() + 2, 30_000)], 9_000),  # others: allocator
])
def test_without_this_pid_in_nvml_the_context_comes_from_the_card_when_alone(
        nvml, monkeypatch, processes, expected):
    nvml(processes=processes)
    cuda0 = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 9_000 * MB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 6_000 * MB)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: ((80_000 - 6_700) * MB,
                                                                    80_000 * MB))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert measure.peak_device_memory_mb(cuda0) == pytest.approx(expected)


def test_nvml_process_memory_is_this_process_on_the_physical_device(nvml, monkeypatch):
    fake = nvml(processes=[_proc(os.getpid() + 1, 50_000), _proc(os.getpid(), 6_520)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert measure.cuda_process_memory_mb(torch.device("cuda", 1)) == pytest.approx(6_520)
    assert fake.handles == [5]                       # cuda:1 is physical GPU 5 here
    assert fake.inits == fake.shutdowns == 1


@pytest.mark.parametrize("fake_kwargs", [
    {"processes": [_proc(1, 50_000)]},              # this process is not listed
    {"processes": [_proc(os.getpid(), None)]},      # listed, usage not available
    {"fail_init": True},                            # no NVML library
])
def test_nvml_process_memory_is_none_when_unknown(nvml, monkeypatch, fake_kwargs):
    nvml(**fake_kwargs)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert measure.cuda_process_memory_mb(torch.device("cuda", 0)) is None


@pytest.mark.parametrize("processes, others", [
    ([_proc(os.getpid(), 6_520)], 0),                                   # this process alone
    ([_proc(os.getpid(), 6_520), _proc(os.getpid() + 1, 30_000)], 1),   # and one other
    ([_proc(os.getpid() + 7, 6_520)], 0),          # a container: this one under a host PID
    ([_proc(os.getpid() + 7, 6_520), _proc(os.getpid() + 8, 30_000)], 1),
    ([], 0),                                       # a driver that lists none
])
def test_other_processes_on_the_card_do_not_count_this_one_under_a_host_pid(
        nvml, monkeypatch, processes, others):
    nvml(processes=processes)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert measure._other_gpu_processes(torch.device("cuda", 0)) == others


# ---------------------------------------------------------------------- utilisation and power

def test_gpu_telemetry_averages_utilisation_and_power_in_watts(nvml, monkeypatch):
    fake = nvml(util=80, power_mw=312_500)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with measure.GpuTelemetry(torch.device("cuda", 2), interval_s=0.005) as telemetry:
        deadline = time.monotonic() + 5
        while not telemetry._samples and time.monotonic() < deadline:
            time.sleep(0.01)
    assert fake.handles == [2]
    assert telemetry.util_pct == pytest.approx(80.0)
    assert telemetry.power_w == pytest.approx(312.5)             # mW -> W
    assert fake.shutdowns == 1


def test_gpu_telemetry_stays_null_on_cpu_and_without_nvml(nvml):
    fake = nvml(fail_init=True)
    for device in (torch.device("cpu"), torch.device("cuda", 0)):
        with measure.GpuTelemetry(device, interval_s=0.005) as telemetry:
            time.sleep(0.02)
        assert telemetry.util_pct is None and telemetry.power_w is None
    assert fake.inits == 0
