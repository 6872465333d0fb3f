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

With ``--replay``, also prices every ``ok`` row the run priced again with this checkout's model
(``tuner.costs.CostModel``) from the rows of its run recorded before it started, and prints
the same table for those prices: the same trials on the same load, another model. The shape
priced is read from the row where it can be (``windows_planned``) and otherwise from the
flags: a screen (``tuner.price_errors.trial_kind``) ``--screen-window-s`` without probes,
every other trial ``--window-s`` with up to 6 probes, one warm-up step (the defaults are the
default CPU run's). A re-measurement round was priced in the run before the rounds before
it finished, so its replayed price reads more rows than the run's did.

Prints figures, never pass/fail.

Usage:
  python bench/price_error.py RESULTS [RESULTS ...] [--workload W] [--run RUN_ID] [--replay]
                               [--pooled]

``--pooled`` prints one table over every run read (each run's rows kept to their own run
for the replay).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tuner.leaderboard as leaderboard  # noqa: E402
from tuner.costs import CostModel, RowTimes, TrialShape  # noqa: E402
from tuner.price_errors import price_errors, trial_kind  # noqa: E402


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


def replayed(rows: list[dict], window_s: float, screen_window_s: float) -> list[dict]:
    """``rows`` (one run's) with each ``ok`` row the run priced priced again by this
    checkout's model from the rows that finished before it started (see the docstring)."""
    rows = sorted(rows, key=lambda r: r["started_at"] or r["finished_at"])
    views = [RowTimes.of(r) for r in rows]
    full = max((v.windows_planned or 0 for v in views if v.reference), default=0) or None
    out = []
    for row, view in zip(rows, views):
        if (row["status"] != "ok" or row.get("priced_s") is None or view.knobs is None
                or not view.started_at):
            continue
        screen = trial_kind(view, full) == "screen"
        shape = TrialShape(view.windows_planned or 1, screen_window_s if screen else window_s,
                           1, 0 if screen else 6)
        before = [r for r in rows if r["finished_at"] and r["finished_at"] <= view.started_at]
        out.append({**row, "priced_s": CostModel(before).price(view.knobs, shape).trial_s})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="the runs' --results directories")
    parser.add_argument("--workload", default=None, help="only this workload's rows")
    parser.add_argument("--run", default=None, help="only this run id (default: each run)")
    parser.add_argument("--replay", action="store_true",
                        help="also price each row again with this checkout's model")
    parser.add_argument("--window-s", type=float, default=2.0,
                        help="--replay: a trial's window, s (default 2.0, the CPU default)")
    parser.add_argument("--screen-window-s", type=float, default=1.0,
                        help="--replay: a screen's window, s (default 1.0)")
    parser.add_argument("--pooled", action="store_true",
                        help="one table over every run read, not one per run")
    args = parser.parse_args(argv)
    rows = [r for results in args.results
            for r in leaderboard.read(results, workload=args.workload).to_pylist()]
    runs = sorted({r["run_id"] for r in rows}) if args.run is None else [args.run]
    groups = ({f"{len(runs)} runs pooled": runs} if args.pooled
              else {f"run {r}": [r] for r in runs})
    for name, members in groups.items():
        of = [r for r in rows if r["run_id"] in members]
        print(f"{name}:")
        print("\n".join(table(of)))
        if args.replay:
            again = [r for run in members for r in replayed(
                [r for r in of if r["run_id"] == run], args.window_s, args.screen_window_s)]
            print(f"{name}, priced again by this checkout's model:")
            print("\n".join(table(again)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
