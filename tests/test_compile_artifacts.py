"""A compiled trial keeps its torch.compile artifacts for the user's job
(``tuner.trial.compile_artifacts``), and ``best --format python`` shows the lines that load
them exactly when the answer's file exists. With a stand-in compile (the model itself) and a
stand-in ``torch.compiler.save_cache_artifacts`` returning fake bytes: an Inductor compile
takes minutes on two busy cores."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import tuner.trial.apply as apply
import tuner.trial.compile_artifacts as compile_artifacts
from tests.conftest import tuner_in_process
from tests.fake_workloads import regression
from tests.test_leaderboard import row as leaderboard_row
from tuner import leaderboard
from tuner.knobs import Knobs
from tuner.settings import TrialSettings, compile_cache_path
from tuner.trial.harness import run_trial

FAKE = b"fake compile artifacts"
COMPILED = Knobs(batch_size=4, compile="default")


@pytest.fixture
def stand_in_compile(monkeypatch):
    """torch.compile returns the model; save_cache_artifacts returns ``FAKE`` (calls counted)."""
    calls = []
    monkeypatch.setattr(apply.torch, "compile", lambda model, mode=None: model)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts",
                        lambda: calls.append(1) or (FAKE, None))
    return calls


def _settings(data_dir, results: Path) -> TrialSettings:
    return TrialSettings(scale="tiny", device="cpu", data_dir=str(data_dir), windows=1,
                         window_s=0.1, warmup_steps=1, steady_tolerance=10.0,
                         compile_cache_dir=compile_cache_path(results))


def _trial(knobs: Knobs, data_dir, results: Path) -> tuple[dict, Path]:
    """One trial into ``results``; its row and where its artifacts go."""
    row = run_trial(regression, knobs, _settings(data_dir, results))
    applied = Knobs.from_dict(row, strict=False)
    return row, compile_artifacts.artifacts_path(compile_cache_path(results), regression.name,
                                                 "tiny", "cpu", 1, applied.to_dict())


def test_a_compiled_trial_saves_its_artifacts_under_the_results_folder(
        stand_in_compile, regression_data, one_torch_thread, tmp_path):
    row, path = _trial(COMPILED, regression_data, tmp_path)
    assert row["status"] == "ok", row["error"]
    assert path.read_bytes() == FAKE and stand_in_compile == [1]
    assert path.parent == tmp_path.resolve() / "compile-cache" / "artifacts"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_knobs_that_do_not_compile_save_nothing(stand_in_compile, regression_data,
                                                one_torch_thread, tmp_path):
    row, _ = _trial(Knobs(batch_size=4), regression_data, tmp_path)
    assert row["status"] == "ok" and stand_in_compile == []
    assert not (tmp_path / "compile-cache" / "artifacts").exists()


def test_the_file_is_replaced_whole_from_a_temporary_file_beside_it(monkeypatch, tmp_path):
    path = tmp_path / "artifacts" / "w-0123.bin"
    path.parent.mkdir()
    path.write_bytes(b"old")
    seen = []
    real = compile_artifacts.os.replace

    def replace(src, dst):  # at the rename: the old file whole, the new bytes whole beside it
        seen.append((Path(src).parent, Path(dst).read_bytes(), Path(src).read_bytes()))
        real(src, dst)

    monkeypatch.setattr(compile_artifacts.os, "replace", replace)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (FAKE, None))
    assert compile_artifacts.save(path) is None
    assert seen == [(path.parent, b"old", FAKE)] and path.read_bytes() == FAKE
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_trial_saves_its_own_compile_not_an_earlier_trials_of_its_process(
        monkeypatch, regression_data, one_torch_thread, tmp_path):
    import torch._inductor.codecache  # noqa: F401  (registers the 'inductor' artifact type)
    from torch.compiler._cache import CacheArtifactManager
    monkeypatch.setattr(apply.torch, "compile", lambda model, mode=None: model)
    CacheArtifactManager.record_artifact("inductor", "an-earlier-trials-graph", b"graph")
    row, path = _trial(COMPILED, regression_data, tmp_path)  # the stand-in compiles nothing
    assert row["status"] == "ok" and not path.exists()


def test_nothing_to_save_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: None)
    assert compile_artifacts.save(tmp_path / "a" / "w.bin") is None
    assert not (tmp_path / "a").exists()


def test_a_failing_save_is_a_warning_never_a_failed_trial(monkeypatch, regression_data,
                                                          one_torch_thread, tmp_path, caplog):
    def broken():
        raise RuntimeError("disk full")

    monkeypatch.setattr(apply.torch, "compile", lambda model, mode=None: model)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", broken)
    with caplog.at_level(logging.WARNING, logger=compile_artifacts.__name__):
        row, path = _trial(COMPILED, regression_data, tmp_path)
    assert row["status"] == "ok" and row["error"] is None and row["samples_per_sec"] > 0
    assert not path.exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"compile artifacts not saved to {path}: RuntimeError: disk full"]


def _best_python(results: Path, knobs: Knobs) -> str:
    leaderboard.append(results, [leaderboard_row(0, knobs=knobs, trial_cpus=None)])
    proc = tuner_in_process("best", "--workload", regression.name, "--results", str(results),
                            "--format", "python")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _load_lines(path: Path) -> str:
    return ("model = torch.compile(model)\n"
            "# the tuner's compile of this configuration; needs the same torch, Triton and "
            "device\n"
            f"with open({str(path)!r}, 'rb') as f:\n"
            "    torch.compiler.load_cache_artifacts(f.read())\n")


def test_best_python_loads_the_answers_artifacts_when_its_trial_saved_them(
        stand_in_compile, regression_data, one_torch_thread, tmp_path):
    row, path = _trial(COMPILED, regression_data, tmp_path)
    text = _best_python(tmp_path, Knobs.from_dict(row, strict=False))
    assert _load_lines(path) in text
    compile(text, "best.py", "exec")


def test_best_python_has_no_load_lines_without_the_file(tmp_path):
    text = _best_python(tmp_path, COMPILED)
    assert "model = torch.compile(model)\n" in text
    assert "load_cache_artifacts" not in text and "Triton" not in text
