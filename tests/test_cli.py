"""The command line end to end: one real run on the fake workload in a subprocess as a user runs
it (and what its console shows: tuner's lines only, not folded to 80 columns when piped), the
leaderboard and best views of it and the workload list through the click entry point in this
process (their output is the point, not the interpreter start), and bad input (exit code 2,
one line naming the bad value, no traceback, existing results untouched). Every bad input also
goes through click in this process, which costs no interpreter start; three of them, one of
each kind, run as real processes."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from tests.conftest import REPO_ROOT, tuner_in_process
from tuner import leaderboard
from tuner import workload_loader as workload_mod
from tuner.knobs import Knobs

pytestmark = pytest.mark.slow

REGRESSION = "tests.fake_workloads:regression"


def tuner(*args: str, env: dict, timeout: float = 300,
          cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    cache = tmp_path_factory.mktemp("cli-cache")
    # COLUMNS: rich wraps at 80 columns when not on a terminal; keep summary lines whole.
    return {**os.environ, "TUNER_CACHE": str(cache), "COLUMNS": "200"}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli") / "results"


@pytest.fixture(scope="module")
def run_output(env, results, tmp_path_factory) -> subprocess.CompletedProcess:
    """One run of 3 trials (the references and 1 searched), no follow-up phases (re-measuring
    the best, compute-only ceiling): one leaderboard row per trial. Seed 2: the searched trial
    (batch 12) starts no DataLoader workers (~8 s each on 2 CPUs). Run as from a user's
    console: from a directory of its own, output piped, no COLUMNS or TUNER_VERBOSE."""
    console_env = {k: v for k, v in env.items() if k not in ("COLUMNS", "TUNER_VERBOSE")}
    console_env.update(PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="")
    return tuner("run", "--workload", REGRESSION, "--device", "cpu", "--trials", "3",
                 "--seed", "2",
                 "--results", str(results), "--windows", "2", "--window-s", "0.1",
                 "--warmup-steps", "1", "--confirm", "0", "--no-ceiling", "--no-early-stop",
                 env=console_env, timeout=300, cwd=tmp_path_factory.mktemp("cli-cwd"))


def test_run_prints_plan_progress_and_speedup(run_output):
    assert run_output.returncode == 0, run_output.stderr[-3000:]
    out = run_output.stdout
    assert "device: cpu" in out
    assert "tiny" in out
    assert "baseline" in out and "recommended" in out
    # the speed-up over a reference: faster, or a tie where the figures are within the noise
    # of a busy machine (a loaded run once read a tie); a line over 160 columns may wrap
    assert re.search(r"vs (baseline|recommended): (\d+\.\d\dx faster|tie within the noise)",
                     " ".join(out.split())), out
    assert "3 trials" in " ".join(out.split())
    assert "Traceback" not in run_output.stderr


def test_the_console_shows_no_library_warning_and_keeps_its_width_when_piped(run_output):
    """What a user's console shows: tuner's own lines only (no library WARNING, UserWarning or
    traceback), tables not folded to 80 columns when the output is piped."""
    assert run_output.returncode == 0, run_output.stderr
    console = run_output.stdout + run_output.stderr
    noisy = [line for line in console.splitlines()
             if any(word in line for word in ("WARNING", "Warning:", "UserWarning", "Traceback",
                                              "warnings.warn"))]
    assert noisy == [], noisy
    # 160 columns when piped: rich's default of 80 folded every line at 80 characters
    assert max(len(line) for line in run_output.stdout.splitlines()) > 80


def _json(proc: subprocess.CompletedProcess):
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_leaderboard_json_has_every_trial_ranked(run_output, env, results):
    rows = _json(tuner_in_process("leaderboard", "--workload", "fake-regression", "--results",
                                  str(results), "--format", "json", env=env))
    assert len(rows) == 3
    assert set(rows[0]) == set(leaderboard.SCHEMA.names)
    speeds = [r["samples_per_sec"] for r in rows]
    assert speeds == sorted(speeds, reverse=True)
    assert {r["reference"] for r in rows} == {"baseline", "recommended", None}
    assert {r["workload"] for r in rows} == {"fake-regression"}


def test_leaderboard_csv_has_a_header(run_output, env, results):
    proc = tuner_in_process("leaderboard", "--workload", "fake-regression", "--results",
                            str(results), "--format", "csv", env=env)
    assert proc.returncode == 0, proc.stderr
    reader = csv.DictReader(io.StringIO(proc.stdout))
    assert reader.fieldnames == leaderboard.SCHEMA.names
    rows = list(reader)
    assert len(rows) == 3
    assert all(float(r["samples_per_sec"]) > 0 for r in rows)


def _best(env, results, fmt: str) -> subprocess.CompletedProcess:
    return tuner_in_process("best", "--workload", "fake-regression", "--results", str(results),
                            "--format", fmt, env=env)


def test_best_json(run_output, env, results):
    doc = _json(_best(env, results, "json"))
    knobs = Knobs.from_dict(doc["knobs"])                       # a complete, valid configuration
    assert 4 <= knobs.batch_size <= 64
    assert doc["samples_per_sec"] > 0
    assert doc["speedup_vs_baseline"] >= 1.0                     # the baseline was in the run
    assert doc["hardware_key"].startswith("cpu:")
    assert doc["workload"] == "fake-regression" and doc["device"] == "cpu"


def test_best_python_compiles(run_output, env, results):
    proc = _best(env, results, "python")
    assert proc.returncode == 0, proc.stderr
    compile(proc.stdout, "best.py", "exec")
    assert "DataLoader(" in proc.stdout and "batch_size=" in proc.stdout


def test_best_yaml_parses(run_output, env, results):
    proc = _best(env, results, "yaml")
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    assert doc["workload"] == "fake-regression"
    Knobs.from_dict(doc["knobs"])
    assert doc["samples_per_sec"] > 0


def test_workloads_json_lists_builtins_with_sizes(env):
    entries = {e["name"]: e for e in _json(tuner_in_process("workloads", "--format", "json",
                                                             env=env))}
    assert {"ddpm", "chargpt"} <= set(entries)
    assert entries["ddpm"]["parameters_full"] == pytest.approx(12.8e6, rel=0.10)
    assert entries["chargpt"]["parameters_full"] == pytest.approx(10.7e6, rel=0.10)
    for e in entries.values():
        assert e["parameters_seed"] == e["parameters_full"]   # the old key, until tuner 0.4.0
        assert e["sample_shape"] and all(isinstance(v, list) for v in e["sample_shape"].values())
        assert e["import_path"]


# ---------------------------------------------------------------------------------- bad input

BAD_CASES = ["unknown-workload", "bad-import-path", "missing-attribute", "malformed-yaml",
             "impossible-range", "data-missing", "data-empty", "corrupt-png", "trials-0",
             "device-tpu", "unreachable-cluster"]


def _bad_inputs(root: Path) -> dict[str, tuple[list[str], list[str]]]:
    """case -> (run arguments, strings stderr must contain)."""
    malformed = root / "malformed.yaml"
    malformed.write_text("knobs:\n  batch_size: {low: 4, high: 64\n")
    impossible = root / "impossible.yaml"
    impossible.write_text("knobs:\n  batch_size: {low: 64, high: 8}\n")
    (root / "empty").mkdir()
    images = root / "images"
    rng = np.random.default_rng(0)
    for cls, n in (("Normal", 3), ("Abnormal", 2)):
        (images / cls).mkdir(parents=True)
        for i in range(n):
            pixels = rng.integers(0, 256, size=(40, 40, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(images / cls / f"{i:03d}.png")
    (images / "Abnormal" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    reg = ["--workload", REGRESSION, "--device", "cpu"]
    return {
        "unknown-workload": (["--workload", "nosuch", "--device", "cpu"], ["'nosuch'", "ddpm"]),
        "bad-import-path": (["--workload", "nosuchmod:x", "--device", "cpu"], ["nosuchmod"]),
        "missing-attribute": (["--workload", "tests.fake_workloads:nope", "--device", "cpu"],
                              ["'nope'"]),
        "malformed-yaml": ([*reg, "--space", str(malformed)], ["malformed YAML", "malformed.yaml"]),
        "impossible-range": ([*reg, "--space", str(impossible)],
                             ["impossible range", "batch_size", "impossible.yaml"]),
        "data-missing": ([*reg, "--data", str(root / "missing")], ["missing", "no such directory"]),
        "data-empty": ([*reg, "--data", str(root / "empty")], ["empty"]),
        "corrupt-png": (["--workload", "ddpm", "--device", "cpu", "--data", str(images)],
                        ["bad.png"]),
        "trials-0": ([*reg, "--trials", "0"], ["--trials", "0"]),
        "device-tpu": (["--workload", REGRESSION, "--device", "tpu"], ["--device", "tpu"]),
        "unreachable-cluster": ([*reg, "--address", "127.0.0.1:1"],
                                ["127.0.0.1:1", "cannot reach"]),
    }


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def bad_cases(run_output, tmp_path_factory) -> dict[str, tuple[list[str], list[str]]]:
    assert run_output.returncode == 0, run_output.stderr[-3000:]   # results exist to protect
    cases = _bad_inputs(tmp_path_factory.mktemp("bad"))
    assert sorted(cases) == sorted(BAD_CASES)
    return cases


def _check_one_error_line(stderr: str, expected: list[str]) -> None:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_in_process(case, bad_cases, env, results):
    """Every bad input through the click entry point in this process (no interpreter start per
    case): exit code 2, one line naming the bad value, results untouched."""
    from click.testing import CliRunner

    from tuner.cli import main
    args, expected = bad_cases[case]
    before = _snapshot(results)
    result = CliRunner(env={"TUNER_CACHE": env["TUNER_CACHE"], "COLUMNS": "200"}).invoke(
        main, ["run", *args, "--results", str(results)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.exception)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    _check_one_error_line(result.stderr, expected)
    assert _snapshot(results) == before


SUBPROCESS_CASES = ["unknown-workload", "trials-0", "corrupt-png"]
"""One user error of each kind as a real process: a TunerError, a bad flag, a file that fails
to decode (its decoder writes to the process's stderr itself)."""


@pytest.fixture(scope="module")
def bad_runs(bad_cases, env, results):
    """The SUBPROCESS_CASES, pointed at the results of the real run, run concurrently (they
    are import-bound). Returns ({case: process}, files before, files after)."""
    before = _snapshot(results)
    with ThreadPoolExecutor(max_workers=len(SUBPROCESS_CASES)) as pool:
        futures = {case: pool.submit(tuner, "run", *bad_cases[case][0], "--results",
                                     str(results), env=env)
                   for case in SUBPROCESS_CASES}
        procs = {case: f.result() for case, f in futures.items()}
    return procs, before, _snapshot(results)


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_bad_input_subprocess(case, bad_runs, bad_cases):
    procs, _, _ = bad_runs
    proc = procs[case]
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    # libpng reports a bad header on fd 2 by itself before tuner's own line; that line is the
    # decoder's, not tuner's, so it is the one tolerated extra.
    stderr = "\n".join(line for line in proc.stderr.splitlines()
                       if not (case == "corrupt-png" and line.startswith("libpng ")))
    _check_one_error_line(stderr, bad_cases[case][1])
    assert proc.stderr.splitlines()[-1].startswith("error: ")


def test_bad_input_leaves_existing_results_byte_identical(bad_runs):
    _, before, after = bad_runs
    assert any(name.startswith("leaderboard/part-") for name in before)
    assert after == before


# ------------------------------------------------------------------------------ flags

CLI_FLAGS = {
    "run": ["--workload", "-w", "--model", "--image-size", "--space", "--trials", "--time-budget",
            "--device", "--scale", "--data", "--results", "--seed", "--sampler", "--address",
            "--windows", "--window-s", "--warmup-steps", "--objective", "--train-steps",
            "--max-memory", "--max-host-memory", "--global-batch-size", "--probe", "--confirm",
            "--resume", "--warm-start", "--remeasure", "--ceiling", "--no-ceiling", "--early-stop",
            "--no-early-stop", "--peak-tflops", "--world-size", "--gpu-hour-cost"],
    "leaderboard": ["--workload", "-w", "--results", "--hardware", "--scale", "--format",
                    "--limit"],
    "best": ["--workload", "-w", "--results", "--hardware", "--scale", "--format",
             "--gpu-hour-cost"],
    "workloads": ["--format"],
}
"""Frozen on purpose: scripts and the README use these; a rename or removal must be deliberate.
The order ``--help`` shows them in (``run``'s option groups) is free."""


def test_cli_flags_are_pinned():
    from tuner.cli import main
    got = {name: sorted(opt for p in main.commands[name].params
                        for opt in (*p.opts, *p.secondary_opts))
           for name in CLI_FLAGS}
    assert got == {name: sorted(flags) for name, flags in CLI_FLAGS.items()}


def test_sampler_option_matches_the_plan():
    # cli.py keeps its imports lazy, so it spells out the choices; they must not drift.
    from tuner.cli import main
    from tuner.settings import SAMPLERS, RunOptions
    option = next(p for p in main.commands["run"].params if p.name == "sampler")
    assert tuple(option.type.choices) == SAMPLERS
    assert option.default == RunOptions(workload="ddpm").sampler == "gp"


# --------------------------------------------------------------------------- entry points

class FakeEntryPoint:
    name = "myplugin"
    value = "mypkg.plugin:workload"
    group = workload_mod.ENTRY_POINT_GROUP

    def load(self):
        from tests.fake_workloads import regression
        return regression


def test_entry_point_workloads_are_listed_and_resolved(monkeypatch):
    monkeypatch.setattr(workload_mod, "_entry_points", lambda: {"myplugin": FakeEntryPoint()})
    from tests.fake_workloads import regression
    assert workload_mod.available()["myplugin"] == "mypkg.plugin:workload"
    assert "ddpm" in workload_mod.available()                    # built-ins still there
    assert workload_mod.resolve("myplugin") is regression


def test_resolve_rejects_objects_that_are_not_workloads():
    with pytest.raises(workload_mod.TunerError, match="not a tuner.workload.Workload"):
        workload_mod.resolve("tests.fake_workloads:N_FILES")
