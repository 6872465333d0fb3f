"""Knobs: the performance settings one trial applies.

A knob changes how fast a training job runs, never what it learns (with the exception of
``batch_size`` without ``grad_accum``, which the user opts into). Knobs are applied by the
harness (``tuner.harness``), never by a workload.

Sources for the knob list: the five tuning reports in ``shared/reports`` (DataLoader settings,
AMP, ``channels_last``, ``torch.compile``, cuDNN benchmark, TF32, fused AdamW).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Mapping

AMP_MODES = ("off", "fp16", "bf16")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """One configuration of performance settings.

    Raises:
        ValueError: a value out of its accepted range, or a combination that cannot be applied
            (``prefetch_factor`` or ``persistent_workers`` with ``num_workers == 0``). The message
            names the knob, the value and what is accepted.
    """

    batch_size: int
    """Micro-batch size: samples per forward/backward pass (DataLoader ``batch_size``), >= 1."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step; global batch = batch_size x grad_accum."""
    num_workers: int = 0
    """DataLoader worker processes, >= 0 (0 loads in the training process)."""
    prefetch_factor: int | None = None
    """Batches each worker loads ahead, 1..64; only with num_workers > 0 (None -> torch's 2)."""
    pin_memory: bool = False
    """DataLoader pins host batches in page-locked memory (CUDA only)."""
    persistent_workers: bool = False
    """Keep workers alive across epochs; only with num_workers > 0."""
    non_blocking: bool = False
    """Host-to-device copies with ``non_blocking=True`` (CUDA only; pairs with pin_memory)."""
    amp: str = "off"
    """Automatic mixed precision: 'off', 'fp16' (autocast + GradScaler) or 'bf16' (autocast)."""
    channels_last: bool = False
    """Model and 4-D/5-D inputs in channels_last / channels_last_3d memory format."""
    compile: str = "off"
    """torch.compile mode: 'off', 'default', 'reduce-overhead' or 'max-autotune'."""
    cudnn_benchmark: bool = False
    """``torch.backends.cudnn.benchmark`` (cuDNN autotuning of convolution algorithms)."""
    tf32: bool = False
    """TF32 for matmuls and cuDNN convolutions (Ampere or newer GPUs)."""
    fused_optimizer: bool = False
    """AdamW/Adam with ``fused=True``."""

    def __post_init__(self) -> None:
        _check_int("batch_size", self.batch_size, 1)
        _check_int("grad_accum", self.grad_accum, 1)
        _check_int("num_workers", self.num_workers, 0)
        for name in ("pin_memory", "persistent_workers", "non_blocking", "channels_last",
                     "cudnn_benchmark", "tf32", "fused_optimizer"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"knob {name}={getattr(self, name)!r}: expected true or false")
        if self.amp not in AMP_MODES:
            raise ValueError(f"knob amp={self.amp!r}: accepted values are {', '.join(AMP_MODES)}")
        if self.compile not in COMPILE_MODES:
            raise ValueError(
                f"knob compile={self.compile!r}: accepted values are {', '.join(COMPILE_MODES)}")
        if self.num_workers == 0:
            if self.prefetch_factor is not None:
                raise ValueError(
                    f"knob prefetch_factor={self.prefetch_factor} needs num_workers > 0 "
                    "(DataLoader rejects it with num_workers=0)")
            if self.persistent_workers:
                raise ValueError("knob persistent_workers=true needs num_workers > 0")
        else:
            if self.prefetch_factor is None:
                object.__setattr__(self, "prefetch_factor", 2)  # torch's default, recorded
            _check_int("prefetch_factor", self.prefetch_factor, 1, 64)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Knob names in declaration order (also the leaderboard's knob columns)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, strict: bool = True) -> "Knobs":
        """Build from a mapping. With ``strict``, unknown keys raise ValueError naming them;
        without it (a Ray Tune config carries other keys) they are ignored."""
        known = set(cls.names())
        unknown = sorted(set(values) - known)
        if strict and unknown:
            raise ValueError(
                f"unknown knob(s) {', '.join(unknown)}; accepted: {', '.join(cls.names())}")
        kwargs = {k: v for k, v in values.items() if k in known}
        if "batch_size" not in kwargs:
            raise ValueError("knob batch_size is required")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> "Knobs":
        return dataclasses.replace(self, **changes)

    def clamp(self, device_type: str, *, bf16_supported: bool = True) -> tuple["Knobs", list[str]]:
        """Clamp knobs the device cannot honour.

        Args:
            device_type: 'cpu' or 'cuda'.
            bf16_supported: whether the CUDA device runs bf16 (Ampere or newer).

        Returns:
            The knobs actually applied, and one note per clamped knob ('amp: fp16 -> off (cpu)').
            Clamped knobs are recorded in the leaderboard, never silently ignored.
        """
        changes: dict[str, Any] = {}
        if device_type == "cpu":
            # CUDA-only mechanisms: pinned memory, async copies, cuDNN, TF32, CUDA graphs.
            for name in ("pin_memory", "non_blocking", "cudnn_benchmark", "tf32"):
                if getattr(self, name):
                    changes[name] = False
            if self.amp == "fp16":
                changes["amp"] = "off"  # fp16 autocast on CPU is emulated and slower than fp32
            if self.compile == "reduce-overhead":
                changes["compile"] = "default"  # reduce-overhead means CUDA graphs
        elif device_type == "cuda":
            if self.amp == "bf16" and not bf16_supported:
                changes["amp"] = "fp16"
        else:
            raise ValueError(f"device {device_type!r}: accepted values are cpu, cuda")
        notes = [f"{k}: {_fmt(getattr(self, k))} -> {_fmt(v)} ({device_type})"
                 for k, v in changes.items()]
        return (self.replace(**changes) if changes else self), notes

    def dataloader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.utils.data.DataLoader`` (besides dataset/shuffle)."""
        kwargs: dict[str, Any] = {"batch_size": self.batch_size, "num_workers": self.num_workers,
                                  "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["persistent_workers"] = self.persistent_workers
        return kwargs

    def to_python(self, device: str = "cuda") -> str:
        """The knobs as Python to paste into a training script (``dataset``, ``model``,
        ``loss_fn`` and ``lr`` are the user's)."""
        lines = ["import torch", ""]
        if device == "cuda":
            lines.append(f"torch.backends.cudnn.benchmark = {self.cudnn_benchmark}")
            lines.append(f"torch.backends.cuda.matmul.allow_tf32 = {self.tf32}")
            lines.append(f"torch.backends.cudnn.allow_tf32 = {self.tf32}")
            lines.append("")
        args = ", ".join(f"{k}={v!r}" for k, v in self.dataloader_kwargs().items())
        lines.append(f"loader = torch.utils.data.DataLoader(dataset, shuffle=True, drop_last=True, {args})")
        fmt = ", memory_format=torch.channels_last" if self.channels_last else ""
        lines.append(f"model = model.to({device!r}{fmt})")
        if self.compile != "off":
            mode = "" if self.compile == "default" else f", mode={self.compile!r}"
            lines.append(f"model = torch.compile(model{mode})")
        fused = ", fused=True" if self.fused_optimizer else ""
        lines.append(f"optimizer = torch.optim.AdamW(model.parameters(), lr=lr{fused})")
        if self.amp == "fp16":
            lines.append(f"scaler = torch.amp.GradScaler({device!r})")
        lines.append("")
        nb = ", non_blocking=True" if self.non_blocking else ""
        cl = ", memory_format=torch.channels_last" if self.channels_last else ""
        accum = self.grad_accum > 1
        lines.append("for step, (x, y) in enumerate(loader):  # adapt to your batch structure" if accum
                     else "for x, y in loader:  # adapt to your batch structure")
        lines.append(f"    x = x.to({device!r}{nb}{cl})")
        lines.append(f"    y = y.to({device!r}{nb})")
        body = "loss_fn(model(x), y)" + (f" / {self.grad_accum}" if accum else "")
        if self.amp == "off":
            lines.append(f"    loss = {body}")
        else:
            dtype = "torch.float16" if self.amp == "fp16" else "torch.bfloat16"
            lines.append(f"    with torch.autocast({device!r}, dtype={dtype}):")
            lines.append(f"        loss = {body}")
        lines.append("    scaler.scale(loss).backward()" if self.amp == "fp16" else "    loss.backward()")
        indent = "    "
        if accum:
            lines.append(f"    if (step + 1) % {self.grad_accum} == 0:  # global batch "
                         f"{self.batch_size * self.grad_accum}")
            indent = "        "
        if self.amp == "fp16":
            lines += [f"{indent}scaler.step(optimizer)", f"{indent}scaler.update()"]
        else:
            lines.append(f"{indent}optimizer.step()")
        lines.append(f"{indent}optimizer.zero_grad(set_to_none=True)")
        return "\n".join(lines) + "\n"


KNOB_SHORT = {"batch_size": "bs", "grad_accum": "acc", "num_workers": "nw", "prefetch_factor": "pf",
              "pin_memory": "pin", "persistent_workers": "pw", "non_blocking": "nb", "amp": "amp",
              "channels_last": "cl", "compile": "compile", "cudnn_benchmark": "cudnn",
              "tf32": "tf32", "fused_optimizer": "fused"}
"""Short names used by ``knob_text`` (tables, progress lines)."""


def knob_text(row: dict) -> str:
    """Compact knob summary: 'bs=32 nw=2 pf=2 pw amp=bf16 cl'."""
    parts = []
    for name in Knobs.names():
        v = row.get(name)
        if v is None or v is False or v == "off" or (name == "grad_accum" and v == 1):
            continue
        parts.append(KNOB_SHORT[name] if v is True else f"{KNOB_SHORT[name]}={v}")
    return " ".join(parts)


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"knob {name}={value!r}: expected an integer")
    if value < low or (high is not None and value > high):
        accepted = f">= {low}" if high is None else f"{low}..{high}"
        raise ValueError(f"knob {name}={value}: accepted range is {accepted}")


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


KNOB_FIELDS = {f.name: f for f in fields(Knobs)}
