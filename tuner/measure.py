"""Measurement primitives: synchronisation, window statistics, peak host and device memory.

Throughput is measured over windows of wall time bounded by device synchronisation (as in
nanoGPT's ``bench.py``): inside a window nothing synchronises, so the measurement does not
change what it measures.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass

import psutil
import torch


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (no-op on CPU, where work is synchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Window:
    """One measurement window."""
    steps: int
    """Optimizer steps completed in the window."""
    samples: int
    """Samples (micro-batch rows) processed in the window."""
    seconds: float
    """Wall time from the synchronised start to the synchronised end, s."""

    @property
    def samples_per_sec(self) -> float:
        return self.samples / self.seconds

    @property
    def step_time_ms(self) -> float:
        """Mean wall time per optimizer step in this window, ms."""
        return 1000.0 * self.seconds / self.steps


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` in [0, 1] of a non-empty list."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarise(windows: list[Window]) -> dict[str, float]:
    """Median samples/sec and its spread over windows, step time p50/p95 (ms)."""
    sps = [w.samples_per_sec for w in windows]
    steps_ms = [w.step_time_ms for w in windows]
    median = statistics.median(sps)
    return {
        "samples_per_sec": median,
        "samples_per_sec_iqr": quantile(sps, 0.75) - quantile(sps, 0.25),
        "samples_per_sec_cv": (statistics.pstdev(sps) / statistics.fmean(sps)) if len(sps) > 1 else 0.0,
        "step_time_ms_p50": quantile(steps_ms, 0.5),
        "step_time_ms_p95": quantile(steps_ms, 0.95),
        "windows": float(len(windows)),
        "measured_s": sum(w.seconds for w in windows),
    }


class HostMemorySampler:
    """Peak resident memory (RSS) of this process plus all its descendants (DataLoader
    workers), sampled on a background thread every ``interval_s`` seconds.

    RSS of forked workers counts pages shared with the parent once per process, as ``ps`` and
    the 3D report's "~7 GB RSS per worker" do; it is an upper bound of the physical memory.
    """

    def __init__(self, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = psutil.Process(os.getpid())

    def sample(self) -> int:
        total = 0
        procs = [self._proc]
        try:
            procs += self._proc.children(recursive=True)
        except psutil.Error:
            pass
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:  # a worker exited between listing and reading
                continue
        self.peak_bytes = max(self.peak_bytes, total)
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> "HostMemorySampler":
        self.sample()
        self._thread = threading.Thread(target=self._run, name="host-mem-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / 2**20


def cuda_process_memory_mb(device: torch.device) -> float | None:
    """Device memory NVML attributes to this process (allocator + CUDA context), MB; None
    where NVML or the process entry is unavailable."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            index = device.index if device.index is not None else torch.cuda.current_device()
            handle = pynvml.nvmlDeviceGetHandleByIndex(_physical_index(index))
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                    return proc.usedGpuMemory / 2**20
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML missing, driver too old, or no permission: report None, not 0
        return None
    return None


def _physical_index(index: int) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",")]
        if index < len(ids) and ids[index].isdigit():
            return int(ids[index])
    return index


def peak_device_memory_mb(device: torch.device) -> float | None:
    """Peak reserved memory of the torch allocator plus the CUDA context, MB (None on CPU).

    The context is what NVML attributes to this process beyond what the allocator reserves now.
    """
    if device.type != "cuda":
        return None
    peak_reserved = torch.cuda.max_memory_reserved(device) / 2**20
    process = cuda_process_memory_mb(device)
    context = 0.0
    if process is not None:
        context = max(0.0, process - torch.cuda.memory_reserved(device) / 2**20)
    return peak_reserved + context


class Stopwatch:
    """Monotonic seconds since construction."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start
