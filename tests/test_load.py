"""The machine's load is recorded with every measurement, and a busy machine is said."""

from __future__ import annotations

import contextlib
import statistics
import threading

import pytest
import torch

from tuner import noise
from tuner.machine_load import busy_note, drift_note
from tuner.trial.measure import HostMemorySampler, LoadMonitor


def test_load_is_recorded_around_a_measurement():
    with LoadMonitor(torch.device("cpu")) as load:
        sum(i * i for i in range(200_000))
    columns = load.as_columns()
    assert columns["load_avg_1m"] is not None and columns["load_avg_1m"] >= 0
    assert columns["cpu_steal_pct"] is None or 0 <= columns["cpu_steal_pct"] <= 100
    assert columns["gpu_other_processes"] is None                      # CPU: no GPU to share
    assert 0 <= columns["other_cpu_pct"] <= 100


def test_other_processes_cpu_time_is_told_apart_from_the_trials_own(monkeypatch):
    """The load average counts the trial's own DataLoader workers: on 2 cores a quiet run was
    warned 'busy' at load 2.4. ``other_cpu_pct`` is the machine's busy CPU time less the
    trial's own (``own_cpu_s``), over the machine's CPU time; idle, iowait and steal are not
    busy. Fed fixed ``/proc/stat`` and own-CPU readings, so the shares are exact."""
    from collections import namedtuple

    from tuner.trial import measure
    Times = namedtuple("Times", "user nice system idle iowait steal")
    readings = iter([Times(100.0, 0.0, 20.0, 500.0, 1.0, 2.0),      # on entry
                     Times(101.2, 0.0, 20.2, 500.4, 1.0, 2.2)])     # 2 s of 2 CPUs later
    own = iter([30.0, 30.6])                  # the trial and its workers: 0.6 CPU s of the 1.4
    monkeypatch.setattr(measure.psutil, "cpu_times", lambda: next(readings))
    monkeypatch.setattr(measure, "own_cpu_s", lambda: next(own))
    loads = iter([1.5, 2.4])
    monkeypatch.setattr(measure.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    with LoadMonitor(torch.device("cpu")) as load:
        pass
    assert load.other_cpu_pct == pytest.approx(40.0)          # (1.4 - 0.6) / 2.0
    assert load.cpu_steal_pct == pytest.approx(10.0)          # 0.2 / 2.0
    assert load.load_avg_1m == 2.4                            # the higher of entry and exit
    # the trial alone kept the machine busy: nothing is another's (never below 0)
    readings = iter([Times(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), Times(1.8, 0.0, 0.2, 0.0, 0.0, 0.0)])
    own, loads = iter([0.0, 2.05]), iter([2.0, 2.0])
    with LoadMonitor(torch.device("cpu")) as load:
        pass
    assert load.other_cpu_pct == 0.0
    # its own CPU time unreadable: the share is unknown, not 0 %
    readings = iter([Times(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), Times(1.0, 0.0, 0.0, 1.0, 0.0, 0.0)])
    own, loads = iter([None, None]), iter([1.0, 1.0])
    with LoadMonitor(torch.device("cpu")) as load:
        pass
    assert load.other_cpu_pct is None and load.cpu_steal_pct == 0.0


_OWN_CPU_CHECK = """
import json, subprocess, sys, time
from pathlib import Path
from tuner.trial.measure import own_cpu_s
tmp, script = Path(sys.argv[1]), sys.argv[2]

def wait_for(path):
    deadline = time.monotonic() + 300
    while not path.exists():
        assert time.monotonic() < deadline, "the spinning process did not finish"
        time.sleep(0.05)

before = own_cpu_s()
child = subprocess.Popen([sys.executable, script, str(tmp / "child")], stdin=subprocess.PIPE)
try:
    wait_for(tmp / "child")
    alive = own_cpu_s()
finally:
    child.communicate(b"")
reaped = own_cpu_s()
before_other = own_cpu_s()
subprocess.run(f"{sys.executable} {script} {tmp / 'other'} </dev/null &", shell=True, check=True)
wait_for(tmp / "other")
print(json.dumps([before, alive, reaped, before_other, own_cpu_s()]))
"""
"""The check of ``own_cpu_s``, run in a process of its own: the test runner's process has
descendants of its own (a shared Ray instance's workers, started and ended by Ray's raylet),
whose CPU time leaves the sum when they end without this process reaping them."""


def test_the_trials_own_cpu_time_counts_its_descendants_and_no_other_process(tmp_path):
    """``own_cpu_s`` counts a child process (as a DataLoader worker is) while it lives and
    after it is reaped, and not a process that is not its descendant. Each helper process
    spins until it has used 0.5 CPU seconds of its own (``time.process_time``), however long a
    busy machine makes that take, while the measuring process sleeps: its own CPU time moves by
    at least that 0.5 s for the child and by far less for the other process, on a quiet machine
    or a loaded one, and either way the wrong attribution would miss by 0.5 s. The measuring
    process is a fresh one (``_OWN_CPU_CHECK``), whose only descendants are these."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT
    spin = ("import sys, time\nwhile time.process_time() < 0.5: pass\n"
            "open(sys.argv[1], 'w').close()\nsys.stdin.read()\n")
    script = tmp_path / "spin.py"
    script.write_text(spin)
    done = subprocess.run([sys.executable, "-c", _OWN_CPU_CHECK, str(tmp_path), str(script)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    before, alive, reaped, before_other, after_other = json.loads(done.stdout.splitlines()[-1])
    assert alive - before >= 0.5 - 0.02, (before, alive)  # clock ticks of 10 ms, each side
    assert reaped - before >= 0.5 - 0.02, (before, reaped)
    # not a descendant: started through a shell that exits at once; it ends by itself after
    # its 0.5 s once its stdin (/dev/null) reads empty
    assert after_other - before_other < 0.25, (before_other, after_other)


def test_a_busy_machine_is_said_in_one_line_and_a_quiet_one_not_at_all():
    quiet = [{"load_avg_1m": 1.2, "cpu_count": 2, "cpu_steal_pct": 0.0,
              "gpu_other_processes": None}]
    assert busy_note(quiet) is None
    # its own workers raise the load average over the CPU count; other processes used 3 %
    own_load = [{"load_avg_1m": 2.4, "cpu_count": 2, "cpu_steal_pct": 0.0, "other_cpu_pct": 3.0}]
    assert busy_note(own_load) is None
    others = [{"load_avg_1m": 1.9, "cpu_count": 2, "cpu_steal_pct": 0.0, "other_cpu_pct": 40.0}]
    assert "other processes used up to 40 % of its CPU time" in busy_note(others)
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


def _round(knobs: dict, rate: float, window_cv: float = 0.01, phase: str = "remeasure",
           windows: int = 2) -> dict:
    from tuner.knobs import Knobs
    return {**Knobs(**knobs).to_dict(), "run_id": "r1", "phase": phase, "status": "ok",
            "samples_per_sec": rate, "samples_per_sec_cv": window_cv, "windows": windows}


def test_rounds_that_drift_far_beyond_their_windows_are_said_and_steady_ones_not():
    """One configuration re-measured at 34.5, 46.7, 47.8 samples/sec with windows agreeing
    within 1 % and no load to show for it (a drifting 2-core VM): every speed-up reads as a
    tie, and the run says why."""
    a, b = {"batch_size": 37, "num_workers": 2}, {"batch_size": 8, "num_workers": 4}
    drifting = [_round(a, 34.5), _round(b, 39.1), _round(a, 46.7), _round(b, 31.5),
                _round(a, 47.8), _round(b, 32.0)]
    drift = noise.round_drift(drifting)
    assert drift.configurations == 2 and drift.within_cv == pytest.approx(0.01)
    assert drift.between_cv == pytest.approx(
        statistics.median([statistics.stdev(x) / statistics.mean(x)
                           for x in ([34.5, 46.7, 47.8], [39.1, 31.5, 32.0])]))
    note = drift_note(drifting)
    assert note.startswith("the machine's speed drifted between the re-measured rounds")
    assert "moved 15 % (CV, median of 2 configurations)" in note and "within 1 %" in note
    steady = [_round(a, 46.0), _round(b, 39.1), _round(a, 46.7), _round(b, 38.5),
              _round(a, 47.0), _round(b, 39.0)]
    assert noise.round_drift(steady).between_cv < noise.DRIFT_NOTE_CV
    assert drift_note(steady) is None
    # search trials and single rounds are no rounds to compare
    assert noise.round_drift([_round(a, 34.5, phase="search"), _round(a, 47.8, phase="search"),
                              _round(b, 39.1)]) is None
    assert drift_note([_round(a, 34.5)]) is None


def test_rounds_of_one_window_say_nothing_of_how_their_windows_agreed():
    """Rounds of one window each (a short budget's re-measurement) record a window CV of 0:
    the note gives the drift between them and claims no agreement within a trial."""
    a, b = {"batch_size": 30, "data_path": "device", "num_workers": 0}, {"batch_size": 8}
    rows = [_round(a, 44.8, 0.0, windows=1), _round(b, 30.1, 0.0, windows=1),
            _round(a, 50.3, 0.0, windows=1), _round(b, 24.0, 0.0, windows=1),
            _round(a, 43.4, 0.0, windows=1), _round(b, 27.8, 0.0, windows=1)]
    drift = noise.round_drift(rows)
    assert drift.configurations == 2 and drift.within_cv is None
    note = drift_note(rows)
    assert note.startswith("the machine's speed drifted") and "agreed within" not in note
    # one round of two windows among them: its cv is the rounds' window figure
    rows[0] = _round(a, 44.8, 0.02, windows=2)
    assert noise.round_drift(rows).within_cv == pytest.approx(0.02)
    assert "windows agreed within 2 %" in drift_note(rows)


def test_one_configuration_on_two_cards_is_two_configurations_not_drift():
    """A run over two accelerator types re-measures each configuration on each under one run
    id: the cards' rates differ by the card (here 2x), which is no drift of the machine."""
    a = {"batch_size": 37, "num_workers": 2}
    rows = [dict(_round(a, rate), hardware_key=key, accelerator_type=key)
            for rate, key in ((200.0, "A100"), (100.0, "V100"), (201.0, "A100"),
                              (100.5, "V100"), (202.0, "A100"), (101.0, "V100"))]
    drift = noise.round_drift(rows)
    assert drift.configurations == 2 and drift.between_cv < 0.01
    assert drift_note(rows) is None


def test_compile_time_is_the_first_step_beyond_a_steady_one():
    from tuner.knobs import Knobs
    from tuner.trial.result_columns import compile_s
    measured = {"first_step_s": 41.5, "step_time_ms_p50": 500.0}
    assert compile_s(Knobs(batch_size=8, compile="max-autotune"), measured) == 41.0
    assert compile_s(Knobs(batch_size=8, compile="off"), measured) is None  # no compile: no figure
    assert compile_s(Knobs(batch_size=8, compile="default"),
                     {"first_step_s": 0.2, "step_time_ms_p50": 300.0}) == 0.0
    assert compile_s(Knobs(batch_size=8, compile="default"), {"first_step_s": 3.0}) is None


def test_the_host_memory_sampler_spends_at_most_its_duty_of_one_core(monkeypatch):
    """Reading PSS costs 10-25 ms of CPU per torch process: sampled every 0.1 s it slowed the
    trial it measured by 10-33 % on 2 cores. After a sample of c seconds the sampler waits
    c x 99 (1 % of one core) or ``interval_s``, whichever is longer. Its thread runs on a
    clock that only the samples (50 ms each) and its waits move, so the count of samples in
    one second is exact however busy the machine is."""
    sampler = HostMemorySampler(interval_s=0.1)
    assert sampler.wait_after_s(0.025) == 0.1                 # outside the windows
    with sampler.measuring():
        assert sampler.wait_after_s(0.025) == pytest.approx(2.475)
        assert sampler.wait_after_s(0.0001) == 0.1
    assert sampler.wait_after_s(0.025) == 0.1

    from tuner.trial import measure

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    class OneSecond:
        """The sampler's stop event: a wait moves the clock by its length, and the thread's
        first wait holds until the test has entered (or not) the measuring window."""
        def __init__(self, clock: Clock, entered: threading.Event):
            self.clock, self.entered, self.stopped, self.waits = clock, entered, False, []

        def wait(self, seconds: float) -> bool:
            assert self.entered.wait(60)
            self.waits.append(seconds)
            self.clock.now += seconds
            return self.stopped or self.clock.now >= 1.0

        def set(self) -> None:
            self.stopped = True

    def samples_in_one_second(measuring: bool) -> tuple[list[float], list[float]]:
        clock, entered = Clock(), threading.Event()
        monkeypatch.setattr(measure, "time", clock)
        slow = HostMemorySampler(interval_s=0.01)
        slow._stop = stop = OneSecond(clock, entered)
        real, calls = slow.sample, []

        def costly() -> int:                  # a sample that takes 50 ms, as with workers
            calls.append(clock.now)
            clock.now += 0.05
            return real()
        monkeypatch.setattr(slow, "sample", costly)
        with slow, (slow.measuring() if measuring else contextlib.nullcontext()):
            entered.set()
            slow._thread.join(60)             # the thread's second ends: the window's ends
        assert slow.peak_mb > 0
        return calls, stop.waits
    # in a window: the sample on entry, the window's first (after interval_s), then one 4.95 s
    # later at the earliest (past the second: none), and the one on exit; outside (warm-up,
    # the probe's short trials, where a step's peak must be caught): one every 60 ms
    calls, waits = samples_in_one_second(measuring=True)
    assert calls == pytest.approx([0.0, 0.06, 5.06]) and waits == pytest.approx([0.01, 4.95])
    calls, waits = samples_in_one_second(measuring=False)
    assert len(calls) == 1 + 16 + 1 and waits == pytest.approx([0.01] * 17)
    assert calls[:3] == pytest.approx([0.0, 0.06, 0.12])


def test_the_machine_notes_moved_out_of_the_printer_and_still_read_with_a_warning():
    import tuner.machine_load as machine_load
    import tuner.progress as progress
    import tuner.summary as summary
    for name, home in (("busy_note", machine_load), ("drift_note", machine_load),
                       ("BUSY_STEAL_PCT", machine_load), ("BUSY_OTHER_CPU_PCT", machine_load),
                       ("verdict_lines", summary), ("paste_commands", summary),
                       ("leaderboard_statuses", summary)):
        with pytest.warns(DeprecationWarning, match=f"tuner.progress.{name} was deprecated .*"
                                                    f"use {home.__name__}.{name}"):
            assert getattr(progress, name) is getattr(home, name)
