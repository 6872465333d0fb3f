"""A workload for the fault tests: the fake regression with slow steps that tells the test which
process (and Ray node) runs each trial.

Importable as ``tests.fault_workloads:slow`` so Ray workers load it by import path. Two
environment variables, read at each step (local Ray workers inherit the driver's environment):

* ``TUNER_TEST_STEP_SLEEP``: seconds slept in every training step (default 0.05), so a trial
  lasts long enough to be interrupted while it measures.
* ``TUNER_TEST_PID_DIR``: where the first step of each trial writes ``<pid>-<n>``, holding
  ``<pid> <ray node id>`` (written to a temporary name, then renamed: a reader never sees a
  half-written file).
* ``TUNER_TEST_HOLD_FILE`` and ``TUNER_TEST_HOLD_FROM_TRIAL`` (with the PID directory): the
  n-th trial of a process, n at least that number, waits in its first step while that file
  exists (at most ``HOLD_MAX_S``), so a test stops the run where it means to, however slowly
  the test itself is scheduled.
"""

from __future__ import annotations

import itertools
import os
import time
import weakref
from pathlib import Path

import torch
from torch import nn

from tests.fake_workloads import Regression

PID_DIR_ENV = "TUNER_TEST_PID_DIR"
STEP_SLEEP_ENV = "TUNER_TEST_STEP_SLEEP"
HOLD_FILE_ENV = "TUNER_TEST_HOLD_FILE"
HOLD_FROM_ENV = "TUNER_TEST_HOLD_FROM_TRIAL"
HOLD_MAX_S = 240.0

_announced: "weakref.WeakKeyDictionary[nn.Module, int]" = weakref.WeakKeyDictionary()
_count = itertools.count(1)


def _node_id() -> str:
    try:
        import ray
        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except Exception:
        pass
    return "-"


def announce(model: nn.Module) -> int | None:
    """Write this process's PID and node once per model (one model per trial); the trial's
    number in this process (None without a PID directory)."""
    directory = os.environ.get(PID_DIR_ENV)
    if not directory:
        return None
    if model in _announced:
        return _announced[model]
    _announced[model] = n = next(_count)
    pid = os.getpid()
    path = Path(directory) / f"{pid}-{n}"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{pid} {_node_id()}\n")
    os.replace(tmp, path)
    hold(n)
    return n


def hold(n: int) -> None:
    """Wait while the hold file exists, when this is the process's n-th trial and n is at
    least ``TUNER_TEST_HOLD_FROM_TRIAL``."""
    path, first = os.environ.get(HOLD_FILE_ENV), os.environ.get(HOLD_FROM_ENV)
    if not path or not first or n < int(first):
        return
    deadline = time.monotonic() + HOLD_MAX_S
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


class SlowRegression(Regression):
    """The fake regression, ``TUNER_TEST_STEP_SLEEP`` seconds slower per step."""

    name = "fault-slow"

    def training_step(self, model: nn.Module, batch) -> torch.Tensor:
        if batch[0].device.type == "meta":  # the run's FLOP count (tuner.trial.flops), not a trial
            return super().training_step(model, batch)
        announce(model)
        time.sleep(float(os.environ.get(STEP_SLEEP_ENV, "0.05")))
        return super().training_step(model, batch)


slow = SlowRegression()
