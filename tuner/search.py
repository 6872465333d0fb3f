"""The search: Ray Tune ``Tuner`` driving the constrained Optuna searcher (``tuner.searcher``)
over a validated plan (``tuner.plan``).

* Phases: optional memory probe, the search, re-measurement of the best configurations, and
  the winner's compute-only ceiling; on a cluster with several accelerator types, all of it
  once per type.
* Resources per trial: CPUs = num_workers + 1 (capped at the node's CPUs), one whole GPU on
  CUDA; one trial per GPU (per node on CPU) at a time, so trials do not steal each other's cores.
* The driver writes a leaderboard row as each trial finishes.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

from tuner import leaderboard
from tuner.errors import TunerError
from tuner.harness import TrialSettings, run_trial
from tuner.knobs import Knobs
from tuner.plan import MEASUREMENT_DEFAULTS, Plan, RunOptions, RunSummary, ray_init
from tuner.searcher import make_searcher
from tuner.workload import Workload, default_cache_dir, make_trainable

__all__ = ["MEASUREMENT_DEFAULTS", "Plan", "RunInterrupted", "RunOptions", "RunSummary",
           "TrialResources", "run"]

# Older names, kept for tests and tools that start Ray or build a searcher the way a run does.
_ray_init = ray_init
_make_searcher = make_searcher

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
    started_ray = ray_init(options.address, plan.device)
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
            search_alg=make_searcher(plan, plan.trials),
            num_samples=plan.remaining_trials if plan.trials else -1,
            time_budget_s=plan.options.time_budget_s,
            max_concurrent_trials=_concurrency(plan),
            reuse_actors=_reuse_actors(plan),
        ),
        run_config=_run_config(plan, writer, _experiment_name(plan, "search")),
    )
    tuner.fit()


def _fit_followups(plan: Plan, writer: "LeaderboardWriter", on_event: Callable[[str, dict], None]) -> None:
    """Re-measure the best configurations with twice the windows, side by side with the
    references that succeeded (the winner and its speed-ups are read from these), then measure
    the winner's compute-only ceiling."""
    rows = [r for r in writer.rows if r.get("accelerator_type") == plan.accelerator_type]
    ok = [r for r in rows if r["status"] == "ok" and r[plan.metric] is not None
          and (r.get("phase") or "search") == "search"]
    ok.sort(key=lambda r: r[plan.metric], reverse=plan.mode == "max")
    top: list[Knobs] = []
    for r in ok:
        knobs = Knobs.from_dict(r, strict=False)
        if knobs not in top:
            top.append(knobs)
    top = top[:plan.options.confirm]
    if len(top) >= 2:
        refs: dict[Knobs, str] = {}
        for r in ok:
            if r["reference"] and r["reference"] not in refs.values():
                refs.setdefault(Knobs.from_dict(r, strict=False), r["reference"])
        configs = [(k, refs.get(k)) for k in top] + [(k, name) for k, name in refs.items()
                                                      if k not in top]
        on_event("phase", {"phase": "remeasure", "count": len(configs)})
        _fit_fixed(plan, writer, configs, "remeasure", windows=plan.settings.windows * 2)
    if plan.options.ceiling and top:
        winner = leaderboard.best_row([r for r in writer.rows
                                       if r.get("accelerator_type") == plan.accelerator_type])
        if winner is not None:
            on_event("phase", {"phase": "ceiling", "count": 1})
            _fit_fixed(plan, writer, [(Knobs.from_dict(winner, strict=False), None)], "ceiling",
                       compute_only=True)


def _fit_fixed(plan: Plan, writer: "LeaderboardWriter", configs: list[tuple[Knobs, str | None]],
               phase: str, **settings_changes: Any) -> None:
    """Measure given configurations (knobs, reference name or None) as one Tune experiment."""
    from ray import tune
    if writer.expected is not None:
        writer.expected += len(configs)
    settings = {**asdict(plan.settings), **settings_changes}
    tuner = tune.Tuner(
        _trainable(plan),
        param_space={"tuner": settings, "phase": phase, "reference": None,
                     "fixed": tune.grid_search([{**k.to_dict(), "reference": ref}
                                                for k, ref in configs])},
        tune_config=tune.TuneConfig(max_concurrent_trials=_concurrency(plan),
                                    reuse_actors=_reuse_actors(plan)),
        run_config=_run_config(plan, writer, _experiment_name(plan, phase)),
    )
    tuner.fit()


def _stamp(trial, result: dict) -> None:
    """started_at/finished_at for a trial that never reported its final result (its process
    died): when Ray Tune started it, and now."""
    import datetime as dt
    now = dt.datetime.now(dt.timezone.utc)
    start = getattr(getattr(trial, "run_metadata", None), "start_time", None)
    if result.get("started_at") is None:
        result["started_at"] = dt.datetime.fromtimestamp(start, dt.timezone.utc) if start else now
    if result.get("finished_at") is None:
        result["finished_at"] = now


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
        _stamp(trial, result)
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
        _stamp(trial, result)
        self._write(self._row(trial, result))
