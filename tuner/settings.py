"""Run and trial settings, the accepted values of every option, and memory-limit parsing.

Torch-free on purpose: the CLI builds its choices from here without loading torch (``--help``
stays fast), and the driver builds ``TrialSettings`` without importing the trial harness.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SCALES = ("seed", "tiny")
"""``seed``: faithful to the source report. ``tiny``: same architecture, small enough for a
2-core CPU test."""

DEVICES = ("auto", "cpu", "cuda")
"""Accepted ``--device`` values; 'auto' is CUDA when torch sees a device, else CPU."""

DEVICE_TYPES = ("cpu", "cuda")
"""Device types a trial runs on (``TrialSettings.device``)."""

PROBE_MODES = ("auto", "on", "off")
"""Accepted ``--probe`` values."""

SAMPLERS = ("gp", "tpe", "random")
"""Accepted ``--sampler`` values (built by ``tuner.searcher.make_sampler``)."""

OBJECTIVES = {"samples-per-sec": ("samples_per_sec", "max"),
              "time-to-train": ("time_to_train_s", "min")}


PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")
"""Phases of the per-step breakdown (leaderboard columns ``<phase>_ms`` and ``<phase>_pct``)."""

MEASUREMENT_DEFAULTS = {
    # scale: (warm-up optimizer steps, windows, seconds per window)
    "tiny": (3, 3, 1.0),
    "seed": (10, 5, 2.0),
}



@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What ``python -m tuner run`` was asked to do (the CLI's flags)."""
    workload: str
    space_file: str | None = None
    trials: int | None = None
    """Trials in all, references included; None: 12 on CPU, 40 on CUDA (or until time budget)."""
    time_budget_s: float | None = None
    device: str = "auto"
    scale: str | None = None
    """None: 'seed' on CUDA, 'tiny' on CPU."""
    data: str | None = None
    results: str = "tuner-results"
    seed: int = 0
    sampler: str = "gp"
    """Search sampler: 'gp' (Optuna's GPSampler), 'tpe' or 'random' (tuner.searcher)."""
    address: str | None = None
    windows: int | None = None
    window_s: float | None = None
    warmup_steps: int | None = None
    objective: str = "samples-per-sec"
    """'samples-per-sec' (steady-state throughput, max) or 'time-to-train' (predicted wall time
    of ``train_steps`` steps including setup, warm-up and compile, min)."""
    train_steps: int | None = None
    max_memory: str | None = None
    """Device memory limit: fraction ('0.9') or size ('12GB'), see TrialSettings.max_memory."""
    max_host_memory: str | None = None
    """Host memory limit per trial (process + DataLoader workers): size ('8GB') or fraction of
    this machine's RAM."""
    global_batch_size: int | None = None
    probe: str = "auto"
    """Memory probe before the search: 'auto' (on CUDA, or with --max-host-memory), 'on', 'off'."""
    confirm: int = 3
    """Re-measure this many of the best configurations with twice the windows; the winner is
    chosen on the re-measurement (0 turns it off)."""
    resume: str | None = None
    """Continue a run: 'latest' (the newest run of this workload in --results) or a run id.
    Its leaderboard rows are the truth: the search state is rebuilt from them, references and
    trials already recorded are not run again, only the rest of the --trials budget runs."""
    warm_start: bool = False
    """Seed the search with earlier leaderboard rows of this workload, scale and hardware."""
    remeasure: bool = False
    """With warm_start: measure a configuration again even when an earlier row has it."""
    ceiling: bool = True
    """Measure the winner's compute-only ceiling (batches already on the device)."""



@dataclass(frozen=True, kw_only=True)
class TrialSettings:
    """How one trial measures (the same for every trial of a run)."""

    scale: str
    """'seed' (faithful to the source report) or 'tiny' (CPU-test size)."""
    device: str
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
    """Warm-up goes on past ``warmup_steps`` in short synchronised probes (half a window each)
    until two consecutive probes' samples/sec differ by at most this fraction."""
    max_steady_probes: int = 6
    """At most this many probes; a trial that never settles is measured anyway and recorded
    with ``steady_state`` false."""
    breakdown_steps: int = 3
    """Synchronised steps, after the windows, timed per phase (data wait, host-to-device,
    forward, backward, optimizer); 0 turns the breakdown off."""
    compute_only: bool = False
    """Compute-only ceiling: cycle a few batches already on the device instead of the
    DataLoader (the throughput a perfect input pipeline would give)."""
    max_memory: str | None = None
    """Device memory limit: a fraction ('0.9') or a size ('12GB'). A size below the card's is
    enforced with the allocator's per-process fraction, so a big card OOMs where a small one
    would; a trial whose peak (allocator + CUDA context) exceeds it ends ``over_limit``."""
    max_host_memory_mb: float | None = None
    """Host memory limit for the trial process plus its DataLoader workers (peak RSS), MB; a
    trial over it stops with status ``over_limit``."""
    train_steps: int | None = None
    """Steps of the user's real job, to predict ``time_to_train_s`` (setup, warm-up and
    compile included)."""
    accelerator_type: str | None = None
    """Ray accelerator type the trial is pinned to on a heterogeneous cluster; appended to the
    hardware key ("...@A10G") so each type has its own leaderboard and best."""
    default_data: bool = False
    """``data_dir`` is the workload's embedded default: a node that lacks it (a cluster worker)
    writes it to its own cache first (deterministic, so every node trains on the same data)."""

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"scale {self.scale!r}: accepted values are {', '.join(SCALES)}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device {self.device!r}: accepted values are cpu, cuda")
        if self.warmup_steps < 1 or self.windows < 1 or self.window_s <= 0:
            raise ValueError("warmup_steps and windows must be >= 1 and window_s > 0, got "
                             f"{self.warmup_steps}, {self.windows}, {self.window_s}")
        if self.max_memory is not None:
            parse_memory(self.max_memory)



def parse_memory(text: str) -> tuple[float | None, float | None]:
    """Parse a memory limit: a fraction of the device ('0.9') or a size ('12GB', '12GiB',
    '500MB', '24g'). Returns (fraction, megabytes), one of them None.

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


def device_limit_mb(max_memory: str | None, total_mb: float | None) -> float | None:
    """The device memory a trial may use, in MB: ``max_memory`` (see ``parse_memory``) resolved
    against a device of ``total_mb`` MB (a size larger than the device is the device); the whole
    device without a limit; None without a device (``total_mb`` None).

    Raises:
        ValueError: ``max_memory`` is malformed.
    """
    if total_mb is None:
        return None
    if max_memory is None:
        return total_mb
    fraction, mb = parse_memory(max_memory)
    return fraction * total_mb if fraction is not None else min(mb, total_mb)


def default_cache_dir() -> Path:
    """Where embedded default datasets are written: ``$TUNER_CACHE`` or ``~/.cache/tuner``."""
    return Path(os.environ.get("TUNER_CACHE") or Path.home() / ".cache" / "tuner")
