"""Benchmark: the GPU acceptance run — the built-in workloads tuned on this machine, side by
side with what the peers would hand a user, and read against the GPU targets.

Steps, most important first; each runs in a child process with a time box, and the report
(markdown: header, GPU tests, table, notes, targets) is printed and written to ``--out`` after
each step, so that a command stopped by a time limit keeps what finished:

  1. the GPU tests (``tests/gpu``, ``tests/test_gpu_paths.py``: ``--max-memory`` on the card,
     out-of-memory then a fitting trial, AMP, compile, NVML) through pytest;
  2. ddpm under ``--max-memory 12GB`` (on CUDA; the DDPM report's card, an RTX 5070 with
     12 GB): the tuner's references, its best (re-measured; with ``--quick`` the search's;
     a measurement the time budget stopped counts, with its windows of planned), both
     ceilings (compute-only, loader-only), the attainable rate and the best's share of it,
     MFU, compile time, peak memory, start-up + probe time; then the references measured
     again in another process (the spread between processes), ``validate`` (the best trained
     as a plain loop, alternating with the harness's measurement in one process, both on the
     trial's threads: the ratio per round and its median) and the peers' answer;
  3. the other built-in workloads the same way, each with a short time budget (with
     ``--quick`` and without the memory probe), as many as the deadline holds; one that would
     not fit is skipped and the notes say so.

The peers' answer: the largest batch that fits with the recommended reference's other
settings, found by doubling until it no longer fits (Lightning's ``BatchSizeFinder`` in its
default 'power' mode; accelerate's ``find_executable_batch_size`` halving from the top ends at
the same batch), then measured like any trial.

Usage:
  bash bench/gpu_check.sh                          # the one command (install included)
  python bench/gpu_acceptance.py --quick --out gpu-acceptance.md      # on a GPU machine
  python bench/gpu_acceptance.py --quick --device cpu --scale tiny    # rehearsal on CPU
  python bench/gpu_acceptance.py --workloads ddpm chargpt --time-budget 120

Options: --quick (a deadline of 480 s; ddpm: 4 trials within 150 s, each other workload: 3
trials within its ``QUICK_BUDGETS_S`` budget (45-60 s) without the memory probe; no
re-measurement; the references again and the interleaved validate for ddpm and classifier),
--deadline-s S (the whole run; steps that would not end by then are skipped), --workloads
NAME... (default: every built-in, ddpm first), --time-budget S (per workload; default 300 on
CUDA for ddpm, 40 for the others, none on CPU; with --quick it also lifts the trial count and
the re-measurement: the run searches as a user's run of S seconds does), --trials N,
--no-tests, --results DIR, --out FILE.md (beside it FILE.json, the rows, and gpu-tests.log,
pytest's output).

The GPU targets take three commands of <= 9 minutes each (``bench/gpu_check.sh`` passes its
arguments on): the default (the GPU tests, ddpm in 150 s, the classifier, the others as the
deadline holds); ``--workloads ddpm --time-budget 300 --no-tests`` (the 5-minute ddpm run:
configurations screened, the best ÷ this machine's compute limit and ÷ the doubling answer);
``--workloads chargpt headpose classifier299 segmentation3d --no-tests`` (each other built-in
within its budget).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing as mp
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

STARTED = time.time()
"""The script's start: the deadline counts from here, the import of torch and Ray included."""

START_METHOD = mp.get_start_method()
"""This platform's default start method (fork on Linux before Python 3.14), for the children of
the workload steps."""

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tuner  # noqa: E402
from tuner.driver import RunInterrupted  # noqa: E402
from tuner.history import History  # noqa: E402
from tuner.knobs import knob_text, new_cudnn_shapes  # noqa: E402
from tuner.option_checks import make_plan  # noqa: E402
from tuner.probe import candidates  # noqa: E402
from tuner.settings import SCALES, RunOptions, default_scale  # noqa: E402
from tuner.status import Status  # noqa: E402
from tuner.trial.harness import run_trial  # noqa: E402
from tuner.workload_loader import available  # noqa: E402

COLUMNS = ("workload", "baseline", "recommended", "references again (÷ the run's)", "best",
           "best knobs", "best loader-path", "search trials (screened)", "compute-only",
           "loader-only", "attainable (bound)", "best ÷ attainable", "machine limit",
           "best ÷ machine limit", "MFU %", "compile s",
           "peak dev MiB", "peak host MiB", "start-up + probe s", "validate ratio",
           "peers' batch", "peers' samples/sec", "best ÷ peers'", "step s")
"""The table's columns: samples/sec unless said. 'n/a' where the device has no such figure
(MFU and device memory on CPU), 'off' for the compile time of a best that does not compile,
'skipped' for a figure the time left could not hold, 'cut off' for one the step's time box
stopped, empty where a step gave no figure. A figure the time budget stopped before all its
windows says so beside it ('2,210.4 (4 of 5 windows)'). 'search trials (screened)': the run's
search trials, references included, and how many of them measured fewer windows than a
reference (the screening trials). 'machine limit': this machine's compute limit for the
model as the run's summary gives it (``tuner.ceilings.MachineCompute``: batch, precision,
batches on the device; the notes name them), 'best ÷ machine limit' the best's share of it
('at it' within the ceilings' noise above it). 'best ÷ peers'': the best ÷ the doubling
answer. 'references again': baseline / recommended measured once more, in another process
than the run's trials, each with its ratio to the run's figure; 'validate ratio': the plain
loop ÷ the harness, measured alternately in one process (the median of the rounds; the
notes give each round)."""

NOT_ON_CPU = ("MFU %", "peak dev MiB")

DDPM_MAX_MEMORY = "12GB"
"""The DDPM report's card: an RTX 5070 with 12 GB."""

ORDER = ("ddpm", "classifier", "chargpt", "headpose", "classifier299", "segmentation3d")
"""Most important first: ddpm (the report's workload), then by the wall time of a short run on
an H100 (classifier's trials are the shortest, segmentation3d's the longest)."""

QUICK_DEADLINE_S = 480.0
"""``--quick``: the whole run, so that one command with the dependency install (~30 s) and
this script's start-up ends within 9 minutes."""

