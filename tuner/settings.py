"""Run and trial settings, the accepted values of every option, and memory-limit parsing.

Torch-free on purpose: the CLI builds its choices from here without loading torch (``--help``
stays fast), and the driver builds ``TrialSettings`` without importing the trial harness.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, get_args

import tuner._deprecated as deprecation
from tuner._deprecated import moved
from tuner.errors import TunerError

VERSION = "0.3.0.dev0"
"""tuner's version (``tuner.__version__``; pyproject.toml says the same), recorded in every
leaderboard row."""

Scale = Literal["full", "tiny"]
Device = Literal["auto", "cpu", "cuda"]
DeviceType = Literal["cpu", "cuda"]
Sampler = Literal["gp", "tpe", "random"]
Objective = Literal["samples-per-sec", "time-to-train"]
ProbeMode = Literal["auto", "on", "off"]

SCALES: tuple[str, ...] = get_args(Scale)
"""``full``: the workload's full-size model, samples and data (the default on CUDA). ``tiny``:
the same architecture, small enough for a 2-core CPU (the default on CPU)."""

OLD_SCALES = {"seed": "full"}
"""Scale words deprecated in tuner 0.3.0 and removed in 0.4.0 -> the scale they name. The
leaderboard reads rows written with them as the new word (``tuner.leaderboard.read``)."""

DEVICES: tuple[str, ...] = get_args(Device)
"""Accepted ``--device`` values; 'auto' is CUDA when torch sees a device, else CPU."""

DEVICE_TYPES: tuple[str, ...] = get_args(DeviceType)
"""Device types a trial runs on (``TrialSettings.device``)."""

PROBE_MODES: tuple[str, ...] = get_args(ProbeMode)
"""Accepted ``--probe`` values."""

SAMPLERS: tuple[str, ...] = get_args(Sampler)
"""Accepted ``--sampler`` values (built by ``tuner.searcher.make_sampler``)."""

OBJECTIVES = {"samples-per-sec": ("samples_per_sec", "max"),
              "time-to-train": ("time_to_train_s", "min")}
"""``--objective`` -> (leaderboard column, direction)."""
assert tuple(OBJECTIVES) == get_args(Objective)


PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")
"""Phases of the per-step breakdown (leaderboard columns ``<phase>_ms`` and ``<phase>_pct``)."""

MEASUREMENT_DEFAULTS = {
    # scale: (warm-up optimizer steps, windows, seconds per window)
    # tiny (the CPU default): one warm-up step for the one-time costs, then windows that judge
    # the steady state themselves (a transient first window is dropped: tuner.windows); the
    # measured share of a default CPU run's time per setting is in docs/defaults.md.
    "tiny": (1, 3, 2.0),
    "full": (10, 5, 2.0),
}

def default_scale(device: str) -> str:
    """The scale a run measures at when none is given: 'full' on CUDA, 'tiny' on any other
    device type (a 2-core CPU trains the full-size models too slowly to search)."""
    return "full" if device == "cuda" else "tiny"


def scale_word(scale: str, *, stacklevel: int = 2) -> str:
    """``scale`` with a deprecated word (``OLD_SCALES``: 'seed') replaced by the scale it names,
    after a ``TunerDeprecationWarning`` reported at the line ``stacklevel`` frames up (2: the line
    that called ``scale_word``); any other value unchanged (the caller checks it)."""
    if scale in OLD_SCALES:
        deprecation.warn(f"scale {scale!r}", f"use {OLD_SCALES[scale]!r} (the same scale)",
                         stacklevel=stacklevel)
        return OLD_SCALES[scale]
    return scale


def check_scale(scale: str) -> str:
    """``scale`` as one of ``SCALES``: the one check of a scale every workload and setting makes
    (the deprecated 'seed' reads 'full', with a warning from ``scale_word``).

    Raises:
        ValueError: any other value; the message lists the accepted scales.
    """
    scale = scale_word(scale, stacklevel=4)   # the line that called check_scale's caller
    if scale not in SCALES:
        raise ValueError(f"scale {scale!r}: accepted scales are {', '.join(SCALES)}")
    return scale


@dataclass(frozen=True)
class MemoryLimit:
    """A memory limit as the user gave it, parsed once: a fraction of the memory there is, or
    a size in MiB (2**20 bytes). Resolve it against a device or machine with ``resolve_mib``."""

    fraction: float | None = None
    """Fraction in (0, 1] of the device's (or machine's) memory; None when a size was given."""
    mib: float | None = None
    """Size in MiB; None when a fraction was given."""
    text: str | None = field(default=None, compare=False)
    """What the user typed ('12GB'), for messages; None for a limit built in code."""

    @classmethod
    def parse(cls, text: str) -> "MemoryLimit":
        """'0.9' (a fraction) or a size: '12GB' (10**9 bytes), '12GiB' or '12g' (2**30),
        '500MB', '500MiB'. Raises ValueError naming the text and the accepted forms."""
        fraction, mib = parse_memory(text)
        return cls(fraction=fraction, mib=mib, text=str(text).strip())

    @classmethod
    def coerce(cls, value: "MemoryLimit | str | Mapping | None") -> "MemoryLimit | None":
        """A limit from what a caller holds: itself, None, the text a user typed, or the dict
        ``dataclasses.asdict`` made of it (Ray Tune configs carry settings as dicts)."""
        if value is None or isinstance(value, MemoryLimit):
            return value
        if isinstance(value, Mapping):
            return cls(**value)
        return cls.parse(value)

    def resolve_mib(self, total_mib: float) -> float:
        """The limit in MiB on a device (or machine) of ``total_mib`` MiB; a size larger than
        the total is the total."""
        return self.fraction * total_mib if self.fraction is not None else min(self.mib, total_mib)

    def __str__(self) -> str:
        return f"{self.fraction:g}" if self.fraction is not None else f"{self.mib:,.0f} MiB"


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What ``python -m tuner run`` was asked to do (the CLI's flags), validated on
    construction.

    Raises:
        TunerError: a value out of range or not accepted; the message names the flag, the
            value and what is accepted.
    """
    workload: Any
    """A built-in name, an import path ('pkg.module:attribute', 'file.py:attribute'), or a
    ``tuner.workload.Workload`` instance (the Python API, ``tuner.tune``)."""
    workload_options: Mapping[str, Any] = field(default_factory=dict)
    """Options the workload is configured with (``Workload.configure``): 'model' (--model, a
    non-empty name) and 'image_size' (--image-size, pixels >= 1); None values are dropped.
    Whether the workload takes them is checked where it is resolved (``tuner.option_checks``)."""
    space_file: str | None = None
    trials: int | None = None
    """Trials in all, references included; None: 12 on CPU, 40 on CUDA, three times that when
    searched trials are screened (``screen_windows``), or until the time budget."""
    time_budget_s: float | None = None
    """Seconds the whole run may take (probe, search, re-measurement and ceilings; it ends
    within ``tuner.budget.BUDGET_GRACE_S`` more); None: ``tuner.budget.default_time_budget_s``
    (10 min on CUDA; on CPU 210 s for the default run, none with ``trials``)."""
    device: Device = "auto"
    scale: Scale | None = None
    """None: ``default_scale(device)``, 'full' on CUDA, 'tiny' on CPU. The old word 'seed' reads
    'full' with a ``TunerDeprecationWarning`` until tuner 0.4.0."""
    data: str | None = None
    results: str = "tuner-results"
    seed: int = 0
    sampler: Sampler = "gp"
    """Search sampler: 'gp' (Optuna's GPSampler), 'tpe' or 'random' (tuner.searcher)."""
    address: str | None = None
    windows: int | None = None
    window_s: float | None = None
    warmup_steps: int | None = None
    objective: Objective = "samples-per-sec"
    """'samples-per-sec' (steady-state throughput, max) or 'time-to-train' (predicted wall time
    of ``train_steps`` steps including setup, warm-up and compile, min)."""
    train_steps: int | None = None
    max_memory: MemoryLimit | None = None
    """Device memory limit: fraction ('0.9') or size ('12GB'), see TrialSettings.max_memory.
    Given as text or a MemoryLimit; held as a MemoryLimit. A size above the GPU's memory is
    refused, and on the CPU device it is a note (``tuner.option_checks.check_limits``)."""
    max_host_memory: MemoryLimit | None = None
    """Host memory limit per trial (process + DataLoader workers): size ('8GB') or fraction of
    this machine's RAM; a size above the RAM is refused (``tuner.option_checks.check_limits``)."""
    global_batch_size: int | None = None
    probe: ProbeMode = "auto"
    """Memory probe before the search: 'auto' (on CUDA, or with --max-host-memory), 'on', 'off'."""
    confirm: int = 3
    """Re-measure this many of the best configurations with twice the windows; the winner is
    chosen on the re-measurement (0 turns it off)."""
    screen_windows: int = 1
    """Windows of a searched configuration's screening trial, the machine's structured points
    included (the references get the full ``windows``): many configurations are screened
    cheaply and the ``confirm`` best get the full measurement in the interleaved
    re-measurement. 0, or ``confirm`` 0 (no finalists), screens nothing: every searched
    trial measures the full windows."""
    resume: str | None = None
    """Continue a run: 'latest' (the newest run of this workload in --results) or a run id.
    Its leaderboard rows are the truth: the search state is rebuilt from them, references and
    trials already recorded are not run again, only the rest of the --trials budget runs."""
    warm_start: bool = False
    """Seed the search with earlier leaderboard rows of this workload, scale and hardware."""
    remeasure: bool = False
    """With warm_start: measure a configuration again even when an earlier row has it (without
    warm_start it does nothing, and is refused)."""
    ceiling: bool = True
    """Measure the winner's compute-only ceiling (batches already on the device)."""
    early_stop: bool = True
    """Stop a search trial after a window when it is clearly slower than the best so far
    (``tuner.pruning.EarlyStopping``); its row is ``pruned`` with the windows it measured."""
    peak_tflops: float | None = None
    """The card's dense peak TFLOP/s for MFU, for a card ``tuner.trial.flops`` does not know (or to
    override its table)."""
    world_size: int = 1
    """Ranks of each trial's data-parallel training (one GPU each on CUDA, one process each on
    CPU; ``tuner.trial.distributed``). 1: single-process trials."""
    gpu_hour_cost: float | None = None
    """Price of one GPU-hour (any currency): ``best`` and the summary turn throughput into the
    cost of a million samples at each world size."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "workload_options", _workload_options(self.workload_options))
        _check_choice("--device", self.device, DEVICES)
        if self.scale is not None:
            object.__setattr__(self, "scale", scale_word(self.scale, stacklevel=4))
            _check_choice("--scale", self.scale, SCALES)
        _check_choice("--sampler", self.sampler, SAMPLERS)
        _check_choice("--objective", self.objective, tuple(OBJECTIVES))
        _check_choice("--probe", self.probe, PROBE_MODES)
        for flag, value, low in (
            ("--trials", self.trials, 1),
            ("--train-steps", self.train_steps, 1),
            ("--global-batch-size", self.global_batch_size, 1),
            ("--windows", self.windows, 1),
            ("--warmup-steps", self.warmup_steps, 1),
            ("--confirm", self.confirm, 0),
            ("--world-size", self.world_size, 1),
            ("screen_windows", self.screen_windows, 0),
        ):
            if value is not None and value < low:
                raise TunerError(f"{flag} {value}: must be >= {low}")
        for flag, value in (("--time-budget", self.time_budget_s), ("--window-s", self.window_s),
                            ("--peak-tflops", self.peak_tflops),
                            ("--gpu-hour-cost", self.gpu_hour_cost)):
            if value is not None and value <= 0:
                unit = "" if flag == "--gpu-hour-cost" else " seconds"
                raise TunerError(f"{flag} {value}: must be > 0{unit}")
        if self.objective == "time-to-train" and not self.train_steps:
            raise TunerError("--objective time-to-train needs --train-steps N (the length of "
                             "your real training job, in optimizer steps)")
        for flag, name in (
            ("--max-memory", "max_memory"),
            ("--max-host-memory", "max_host_memory"),
        ):
            try:
                object.__setattr__(self, name, MemoryLimit.coerce(getattr(self, name)))
            except (ValueError, TypeError) as exc:
                raise TunerError(f"{flag}: {exc}") from None
        if self.remeasure and not self.warm_start:
            raise TunerError("--remeasure does nothing without --warm-start (it measures again "
                             "configurations that earlier rows already have): add --warm-start "
                             "or leave --remeasure out")

    @property
    def metric(self) -> str:
        """The leaderboard column the objective reads ('samples_per_sec', 'time_to_train_s')."""
        return OBJECTIVES[self.objective][0]

    @property
    def mode(self) -> str:
        """'max' or 'min'."""
        return OBJECTIVES[self.objective][1]


def _workload_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` without None values, checked: names are identifiers, 'model' (--model) a
    non-empty string, 'image_size' (--image-size) an int >= 1. Raises TunerError naming the
    flag."""
    given = {k: v for k, v in (options or {}).items() if v is not None}
    for name in given:
        if not isinstance(name, str) or not name.isidentifier():
            raise TunerError(f"workload option {name!r}: a name such as 'model' or 'image_size'")
    model = given.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise TunerError(f"--model {model!r}: give an architecture name such as resnet50")
    size = given.get("image_size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise TunerError(f"--image-size {size!r}: must be a whole number of pixels >= 1")
    return given


def _check_choice(flag: str, value: Any, accepted: tuple) -> None:
    if value not in accepted:
        raise TunerError(f"{flag} {value!r}: accepted values are {', '.join(accepted)}")



@dataclass(frozen=True, kw_only=True)
class TrialSettings:
    """How one trial measures (the same for every trial of a run)."""

    scale: Scale
    """'full' (the workload's full size) or 'tiny' (CPU-test size)."""
    device: DeviceType
    """'cpu' or 'cuda' (the GPU Ray assigned to the trial)."""
    data_dir: str
    """Dataset path given to ``Workload.build_dataset``."""
    warmup_steps: int = 5
    """Optimizer steps run before measuring (compile and autotuning happen here), >= 1."""
    windows: int = 5
    """Measurement windows, >= 1; samples/sec is their median."""
    window_s: float = 1.0
    """Minimum wall time of one window, seconds (a window ends on the first step past it)."""
    seed: int = 0
    """Seed for torch (model init, augmentation, shuffling)."""
    steady_tolerance: float = 0.10
    """Steady state: with two or more windows, the first window kept is dropped as warm-up
    (one more measured) while its samples/sec differs from the median of the others by more
    than this fraction, on the same side of them as the windows dropped before it (a
    transient's side: ``tuner.windows.windows_stand``); with one window, warm-up goes on past
    ``warmup_steps`` in synchronised probes of half a window until two consecutive ones
    differ by at most this fraction. A run
    gives each trial the larger of this and what its machine's window noise so far calls for
    (``tuner.windows.steady_tolerance``)."""
    max_steady_probes: int = 6
    """At most this many windows dropped (or probes run), within ``max_warmup_s``; a trial
    that never settles (or whose windows alternate around each other beyond the tolerance,
    which is noise, not a transient to drop) is measured anyway and recorded with
    ``steady_state`` false. 0: no
    steady-state judgement (``steady_state`` null)."""
    breakdown_steps: int = 3
    """Synchronised steps, after the windows, timed per phase (data wait, host-to-device,
    forward, backward, optimizer) on CUDA; on CPU (nothing to synchronise) any number above 0
    times the windows' own steps instead; 0 turns the breakdown off."""
    compute_only: bool = False
    """Compute-only ceiling: cycle a few batches already on the device instead of the
    DataLoader (the throughput a perfect input pipeline would give)."""
    resident_batches: int = 4
    """Batches the compute-only mode moves to the device once and cycles: 4 for the
    compute-only ceiling (a step never reuses the batch it just trained on), 1 for the memory
    probe (it needs one step's memory, not the loader's cost of reading four batches)."""
    loader_only: bool = False
    """Loader-only ceiling: the configuration's DataLoader and host-to-device copy, no model
    (the samples/sec its input pipeline can feed)."""
    sample_limit: int | None = None
    """Samples the trial reads: the first this many of the dataset (the memory probe's input
    rates: a rate per sample needs a few batches, not an epoch or a cache fill of the whole
    dataset; ``tuner.probe.measure_input``). None: every sample."""
    keep_cache: bool = False
    """Keep the decoded cache a 'cache' or 'device' trial filled in its process, for the next
    trial of the same workload, data and scale there (``tuner.trial.steppers.kept_cache``): a
    reused trial process skips the decoding pass it paid for already. The row's
    ``cache_fill_s`` stays the fill's seconds, counted in the time-to-train objective as a
    fresh job pays it. Off where host memory is limited (each trial then has a fresh process
    anyway)."""
    ceiling: str | None = None
    """Which ceiling the trial measures, recorded in its row: 'compute' / 'loader' (the
    winner's, its knobs unchanged), 'machine-compute' / 'machine-loader' (this machine's: the
    largest batch in the fastest precision; every CPU a trial may have as workers),
    'path-loader' (another data path's best configuration), 'core-compute' / 'core-loader'
    (on one core, ``cpus`` 1); ``tuner.ceilings`` reads them. None: a training configuration."""
    cpus: int | None = None
    """CPUs the trial uses in place of those it was given (its training process then runs
    ``tuner.trial.harness.training_threads`` of them): 1 for the one-core ceilings. None: all it
    was given."""
    world_size: int = 1
    """Ranks of the trial's data-parallel training (``tuner.trial.distributed``): one process each,
    with one GPU each on CUDA; every rank runs the micro-batch. 1: one process, no DDP."""
    rank_cpus: int | None = None
    """CPUs each rank of a data-parallel trial asks Ray for (its DataLoader workers and its
    training threads share them); None with world size 1."""
    max_memory: MemoryLimit | None = None
    """Device memory limit: a fraction ('0.9') or a size ('12GB'). A size below the card's is
    enforced with the allocator's per-process fraction, so a big card OOMs where a small one
    would; a trial whose peak (allocator + CUDA context) exceeds it ends ``over_limit``."""
    max_host_memory_mb: float | None = None
    """Host memory limit for the trial process plus its DataLoader workers (peak PSS), MiB; a
    trial over it stops with status ``over_limit``."""
    train_steps: int | None = None
    """Steps of the user's real job, to predict ``time_to_train_s`` (setup, warm-up and
    compile included)."""
    accelerator_type: str | None = None
    """Ray accelerator type the trial is pinned to on a heterogeneous cluster; appended to the
    hardware key ("...@A10G") so each type has its own leaderboard and best."""
    model_flops_per_sample: float | None = None
    """Forward + backward FLOP of one training sample (``tuner.trial.flops``), counted once per run;
    None where it could not be counted."""
    conv_flops_share: float | None = None
    """The convolutions' share (0-1) of ``model_flops_per_sample`` (``tuner.trial.flops``): the MFU
    of a CUDA trial in FP32 judges it against the TF32 peak (cuDNN's default)."""
    peak_tflops: float | None = None
    """Dense peak TFLOP/s to compute MFU against instead of ``tuner.trial.flops``' table
    (--peak-tflops)."""
    default_data: bool = False
    """``data_dir`` is the workload's embedded default: a node that lacks it (a cluster worker)
    writes it to its own cache first (deterministic, so every node trains on the same data)."""
    deadline_unix_s: float | None = None
    """Wall-clock time (``time.time()``, s) the trial must stop by: at the first step boundary
    past it the trial ends ``timeout`` with the windows it finished (``Plan.with_deadline``
    sets it from the run's time budget; None: no deadline)."""
    max_warmup_s: float | None = None
    """Seconds the warm-up may take after its first step (which holds compile and autotuning,
    recorded as ``first_step_s``): warm-up steps, steady-state probes and windows dropped as
    transients stop there (a window is dropped only while the cap holds it and the one
    measured in its place). None: twice the measurement's length, ``2 * windows * window_s``."""
    compile_cache_dir: str | None = None
    """Directory of torch.compile's on-disk caches for this trial (Inductor's FX-graph and
    AOTAutograd caches, its generated code, and Triton's kernels in ``triton/`` inside it):
    ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` point there while a compiled trial
    runs (``tuner.trial.apply.compile_cache``), so every trial process of a run, and later runs
    into the same results folder, reuse what an earlier trial compiled. A run's plan sets
    ``compile_cache_path(results)``; None: torch's own default (a per-user temporary
    directory, which a process with another ``TMPDIR`` does not share)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_scale(self.scale))
        if self.device not in DEVICE_TYPES:
            raise ValueError(
                f"device {self.device!r}: accepted values are {', '.join(DEVICE_TYPES)}"
            )
        if self.warmup_steps < 1 or self.windows < 1 or self.window_s <= 0:
            raise ValueError("warmup_steps and windows must be >= 1 and window_s > 0, got "
                             f"{self.warmup_steps}, {self.windows}, {self.window_s}")
        if self.cpus is not None and self.cpus < 1:
            raise ValueError(f"cpus {self.cpus}: must be >= 1 (None: all the trial was given)")
        object.__setattr__(self, "max_memory", MemoryLimit.coerce(self.max_memory))



def trial_cpus(num_workers: int, available: float) -> int:
    """The CPUs a trial asks Ray for when trials share a node: one for the training process
    and one per DataLoader worker, at most ``available`` (the node's). A trial alone on its
    node asks for all of them (``tuner.ray_runtime.TrialResources.whole_node``). Its training
    process runs ``tuner.trial.harness.training_threads`` of what it was given."""
    return int(min(num_workers + 1, available))


def parse_memory(text: str) -> tuple[float | None, float | None]:
    """Parse a memory limit: a fraction of the device ('0.9') or a size ('12GB', '12GiB',
    '500MB', '24g'). Returns (fraction, MiB), one of them None. 'GB' and 'MB' are decimal
    (10**9, 10**6 bytes); 'GiB', 'g', 'MiB' and 'm' binary (2**30, 2**20).

    Raises:
        ValueError: anything else; the message shows accepted forms.
    """
    s = str(text).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", s)
    if m:
        value, unit = float(m.group(1)), m.group(2).lower()
        if unit == "" and 0 < value <= 1:
            return value, None
        scale = {"gb": 1000**3, "g": 1024**3, "gib": 1024**3, "mb": 1000**2, "m": 1024**2,
                 "mib": 1024**2, "tb": 1000**4, "tib": 1024**4}.get(unit)
        if scale and value > 0:
            return None, value * scale / 2**20
    raise ValueError(f"memory limit {text!r}: give a fraction in (0, 1] such as 0.9, or a size "
                     "such as 12GB, 12GiB or 500MB")


def device_limit_mb(max_memory: MemoryLimit | None, total_mb: float | None) -> float | None:
    """The device memory a trial may use, in MiB: ``max_memory`` resolved against a device of
    ``total_mb`` MiB (a size larger than the device is the device); the whole device without a
    limit; None without a device (``total_mb`` None)."""
    if total_mb is None:
        return None
    if max_memory is None:
        return total_mb
    return max_memory.resolve_mib(total_mb)


COMPILE_CACHE_FOLDER = "compile-cache"
"""The compile cache's folder inside a local results folder (``compile_cache_path``)."""


def compile_cache_path(results: str | Path) -> str:
    """Where a run into ``results`` keeps torch.compile's caches
    (``TrialSettings.compile_cache_dir``): ``<results>/compile-cache`` for a local results
    folder, as an absolute path (a Ray worker's working directory is not the CLI's); for a
    URI results location (``s3://...``), which no compiler can write into,
    ``<default_cache_dir()>/compile-cache``."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.\-]*://", str(results)):
        return str(default_cache_dir() / COMPILE_CACHE_FOLDER)
    return str(Path(results).resolve() / COMPILE_CACHE_FOLDER)


def default_cache_dir() -> Path:
    """Where embedded default datasets are written: ``$TUNER_CACHE`` or ``~/.cache/tuner``."""
    return Path(os.environ.get("TUNER_CACHE") or Path.home() / ".cache" / "tuner")


__getattr__ = moved(__name__, {
    "DEFAULT_CUDA_TIME_BUDGET_S": "tuner.budget", "DEFAULT_CPU_TIME_BUDGET_S": "tuner.budget",
    "BUDGET_GRACE_S": "tuner.budget", "long_step": "tuner.windows"})
