"""A configuration checked outside the search: ``tuner validate`` and ``tuner profile`` as
functions returning typed results, which the command line only prints.

* ``validate(...)``: a leaderboard trial's configuration trained in real training, its
  samples/sec against the trial's. A workload with a trainer of its own
  (``Workload.trainer_samples_per_sec``: a LightningModule's ``Trainer.fit()``) is trained in
  that trainer, the answer's knobs and the baseline's in interleaved rounds
  (``TrainerValidation``); any other as a plain training loop (``tuner.trial.validate``,
  ``Validation``). In two steps: ``plan_validation`` (the row, its checks, the data) and
  ``run_validation``.
* ``profile(...)``: one configuration measured as a trial with a per-phase breakdown
  (``plan_profile``, ``run_profile``): the trial's row, which ``tuner.diagnose`` reads.

Every bad input raises ``TunerError`` (or ``DataError``) in one line.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.errors import TunerError
from tuner.knobs import Knobs
from tuner.status import Phase, Status, phase_of

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

    from tuner.settings import TrialSettings
    from tuner.trial.validate import Validation
    from tuner.workload import Workload

TRAINER_ROUNDS = 3
"""Rounds of ``trainer_validation``: each the answer's knobs, then the baseline's."""

TRAINER_WARMUP_ROUNDS = 1
"""Rounds of ``trainer_validation`` trained first and not counted: a side's first trainer
run in a process reads low (Lightning, the answer of ``bench/lit_example.py`` at bs=928 on 2
CPUs: 25.9k samples/sec first, then 30.5k, 31.5k, 28.7k)."""

MIN_TRAINER_STEPS = 20
"""Optimizer steps a trainer round measures at least, after the warm-up."""


def configured_workload(workload: str, model: str | None = None,
                        image_size: int | None = None) -> "Workload":
    """The workload ``workload`` names (a name or import path), configured with ``model`` and
    ``image_size`` (``--model``, ``--image-size``). Raises TunerError."""
    from tuner.option_checks import resolve_workload
    from tuner.settings import RunOptions
    return resolve_workload(RunOptions(workload=workload, workload_options={
        "model": model, "image_size": image_size}))


def workload_name(spec: str) -> str:
    """Leaderboard rows carry the workload's name; an import path is resolved to it."""
    if ":" in spec:
        from tuner.workload_loader import resolve
        return resolve(spec).name
    return spec


def load_rows(results: str, workload: str, hardware: str | None,
              scale: str | None = None) -> tuple["pa.Table", str]:
    """``tuner.leaderboard.select`` for a read command: an import path is resolved to its
    name, with rows from several machines this machine's key is taken, and with ``scale``
    only that scale's rows are read. Returns (rows, hardware key); raises TunerError."""
    import tuner.leaderboard as leaderboard
    return leaderboard.select(results, workload_name(workload), hardware, scale=scale,
                              this_machine=_this_machine_key)


def _this_machine_key(keys: list[str]) -> str | None:
    import torch

    from tuner.hardware import fingerprint
    for device in (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]:
        key = fingerprint(torch.device(device))["hardware_key"]
        if key in keys:
            return key
    return None


def pick_row(table: "pa.Table", trial_id: str | None) -> dict:
    """The row of ``trial_id``, or the answer's (``tuner.winner.best``) without it. Raises
    TunerError: no successful trial, or no such trial (the message lists some)."""
    from tuner.winner import best
    rows = table.to_pylist()
    if trial_id is None:
        answer = best(rows)
        if answer is None:
            raise TunerError("no successful trial to take the configuration from")
        return dict(answer.row)
    match = [r for r in rows if r["trial_id"] == trial_id]
    if not match:
        raise TunerError(f"--trial {trial_id}: no such trial; trials here: "
                         f"{', '.join(r['trial_id'] for r in rows[:20])}")
    return match[0]


def check_validatable(row: dict) -> None:
    """Raise TunerError unless ``row`` is a whole training measurement ``validate`` can check:
    status ok (a pruned or timed-out trial holds a partial figure, a failed one none), not a
    ceiling (no configuration trains at a compute-only or loader-only rate), no impossible
    figure (``tuner.noise.impossible``)."""
    import tuner.noise as noise
    what = f"--trial {row['trial_id']}"
    if row["status"] != Status.OK or row["samples_per_sec"] is None:
        raise TunerError(f"{what} ended {row['status']} and has no whole measurement to "
                         f"validate; accepted: a trial whose status is ok")
    if phase_of(row) == Phase.CEILING:
        raise TunerError(f"{what} is a {row.get('ceiling') or 'compute'}-only ceiling, not a "
                         f"configuration's training rate; accepted: a search or re-measured trial")
    reason = noise.impossible(row)
    if reason:
        raise TunerError(f"{what} was disturbed ({reason}); accepted: a trial with no "
                         f"impossible figure")