# --quick budgets on CUDA, from one H200's costs at seed scale (16 CPUs, torch 2.11, 2026-11-27,
# no warm caches): a budget holds the run's fixed start-up (plan, Ray, the trial process's start;
# ddpm: the memory probe too), then both references in full, then what is left for the search
# and the ceilings. Start-up, budget start to the first trial: ddpm 34.4 s (probe 17 s),
# classifier 15.9, chargpt 15.5, headpose 21.3, classifier299 21.9. A full reference trial
# (set-up + first step + warm-up + 5 windows of ~2 s + breakdown and teardown): ddpm 13.1 and
# 23.2 (a 12.2-s first step: cuDNN autotuning at new shapes), classifier 11.2 and ~13 (a 2.3-s
# first step), chargpt ~16.5 (3.5-s set-up, 2.2-s windows), headpose ~13.8, classifier299 ~12.6.
#   ddpm:          34.4 + 13.1 + 23.2 = 70.7 s; + ~80 s for the search and the ceilings
#                  (11-13 s a trial)                                           -> 150 s
#   classifier:    15.9 + 11.2 + 13.0 = 40.1 s; + 10 % for a slower start      ->  45 s
#   chargpt:       15.5 + 2 x 16.5   = 48.5 s; + 10 %                          ->  55 s
#   headpose:      21.3 + 2 x 13.8   = 48.9 s; + 10 %                          ->  55 s
#   classifier299: 21.9 + 2 x 12.6   = 47.1 s; + 10 %                          ->  52 s
#   segmentation3d: no H200 figure (its trials are the longest: 28.6-52.6 samples/sec at bs 1-4
#                  on an H100); headpose's costs + 10 %, a guess                ->  60 s
# A 60-s budget gave the first reference 8.1-14.5 s before the search's deadline, too little for
# 5 windows (chargpt, headpose, classifier299 stopped after 4, 2 and 2 of them).
QUICK_BUDGETS_S = {"ddpm": 150.0, "classifier": 45.0, "chargpt": 55.0, "headpose": 55.0,
                   "classifier299": 52.0, "segmentation3d": 60.0}
"""``--quick`` on CUDA: each built-in's time budget (the arithmetic is in the comment above)."""

QUICK_BUDGET_S = QUICK_BUDGETS_S["ddpm"]
"""``--quick``: ddpm's time budget (probe, search, re-measurement, ceilings)."""

QUICK_OTHER_BUDGET_S = 55.0
"""``--quick``: the time budget of a workload ``QUICK_BUDGETS_S`` does not name."""

QUICK_TRIALS = {"ddpm": 4}
"""``--quick``: trials in all (references included), 3 for a workload not named."""

QUICK_CONFIRM = 0
"""``--quick``: no re-measurement (its interleaved rounds, which come first, would take the
time the ceilings need); the best and its ceilings are the search's."""

QUICK_CHECKS = ("ddpm", "classifier")
"""``--quick``: the workloads whose step also measures the references again in this process
and validates interleaved (the two whose figures moved between runs on an H200: the same
knobs read 710 and 932, validate 1.14 and 0.94); every workload gets them without --quick."""

CHECK_S = {"cuda": {"references": 45.0, "validate": 45.0}, "cpu": {"references": 40.0,
                                                                    "validate": 60.0}}
"""Time the step's checks need beyond the run. On an H200: the references again are two full
trials in a new process (ddpm 13.1 + 23.2 s with the 12.2-s cuDNN first step again, classifier
~24 s) plus the process's CUDA start; validate's ``VALIDATE_ROUNDS`` rounds of a plain loop and a
harness trial of ``VALIDATE_WINDOWS`` windows each (~5 + ~6 s a round after the first step;
ddpm's first round pays cuDNN's 12 s unless the references ran its shapes). On 2 CPU cores at tiny
scale: ddpm's references ~15 s each, a round ~20 s."""

VALIDATE_ROUNDS = 2
"""Rounds of validate's interleaved measurement (A B A B: plain loop, harness, ...)."""

VALIDATE_WINDOWS = 2
"""Windows of the harness's side of each round (of the run's window length); the plain loop
measures as long."""

CPU_MAX_BATCH = 64
"""``--device cpu`` (the rehearsal): the largest batch the searches and the peers' doubling
try. A CPU step at batch 256 of ddpm takes ~8 s, so a run, its ceilings at the largest batch,
validate and the peers' answer would not fit the deadline; every column is still measured."""

CPU_QUICK_BUDGET_S = 150.0
"""``--quick --device cpu``: ddpm's time budget."""

CPU_QUICK_OTHER_BUDGET_S = 60.0
"""``--quick --device cpu``: the time budget of each other workload."""

CPU_QUICK_OTHER_TRIALS = 2
"""``--quick --device cpu``: trials of each other workload (its references)."""

MIN_BUDGET_S = 25.0
"""A workload whose budget the deadline would cut below this is skipped: a shorter run
measures the references at most."""

STEP_OVERHEAD_S = {"cuda": 15.0, "cpu": 20.0}
"""A workload step's wall time beyond its tuner budget and checks: the child's start-up
before the budget starts (~3 s on an H200), the budget's grace, Ray's shut-down."""

PEERS_S = {"cuda": 40.0, "cpu": 60.0}
"""Time the peers' answer needs: the doubling checks and one measured trial (ddpm on an H200,
bs 32 to 256 and a trial: ~37 s; on 2 CPU cores at tiny scale, up to batch 64: 30-50 s)."""

TESTS = ("tests/gpu", "tests/test_gpu_paths.py")
TESTS_BOX_S = 150.0
"""The GPU tests' time box (a few tests on a card, the rest fakes; seconds)."""

STOP_GRACE_S = 40.0
"""After a step's time box, SIGTERM (the run records its finished trials and shuts Ray down),
then this long before SIGKILL."""

SKIPPED = "skipped"
CUT_OFF = "cut off"
"""The cell of a figure whose measurement the step's time box stopped."""


# --- step 1: the GPU tests -------------------------------------------------------------------

def gpu_tests(box_s: float, log: Path) -> dict:
    """pytest on ``TESTS`` in a child process with CUDA visible (``TUNER_TEST_KEEP_CUDA``),
    cut after ``box_s`` seconds; its output goes to ``log``. Returns the counts ('passed',
    'failed', 'skipped', 'error'), 'failures' (test ids), 'skip_reason' (the first), 'seconds'
    and 'cut_off'."""
    out = {"cut_off": False, "missing": None}
    try:
        import pytest  # noqa: F401
    except ImportError:
        out.update(missing="pytest is not installed", seconds=0.0)
        return out
    cmd = [sys.executable, "-m", "pytest", *TESTS, "-q", "-rfEs", "-p", "no:cacheprovider",
           "-o", "addopts="]   # one process on the one card (no xdist workers, installed or not)
    env = dict(os.environ, TUNER_TEST_KEEP_CUDA="1")
    t0 = time.time()
    with open(log, "w") as f:
        child = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            child.wait(timeout=max(box_s, 1.0))
        except subprocess.TimeoutExpired:
            out["cut_off"] = True
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    out["seconds"] = time.time() - t0
    out.update(pytest_counts(log.read_text(errors="replace")))
    return out


