"""torch.compile's shared cache and its recompiles, with fake compiles (no Inductor compile:
minutes on two cores): a trial process compiles into its results folder's compile cache, a
second trial process finds what the first wrote, and a trial that hits dynamo's recompile limit
is recorded as such, never as a compiled rate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

import tuner.trial.apply as apply
from tests.fake_workloads import FEATURES, ClockedPaced, Regression, StepClock, regression
from tuner import leaderboard
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.settings import RunOptions, TrialSettings, compile_cache_path
from tuner.trial.harness import run_trial

REPO = Path(__file__).resolve().parents[1]
COLD_S, WARM_S = 100.0, 2.0
"""The fake compile's cost on the trial's clock: without its entry in the cache, and with it."""


def fake_compile(clock: StepClock, seen: dict, model, mode=None):
    """A stand-in for ``torch.compile``: the returned callable's first call costs ``COLD_S``
    on ``clock`` unless the cache directory in force (``TORCHINDUCTOR_CACHE_DIR``) holds the
    entry an earlier first call wrote there (then ``WARM_S``); ``seen`` gets the variables."""
    seen.update({name: os.environ.get(name) for name in apply.COMPILE_CACHE_ENV})
    entry = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "fake-graph"

    def compiled(*args):
        if not getattr(compiled, "warm", False):
            compiled.warm = True
            clock.now += WARM_S if entry.exists() else COLD_S
            entry.write_text("compiled")
        return model(*args)
    return compiled


def trial_process(cache_dir: str, data_dir: str) -> None:
    """One trial process (run by ``python -c``): one compiled trial of ``ClockedPaced`` through
    the fake compile; prints its row's figures and the environment the compile saw, as JSON."""
    from tuner.trial import harness, measure, steppers
    clock, seen = StepClock(), {}
    for module in (harness, measure, steppers):
        module.time = clock
    apply.torch.compile = partial(fake_compile, clock, seen)
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=data_dir, windows=2,
                             window_s=0.5, warmup_steps=1, compile_cache_dir=cache_dir)
    row = run_trial(ClockedPaced(clock), Knobs(batch_size=4, compile="default"), settings)
    after = {name: os.environ.get(name) for name in apply.COMPILE_CACHE_ENV}
    print(json.dumps({"status": row["status"], "error": row["error"],
                      "first_step_s": row["first_step_s"], "compile_s": row["compile_s"],
                      "seen": seen, "after": after}))


def _in_new_process(cache_dir: Path, data_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in apply.COMPILE_CACHE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    code = ("from tests.test_compile_cache import trial_process; "
            f"trial_process({str(cache_dir)!r}, {str(data_dir)!r})")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_second_trial_process_finds_the_first_ones_compile_in_the_shared_cache(
        tmp_path, regression_data):
    cache_dir = tmp_path / "results" / "compile-cache"
    first = _in_new_process(cache_dir, regression_data)
    second = _in_new_process(cache_dir, regression_data)
    for row in (first, second):
        assert row["status"] == "ok", row["error"]
        assert row["seen"] == {"TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
                               "TRITON_CACHE_DIR": str(cache_dir / "triton")}
        assert row["after"] == {"TORCHINDUCTOR_CACHE_DIR": None, "TRITON_CACHE_DIR": None}
    assert first["compile_s"] == pytest.approx(COLD_S, abs=0.5)
    assert second["compile_s"] == pytest.approx(WARM_S, abs=0.5)
    assert (cache_dir / "fake-graph").is_file()


def test_compile_cache_sets_both_directories_and_puts_the_environment_back(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "users-own"))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with apply.compile_cache(str(tmp_path / "cc")):
        from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir
        assert cache_dir() == str(tmp_path / "cc") and (tmp_path / "cc").is_dir()
        assert triton_cache_dir(0) == str(tmp_path / "cc" / "triton")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "users-own")
    assert "TRITON_CACHE_DIR" not in os.environ


