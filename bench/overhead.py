"""Benchmark: what the tuner itself costs, beside what it measures.

Prints (figures, no pass/fail):
  * CLI start-up: wall time of ``python -m tuner --help`` (imports only), median of 3;
  * run start-up: from launching ``python -m tuner run`` to the first trial's start (imports,
    plan and data checks, Ray start);
  * per-trial overhead: the wall time between consecutive trial ends minus the trial's measured
    windows, split into warm-up (the workload's own first steps: compile, worker start-up) and
    the rest (Ray scheduling and actor start, dataset/model build, teardown);
  * the run's total wall time and the share spent in measured windows, as the line
    ``measured share of wall time: N %`` (target: >= 60 % for the default CPU ddpm run).

Without ``--trials`` the run is the default one a user starts (``tuner run --workload ddpm
--device cpu``; targets: <= 4 minutes on 2 quiet cores, measured share >= 60 %).

Usage: python bench/overhead.py [--workload ddpm] [--trials N] [--results DIR]
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


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="ddpm")
    parser.add_argument("--trials", type=int, default=None,
                        help="trials of the search (default: none given, the default run)")
    parser.add_argument("--results", default=None)
    parser.add_argument("--transcript", default=None,
                        help="write the run's console output (stdout) to this file")
    args = parser.parse_args()
    results = Path(args.results or tempfile.mkdtemp(prefix="tuner-bench-"))

    help_times = [timed([sys.executable, "-m", "tuner", "--help"])[0] for _ in range(3)]
    print(f"CLI start-up (python -m tuner --help): median {statistics.median(help_times):.2f} s "
          f"over 3 ({', '.join(f'{t:.2f}' for t in help_times)})")

    launched = dt.datetime.now(dt.timezone.utc)
    trials = [] if args.trials is None else ["--trials", str(args.trials)]
    wall, proc = timed([sys.executable, "-m", "tuner", "run", "--workload", args.workload,
                        *trials, "--results", str(results), "--device", "cpu"])
    if proc.returncode != 0:
        sys.exit(f"run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    if args.transcript:
        Path(args.transcript).write_text(proc.stdout)
    rows = sorted(pq.read_table(results / "leaderboard").to_pylist(), key=lambda r: r["finished_at"])
    first_start = min(r["started_at"] for r in rows)
    print(f"run start-up (launch -> first trial starts): {(first_start - launched).total_seconds():.1f} s")

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
        print(f"{i:>5} {r['status']:>7} {gap:7.1f} {measured:10.1f} {warmup:9.1f} {other:8.1f}  {knobs}")
    print(f"\nper-trial overhead beyond measured windows and warm-up: median "
          f"{statistics.median(others):.1f} s (min {min(others):.1f}, max {max(others):.1f})")
    print(f"per-trial wall time: median {statistics.median(gaps):.1f} s")
    print(f"run wall time {wall:.1f} s for {len(rows)} trials; measured windows "
          f"{measured_total:.1f} s")
    print(f"measured share of wall time: {100 * measured_total / wall:.0f} %")
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
