"""Names that moved keep answering at their old import path for one release, with a
deprecation warning that names the new one and the versions of the deprecation and the removal
(one test per name); the product imports no deprecated name; the suite's own deprecation
warnings are errors (pyproject.toml), other packages' are not."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tuner._deprecated as deprecation
import tuner.workload
from tuner.errors import TunerDeprecationWarning
from tuner.settings import VERSION

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
    from tuner.trial.harness import make_trainable
    value, message = _deprecated("make_trainable")
    assert value is make_trainable
    assert "use tuner.trial.harness.make_trainable" in message
    assert "tuner.workload.make_trainable was deprecated in tuner 0.3.0" in message


def test_from_import_make_trainable_warns_too():
    from tuner.trial.harness import make_trainable
    with pytest.warns(DeprecationWarning, match=r"use tuner\.trial\.harness\.make_trainable"):
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
    assert f"tuner.workload.{name} was deprecated in tuner 0.3.0" in message
    assert f"use tuner.workload_loader.{name}" in message


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
            "print('tuner.trial.harness' in sys.modules)\n")
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
    with pytest.warns(TunerDeprecationWarning,
                      match=r"TuneResult\.best\.row\['speedup_vs_baseline'\] " + _VERSIONS
                            + r"read TuneResult\.best\.answer"):
        assert best.row["speedup_vs_baseline"] == pytest.approx(best.answer.baseline.ratio)
    with pytest.warns(TunerDeprecationWarning, match=r"best\.answer"):
        assert best.row.get("baseline_samples_per_sec") == pytest.approx(100.0)
    with pytest.raises(KeyError):
        best.row["no_such_key"]
    assert best.row.get("no_such_key", 7) == 7


# ------------------------------------------------------------------ names moved by ``moved``

MOVED = [  # old module, name, the module that now holds it
    ("tuner.searcher", "Staged", "tuner.staging"),
    ("tuner.settings", "DEFAULT_CUDA_TIME_BUDGET_S", "tuner.budget"),
    ("tuner.settings", "DEFAULT_CPU_TIME_BUDGET_S", "tuner.budget"),
    ("tuner.settings", "BUDGET_GRACE_S", "tuner.budget"),
    ("tuner.settings", "long_step", "tuner.windows"),
    ("tuner.plan", "FOLLOWUP_SHARE", "tuner.budget"),
    ("tuner.plan", "MAX_FOLLOWUP_SHARE", "tuner.budget"),
    ("tuner.plan", "PLAN_AGE_S", "tuner.budget"),
    ("tuner.harness", "COMPILE_NEEDS_S", "tuner.budget"),
    ("tuner.harness", "COMPILE_MARGIN", "tuner.budget"),
    ("tuner.harness", "compile_needs_s", "tuner.budget"),
    *[("tuner.harness", name, "tuner.trial.harness")
      for name in ("make_trainable", "run_trial", "training_threads")],
    ("tuner.recorder", "OVERDUE_S", "tuner.budget"),
    ("tuner.recorder", "STEP_GRACE", "tuner.budget"),
    ("tuner.recorder", "STEP_GRACE_MAX_S", "tuner.budget"),
    ("tuner.driver", "MIN_PHASE_S", "tuner.budget"),
    ("tuner.driver", "TUNE_STOP_GRACE_S", "tuner.budget"),
    ("tuner.driver", "TRIAL_OVERHEAD_S", "tuner.costs"),
    ("tuner.driver", "tune_time_budget_s", "tuner.budget"),
    *[("tuner.budget", name, "tuner.costs")
      for name in ("TRIAL_OVERHEAD_S", "CUDNN_AUTOTUNE_S", "trial_cost_s", "priced_step_s",
                   "cudnn_autotune_s", "autotuned_s", "per_step_warmup_s",
                   "first_window_need_s")],
    ("tuner.searcher", "Timing", "tuner.costs"),
    ("tuner.driver", "CAN_WIN_FRACTION", "tuner.followups"),
    ("tuner.driver", "REMEASURE_ROUNDS", "tuner.plan"),
    ("tuner.noise", "STEADY_Z", "tuner.windows"),
    ("tuner.noise", "MIN_NOISE_ROWS", "tuner.windows"),
    ("tuner.noise", "window_noise", "tuner.windows"),
    ("tuner.noise", "steady_tolerance", "tuner.windows"),
    ("tuner.winner", "CEILING_NOISE", "tuner.ceilings"),
    ("tuner.cli", "world_sizes", "tuner.scaling"),
    ("tuner.workload", "make_trainable", "tuner.trial.harness"),
    *[("tuner.workload", name, "tuner.workload_loader")
      for name in ("ENTRY_POINT_GROUP", "BUILTINS", "available", "resolve", "configured")],
    *[("tuner.progress", name, "tuner.summary")
      for name in ("verdict_lines", "paste_commands", "leaderboard_statuses")],
    *[("tuner.progress", name, "tuner.machine_load")
      for name in ("busy_note", "drift_note", "BUSY_STEAL_PCT", "BUSY_OTHER_CPU_PCT")],
]

REPLACED = [  # old name, what the warning tells to use, the object it still returns
    ("best_row", "tuner.winner.best(rows)", ("tuner._best_row", "best_row")),
    ("best", "tuner.winner.best(table)", ("tuner._best_row", "best")),
    ("speedup_vs", "tuner.winner.best(rows).baseline.speedup", ("tuner._best_row", "speedup_vs")),
    ("ceiling_far_below", "tuner.winner.best(rows).ceiling_far_below",
     ("tuner._best_row", "ceiling_far_below")),
    ("CEILING_NOISE", "tuner.ceilings.CEILING_NOISE", ("tuner.ceilings", "CEILING_NOISE")),
    ("RATE_COLUMNS", "tuner.winner.RATE_COLUMNS", ("tuner.winner", "RATE_COLUMNS")),
]

_VERSIONS = r"was deprecated in tuner 0\.3\.0 and will be removed in tuner 0\.4\.0; "


def _read_old(module: str, name: str):
    """``module.name`` and the one TunerDeprecationWarning that reading it gave, which must be
    reported at this line."""
    imported = importlib.import_module(module)     # any warning of the import itself: not here
    with pytest.warns(TunerDeprecationWarning) as caught:
        value = getattr(imported, name)
    assert [w.category for w in caught] == [TunerDeprecationWarning], caught
    assert caught[0].filename == __file__
    return value, str(caught[0].message)


@pytest.mark.parametrize("old, name, new", MOVED)
def test_a_moved_name_still_reads_with_a_warning_naming_both_versions_and_its_new_path(
        old, name, new):
    value, message = _read_old(old, name)
    assert value is getattr(importlib.import_module(new), name)
    assert re.fullmatch(rf"{re.escape(old)}\.{name} {_VERSIONS}use {re.escape(new)}\.{name}, "
                        r"where it moved", message), message


@pytest.mark.parametrize("name, instead, source", REPLACED)
def test_a_replaced_leaderboard_name_still_reads_with_a_warning_naming_its_replacement(
        name, instead, source):
    value, message = _read_old("tuner.leaderboard", name)
    assert value is getattr(importlib.import_module(source[0]), source[1])
    assert re.match(rf"tuner\.leaderboard\.{name} {_VERSIONS}use {re.escape(instead)}",
                    message), message


def test_every_name_the_helper_serves_has_a_test_above():
    for module in {old for old, _, _ in MOVED} | {"tuner.leaderboard"}:
        importlib.import_module(module)
    tested = {f"{old}.{name}" for old, name, _ in MOVED}
    tested |= {f"tuner.leaderboard.{name}" for name, _, _ in REPLACED}
    tested |= {"tuner.workload.BUILTIN_DIR", "tuner.workload.BUILTIN_PACKAGE"}  # tests above
    tested |= {"tuner.plan.CEILING_TRIALS"}  # test below
    tested |= {f"tuner.followups.{name}" for name in FOLLOWUPS_V02}  # tests below
    assert set(deprecation.DEPRECATIONS) == tested


def test_the_ceiling_trials_of_the_split_still_read_with_a_warning_naming_the_policy():
    """The split asks the follow-up policy what the follow-ups measure; the old constant still
    reads as the winner's own ceilings it counts."""
    from tuner.followup_policy import OWN_CEILINGS
    value, message = _read_old("tuner.plan", "CEILING_TRIALS")
    assert value == len(OWN_CEILINGS) == 4
    assert re.match(rf"tuner\.plan\.CEILING_TRIALS {_VERSIONS}use tuner\.followup_policy\."
                    r"FollowupPolicy\.need", message), message


