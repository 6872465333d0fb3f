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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from tuner.errors import DataError, TunerError
from tuner.harness import TrialSettings
from tuner.knobs import Knobs
from tuner.space import Space, load_space
from tuner.workload import Workload, default_cache_dir, make_trainable, resolve
from tuner import leaderboard

METRIC = "samples_per_sec"

# Quiet Ray: our own progress lines replace its tables (notes section 8).
_RAY_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
            "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1", "RAY_DEDUP_LOGS": "0",
            "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1000"}

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
        self.options = options
        self.workload: Workload = resolve(options.workload)
        self.space: Space = (load_space(options.space_file, is_file=True) if options.space_file
                             else load_space(self.workload.space_name))
        self.device = resolve_device(options.device)
        self.scale = options.scale or ("seed" if self.device == "cuda" else "tiny")
        import torch
        self.gpus = torch.cuda.device_count() if self.device == "cuda" else 0
        self.node_cpus = os.cpu_count() or 1
        self.device_space = self.space.for_device(self.device, max_workers=self.node_cpus)
        self.references = [(name, knobs.clamp(self.device)[0])
                           for name, knobs in self.workload.references.items()]
        self.reference_params = [(name, self.device_space.project(knobs), knobs)
                                 for name, knobs in self.references]
        self.data_dir = self._data_dir()
        self.samples = self.workload.check_data(self.data_dir, self.scale)
        warmup, windows, window_s = MEASUREMENT_DEFAULTS[self.scale]
        self.settings = TrialSettings(
            scale=self.scale, device=self.device, data_dir=str(self.data_dir),
            warmup_steps=options.warmup_steps or warmup, windows=options.windows or windows,
            window_s=options.window_s or window_s, seed=options.seed)
        self.trials = options.trials or (None if options.time_budget_s else
                                         (40 if self.device == "cuda" else 12))
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_id = f"{self.workload.name}-{stamp}-{secrets.token_hex(2)}"

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
    """Per-trial resource request (picklable; Ray Tune may checkpoint it)."""

    def __init__(self, gpus_per_trial: int, max_cpus: int):
        self.gpus_per_trial = gpus_per_trial
        self.max_cpus = max_cpus

    def __call__(self, config: dict) -> dict:
        cpus = min(int(config.get("num_workers", 0)) + 1, self.max_cpus)
        return {"cpu": cpus, "gpu": self.gpus_per_trial}


def _make_searcher(plan: Plan, trials: int | None):
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    class ConstrainedOptunaSearch(OptunaSearch):
        """OptunaSearch that evaluates the reference configurations first and passes memory
        failures to TPE as constraint violations."""

        def __init__(self, *args, references=(), **kwargs):
            super().__init__(*args, **kwargs)
            self._references = list(references)

        def suggest(self, trial_id: str):
            if self._references and trial_id not in self._ot_trials:
                name, params, knobs = self._references.pop(0)
                self._ot_study.enqueue_trial(params)
                config = super().suggest(trial_id)
                if config is not None:
                    config.update(knobs.to_dict(), reference=name)
                return config
            config = super().suggest(trial_id)
            if config is not None:
                config["reference"] = None
            return config

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
            status = (result or {}).get("status")
            if trial_id in self._ot_trials and status in ("oom", "over_limit"):
                # Positive = infeasible; TPE ranks infeasible trials by violation.
                self._ot_trials[trial_id].set_constraint("memory", 1.0)
            elif status == "ok" and trial_id in self._ot_trials:
                self._ot_trials[trial_id].set_constraint("memory", 0.0)
            elif status == "error":
                result, error = None, True
            super().on_trial_complete(trial_id, result=result, error=error)

    n_trials = trials or 40
    sampler = optuna.samplers.TPESampler(
        seed=plan.options.seed, n_startup_trials=min(10, max(3, n_trials // 3)))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return ConstrainedOptunaSearch(
        space=plan.device_space.sampler(), metric=METRIC, mode="max", sampler=sampler,
        references=plan.reference_params)


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
    """Tune one workload. ``on_event(kind, data)`` receives 'start' and 'trial' events.

    Raises:
        TunerError (and subclasses): bad input, found before Ray starts.
    """
    import time
    plan = plan or Plan(options)
    on_event = on_event or (lambda kind, data: None)
    started = time.perf_counter()
    started_ray = _ray_init(options.address, plan.device)
    try:
        rows = _fit(plan, on_event)
    finally:
        if started_ray:
            import ray
            ray.shutdown()
    return RunSummary(plan.run_id, plan.workload.name, plan.device, plan.scale, rows,
                      time.perf_counter() - started, options.results)


def _fit(plan: Plan, on_event: Callable[[str, dict], None]) -> list[dict]:
    import optuna
    import ray
    from ray import tune

    writer = LeaderboardWriter(plan, on_event, versions={
        "ray_version": ray.__version__, "optuna_version": optuna.__version__})
    trainable = tune.with_resources(  # a fresh function each run (notes section 2)
        make_trainable(plan.workload),
        resources=TrialResources(1 if plan.device == "cuda" else 0, plan.node_cpus))
    concurrency = max(1, plan.gpus) if plan.device == "cuda" else 1
    if plan.options.address is not None and plan.device == "cpu":
        concurrency = max(1, len([n for n in ray.nodes() if n.get("Alive")]))
    on_event("start", {"plan": plan, "concurrency": concurrency})
    tuner = tune.Tuner(
        trainable,
        param_space={"tuner": asdict(plan.settings)},
        tune_config=tune.TuneConfig(
            search_alg=_make_searcher(plan, plan.trials),
            num_samples=plan.trials if plan.trials else -1,
            time_budget_s=plan.options.time_budget_s,
            max_concurrent_trials=concurrency,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=plan.run_id,
            storage_path=str(Path(plan.options.results).resolve() / "ray"),
            callbacks=[writer],
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )
    tuner.fit()
    return writer.rows


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
        self.rows: list[dict] = []
        self._done: set[str] = set()

    def __getstate__(self) -> dict:
        # Ray Tune pickles its run config (callbacks included) for restore; the live console
        # behind on_event holds locks and is not part of the run's state.
        state = self.__dict__.copy()
        state["on_event"] = _ignore_event
        return state

    def _row(self, trial, result: dict) -> dict:
        config = trial.config
        reference = config.get("reference")
        row: dict[str, Any] = {}
        try:
            row.update(Knobs.from_dict(config, strict=False).to_dict())
        except ValueError:
            pass
        row.update(result)
        row.update(self.versions)
        resources = TrialResources(1 if self.plan.device == "cuda" else 0,
                                   self.plan.node_cpus)(config)
        row.update(run_id=self.plan.run_id, trial_id=trial.trial_id,
                   workload=self.plan.workload.name, scale=self.plan.scale,
                   reference=reference, is_baseline=reference == "baseline",
                   trial_cpus=resources["cpu"], trial_gpus=resources["gpu"])
        row.setdefault("device", self.plan.device)
        if row.get("error"):
            row["error"] = _one_line(row["error"])
        return row

    def _write(self, row: dict) -> None:
        leaderboard.append(self.plan.options.results, [row])
        self.rows.append(leaderboard.normalise_row(row))
        self.on_event("trial", {"row": self.rows[-1], "index": len(self.rows),
                                "total": self.plan.trials})

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
        result = {k: v for k, v in (trial.last_result or {}).items()
                  if k not in leaderboard.MEASURED_COLUMNS}
        result.update(status="error",
                      error=_one_line(str(error)) if error else "the trial process failed")
        self._write(self._row(trial, result))
