"""Results in the tools people use: ``tuner export`` writes the leaderboard as an Optuna study
(read back with ``optuna.load_study``), and the README's DuckDB and pandas one-liners run, as
written there, on the same rows. In-process, no Ray."""

from __future__ import annotations

import datetime as dt
import math
import runpy
import shlex
from pathlib import Path

import optuna
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

import tuner.leaderboard as leaderboard
from tests.test_leaderboard import T0, row
from tests.test_readme_examples import documented_examples, documented_text
from tuner.cli import main
from tuner.errors import TunerError
from tuner.export import USER_ATTRS, knob_distributions, to_trial, write_study
from tuner.knobs import Knobs

WORKLOAD = "fake-regression"
HARDWARE = "cpu:test:2cpu"
STUDY = f"{WORKLOAD}@{HARDWARE}"
FAST = Knobs(batch_size=32, num_workers=2, amp="bf16")


def rows() -> list[dict]:
    """Two runs' rows: every status, the re-measurement and ceiling phases. run-a's search
    row 1 (150/s) is the highest measurement; ``tuner best`` picks its re-measurement (row 5,
    140/s); the ceiling (400/s) is faster than anything that trains."""
    later = T0 + dt.timedelta(hours=1)
    return [
        row(0, reference="baseline", sps=100.0, peak_device_memory_mb=512.0),
        row(1, sps=150.0, knobs=FAST),
        row(2, status="oom", sps=None, memory_exceeded="device"),
        row(3, status="pruned", sps=40.0),
        row(4, status="error", sps=None, traceback="Traceback (most recent call last): ..."),
        row(5, sps=140.0, knobs=FAST, phase="remeasure"),
        row(6, sps=400.0, knobs=FAST, phase="ceiling", ceiling="compute"),
        row(0, run="run-b", sps=120.0, knobs=Knobs(batch_size=16, amp="fp16"),
            started_at=later, finished_at=later + dt.timedelta(seconds=5)),
        row(1, run="run-b", status="timeout", sps=60.0, started_at=later + dt.timedelta(seconds=10),
            finished_at=later + dt.timedelta(seconds=15)),
    ]


EXPECTED = {  # (run_id, trial_id, phase): (state, value, intermediate values)
    ("run-a", "run-a-0", "search"): (TrialState.COMPLETE, 100.0, {}),
    ("run-a", "run-a-1", "search"): (TrialState.COMPLETE, 150.0, {}),
    ("run-a", "run-a-2", "search"): (TrialState.FAIL, None, {}),
    ("run-a", "run-a-3", "search"): (TrialState.PRUNED, None, {2: 40.0}),
    ("run-a", "run-a-4", "search"): (TrialState.FAIL, None, {}),
    ("run-a", "run-a-5", "remeasure"): (TrialState.COMPLETE, 140.0, {}),
    ("run-a", "run-a-6", "ceiling"): (TrialState.PRUNED, None, {2: 400.0}),
    ("run-b", "run-b-0", "search"): (TrialState.COMPLETE, 120.0, {}),
    ("run-b", "run-b-1", "search"): (TrialState.PRUNED, None, {2: 60.0}),
}


def _files(results: Path) -> dict[str, bytes]:
    return {str(p.relative_to(results)): p.read_bytes()
            for p in sorted(results.rglob("*")) if p.is_file()}


def _export(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, ["export", *args])


def _one_error_line(result) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


@pytest.fixture
def results(tmp_path) -> Path:
    out = tmp_path / "tuner-results"
    leaderboard.append(out, rows())
    return out


def readme_export_args() -> list[str]:
    """The documented ``python -m tuner export`` command (README.md or docs/), its workload
    replaced by this test's."""
    text = documented_text()
    line = next((line for line in text.splitlines() if line.startswith("python -m tuner export")),
                None)
    assert line is not None, "README.md and docs/ have no line `python -m tuner export ...`"
    argv = shlex.split(line.split(" #", 1)[0])
    assert argv[:4] == ["python", "-m", "tuner", "export"] and "--workload" in argv, argv
    argv[argv.index("--workload") + 1] = WORKLOAD
    return argv[4:]


