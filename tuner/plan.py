"""A run's plan: the options of ``python -m tuner run``, validated and resolved before any trial.

Everything a user can get wrong (workload, search space, data, limits, objective, device,
cluster address) is checked here and raised as ``TunerError`` with one clear line; nothing is
written before it passes.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from pathlib import Path

from tuner import leaderboard
from tuner.errors import DataError, TunerError
from tuner.ray_runtime import cluster_resources, ray_init
from tuner.settings import (MEASUREMENT_DEFAULTS, MemoryLimit, RunOptions, TrialSettings,
                            default_cache_dir)
from tuner.space import Space, load_space
from tuner.workload import Workload, resolve


class Plan:
    """Everything resolved and validated before Ray starts (bad input fails here)."""

    def __init__(self, options: RunOptions):
        self.metric, self.mode = options.metric, options.mode
        self.max_host_memory_mb = _host_limit_mb(options.max_host_memory)
        self.options = options
        self.workload: Workload = resolve(options.workload)
        self.space: Space = (load_space(options.space_file, is_file=True) if options.space_file
                             else load_space(self.workload.space_name))
        leaderboard.check_results(options.results)
        self.ray_connected = False
        if options.address is not None:
            # The cluster decides the device, the GPUs and the CPUs per node, not the driver's
            # machine (a CPU head node drives GPU workers).
            self.ray_connected = ray_init(options.address, "auto")
            try:
                self.device, self.gpus, self.node_cpus = cluster_resources(options.device)
            except TunerError:
                self.close()
                raise
        else:
            self.device = resolve_device(options.device)
            import torch
            self.gpus = torch.cuda.device_count() if self.device == "cuda" else 0
            self.node_cpus = os.cpu_count() or 1
        try:
            self._finish(options)
        except TunerError:
            self.close()
            raise

    def close(self) -> None:
        """Disconnect from a cluster this plan connected to."""
        if self.ray_connected:
            import ray
            ray.shutdown()
            self.ray_connected = False

    def _finish(self, options: RunOptions) -> None:
        self.scale = options.scale or ("seed" if self.device == "cuda" else "tiny")
        self.data_dir = self._data_dir()
        self.samples = self.workload.check_data(self.data_dir, self.scale)
        self.device_space = self.space.for_device(self.device, max_workers=self.node_cpus,
                                                  max_batch=self.samples)
        if options.global_batch_size is not None:
            self.device_space = self.device_space.with_global_batch(options.global_batch_size)
        self.references = [(name, self.device_space.fit_reference(knobs.clamp(self.device)[0]))
                           for name, knobs in self.workload.references.items()]
        self._project_references()
        warmup, windows, window_s = MEASUREMENT_DEFAULTS[self.scale]
        self.settings = TrialSettings(
            scale=self.scale, device=self.device, data_dir=str(self.data_dir),
            warmup_steps=options.warmup_steps or warmup, windows=options.windows or windows,
            window_s=options.window_s or window_s, seed=options.seed,
            max_memory=options.max_memory, max_host_memory_mb=self.max_host_memory_mb,
            train_steps=options.train_steps, default_data=options.data is None)
        self.trials = options.trials or (None if options.time_budget_s else
                                         (40 if self.device == "cuda" else 12))
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_id = f"{self.workload.name}-{stamp}-{secrets.token_hex(2)}"
        self.prior_rows: list[dict] = []
        if options.resume is not None:
            self._resume(options.resume)
        self.hardware_key: str | None = None  # set once Ray runs (a cluster's GPU node decides)
        self.accelerator_type: str | None = None
        """The accelerator type being tuned on a heterogeneous cluster (one search per type)."""
        self.type_slots = 0

    def _resume(self, which: str) -> None:
        rows = [r for r in leaderboard.read(self.options.results, workload=self.workload.name).to_pylist()
                if r["scale"] == self.scale and r["device"] == self.device]
        runs = {}
        for r in rows:
            runs.setdefault(r["run_id"], []).append(r)
        if not runs:
            raise TunerError(f"--resume: no run of {self.workload.name} at {self.scale} scale on "
                             f"{self.device} in {self.options.results}")
        if which == "latest":
            earliest = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
            which = max(runs, key=lambda rid: max(
                (r["started_at"] for r in runs[rid] if r["started_at"] is not None),
                default=earliest))
        if which not in runs:
            raise TunerError(f"--resume {which}: no such run; runs of {self.workload.name} here: "
                             f"{', '.join(sorted(runs))}")
        self.run_id = which
        self.prior_rows = [leaderboard.normalise_row(r) for r in runs[which]]
        self._project_references()

    @property
    def prior_search_rows(self) -> list[dict]:
        """The resumed run's search rows for the accelerator type being tuned."""
        return [r for r in self.prior_rows if (r.get("phase") or "search") == "search"
                and r.get("accelerator_type") == getattr(self, "accelerator_type", None)]

    @property
    def remaining_trials(self) -> int | None:
        """Search trials still to run (None: no trial budget)."""
        if self.trials is None:
            return None
        return max(0, self.trials - len(self.prior_search_rows))

    def _project_references(self) -> None:
        done = {r["reference"] for r in getattr(self, "prior_rows", []) if r.get("reference")
                and r.get("accelerator_type") == getattr(self, "accelerator_type", None)}
        self.reference_params = [(name, self.device_space.project(knobs), knobs)
                                 for name, knobs in self.references if name not in done]

    def cap_batch(self, max_batch: int) -> None:
        """Bound the searched batch size (after the memory probe)."""
        self.device_space = self.device_space.for_device(self.device, self.node_cpus, max_batch)
        self._project_references()

    @property
    def should_probe(self) -> bool:
        if self.options.probe != "auto":
            return self.options.probe == "on"
        return self.device == "cuda" or self.max_host_memory_mb is not None

    def _data_dir(self) -> Path:
        data = self.options.data
        if data is None:
            return self.workload.prepare_default_data(default_cache_dir() / "data", self.scale)
        path = Path(data).expanduser().resolve()
        if self.workload.data_is_file:
            if not path.is_file():
                raise DataError(f"--data {data}: no such file (workload {self.workload.name} "
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
    if device not in ("auto", "cpu", "cuda"):
        raise TunerError(f"--device {device!r}: accepted values are auto, cpu, cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise TunerError("--device cuda: no CUDA device is visible to torch on this machine")
    return device