def pytest_counts(text: str) -> dict:
    """The counts ('passed', 'failed', 'skipped', 'error'), 'failures' (test ids) and
    'skip_reason' (the first) of ``pytest -q -rfEs`` output; from its progress characters
    when the summary line is missing (a run cut off)."""
    out = {"passed": 0, "failed": 0, "skipped": 0, "error": 0, "failures": [],
           "skip_reason": None}
    lines = text.splitlines()
    for line in lines:
        if line.startswith(("FAILED ", "ERROR ")):
            out["failures"].append(line.split()[1])
        elif line.startswith("SKIPPED ") and out["skip_reason"] is None:
            out["skip_reason"] = line.split(": ", 1)[-1]
    summary = [
        ln for ln in lines if re.search(r"\d+ (passed|failed|skipped|errors?)\b.* in [\d.]+s", ln)
    ]
    if summary:
        for count, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", summary[-1]):
            out["error" if kind.startswith("error") else kind] += int(count)
        return out
    progress = "".join(ln.split(" [")[0] for ln in lines
                       if re.fullmatch(r"[.FEsxX]+( +\[ *\d+%\])?", ln))
    out.update(passed=progress.count("."), failed=progress.count("F"),
               skipped=progress.count("s"), error=progress.count("E"))
    return out


def tests_text(t: dict | None, box_s: float) -> str:
    command = f"`pytest {' '.join(TESTS)} -q` (CUDA visible)"
    if t is None:
        return f"GPU tests: {command} not run yet"
    if t["missing"]:
        return f"GPU tests: not run ({t['missing']})"
    counts = ", ".join(f"{t[k]} {k}" for k in ("passed", "failed", "error", "skipped") if t[k])
    text = f"GPU tests: {command}: {counts or 'nothing ran'} in {t['seconds']:.0f} s"
    if t["cut_off"]:
        text += f" (cut off at its {box_s:.0f} s time box)"
    if t["failures"]:
        text += "; failed: " + ", ".join(t["failures"])
    if t["skipped"] and t["skip_reason"]:
        text += f"; skipped because: {t['skip_reason']}"
    return text


# --- steps 2 and 3: one workload in a child process ------------------------------------------

# The step in the order it runs (run, answer, checks, peers), each saving the row as it ends,
# so that a step stopped by its time box leaves what it measured; split, the saves would scatter.
def workload_step(name: str, job: dict, row_file: str) -> None:
    """One workload, in a child process: the tuner's run, then (``job['checks']``) its
    references measured again here and validate interleaved, then the peers' answer, each
    when ``job['stop_at']`` leaves it time. The row (a dict of COLUMNS, numbers unformatted,
    plus 'notes' and 'partial') is written to ``row_file`` as JSON after each of them and after
    each reference trial, so that a child stopped by its time box leaves what it had."""
    device, limit, started = job["device"], job["limit"], time.time()
    # a spawned process's own children are spawned too (each DataLoader worker would import
    # this script, torch and Ray again: validate read 0.18 of the trial on an H200); the
    # children of the trials, validate and the peers' answer start as in a user's program
    mp.set_start_method(job["start_method"], force=True)
    row = dict.fromkeys(COLUMNS)
    row.update(workload=name + (f" (--max-memory {limit})" if limit else ""), notes=[], partial={},
               budget_s=job["budget"])
    if device == "cpu":
        row.update(dict.fromkeys(NOT_ON_CPU, "n/a"))

    def save() -> None:
        row["step s"] = time.time() - started
        tmp = Path(row_file + ".tmp")
        tmp.write_text(json.dumps(row))
        tmp.replace(row_file)

    counts: Counter = Counter()

    def on_event(kind: str, data: dict) -> None:
        if kind in ("probe", "start") and row["start-up + probe s"] is None:
            row["start-up + probe s"] = time.time() - started
        if kind == "probe":
            r = data["result"]
            row["notes"].append(f"memory probe: batch_size <= {r.max_batch}"
                                + (f" ({r.first_failure} did not fit)" if r.first_failure else "")
                                + ("" if r.duration_s is None else f" in {r.duration_s:.0f} s"))
        if kind == "phase" and data.get("left_out"):
            row["notes"].append("ceilings the budget left out: " + ", ".join(data["left_out"]))
        if kind == "trial":
            t = data["row"]
            print("  " + trial_line(name, t, counts, job["trials"]), flush=True)
            if t.get("reference") in ("baseline", "recommended") and figure_of(t) is not None:
                row[t["reference"]] = figure_of(t)
                _mark_partial(row, t["reference"], t)
                save()

    print(f"{name}: tuner run ({_budget_text(job['budget'], job['trials'])}"
          + (f", --max-memory {limit}" if limit else "") + ")", flush=True)
    try:
        result = tuner.tune(name, device=device, scale=job["scale"], trials=job["trials"],
                            time_budget_s=job["budget"], results=str(Path(job["results"]) / name),
                            space=job["space"],
                            max_memory=limit, progress=False, on_event=on_event,
                            **{k: job[k] for k in ("confirm", "probe") if job[k] is not None})
    except RunInterrupted:
        row["notes"].append("the tuner run was stopped at the step's time box")
        save()
        return
    except Exception as exc:  # noqa: BLE001 - a run that fails is a result of the check too
        row["notes"].append(f"the tuner run failed: {type(exc).__name__}: {exc}"[:400])
        save()
        return
    best_row = _fill_answer(row, result, device)
    save()
    if best_row is None:
        return
    plan = _plan(name, device, job["scale"], limit, str(Path(job["results"]) / f"{name}-peers"),
                 job["space"])
    for check, run_check in (("references", lambda: references_again(plan, result.rows, row)),
                             ("validate", lambda: validate_interleaved(plan, best_row, row,
                                                                       job["stop_at"]))):
        if check not in job["checks"]:
            continue
        skipped = _skip_for_time(row, check, job, device)
        save()
        if not skipped:
            run_check()
            save()
    if not _skip_for_time(row, "peers", job, device):
        print(f"{name}: the peers' answer (doubling the recommended batch)", flush=True)
        save()
        row.update(peers_answer(plan))
        if isinstance(row["best"], float) and isinstance(row["peers' samples/sec"], float):
            row["best ÷ peers'"] = row["best"] / row["peers' samples/sec"]
    save()


