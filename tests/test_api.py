"""The Python API: ``tuner.tune`` runs what ``python -m tuner run`` runs and returns values. The
README's example of it runs in tests/test_docs.py (``docs_run``: the docs repeat it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tuner
from tests.test_readme_examples import REPO_ROOT
from tuner.errors import TunerError

QUICK = {"windows": 1, "window_s": 0.3, "warmup_steps": 1, "confirm": 0, "ceiling": False}
"""The smallest measurement that still runs every phase of a trial (as the README CLI test)."""


def test_import_tuner_is_light_and_tune_loads_on_first_use():
    code = ("import sys, tuner; assert 'torch' not in sys.modules and 'ray' not in sys.modules; "
            "assert 'tuner.api' not in sys.modules; f = tuner.tune; "
            "assert 'tuner.api' in sys.modules; print(tuner.__version__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == tuner.__version__
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        tuner.nosuch  # noqa: B018


@pytest.mark.parametrize(
    "call, fragment",
    [
        (
            lambda: tuner.tune("ddpm", trails=3),
            "unknown option trails (did you mean trials?); accepted: trials,",
        ),
        (lambda: tuner.tune(42, device="cpu"), "give a name, an import path"),
        (
            lambda: tuner.tune("ddpm", device="tpu"),
            "--device 'tpu': accepted values are auto, cpu, cuda",
        ),
        (lambda: tuner.tune("nosuch", device="cpu"), "unknown workload 'nosuch'"),
    ],
)
def test_bad_input_raises_one_line_before_any_trial(call, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TunerError) as info:
        call()
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "tuner-results").exists()


@pytest.mark.slow
def test_a_workload_instance_is_tuned_silently(tmp_path, tuner_cache, ray_session, capsys):
    from tests.fake_workloads import regression
    result = tuner.tune(regression, trials=2, device="cpu", results=str(tmp_path / "r"),
                        progress=False, max_memory="0.5", **QUICK)
    assert capsys.readouterr().out == ""
    assert any("--max-memory 0.5 does nothing on the CPU device" in n for n in result.notes)
    assert result.workload == "fake-regression"
    assert [r["reference"] for r in result.rows] == ["baseline", "recommended"]
    assert result.best is not None and result.best.phase == "search"
    assert set(result.speedup) == {"baseline", "recommended"}
