"""Names that moved keep answering at their old import path for one release, with a
DeprecationWarning that names the new one (one test per name). The project's pytest settings
ignore DeprecationWarning, so each test records warnings itself."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tuner.workload

REPO_ROOT = Path(__file__).resolve().parent.parent


def _deprecated(name: str):
    """``tuner.workload.<name>`` and the one DeprecationWarning it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(tuner.workload, name)
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    assert deprecations[0].filename == __file__          # reported at the caller's line
    return value, str(deprecations[0].message)


def test_make_trainable_from_tuner_workload_is_the_harness_one_with_a_warning():
    from tuner.harness import make_trainable
    value, message = _deprecated("make_trainable")
    assert value is make_trainable
    assert "from tuner.harness import make_trainable" in message
    assert "tuner.workload.make_trainable is deprecated" in message


def test_from_import_make_trainable_warns_too():
    from tuner.harness import make_trainable
    with pytest.warns(DeprecationWarning, match=r"from tuner\.harness import make_trainable"):
        from tuner.workload import make_trainable as old
    assert old is make_trainable


def test_builtin_dir_is_the_tuner_workloads_package_with_a_warning():
    import tuner.workloads
    value, message = _deprecated("BUILTIN_DIR")
    assert value == Path(tuner.workloads.__file__).parent
    assert (value / "ddpm.py").is_file()
    assert "importlib.resources.files('tuner.workloads')" in message


def test_builtin_package_is_tuner_workloads_with_a_warning():
    value, message = _deprecated("BUILTIN_PACKAGE")
    assert value == "tuner.workloads"
    assert "tuner.workload_loader.BUILTINS" in message and "'tuner.workloads'" in message


@pytest.mark.parametrize("name", ["ENTRY_POINT_GROUP", "BUILTINS", "available", "resolve",
                                  "configured"])
def test_the_finder_moved_to_tuner_workload_loader_and_still_reads_with_a_warning(name):
    import tuner.workload_loader as loader
    value, message = _deprecated(name)
    assert value is getattr(loader, name)
    assert f"tuner.workload.{name} is deprecated" in message
    assert f"from tuner.workload_loader import {name}" in message


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        tuner.workload.nope  # noqa: B018
    with pytest.raises(ImportError):
        from tuner.workload import nope  # noqa: F401


def test_importing_tuner_workload_imports_neither_the_harness_nor_warns():
    """The deprecated names are looked up lazily: importing the contract alone imports no
    harness (no cycle at import time) and warns of nothing."""
    code = ("import sys, warnings\n"
            "warnings.simplefilter('error')\n"
            "import tuner.workload\n"
            "from tuner.workload import Workload\n"
            "from tuner.workload_loader import BUILTINS, resolve\n"
            "print('tuner.harness' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"


def test_the_derived_keys_of_tune_results_best_row_still_read_with_a_warning():
    """``TuneResult.best.row`` is the plain leaderboard row; a key it carried up to 0.2
    (``speedup_vs_baseline``) still reads, by ``[]`` and ``get``, with a warning naming
    ``best.answer``; a key no version had is still a KeyError."""
    from tests.test_leaderboard import row
    from tuner.api import TuneResult
    rows = [row(0, run="r", sps=100.0, reference="baseline"), row(1, run="r", sps=400.0)]
    result = TuneResult(run_id="r", workload="w", device="cpu", scale="tiny", rows=rows,
                        wall_s=1.0, results_dir="x")
    best = result.best
    assert "speedup_vs_baseline" not in best.row and best.row["trial_id"] == "r-1"
    with pytest.warns(DeprecationWarning, match=r"best\.answer"):
        assert best.row["speedup_vs_baseline"] == pytest.approx(best.answer.baseline.ratio)
    with pytest.warns(DeprecationWarning, match=r"best\.answer"):
        assert best.row.get("baseline_samples_per_sec") == pytest.approx(100.0)
    with pytest.raises(KeyError):
        best.row["no_such_key"]
    assert best.row.get("no_such_key", 7) == 7