def training_threads(row: dict) -> int | None:
    """Torch threads to train a CPU trial's configuration with: the threads its training
    process had (the row's ``torch_threads``, else what the trial's CPUs gave it,
    ``tuner.trial.harness.training_threads``); None (torch's setting) on CUDA or without the
    trial's CPUs."""
    if row["device"] != "cpu" or not row.get("trial_cpus"):
        return None
    from tuner.trial.harness import training_threads as for_cpus
    return row.get("torch_threads") or for_cpus(int(row.get("num_workers") or 0),
                                                int(row["trial_cpus"]))


@dataclass
class ValidationPlan:
    """What ``run_validation`` trains: a trial's row, checked, and where."""
    workload: "Workload"
    row: dict
    knobs: Knobs
    ranks: int
    """Ranks of the plain loop (the trial's world size)."""
    threads: int | None
    """Torch threads (``training_threads``)."""
    data_dir: "Path"
    baseline_row: dict | None = None
    """The trial's run's baseline reference row, ``samples_per_sec`` as the answer reads it
    (``_baseline_row``; None: not in the leaderboard), for a trainer."""
    compile_cache_dir: str | None = None
    """torch.compile's cache of the results folder the trial ran into
    (``tuner.settings.compile_cache_path``): a compiled loop starts from the run's compiles."""

    @property
    def in_trainer(self) -> bool:
        """The workload has a trainer of its own (it overrides
        ``Workload.trainer_samples_per_sec``) and the trial had one rank."""
        from tuner.workload import Workload
        own = type(self.workload).trainer_samples_per_sec
        return own is not Workload.trainer_samples_per_sec and self.ranks == 1

    @property
    def trainer(self) -> str:
        """The workload's trainer as ``validate`` names it (its ``trainer_name``, e.g.
        'Lightning Trainer.fit()'; else 'its own trainer')."""
        return getattr(self.workload, "trainer_name", "its own trainer")

    @property
    def where(self) -> str:
        """'2 CPU threads', 'CUDA', or '2 ranks, each on CUDA'."""
        import torch
        where = (f"{self.threads or torch.get_num_threads()} CPU threads"
                 if self.row["device"] == "cpu" else "CUDA")
        return f"{self.ranks} ranks, each on {where}" if self.ranks > 1 else where


def plan_validation(workload: str, *, results: str = "tuner-results",
                    hardware: str | None = None, scale: str | None = None,
                    model: str | None = None, image_size: int | None = None,
                    trial_id: str | None = None, data: str | None = None,
                    world_size: int | None = None) -> ValidationPlan:
    """The trial to validate (``trial_id``, else the answer) of ``workload`` in ``results``,
    checked (``check_validatable``; a CUDA trial needs CUDA here; its data path needs the
    workload's ``sample_path``; ``world_size`` must be the trial's), and its data checked as
    ``run`` checks it (``tuner.option_checks.checked_data``). Raises TunerError, DataError."""
    import torch

    from tuner.option_checks import checked_data
    from tuner.trial.validate import check_data_path, ranks_for
    w = configured_workload(workload, model, image_size)
    table, hardware = load_rows(results, w.name, hardware, scale)
    row = pick_row(table, trial_id)
    check_validatable(row)
    if row["device"] == "cuda" and not torch.cuda.is_available():
        raise TunerError(f"trial {row['trial_id']} ran on CUDA ({hardware}); no CUDA device here")
    knobs = Knobs.from_dict(row, strict=False)
    check_data_path(w, knobs)
    ranks = ranks_for(row, world_size)
    data_dir = checked_data(w, data, row["scale"])[0]
    from tuner.settings import compile_cache_path
    return ValidationPlan(w, row, knobs, ranks, training_threads(row), data_dir,
                          _baseline_row(table.to_pylist(), row), compile_cache_path(results))


def _baseline_row(rows: list[dict], row: dict) -> dict | None:
    """The baseline reference of ``row``'s run as the answer reads it (``tuner.winner``): its
    measured rows, the re-measured ones where there are any, the last of them with
    ``samples_per_sec`` their geometric mean; None without one."""
    found = [r for r in rows if r["run_id"] == row["run_id"] and r.get("reference") == "baseline"
             and r["status"] == Status.OK and r.get("samples_per_sec")
             and phase_of(r) != Phase.CEILING]
    again = [r for r in found if phase_of(r) == Phase.REMEASURE]
    found = again or found
    if not found:
        return None
    rates = [r["samples_per_sec"] for r in found]
    return {**found[-1], "samples_per_sec": statistics.geometric_mean(rates)}


