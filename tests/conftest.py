"""Shared fixtures of the engine tests: the fake workloads' data, a private data cache, and one
local Ray shared by the modules that need it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

GPU_ONLY_ENV = "TUNER_TEST_KEEP_CUDA"
"""Set to 1 to keep CUDA visible in a pytest run that does not select ``-m gpu``."""


def pytest_configure(config) -> None:
    """A pytest run that does not select the ``gpu`` marker sees no CUDA device (set before torch is
    imported; Ray workers and CLI subprocesses inherit it), so a test that leaves the device
    at 'auto' gets the CPU run it was written for, not a CUDA run at 'full' scale with a
    memory probe. GPU checks run with ``pytest -m gpu`` (tests/gpu/), which keeps CUDA visible.

    A ``--device cpu`` trial on a GPU machine leaves CUDA uninitialised in its process
    (``tuner.trial.failures.free_device_memory``, ``tuner.trial.apply.keep_cpu_trial_off_the_gpus``;
    tests/test_harness.py, tests/gpu/test_real_card.py): a CUDA context costs seconds per
    process and memory on the card, and its mappings are copied into every DataLoader worker
    forked after it. torch 2.14's optimizers initialise CUDA at their first step when it is
    visible, CPU parameters or not; torch 2.11's do not."""
    if "gpu" not in (config.getoption("markexpr") or "") and not os.environ.get(GPU_ONLY_ENV):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # An xdist worker starts with COLUMNS=80 and LINES=24 in its environment: the CLI's
        # console, made when tuner.cli is imported, would fold every table at 80 columns.
        # Without them it is as wide as in a pytest run without workers (tuner.cli._console).
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)


