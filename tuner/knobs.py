"""Knobs: the performance settings one trial applies.

A knob changes how fast a training job runs, never what it learns (with the exception of
``batch_size`` without ``grad_accum``, which the user opts into). Knobs are applied by
``tuner.trial.apply``, never by a workload. Every fact about a knob is the ``KnobInfo`` metadata of
its ``Knobs`` field; the tables other modules use are derived from it at the end of this file.

Sources for the knob list: the five users' tuning reports behind the built-in workloads
(DataLoader settings, AMP, ``channels_last``, ``torch.compile``, cuDNN benchmark, TF32, fused
AdamW).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

AMP_MODES = ("off", "fp16", "bf16")
DATA_PATHS = ("loader", "cache", "device")
"""The ``data_path`` knob's values (``tuner.data``)."""
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")

MEMORY_KINDS = ("device", "host", "none")

DDP_BUCKET_CAP_MB = 25
"""DistributedDataParallel's own ``bucket_cap_mb``, which an unset ``ddp_bucket_cap_mb`` means."""


@dataclass(frozen=True, kw_only=True)
class KnobInfo:
    """Everything the rest of tuner needs to know about one knob, kept as the metadata of its
    ``Knobs`` field: the search space, the searcher, the leaderboard and ``knob_text`` derive
    their tables from it, so adding a knob is a change here and in ``tuner.trial.apply``."""

    short: str
    """Abbreviation in ``knob_text`` ('bs=32 nw=2 pw')."""
    kind: str
    """'int', 'bool' or 'choice' (a string from ``choices``); decides the leaderboard's Arrow
    type and how a search-space YAML may give it (a low/high range needs 'int')."""
    memory: str
    """What a larger or different value changes: 'device' memory (activations, weights,
    optimizer state), 'host' memory (DataLoader workers and their buffers), or 'none'."""
    choices: tuple = ()
    """Accepted values of a 'choice' knob."""
    cuda_only: bool = False
    """The knob does nothing off CUDA: False on CPU (clamped, and not sampled there)."""
    cpu_values: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Values only CUDA honours, and what each becomes on CPU."""
    needs_workers: bool = False
    """Only meaningful with ``num_workers > 0`` (not sampled, and None/false, without)."""
    data_parallel: bool = False
    """A ``DistributedDataParallel`` setting: only meaningful with world size > 1 (not sampled,
    and None/false, in a one-rank trial)."""
    ddp_values: tuple = ()
    """A ``data_parallel`` knob's values as a data-parallel run samples them (``DDP_VALUES``;
    ``tuner.space.DDP_DOMAINS``)."""
    loader_only: bool = False
    """A setting of the DataLoader, which the 'device' data path does not use: not suggested
    there, and off (num_workers 0, pin_memory false) (``DEVICE_PATH_REFUSED``)."""

    def __post_init__(self) -> None:
        if self.kind not in ("int", "bool", "choice") or self.memory not in MEMORY_KINDS:
            raise ValueError(f"KnobInfo kind={self.kind!r} memory={self.memory!r}")
        if bool(self.ddp_values) != self.data_parallel:
            raise ValueError(f"KnobInfo ddp_values={self.ddp_values!r} needs data_parallel "
                             "(and a data-parallel knob its values)")


def _knob(**info: Any) -> dict:
    return {"knob": KnobInfo(**info)}


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """One configuration of performance settings.

    Raises:
        ValueError: a value out of its accepted range, or a combination that cannot be applied
            (``prefetch_factor`` or ``persistent_workers`` with ``num_workers == 0``). The message
            names the knob, the value and what is accepted.
    """

    batch_size: int = field(metadata=_knob(short="bs", kind="int", memory="device"))
    """Micro-batch size: samples per forward/backward pass (DataLoader ``batch_size``), >= 1."""
    grad_accum: int = field(default=1, metadata=_knob(short="acc", kind="int", memory="none"))
    """Micro-batches accumulated per optimizer step; global batch = batch_size x grad_accum.
    Micro-batches run one after the other, so it changes no memory."""
    data_path: str = field(default="loader", metadata=_knob(
        short="data", kind="choice", memory="device", choices=DATA_PATHS))
    """How samples reach the training step (``tuner.data``): 'loader' (the workload's dataset
    through the DataLoader), 'cache' (decoded samples held in host memory, the workers apply
    the random augmentation) or 'device' (decoded samples resident in device memory, augmented
    there per sample; no workers). 'cache' and 'device' need ``Workload.sample_path``."""
    num_workers: int = field(default=0, metadata=_knob(short="nw", kind="int", memory="host",
                                                       loader_only=True))
    """DataLoader worker processes, >= 0 (0 loads in the training process)."""
    prefetch_factor: int | None = field(default=None, metadata=_knob(
        short="pf", kind="int", memory="host", needs_workers=True, loader_only=True))
    """Batches each worker loads ahead, 1..64; only with num_workers > 0 (None -> torch's 2)."""
    pin_memory: bool = field(default=False, metadata=_knob(
        short="pin", kind="bool", memory="host", cuda_only=True, loader_only=True))
    """DataLoader pins host batches in page-locked memory (CUDA only)."""
    persistent_workers: bool = field(default=False, metadata=_knob(
        short="pw", kind="bool", memory="host", needs_workers=True, loader_only=True))
    """Keep workers alive across epochs; only with num_workers > 0."""
    non_blocking: bool = field(default=False, metadata=_knob(
        short="nb", kind="bool", memory="host", cuda_only=True))
    """Host-to-device copies with ``non_blocking=True`` (CUDA only; pairs with pin_memory)."""
    amp: str = field(default="off", metadata=_knob(
        short="amp", kind="choice", memory="device", choices=AMP_MODES,
        cpu_values={"fp16": "off"}))  # fp16 autocast on CPU is emulated, slower than fp32
    """Automatic mixed precision: 'off', 'fp16' (autocast + GradScaler) or 'bf16' (autocast)."""
    channels_last: bool = field(default=False, metadata=_knob(
        short="cl", kind="bool", memory="device"))
    """Model and 4-D/5-D inputs in channels_last / channels_last_3d memory format."""
    compile: str = field(default="off", metadata=_knob(
        short="compile", kind="choice", memory="device", choices=COMPILE_MODES,
        cpu_values={"reduce-overhead": "default"}))  # reduce-overhead means CUDA graphs
    """torch.compile mode: 'off', 'default', 'reduce-overhead' or 'max-autotune'."""
    cudnn_benchmark: bool = field(default=False, metadata=_knob(
        short="cudnn", kind="bool", memory="device", cuda_only=True))
    """``torch.backends.cudnn.benchmark`` (cuDNN autotuning of convolution algorithms)."""
    tf32: bool = field(default=False, metadata=_knob(
        short="tf32", kind="bool", memory="none", cuda_only=True))
    """TF32 matmuls (``torch.set_float32_matmul_precision("high")``, "highest" without it;
    Ampere or newer GPUs). cuDNN convolutions use TF32 by torch's default with or without it."""
    fused_optimizer: bool = field(default=False, metadata=_knob(
        short="fused", kind="bool", memory="device"))
    """AdamW/Adam with ``fused=True``."""
    ddp_bucket_cap_mb: int | None = field(default=None, metadata=_knob(
        short="bucket", kind="int", memory="device", data_parallel=True,
        ddp_values=(DDP_BUCKET_CAP_MB, 50, 100, 200)))
    """DistributedDataParallel's gradient bucket size, MiB, 1..1024 (None: DDP's default, 25);
    world size > 1 only, sampled from DDP's default 25 MiB up. Source: pytorch/pytorch#118421
    ("most users would have to increase it")."""
    gradient_as_bucket_view: bool = field(default=False, metadata=_knob(
        short="gabv", kind="bool", memory="device", data_parallel=True,
        ddp_values=(False, True)))
    """DDP's ``gradient_as_bucket_view``: gradients are views into the allreduce buckets (no
    copy); world size > 1 only. Source: pytorch/pytorch#41954."""
    static_graph: bool = field(default=False, metadata=_knob(
        short="static", kind="bool", memory="none", data_parallel=True,
        ddp_values=(False, True)))
    """DDP's ``static_graph``: the graph is the same every step, which DDP then optimises;
    world size > 1 only."""

    def __post_init__(self) -> None:
        _check_int("batch_size", self.batch_size, 1)
        _check_int("grad_accum", self.grad_accum, 1)
        _check_int("num_workers", self.num_workers, 0)
        for name, info in KNOB_INFO.items():
            value = getattr(self, name)
            if info.kind == "bool" and not isinstance(value, bool):
                raise ValueError(f"knob {name}={value!r}: expected true or false")
            if info.kind == "choice" and value not in info.choices:
                raise ValueError(f"knob {name}={value!r}: accepted values are "
                                 f"{', '.join(info.choices)}")
        if self.data_path == "device" and any(getattr(self, n) for n in _DEVICE_PATH_OFF):
            raise ValueError(
                f"knob data_path=device takes no DataLoader (num_workers={self.num_workers}, "
                f"pin_memory={_fmt(self.pin_memory)}): it needs num_workers=0 and "
                "pin_memory=false")
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
        if self.ddp_bucket_cap_mb is not None:
            _check_int("ddp_bucket_cap_mb", self.ddp_bucket_cap_mb, 1, 1024)

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

    def updated(self, changes: Mapping[str, Any]) -> tuple["Knobs", list[str]]:
        """These knobs with ``changes`` (knob name -> value, e.g. ``--knobs`` JSON) applied.
        A knob of these that no longer applies after the changes goes back to its default
        unless ``changes`` sets it too: the worker-only knobs (``KnobInfo.needs_workers``:
        ``prefetch_factor``, ``persistent_workers``) when ``num_workers`` becomes 0, and
        ``num_workers`` and ``pin_memory`` when ``data_path`` becomes 'device'.

        Returns:
            The knobs, and 'name=value' (the value dropped) of each knob put back.

        Raises:
            ValueError: an unknown knob, or a value or combination not accepted (as ``Knobs``).
        """
        merged = {**self.to_dict(), **changes}
        dropped = []
        if merged.get("data_path") == "device":  # no DataLoader: its knobs go back too
            for name in _DEVICE_PATH_OFF:
                if name not in changes and merged[name]:
                    dropped.append(f"{name}={_fmt(merged[name])}")
                    merged[name] = 0 if name == "num_workers" else False
        if merged.get("num_workers") == 0:
            defaults = {f.name: f.default for f in fields(Knobs)}
            for name in WORKER_KNOBS:
                if name not in changes and merged[name] != defaults[name]:
                    dropped.append(f"{name}={_fmt(merged[name])}")
                    merged[name] = defaults[name]
        return Knobs.from_dict(merged), dropped

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
            for name, info in KNOB_INFO.items():  # KnobInfo.cuda_only / cpu_values say what
                value = getattr(self, name)
                if info.cuda_only and value:
                    changes[name] = False
                elif isinstance(value, str) and value in info.cpu_values:
                    changes[name] = info.cpu_values[value]
        elif device_type == "cuda":
            if self.amp == "bf16" and not bf16_supported:
                changes["amp"] = "fp16"
        else:
            raise ValueError(f"device {device_type!r}: accepted values are cpu, cuda")
        notes = [f"{k}: {_fmt(getattr(self, k))} -> {_fmt(v)} ({device_type})"
                 for k, v in changes.items()]
        return (self.replace(**changes) if changes else self), notes

    def ddp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.nn.parallel.DistributedDataParallel`` (besides the
        module and ``device_ids``); DDP's own defaults where a knob is unset."""
        return {"bucket_cap_mb": (DDP_BUCKET_CAP_MB if self.ddp_bucket_cap_mb is None
                                  else self.ddp_bucket_cap_mb),
                "gradient_as_bucket_view": self.gradient_as_bucket_view,
                "static_graph": self.static_graph}

    def dataloader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.utils.data.DataLoader`` (besides dataset/shuffle)."""
        kwargs: dict[str, Any] = {"batch_size": self.batch_size, "num_workers": self.num_workers,
                                  "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["persistent_workers"] = self.persistent_workers
        return kwargs

    def to_python(self, device: str = "cuda", *, scale: str | None = None, workers: int = 0,
                  workload: list[str] | None = None, collate: bool = False) -> str:
        """The knobs as Python to paste into a training script (``tuner.codegen.python_text``:
        the batches of ``data_path``, the model, optimizer and loop; ``model``, ``loss_fn``
        and ``lr`` are the user's, with ``dataset`` for 'loader' and ``data_dir`` for 'cache'
        and 'device'). ``scale``, ``workers``, ``workload`` and ``collate`` are
        ``python_text``'s."""
        from tuner.codegen import python_text  # the text only: codegen imports no tuner module
        return python_text(self, device, scale=scale, workers=workers, workload=workload,
                           collate=collate)




def knob_text(row: dict) -> str:
    """Compact knob summary: 'bs=32 nw=2 pf=2 pw amp=bf16 cl' ('data=cache' where the data
    path is not the loader)."""
    parts = []
    for name in Knobs.names():
        v = row.get(name)
        if v is None or v is False or v == "off" or (name == "grad_accum" and v == 1) \
                or (name == "data_path" and v == "loader"):
            continue
        short = KNOB_INFO[name].short
        parts.append(short if v is True else f"{short}={v}")
    return " ".join(parts)


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"knob {name}={value!r}: expected an integer")
    if value < low or (high is not None and value > high):
        accepted = f">= {low}" if high is None else f"{low}..{high}"
        raise ValueError(f"knob {name}={value}: accepted range is {accepted}")


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


