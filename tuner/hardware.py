"""Hardware fingerprint: what a measurement is only valid for.

``hardware_key`` groups leaderboard rows: the best configuration is always per workload and
hardware key (GPU model and memory, or CPU model, generation and core count).
"""

from __future__ import annotations

import os
import platform
import re

import psutil
import torch

CPUINFO = "/proc/cpuinfo"


def _first_processor(cpuinfo: str = CPUINFO) -> dict[str, str]:
    """The fields of the first processor's block of /proc/cpuinfo ('model name', 'cpu
    family', ...); empty where it cannot be read (not Linux)."""
    found: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    if found:
                        break      # the first processor's block is enough
                    continue
                name, _, value = line.partition(":")
                found.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    return found


def _model_name(fields: dict[str, str]) -> str:
    name = fields.get("model name")
    return re.sub(r"\s+", " ", name).strip() if name else (platform.processor()
                                                           or platform.machine())


def cpu_model(cpuinfo: str = CPUINFO) -> str:
    """The CPU's model name ('AMD EPYC 9454P'; a VM may say only 'AMD EPYC')."""
    return _model_name(_first_processor(cpuinfo))


CPU_GENERATION_FIELDS = (("cpu family", "family"), ("model", "model"),
                         ("CPU implementer", "implementer"), ("CPU part", "part"))
"""/proc/cpuinfo fields that name a CPU's generation (x86 family and model; Arm implementer
and part), with the words the hardware key gives them."""


def _cpu_key(fields: dict[str, str], cpus: int) -> str:
    generation = " ".join(f"{word} {fields[field]}" for field, word in CPU_GENERATION_FIELDS
                          if fields.get(field))
    name = _model_name(fields) + (f" ({generation})" if generation else "")
    return f"cpu:{name}:{cpus}cpu"


def cpu_key(cpus: int, cpuinfo: str = CPUINFO) -> str:
    """The hardware key of a CPU device: 'cpu:<model name> (<generation>):<cpus>cpu', the
    generation as /proc/cpuinfo gives it for the first processor ('family 26 model 2' on x86,
    'implementer 0x41 part 0xd4f' on Arm), e.g. 'cpu:AMD EPYC (family 26 model 2):2cpu';
    without a readable generation 'cpu:<model name>:<cpus>cpu'.

    Cloud VMs often report a model name without a model number: this project's machine
    said 'AMD EPYC' both as a Zen 5 (family 26, AVX512-BF16: ddpm at ~140 samples/sec with
    bf16) and as an AVX2-only EPYC that trained it at ~50, so the name alone would let one
    machine's answer be handed out on the other."""
    return _cpu_key(_first_processor(cpuinfo), cpus)


CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""/proc/cpuinfo flags of a CPU that computes bf16 natively: x86 AVX512-BF16 or AMX-BF16, Arm
BF16 (its 'Features' line)."""


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this machine's CPU computes bf16 natively (``CPU_BF16_FLAGS``). Without, torch
    runs bf16 autocast through conversions to fp32: the ddpm U-Net at tiny scale trained at
    ~5 samples/sec in bf16 against ~50 in fp32 on a 2-core AVX2 EPYC.
    True when it cannot tell (no /proc/cpuinfo: not Linux), so nothing is left out then."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return bool(CPU_BF16_FLAGS & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return True


def fingerprint(device: torch.device) -> dict:
    """Fields describing the hardware ``device`` lives on.

    Returns keys: device ('cpu'/'cuda'), hardware_key, gpu_name, gpu_memory_mb, cuda_version,
    cpu_model, cpu_count, host_memory_mb.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = _first_processor()  # read once: the model name and the key come from it
    info = {
        "device": device.type,
        "gpu_name": None,
        "gpu_memory_mb": None,
        "cuda_version": torch.version.cuda,
        "cpu_model": _model_name(cpu),
        "cpu_count": cpus,
        "host_memory_mb": psutil.virtual_memory().total / 2**20,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu_name"] = props.name
        info["gpu_memory_mb"] = props.total_memory / 2**20
        info["hardware_key"] = f"cuda:{props.name}:{round(props.total_memory / 2**30)}GiB"
    else:
        info["hardware_key"] = _cpu_key(cpu, cpus)
    return info


def node_id() -> str | None:
    """Ray node id of the calling process, or None outside Ray."""
    try:
        import ray
        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except Exception:  # ray missing or not connected: the row simply has no node id
        return None
    return None


def node_ip() -> str | None:
    try:
        import ray
        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:
        return None
    return None
