"""The search: Ray Tune ``Tuner`` + a constrained ``OptunaSearch`` (TPE).

* The workload's reference configurations (baseline first) are evaluated before anything the
  sampler proposes, so every run reports its speed-up over them.
* A trial that ran out of memory (or went over a limit) reaches Optuna as a COMPLETE trial with
  a positive constraint violation (``Trial.set_constraint``), so TPE learns to avoid that
  region; Optuna ignores FAIL trials and would keep sampling there
  (shared/notes/ray-tune-facts.md section 1). Other errors reach it as FAIL.
* Resources per trial: CPUs = num_workers + 1 (capped at the node's CPUs), one whole GPU on CUDA;
  one trial per GPU (per node on CPU) at a time, so trials do not steal each other's cores.
* The driver writes a leaderboard row as each trial finishes.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from tuner.errors import DataError, TunerError
from tuner.harness import TrialSettings, run_trial
from tuner.knobs import Knobs
from tuner.measure import parse_memory
from tuner.space import Space, load_space
from tuner.workload import Workload, default_cache_dir, make_trainable, resolve
from tuner import leaderboard

METRIC = "samples_per_sec"

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
            self.ray_connected = _ray_init(options.address, "auto")
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
            which = max(runs, key=lambda rid: max(r["started_at"] for r in runs[rid]))
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


class TrialResources:
    """Per-trial resource request (picklable; Ray Tune may checkpoint it): CPUs =
    num_workers + 1 capped at ``max_cpus``, ``gpus_per_trial`` GPUs, and a sliver of
    ``accelerator_type:<T>`` to pin the trial to nodes of that type (notes section 7)."""

    def __init__(self, gpus_per_trial: int, max_cpus: int, accelerator_type: str | None = None):
        self.gpus_per_trial = gpus_per_trial
        self.max_cpus = max_cpus
        self.accelerator_type = accelerator_type

    def __call__(self, config: dict) -> dict:
        config = {**config, **config.get("fixed", {})}
        cpus = min(int(config.get("num_workers", 0)) + 1, self.max_cpus)
        request = {"cpu": cpus, "gpu": self.gpus_per_trial}
        if self.accelerator_type is not None:
            request[f"accelerator_type:{self.accelerator_type}"] = 0.001
        return request


def _worst(plan: "Plan") -> float:
    """Objective value given to an infeasible trial; TPE ranks those by violation instead."""
    return 0.0 if plan.mode == "max" else 1e12


def _params_key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def _make_searcher(plan: Plan, trials: int | None):
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    worst = _worst(plan)

    class ConstrainedOptunaSearch(OptunaSearch):
        """OptunaSearch that evaluates the reference configurations first, passes memory
        failures to TPE as constraint violations, and does not measure a configuration twice
        (TPE with few observations re-proposes its best point: that point's measured value is
        told again instead)."""

        def __init__(self, *args, references=(), **kwargs):
            super().__init__(*args, **kwargs)
            self._references = list(references)
            self._measured: dict[tuple, tuple[float, float]] = {}

        def suggest(self, trial_id: str):
            if self._references and trial_id not in self._ot_trials:
                name, params, knobs = self._references.pop(0)
                self._ot_study.enqueue_trial(params)
                config = super().suggest(trial_id)
                if config is not None:
                    config.update(knobs.to_dict(), reference=name)
                return config
            for _ in range(8):
                config = super().suggest(trial_id)
                if config is None:
                    return None
                ot_trial = self._ot_trials[trial_id]
                known = self._measured.get(_params_key(ot_trial.params))
                if known is None:
                    break
                value, violation = known
                ot_trial.set_constraint("memory", violation)
                self._ot_study.tell(ot_trial, value)
                del self._ot_trials[trial_id]
            config["reference"] = None
            return config

        def on_trial_result(self, trial_id: str, result: dict):
            if result.get(self.metric) is not None:
                super().on_trial_result(trial_id, result)

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
            status = (result or {}).get("status")
            ot_trial = self._ot_trials.get(trial_id)
            if ot_trial is not None and status in ("oom", "over_limit"):
                result = {**result, self.metric: worst}
                ot_trial.set_constraint("memory", 1.0)  # > 0: infeasible
                self._measured[_params_key(ot_trial.params)] = (worst, 1.0)
            elif ot_trial is not None and status == "ok" and result.get(self.metric) is not None:
                ot_trial.set_constraint("memory", 0.0)
                self._measured[_params_key(ot_trial.params)] = (result[self.metric], 0.0)
            elif status != "ok":
                result, error = None, True
            super().on_trial_complete(trial_id, result=result, error=error)

    n_trials = trials or 40
    seeds = _seed_rows(plan)
    sampler = optuna.samplers.TPESampler(  # a resumed run must not replay the first proposals
        seed=plan.options.seed + len(plan.prior_rows), n_startup_trials=min(10, max(3, n_trials // 3)))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    searcher = ConstrainedOptunaSearch(
        space=plan.device_space.sampler(), metric=plan.metric, mode=plan.mode, sampler=sampler,
        references=plan.reference_params)
    distributions = plan.device_space.distributions()
    for row, dedupe in seeds:
        try:
            params = plan.device_space.project(Knobs.from_dict(row, strict=False))
        except (TunerError, ValueError):
            continue  # measured in another space: not a point of this one
        infeasible = row["status"] in ("oom", "over_limit")
        value = worst if infeasible else row[plan.metric]
        if value is None:
            continue
        searcher._ot_study.add_trial(optuna.trial.create_trial(
            params=params, distributions={k: distributions[k] for k in params}, value=value,
            constraints={"memory": 1.0 if infeasible else 0.0}))
        if dedupe:
            searcher._measured[_params_key(params)] = (value, 1.0 if infeasible else 0.0)
    return searcher


def _seed_rows(plan: Plan) -> list[tuple[dict, bool]]:
    """Rows the search starts from, each with whether a TPE proposal equal to it is answered
    from it instead of measured: the resumed run's own rows (always), and with --warm-start
    earlier rows of this workload, scale and hardware (unless --remeasure)."""
    usable = ("ok", "oom", "over_limit")
    seeds = [(r, True) for r in plan.prior_search_rows if r["status"] in usable]
    if plan.options.warm_start:
        table = leaderboard.read(plan.options.results, workload=plan.workload.name,
                                 hardware_key=plan.hardware_key)
        for r in table.to_pylist():
            if (r["run_id"] != plan.run_id and r["scale"] == plan.scale and r["status"] in usable
                    and (r["phase"] or "search") in ("search", "remeasure")):
                seeds.append((r, not plan.options.remeasure))
    return seeds


def _ray_init(address: str | None, device: str) -> bool:
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
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                     runtime_env=runtime_env)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise TunerError(f"--address {address}: cannot connect to a Ray cluster ({exc})") from None
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    logging.getLogger("ray.train").setLevel(logging.CRITICAL)
    return True


def run(options: RunOptions, *, on_event: Callable[[str, dict], None] | None = None,
        plan: Plan | None = None) -> RunSummary:
    """Tune one workload: memory probe, search, re-measurement of the best, compute-only
    ceiling. ``on_event(kind, data)`` receives 'start', 'probe', 'phase' and 'trial' events.

    Raises:
        TunerError (and subclasses): bad input, found before Ray starts; a memory limit that
        not even the smallest batch fits.
    """
    import time
    plan = plan or Plan(options)
    on_event = on_event or _ignore_event
    started = time.perf_counter()
    started_ray = _ray_init(options.address, plan.device)
    writer = None
    try:
        plan.hardware_key = _hardware_key(plan)
        if plan.should_probe:
            _probe(plan, on_event)
        writer = _writer(plan, on_event)
        if plan.prior_rows and any(r.get("phase") in ("remeasure", "ceiling") for r in plan.prior_rows):
            on_event("complete", {"run_id": plan.run_id})
        else:
            types = _accelerator_types() if options.address is not None else []
            for accelerator in (types if len(types) > 1 else [None]):
                # Hardware is part of the answer: each type gets its own search state.
                _pin(plan, accelerator)
                on_event("start", {"plan": plan, "concurrency": _concurrency(plan)})
                if plan.remaining_trials != 0:
                    _fit_search(plan, writer)
                _fit_followups(plan, writer, on_event)
    except KeyboardInterrupt:
        recorded = len(writer.rows) if writer else len(plan.prior_rows)
        raise RunInterrupted(plan.run_id, recorded) from None
    finally:
        if started_ray:
            import ray
            ray.shutdown()
        plan.close()
    return RunSummary(plan.run_id, plan.workload.name, plan.device, plan.scale, writer.rows,
                      time.perf_counter() - started, options.results)


def _accelerator_types() -> list[str]:
    """Accelerator types of the connected cluster's live nodes (Ray's ``accelerator_type:<T>``
    resources), sorted."""
    import ray
    types = {key.split(":", 1)[1] for node in ray.nodes() if node.get("Alive")
             for key in node["Resources"] if key.startswith("accelerator_type:")}
    return sorted(types)


def _pin(plan: Plan, accelerator: str | None) -> None:
    """Point the plan at one accelerator type (None: the whole cluster)."""
    if accelerator == plan.accelerator_type:
        return
    import ray
    plan.accelerator_type = accelerator
    plan.settings = replace(plan.settings, accelerator_type=accelerator)
    plan.hardware_key = _hardware_key(plan)
    if accelerator is not None:
        key = f"accelerator_type:{accelerator}"
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive") and key in n["Resources"]]
        plan.type_slots = (int(sum(n.get("GPU", 0) for n in nodes)) if plan.device == "cuda"
                           else len(nodes))
        plan.node_cpus = int(min(n.get("CPU", 1) for n in nodes)) or 1
    plan._project_references()


class RunInterrupted(Exception):
    """The run was interrupted (Ctrl-C); its finished trials are in the leaderboard."""

    def __init__(self, run_id: str, recorded: int):
        super().__init__(f"run {run_id} interrupted with {recorded} trials recorded")
        self.run_id = run_id
        self.recorded = recorded


def _hardware_key_task(device: str) -> str:
    import torch
    from tuner.hardware import fingerprint
    return fingerprint(torch.device(device))["hardware_key"]


def _hardware_key(plan: Plan) -> str:
    """Hardware key of the machines the trials run on (on a cluster: a GPU worker's)."""
    if plan.options.address is None:
        return _hardware_key_task(plan.device)
    import ray
    resources = ({f"accelerator_type:{plan.accelerator_type}": 0.001}
                 if plan.accelerator_type else {})
    task = ray.remote(_hardware_key_task).options(
        num_cpus=1, num_gpus=1 if plan.device == "cuda" else 0, resources=resources)
    key = ray.get(task.remote(plan.device))
    return f"{key}@{plan.accelerator_type}" if plan.accelerator_type else key


def _probe_trial(workload: Workload, knobs: Knobs, settings: TrialSettings) -> dict:
    return run_trial(workload, knobs, settings)


def _probe(plan: Plan, on_event: Callable[[str, dict], None]) -> None:
    import ray
    from tuner.probe import probe_batch_limit
    # One probe per worker process (max_calls=1): memory a process has held stays in its RSS.
    task = ray.remote(max_calls=1)(_probe_trial).options(
        num_cpus=1, num_gpus=1 if plan.device == "cuda" else 0)

    def run_remote(knobs: Knobs, settings: TrialSettings) -> dict:
        return ray.get(task.remote(plan.workload, knobs, settings))

    base = plan.references[0][1]
    result = probe_batch_limit(plan.device_space, base, plan.settings, run_remote)
    on_event("probe", {"result": result})
    if result.max_batch is None:
        raise TunerError(f"memory probe: not even batch_size {result.probes[0][0]} fits "
                         f"({result.probes[0][1]}); raise --max-memory/--max-host-memory or "
                         "lower the space's batch_size")
    plan.cap_batch(result.max_batch)


def _writer(plan: Plan, on_event: Callable[[str, dict], None]) -> "LeaderboardWriter":
    import optuna
    import ray
    return LeaderboardWriter(plan, on_event, versions={
        "ray_version": ray.__version__, "optuna_version": optuna.__version__})


def _concurrency(plan: Plan) -> int:
    import ray
    if plan.accelerator_type is not None:
        return max(1, plan.type_slots)
    if plan.device == "cuda":
        return max(1, plan.gpus)
    if plan.options.address is not None:
        return max(1, len([n for n in ray.nodes() if n.get("Alive")]))
    return 1


def _reuse_actors(plan: Plan) -> bool:
    """Reuse trial processes (0.1 s instead of ~1-5 s per trial, notes section 3), except
    when host memory is a limit: a process keeps memory it once held, which would be charged
    to the next trial."""
    return plan.max_host_memory_mb is None


def _trainable(plan: Plan):
    from ray import tune
    return tune.with_resources(  # a fresh function each time (notes section 2)
        make_trainable(plan.workload),
        resources=TrialResources(1 if plan.device == "cuda" else 0, plan.node_cpus,
                                 plan.accelerator_type))


def _run_config(plan: Plan, writer: "LeaderboardWriter", name: str):
    from ray import tune
    # Trials save no checkpoints, so Ray's run state can stay on the driver; for a remote
    # results URI it goes to the local cache (workers then need no object-store credentials).
    storage = (str(default_cache_dir() / "ray") if leaderboard.is_uri(plan.options.results)
               else str(Path(plan.options.results).resolve() / "ray"))
    return tune.RunConfig(name=name, storage_path=storage,
                          callbacks=[writer], verbose=0,
                          failure_config=tune.FailureConfig(max_failures=0))


def _experiment_name(plan: Plan, phase: str) -> str:
    """Ray Tune experiment directory name: one per phase, accelerator type and resume."""
    parts = [plan.run_id, phase]
    if plan.accelerator_type:
        parts.append(plan.accelerator_type)
    if plan.prior_rows:
        parts.append(f"resume{len(plan.prior_rows)}")
    return "-".join(parts)


def _fit_search(plan: Plan, writer: "LeaderboardWriter") -> None:
    from ray import tune
    settings = asdict(plan.settings)
    tuner = tune.Tuner(
        _trainable(plan),
        param_space={"tuner": settings, "phase": "search"},
        tune_config=tune.TuneConfig(
            search_alg=_make_searcher(plan, plan.trials),
            num_samples=plan.remaining_trials if plan.trials else -1,
            time_budget_s=plan.options.time_budget_s,
            max_concurrent_trials=_concurrency(plan),
            reuse_actors=_reuse_actors(plan),
        ),
        run_config=_run_config(plan, writer, _experiment_name(plan, "search")),
    )
    tuner.fit()


def _fit_followups(plan: Plan, writer: "LeaderboardWriter", on_event: Callable[[str, dict], None]) -> None:
    """Re-measure the best configurations with twice the windows (the winner is chosen on
    these), then measure the winner's compute-only ceiling."""
    ok = [r for r in writer.rows if r["status"] == "ok" and r[plan.metric] is not None
          and r.get("accelerator_type") == plan.accelerator_type]
    ok.sort(key=lambda r: r[plan.metric], reverse=plan.mode == "max")
    top, seen = [], set()
    for r in ok:
        knobs = Knobs.from_dict(r, strict=False)
        if knobs not in seen:
            seen.add(knobs)
            top.append(knobs)
    top = top[:plan.options.confirm]
    if len(top) >= 2:
        on_event("phase", {"phase": "remeasure", "count": len(top)})
        _fit_fixed(plan, writer, top, "remeasure", windows=plan.settings.windows * 2)
    if plan.options.ceiling and top:
        winner = leaderboard.best_row([r for r in writer.rows
                                       if r.get("accelerator_type") == plan.accelerator_type])
        if winner is not None:
            on_event("phase", {"phase": "ceiling", "count": 1})
            _fit_fixed(plan, writer, [Knobs.from_dict(winner, strict=False)], "ceiling",
                       compute_only=True)


def _fit_fixed(plan: Plan, writer: "LeaderboardWriter", configs: list[Knobs], phase: str,
               **settings_changes: Any) -> None:
    from ray import tune
    if writer.expected is not None:
        writer.expected += len(configs)
    settings = {**asdict(plan.settings), **settings_changes}
    tuner = tune.Tuner(
        _trainable(plan),
        param_space={"tuner": settings, "phase": phase, "reference": None,
                     "fixed": tune.grid_search([k.to_dict() for k in configs])},
        tune_config=tune.TuneConfig(max_concurrent_trials=_concurrency(plan),
                                    reuse_actors=_reuse_actors(plan)),
        run_config=_run_config(plan, writer, _experiment_name(plan, phase)),
    )
    tuner.fit()


def _error_file_text(trial) -> str | None:
    """What Ray Tune wrote to the trial's error.txt (a driver-side failure has no pickled
    error), or None."""
    try:
        path = trial.error_file
        return Path(path).read_text() if path else None
    except OSError:
        return None


def _ignore_event(kind: str, data: dict) -> None:
    """on_event of a restored LeaderboardWriter (no console attached)."""


def _one_line(text: str) -> str:
    """A multi-line error (a DataLoader worker's wrapped traceback) as one line: the first
    line and the final cause."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0]} -> {lines[-1]}"


from ray.tune import Callback  # noqa: E402  (after the env setup above is defined)


class LeaderboardWriter(Callback):
    """Writes one leaderboard row per finished trial, from the driver (workers on other nodes
    share no disk with it)."""

    def __init__(self, plan: Plan, on_event: Callable[[str, dict], None], versions: dict):
        self.plan = plan
        self.on_event = on_event
        self.versions = versions
        self.rows: list[dict] = list(plan.prior_rows)  # a resumed run's rows count as done
        self.expected = plan.trials
        """Trials expected in all (None without a trial budget); follow-up phases add theirs."""
        self._done: set[str] = set()

    def __getstate__(self) -> dict:
        # Ray Tune pickles its run config (callbacks included) for restore; the live console
        # behind on_event holds locks and is not part of the run's state.
        state = self.__dict__.copy()
        state["on_event"] = _ignore_event
        return state

    def _row(self, trial, result: dict) -> dict:
        config = {**trial.config, **trial.config.get("fixed", {})}
        reference = config.get("reference")
        row: dict[str, Any] = {}
        try:
            row.update(Knobs.from_dict(config, strict=False).to_dict())
        except ValueError:
            pass
        row.update(result)
        row.update(self.versions)
        resources = TrialResources(1 if self.plan.device == "cuda" else 0, self.plan.node_cpus,
                                   self.plan.accelerator_type)(config)
        row.update(run_id=self.plan.run_id, trial_id=trial.trial_id,
                   workload=self.plan.workload.name, scale=self.plan.scale,
                   reference=reference, is_baseline=reference == "baseline",
                   phase=config.get("phase", "search"), objective=self.plan.metric,
                   train_steps=self.plan.options.train_steps,
                   max_host_memory_mb=self.plan.max_host_memory_mb,
                   global_batch_size=self.plan.options.global_batch_size,
                   trial_cpus=resources["cpu"], trial_gpus=resources["gpu"])
        row.setdefault("device", self.plan.device)
        if row.get("error"):
            row["error"] = _one_line(row["error"])
        return row

    def _write(self, row: dict) -> None:
        leaderboard.append(self.plan.options.results, [row])
        self.rows.append(leaderboard.normalise_row(row))
        self.on_event("trial", {"row": self.rows[-1], "index": len(self.rows),
                                "total": self.expected})

    def on_trial_complete(self, iteration, trials, trial, **info):
        if trial.trial_id in self._done:
            return
        self._done.add(trial.trial_id)
        result = dict(trial.last_result or {})
        if not result:
            result = {"status": "error", "error": "the trial ended without reporting a result"}
        elif result.get("status") == "running":
            result["status"] = "pruned"  # stopped by the scheduler between windows
        self._write(self._row(trial, result))

    def on_trial_error(self, iteration, trials, trial, **info):
        if trial.trial_id in self._done:
            return
        self._done.add(trial.trial_id)
        error = trial.get_error()
        text = str(error) if error else _error_file_text(trial)
        result = {k: v for k, v in (trial.last_result or {}).items()
                  if k not in leaderboard.MEASURED_COLUMNS}
        result.update(status="error", error=_one_line(text) if text else "the trial process failed",
                      traceback=text)
        self._write(self._row(trial, result))