FOLLOWUPS_V02 = ["type_rows", "fits", "round_trial_settings", "rounds_todo", "ceiling_reserve_s",
                 "required_configs", "rounds_total", "all_rounds_fit", "fitting_configs",
                 "fitting_round_windows"]
"""The follow-up planning functions the follow-up policy replaced (``tuner.followup_policy``)."""


@pytest.mark.parametrize("name", FOLLOWUPS_V02)
def test_the_planning_functions_the_policy_replaced_still_read_with_a_warning(name):
    value, message = _read_old("tuner.followups", name)
    assert callable(value)
    assert re.match(rf"tuner\.followups\.{name} {_VERSIONS}use tuner\.followup", message), message


def test_the_replaced_planning_functions_still_answer_as_they_did():
    import tuner.followups as followups
    from tests.test_followups import BASE, FAST, fake_plan, search_rows
    configs = [(FAST, None), (BASE, "baseline")]
    with pytest.warns(TunerDeprecationWarning):
        assert len(followups.rounds_todo(fake_plan(), search_rows(), configs, range(1, 4), 2)) == 6
    with pytest.warns(TunerDeprecationWarning):
        assert followups.fitting_configs(fake_plan(), search_rows(), configs, 2) == (configs, 0)
    with pytest.warns(TunerDeprecationWarning):
        assert followups.rounds_total(search_rows()) == 3


