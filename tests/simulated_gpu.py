"""A simulated CUDA device for CPU runs: the ``torch.cuda`` entry points tuner asks answer as
one NVIDIA H200 would, tensors "moved" to it stay in host memory, and its memory is a ledger
that a workload charges (``allocate``) and that fails past the allocator's per-process limit
with a CUDA-style ``torch.OutOfMemoryError`` (what ``--max-memory`` sets, through
``torch.cuda.set_per_process_memory_fraction``).

How a run uses it: ``TUNER_DEVICE_HOOK=tests.simulated_gpu:install`` in the environment makes
every process that imports ``tuner`` (the driver, Ray's trial and probe workers, which inherit
the environment) call ``install()`` first; ``--device cuda`` then runs tuner's own planner and
harness unchanged. ``tests.simulated_h200`` is the workload whose step costs are the H200's.

What the device answers (the H200 of 2026-11-27: ``cuda:NVIDIA H200:140GiB``, 143,155.9 MiB):

* ``is_available``, ``device_count`` (1), ``current_device``, ``get_device_name``,
  ``get_device_properties`` (name, ``total_memory``, compute capability 9.0, 132 SMs),
  ``is_bf16_supported``, ``is_initialized`` (True after the first use in the process);
* ``synchronize``: nothing to wait for (the simulated work is slept when issued), but the
  queue is empty from then on (``synced_at``): a step after it cannot count time spent before
  it, as the workload's pacing otherwise would (a window would read faster than the card);
* memory: ``mem_get_info``, ``memory_allocated``/``memory_reserved`` (the ledger),
  ``max_memory_allocated``/``max_memory_reserved`` (its peak), ``reset_peak_memory_stats``,
  ``empty_cache``, ``set_per_process_memory_fraction``;
* ``Tensor.to``/``Tensor.cuda``/``Tensor.pin_memory``: a CUDA target means the host (the
  tensor stays a CPU tensor; autocast for ``"cuda"`` still records its state, which the
  workload reads);
* ``torch.accelerator``: none (generic code, the optimizers' CUDA-graph check and
  DataLoader's pinning, would otherwise reach the absent driver);
* Ray: a node this process starts counts one GPU (``RAY_OVERRIDE_RESOURCES``), so a trial
  asking for one is placed;
* ``torch.compile``: the module returned as it is, marked with its mode
  (``sim_compile_mode``): the workload charges the compile's time at the model's first step.

Process start: the first use of the device in a process sleeps until ``CONTEXT_READY_S``
after the process was created (the trial processes of the H200 run of 2026-11-27 started
6.7-10.6 s before their first trial; the middle, 8.0 s), so a run pays the card's process
start-up however fast this host starts a process.

Every simulated cost is slept. One-off costs (process start, a model's first step, cuDNN's
autotuning, a compile) are slept scaled by ``TUNER_SIM_ONE_OFF_SCALE`` (default 1: the measured
seconds; the suite's end-to-end runs shrink them, steps keep their measured times) and recorded
in ``charges``, so tests read what was charged rather than the wall clock.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import psutil
import torch

NAME = "NVIDIA H200"
TOTAL_MB = 143155.9375
"""The H200's ``total_memory`` as torch reported it on 2026-11-27 (MiB)."""
CONTEXT_READY_S = 8.0
"""Seconds from a process's creation to its first use of the card (measured 6.7-10.6 s)."""
HOOK_ENV = "TUNER_DEVICE_HOOK"
SCALE_ENV = "TUNER_SIM_ONE_OFF_SCALE"
RAY_RESOURCES_ENV = "RAY_OVERRIDE_RESOURCES"
"""Ray's node-resource override: a Ray node this process starts has the card as one GPU."""


def one_off_scale() -> float:
    """The factor one-off costs are slept at (``TUNER_SIM_ONE_OFF_SCALE``, default 1)."""
    return float(os.environ.get(SCALE_ENV, "1"))


@dataclass
class DeviceState:
    """The simulated card in this process: its memory ledger and what it has seen."""

    allocated_mb: float = 0.0
    peak_mb: float = 0.0
    fraction: float = 1.0
    """``set_per_process_memory_fraction``: the allocator's limit is this share of the card."""
    initialized: bool = False
    synced_at: float = 0.0
    """``time.perf_counter()`` of the last ``synchronize``: the card's queue was empty then."""
    cudnn_shapes: set = field(default_factory=set)
    """Shapes cuDNN has autotuned in this process (benchmark mode keeps its choices)."""
    charges: list = field(default_factory=list)
    """(what, seconds) of every simulated cost charged in this process, in order."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def limit_mb(self) -> float:
        return TOTAL_MB * self.fraction


STATE = DeviceState()


def sleep(what: str, seconds: float) -> float:
    """Charge ``seconds`` of one-off time for ``what``: record it, sleep it scaled
    (``one_off_scale``). Returns the seconds slept."""
    slept = max(0.0, seconds) * one_off_scale()
    STATE.charges.append((what, seconds))
    if slept > 0:
        time.sleep(slept)
    return slept


def _first_use() -> None:
    """The card's process start, once per process (``CONTEXT_READY_S``)."""
    if STATE.initialized:
        return
    STATE.initialized = True
    age_s = time.time() - psutil.Process().create_time()
    sleep("process start", max(0.0, CONTEXT_READY_S - age_s / one_off_scale()))


