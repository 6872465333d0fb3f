"""The failure taxonomy of a trial, and the one place that recognises out-of-memory.

A trial ends as one of ``tuner.status.Status``; ``classify`` says which for a trial that raised.
A failed trial keeps its message and traceback; it is never recorded as a throughput of zero.
"""

from __future__ import annotations

import gc

import torch

from tuner.errors import LimitExceeded
from tuner.status import Status

# Out-of-memory messages that do not arrive as torch.OutOfMemoryError. Each line says where
# it comes from.
_OOM_PATTERNS = (
    "CUDA out of memory",                    # older torch, some caching-allocator paths
    "CUBLAS_STATUS_ALLOC_FAILED",            # cuBLAS workspace allocation
    "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE",     # cuDNN algorithm workspace
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: can't allocate memory",  # host RAM exhausted on the CPU device
    "out of memory",                          # generic driver / NCCL message, keep last
)


def is_oom(exc: BaseException) -> bool:
    """True when ``exc`` means the device (or host, for the CPU device) ran out of memory."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    if isinstance(exc, (RuntimeError, MemoryError)):
        text = str(exc)
        return isinstance(exc, MemoryError) or any(p in text for p in _OOM_PATTERNS)
    return False


def oom_memory(exc: BaseException, device: torch.device) -> str:
    """Which memory an out-of-memory error (``is_oom``) exhausted: 'device' for the CUDA
    allocator, cuBLAS and cuDNN; 'host' for host RAM (``MemoryError``, the CPU allocator), and
    always on the CPU device, whose memory is the host's."""
    if device.type != "cuda" or isinstance(exc, MemoryError) or \
            "DefaultCPUAllocator" in str(exc):
        return "host"
    return "device"


def is_worker_failure(exc: BaseException) -> bool:
    """True when a DataLoader worker died or timed out (killed, shared memory exhausted)."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "DataLoader worker" in text or "dataloader's worker" in text.lower())


def classify(exc: BaseException, device: torch.device) -> tuple[Status, str | None, str]:
    """How a trial that raised ``exc`` on ``device`` ended: (status, memory_exceeded, error).

    ``LimitExceeded`` is ``over_limit`` with the memory it names; an out-of-memory error
    (``is_oom``) is ``oom`` with the memory ``oom_memory`` names; anything else is ``error``,
    with memory None. The error text is ``Type: message``, prefixed with
    "DataLoader worker failure: " when a DataLoader worker died (``is_worker_failure``).
    """
    if isinstance(exc, LimitExceeded):
        status, memory = Status.OVER_LIMIT, exc.memory
    elif is_oom(exc):
        status, memory = Status.OOM, oom_memory(exc, device)
    else:
        status, memory = Status.ERROR, None
    kind = "DataLoader worker failure: " if is_worker_failure(exc) else ""
    return status, memory, f"{kind}{type(exc).__name__}: {exc}"


def free_device_memory() -> None:
    """Release cached allocator memory after a trial so the next trial in a reused Ray actor
    starts clean (Ray reuses actors even after a trial caught an OOM).

    Only where this process has initialised CUDA: ``reset_peak_memory_stats()`` of the current
    device initialises it otherwise, and every ``--device cpu`` trial on a GPU machine would
    create a CUDA context (seconds per process, memory on the card, and its mappings copied into
    every DataLoader worker forked after it)."""
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