def test_no_deprecated_name_outlives_its_removal_version():
    """The release that removes a name must still be ahead: at that version the old path goes
    (a development version, 0.3.0.dev0, comes before its release)."""
    from packaging.version import Version as release
    for module in {old for old, _, _ in MOVED} | {"tuner.leaderboard"}:
        importlib.import_module(module)
    assert deprecation.DEPRECATIONS
    for old, (deprecated, removed) in deprecation.DEPRECATIONS.items():
        assert release(deprecated) < release(removed), old
        assert release(VERSION) < release(removed), f"{old}: remove it in {removed}"


def test_the_changelog_promises_the_removal_version_the_warnings_give():
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    unreleased = changelog.split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
    deprecated = unreleased.split("### Deprecated", 1)[1].split("\n### ", 1)[0]
    promises = re.findall(r"until (?:tuner )?(\d+\.\d+(?:\.\d+)?)", deprecated)
    assert promises and set(promises) == {deprecation.REMOVED_IN}, promises
    assert f"deprecated in {deprecation.DEPRECATED_IN}" in deprecated.lower()


def test_an_unknown_name_is_still_an_attribute_error_without_a_warning():
    import tuner.settings as settings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'NOT_A_NAME'"):
            settings.NOT_A_NAME  # noqa: B018


# ------------------------------------------------------------------ the policy in the suite


def test_the_suites_own_deprecation_warnings_are_errors_and_other_packages_are_not():
    """pyproject.toml's filters, as pytest applies them to every test."""
    with pytest.raises(TunerDeprecationWarning, match="tuner.budget.STEP_GRACE"):
        import tuner.recorder
        tuner.recorder.STEP_GRACE  # noqa: B018
    warnings.warn("a third-party deprecation", DeprecationWarning)   # ignored: no error


