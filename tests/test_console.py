"""What a user's console shows for a default run: tuner's own lines only (no library WARNING,
UserWarning or traceback), tables not folded to 80 columns when the output is piped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_a_small_run_prints_no_library_warning_and_keeps_its_width_when_piped(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TUNER_VERBOSE")}
    env.update(TUNER_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--workload", "tests.fake_workloads:regression",
         "--device", "cpu", "--trials", "2", "--confirm", "0", "--no-ceiling", "--windows", "1",
         "--window-s", "0.1", "--warmup-steps", "1", "--results", str(tmp_path / "results")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    console = proc.stdout + proc.stderr
    noisy = [line for line in console.splitlines()
             if any(word in line for word in ("WARNING", "Warning:", "UserWarning", "Traceback",
                                              "warnings.warn"))]
    assert noisy == [], noisy
    # 160 columns when piped: rich's default of 80 folded every line at 80 characters
    assert max(len(line) for line in proc.stdout.splitlines()) > 80