def run_validation(plan: ValidationPlan, *, steps: int | None = None,
                   rounds: int = TRAINER_ROUNDS) -> "Validation | TrainerValidation":
    """Train ``plan``'s configuration: in the workload's own trainer where it has one
    (``trainer_validation``, ``rounds`` rounds), else as the plain loop
    (``tuner.trial.validate.loop_for_row``; ``steps`` None: an epoch, and as long as the
    trial measured). Raises what training raises."""
    if plan.in_trainer:
        return trainer_validation(plan, steps=steps, rounds=rounds)
    from tuner.trial.validate import loop_for_row
    return loop_for_row(plan.workload, plan.knobs, plan.row, data_dir=plan.data_dir,
                        steps=steps, threads=plan.threads, ranks=plan.ranks,
                        compile_cache_dir=plan.compile_cache_dir)


def validate(workload: str, *, steps: int | None = None, **where: Any
             ) -> "Validation | TrainerValidation":
    """``plan_validation(workload, **where)`` then ``run_validation``: what ``tuner
    validate`` runs, as values (``where``: ``results``, ``hardware``, ``scale``, ``model``,
    ``image_size``, ``trial_id``, ``data``, ``world_size``). Raises as those two."""
    return run_validation(plan_validation(workload, **where), steps=steps)


@dataclass
class TrainerValidation:
    """The answer's knobs and the baseline's in the workload's own trainer, in interleaved
    rounds (answer, baseline, answer, baseline, ...)."""
    predicted_samples_per_sec: float
    """The trial's figure (its median over windows)."""
    answer_samples_per_sec: list[float] = field(default_factory=list)
    """The trainer's steady-state rate of the answer's knobs, per round."""
    baseline_samples_per_sec: list[float] = field(default_factory=list)
    """The same of the baseline's knobs, per round."""
    answer_steps: int = 0
    baseline_steps: int = 0
    baseline_predicted_samples_per_sec: float | None = None
    """The baseline trial's figure in the same run (None: no such row)."""

    @property
    def measured_samples_per_sec(self) -> float:
        """The median of the answer's rounds."""
        return statistics.median(self.answer_samples_per_sec)

    @property
    def baseline_measured_samples_per_sec(self) -> float:
        return statistics.median(self.baseline_samples_per_sec)

    @property
    def ratio(self) -> float:
        """Measured ÷ predicted."""
        return self.measured_samples_per_sec / self.predicted_samples_per_sec

    @property
    def speedup(self) -> float:
        """The answer over the baseline in the trainer (median ÷ median)."""
        return self.measured_samples_per_sec / self.baseline_measured_samples_per_sec

    @property
    def round_speedups(self) -> list[float]:
        """The answer over the baseline in each round (the spread of ``speedup``)."""
        return [a / b for a, b in zip(self.answer_samples_per_sec, self.baseline_samples_per_sec)]

    @property
    def trial_speedup(self) -> float | None:
        """The answer over the baseline as the trials measured them."""
        base = self.baseline_predicted_samples_per_sec
        return self.predicted_samples_per_sec / base if base else None


def trainer_steps(row: dict, knobs: Knobs) -> int:
    """Optimizer steps of a trainer round for a trial's row: the scale's warm-up, then as
    many steps as the trial's measured seconds held at its rate (``measured_s`` ×
    ``samples_per_sec`` ÷ global batch), at least ``MIN_TRAINER_STEPS``."""
    from tuner.settings import MEASUREMENT_DEFAULTS
    warmup, windows, window_s = MEASUREMENT_DEFAULTS[row["scale"]]
    measured_s = row.get("measured_s") or windows * window_s
    per_step = knobs.batch_size * knobs.grad_accum
    return warmup + max(MIN_TRAINER_STEPS,
                        math.ceil(measured_s * (row.get("samples_per_sec") or 0) / per_step))


def trainer_validation(plan: ValidationPlan, *, steps: int | None = None,
                       rounds: int = TRAINER_ROUNDS) -> TrainerValidation:
    """``rounds`` rounds of the workload's trainer (``Workload.trainer_samples_per_sec``),
    each the answer's knobs then the baseline's (the run's baseline row's knobs, else the
    workload's baseline), each side on the threads its trial trained with
    (``training_threads``: on a busy 2-core machine one thread ran a batch-16 baseline 7-10x
    faster than its trial's two did), after ``TRAINER_WARMUP_ROUNDS`` rounds not counted.
    Each round trains ``steps`` optimizer steps
    (None: ``trainer_steps`` of its row). Raises TunerError when the trainer returns None;
    what training raises."""
    from tuner.trial.validate import same_threads
    base = plan.baseline_row
    base_knobs = Knobs.from_dict(base, strict=False) if base else plan.workload.baseline
    out = TrainerValidation(
        plan.row["samples_per_sec"],
        answer_steps=steps or trainer_steps(plan.row, plan.knobs),
        baseline_steps=steps or trainer_steps(base or plan.row, base_knobs),
        baseline_predicted_samples_per_sec=base["samples_per_sec"] if base else None)
    sides = ((plan.knobs, out.answer_steps, out.answer_samples_per_sec, plan.row),
             (base_knobs, out.baseline_steps, out.baseline_samples_per_sec, base or plan.row))
    for round_ in range(TRAINER_WARMUP_ROUNDS + rounds):
        for knobs, n, rates, row in sides:  # each on its own trial's threads
            with same_threads(training_threads(row), row.get("omp_num_threads")):
                rate = plan.workload.trainer_samples_per_sec(
                    knobs, steps=n, device=plan.row["device"], scale=plan.row["scale"])
            if rate is None:
                raise TunerError(f"workload {plan.workload.name!r}: its trainer measured "
                                 "nothing (trainer_samples_per_sec returned None)")
            if round_ >= TRAINER_WARMUP_ROUNDS:
                rates.append(rate)
    return out