def _deprecated_reads(path: Path, old: dict[str, set[str]]) -> list[str]:
    """Where ``path`` imports or reads one of ``old`` (module -> deprecated names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in old:
            found += [f"{path}:{node.lineno}: from {node.module} import {a.name}"
                      for a in node.names if a.name in old[node.module]]
        elif isinstance(node, ast.ImportFrom) and node.module == "tuner":
            aliases.update({a.asname or a.name: f"tuner.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = ast.unparse(node.value)
            module = aliases.get(base, base)
            if node.attr in old.get(module, ()):
                found.append(f"{path}:{node.lineno}: {base}.{node.attr}")
    return found


def test_the_product_and_the_benchmarks_read_no_deprecated_name():
    for module in {old for old, _, _ in MOVED} | {"tuner.leaderboard"}:
        importlib.import_module(module)
    old: dict[str, set[str]] = {"tuner.workload": {"make_trainable", "BUILTIN_PACKAGE",
                                                   "BUILTIN_DIR"}}
    for path in deprecation.DEPRECATIONS:
        module, _, name = path.rpartition(".")
        old.setdefault(module, set()).add(name)
    found = [hit for folder in ("tuner", "bench")
             for path in sorted((REPO_ROOT / folder).rglob("*.py"))
             for hit in _deprecated_reads(path, old)]
    assert found == []


def test_the_scan_finds_a_deprecated_read(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from tuner.settings import long_step, SCALES\nimport tuner.noise as n\n"
                      "from tuner import driver\nn.STEADY_Z\ndriver.MIN_PHASE_S\ndriver.run\n")
    old = {"tuner.settings": {"long_step"}, "tuner.noise": {"STEADY_Z"},
           "tuner.driver": {"MIN_PHASE_S"}}
    assert [hit.split(": ", 1)[1] for hit in _deprecated_reads(module, old)] == [
        "from tuner.settings import long_step", "n.STEADY_Z", "driver.MIN_PHASE_S"]


@pytest.mark.parametrize("command", [[], ["run"], ["best"], ["leaderboard"], ["report"],
                                     ["validate"], ["profile"], ["export"], ["workloads"],
                                     ["check-cluster"]])
def test_every_help_screen_works_with_deprecation_warnings_as_errors(command):
    proc = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-m", "tuner",
                           *command, "--help"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Usage:" in proc.stdout


# ------------------------------------------------------------------ the scale word 'seed'

_SEED = (r"scale 'seed' was deprecated in tuner 0\.3\.0 and will be removed in tuner 0\.4\.0; "
         r"use 'full'")


def test_the_old_scale_word_reads_full_with_a_warning_in_the_run_options():
    from tuner.settings import RunOptions, TrialSettings
    with pytest.warns(TunerDeprecationWarning, match=_SEED) as caught:
        options = RunOptions(workload="ddpm", scale="seed")
    assert options.scale == "full" and caught[0].filename == __file__
    with pytest.warns(TunerDeprecationWarning, match=_SEED):
        settings = TrialSettings(scale="seed", device="cpu", data_dir="d")
    assert settings.scale == "full"
    assert RunOptions(workload="ddpm", scale="full").scale == "full"   # no warning: an error


def test_one_scale_check_and_one_default_serve_everything():
    from tuner.errors import TunerError
    from tuner.settings import SCALES, RunOptions, check_scale, default_scale
    assert SCALES == ("full", "tiny")
    assert (default_scale("cuda"), default_scale("cpu")) == ("full", "tiny")
    assert [check_scale(s) for s in SCALES] == list(SCALES)
    with pytest.raises(ValueError, match=r"scale 'huge': accepted scales are full, tiny"):
        check_scale("huge")
    with pytest.raises(TunerError, match=r"--scale 'huge': accepted values are full, tiny"):
        RunOptions(workload="ddpm", scale="huge")


def test_a_built_in_workload_takes_the_old_scale_word_with_a_warning():
    from tuner.workload_loader import resolve
    workload = resolve("ddpm")
    with pytest.warns(TunerDeprecationWarning, match=_SEED) as caught:
        shape = workload.sample_shape("seed")
    assert shape == workload.sample_shape("full") and caught[0].filename == __file__


def test_run_help_offers_only_the_new_scale_word_and_the_cli_takes_the_old_with_a_note():
    from click.testing import CliRunner

    from tuner.cli import main
    shown = CliRunner().invoke(main, ["run", "--help"]).output
    assert "[full|tiny]" in shown and "seed" not in shown.split("--scale", 1)[1].split("\n")[0]
    out = CliRunner().invoke(main, ["leaderboard", "-w", "ddpm", "--results", "nowhere",
                                    "--scale", "seed"])
    assert out.stderr.splitlines()[0] == (
        "note: --scale seed was deprecated in tuner 0.3.0 and will be removed in tuner 0.4.0; "
        "use --scale full (the same scale)")
    assert out.exit_code == 2 and "no leaderboard rows" in out.stderr   # the command went on
