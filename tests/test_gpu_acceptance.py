"""The one-command GPU check (``bench/gpu_acceptance.py --quick``, ``bench/gpu_check.sh``): its
reading of pytest's output, its table, its deadline; the runs themselves are the bench's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_acceptance",
                                                  ROOT / "bench" / "gpu_acceptance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_acceptance", None)


FINISHED = """\
..s.F.ss
=========================== short test summary info ============================
SKIPPED [3] tests/gpu/test_real_card.py:52: needs a CUDA device
FAILED tests/test_gpu_paths.py::test_gpu_telemetry_stays_null_on_cpu_and_without_nvml - assert 1
1 failed, 4 passed, 3 skipped in 7.12s
"""


def test_pytest_counts_are_read_from_the_summary_line(bench):
    counts = bench.pytest_counts(FINISHED)
    assert (counts["passed"], counts["failed"], counts["skipped"], counts["error"]) == (4, 1, 3, 0)
    assert counts["failures"] == [
        "tests/test_gpu_paths.py::test_gpu_telemetry_stays_null_on_cpu_and_without_nvml"]
    assert counts["skip_reason"] == "needs a CUDA device"


def test_a_run_cut_off_is_counted_from_its_progress_characters(bench):
    counts = bench.pytest_counts("..F.s.                     [ 40%]\n.E\n")
    assert (counts["passed"], counts["failed"], counts["skipped"], counts["error"]) == (5, 1, 1, 1)


def test_a_cpu_row_fills_every_column_but_mfu_and_device_memory_with_n_a(bench):
    row = dict.fromkeys(bench.COLUMNS)
    from tuner.noise import Speedup
    from tuner.winner import Attainable, Ceilings, Reference
    answer = SimpleNamespace(
        ceilings=Ceilings(150.0, 1, False, 0.8, 400.0, False),
        attainable=Attainable(150.0, "compute", 0.8),
        baseline=Reference("baseline", 80.0, False, Speedup(1.5, None, None, 1)),
        recommended=Reference("recommended", 100.0, False, Speedup(1.2, None, None, 1)))
    best = SimpleNamespace(samples_per_sec=120.0, answer=answer, row={
        "batch_size": 32, "num_workers": 2, "compile": "off", "mfu_pct": None,
        "peak_device_memory_mb": None, "peak_host_memory_mb": 900.0})
    bench._fill_best(row, best, "cpu")
    line = bench.markdown([row]).splitlines()[2]
    cells = dict(zip(bench.COLUMNS, (c.strip() for c in line.split("|")[1:-1]), strict=True))
    assert cells["MFU %"] == "n/a" and cells["peak dev MiB"] == "n/a"
    assert cells["compile s"] == "off"
    assert cells["attainable (bound)"] == "150.0 (compute)"
    assert cells["best ÷ attainable"] == "0.80"
    assert (cells["baseline"], cells["recommended"], cells["best"]) == ("80.0", "100.0", "120.0")


def test_a_workload_the_deadline_cannot_hold_is_skipped_with_a_note(bench, tmp_path):
    args = bench.argparse.Namespace(device="cpu", scale="tiny", quick=True, deadline_s=30.0,
                                    time_budget=None, trials=None, no_tests=True, out=None)
    run = bench.Run(args, ["ddpm"], tmp_path)
    bench.run_workload(run, "ddpm")          # 30 s < the least budget + a step's overhead
    assert run.rows == []
    assert run.notes and run.notes[0].startswith("ddpm: skipped")
    report = run.report()
    assert "ddpm: skipped" in report and "still to run" not in report


def test_an_unknown_workload_is_one_line_and_exit_code_2(bench, capsys):
    assert bench.main(["--workloads", "nosuch", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nosuch" in err and "ddpm" in err