def _skip_for_time(row: dict, check: str, job: dict, device: str) -> bool:
    """Whether the step's time left cannot hold ``check`` ('references', 'validate',
    'peers'); if so its cells read 'skipped' and a note says why. Otherwise its cells read
    'cut off' until it ends (what the row says if the time box stops the step there)."""
    need = PEERS_S[device] if check == "peers" else CHECK_S[device][check]
    cells = {"references": ["references again (÷ the run's)"], "validate": ["validate ratio"],
             "peers": ["peers' batch", "peers' samples/sec"]}[check]
    left = job["stop_at"] - time.time()
    if left < need:
        row.update(dict.fromkeys(cells, SKIPPED))
        what = {"references": "the references again", "validate": "validate",
                "peers": "peers' answer"}[check]
        row["notes"].append(f"{what} skipped: {left:.0f} s left, it needs ~{need:.0f} s")
        return True
    row.update(dict.fromkeys(cells, CUT_OFF))
    return False


def trial_line(name: str, row: dict, counts: Counter, planned: int | None) -> str:
    """A run's row as one progress line, labelled by its phase: a search trial with its
    count of the trials planned (a reference named), a re-measurement, or a ceiling with its
    kind (a ceiling measures a bound, not a configuration: the machine-loader ceiling has no
    model); ``counts`` counts per phase across calls. A budget-stopped figure says how many
    of its windows it measured."""
    phase = row.get("phase") or "search"
    counts[phase] += 1
    if phase == "ceiling":
        label = f"ceiling {row.get('ceiling') or 'compute'}"
    elif phase == "remeasure":
        label = f"re-measurement {counts[phase]}"
    else:
        n = counts[phase]
        label = f"trial {n}" + (f"/{planned}" if planned and n <= planned else "") + (
            f" ({row['reference']})" if row.get("reference") else "")
    sps, partial = figure_of(row), windows_text(row)
    return (f"{name} {label}: {knob_text(row)}: {row['status']}"
            + (f", {sps:,.1f} samples/sec" if sps else "")
            + (f" ({partial})" if partial and sps else ""))


def figure_of(row: dict) -> float | None:
    """A row's samples/sec: an ok row's, or a budget-stopped (``timeout``) row's median over
    the windows it finished; None without a finished window."""
    sps = row.get("samples_per_sec")
    if row.get("status") in (Status.OK, Status.TIMEOUT) and sps:
        return sps
    return None


def windows_text(row: dict) -> str | None:
    """'4 of 5 windows' for a figure the time budget stopped before its planned windows (the
    harness's error line names both); None for a complete measurement."""
    if row.get("status") != Status.TIMEOUT:
        return None
    m = re.search(r"after (\d+) of (\d+) windows", str(row.get("error") or ""))
    if m:
        return f"{m[1]} of {m[2]} windows"
    return f"{row.get('windows') or 0} windows, stopped by the time budget"


def _mark_partial(out: dict, column: str, row: dict) -> None:
    text = windows_text(row)
    if text:
        out["partial"][column] = text
    else:
        out["partial"].pop(column, None)


def budget_stopped_best(rows: list[dict]) -> dict | None:
    """The fastest measured row the time budget stopped among the run's search and
    re-measurement rows (``tuner.history.History.budget_stopped_best``); None without one."""
    best = History.of(rows).budget_stopped_best()
    return None if best is None else best.raw


def _fill_answer(row: dict, result, device: str) -> dict | None:
    """The run's answer into the table's row: ``result.best`` with its ceilings, else the
    fastest budget-stopped measurement (its windows of planned said beside it), else a note
    that nothing was measured. Returns the answer's leaderboard row, or None."""
    best = result.best
    if best is not None:
        _fill_best(row, best, device)
        best_row = best.row
    else:
        best_row = budget_stopped_best(result.rows)
        if best_row is None:
            statuses = Counter(str(r["status"]) for r in result.rows)
            errors = sorted({str(r["error"])[:120] for r in result.rows if r.get("error")})
            row["notes"].append("no window measured (" + (", ".join(
                f"{n} {status}" for status, n in statuses.most_common()) or "no trial") + ")"
                + (": " + "; ".join(errors) if errors else "")[:300])
            return None
        row.update({"best": figure_of(best_row), "best knobs": knob_text(best_row),
                    "MFU %": best_row.get("mfu_pct"),
                    "peak dev MiB": best_row.get("peak_device_memory_mb"),
                    "peak host MiB": best_row.get("peak_host_memory_mb")})
        row["notes"].append(f"best: a measurement the time budget stopped ({windows_text(best_row)}"
                            "); no complete trial, so no ceilings")
        if device == "cpu":
            row.update(dict.fromkeys(NOT_ON_CPU, "n/a"))
    _mark_partial(row, "best", best_row)
    row["best loader-path"] = best_loader_path(result.rows)
    row["search trials (screened)"] = search_counts(result.rows)
    for note in (screening_costs(result.rows), cudnn_decision(result.rows)):
        if note:
            row["notes"].append(note)
    return best_row


def cudnn_decision(rows: list[dict]) -> str | None:
    """One line on the finalists' ``cudnn_benchmark`` (``tuner.plan.Plan.cudnn_at_finalists``):
    for the first configuration re-measured both with it on and without it, the geometric
    means of its ok re-measurement rounds each way and their ratio, with the on-variant's
    longest first step (cuDNN's autotuning at its shape); None where no configuration was
    re-measured both ways."""
    pair = History.of(rows).cudnn_both_ways()   # (without, with): the run's own decision
    if pair is None:
        return None
    both = {way: [r.raw for r in typed] for way, typed in zip((False, True), pair)}
    on, off = (statistics.geometric_mean([figure_of(r) for r in both[way]])
               for way in (True, False))
    first = max((r.get("first_step_s") or 0.0 for r in both[True]), default=0.0)
    return (f"cudnn_benchmark at the finalists: {knob_text(both[False][0])} "
            f"{off:,.1f} without it, {on:,.1f} with it ({on / off:.3f}x; "
            f"{len(both[False])} and {len(both[True])} rounds; its first step up to "
            f"{first:.1f} s)")


def search_counts(rows: list[dict]) -> list[int]:
    """[search trials, those screened]: the run's search-phase rows (references and structured
    points included), and the screening trials among them (``screens``)."""
    history = History.of(rows)
    return [len(history.search()), len(history.screens())]


