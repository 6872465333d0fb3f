"""tuner: finds the fastest way to train a given PyTorch model on given hardware.

Short, carefully measured training trials run under Ray Tune with an Optuna search; every
trial lands in a Parquet leaderboard. README.md is the user's guide; docs/benchmarks.md holds
the measured figures.

The Python API: ``tuner.tune(...)`` returns a ``tuner.TuneResult`` (a ``tuner.ScalingResult``
for several world sizes; ``tuner.api``). Importing ``tuner`` stays light: the API, torch and
Ray load on first use.

Code map, top to bottom (``tests/test_architecture.py`` keeps each module on its floor: no
import, even at run time, reaches a higher floor):

* entry points: ``cli`` (+ ``cli_options``), ``api`` — the command line and ``tune()``;
* the run, in the Ray driver (torch-free until a trial): ``driver`` (the phases), ``plan``
  (the run's plan and its budget terms), ``option_checks`` (the options checked and made a
  plan), ``search_policy`` (what the space keeps, where the search starts; above ``plan``),
  ``searcher`` (the Optuna search), ``staging`` (the run's phases as one Ray Tune
  experiment), ``probe`` (memory), ``followups`` (re-measurement, ceilings: the follow-up
  policy's plan run as batches), ``pruning``, ``recorder``, ``ray_runtime``, ``runlock``;
  beside them ``checks`` (``validate`` and ``profile`` of one configuration, as values);
* results, torch-free: ``leaderboard`` (Parquet rows), ``winner`` (the answer),
  ``compile_payback`` (whether ``torch.compile`` pays for it), ``ceilings``
  (what bounds it, and the verdict of each ceiling), ``scaling`` (world sizes), ``noise``,
  ``progress`` (the live printer), ``summary`` (the closing table), ``machine_load`` (busy
  and drift notes), ``price_errors`` (the cost model's prices against the wall times),
  ``report`` (the HTML page; its figures ``report_figures``), ``export``, ``diagnose``; the
  built-in workloads ``workloads/``; the adapters ``integrations/`` (``lightning``, its
  ``Trainer.fit()`` measurement ``lightning_fit``, and the answer in Lightning's terms
  ``lightning_args``, torch-free);
* the trial, torch side (runs in a Ray worker), the package ``trial/``: ``harness``,
  ``result_columns`` (the columns the loop does not measure), ``apply`` (knobs onto the
  model), ``steppers``, ``measure``, ``prefetch`` (what a window counts when DataLoader
  workers prefetch), ``flops``, ``failures``, ``compile_artifacts`` (a compiled trial's
  torch.compile artifacts, kept for the user's job),
  ``ranks`` and ``distributed`` (data-parallel trials), ``validate`` (the plain loop); beside
  it ``hardware`` (the device's key and peak); ``harness`` at the top is the old path of
  ``trial/harness``, kept for one release;
* contracts: ``workload`` (what a workload is), ``workload_calls`` (how its scale-taking
  methods are called: tuner 0.2's scale word, their errors in one line), ``workload_loader``
  (how one is found by name or path), ``space`` (search spaces), ``data`` (data paths),
  ``cluster``; ``integrations/transformers`` (a Transformers ``Trainer`` as a workload, which
  the loader wraps; ``integrations/lightning``, which nothing below imports, sits with the
  results);
* base, torch-free: ``knobs`` (every knob fact as field metadata), ``settings``, ``status``,
  ``history`` (leaderboard rows typed, and the questions asked of them), ``errors``,
  ``budget`` (the run's time), ``followup_policy`` (what the re-measurement keeps in the time
  left, as one plan value), ``costs`` (one price per trial), ``step_fit``
  (step time as a line in the batch), ``compile_finalists`` (compile measured at the
  finalists: mode, place, price), ``windows``, ``screening`` (how long a screening trial
  measures),
  ``codegen``, ``_deprecated`` (moved names), ``integrations/transformers_args`` (knobs as
  ``TrainingArguments``).
"""

import os
from typing import Any

from tuner.settings import VERSION as __version__

DEVICE_HOOK_ENV = "TUNER_DEVICE_HOOK"
"""``module:function`` called once in every process that imports tuner, before anything else
of it runs (the driver and Ray's workers, which inherit the environment): a test seam that
installs a simulated device (``tests.simulated_gpu:install``). Unset: nothing happens."""
if os.environ.get(DEVICE_HOOK_ENV):
    import importlib

    _module, _, _function = os.environ[DEVICE_HOOK_ENV].partition(":")
    getattr(importlib.import_module(_module), _function)()

__all__ = ["tune", "TuneResult", "ScalingResult", "__version__"]


def __getattr__(name: str) -> Any:
    """``tuner.tune``, ``tuner.TuneResult`` and ``tuner.ScalingResult``, imported from
    ``tuner.api`` when first used."""
    if name in ("tune", "TuneResult", "ScalingResult"):
        from tuner import api
        return getattr(api, name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
