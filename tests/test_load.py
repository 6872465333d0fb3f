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