def allocate(mb: float) -> None:
    """Hold ``mb`` MiB on the card for the current step (the ledger is the step's working set:
    a later call replaces it). Raises ``torch.OutOfMemoryError`` past the allocator's limit
    (the card, or the share ``set_per_process_memory_fraction`` left), with CUDA's wording."""
    _first_use()
    with STATE.lock:
        if mb > STATE.limit_mb:
            free = max(0.0, STATE.limit_mb - STATE.allocated_mb)
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {(mb - STATE.allocated_mb) / 1024:.2f} "
                f"GiB. GPU 0 has a total capacity of {TOTAL_MB / 1024:.2f} GiB of which "
                f"{free / 1024:.2f} GiB is free. This process has {STATE.allocated_mb / 1024:.2f} "
                f"GiB memory in use; the allowed memory is {STATE.limit_mb / 1024:.2f} GiB "
                "(set_per_process_memory_fraction).")
        STATE.allocated_mb = mb
        STATE.peak_mb = max(STATE.peak_mb, mb)


def release() -> None:
    """Free the ledger (the model and its batches gone: ``empty_cache`` after a trial)."""
    STATE.allocated_mb = 0.0


def _properties(_device=None) -> SimpleNamespace:
    _first_use()
    return SimpleNamespace(name=NAME, total_memory=int(TOTAL_MB * 2**20), major=9, minor=0,
                           multi_processor_count=132, is_integrated=False, uuid="sim-h200")


def _set_fraction(fraction: float, device=None) -> None:
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _first_use()
    STATE.fraction = float(fraction)


def _synchronize(_device=None) -> None:
    _first_use()
    STATE.synced_at = time.perf_counter()


def _reset_peak(_device=None) -> None:
    STATE.peak_mb = STATE.allocated_mb


def _empty_cache() -> None:
    release()


def _mem_get_info(_device=None) -> tuple[int, int]:
    _first_use()
    total = int(TOTAL_MB * 2**20)
    return total - int(STATE.allocated_mb * 2**20), total


def _host(target):
    """A CUDA target (device, 'cuda', 'cuda:0', an index) as the host; anything else as is."""
    if isinstance(target, torch.device) and target.type == "cuda":
        return torch.device("cpu")
    if isinstance(target, str) and target.startswith("cuda"):
        return "cpu"
    return target


_ORIGINAL: dict = {}


def _patched_to(self, *args, **kwargs):
    args = tuple(_host(a) for a in args)
    if "device" in kwargs:
        kwargs["device"] = _host(kwargs["device"])
    return _ORIGINAL[(torch.Tensor, "to")](self, *args, **kwargs)


def _patched_cuda(self, device=None, non_blocking=False, **_):
    return self


def _patched_pin_memory(self, *_, **__):
    return self


def _patched_compile(model=None, *, mode=None, **_):
    if model is None:  # used as a decorator factory: torch.compile(mode=...)
        return lambda m: _patched_compile(m, mode=mode)
    model.sim_compile_mode = mode or "default"
    return model


def _patches() -> list[tuple[object, str, object]]:
    """(owner, attribute, simulated value) of everything ``install`` replaces."""
    cuda = torch.cuda
    answers = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda _d: _first_use(),
        "get_device_name": lambda _d=None: _properties().name,
        "get_device_properties": _properties,
        "get_device_capability": lambda _d=None: (9, 0),
        "is_bf16_supported": lambda *_a, **_k: True,
        "is_initialized": lambda: STATE.initialized,
        "init": _first_use,
        "synchronize": _synchronize,
        "mem_get_info": _mem_get_info,
        "memory_allocated": lambda _d=None: int(STATE.allocated_mb * 2**20),
        "memory_reserved": lambda _d=None: int(STATE.allocated_mb * 2**20),
        "max_memory_allocated": lambda _d=None: int(STATE.peak_mb * 2**20),
        "max_memory_reserved": lambda _d=None: int(STATE.peak_mb * 2**20),
        "reset_peak_memory_stats": _reset_peak,
        "empty_cache": _empty_cache,
        "set_per_process_memory_fraction": _set_fraction,
    }
    return [*((cuda, name, answer) for name, answer in answers.items()),
            (torch.Tensor, "to", _patched_to), (torch.Tensor, "cuda", _patched_cuda),
            (torch.Tensor, "pin_memory", _patched_pin_memory), (torch, "compile", _patched_compile),
            # Generic accelerator code (the optimizers' CUDA-graph check, DataLoader pinning)
            # would reach the real, absent driver: to it the process has no accelerator.
            (torch.accelerator, "current_accelerator", lambda check_available=False: None),
            (torch.accelerator, "is_available", lambda: False)]


def install() -> None:
    """Patch this process's ``torch`` so that it has one simulated H200 (idempotent)."""
    if _ORIGINAL:
        return
    os.environ.setdefault(RAY_RESOURCES_ENV, '{"GPU": 1}')
    for owner, name, value in _patches():
        _ORIGINAL[(owner, name)] = getattr(owner, name)
        setattr(owner, name, value)


def uninstall() -> None:
    """Put back what ``install`` replaced and forget the card's state (tests in one process)."""
    global STATE
    for (owner, name), value in _ORIGINAL.items():
        setattr(owner, name, value)
    _ORIGINAL.clear()
    STATE = DeviceState()


def hook_environment() -> dict[str, str]:
    """The environment variables that give a ``tuner`` subprocess (and its Ray workers) this
    device: ``TUNER_DEVICE_HOOK`` naming ``install``."""
    return {HOOK_ENV: f"{__name__}:install"}