KNOB_INFO: dict[str, KnobInfo] = {f.name: f.metadata["knob"] for f in fields(Knobs)}
"""Each knob's ``KnobInfo``, in declaration order."""

WORKER_KNOBS = tuple(n for n, i in KNOB_INFO.items() if i.needs_workers)
"""Knobs only meaningful with DataLoader workers."""
DDP_KNOBS = tuple(n for n, i in KNOB_INFO.items() if i.data_parallel)

DDP_VALUES = {n: i.ddp_values for n, i in KNOB_INFO.items() if i.data_parallel}
"""Data-parallel knob -> the values a data-parallel run samples (``KnobInfo.ddp_values``)."""

COMPUTE_SWITCHES = tuple(name for name, info in KNOB_INFO.items() if info.kind == "bool"
                         and info.memory != "host" and not info.data_parallel)
"""On/off knobs that change how the model computes, not how data reaches it (``channels_last``,
``cudnn_benchmark``, ``tf32``, ``fused_optimizer``)."""

CUDNN_SHAPE_KNOBS = ("batch_size", "amp", "channels_last")
"""Knobs that give cuDNN's benchmark mode (``cudnn_benchmark``) a new convolution shape, type
or layout, which it autotunes once per process; ``tf32`` sets matmul precision only (cuDNN's
convolutions keep TF32 on: ``tuner.trial.apply.set_global_flags``)."""


