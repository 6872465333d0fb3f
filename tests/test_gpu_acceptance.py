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


def test_quick_caps_the_trials_and_a_time_budget_runs_the_products_search(bench, tmp_path,
                                                                         monkeypatch):
    """--quick runs ddpm with ``QUICK_TRIALS`` and no re-measurement; with --time-budget the
    run searches as a user's run of that budget does (no trial cap, the default finalists),
    so that its screened configurations are the product's."""
    jobs = []
    monkeypatch.setattr(bench, "_in_child", lambda target, a, box: jobs.append(a[1]) or False)
    for budget in (None, 300.0):
        args = bench.argparse.Namespace(device="cuda", scale="seed", quick=True, deadline_s=None,
                                        time_budget=budget, trials=None, no_tests=True, out=None)
        bench.run_workload(bench.Run(args, ["ddpm"], tmp_path), "ddpm")
    assert (jobs[0]["trials"], jobs[0]["confirm"]) == (bench.QUICK_TRIALS["ddpm"], 0)
    assert (jobs[1]["trials"], jobs[1]["confirm"], jobs[1]["budget"]) == (None, None, 300.0)


def test_an_unknown_workload_is_one_line_and_exit_code_2(bench, capsys):
    assert bench.main(["--workloads", "nosuch", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nosuch" in err and "ddpm" in err


def test_the_commit_is_the_projects_own_or_unknown(bench, tmp_path):
    import subprocess
    def git(*args, cwd=tmp_path):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              check=True).stdout.strip()
    git("init", "-q")
    (tmp_path / "a.txt").write_text("a")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    copy = tmp_path / "copy"                      # a tree without its own .git inside a repository
    copy.mkdir()
    assert bench.project_commit(copy) is None     # not the enclosing repository's commit
    assert bench.project_commit(tmp_path) == git("rev-parse", "--short", "HEAD")
    (tmp_path / "a.txt").write_text("b")
    assert bench.project_commit(tmp_path).endswith(" + local changes")


def test_ceilings_and_re_measurements_are_labelled_as_such_not_counted_as_trials(bench):
    counts = bench.Counter()
    knobs = {"batch_size": 32, "num_workers": 6}
    lines = [bench.trial_line("ddpm", {**knobs, "status": "ok", "samples_per_sec": v, **extra},
                              counts, 4)
             for v, extra in ((178.3, {"phase": "search", "reference": "baseline"}),
                              (710.3, {"phase": "search", "reference": "recommended"}),
                              (8315.8, {"phase": "ceiling", "ceiling": "machine-loader"}),
                              (900.0, {"phase": "search"}),
                              (905.0, {"phase": "remeasure"}))]
    assert lines[0].startswith("ddpm trial 1/4 (baseline): ")
    assert lines[1].startswith("ddpm trial 2/4 (recommended): ")
    assert lines[2].startswith("ddpm ceiling machine-loader: ") and "8,315.8" in lines[2]
    assert lines[3].startswith("ddpm trial 3/4: ")
    assert lines[4].startswith("ddpm re-measurement 1: ")
    counts["search"] = 4                          # a search past the trials planned: no "5/4"
    assert bench.trial_line("ddpm", {**knobs, "status": "ok", "samples_per_sec": 1.0,
                                     "phase": "search"}, counts, 4).startswith("ddpm trial 5: ")


STOPPED = {"status": "timeout", "samples_per_sec": 2210.4, "windows": 4, "phase": "search",
           "reference": "baseline", "batch_size": 256, "num_workers": 2, "data_path": "loader",
           "error": "stopped by the time budget during window 5, after 4 of 5 windows"}


def test_the_machine_limit_the_screened_count_and_the_doubling_ratio_are_in_the_row(bench):
    """The columns the GPU targets are judged on: the run's machine limit and the best's share
    of it, the search trials and those screened (fewer windows than a reference planned), the
    best ÷ the doubling answer; the screened count is a target of a ddpm run of 300 s or more."""
    from tuner.ceilings import Ceilings, MachineCompute, verdict
    from tuner.noise import Speedup
    from tuner.winner import Attainable, Reference
    machine = MachineCompute(6353.0, "t9", 652, 1, "bf16", "device", verdict(6353.0, 6277.5))
    answer = SimpleNamespace(
        ceilings=Ceilings(6408.1, 1, False, 0.98, None, False, machine_compute=machine),
        attainable=Attainable(None, None, None, compute_samples_per_sec=6408.1),
        baseline=Reference("baseline", 149.0, False, Speedup(42.1, None, None, 1)),
        recommended=Reference("recommended", 627.8, False, Speedup(10.0, None, None, 1)))
    best = SimpleNamespace(samples_per_sec=6277.5, answer=answer, row={
        "batch_size": 652, "data_path": "device", "compile": "off"})
    row = dict.fromkeys(bench.COLUMNS)
    row.update(workload="ddpm", notes=[], partial={}, budget_s=300.0)
    rows = [{"phase": "search", "reference": "baseline", "windows_planned": 5},
            {"phase": "search", "reference": "recommended", "windows_planned": 5},
            *({"phase": "search", "windows_planned": 1} for _ in range(3)),
            {"phase": "remeasure", "windows_planned": 2}, {"phase": "ceiling"}]
    bench._fill_answer(row, SimpleNamespace(best=best, rows=rows), "cuda")
    row.update({"peers' samples/sec": 1616.4, "best ÷ peers'": 6277.5 / 1616.4})
    cells = dict(zip(bench.COLUMNS, (c.strip() for c in
                                     bench.markdown([row]).splitlines()[2].split("|")[1:-1]),
                     strict=True))
    assert cells["search trials (screened)"] == "5 (3)"
    assert cells["machine limit"] == "6,353.0"
    assert cells["best ÷ machine limit"] == "0.99"
    assert cells["best ÷ peers'"] == "3.88"
    assert any("bs=652 amp=bf16" in n for n in row["notes"])
    line = bench.targets([row])[0]
    assert "best ÷ machine limit 0.99 (target >= 0.9)" in line
    assert "3.88 (target >= 1.1)" in line
    assert "3 configurations screened in 300 s (target >= 40)" in line
    assert "screened" not in bench.targets([{**row, "budget_s": 150.0}])[0]


def test_the_screening_costs_split_the_first_step_by_a_new_cudnn_shape(bench):
    """What the 5-minute screening count rests on: the screening trials' median start-to-start
    seconds and their first step, those with cuDNN's benchmark at a shape no earlier trial had
    on apart (the reference at batch 32 autotuned it; batch 104, and 104 in channels_last, are
    new; 104 again is not); references, ceilings and full measurements are not screens."""
    from datetime import datetime, timedelta, timezone
    t0 = datetime(2026, 11, 27, 7, 54, tzinfo=timezone.utc)

    def at(s, **row):
        return {"phase": "search", "windows_planned": 1, "cudnn_benchmark": True,
                "amp": "bf16", "channels_last": False, "tf32": False,
                "started_at": t0 + timedelta(seconds=s), **row}
    rows = [at(0, reference="recommended", windows_planned=5, batch_size=32, first_step_s=12.2),
            at(23, batch_size=32, first_step_s=2.0),                   # known shape
            at(27, batch_size=104, first_step_s=12.4),                 # new
            at(42, batch_size=104, channels_last=True, first_step_s=11.8),  # new layout
            at(56, batch_size=104, num_workers=4, first_step_s=1.6),   # known again
            at(60, batch_size=64, cudnn_benchmark=False, first_step_s=1.8),
            at(65, phase="ceiling", batch_size=652, first_step_s=3.0, windows_planned=1)]
    line = bench.screening_costs(rows)
    assert line == ("screening: 5 trials, a median 5.0 s start to start; first step a median "
                    "1.8 s; 12.1 s for the 2 with cudnn_benchmark at a shape new to the run")
    assert bench.screening_costs(rows[:1]) is None                      # a reference only


def test_the_cudnn_decision_pairs_the_first_ranked_with_and_without_it(bench):
    """The finalists' rounds of the one configuration measured both ways give a ratio of
    geometric means and the on-variant's autotuning first step; other configurations, failed
    rounds and search rows do not count; no pair, no line."""
    def remeasure(rate, cudnn, batch=512, **row):
        return {"phase": "remeasure", "status": "ok", "samples_per_sec": rate, "windows": 4,
                "batch_size": batch, "amp": "bf16", "cudnn_benchmark": cudnn, **row}
    rows = [remeasure(5000.0, False), remeasure(5100.0, True, first_step_s=11.8),
            remeasure(4900.0, False), remeasure(5300.0, True, first_step_s=2.1),
            remeasure(4800.0, True, batch=256),                         # another finalist
            remeasure(None, True, status="timeout"),                    # not a round
            {**remeasure(9000.0, True), "phase": "search"}]             # not a round
    line = bench.cudnn_decision(rows)
    assert line == ("cudnn_benchmark at the finalists: bs=512 amp=bf16 4,949.7 without it, "
                    "5,199.0 with it (1.050x; 2 and 2 rounds; its first step up to 11.8 s)")
    assert bench.cudnn_decision(rows[:1] + rows[4:]) is None


def test_a_budget_stopped_measurement_is_the_answer_with_its_windows_not_no_trial(bench):
    row = dict.fromkeys(bench.COLUMNS)
    row.update(workload="chargpt", notes=[], partial={})
    result = SimpleNamespace(best=None, rows=[STOPPED, {**STOPPED, "status": "timeout",
                                                        "samples_per_sec": None, "windows": 0,
                                                        "reference": "recommended"}])
    best_row = bench._fill_answer(row, result, "cuda")
    assert best_row is STOPPED and row["best"] == 2210.4
    assert row["partial"] == {"best": "4 of 5 windows"}
    cells = dict(zip(bench.COLUMNS, (c.strip() for c in
                                     bench.markdown([row]).splitlines()[2].split("|")[1:-1]),
                     strict=True))
    assert cells["best"] == "2,210.4 (4 of 5 windows)"
    assert cells["best loader-path"] == "2,210.4"
    assert not any("no window measured" in n for n in row["notes"])
    line = bench.trial_line("chargpt", STOPPED, bench.Counter(), 3)
    assert line.endswith("timeout, 2,210.4 samples/sec (4 of 5 windows)")


def test_no_window_measured_is_said_so(bench):
    row = dict.fromkeys(bench.COLUMNS)
    row.update(workload="chargpt", notes=[], partial={})
    failed = {**STOPPED, "samples_per_sec": None, "windows": 0,
              "error": "stopped by the time budget during warm-up, after 0 of 5 windows"}
    assert bench._fill_answer(row, SimpleNamespace(best=None, rows=[failed]), "cuda") is None
    assert row["best"] is None and row["notes"][0].startswith("no window measured (1 timeout)")


def test_an_unknown_attainable_says_what_was_not_measured_not_below_the_best(bench):
    from tuner.winner import Attainable
    assert bench.attainable_label(Attainable(None, None, None)) == \
        "unknown: no compute limit measured"
    assert bench.attainable_label(Attainable(None, None, None, compute_samples_per_sec=800.0)) \
        == "unknown: no input limit measured"
    assert bench.attainable_label(Attainable(700.0, "compute", None)) == \
        "below the best: not a bound"
    assert bench.attainable_label(Attainable(900.0, "compute", 0.8)) == "compute"


def test_the_references_again_read_with_their_ratio_to_the_runs(bench):
    cell = bench._cell("references again (÷ the run's)",
                       {"baseline": [178.3, 221.2], "recommended": [710.3, None]})
    assert cell == "baseline 221.2 (1.24) / recommended no figure"


def test_a_check_the_steps_time_cannot_hold_is_skipped_with_a_note(bench):
    row = {"notes": []}
    job = {"stop_at": bench.time.time() + 10.0}
    assert bench._skip_for_time(row, "validate", job, "cuda")
    assert row["validate ratio"] == "skipped" and row["notes"][0].startswith("validate skipped")
    job = {"stop_at": bench.time.time() + 1000.0}
    assert not bench._skip_for_time(row, "peers", job, "cuda")
    assert row["peers' batch"] == "cut off"          # until the peers' answer ends


def test_every_built_in_has_a_quick_budget_that_holds_its_start_up_and_references(bench):
    from tuner.workload_loader import available
    args = bench.argparse.Namespace(device="cuda", quick=True, time_budget=None, trials=None)
    for name in available():
        budget = bench.budget_of(name, args)
        assert budget == bench.QUICK_BUDGETS_S.get(name, bench.QUICK_OTHER_BUDGET_S)
        assert budget >= 45.0                      # the 60-s budgets' first trial had 8-15 s


@pytest.fixture
def short_plan(tmp_path):
    """A plan of the fake regression workload on CPU, its trials measuring 2 windows of 0.2 s."""
    from dataclasses import replace

    from tuner.option_checks import make_plan
    from tuner.settings import RunOptions
    plan = make_plan(RunOptions(workload="tests.fake_workloads:regression", device="cpu",
                                scale="tiny", results=str(tmp_path), probe="off"))
    return replace(plan, settings=replace(plan.settings, windows=2, window_s=0.2,
                                          warmup_steps=1))


def test_the_checks_measure_the_references_again_and_validate_interleaved(bench, short_plan,
                                                                         capsys):
    """The step's checks end to end on CPU, as on a GPU: each reference measured once more in
    this process beside the run's figure, and validate's rounds with their median."""
    from tuner.trial.harness import run_trial
    plan = short_plan
    rows = []
    for name, knobs in plan.references:
        r = run_trial(plan.workload, knobs, plan.settings, cpus=1)
        rows.append({**r, "reference": name, "phase": "search", "trial_cpus": 1.0})
    out = {"notes": []}
    bench.references_again(plan, rows, out)
    again = out["references again (÷ the run's)"]
    assert set(again) == {name for name, _ in plan.references}
    assert all(first == row["samples_per_sec"] and second > 0
               for (first, second), row in zip(again.values(), rows, strict=True))
    assert sum(n.startswith(tuple(again)) and " again in a second process: " in n
               for n in out["notes"]) == len(again)
    bench.validate_interleaved(plan, rows[0], out, bench.time.time() + 1e6)
    assert out["validate ratio"] > 0
    note = out["notes"][-1]
    assert "round 1: loop " in note and "round 2: loop " in note and "median " in note
    assert "threads: torch 1" in note                      # the trial's, as its row says
    assert "validate, plain loop ÷ harness" in capsys.readouterr().out
