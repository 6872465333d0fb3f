"""Benchmark: what the tuner itself costs, beside what it measures, and how far its answer
repeats from one run to the next.

Prints (figures, no pass/fail), for each run:
  * CLI start-up: wall time of ``python -m tuner --help`` (imports only), median of 3 (once);
  * run start-up: from launching ``python -m tuner run`` to the first trial's start (imports,
    plan and data checks, Ray start);
  * per-trial overhead: the wall time between consecutive trial ends minus the trial's measured
    windows, split into warm-up (the workload's own first steps: compile, worker start-up) and
    the rest (Ray scheduling and actor start, dataset/model build, teardown);
  * the run's total wall time and the share spent in measured windows, as the line
    ``measured share of wall time: N %`` (target: >= 60 % for the default CPU ddpm run);
  * the run's final answer as ``tuner best`` reads it (``tuner.winner.best``): its
    samples/sec, knobs, the speed-up over the baseline with its 95 % interval, and the
    baseline's own rate re-measured in the same run.

With ``--runs N`` (N >= 2) the runs go one after another, each into its own results directory,
and a table of them ends the output with the CV (stdev / mean) across runs of: the final
answer's samples/sec (target: <= 3 % on a quiet CPU), the baseline's re-measured
samples/sec (the same configuration in every run: how far the host itself drifts between runs),
and the speed-up over the baseline (paired inside each run, so the host's drift cancels).
Before the first run and after the last, ``bench/host_noise.py`` reads the host's own noise
floor for ``--noise-s`` seconds (fixed single-thread work; 0 skips it): a final answer cannot
repeat more closely than the machine it runs on.

Without ``--trials`` the run is the default one a user starts (``tuner run --workload ddpm
--device cpu``; targets: <= 4 minutes on 2 quiet cores, measured share >= 60 %).

Usage: python bench/overhead.py [--workload ddpm] [--trials N] [--runs N] [--results DIR]
           [--transcript FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from host_noise import host_noise, summary

from tuner.knobs import knob_text
from tuner.winner import best


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def one_run(workload: str, trials: int | None, results: Path,
            transcript: str | None) -> dict:
    """Launch one ``tuner run`` into ``results``, print its overhead figures, and return them
    with its final answer (``tuner.winner.best`` of its rows)."""
    launched = dt.datetime.now(dt.timezone.utc)
    budget = [] if trials is None else ["--trials", str(trials)]
    wall, proc = timed([sys.executable, "-m", "tuner", "run", "--workload", workload,
                        *budget, "--results", str(results), "--device", "cpu"])
    if proc.returncode != 0:
        sys.exit(f"run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    if transcript:
        Path(transcript).write_text(proc.stdout)
    rows = sorted(pq.read_table(results / "leaderboard").to_pylist(),
                  key=lambda r: r["finished_at"])
    first_start = min(r["started_at"] for r in rows)
    startup = (first_start - launched).total_seconds()
    print(f"run start-up (launch -> first trial starts): {startup:.1f} s")
    measured_total = print_trials(rows, first_start)
    print(f"run wall time {wall:.1f} s for {len(rows)} trials; measured windows "
          f"{measured_total:.1f} s")
    print(f"measured share of wall time: {100 * measured_total / wall:.0f} %")
    load = os.getloadavg()
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in load)}")
    answer = answer_of(rows)
    print(f"final answer: {answer['samples_per_sec']:.1f} samples/sec, {answer['knobs']}; "
          f"vs baseline {answer['speedup']}; baseline re-measured "
          f"{answer['baseline_samples_per_sec']:.1f} samples/sec")
    return {"wall_s": wall, "trials": len(rows), "startup_s": startup,
            "measured_pct": 100 * measured_total / wall, "load_1min": load[0], **answer}


def print_trials(rows: list[dict], first_start: dt.datetime) -> float:
    """The per-trial table and overhead medians; returns the seconds of measured windows."""
    print(f"\n{'trial':>5} {'status':>7} {'gap s':>7} {'measured s':>10} {'warm-up s':>9} "
          f"{'other s':>8}  knobs")
    previous = first_start
    others, gaps, measured_total = [], [], 0.0
    for i, r in enumerate(rows, 1):
        gap = (r["finished_at"] - previous).total_seconds()
        previous = r["finished_at"]
        measured = r["measured_s"] or 0.0
        warmup = r["warmup_s"] or 0.0
        other = gap - measured - warmup
        measured_total += measured
        gaps.append(gap)
        others.append(other)
        knobs = f"bs={r['batch_size']} nw={r['num_workers']} amp={r['amp']} compile={r['compile']}"
        print(f"{i:>5} {r['status']:>7} {gap:7.1f} {measured:10.1f} {warmup:9.1f} "
              f"{other:8.1f}  {knobs}")
    print(f"\nper-trial overhead beyond measured windows and warm-up: median "
          f"{statistics.median(others):.1f} s (min {min(others):.1f}, max {max(others):.1f})")
    print(f"per-trial wall time: median {statistics.median(gaps):.1f} s")
    return measured_total


def answer_of(rows: list[dict]) -> dict:
    """The run's final answer as ``tuner best`` reads it: samples/sec, knobs (as the run prints
    them), the speed-up over the baseline (text, with its interval) and the baseline's rate."""
    top = best(rows)
    if top is None:
        sys.exit("the run has no successful trial: no answer to compare")
    ref = top.baseline
    ratio, sp = ref.ratio, ref.speedup
    low, high = (sp.low, sp.high) if sp else (None, None)
    speedup = ("the baseline itself" if ref.is_best else
               "none" if ratio is None else
               f"{ratio:.2f}x" + ("" if low is None else f" [{low:.2f}, {high:.2f}]")
               + (" tie" if ref.tie else ""))
    return {"samples_per_sec": top.samples_per_sec, "knobs": knob_text(top.row),
            "speedup_vs_baseline": ratio, "speedup": speedup,
            "baseline_samples_per_sec": ref.samples_per_sec or float("nan")}