@dataclass
class ProfilePlan:
    """What ``run_profile`` measures."""
    workload: "Workload"
    knobs: Knobs
    source: str
    """Where the knobs came from: '--knobs', 'trial ID' or "the workload's baseline"."""
    settings: "TrialSettings"
    dropped: list[str]
    """'name=value' of each baseline knob ``--knobs`` dropped (``Knobs.updated``)."""


def plan_profile(workload: str, *, model: str | None = None, image_size: int | None = None,
                 knobs_json: str | None = None, trial_id: str | None = None,
                 results: str = "tuner-results", hardware: str | None = None,
                 device: str = "auto", scale: str | None = None, data: str | None = None,
                 steps: int = 10) -> ProfilePlan:
    """The configuration ``tuner profile`` measures: ``knobs_json`` over the baseline, else the
    trial ``trial_id``, else the best trial in ``results``, else the workload's baseline; on
    ``device`` at ``scale`` (None: ``tuner.settings.default_scale``), with ``steps``
    synchronised steps per phase, the data checked. Raises TunerError, DataError."""
    from tuner.option_checks import checked_data, resolve_device
    from tuner.settings import (
        MEASUREMENT_DEFAULTS,
        TrialSettings,
        compile_cache_path,
        default_scale,
    )
    w = configured_workload(workload, model, image_size)
    device = resolve_device(device)
    scale = scale or default_scale(device)
    source, knobs, dropped = "the workload's baseline", w.baseline, []
    if knobs_json is not None:
        knobs, dropped = knobs_over(w.baseline, knobs_json)
        source = "--knobs"
    elif trial_id is not None or _has_rows(results, w.name):
        row = pick_row(load_rows(results, w.name, hardware)[0], trial_id)
        knobs, source = Knobs.from_dict(row, strict=False), f"trial {row['trial_id']}"
    warmup, _, window_s = MEASUREMENT_DEFAULTS[scale]
    settings = TrialSettings(scale=scale, device=device,
                             data_dir=str(checked_data(w, data, scale)[0]), warmup_steps=warmup,
                             windows=2, window_s=window_s, breakdown_steps=steps,
                             compile_cache_dir=compile_cache_path(results))
    return ProfilePlan(w, knobs, source, settings, dropped)


def run_profile(plan: ProfilePlan) -> dict:
    """The configuration measured as a local run's trial (``tuner.trial.harness.run_trial``
    with this machine's CPUs): its leaderboard row, with the per-phase breakdown
    (``tuner.diagnose`` reads it). Raises TunerError when the configuration failed."""
    from tuner.option_checks import local_cpus
    from tuner.trial.harness import run_trial
    row = run_trial(plan.workload, plan.knobs, plan.settings, cpus=local_cpus())
    if row["status"] != Status.OK:
        raise TunerError(f"the configuration failed ({row['status']}): {row['error']}")
    return row


def profile(workload: str, **options: Any) -> dict:
    """``plan_profile(workload, **options)`` then ``run_profile``: what ``tuner profile``
    measures, as its row. Raises as those two."""
    return run_profile(plan_profile(workload, **options))


def knobs_over(baseline: Knobs, knobs_json: str) -> tuple[Knobs, list[str]]:
    """``--knobs`` JSON over the baseline (``Knobs.updated``: knobs that no longer apply are
    dropped, and listed). Raises TunerError naming the text."""
    try:
        changes = json.loads(knobs_json)
        if not isinstance(changes, dict):
            raise ValueError(f"expected a JSON object of knobs such as {{\"batch_size\": 64}}, "
                             f"got a {type(changes).__name__}")
        return baseline.updated(changes)
    except (json.JSONDecodeError, ValueError, TypeError) as exc:
        raise TunerError(f"--knobs {knobs_json!r}: {exc}") from None


def _has_rows(results: str, workload: str) -> bool:
    import tuner.leaderboard as leaderboard
    return leaderboard.read(results, workload=workload).num_rows > 0