def run_landscape(tmp_path: Path, name: str) -> tuple[subprocess.CompletedProcess, Path]:
    """``python -m tuner run`` of the landscape ``tests.landscapes:<name>`` on the CPU, seed 0:
    the references and the trials of a 3-trial budget, 2 windows of 1 s, no follow-ups; its
    process and results folder. Trials, not a time budget: a loaded machine slows the run but
    does not change what it measures."""
    results = tmp_path / "results"
    env = {**os.environ, "TUNER_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--workload", f"tests.landscapes:{name}",
         "--device", "cpu", "--trials", "3", "--seed", "0", "--windows", "2",
         "--window-s", "1", "--confirm", "0", "--no-ceiling", "--results", str(results)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    return proc, results


def tuner_in_process(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``tuner(*args)`` through ``tuner.cli.main`` in this process (click's CliRunner, 200
    columns; ``env["TUNER_CACHE"]`` when given), as a completed process: exit code, stdout,
    stderr. Asserts that nothing but click's exit left the command (no traceback)."""
    from click.testing import CliRunner

    from tuner.cli import main
    extra = {"TUNER_CACHE": env["TUNER_CACHE"]} if env else {}
    result = CliRunner(env={**extra, "COLUMNS": "200"}).invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args[0], result.exception)
    return subprocess.CompletedProcess(["tuner", *args], result.exit_code, result.stdout,
                                       result.stderr)


@pytest.fixture(scope="session")
def regression_data(tmp_path_factory) -> Path:
    """The 64 .npy files of tests.fake_workloads (written once per pytest run)."""
    from tests.fake_workloads import regression
    return regression.prepare_default_data(tmp_path_factory.mktemp("fake-data"), "tiny")


@pytest.fixture
def tuner_cache(tmp_path, monkeypatch) -> Path:
    """$TUNER_CACHE pointed at a temporary directory: default datasets are written there."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TUNER_CACHE", str(cache))
    return cache


_SHARED_RAY: dict = {"key": None}
"""The local Ray ``ray_session`` started and shares: ``key`` is what its workers took from this
process when it started (``_ray_start_key``), None when no shared Ray is up."""


def _ray_start_key() -> tuple:
    """What a local Ray's workers take from the process that starts it: ``sys.path`` and the
    working directory (their PYTHONPATH, ``tuner.ray_runtime.ray_init``) and the environment
    (less pytest's current-test name and the variables ``ray_init`` sets before it starts
    Ray)."""
    from tuner.ray_runtime import _RAY_ENV
    env = {k: v for k, v in os.environ.items()
           if k != "PYTEST_CURRENT_TEST" and k not in _RAY_ENV}
    return tuple(sys.path), os.getcwd(), tuple(sorted(env.items()))


def stop_shared_ray() -> None:
    """Shut down the Ray ``ray_session`` shares, if it is up: for a test that starts a cluster
    of its own (tests/test_faults_cluster.py), which must find Ray uninitialised."""
    import ray
    if _SHARED_RAY["key"] is not None and ray.is_initialized():
        ray.shutdown()
    _SHARED_RAY["key"] = None


def _every_cpu_free(timeout_s: float = 10.0) -> bool:
    """The running Ray's CPUs all free (no actor or task of an earlier module holds one),
    waiting up to ``timeout_s`` for its resource view to catch up."""
    import ray
    deadline = time.monotonic() + timeout_s
    while True:
        total = ray.cluster_resources().get("CPU", 0.0)
        if ray.available_resources().get("CPU", 0.0) >= total:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


@pytest.fixture(scope="session")
def _shared_ray_stopped_at_the_end():
    yield
    stop_shared_ray()


@pytest.fixture(scope="module")
def ray_session(_shared_ray_stopped_at_the_end):
    """A local Ray for the module, started by the product's own ``ray_init`` (so workers get
    the same PYTHONPATH as a real run); ``tuner.driver.run`` reuses it. One Ray is shared by
    the modules that ask for it (a start costs seconds): a module gets the running one only
    when its workers would see what this module's own start would give them (the same
    ``sys.path``, working directory and environment) and every one of its CPUs is free;
    otherwise that Ray is shut down and a new one started. Stopped at the end of the pytest
    run, or by ``stop_shared_ray``."""
    import ray

    from tuner.ray_runtime import ray_init
    key = _ray_start_key()
    if _SHARED_RAY["key"] is not None and ray.is_initialized() and (
            _SHARED_RAY["key"] != key or not _every_cpu_free()):
        stop_shared_ray()
    if ray_init(None):
        # Ray adds to the environment and sys.path as it starts: the key is taken after that
        _SHARED_RAY["key"] = _ray_start_key()
    yield


def pytest_collection_modifyitems(config, items) -> None:
    """The tests of ``tests/timing.py`` carry the ``timing`` marker (``pytest -m timing``)."""
    from tests.timing import mark
    whole_files = not config.option.keyword and not any("::" in a for a in config.args)
    mark(items, pytest.mark.timing, whole_files)


@pytest.fixture
def step_clock(monkeypatch):
    """A ``tests.fake_workloads.StepClock`` in place of ``time`` in tuner.trial.harness,
    tuner.trial.measure and tuner.trial.steppers: a trial's windows, deadlines and phase times
    move only with its steps (``ClockedPaced``, ``_ClockedTransient``), so they are exact
    however busy the machine is."""
    from tests.fake_workloads import StepClock
    from tuner.trial import harness, measure, steppers
    clock = StepClock()
    for module in (harness, measure, steppers):
        monkeypatch.setattr(module, "time", clock)
    return clock


@pytest.fixture
def one_torch_thread():
    """Torch on one intra-op thread for the test (restored after): on two busy cores torch's
    thread pool oversubscribes them and steps take seconds."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def no_workers_space(directory: Path) -> str:
    """The fault tests' space without DataLoader workers (no worker processes to start per trial on
    a loaded 2-core machine), written to ``directory``; its path."""
    path = directory / "no-workers.yaml"
    path.write_text("knobs:\n  batch_size: {low: 4, high: 64, log: true}\n  num_workers: 0\n")
    return str(path)


@pytest.fixture
def space(tmp_path) -> str:
    """``no_workers_space`` in the test's temporary directory."""
    return no_workers_space(tmp_path)