def cv_pct(values: list[float]) -> str:
    """Coefficient of variation (stdev / mean, %) of ``values``; '-' with fewer than two."""
    values = [v for v in values if v is not None and v == v]
    if len(values) < 2:
        return "-"
    return f"{100 * statistics.stdev(values) / statistics.mean(values):.1f} %"


def print_repeats(runs: list[dict]) -> None:
    """The runs side by side and the CVs across them (see the module's docstring)."""
    print(f"\n{'run':>3} {'wall s':>7} {'measured':>8} {'load':>5} {'answer':>8} "
          f"{'baseline':>8}  {'vs baseline':<22} knobs")
    for i, r in enumerate(runs, 1):
        print(f"{i:>3} {r['wall_s']:7.1f} {r['measured_pct']:7.0f}% {r['load_1min']:5.2f} "
              f"{r['samples_per_sec']:8.1f} {r['baseline_samples_per_sec']:8.1f}  "
              f"{r['speedup']:<22} {r['knobs']}")
    answers = {r["knobs"] for r in runs}
    print(f"\nover {len(runs)} runs: final answer's samples/sec CV "
          f"{cv_pct([r['samples_per_sec'] for r in runs])} "
          f"({len(answers)} distinct configuration{'s' if len(answers) != 1 else ''}); "
          f"baseline re-measured CV {cv_pct([r['baseline_samples_per_sec'] for r in runs])} "
          f"(the host's drift between runs); speed-up over the baseline CV "
          f"{cv_pct([r['speedup_vs_baseline'] for r in runs])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="ddpm")
    parser.add_argument("--trials", type=int, default=None,
                        help="trials of the search (default: none given, the default run)")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs one after another; with 2 or more, the CV of the answer")
    parser.add_argument("--noise-s", type=float, default=60.0,
                        help="with --runs 2 or more: seconds of the host's noise floor before "
                             "and after the runs (0: not measured)")
    parser.add_argument("--results", default=None)
    parser.add_argument("--transcript", default=None,
                        help="write the last run's console output (stdout) to this file")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give 1 or more")
    if args.noise_s < 0:
        parser.error(f"--noise-s {args.noise_s}: give 0 (not measured) or more seconds")
    noise_floor = args.runs > 1 and args.noise_s > 0
    results = Path(args.results or tempfile.mkdtemp(prefix="tuner-bench-"))

    help_times = [timed([sys.executable, "-m", "tuner", "--help"])[0] for _ in range(3)]
    print(f"CLI start-up (python -m tuner --help): median {statistics.median(help_times):.2f} s "
          f"over 3 ({', '.join(f'{t:.2f}' for t in help_times)})")
    floors = [host_noise(args.noise_s, verbose=False)] if noise_floor else []
    if floors:
        print("before the runs, " + summary(floors[0]))
    runs = []
    for i in range(1, args.runs + 1):
        where = results if args.runs == 1 else results / f"run{i}"
        if args.runs > 1:
            print(f"\n== run {i} of {args.runs} ({where})")
        runs.append(one_run(args.workload, args.trials, where, args.transcript))
    if noise_floor:
        floors.append(host_noise(args.noise_s, verbose=False))
    if len(runs) > 1:
        print_repeats(runs)
    for when, floor in zip(("before the runs", "after the runs"), floors):
        print(f"{when}, {summary(floor)}")


if __name__ == "__main__":
    main()
