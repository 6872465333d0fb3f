"""Measurement primitives: synchronisation, window statistics, peak host and device memory.

Throughput is measured over windows of wall time bounded by device synchronisation (as in
nanoGPT's ``bench.py``): inside a window nothing synchronises, so the measurement does not
change what it measures.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import psutil
import torch

from tuner.errors import LimitExceeded  # noqa: F401  (re-exported)


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
    skipped: int = 0
    """Optimizer steps the fp16 GradScaler skipped in the window (inf/NaN gradients): not in
    ``steps`` or ``samples`` (a skipped step updates nothing), their time in ``seconds``."""

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
        "samples_per_sec_cv": ((statistics.pstdev(sps) / statistics.fmean(sps))
                               if len(sps) > 1 else 0.0),
        "step_time_ms_p50": quantile(steps_ms, 0.5),
        "step_time_ms_p95": quantile(steps_ms, 0.95),
        "windows": float(len(windows)),
        "measured_s": sum(w.seconds for w in windows),
        "skipped_steps": sum(w.skipped for w in windows),
    }


def counted_window(steps: int, samples: int, seconds: float, scale_before: float | None,
                   scale_after: float | None) -> Window:
    """A window of ``steps`` optimizer steps over ``samples`` samples in ``seconds``, less the
    steps the fp16 GradScaler skipped, read from its scale at the window's ends (None: no
    scaler): each skip halves the scale (``backoff_factor`` 0.5), and a growth doubles it only
    after ``growth_interval`` (2,000) steps without one, so a window holding both undercounts
    its skips by one. Every step is taken to hold the same samples.

    Raises:
        ValueError: every step of the window was skipped (the loss overflows fp16 at any scale).
    """
    skipped = 0
    if scale_before is not None and scale_after is not None and scale_after < scale_before:
        skipped = (steps if scale_after <= 0  # halved to nothing: every step overflowed
                   else min(steps, round(math.log2(scale_before / scale_after))))
    if skipped >= steps:
        raise ValueError(f"the fp16 GradScaler skipped all {steps} steps of a window "
                         f"(inf/NaN gradients; its scale fell from {scale_before:g} to "
                         f"{scale_after:g})")
    counted = steps - skipped
    return Window(counted, samples * counted // steps, seconds, skipped)


class HostMemorySampler:
    """Peak host memory of this process plus all its descendants (DataLoader workers),
    sampled on a background thread every ``interval_s`` seconds.

    Each process counts its proportional set size (PSS, Linux): pages it shares with the
    parent (forked workers share the parent's model and libraries) are split between the
    sharers, so the sum is the physical memory the trial holds. RSS, which ``ps`` and the 3D
    report's "~7 GB RSS per worker" show, counts shared pages once per process; it is used
    where PSS cannot be read.

    Reading PSS is not free: the kernel walks every page of the process to compute it
    (``/proc/<pid>/smaps_rollup``), 10-25 ms of CPU per process of a torch trial on 2 CPU
    cores, each DataLoader worker as much again; sampled every 0.1 s it would slow the trial it
    measures (docs/defaults.md). Inside ``measuring()`` (the timed windows) the sampler
    spends at most ``max_duty`` of one core: after a sample that cost c seconds it waits
    ``max(interval_s, c x (1 - max_duty) / max_duty)``, 2.5 s for a 25-ms sample at the
    default 1 %. Outside it (set-up, warm-up, the memory probe's short trials) it samples every
    ``interval_s``, so that a step's peak (activations during the backward pass) is caught
    before the windows repeat the same steps. A limit crossed between two samples of a window
    is seen that much later (the trial is still recorded ``over_limit``, with its peak).

    ``held_bytes`` (>= 0) are left out of every sample: memory the process holds for another
    trial, not this one (a decoded cache kept through a 'loader' trial,
    ``tuner.trial.steppers.held_cache_bytes``).
    """

    def __init__(self, interval_s: float = 0.1, limit_mb: float | None = None,
                 max_duty: float = 0.01, held_bytes: int = 0):
        self.interval_s = interval_s
        self.held_bytes = held_bytes
        self.max_duty = max_duty
        self.limit_mb = limit_mb
        self.peak_bytes = 0
        self.exceeded = threading.Event()
        """Set once the sum went over ``limit_mb``; the training loop checks it each step."""
        self._stop = threading.Event()
        self._measuring = threading.Event()
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
                total += _pss_or_rss(p)
            except psutil.Error:  # a worker exited between listing and reading
                continue
        total = max(0, total - self.held_bytes)
        self.peak_bytes = max(self.peak_bytes, total)
        if self.limit_mb is not None and self.peak_bytes > self.limit_mb * 2**20:
            self.exceeded.set()
        return total

    def wait_after_s(self, cost_s: float) -> float:
        """Seconds to wait after a sample that took ``cost_s`` seconds: inside ``measuring()``
        so that sampling uses at most ``max_duty`` of one core (never less than
        ``interval_s``); outside it ``interval_s``."""
        if not self._measuring.is_set():
            return self.interval_s
        return max(self.interval_s, cost_s * (1.0 - self.max_duty) / self.max_duty)

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        """The timed windows: sample sparsely inside (``wait_after_s``)."""
        self._measuring.set()
        try:
            yield
        finally:
            self._measuring.clear()

    def _timed_sample(self) -> float:
        """Sample; the seconds to wait before the next one (``wait_after_s``)."""
        started = time.perf_counter()
        self.sample()
        return self.wait_after_s(time.perf_counter() - started)

    def _run(self, wait_s: float) -> None:
        while not self._stop.wait(wait_s):
            wait_s = self._timed_sample()

    def __enter__(self) -> "HostMemorySampler":
        wait_s = self._timed_sample()
        self._thread = threading.Thread(target=self._run, args=(wait_s,), name="host-mem-sampler",
                                        daemon=True)
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


def _pss_or_rss(proc: psutil.Process) -> int:
    try:
        return proc.memory_full_info().pss
    except (AttributeError, psutil.AccessDenied):
        return proc.memory_info().rss


def release_host_memory() -> None:
    """Return freed heap memory to the OS (glibc ``malloc_trim``), so the next trial in a
    reused process starts from what is really in use."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def cuda_process_memory_mb(device: torch.device) -> float | None:
    """Device memory NVML attributes to this process (allocator + CUDA context), MB; None
    where NVML or the process entry is unavailable."""
    for proc in _compute_processes(device) or ():
        if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
            return proc.usedGpuMemory / 2**20
    return None


def _compute_processes(device: torch.device) -> list | None:
    """NVML's compute processes on the CUDA ``device``; None where NVML cannot say (missing,
    driver too old, no permission): unknown, never an empty list."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            index = device.index if device.index is not None else torch.cuda.current_device()
            handle = pynvml.nvmlDeviceGetHandleByIndex(_physical_index(index))
            return list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML missing, driver too old, or no permission
        return None


def _physical_index(index: int) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",")]
        if index < len(ids) and ids[index].isdigit():
            return int(ids[index])
    return index


def device_used_if_alone_mb(device: torch.device) -> float | None:
    """The card's used memory (``cudaMemGetInfo``: total - free), MB, when NVML lists at most one
    compute process on it: that process is this one, under a PID NVML does not show (in a
    container NVML reports the host's PIDs). None when NVML is missing or lists others."""
    processes = _compute_processes(device)
    if processes is None or len(processes) > 1:
        return None
    free, total = torch.cuda.mem_get_info(device)
    return (total - free) / 2**20


def peak_device_memory_mb(device: torch.device) -> float | None:
    """Peak reserved memory of the torch allocator plus the CUDA context, MB (None on CPU).

    The context is what NVML attributes to this process beyond what the allocator reserves now.
    Fallback when NVML does not list this process's PID (containers: host PIDs): the card's
    used memory when this process is the only one NVML lists (``device_used_if_alone_mb``;
    it also counts memory the driver keeps, so it can only over-state the context). With other
    processes on the card, or no NVML, the allocator's peak alone: the context (about 0.5 GiB
    on an H100) is then not counted, and a ``--max-memory`` limit is that much looser.
    """
    if device.type != "cuda":
        return None
    peak_reserved = torch.cuda.max_memory_reserved(device) / 2**20
    process = cuda_process_memory_mb(device)
    if process is None:
        process = device_used_if_alone_mb(device)
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


class LoadMonitor:
    """The machine's load while a trial measures, so a figure taken under contention is never
    mistaken for a clean one: the 1-minute load average (the higher of start and end; it
    counts the trial's own threads and DataLoader workers too), the share of the machine's CPU
    time that processes other than the trial's own (it and its DataLoader workers) used
    (``other_cpu_pct``: what says the machine was busy), the share the hypervisor stole
    (``/proc/stat`` steal; 0 on bare metal), and how many other processes run on the trial's
    GPU (NVML; None on CPU or without NVML)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.load_avg_1m: float | None = None
        self.cpu_steal_pct: float | None = None
        self.other_cpu_pct: float | None = None
        self.gpu_other_processes: int | None = None
        self.own_cpu_s: float | None = None
        """CPU seconds (user + system) the trial's own processes (it and its DataLoader
        workers, ``own_cpu_s``) used while it measured; None where psutil cannot read them."""
        self.wall_s: float | None = None
        """Wall seconds it measured."""

    def __enter__(self) -> "LoadMonitor":
        self._times = psutil.cpu_times()
        self._own_s = own_cpu_s()
        self._load = os.getloadavg()[0]
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        after = psutil.cpu_times()
        own_s = own_cpu_s()
        self.wall_s = time.perf_counter() - self._started
        if own_s is not None and self._own_s is not None:
            self.own_cpu_s = max(0.0, own_s - self._own_s)
        total = sum(after) - sum(self._times)
        steal = getattr(after, "steal", 0.0) - getattr(self._times, "steal", 0.0)
        idle = sum(getattr(after, n, 0.0) - getattr(self._times, n, 0.0)
                   for n in ("idle", "iowait", "steal"))
        self.cpu_steal_pct = 100.0 * steal / total if total > 0 else None
        if total > 0 and own_s is not None and self._own_s is not None:
            other = (total - idle) - (own_s - self._own_s)
            self.other_cpu_pct = min(100.0, max(0.0, 100.0 * other / total))
        self.load_avg_1m = max(self._load, os.getloadavg()[0])
        self.gpu_other_processes = _other_gpu_processes(self.device)

    def as_columns(self, samples_per_sec: float | None = None) -> dict:
        """The load columns, and ``cpu_s_per_sample`` (``cpu_s_per_sample``) for a trial that
        measured ``samples_per_sec``."""
        return {"load_avg_1m": self.load_avg_1m, "cpu_steal_pct": self.cpu_steal_pct,
                "other_cpu_pct": self.other_cpu_pct,
                "gpu_other_processes": self.gpu_other_processes,
                "cpu_s_per_sample": self.cpu_s_per_sample(samples_per_sec)}

    def cpu_s_per_sample(self, samples_per_sec: float | None) -> float | None:
        """CPU seconds the trial's own processes (it and its DataLoader workers) spent per
        sample while it measured at ``samples_per_sec``: ``own_cpu_s`` / (``samples_per_sec``
        x ``wall_s``), the samples its pipeline delivered over that time (a window's count
        leaves out batches prefetched before it, ``tuner.trial.prefetch``, not the work done
        in it). Beside the wall seconds per sample it tells a pipeline that computes from one
        that waits (``tuner.ceilings.pipeline_kind``). None without a rate or a reading."""
        if not samples_per_sec or self.own_cpu_s is None or not self.wall_s:
            return None
        return self.own_cpu_s / (samples_per_sec * self.wall_s)


def own_cpu_s() -> float | None:
    """CPU seconds (user + system) of this process, its live descendants (DataLoader workers)
    and its reaped children; None where psutil cannot read them."""
    try:
        me = psutil.Process()
        times = me.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                t = child.cpu_times()
                total += t.user + t.system
        return total
    except psutil.Error:
        return None


def _other_gpu_processes(device: torch.device) -> int | None:
    """Compute processes on the device other than this one, per NVML (None where unknown).
    Called at the end of a trial's measurement, when this process holds a CUDA context, so
    NVML lists it: under its own PID, or in a container under a host PID that matches none
    here. Either way it is one of those listed; counting the PIDs unlike ours instead would
    call every containerised CUDA trial busy."""
    procs = _compute_processes(device) if device.type == "cuda" else None
    return None if procs is None else max(0, len(procs) - 1)


class GpuTelemetry:
    """Mean GPU utilisation (%) and power (W) sampled by NVML on a background thread.

    Values stay None where NVML is unavailable (CPU trials, no driver)."""

    def __init__(self, device: torch.device, interval_s: float = 0.1):
        self.device = device
        self.interval_s = interval_s
        self.util_pct: float | None = None
        self.power_w: float | None = None
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle = None

    def __enter__(self) -> "GpuTelemetry":
        if self.device.type != "cuda":
            return self
        try:
            import pynvml
            pynvml.nvmlInit()
            index = (self.device.index if self.device.index is not None
                     else torch.cuda.current_device())
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(_physical_index(index))
        except Exception:  # no NVML: telemetry columns stay null
            self._handle = None
            return self
        self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        import pynvml
        while not self._stop.wait(self.interval_s):
            try:
                util = pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
                power = pynvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0  # mW -> W
            except Exception:  # a transient NVML error drops one sample
                continue
            self._samples.append((float(util), power))

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            import pynvml
            pynvml.nvmlShutdown()
        if self._samples:
            self.util_pct = statistics.fmean(s[0] for s in self._samples)
            self.power_w = statistics.fmean(s[1] for s in self._samples)
