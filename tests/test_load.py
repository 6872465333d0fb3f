"""The machine's load is recorded with every measurement, and a busy machine is said."""

from __future__ import annotations

import torch

from tuner.measure import LoadMonitor
from tuner.progress import busy_note


def test_load_is_recorded_around_a_measurement():
    with LoadMonitor(torch.device("cpu")) as load:
        sum(i * i for i in range(200_000))
    columns = load.as_columns()
    assert columns["load_avg_1m"] is not None and columns["load_avg_1m"] >= 0
    assert columns["cpu_steal_pct"] is None or 0 <= columns["cpu_steal_pct"] <= 100
    assert columns["gpu_other_processes"] is None                      # CPU: no GPU to share


def test_a_busy_machine_is_said_in_one_line_and_a_quiet_one_not_at_all():
    quiet = [{"load_avg_1m": 1.2, "cpu_count": 2, "cpu_steal_pct": 0.0, "gpu_other_processes": None}]
    assert busy_note(quiet) is None
    busy = quiet + [{"load_avg_1m": 5.5, "cpu_count": 2, "cpu_steal_pct": 12.0,
                     "gpu_other_processes": 1}, {"load_avg_1m": None}]
    note = busy_note(busy)
    assert note.startswith("the machine was busy during 1 of 2 measured trials")
    assert "5.5 on 2 CPUs" in note and "steal up to 12 %" in note and "1 other process" in note


def test_a_trial_recorded_beside_another_tuner_run_is_marked_busy():
    quiet = {"load_avg_1m": 1.0, "cpu_count": 2, "cpu_steal_pct": 0.0, "gpu_other_processes": None}
    assert busy_note([dict(quiet, other_runs=0)]) is None
    note = busy_note([dict(quiet, other_runs=0), dict(quiet, other_runs=1)])
    assert note.startswith("the machine was busy during 1 of 2 measured trials")
    assert "1 other tuner run(s) on this machine" in note


def test_compile_time_is_the_first_step_beyond_a_steady_one():
    from tuner.harness import compile_s
    from tuner.knobs import Knobs
    measured = {"first_step_s": 41.5, "step_time_ms_p50": 500.0}
    assert compile_s(Knobs(batch_size=8, compile="max-autotune"), measured) == 41.0
    assert compile_s(Knobs(batch_size=8, compile="off"), measured) is None           # no compile: no figure
    assert compile_s(Knobs(batch_size=8, compile="default"), {"first_step_s": 0.2, "step_time_ms_p50": 300.0}) == 0.0
    assert compile_s(Knobs(batch_size=8, compile="default"), {"first_step_s": 3.0}) is None
