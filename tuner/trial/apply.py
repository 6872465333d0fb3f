"""Knob application: what each knob does to torch, in one place.

``Knobs.to_python`` (``tuner.knobs``) is the textual twin of this module: the same knobs as
code a user pastes into a training script. A knob added to ``Knobs`` is applied here.
Used by the trial harness and by ``tuner.trial.validate`` alike, so both train the same way.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import DataLoader

from tuner.knobs import Knobs
from tuner.settings import MemoryLimit, device_limit_mb
from tuner.trial.failures import free_device_memory
from tuner.trial.measure import release_host_memory
from tuner.workload import Workload


def repeat(items: list) -> Iterator:
    """The items, in order, forever (the compute-only ceiling's resident batches)."""
    while True:
        yield from items


def apply_device_limit(max_memory: MemoryLimit | None, device: torch.device) -> float | None:
    """Resolve the device memory limit to MiB and enforce a size below the card's with the
    allocator's per-process memory fraction. None on CPU or without a limit."""
    if max_memory is None or device.type != "cuda":
        return None
    index = _cuda_index(device)
    total_mb = torch.cuda.get_device_properties(index).total_memory / 2**20
    limit_mb = device_limit_mb(max_memory, total_mb)
    torch.cuda.set_per_process_memory_fraction(float(limit_mb / total_mb), index)
    return limit_mb


def release_device_limit(limit_mb: float | None, device: torch.device) -> None:
    if limit_mb is not None:
        torch.cuda.set_per_process_memory_fraction(1.0, _cuda_index(device))


def keep_cpu_trial_off_the_gpus(device_type: str) -> bool:
    """Hide the machine's GPUs from a CPU trial's process (Ray Tune's trial process, which
    runs nothing else): set ``CUDA_VISIBLE_DEVICES`` to empty there, before anything in it
    initialises CUDA. Returns True when it hid them; False for a CUDA trial, or when CUDA is
    already initialised in the process (the setting would do nothing then).

    Ray 2.60 leaves ``CUDA_VISIBLE_DEVICES`` as it is for a task given no GPU
    (ray-project/ray#54868), and torch 2.14's optimizers initialise CUDA at their first step on
    a machine with a GPU, CPU parameters or not
    (``Optimizer._accelerator_graph_capture_health_check`` asks
    ``torch.accelerator.current_stream()`` whether it is capturing; torch 2.11 asked
    ``torch.cuda.is_current_stream_capturing()``, which does not). A ``--device cpu`` trial on a GPU
    machine would then hold a CUDA context: start-up time, memory on the card, and a process
    on it that the CUDA trials of another run count as load."""
    if device_type != "cpu" or torch.cuda.is_initialized():
        return False
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    return True


def _cuda_index(device: torch.device) -> int:
    """The device's index: ``torch.device("cuda")`` (what a trial on its one assigned GPU
    holds) means the current device. ``set_per_process_memory_fraction`` takes an index or an
    indexed device only: given ``cuda`` it raises ``ValueError``."""
    return device.index if device.index is not None else torch.cuda.current_device()


@dataclass
class Training:
    """Model, optimizer and precision of one configuration, ready to train: the knobs applied
    exactly once, for the harness and for ``tuner.trial.validate`` alike."""
    workload: Workload
    knobs: Knobs
    model: torch.nn.Module
    """The module as built (parameters live here)."""
    step_model: torch.nn.Module
    """What the training step calls: ``model``, or ``torch.compile(model)``; with data
    parallelism the ``DistributedDataParallel`` around ``model`` (compiled or not)."""
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    autocast: Callable
    ddp: Any = None
    """The ``DistributedDataParallel`` module in a data-parallel trial, else None."""

    def sync(self, last: bool) -> contextlib.AbstractContextManager:
        """The context of one micro-batch's forward and backward: with DDP, gradients are
        all-reduced on the ``last`` micro-batch of a step only (``no_sync`` before it)."""
        return (self.ddp.no_sync() if self.ddp is not None and not last
                else contextlib.nullcontext())

    def forward(self, batch: Any) -> torch.Tensor:
        """Loss of one micro-batch already on the device, scaled for gradient accumulation."""
        with self.autocast():
            return self.workload.training_step(self.step_model, batch) / self.knobs.grad_accum

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self) -> None:
        """Optimizer step (through the GradScaler with fp16) and gradients reset."""
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def build_training(workload: Workload, knobs: Knobs, scale: str, device: torch.device,
                   data_parallel: bool = False) -> Training:
    """Build the model on ``device`` with channels_last, the optimizer (fused or not),
    torch.compile and AMP as the knobs say. ``knobs`` must already be clamped to the device.
    With ``data_parallel`` (a process group initialised: one rank of a data-parallel trial)
    the model is wrapped in ``DistributedDataParallel`` with the knobs' DDP settings, before
    torch.compile as PyTorch's DDP notes advise."""
    model = workload.build_model(scale).to(device)
    if knobs.channels_last:
        model._apply(to_channels_last)
    optimizer = workload.build_optimizer(model.parameters(), knobs.fused_optimizer)
    ddp = None
    if data_parallel:
        from torch.nn.parallel import DistributedDataParallel
        ddp = DistributedDataParallel(
            model, device_ids=[_cuda_index(device)] if device.type == "cuda" else None,
            **knobs.ddp_kwargs())
    wrapped = model if ddp is None else ddp
    step_model = wrapped if knobs.compile == "off" else torch.compile(
        wrapped, mode=None if knobs.compile == "default" else knobs.compile)
    scaler = torch.amp.GradScaler(device.type) if knobs.amp == "fp16" else None
    autocast = (
        contextlib.nullcontext
        if knobs.amp == "off"
        else partial(
            torch.autocast,
            device.type,
            dtype=torch.float16 if knobs.amp == "fp16" else torch.bfloat16,
        )
    )
    model.train()
    return Training(workload, knobs, model, step_model, optimizer, scaler, autocast, ddp)


