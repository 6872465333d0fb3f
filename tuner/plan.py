"""A run's plan: the options of ``python -m tuner run``, validated and resolved before any trial.

Everything a user can get wrong (workload, search space, data, limits, objective, device,
cluster address) is checked here and raised as ``TunerError`` with one clear line; nothing is
written before it passes.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from tuner import leaderboard
from tuner.errors import DataError, TunerError
from tuner.harness import TrialSettings
from tuner.measure import parse_memory
from tuner.space import Space, load_space
from tuner.workload import Workload, default_cache_dir, resolve

# Quiet Ray: our own progress lines replace its tables (notes section 8).
_RAY_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
            "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1", "RAY_DEDUP_LOGS": "0",
            "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1000",
            # Ctrl-C raises KeyboardInterrupt in the driver (RunInterrupted): finished trials
            # are already in the leaderboard and --resume continues from them.
            "TUNE_DISABLE_SIGINT_HANDLER": "1"}

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


SAMPLERS = ("gp", "tpe", "random")
"""Accepted ``--sampler`` values (built by ``tuner.searcher.make_sampler``)."""

OBJECTIVES = {"samples-per-sec": ("samples_per_sec", "max"),
              "time-to-train": ("time_to_train_s", "min")}


@dataclass
class RunSummary:
    run_id: str
    workload: str
    device: str
    scale: str
    rows: list[dict]
    wall_s: float
    results_dir: str


class Plan:
    """Everything resolved and validated before Ray starts (bad input fails here)."""

    def __init__(self, options: RunOptions):
        if options.trials is not None and options.trials < 1:
            raise TunerError(f"--trials {options.trials}: must be >= 1")
        if options.time_budget_s is not None and options.time_budget_s <= 0:
            raise TunerError(f"--time-budget {options.time_budget_s}: must be > 0 seconds")
        if options.objective not in OBJECTIVES:
            raise TunerError(f"--objective {options.objective!r}: accepted values are "
                             f"{', '.join(OBJECTIVES)}")
        if options.objective == "time-to-train" and not options.train_steps:
            raise TunerError("--objective time-to-train needs --train-steps N (the length of "
                             "your real training job, in optimizer steps)")
        if options.train_steps is not None and options.train_steps < 1:
            raise TunerError(f"--train-steps {options.train_steps}: must be >= 1")
        if options.sampler not in SAMPLERS:
            raise TunerError(f"--sampler {options.sampler!r}: accepted values are "
                             f"{', '.join(SAMPLERS)}")
        if options.probe not in ("auto", "on", "off"):
            raise TunerError(f"--probe {options.probe!r}: accepted values are auto, on, off")
        self.metric, self.mode = OBJECTIVES[options.objective]
        self.max_host_memory_mb = _host_limit_mb(options.max_host_memory)
        if options.max_memory is not None:
            try:
                parse_memory(options.max_memory)
            except ValueError as exc:
                raise TunerError(f"--max-memory: {exc}") from None
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
                self.device, self.gpus, self.node_cpus = _cluster_resources(options.device)
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
            if options.global_batch_size < 1:
                raise TunerError(f"--global-batch-size {options.global_batch_size}: must be >= 1")
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


def _cluster_resources(device: str) -> tuple[str, int, int]:
    """(device, GPUs, CPUs of the smallest node that runs trials) of the connected cluster."""
    import ray
    if device not in ("auto", "cpu", "cuda"):
        raise TunerError(f"--device {device!r}: accepted values are auto, cpu, cuda")
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    gpus = int(sum(n.get("GPU", 0) for n in nodes))
    if device == "cuda" and gpus == 0:
        raise TunerError("--device cuda: the Ray cluster has no GPU resources")
    device = device if device != "auto" else ("cuda" if gpus else "cpu")
    workers = [n for n in nodes if n.get("GPU", 0) > 0] if device == "cuda" else nodes
    cpus = int(min((n.get("CPU", 1) for n in workers), default=1)) or 1
    return device, (gpus if device == "cuda" else 0), cpus


def _host_limit_mb(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        fraction, mb = parse_memory(text)
    except ValueError as exc:
        raise TunerError(f"--max-host-memory: {exc}") from None
    if fraction is not None:
        import psutil
        return fraction * psutil.virtual_memory().total / 2**20
    return mb


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


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not after Ray's minutes of retries, when nothing listens at a
    HOST:PORT or ray://HOST:PORT address ('auto' is left to Ray, which fails fast)."""
    import socket
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise TunerError(f"--address {address}: cannot reach a Ray cluster there "
                         f"({exc.strerror or exc}); check the address, or start one with "
                         "`ray start --head`") from None


def ray_init(address: str | None, device: str) -> bool:
    """Start (or connect to) Ray. Returns True when this call started it (and must stop it)."""
    import ray
    if ray.is_initialized():
        return False
    for key, value in _RAY_ENV.items():
        os.environ.setdefault(key, value)
    # Workers must import the same modules as the driver (a user's workload by import path).
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    cwd = os.getcwd()
    pythonpath = os.pathsep.join(dict.fromkeys([cwd, *paths]))
    runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}}
    if address is None:
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 log_to_driver=False, logging_level=logging.WARNING, configure_logging=True,
                 runtime_env=runtime_env)
    else:
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                     runtime_env=runtime_env)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise TunerError(f"--address {address}: cannot connect to a Ray cluster ({exc})") from None
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    logging.getLogger("ray.train").setLevel(logging.CRITICAL)
    return True