def new_cudnn_shapes(configs: Sequence[Mapping[str, Any]]) -> list[bool]:
    """For each configuration (knob name -> value), in the order run: whether it has
    ``cudnn_benchmark`` on at a shape (``CUDNN_SHAPE_KNOBS``) no earlier one had it on at, so
    that cuDNN autotunes it."""
    seen: set[tuple] = set()
    out = []
    for config in configs:
        key = tuple(config.get(k) for k in CUDNN_SHAPE_KNOBS)
        on = bool(config.get("cudnn_benchmark"))
        out.append(on and key not in seen)
        if on:
            seen.add(key)
    return out


DEVICE_PATH_REFUSED = tuple(n for n, i in KNOB_INFO.items() if i.loader_only)
"""The DataLoader's knobs, which the 'device' data path does not use (``KnobInfo.loader_only``)."""

_DEVICE_PATH_OFF = tuple(n for n in DEVICE_PATH_REFUSED if n not in WORKER_KNOBS)
"""Of those, the ones a 'device' knob set must have off itself (num_workers 0, pin_memory
false); the worker-only ones follow from num_workers 0."""
"""DistributedDataParallel's knobs: sampled only in trials of world size > 1."""
CUDA_ONLY_KNOBS = tuple(n for n, i in KNOB_INFO.items() if i.cuda_only)
"""Knobs that do nothing off CUDA: not sampled on CPU (``Knobs.clamp`` turns them off)."""
CUDA_ONLY_VALUES = {n: tuple(i.cpu_values) for n, i in KNOB_INFO.items() if i.cpu_values}
"""Values only CUDA honours, per knob: not sampled on CPU."""
CHOICE_KNOBS = {n: i.choices for n, i in KNOB_INFO.items() if i.kind == "choice"}
"""String knobs and their accepted values."""
HOST_MEMORY_KNOBS = tuple(n for n, i in KNOB_INFO.items() if i.memory == "host")
"""Knobs that change host memory (the DataLoader's workers and buffers), not device memory."""
NO_MEMORY_KNOBS = tuple(n for n, i in KNOB_INFO.items() if i.memory == "none")
"""Knobs that change no memory."""