class Cycle:
    """Batches forever, epoch after epoch, as a training loop sees them: without persistent
    workers each epoch starts its workers again. ``iterator`` is the epoch's DataLoader
    iterator (its prefetch queue: ``tuner.trial.prefetch``). Closing it shuts workers down."""

    def __init__(self, loader: DataLoader):
        self.loader = loader
        self.iterator: Iterator | None = None
        self._batches = self._epochs()

    def _epochs(self) -> Iterator:
        try:
            while True:
                self.iterator = iter(self.loader)  # with persistent_workers, the same one reset
                yield from self.iterator
        finally:
            if self.iterator is not None and hasattr(self.iterator, "_shutdown_workers"):
                self.iterator._shutdown_workers()

    def __iter__(self) -> "Cycle":
        return self

    def __next__(self) -> Any:
        return next(self._batches)

    def close(self) -> None:
        self._batches.close()


def cycle(loader: DataLoader) -> Cycle:
    """The DataLoader's batches forever (``Cycle``)."""
    return Cycle(loader)


def to_channels_last(t: torch.Tensor) -> torch.Tensor:
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t


def move_batch(batch: Any, device: torch.device, knobs: Knobs) -> Any:
    """Move every tensor of a (nested) batch; 4-D/5-D float inputs get channels_last(_3d)."""
    if isinstance(batch, torch.Tensor):
        t = batch.to(device, non_blocking=knobs.non_blocking)
        return to_channels_last(t) if knobs.channels_last and t.is_floating_point() else t
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_batch(b, device, knobs) for b in batch)
    if isinstance(batch, dict):
        return {k: move_batch(v, device, knobs) for k, v in batch.items()}
    return batch


CUDNN_ALLOW_TF32_DEFAULT = True
"""torch's default for ``torch.backends.cudnn.allow_tf32``: cuDNN convolutions use TF32 in a
script that never touches the flag (the references' "before"), while matmuls do not
(``torch.backends.cuda.matmul.allow_tf32`` defaults to False)."""

FP32_PRECISION_SETTINGS = ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn",
                           "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")
"""Where torch >= 2.9 keeps its per-backend ``fp32_precision`` ("ieee", "tf32", "bf16" or
"none"), under ``torch.backends``; "" is ``torch.backends.fp32_precision`` itself."""


@dataclass(frozen=True)
class PrecisionFlags:
    """torch's process-wide cuDNN and fp32-precision settings, as ``read_precision_flags``
    found them.

    torch >= 2.9 keeps two states side by side: the legacy one (``allow_tf32``,
    ``set_float32_matmul_precision``) and the per-backend ``fp32_precision``. The legacy
    setters update both; the ``fp32_precision`` setters only the new one, after which torch
    raises on a legacy read ("you have used mix of the legacy and new APIs") where the two
    disagree: a script that follows the TF32 notes of torch 2.9's documentation
    (``torch.backends.cudnn.conv.fp32_precision = "ieee"``) makes
    ``torch.backends.cudnn.allow_tf32`` raise. The legacy readings are therefore None where
    torch refuses them; the new ones are always readable."""
    cudnn_benchmark: bool
    matmul_precision: str | None
    """``torch.get_float32_matmul_precision()``: "highest", "high" or "medium"."""
    cudnn_allow_tf32: bool | None
    fp32_precision: tuple[tuple[str, str], ...]
    """(setting, value) for each of ``FP32_PRECISION_SETTINGS``; empty before torch 2.9."""


