"""A run's plan: the options of ``python -m tuner run``, validated and resolved before any trial.

Everything a user can get wrong (workload, search space, data, limits, objective, device) is
checked by ``make_plan`` and raised as ``TunerError`` with one clear line; nothing is written
before it passes. A cluster address is checked where Ray connects (``tuner.ray_runtime``).
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

import tuner.leaderboard as leaderboard
from tuner.errors import DataError, TunerError
from tuner.flops import model_flops_per_sample
from tuner.knobs import Knobs
from tuner.settings import (DEVICES, MEASUREMENT_DEFAULTS, MemoryLimit, RunOptions, TrialSettings,
                            default_cache_dir)
from tuner.searcher import MemoryLimits, SearchSpec
from tuner.space import Space, load_space
from tuner.status import TELLS_MEMORY, Phase, phase_of
from tuner.workload import Workload, resolve


@dataclass(frozen=True)
class Resources:
    """Where the trials run: the device type, the GPUs, and the CPUs of the smallest node that
    runs trials (this machine, or a connected cluster: ``tuner.ray_runtime.cluster_resources``)."""
    device: str
    gpus: int
    node_cpus: int


def local_resources(device: str) -> Resources:
    """This machine's resources for ``--device`` ('auto', 'cpu' or 'cuda'). Raises TunerError."""
    device = resolve_device(device)
    import torch
    return Resources(device, torch.cuda.device_count() if device == "cuda" else 0,
                     os.cpu_count() or 1)


@dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
    """A run, resolved and validated before any trial (bad input fails in ``make_plan``).

    A value: what changes during a run (the memory probe's batch cap, the accelerator type
    being tuned, the hardware key Ray reports) makes a new plan (``with_batch_bound``,
    ``for_accelerator``, ``with_hardware_key``)."""

    options: RunOptions
    workload: Workload
    space: Space
    """The search space as loaded (the workload's or --space)."""
    device: str
    """'cpu' or 'cuda'."""
    gpus: int
    node_cpus: int
    """CPUs of the smallest node that runs trials (caps num_workers)."""
    scale: str
    data_dir: Path
    samples: int
    """Samples in the dataset (caps batch_size)."""
    device_space: Space
    """The space this run samples: device-specific, capped, global batch applied."""
    references: tuple[tuple[str, Knobs], ...]
    """(name, knobs as run) of the workload's reference configurations."""
    settings: TrialSettings
    trials: int | None
    """Search trials in all, references included (None: until the time budget)."""
    run_id: str
    max_host_memory_mb: float | None
    prior_rows: tuple[dict, ...] = ()
    """A resumed run's rows."""
    hardware_key: str | None = None
    """The trials' hardware key, known once Ray runs (on a cluster a GPU worker decides)."""
    accelerator_type: str | None = None
    """The accelerator type being tuned on a heterogeneous cluster (one search per type)."""
    type_slots: int = 0
    """Trials that run at once on that accelerator type."""

    @property
    def metric(self) -> str:
        return self.options.metric

    @property
    def mode(self) -> str:
        return self.options.mode

    @property
    def prior_search_rows(self) -> list[dict]:
        """The resumed run's search rows for the accelerator type being tuned."""
        return [r for r in self.prior_rows if phase_of(r) == Phase.SEARCH
                and r.get("accelerator_type") == self.accelerator_type]

    @property
    def remaining_trials(self) -> int | None:
        """Search trials still to run (None: no trial budget)."""
        if self.trials is None:
            return None
        return max(0, self.trials - len(self.prior_search_rows))

    @property
    def reference_params(self) -> list[tuple[str, dict, Knobs]]:
        """References still to measure: (name, their parameters in the device space, knobs)."""
        done = {r["reference"] for r in self.prior_rows if r.get("reference")
                and r.get("accelerator_type") == self.accelerator_type}
        return [(name, self.device_space.project(knobs), knobs)
                for name, knobs in self.references if name not in done]

    @property
    def should_probe(self) -> bool:
        if self.options.probe != "auto":
            return self.options.probe == "on"
        return self.device == "cuda" or self.max_host_memory_mb is not None

    def search_spec(self) -> SearchSpec:
        """What the searcher needs from this plan."""
        return SearchSpec(
            space=self.device_space, metric=self.metric, mode=self.mode,
            sampler=self.options.sampler,
            seed=self.options.seed + len(self.prior_rows),  # a resumed run must not replay proposals
            trials=self.trials, references=tuple(self.reference_params),
            reference_count=len(self.references),
            limits=MemoryLimits(self.options.max_memory, self.max_host_memory_mb),
            seed_rows=tuple(self._seed_rows()))

    def _seed_rows(self) -> list[tuple[dict, bool]]:
        """Rows the search starts from, each with whether a proposal equal to it is answered
        from it instead of measured: the resumed run's own rows (always), and with --warm-start
        earlier rows of this workload, scale and hardware (unless --remeasure)."""
        seeds = [(r, True) for r in self.prior_search_rows if r["status"] in TELLS_MEMORY]
        if self.options.warm_start:
            table = leaderboard.read(self.options.results, workload=self.workload.name,
                                     hardware_key=self.hardware_key)
            for r in table.to_pylist():
                if (r["run_id"] != self.run_id and r["scale"] == self.scale
                        and r["status"] in TELLS_MEMORY
                        and phase_of(r) in (Phase.SEARCH, Phase.REMEASURE)):
                    seeds.append((r, not self.options.remeasure))
        return seeds

    def with_batch_bound(self, max_batch: int) -> "Plan":
        """The plan with the searched batch size ending at the memory probe's bound, which may
        lie above the space file's ``high`` (``Space.with_batch_high``)."""
        return replace(self, device_space=self.device_space.with_batch_high(max_batch))

    def with_hardware_key(self, key: str) -> "Plan":
        return replace(self, hardware_key=key)

    def for_accelerator(self, accelerator: str | None, *, type_slots: int,
                        node_cpus: int) -> "Plan":
        """The plan of one accelerator type's search (trials pinned to its nodes)."""
        return replace(self, accelerator_type=accelerator, type_slots=type_slots,
                       node_cpus=node_cpus,
                       settings=replace(self.settings, accelerator_type=accelerator))