def test_export_writes_one_trial_per_leaderboard_row(results, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the README's command: ./tuner-results -> ./tuner.db
    storage = "sqlite:///tuner.db"
    before = _files(results)
    result = _export(*readme_export_args())
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert f"wrote 9 trials of {WORKLOAD} on {HARDWARE} to study '{STUDY}'" in result.stdout
    assert "4 COMPLETE, 3 PRUNED, 2 FAIL" in result.stdout
    assert f"optuna-dashboard {storage}" in result.stdout
    assert _files(results) == before  # the leaderboard is only read

    study = optuna.load_study(study_name=STUDY, storage=storage)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert study.metric_names == ["samples_per_sec"]
    assert study.user_attrs["workload"] == WORKLOAD
    assert study.user_attrs["hardware_key"] == HARDWARE
    trials = study.get_trials()
    by_key = {(t.user_attrs["run_id"], t.user_attrs["trial_id"], t.user_attrs["phase"]): t
              for t in trials}
    assert len(trials) == len(by_key) == len(EXPECTED)  # one trial per row, none twice
    for key, (state, value, intermediate) in EXPECTED.items():
        t = by_key[key]
        assert (t.state, t.value, t.intermediate_values) == (state, value, intermediate), key
    # Numbered in the order the trials started: run-b's rows, an hour later, are last.
    assert [t.user_attrs["trial_id"] for t in trials] == [
        "run-a-0", "run-a-1", "run-a-2", "run-a-3", "run-a-4", "run-a-5", "run-a-6", "run-b-0",
        "run-b-1"]
    assert trials[1].datetime_start == (T0 + dt.timedelta(seconds=10)).astimezone().replace(
        tzinfo=None)
    assert trials[1].duration == dt.timedelta(seconds=5)

    # Knobs are the params; a knob the row leaves empty is not one (prefetch without workers).
    fast = by_key[("run-a", "run-a-1", "search")]
    assert fast.params == {k: v for k, v in FAST.to_dict().items() if v is not None}
    assert fast.params["prefetch_factor"] == 2
    assert "prefetch_factor" not in by_key[("run-a", "run-a-0", "search")].params
    assert fast.distributions["batch_size"] == IntDistribution(8, 40)
    assert fast.distributions["amp"] == CategoricalDistribution(("off", "fp16", "bf16"))

    # The statuses, errors and memory as user attributes; the traceback stays behind.
    oom = by_key[("run-a", "run-a-2", "search")].user_attrs
    assert (oom["status"], oom["memory_exceeded"], oom["error"]) == ("oom", "device",
                                                                     "oom happened")
    base = by_key[("run-a", "run-a-0", "search")].user_attrs
    assert (base["reference"], base["peak_device_memory_mb"], base["peak_host_memory_mb"],
            base["hardware_key"]) == ("baseline", 512.0, 700.0, HARDWARE)
    error = by_key[("run-a", "run-a-4", "search")].user_attrs
    assert error["error"] == "error happened" and "traceback" not in error
    assert all(set(t.user_attrs) <= {*USER_ATTRS, "best"} for t in trials)
    assert "samples_per_sec" not in oom  # a failure has no throughput, not a zero
    assert by_key[("run-a", "run-a-6", "ceiling")].user_attrs["ceiling"] == "compute"

    # Optuna's best is the highest measurement that trains (not the ceiling); `tuner best`'s
    # pick, the re-measurement, is marked.
    assert study.best_trial.user_attrs["trial_id"] == "run-a-1"
    assert [t.user_attrs["trial_id"] for t in trials if t.user_attrs.get("best")] == ["run-a-5"]


def test_an_existing_study_is_replaced_only_with_overwrite(results, tmp_path):
    storage = f"sqlite:///{tmp_path / 'tuner.db'}"
    common = ["-w", WORKLOAD, "--results", str(results), "--optuna-storage", storage]
    assert _export(*common, "--run", "run-a").exit_code == 0
    line = _one_error_line(_export(*common, "--run", "run-b"))
    assert f"already holds a study named '{STUDY}'" in line and "--overwrite" in line
    assert len(optuna.load_study(study_name=STUDY, storage=storage).trials) == 7  # untouched

    replaced = _export(*common, "--run", "run-b", "--overwrite")
    assert replaced.exit_code == 0, (replaced.stdout, replaced.stderr)
    trials = optuna.load_study(study_name=STUDY, storage=storage).trials
    assert [t.user_attrs["trial_id"] for t in trials] == ["run-b-0", "run-b-1"]
    other = _export(*common, "--study-name", "mine", "--run", "run-b")
    assert other.exit_code == 0, (other.stdout, other.stderr)
    assert sorted(optuna.get_all_study_names(storage)) == sorted([STUDY, "mine"])
    assert len(optuna.load_study(study_name="mine", storage=storage).trials) == 2

    line = _one_error_line(_export(*common, "--run", "run-z"))
    assert "--run run-z" in line and "run-a, run-b" in line


@pytest.mark.parametrize("storage, expected", [
    ("tuner.db", "Could not parse SQLAlchemy URL"),
    ("sqlite:////no-such-dir/tuner.db", "unable to open database file"),
    ("nosuchdialect://host/db", "nosuchdialect"),
    ("postgresql://me:s3cret@127.0.0.1:1/db", "postgresql://me:***@127.0.0.1:1/db"),
])
def test_a_bad_storage_url_is_one_line_and_exit_2(results, tmp_path, monkeypatch, storage,
                                                  expected):
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    line = _one_error_line(_export("-w", WORKLOAD, "--results", str(results),
                                   "--optuna-storage", storage))
    assert "--optuna-storage" in line and expected in line and "sqlite:///tuner.db" in line
    assert "s3cret" not in line  # a password in the URL is not echoed
    assert _files(tmp_path) == before  # no database file, the leaderboard untouched


def test_rows_become_trials_with_distributions_covering_every_value():
    old = {**row(0, knobs=Knobs(batch_size=4)), "compile": "retired-mode",
           "mfu_pct": float("nan")}
    ok_without_rate = row(1, sps=None)
    rest = [row(2, knobs=Knobs(batch_size=96, num_workers=3, prefetch_factor=4)),
            ok_without_rate]
    dists = knob_distributions([old, *rest])
    assert dists["batch_size"] == IntDistribution(4, 96)
    assert dists["prefetch_factor"] == IntDistribution(4, 4)
    assert dists["compile"].choices == ("off", "default", "reduce-overhead", "max-autotune",
                                        "retired-mode")
    assert dists["pin_memory"] == CategoricalDistribution((False, True))
    trial = to_trial(old, dists)
    assert trial.params["compile"] == "retired-mode"
    assert "mfu_pct" not in trial.user_attrs  # NaN is no JSON: left out
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in trial.user_attrs.values())
    # An ok row without a rate cannot be COMPLETE (Optuna needs a value): PRUNED, as the
    # searcher tells it.
    assert to_trial(ok_without_rate, dists).state == TrialState.PRUNED
    with pytest.raises(ValueError):  # a value outside the distributions is Optuna's error
        to_trial(row(3, knobs=Knobs(batch_size=500)), dists)