def test_a_trial_without_compile_leaves_the_cache_directory_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with apply.trial_state(Knobs(batch_size=4), torch.device("cpu"),
                           compile_cache_dir=str(tmp_path / "cc")):
        assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    assert not (tmp_path / "cc").exists()


def test_the_plan_puts_the_compile_cache_in_the_results_folder(tmp_path):
    results = tmp_path / "results"
    plan = make_plan(RunOptions(workload="tests.fake_workloads:regression", device="cpu",
                                results=str(results)))
    assert plan.settings.compile_cache_dir == str(results.resolve() / "compile-cache")
    assert compile_cache_path("s3://bucket/runs").endswith(os.sep + "compile-cache")


def test_profile_compiles_into_the_results_folders_cache(tmp_path):
    from tuner.checks import plan_profile
    results = tmp_path / "results"
    plan = plan_profile("tests.fake_workloads:regression", device="cpu", results=str(results),
                        knobs_json='{"compile": "default"}')
    assert plan.settings.compile_cache_dir == str(results.resolve() / "compile-cache")


class ShapeShifting(Regression):
    """Each micro-batch trains on a different number of its features (the model pads them
    back to ``FEATURES``): a new input shape every step, so a compiled model with static
    shapes recompiles every step until dynamo's limit."""

    name = "fake-shape-shifting"

    def training_step(self, model, batch):
        x, y = batch
        self.calls = getattr(self, "calls", 0) + 1
        width = 1 + self.calls % FEATURES
        return torch.nn.functional.mse_loss(model(x[:, :width]).squeeze(-1), y)

    def build_model(self, scale: str):
        return _Padded(super().build_model(scale))


class _Padded(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(torch.nn.functional.pad(x, (0, FEATURES - x.shape[1])))


@pytest.fixture
def eager_backend_with_a_low_limit(monkeypatch):
    """torch.compile with dynamo's "eager" backend (tracing, no Inductor), static shapes and
    a recompile limit of 2, put back after the test."""
    monkeypatch.setattr(apply.torch, "compile",
                        partial(torch.compile, backend="eager", dynamic=False))
    with torch._dynamo.config.patch(recompile_limit=2, automatic_dynamic_shapes=False):
        yield
    torch.compiler.reset()


def _settings(data_dir) -> TrialSettings:
    return TrialSettings(scale="tiny", device="cpu", data_dir=str(data_dir), windows=2,
                         window_s=0.2, warmup_steps=1, steady_tolerance=10.0)


def test_a_trial_that_hits_the_recompile_limit_is_an_error_never_a_compiled_rate(
        regression_data, eager_backend_with_a_low_limit, one_torch_thread, tmp_path):
    reports = []
    row = run_trial(ShapeShifting(), Knobs(batch_size=4, compile="default"),
                    _settings(regression_data), report=reports.append)
    windows = [r for r in reports if r["status"] == "running"]
    assert windows and windows[-1]["compile_fallback"] is True  # a report the run may keep
    assert row["compile_fallback"] is True
    assert row["recompiles"] >= 2
    assert row["status"] == "error" and row["samples_per_sec"] == 0.0
    assert "recompile_limit (2)" in row["error"] and "no compiled one" in row["error"]
    leaderboard.append(tmp_path, [dict(row, run_id="r", trial_id="r-0", workload="w")])
    written = leaderboard.read(tmp_path).to_pylist()[0]
    assert written["compile_fallback"] is True and written["samples_per_sec"] is None
    assert written["recompiles"] == row["recompiles"]


def test_a_clean_compiled_trial_counts_no_recompiles_and_eager_counts_none(
        regression_data, eager_backend_with_a_low_limit, one_torch_thread):
    compiled = run_trial(regression, Knobs(batch_size=4, compile="default"),
                         _settings(regression_data))
    assert compiled["status"] == "ok", compiled["error"]
    assert compiled["recompiles"] == 0 and compiled["compile_fallback"] is False
    eager = run_trial(regression, Knobs(batch_size=4), _settings(regression_data))
    assert eager["recompiles"] is None and eager["compile_fallback"] is None