def screens(rows: list[dict]) -> list[dict]:
    """The screening trials among ``rows`` (``tuner.history.History.screens``), as given."""
    return [r.raw for r in History.of(rows).screens()]


def screening_costs(rows: list[dict]) -> str | None:
    """One line on what the screening trials cost (the count the 5-minute target asks for
    rests on it), or None without one: how many, their median start-to-start seconds (the
    trial and what Ray spends before the next), and their median first step, apart for those
    with ``cudnn_benchmark`` at a shape no earlier trial of the run had it on at
    (``tuner.knobs.new_cudnn_shapes``: cuDNN autotunes it, 12.2 s for ddpm on an H200,
    2026-11-27)."""
    screened = {id(r) for r in screens(rows)}
    if not screened:
        return None
    timed = sorted((r for r in rows if r.get("started_at") is not None),
                   key=lambda r: r["started_at"])
    apart, new_shape, known_shape = [], [], []
    for r, after, fresh in zip(timed, [*timed[1:], None], new_cudnn_shapes(timed)):
        if id(r) not in screened:
            continue
        if after is not None:
            apart.append((after["started_at"] - r["started_at"]).total_seconds())
        if r.get("first_step_s") is not None:
            (new_shape if fresh else known_shape).append(r["first_step_s"])
    line = f"screening: {len(screened)} trials"
    if apart:
        line += f", a median {statistics.median(apart):.1f} s start to start"
    if known_shape:
        line += f"; first step a median {statistics.median(known_shape):.1f} s"
    if new_shape:
        line += (f"; {statistics.median(new_shape):.1f} s for the {len(new_shape)} with "
                 "cudnn_benchmark at a shape new to the run")
    return line


def best_loader_path(rows: list[dict]) -> float | None:
    """The highest samples/sec of a ``loader``-path configuration among the run's measured
    search and re-measurement rows, budget-stopped ones included (the answer is to be at least
    this: docs/benchmarks.md)."""
    rates = [figure_of(r) for r in rows if figure_of(r) is not None
             and r.get("phase") != "ceiling" and r.get("data_path", "loader") == "loader"]
    return max(rates, default=None)


def _fill_best(out: dict, best, device: str) -> None:
    row, ceilings, attainable = best.row, best.answer.ceilings, best.answer.attainable
    out.update({"best": best.samples_per_sec, "best knobs": knob_text(row),
                "compute-only": _bound(ceilings.compute_samples_per_sec,
                                       ceilings.compute_disturbed, best.samples_per_sec),
                "loader-only": _bound(ceilings.loader_samples_per_sec,
                                      ceilings.loader_disturbed, best.samples_per_sec),
                "attainable (bound)": (attainable.samples_per_sec, attainable_label(attainable)),
                "best ÷ attainable": attainable.share,
                "MFU %": row.get("mfu_pct"),
                "compile s": row.get("compile_s") if row.get("compile") not in (None, "off")
                else "off",
                "peak dev MiB": row.get("peak_device_memory_mb"),
                "peak host MiB": row.get("peak_host_memory_mb")})
    machine = ceilings.machine_compute
    if machine is not None:
        out["machine limit"] = machine.samples_per_sec
        out["best ÷ machine limit"] = (machine.verdict.share if machine.verdict.share is not None
                                       else machine.verdict.judgement)
        out["notes"].append(f"machine limit: {machine.samples_per_sec:,.1f} samples/sec at "
                            f"{machine.knobs_text}, batches on the device ({machine.kind} ceiling)")
    from tuner.ceilings import lever_text
    lever = lever_text(attainable)
    if lever:
        out["notes"].append(lever)
    out["recommended"] = best.answer.recommended.samples_per_sec or out["recommended"]
    out["baseline"] = best.answer.baseline.samples_per_sec or out["baseline"]
    if device == "cpu":
        out.update(dict.fromkeys(NOT_ON_CPU, "n/a"))


def attainable_label(attainable) -> str:
    """What the attainable cell says beside its figure: the limit that binds; for a figure
    the best ran above, that it is no bound; without a figure, which limit was not measured."""
    if attainable.samples_per_sec is None:
        missing = ("compute limit" if getattr(attainable, "compute_samples_per_sec", None) is None
                   else "input limit")
        return f"unknown: no {missing} measured"
    if attainable.share is None:
        return "below the best: not a bound"
    return attainable.bound_by


@functools.lru_cache(maxsize=1)
def _plan(name: str, device: str, scale: str, limit: str | None, results: str,
          space: str | None):
    """The workload's plan for the peers' answer and validate (its data check and FLOP
    count), made once."""
    return make_plan(RunOptions(workload=name, device=device, scale=scale, max_memory=limit,
                                results=results, probe="off", space_file=space))


def _budget_text(budget: float | None, trials: int | None) -> str:
    parts = ([f"time budget {budget:.0f} s"] if budget is not None else []) + (
        [f"{trials} trials"] if trials else [])
    return ", ".join(parts) or "the default budget"


# --- the peers' answer and validate ------------------------------------------------------

def peers_answer(plan) -> dict:
    """The largest power-of-two multiple of the recommended batch that fits (doubling from it,
    as BatchSizeFinder's 'power' mode), the other knobs as the recommended reference has them,
    then measured with the run's trial settings. In this process: one trial at a time.

    Each fit is checked as the tuner's memory probe checks one (``tuner.probe``): two steps on
    one batch resident on the device, no DataLoader workers, no ``torch.compile``. The workers
    hold no device memory, and starting them for every doubling is most of a check's cost at a
    small batch (CPU, 2026-11-24, median of 3: ddpm 1.62 s with its 6 workers, 0.89 s without;
    headpose 3.53 s with 8, 2.29 s without). A trial resets the compiler's caches when it
    ends, so a compiled recommended configuration (chargpt's) would compile again at every
    doubling (~14 s each on an H100); the measured trial at the batch found keeps its compile."""
    knobs = dict(plan.references).get("recommended") or dict(plan.references)["baseline"]
    short = replace(plan.settings, warmup_steps=2, windows=1, window_s=0.01, breakdown_steps=0,
                    max_steady_probes=0, compute_only=True, resident_batches=1)
    no_workers = knobs.replace(num_workers=0, prefetch_factor=None, persistent_workers=False,
                               compile="off")
    largest_allowed = max(plan.samples, max(candidates(plan.device_space)))
    if plan.device == "cpu":
        largest_allowed = min(largest_allowed, CPU_MAX_BATCH)
    batch, fits = knobs.batch_size, None
    while batch <= largest_allowed:
        status = run_trial(plan.workload, no_workers.replace(batch_size=batch), short)["status"]
        if status != Status.OK:
            break
        fits, batch = batch, batch * 2
    if fits is None:
        return {"peers' batch": None, "peers' samples/sec": None}
    # the CPUs a local run's trial has (the whole node), so that on CPU the peers' answer
    # trains on the threads the tuner's own trials of the same knobs would (torch's default,
    # every core, gave it a second thread beside 6 workers on 2 cores: 47.8 samples/sec where
    # the tuner's trial of those knobs, on 1, read 30)
    row = run_trial(plan.workload, knobs.replace(batch_size=fits), plan.settings,
                    cpus=plan.node_cpus)
    return {"peers' batch": fits,
            "peers' samples/sec": row["samples_per_sec"] if row["status"] == Status.OK else None}