def test_write_study_leaves_no_half_written_study(tmp_path, monkeypatch):
    storage = f"sqlite:///{tmp_path / 'tuner.db'}"

    def broken(*_args, **_kwargs):
        raise ValueError("disk full")

    monkeypatch.setattr(optuna.Study, "add_trials", broken)
    with pytest.raises(TunerError, match="cannot write study 's' there \\(disk full\\)"):
        write_study(rows(), storage, "s")
    assert optuna.get_all_study_names(storage) == []


def test_the_cli_imports_no_optuna_until_export_runs():
    import subprocess
    import sys
    code = "import sys, tuner.cli; print(sorted({'optuna', 'torch', 'ray'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------------------------
# The README's one-liners, run as written there on the same rows


@pytest.fixture
def readme_results(tmp_path, monkeypatch):
    """./tuner-results as a user's: the rows above, a file of schema version 1 (no ``phase``
    and later columns) and a trial being written (``.tmp-part-*``, not yet Parquet)."""
    monkeypatch.chdir(tmp_path)
    leaderboard.append("tuner-results", rows())
    old = pa.table({"run_id": ["run-0"], "trial_id": ["run-0-0"], "workload": [WORKLOAD],
                    "status": ["ok"], "samples_per_sec": [90.0], "batch_size": [8]})
    pq.write_table(old, "tuner-results/leaderboard/part-00000000000000000000000000000000.parquet")
    Path("tuner-results/leaderboard/.tmp-part-ffff.parquet").write_bytes(b"half-written")
    return documented_examples()


def _run_example(examples, name: str, capsys) -> list[str]:
    assert name in examples, f"README.md and docs/ have no '<!-- example: {name} -->' block"
    assert examples[name].language == "python"
    Path(name).write_text(examples[name].code, encoding="utf-8")
    runpy.run_path(name, run_name="__main__")
    return capsys.readouterr().out.splitlines()


def test_readme_duckdb_one_liner(readme_results, capsys):
    out = _run_example(readme_results, "query_duckdb.py", capsys)
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in out if "│" in line]
    table = {tuple(c[:3]): (int(c[3]), c[4]) for c in cells if c[0] == WORKLOAD}
    assert table == {
        (WORKLOAD, "ceiling", "ok"): (1, "400.0"),
        (WORKLOAD, "remeasure", "ok"): (1, "140.0"),
        (WORKLOAD, "search", "error"): (1, "NULL"),
        (WORKLOAD, "search", "ok"): (3, "150.0"),
        (WORKLOAD, "search", "oom"): (1, "NULL"),
        (WORKLOAD, "search", "pruned"): (1, "40.0"),
        (WORKLOAD, "search", "timeout"): (1, "60.0"),
        (WORKLOAD, "NULL", "ok"): (1, "90.0"),  # the schema-1 file, read by union_by_name
    }, out


def test_readme_pandas_one_liner(readme_results, capsys):
    # pandas takes the first file's columns, so the README sends mixed schemas to tuner's reader.
    old = Path("tuner-results/leaderboard/part-00000000000000000000000000000000.parquet")
    mixed = leaderboard.read("tuner-results").to_pandas()
    assert len(mixed) == len(rows()) + 1 and set(mixed["phase"]) == {"search", "remeasure",
                                                                      "ceiling"}
    old.unlink()
    out = _run_example(readme_results, "query_pandas.py", capsys)
    assert out[0].split() == ["workload", "trial_id", "samples_per_sec", "batch_size",
                              "num_workers", "amp"]
    # Fastest first; ceiling, failed and pruned rows left out.
    assert [line.split()[2] for line in out[1:]] == ["run-a-1", "run-a-5", "run-b-0", "run-a-0"]