def _fp32_precision_owner(setting: str) -> Any:
    owner: Any = torch.backends
    for part in filter(None, setting.split(".")):
        owner = getattr(owner, part, None)
    return owner if hasattr(owner, "fp32_precision") else None


def _unless_refused(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except RuntimeError:         # torch's check against mixed legacy and new settings
        return None


def read_precision_flags() -> PrecisionFlags:
    """The settings as they are now; never raises (see ``PrecisionFlags``)."""
    return PrecisionFlags(
        cudnn_benchmark=torch.backends.cudnn.benchmark,
        matmul_precision=_unless_refused(torch.get_float32_matmul_precision),
        cudnn_allow_tf32=_unless_refused(lambda: torch.backends.cudnn.allow_tf32),
        fp32_precision=tuple((s, owner.fp32_precision) for s in FP32_PRECISION_SETTINGS
                             if (owner := _fp32_precision_owner(s)) is not None))


def write_precision_flags(flags: PrecisionFlags) -> None:
    """Put back what ``read_precision_flags`` read: the legacy settings first (their setters
    also write the new ones: ``set_float32_matmul_precision("medium")`` sets
    ``mkldnn.matmul`` to "bf16"), then every ``fp32_precision`` exactly as it was. A legacy
    setting torch refused to read is left as the trial set it."""
    torch.backends.cudnn.benchmark = flags.cudnn_benchmark
    if flags.matmul_precision is not None:
        torch.set_float32_matmul_precision(flags.matmul_precision)
    if flags.cudnn_allow_tf32 is not None:
        torch.backends.cudnn.allow_tf32 = flags.cudnn_allow_tf32
    for setting, value in flags.fp32_precision:
        _fp32_precision_owner(setting).fp32_precision = value


def set_global_flags(knobs: Knobs, device: torch.device) -> Callable[[], None]:
    """Apply process-wide torch flags for this trial; return a function restoring them (a Ray
    actor may run the next trial in the same process). ``tf32`` turns TF32 matmuls on; cuDNN
    convolutions keep torch's default (TF32 on) either way, so a configuration without the knob
    runs as the user's untouched script does: turning convolutions' TF32 off too would make a
    conv net's baseline slower than the user's and its speed-ups look larger.

    Matmul TF32 is set with ``torch.set_float32_matmul_precision("high")`` ("highest" without
    the knob), cuDNN's with ``torch.backends.cudnn.allow_tf32``, on purpose: in torch 2.9-2.14
    these write the legacy and the ``fp32_precision`` state of every backend they concern
    alike, so every reader agrees inside the trial. ``torch.backends.cuda.matmul.fp32_precision
    = "tf32"`` alone, or ``torch.backends.cuda.matmul.allow_tf32`` after a script's
    ``set_float32_matmul_precision("medium")`` (which also set CPU matmuls, ``mkldnn.matmul``,
    to "bf16"), would make ``torch.get_float32_matmul_precision()`` raise: Lightning's CUDA
    accelerator calls it at set-up. The flags are read and put back through
    ``read_precision_flags`` and ``write_precision_flags``, which a script's own
    ``fp32_precision`` settings cannot make raise."""
    saved = read_precision_flags()
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = knobs.cudnn_benchmark
        torch.set_float32_matmul_precision("high" if knobs.tf32 else "highest")
        torch.backends.cudnn.allow_tf32 = CUDNN_ALLOW_TF32_DEFAULT
    return partial(write_precision_flags, saved)


@dataclass(frozen=True)
class TrialState:
    """What ``trial_state`` put in effect."""
    limit_mb: float | None
    """The device memory limit in MiB (None: no limit, or the CPU device)."""
    threads: int
    """Torch intra-op threads of this process."""
    omp_num_threads: int | None = None
    """This process's ``OMP_NUM_THREADS`` (``omp_num_threads``; None: unset or not a number)."""


def omp_num_threads() -> int | None:
    """This process's ``OMP_NUM_THREADS`` as a number; None when it is unset or not a positive
    integer (OpenMP then picks its own count)."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


COMPILE_CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
"""The environment variables through which torch.compile finds its on-disk caches: Inductor's
(FX-graph and AOTAutograd caches, generated code) and Triton's compiled kernels."""


@contextlib.contextmanager
def compile_cache(directory: str | None) -> Iterator[None]:
    """torch.compile's on-disk caches in ``directory`` while the block runs: Inductor's in it
    (``TORCHINDUCTOR_CACHE_DIR``), Triton's in ``triton/`` inside it (``TRITON_CACHE_DIR``);
    the directory is created when missing. Inductor's in-memory caches of its cache paths are
    cleared on enter and on exit (``torch._inductor.utils.clear_caches``, as torch's own
    ``temporary_cache_dir`` does), and both variables are put back on exit, so a Ray worker
    reused by another run, or the CLI process of ``validate`` and ``profile``, compiles into
    the directory its settings name. Compile workers started inside the block inherit it.
    None: nothing changes (torch's default, a per-user temporary directory)."""
    if directory is None:
        yield
        return
    root = os.path.abspath(directory)
    os.makedirs(root, exist_ok=True)
    saved = {name: os.environ.get(name) for name in COMPILE_CACHE_ENV}
    os.environ.update(TORCHINDUCTOR_CACHE_DIR=root, TRITON_CACHE_DIR=os.path.join(root, "triton"))
    _clear_compile_caches()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _clear_compile_caches()


COMPILE_RECORDS = 4096
"""Compilations torch._dynamo keeps a record of (``get_compilation_metrics``) in a compiled
trial's process; torch's own default, 64, would cut a recompile count off."""


def reset_compile_counts() -> None:
    """Zero torch._dynamo's counters (``torch._dynamo.utils.counters``) and its records of
    compilations, and keep up to ``COMPILE_RECORDS`` of them, so that
    ``tuner.trial.result_columns.compile_columns`` counts one trial's recompiles (a Ray worker
    may have compiled an earlier trial)."""
    from torch._dynamo import utils
    utils.counters.clear()
    if hasattr(utils, "set_compilation_metrics_limit"):  # absent in older torch
        utils.set_compilation_metrics_limit(COMPILE_RECORDS)
    utils.clear_compilation_metrics()


def _clear_compile_caches() -> None:
    from torch._inductor.utils import clear_caches
    clear_caches()


@contextlib.contextmanager
def trial_state(knobs: Knobs, device: torch.device, *, threads: int | None = None,
                max_memory: MemoryLimit | None = None,
                compile_cache_dir: str | None = None) -> Iterator[TrialState]:
    """The process-wide state of one training run, set on enter and put back on exit (also
    after an exception: a Ray actor may run the next trial in the same process).

    Sets the knobs' global torch flags, ``threads`` intra-op threads on the CPU device (None:
    leave torch's setting) and the device memory limit. On exit it releases the limit,
    restores the flags and threads, resets the compiler caches when the knobs compiled, and
    frees cached device memory and host heap memory. ``knobs`` must be clamped to the device.
    With compile on, torch.compile's caches live in ``compile_cache_dir`` meanwhile
    (``compile_cache``; None: torch's default directory), and dynamo's counts start from zero
    (``reset_compile_counts``).
    """
    with compile_cache(compile_cache_dir if knobs.compile != "off" else None):
        yield from _flags_threads_limit(knobs, device, threads, max_memory)


def _flags_threads_limit(knobs: Knobs, device: torch.device, threads: int | None,
                         max_memory: MemoryLimit | None) -> Iterator[TrialState]:
    """``trial_state`` inside its compile cache: flags, threads and memory limit set, then
    put back (the compiler reset while the cache directory still holds)."""
    restore_flags = set_global_flags(knobs, device)
    saved_threads = torch.get_num_threads()
    limit_mb = None
    if knobs.compile != "off":
        reset_compile_counts()
    try:
        if threads is not None and device.type == "cpu":
            torch.set_num_threads(threads)
        limit_mb = apply_device_limit(max_memory, device)
        with warnings.catch_warnings():
            # torch warns when num_workers exceeds the cores it sees; trying that is the point.
            warnings.filterwarnings("ignore", message=r"This DataLoader will create \d+ worker",
                                    category=UserWarning)
            yield TrialState(limit_mb=limit_mb, threads=torch.get_num_threads(),
                             omp_num_threads=omp_num_threads())
    finally:
        release_device_limit(limit_mb, device)
        restore_flags()
        torch.set_num_threads(saved_threads)
        if knobs.compile != "off":
            torch.compiler.reset()
        free_device_memory()
        release_host_memory()