def references_again(plan, rows: list[dict], out: dict) -> None:
    """The run's references (baseline, recommended) measured once more, here: another process
    than the Ray trial process that measured them, with the run's trial settings and each
    row's threads (``same_threads``: torch threads, ``OMP_NUM_THREADS``) and CPUs. Writes
    {reference: [the run's figure, this one]} to ``out['references again (÷ the run's)']`` and
    one line each to the notes (the same knobs read 710 and 932 samples/sec in two runs on
    one H200: the spread between processes is what a single reference trial cannot show)."""
    from tuner.knobs import Knobs
    from tuner.trial.validate import same_threads
    again: dict[str, list] = {}
    for ref in ("baseline", "recommended"):
        first = [r for r in rows if r.get("reference") == ref and r.get("phase") != "ceiling"
                 and figure_of(r) is not None]
        if not first:
            continue
        first_row = first[0]
        print(f"{plan.workload.name}: the {ref} again (a second process)", flush=True)
        with same_threads(first_row.get("torch_threads"), first_row.get("omp_num_threads")):
            r = run_trial(plan.workload, Knobs.from_dict(first_row, strict=False), plan.settings,
                          cpus=int(first_row["trial_cpus"]) if first_row.get("trial_cpus")
                          else plan.node_cpus)
        again[ref] = [figure_of(first_row), figure_of(r)]
        line = (f"{ref} again in a second process: "
                + (f"{again[ref][1]:,.1f}" if again[ref][1] else f"no figure ({r['status']})")
                + f" samples/sec, the run's {again[ref][0]:,.1f}"
                + (f" (÷ the run's {again[ref][1] / again[ref][0]:.2f})" if again[ref][1] else "")
                + (f"; {windows_text(r)}" if windows_text(r) else ""))
        print("  " + line, flush=True)
        out["notes"].append(line)
    out["references again (÷ the run's)"] = again or None


def validate_interleaved(plan, row: dict, out: dict, stop_at: float) -> None:
    """validate, measured against the harness under the same conditions: the best's knobs
    as a plain training loop (``tuner.trial.validate.train_loop``) and as the harness measures a
    trial (``run_trial``, ``VALIDATE_WINDOWS`` windows), alternating in this process for
    ``VALIDATE_ROUNDS`` rounds (fewer when a round would end past ``stop_at``), both with the
    trial row's torch threads and ``OMP_NUM_THREADS``. Writes the median of the rounds' plain
    loop ÷ harness ratios to ``out['validate ratio']``; the notes give each round, the
    threads, and the harness here ÷ the trial's figure (the run's process vs this one)."""
    from tuner.knobs import Knobs
    from tuner.trial.validate import interleaved
    name = plan.workload.name
    settings = replace(plan.settings, windows=VALIDATE_WINDOWS)
    print(f"{name}: validate, interleaved with the harness ({VALIDATE_ROUNDS} rounds)",
          flush=True)
    try:
        v = interleaved(plan.workload, Knobs.from_dict(row, strict=False), row, settings,
                        rounds=VALIDATE_ROUNDS, stop_at=stop_at - PEERS_S[plan.device])
    except Exception as exc:  # noqa: BLE001 - a failed validation is a figure too
        out["validate ratio"] = None
        out["notes"].append(f"validate failed: {type(exc).__name__}: {exc}"[:300])
        print(f"  validate of {name} failed: {type(exc).__name__}: {exc}", flush=True)
        return
    out["validate ratio"] = v.median_ratio
    rounds = "; ".join(
        f"round {i}: loop {r.loop_samples_per_sec:,.1f}, harness "
        + (f"{r.harness_samples_per_sec:,.1f} ({r.ratio:.3f})" if r.ratio is not None
           else f"no figure ({r.harness_status})") for i, r in enumerate(v.rounds, 1))
    harness = [r.harness_samples_per_sec for r in v.rounds if r.harness_samples_per_sec]
    line = (f"validate, plain loop ÷ harness alternating in one process: {rounds}; median "
            + ("n/a" if v.median_ratio is None else f"{v.median_ratio:.3f}")
            + f" (target 0.95..1.05); threads: torch {v.torch_threads}, OMP_NUM_THREADS "
            f"{v.omp_num_threads or 'unset'} (the trial's: {row.get('torch_threads')}, "
            f"{row.get('omp_num_threads') or 'unset'})"
            + (f"; the harness here ÷ the trial's figure: "
               f"{statistics.median(harness) / figure_of(row):.2f}" if harness else ""))
    print("  " + line, flush=True)
    out["notes"].append(line)


def _bound(rate: float | None, below_best: bool | None, best: float) -> float | str | None:
    """A ceiling's cell: its samples/sec, or, measured below the best it bounds, the figure
    labelled as what it is (within ``tuner.ceilings.CEILING_NOISE``: the best runs at it; further
    below: a disturbed measurement), never a bare figure under the rate it bounds."""
    from tuner.ceilings import CEILING_NOISE
    if rate is None or not below_best:
        return rate
    label = "at it" if rate >= (1 - CEILING_NOISE) * best else "disturbed: below the best"
    return f"{rate:,.1f} ({label})"



# --- the report --------------------------------------------------------------------------------

def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for r in rows:
        partial = r.get("partial") or {}
        lines.append("| " + " | ".join(
            _cell(c, r.get(c)) + (f" ({partial[c]})" if c in partial and r.get(c) is not None
                                   else "") for c in COLUMNS) + " |")
    return "\n".join(lines)


