"""The code passes ruff (pyflakes, pycodestyle, import order; lines of at most 100 characters),
with the configuration in ``pyproject.toml`` (``[tool.ruff]``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ruff", reason="ruff is not installed (pip install -e '.[test]')")

ROOT = Path(__file__).resolve().parent.parent
PATHS = ("tuner", "tests", "bench")


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_tuner_tests_and_bench_pass_ruff():
    done = _ruff(*PATHS)
    assert done.returncode == 0, f"ruff check {' '.join(PATHS)}:\n{done.stdout}{done.stderr}"


def test_the_configuration_refuses_long_lines_and_unsorted_imports(tmp_path):
    source = tmp_path / "bad.py"
    source.write_text("import sys\nimport os\n\nx = " + "1 + " * 24 + "1\n"
                      "print(os, sys, x)\n")
    assert len(source.read_text().splitlines()[3]) == 101
    done = _ruff("--config", str(ROOT / "pyproject.toml"), str(source), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "E501" in done.stdout and "I001" in done.stdout, done.stdout
