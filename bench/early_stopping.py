"""Benchmark: what early stopping saves, side by side with the same search without it.

Runs the same search (workload, space, sampler, seed, trial count) with early stopping and
with ``--no-early-stop``, alternating (``--repeats`` pairs; the first of each pair alternates
too, so that a machine getting busier does not favour one), and prints for each run:

  * the search's wall time (first search trial's start to the last one's end) and the run's;
  * the best samples/sec the search found, its configuration, and how many trials were pruned;

then, per pair, the share of the search's wall time early stopping saved (target: >= 30 %)
and the ratio of the two bests (target: within the noise), against the best rows' window CV
and against the between-trial noise measured from the pair itself (the configurations both
runs measured to their end: on a drifting host the same configuration moves far more between
trials than within one); and the most any rule judging after windows could save in that
search (``most_a_rule_could_save``): where most configurations are within the smallest margin
of the best, that bound is below the target whatever the rule.

The re-measurement and the ceilings are off (``--confirm 0 --no-ceiling``): they are the same
with and without early stopping and would only dilute the figure. Each run compiles into a
fresh inductor cache (``TORCHINDUCTOR_CACHE_DIR``): chargpt's recommended reference compiles,
48 s on 2 cores in the first run of a pair and 4 s from the cache in the second, which would
read as "early stopping saved -20 %".

Usage: python bench/early_stopping.py [--workload ddpm] [--trials 12] [--windows 5]
       [--window-s 1] [--sampler gp] [--seed 0] [--repeats 1] [--device cpu] [--scale tiny]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
from pathlib import Path

from tuner.pruning import MIN_MARGIN


def search_run(args: argparse.Namespace, early_stop: bool, results: Path) -> dict:
    """One run; returns its figures."""
    from tuner.driver import run
    from tuner.settings import RunOptions
    from tuner.status import Phase
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="tuner-bench-inductor-")
    options = RunOptions(workload=args.workload, trials=args.trials, device=args.device,
                         scale=args.scale, windows=args.windows, window_s=args.window_s,
                         sampler=args.sampler, seed=args.seed, confirm=0, ceiling=False,
                         early_stop=early_stop, results=str(results), space_file=args.space)
    summary = run(options)
    rows = [r for r in summary.rows if (r.get("phase") or Phase.SEARCH) == Phase.SEARCH]
    search_s = (max(r["finished_at"] for r in rows)
                - min(r["started_at"] for r in rows)).total_seconds()
    ok = [r for r in rows if r["status"] == "ok" and r["samples_per_sec"] is not None]
    best = max(ok, key=lambda r: r["samples_per_sec"])
    return {"early_stop": early_stop, "search_s": search_s, "wall_s": summary.wall_s,
            "best": best["samples_per_sec"], "best_cv": best["samples_per_sec_cv"] or 0.0,
            "best_knobs": f"batch_size={best['batch_size']} num_workers={best['num_workers']} "
                          f"amp={best.get('amp')}",
            "trials": len(rows), "pruned": sum(r["status"] == "pruned" for r in rows),
            "statuses": sorted({r["status"] for r in rows}), "rows": rows}


def between_trial_noise(a: list[dict], b: list[dict]) -> tuple[float | None, int]:
    """The standard deviation of one trial's log samples/sec between trials, from the
    configurations both runs measured to their end (status ok): the SD of their log ratios
    over sqrt 2 (each ratio holds two measurements' noise); None with fewer than 3 such
    configurations. With the random sampler both runs of a pair propose the same ones. This is
    the noise that decides whether the two bests differ, which a trial's own windows (its
    window CV) do not see on a host that drifts."""
    from tuner.knobs import Knobs

    def measured(rows: list[dict]) -> dict:
        return {Knobs.from_dict(r, strict=False): r["samples_per_sec"] for r in rows
                if r["status"] == "ok" and r["samples_per_sec"]}

    x, y = measured(a), measured(b)
    logs = [math.log(x[k] / y[k]) for k in x.keys() & y.keys()]
    if len(logs) < 3:
        return None, len(logs)
    return statistics.stdev(logs) / math.sqrt(2), len(logs)


def most_a_rule_could_save(off: dict) -> tuple[float, int]:
    """Of the run without early stopping: the share of its search's wall time that stopping
    every trial that ended behind its best by more than the smallest margin
    (``tuner.pruning.MIN_MARGIN``) right after its first window would save, and how many such
    trials there are. A rule that judges after windows can save no more than this in that
    search (its margin is never smaller, it cannot tell a trial is behind before a window, and
    references run to their end): a flat landscape, where most configurations are within the
    margin of the best, bounds what early stopping can save whatever the rule."""
    bar = off["best"] * math.exp(-MIN_MARGIN)
    behind = [r for r in off["rows"] if r["status"] == "ok" and not r.get("reference")
              and r["samples_per_sec"] < bar and (r.get("windows") or 0) > 1]
    saved = sum(r["measured_s"] * (r["windows"] - 1) / r["windows"] for r in behind)
    return saved / off["search_s"], len(behind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="ddpm")
    parser.add_argument("--space", default=None, help="search-space YAML (default: the workload's)")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--window-s", type=float, default=1.0)
    parser.add_argument("--sampler", default="gp")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--results", default=None)
    args = parser.parse_args()
    root = Path(args.results or tempfile.mkdtemp(prefix="tuner-bench-early-stop-"))
    print(f"{args.workload} at {args.scale} scale on {args.device}: {args.trials} trials, "
          f"{args.windows} windows of {args.window_s:g} s, --sampler {args.sampler} --seed "
          f"{args.seed}; results in {root}")
    for pair in range(args.repeats):
        order = (True, False) if pair % 2 == 0 else (False, True)
        runs = {on: search_run(args, on, root / f"pair{pair}-{'on' if on else 'off'}")
                for on in order}
        for on in order:
            r = runs[on]
            print(f"  pair {pair + 1} early stopping {'on ' if on else 'off'}: search "
                  f"{r['search_s']:6.1f} s (run {r['wall_s']:6.1f} s), {r['trials']} trials, "
                  f"{r['pruned']} pruned; best {r['best']:8.1f} samples/sec "
                  f"(window CV {r['best_cv']:.3f}) at {r['best_knobs']}")
        on, off = runs[True], runs[False]
        saved = 1 - on["search_s"] / off["search_s"]
        ratio = on["best"] / off["best"]
        noise = max(on["best_cv"], off["best_cv"])
        between, shared = between_trial_noise(on["rows"], off["rows"])
        print(f"  pair {pair + 1}: early stopping saved {100 * saved:.0f} % of the search's wall "
              f"time (target >= 30 %); best with / without = {ratio:.3f} "
              f"({'within' if abs(ratio - 1) <= 2 * noise else 'outside'} the noise, "
              f"2 x window CV = {2 * noise:.3f})")
        most, behind = most_a_rule_could_save(off)
        print(f"  pair {pair + 1}: the most any rule judging after each window could save in the "
              f"search without it: {100 * most:.0f} % ({behind} of its searched trials ended "
              f"below its best x exp(-{MIN_MARGIN:.2f}); each stopped after its first window)")
        if between is not None:  # two single measurements: sqrt 2 x one's noise, 2 SD
            bound = 2 * math.sqrt(2) * between
            print(f"  pair {pair + 1}: between-trial noise from the {shared} configurations "
                  f"both runs measured to their end: {between:.3f} (log SD of one trial); the "
                  f"bests are {'within' if abs(math.log(ratio)) <= bound else 'outside'} it "
                  f"(|log ratio| {abs(math.log(ratio)):.3f}, 2 x sqrt 2 x noise = {bound:.3f}); "
                  f"same configuration: {'yes' if on['best_knobs'] == off['best_knobs'] else 'no'}")


if __name__ == "__main__":
    main()