def _cell(column: str, value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if column == "attainable (bound)":
        return "" if value[0] is None else f"{value[0]:,.1f} ({value[1]})"
    if column == "references again (÷ the run's)":
        return " / ".join(f"{ref} " + (f"{again:,.1f} ({again / first:.2f})" if again
                                       else "no figure")
                          for ref, (first, again) in value.items())
    if column == "search trials (screened)":
        return f"{value[0]} ({value[1]})"
    if column in ("best ÷ attainable", "validate ratio", "best ÷ machine limit", "best ÷ peers'"):
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


SCREENED_TARGET = 40
"""Configurations a ddpm run of ``SCREENED_BUDGET_S`` or more is to screen on a GPU."""

SCREENED_BUDGET_S = 300.0
"""The shortest ddpm budget the ``SCREENED_TARGET`` is read for: a 5-minute run."""


def targets(rows: list[dict]) -> list[str]:
    """One line per workload with a best: its figures against the targets."""
    out = []
    for r in rows:
        if r.get("best") is None:
            continue
        name, share = r["workload"].split()[0], r["best ÷ attainable"]
        need = 0.9 if name == "ddpm" else 0.8
        peers, over_peers = r["peers' samples/sec"], r.get("best ÷ peers'")
        counts = r.get("search trials (screened)")
        screened = ""
        if name == "ddpm" and counts and (r.get("budget_s") or 0) >= SCREENED_BUDGET_S:
            screened = (f"; {counts[1]} configurations screened in {r['budget_s']:.0f} s "
                        f"(target >= {SCREENED_TARGET})")
        out.append(f"- {name}: best ÷ attainable {_fmt(share)} (target >= {need}); "
                   f"best ÷ machine limit {_fmt(r.get('best ÷ machine limit'))} (target >= 0.9); "
                   f"best {_fmt(r['best'])} vs recommended {_fmt(r['recommended'])} (target >=), "
                   f"vs the best loader-path {_fmt(r.get('best loader-path'))} (target >=); "
                   f"vs the peers' answer {_fmt(peers)}: {_fmt(over_peers)} (target >= 1.1)"
                   f"{screened}; "
                   f"validate (plain loop ÷ harness, interleaved) {_fmt(r['validate ratio'])} "
                   f"(target 0.95..1.05); start-up + "
                   f"probe {_fmt(r['start-up + probe s'])} s (probe target <= 20 s)")
    return out


def _fmt(v) -> str:
    return "n/a" if v is None else v if isinstance(v, str) else f"{v:,.2f}"


def machine_text(device: str) -> str:
    """The hardware and versions the figures come from (the card through nvidia-smi, so that
    this process holds no CUDA context), the project's version and its own commit."""
    import torch
    parts = [f"{os.cpu_count()} CPUs", f"torch {torch.__version__}",
             f"Python {sys.version.split()[0]}"]
    if device == "cuda":
        try:
            card = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                   "--format=csv,noheader"], capture_output=True, text=True,
                                  timeout=20).stdout.strip().splitlines()
            parts.insert(0, f"{len(card)} x {card[0]}" if card else "no card listed by nvidia-smi")
        except (OSError, subprocess.SubprocessError):
            parts.insert(0, "nvidia-smi not found")
    commit = project_commit(ROOT)
    parts.append(f"tuner {tuner.__version__} at " + (commit or "an unknown commit"))
    return ", ".join(parts)


def project_commit(root: Path) -> str | None:
    """The project's own commit (``git rev-parse --short HEAD``, '+ local changes' when its
    tracked files differ), or None when ``root`` is not the top of its own git work tree: a
    copy without its ``.git`` inside another repository would name that repository's commit."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != root.resolve():
        return None
    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return None
    changed = git("status", "--porcelain", "--untracked-files=no")
    return commit + (" + local changes" if changed else "")


# --- the run ---------------------------------------------------------------------------------

class Run:
    """The run's state: the deadline, the test results, the rows, the notes; ``save()``
    prints the report and writes it to ``--out`` (and the rows to its ``.json``)."""

    def __init__(self, args: argparse.Namespace, names: list[str], results: Path):
        self.args, self.names, self.results = args, names, results
        self.started = STARTED
        self.stop_at = math.inf if args.deadline_s is None else self.started + args.deadline_s
        self.tests: dict | None = None
        self.rows: list[dict] = []
        self.notes: list[str] = []
        self.machine = machine_text(args.device)

    def left(self) -> float:
        return self.stop_at - time.time()

    def report(self) -> str:
        a = self.args
        done = {r["workload"].split()[0] for r in self.rows}
        still = [n for n in self.names if n not in done
                 and not any(note.startswith(f"{n}: skipped") for note in self.notes)]
        deadline = "" if a.deadline_s is None else f" of a {a.deadline_s:.0f} s deadline"
        lines = [f"GPU acceptance: {a.device}, {a.scale} scale; {self.machine}",
                 f"{time.time() - self.started:.0f} s{deadline}; results in {self.results}"
                 + (f"; still to run: {', '.join(still)}" if still else ""), ""]
        if not a.no_tests:
            lines += [tests_text(self.tests, self.tests_box_s), ""]
        lines += [markdown(self.rows), ""]
        notes = self.notes + [f"{r['workload'].split()[0]}: {n}" for r in self.rows
                              for n in r.get("notes", [])]
        if notes:
            lines += ["Notes:"] + [f"- {n}" for n in notes] + [""]
        lines += targets(self.rows)
        return "\n".join(lines).rstrip() + "\n"

    tests_box_s = TESTS_BOX_S

    def save(self) -> None:
        text = self.report()
        print("\n" + text, flush=True)
        if self.args.out:
            out = Path(self.args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            out.with_suffix(".json").write_text(json.dumps(
                {"machine": self.machine, "tests": self.tests, "rows": self.rows,
                 "notes": self.notes}, indent=1, default=str))


def budget_of(name: str, args: argparse.Namespace) -> float | None:
    """The workload's tuner time budget before the deadline trims it."""
    if args.time_budget is not None:
        return args.time_budget
    if args.trials:
        return None
    if args.quick:
        if args.device == "cpu":
            return CPU_QUICK_BUDGET_S if name == "ddpm" else CPU_QUICK_OTHER_BUDGET_S
        return QUICK_BUDGETS_S.get(name, QUICK_OTHER_BUDGET_S)
    return (300.0 if name == "ddpm" else 40.0) if args.device == "cuda" else None


