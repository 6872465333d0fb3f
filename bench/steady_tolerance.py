"""Benchmark: the steady-state tolerance from the run's window noise against a fixed one.

The harness drops a trial's first window as a warm-up transient while it differs from the
median of the others by more than ``steady_tolerance``, and measures one more
(``tuner.trial.harness._windows``). A run gives each trial the larger of the fixed 10 % and
``tuner.windows.steady_tolerance`` of its rows so far; this benchmark runs the same search
(workload, space, sampler, seed, trial count; no early stopping, re-measurement or ceilings,
which would only dilute the figure) both ways, alternating (``--repeats`` pairs, the first of
each pair alternating too), and prints for each run:

  * the search's wall time (first trial's start to the last one's end);
  * the windows dropped as transients (``steady_probes``) and the seconds they took (a
    trial's warm-up beyond its first step: ``warmup_s - first_step_s``), and how many trials
    dropped any;
  * the best samples/sec and its configuration, and the median window CV of the run's rows;

then per pair the share of the search's wall time the noise-aware tolerance saved, and the
ratio of the two bests. Each run compiles into a fresh inductor cache
(``TORCHINDUCTOR_CACHE_DIR``): a reference that compiles (chargpt's recommended one) would
otherwise pay its compile in the first run only (48 s against 4 s on 2 cores).

Usage: python bench/steady_tolerance.py [--workload ddpm] [--trials 12] [--windows 3]
       [--window-s 2] [--sampler random] [--seed 0] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path


def search_run(args: argparse.Namespace, adaptive: bool, results: Path) -> dict:
    """One run, with the run's noise-aware tolerance or the fixed floor; its figures."""
    import tuner.driver as driver
    from tuner.settings import RunOptions
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="tuner-bench-inductor-")
    real = driver._trial_settings
    if not adaptive:  # the fixed tolerance: the plan's own, for every trial
        driver._trial_settings = lambda plan, rows: {
            "steady_tolerance": plan.settings.steady_tolerance}
    try:
        summary = driver.run(RunOptions(
            workload=args.workload, trials=args.trials, device="cpu", scale="tiny",
            windows=args.windows, window_s=args.window_s, sampler=args.sampler, seed=args.seed,
            confirm=0, ceiling=False, early_stop=False, results=str(results)))
    finally:
        driver._trial_settings = real
    rows = summary.rows
    search_s = (max(r["finished_at"] for r in rows)
                - min(r["started_at"] for r in rows)).total_seconds()
    ok = [r for r in rows if r["status"] == "ok" and r["samples_per_sec"]]
    best = max(ok, key=lambda r: r["samples_per_sec"])
    dropped_s = sum(max(0.0, (r["warmup_s"] or 0) - (r["first_step_s"] or 0))
                    for r in rows if r.get("steady_probes"))
    return {"search_s": search_s, "trials": len(rows), "best": best["samples_per_sec"],
            "best_knobs": f"bs={best['batch_size']} nw={best['num_workers']}",
            "dropped": sum(r.get("steady_probes") or 0 for r in rows),
            "dropping": sum(bool(r.get("steady_probes")) for r in rows),
            "dropped_s": dropped_s,
            "cv": statistics.median(r["samples_per_sec_cv"] for r in ok
                                    if r["samples_per_sec_cv"] is not None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="ddpm")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--sampler", default="random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--results", default=None)
    args = parser.parse_args()
    root = Path(args.results or tempfile.mkdtemp(prefix="tuner-bench-steady-"))
    print(f"{args.workload} tiny on cpu: {args.trials} trials, {args.windows} windows of "
          f"{args.window_s:g} s, --sampler {args.sampler} --seed {args.seed}, no early "
          f"stopping; results in {root}")
    for pair in range(args.repeats):
        order = (True, False) if pair % 2 == 0 else (False, True)
        runs = {on: search_run(args, on, root / f"pair{pair}-{'noise' if on else 'fixed'}")
                for on in order}
        for on in order:
            r = runs[on]
            print(f"  pair {pair + 1} tolerance {'from the noise' if on else 'fixed 0.10   '}: "
                  f"search {r['search_s']:6.1f} s, {r['trials']} trials; {r['dropped']} windows "
                  f"dropped in {r['dropping']} trials ({r['dropped_s']:.1f} s); best "
                  f"{r['best']:.1f} samples/sec at {r['best_knobs']}; median window CV "
                  f"{r['cv']:.3f}")
        on, off = runs[True], runs[False]
        print(f"  pair {pair + 1}: the noise-aware tolerance saved "
              f"{100 * (1 - on['search_s'] / off['search_s']):.0f} % of the search's wall time "
              f"and {off['dropped_s'] - on['dropped_s']:.1f} s of dropped windows; best with / "
              f"without = {on['best'] / off['best']:.3f}")


if __name__ == "__main__":
    main()