def make_plan(options: RunOptions, resources: Resources | None = None) -> Plan:
    """Resolve and validate a run: workload, space, results location, device, data, references,
    trial settings, and the run to resume. Starts nothing: with ``--address`` the caller
    connects first and passes the cluster's ``resources`` (default: this machine's).

    Raises:
        TunerError (DataError, SpaceError): anything a user can get wrong, in one line.
    """
    workload = resolve(options.workload)
    space = (load_space(options.space_file, is_file=True) if options.space_file
             else load_space(workload.space_name))
    leaderboard.check_results(options.results)
    resources = resources or local_resources(options.device)
    device = resources.device
    scale = options.scale or ("seed" if device == "cuda" else "tiny")
    data_dir = _data_dir(workload, options.data, scale)
    samples = workload.check_data(data_dir, scale)
    device_space = space.for_device(device, max_workers=resources.node_cpus, max_batch=samples)
    if options.global_batch_size is not None:
        device_space = device_space.with_global_batch(options.global_batch_size)
    references = tuple((name, device_space.fit_reference(knobs.clamp(device)[0]))
                       for name, knobs in workload.references.items())
    max_host_memory_mb = _host_limit_mb(options.max_host_memory)
    warmup, windows, window_s = MEASUREMENT_DEFAULTS[scale]
    settings = TrialSettings(
        scale=scale, device=device, data_dir=str(data_dir),
        warmup_steps=options.warmup_steps or warmup, windows=options.windows or windows,
        window_s=options.window_s or window_s, seed=options.seed,
        max_memory=options.max_memory, max_host_memory_mb=max_host_memory_mb,
        train_steps=options.train_steps, default_data=options.data is None,
        model_flops_per_sample=model_flops_per_sample(workload, scale, data_dir),
        peak_tflops=options.peak_tflops)
    trials = options.trials or (None if options.time_budget_s else (40 if device == "cuda" else 12))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id, prior_rows = f"{workload.name}-{stamp}-{secrets.token_hex(2)}", ()
    if options.resume is not None:
        run_id, prior_rows = _resumed_run(options, workload.name, scale, device)
    plan = Plan(options=options, workload=workload, space=space, device=device,
                gpus=resources.gpus, node_cpus=resources.node_cpus, scale=scale,
                data_dir=data_dir, samples=samples, device_space=device_space,
                references=references, settings=settings, trials=trials, run_id=run_id,
                max_host_memory_mb=max_host_memory_mb, prior_rows=prior_rows)
    plan.reference_params  # a reference outside the space fails here, before Ray starts
    return plan


def _resumed_run(options: RunOptions, workload: str, scale: str,
                 device: str) -> tuple[str, tuple[dict, ...]]:
    """(run id, rows) of the run ``--resume`` names ('latest': the newest of this workload,
    scale and device). Raises TunerError when there is none."""
    which = options.resume
    rows = [r for r in leaderboard.read(options.results, workload=workload).to_pylist()
            if r["scale"] == scale and r["device"] == device]
    runs: dict[str, list[dict]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], []).append(r)
    if not runs:
        raise TunerError(f"--resume: no run of {workload} at {scale} scale on "
                         f"{device} in {options.results}")
    if which == "latest":
        earliest = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        which = max(runs, key=lambda rid: max(
            (r["started_at"] for r in runs[rid] if r["started_at"] is not None),
            default=earliest))
    if which not in runs:
        raise TunerError(f"--resume {which}: no such run; runs of {workload} here: "
                         f"{', '.join(sorted(runs))}")
    return which, tuple(leaderboard.normalise_row(r) for r in runs[which])


def _data_dir(workload: Workload, data: str | None, scale: str) -> Path:
    if data is None:
        return workload.prepare_default_data(default_cache_dir() / "data", scale)
    path = Path(data).expanduser().resolve()
    if workload.data_is_file:
        if not path.is_file():
            raise DataError(f"--data {data}: no such file (workload {workload.name} "
                            "takes one text file)")
    elif not path.is_dir():
        raise DataError(f"--data {data}: no such directory")
    elif not any(path.iterdir()):
        raise DataError(f"--data {data}: the directory is empty")
    return path


def _host_limit_mb(limit: MemoryLimit | None) -> float | None:
    """The host memory limit in MiB, a fraction resolved against this machine's RAM."""
    if limit is None:
        return None
    import psutil
    return limit.resolve_mib(psutil.virtual_memory().total / 2**20)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA device is visible, else 'cpu'. Raises TunerError."""
    import torch
    if device not in DEVICES:
        raise TunerError(f"--device {device!r}: accepted values are {', '.join(DEVICES)}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise TunerError("--device cuda: no CUDA device is visible to torch on this machine")
    return device
