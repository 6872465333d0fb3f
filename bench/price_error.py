"""Benchmark: how far the cost model's price of each trial was from the trial's wall time.

Question: the planner decides what runs in the time left from each trial's price
(``tuner.costs.CostModel.price``); a price far from the wall time starts trials that cannot
finish, or leaves time unused. How far off was it, per kind of trial?

Design: reads a results directory's leaderboard (``priced_s``, the price the planner used when
it decided to run the trial, and ``finished_at`` - ``started_at``, its wall time) and prints,
per kind of trial (``tuner.price_errors.trial_kind``: reference, screen, search, each re-measurement
round by its windows, ceiling, the memory probe where priced), the count of ``ok`` rows with a
price and the median and 90th percentile of ``|priced_s / wall - 1|``
(``tuner.price_errors.price_errors``), with the median price and wall time. Rows of leaderboards
written before ``priced_s`` have no price and are counted as unpriced.

Prints figures, never pass/fail.

Usage:
  python bench/price_error.py RESULTS [--workload W] [--run RUN_ID]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tuner.leaderboard as leaderboard  # noqa: E402
from tuner.price_errors import price_errors  # noqa: E402


def table(rows: list[dict]) -> list[str]:
    """The lines printed for ``rows`` (one run's leaderboard rows)."""
    out = [f"{'kind':<22} {'n':>3} {'median':>7} {'p90':>7} {'priced s':>9} {'wall s':>8}"]
    for e in price_errors(rows):
        out.append(f"{e.kind:<22} {e.count:>3} {e.median:>7.1%} {e.p90:>7.1%} "
                   f"{e.priced_s:>9.2f} {e.wall_s:>8.2f}")
    for r in rows:  # stopped or failed: not in the medians, but a price that let one start
        if r["status"] != "ok" and r.get("priced_s") and r["started_at"] and r["finished_at"]:
            wall_s = (r["finished_at"] - r["started_at"]).total_seconds()
            out.append(f"  {r['status']}: {r['phase']} bs={r['batch_size']} priced "
                       f"{r['priced_s']:.2f} s, stopped after {wall_s:.2f} s")
    unpriced = sum(r.get("priced_s") is None for r in rows)
    out.append(f"{len(rows)} rows, {unpriced} without a price (the memory probe's, failed "
               f"before planning, or written before schema 9)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="the run's --results directory")
    parser.add_argument("--workload", default=None, help="only this workload's rows")
    parser.add_argument("--run", default=None, help="only this run id (default: each run)")
    args = parser.parse_args(argv)
    rows = leaderboard.read(args.results, workload=args.workload).to_pylist()
    runs = sorted({r["run_id"] for r in rows}) if args.run is None else [args.run]
    for run in runs:
        print(f"run {run}:")
        print("\n".join(table([r for r in rows if r["run_id"] == run])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