def capped_space(name: str, results: Path) -> str:
    """The workload's built-in search space with ``batch_size`` at most ``CPU_MAX_BATCH``,
    written under ``results``; returns its path."""
    import yaml

    from tuner.space import builtin_path
    from tuner.workload_loader import resolve
    source = ROOT / builtin_path(resolve(name).space_name)
    space = yaml.safe_load(source.read_text())
    dom = space["knobs"]["batch_size"]
    if isinstance(dom, dict) and "high" in dom:
        dom["high"] = min(dom["high"], CPU_MAX_BATCH)
        dom["low"] = min(dom["low"], dom["high"])
    elif isinstance(dom, dict) and "choices" in dom:
        dom["choices"] = [b for b in dom["choices"] if b <= CPU_MAX_BATCH] or [min(dom["choices"])]
    target = results / f"{name}-space-cpu.yaml"
    target.write_text(yaml.safe_dump(space, sort_keys=False))
    return str(target)


def run_workload(run: Run, name: str) -> None:
    """One workload step in a child process, its tuner budget trimmed to the deadline less
    the peers' answer (or the step skipped, with a note, when too little is left), its checks
    (``QUICK_CHECKS`` with --quick, else all) run in what the step's time box has left,
    stopped at its time box."""
    args, device = run.args, run.args.device
    budget, overhead = budget_of(name, args), STEP_OVERHEAD_S[device]
    checks = ("references", "validate") if not args.quick or name in QUICK_CHECKS else ()
    after = PEERS_S[device] + sum(CHECK_S[device][c] for c in checks)
    if math.isfinite(run.left()):
        room = run.left() - overhead - PEERS_S[device]
        if budget is None or room < budget:
            if room < MIN_BUDGET_S:
                run.notes.append(f"{name}: skipped: {max(run.left(), 0):.0f} s left, a run "
                                 f"needs at least "
                                 f"{MIN_BUDGET_S + overhead + PEERS_S[device]:.0f} s")
                print(f"{name}: skipped ({run.left():.0f} s left)", flush=True)
                return
            budget = room
    other_trials = CPU_QUICK_OTHER_TRIALS if device == "cpu" else 3
    # --quick's few trials without re-measurement fit its short budgets; a budget given
    # with --time-budget runs the search as a user's run of that budget does (screening,
    # finalists re-measured), so that its count of screened configurations is the product's
    capped = args.quick and args.time_budget is None
    trials = args.trials or (QUICK_TRIALS.get(name, other_trials) if capped else None)
    # the tuner's budget, its grace, the checks and the peers' answer: a step that hangs
    # leaves the deadline's rest to the next; the checks fit in what the box has left
    box = min(run.left(), (budget or 0.0) + overhead + after) \
        if math.isfinite(run.left()) else None
    job = {"device": device, "scale": args.scale, "budget": budget, "trials": trials,
           "confirm": QUICK_CONFIRM if capped else None,
           "probe": "off" if args.quick and name != "ddpm" else None,
           "start_method": START_METHOD, "checks": checks,
           "limit": DDPM_MAX_MEMORY if name == "ddpm" and device == "cuda" else None,
           "results": str(run.results),
           "stop_at": time.time() + box if box is not None else time.time() + 1e9,
           "space": capped_space(name, run.results) if device == "cpu" else None}
    row_file = str(run.results / f"{name}-row.json")
    Path(row_file).unlink(missing_ok=True)  # a row left by an earlier run in --results
    t0 = time.time()
    cut = _in_child(workload_step, (name, job, row_file), box)
    try:
        row = json.loads(Path(row_file).read_text())
    except (OSError, ValueError):
        row = dict.fromkeys(COLUMNS)
        row.update(workload=name, notes=["the step left no figures"])
    row["step s"] = time.time() - t0
    if cut:
        row["notes"].append(f"stopped at its time box ({box:.0f} s) after {row['step s']:.0f} s")
    run.rows.append(row)
    print(f"{name}: {row['step s']:.0f} s", flush=True)


def _in_child(target, args: tuple, box_s: float | None) -> bool:
    """``target(*args)`` in a spawned process, SIGTERM after ``box_s`` seconds and SIGKILL
    ``STOP_GRACE_S`` later. Returns True when the box stopped it."""
    child = mp.get_context("spawn").Process(target=target, args=args)
    child.start()
    child.join(box_s)
    if not child.is_alive():
        return False
    os.kill(child.pid, signal.SIGTERM)
    child.join(STOP_GRACE_S)
    if child.is_alive():
        child.kill()
        child.join()
        try:  # Ray's driver leads its own process group (Ray's reaper): what it started
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"one command's worth: a {QUICK_DEADLINE_S:.0f} s deadline, ddpm's "
                             f"budget {QUICK_BUDGET_S:.0f} s, 45-60 s each other, few trials")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help=f"seconds for the whole run (default: {QUICK_DEADLINE_S:.0f} with "
                             "--quick, else none)")
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--scale", default=None, choices=SCALES)
    parser.add_argument("--workloads", nargs="+", default=None)
    parser.add_argument("--time-budget", type=float, default=None)
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--no-tests", action="store_true", help="skip the GPU tests")
    parser.add_argument("--results", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.scale = args.scale or default_scale(args.device)
    if args.deadline_s is None and args.quick:
        args.deadline_s = QUICK_DEADLINE_S
    known = set(available())
    names = args.workloads or [n for n in ORDER if n in known] + sorted(known - set(ORDER))
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"--workloads: unknown {', '.join(unknown)}; built-ins: {', '.join(sorted(known))}",
              file=sys.stderr)
        return 2
    for flag, value in (("--deadline-s", args.deadline_s), ("--time-budget", args.time_budget),
                        ("--trials", args.trials)):
        if value is not None and value <= 0:
            print(f"{flag} {value:g}: must be positive", file=sys.stderr)
            return 2
    results = Path(args.results or tempfile.mkdtemp(prefix="tuner-acceptance-"))
    results.mkdir(parents=True, exist_ok=True)
    run = Run(args, names, results)
    if not args.no_tests:
        run.tests_box_s = min(TESTS_BOX_S, max(run.left(), 1.0))
        print(f"GPU tests (time box {run.tests_box_s:.0f} s)", flush=True)
        log = (Path(args.out).parent if args.out else results) / "gpu-tests.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        run.tests = gpu_tests(run.tests_box_s, log)
        run.save()
    for name in names:
        run_workload(run, name)
        run.save()
    shares = [r["best ÷ attainable"] for r in run.rows
              if isinstance(r.get("best ÷ attainable"), float)]
    if shares:
        print(f"median best ÷ attainable over workloads: {statistics.median(shares):.2f}")
    print(f"done in {time.time() - run.started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
