"""Benchmark: how close the tuner's search gets to the exhaustive grid, and how fast.

Question: on a reduced space, the exhaustive grid vs the tuner with K trials vs random search
with K trials, same machine, same run: best-found / grid best, and the trials and the wall time
needed to reach 95% of the grid best. Target: >= 0.95 of the grid best, median over seeds, with
<= 10% of the grid's trials; 20% is read too.

Design:
  1. Ground truth. Every configuration of a reduced space (default ``bench/ddpm-reduced.yaml``:
     ddpm at tiny scale on CPU, 36 configurations) is measured once with
     ``tuner.trial.harness.run_trial`` in this process, in a shuffled order so that load drift on a
     shared machine does not line up with any knob. That table is the truth of this run.
     ``--passes N`` measures the grid N times (each pass in its own order) and takes each
     cell's median; the pass-to-pass spread is printed.
     Each trial runs on the torch threads the tuner would give it (a local run's trial has
     the machine's CPUs, less one per worker); ``--threads N`` fixes them
     for every trial. On a shared 2-core machine, 2 threads while another process held a core
     ran ~30x slower than 1 thread (threads waiting on each other), so a ``--threads 1`` table
     is the steadier reading there.
     ``--table FILE`` saves it after every trial; a second run with the same file measures only
     what is missing (resume) and otherwise goes straight to the search part.
  2. Searches, evaluated against the table by lookup (nothing is measured again, so every
     strategy sees the same numbers), K = floor(budget fraction x grid size) trials each (at
     least the references and one more), for each of ``--budget-fraction`` (10% and 20% by
     default), repeated over ``--seeds`` seeds:
       * tuner: the searcher itself, ``tuner.searcher.make_searcher`` (ConstrainedOptunaSearch
         with each sampler of ``--samplers``, gp and tpe by default, as ``--sampler`` builds
         it: the run's seed and start-up rule, the workload's references enqueued first as
         ``Space.project`` records them, a configuration already measured answered instead of
         spending a trial, a random unknown one when the sampler proposes only known ones),
         driven through its ``suggest`` / ``on_trial_complete`` as Ray Tune drives it,
         without Ray;
       * random: the references' grid cells first (as the tuner), then configurations drawn
         uniformly without replacement from the rest of the grid;
       * grid: every configuration in a shuffled order (seed s shuffles as pass 1 of the
         measurement does with seed 0, so seed 0 is the order this table was measured in).
     Wall time to 0.95: the measured trials' wall times (each cell's ``wall_s``, a timer around
     ``run_trial``; tables without it: warmup_s + measured_s, else "n/a"), summed in the
     order the strategy measured them until best-found >= 0.95 x grid best, median over
     seeds ("not reached" when most seeds do not). A trial the tuner answers from a known
     outcome costs nothing; a reference costs its grid cell's time.
     A reference trial scores the grid cell it projects onto; the real tuner runs the reference
     as written (baseline: 4 workers on a 2-core node), so those values are measured too and
     printed beside their cells, for information only.
  3. Noise: the top 3 grid configurations are measured once more, and how much they moved is
     printed, so the 0.95 threshold can be read against measurement noise.

Prints figures (a table, a per-trial curve and a one-line reading against the target), never
pass/fail.

Usage:
  python bench/search_quality.py [--space bench/ddpm-wide.yaml] [--table FILE] [--seeds 20]
      [--budget-fraction 0.1 0.2] [--samplers gp tpe]
      [--windows 2] [--window-s 0.5] [--warmup-steps 2] [--threads N] [--passes 1]
      [--grid-only-measure]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

from repeatability import TUNER_THREADS, measure_once  # bench/, this script's directory

from tuner.knobs import WORKER_KNOBS, Knobs
from tuner.settings import TrialSettings
from tuner.space import Choices, IntRange, Space, load_space
from tuner.workload import Workload, default_cache_dir
from tuner.workload_loader import resolve

DEFAULT_SPACE = Path(__file__).with_name("ddpm-reduced.yaml")
REACH = 0.95
"""A search 'reaches' the grid best when its best-found is at least this share of it."""
TARGET_TRIAL_FRACTIONS = (0.10, 0.20)
"""Trial budgets read against the target, as a share of the grid: the target's 10%, and 20%."""
METRIC = "samples_per_sec"


# ----------------------------------------------------------------------------- the grid


def cell_key(params: dict) -> str:
    """The table key of a configuration: its sampled knobs as Optuna records them."""
    return json.dumps(params, sort_keys=True)


def grid_params(space: Space) -> list[dict]:
    """Every configuration of a finite space, as the define-by-run space records it (worker
    knobs left out when num_workers is 0), without duplicates."""
    names, values = [], []
    for name, dom in space.domains.items():
        if isinstance(dom, IntRange):
            if dom.log:
                raise SystemExit(f"{space.source}: knob {name} has a log range; a grid needs "
                                 "choices or a stepped range")
            values.append(list(range(dom.low, dom.high + 1, dom.step)))
        elif isinstance(dom, Choices):
            values.append(list(dom.values))
        names.append(name)
    cells: dict[str, dict] = {}
    for combo in itertools.product(*values):
        params = dict(zip(names, combo))
        if int(params.get("num_workers", space.constants.get("num_workers", 0))) == 0:
            params = {k: v for k, v in params.items() if k not in WORKER_KNOBS}
        cells.setdefault(cell_key(params), params)
    return list(cells.values())


def knobs_of(space: Space, params: dict) -> Knobs:
    """The Knobs a trial of ``params`` applies: the space's constants under the sampled values
    (worker knobs dropped without workers, as DefineByRun does)."""
    values = {**space.constants, **params}
    if int(values.get("num_workers", 0)) == 0:
        for name in WORKER_KNOBS:
            values.pop(name, None)
    return Knobs.from_dict(values)


def short(params: dict) -> str:
    abbrev = {"batch_size": "bs", "num_workers": "nw", "channels_last": "cl",
              "prefetch_factor": "pf", "persistent_workers": "pw"}
    return " ".join(f"{abbrev.get(k, k)}={_fmt(v)}" for k, v in params.items())


def _fmt(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


# ------------------------------------------------------------------------------ measuring

def measure(workload: Workload, knobs: Knobs, settings: TrialSettings,
            threads: int | None = None) -> dict:
    """One trial (``repeatability.measure_once``: ``threads`` torch threads, None: the
    tuner's); the fields this benchmark keeps."""
    result = measure_once(workload, knobs, settings, threads)
    return {"status": result["status"],
            METRIC: result[METRIC] if result["status"] == "ok" else None,
            "samples_per_sec_cv": result.get("samples_per_sec_cv"),
            "wall_s": result["wall_s"], "load_1min": result["load_1min"],
            "threads": result["torch_threads"], "error": result.get("error")}


def trial_settings(workload: Workload, args) -> TrialSettings:
    data_dir = workload.prepare_default_data(default_cache_dir() / "data", args.scale)
    extra = {}
    if "breakdown_steps" in TrialSettings.__dataclass_fields__:
        extra["breakdown_steps"] = 0  # per-phase timing after the windows: not needed here
    return TrialSettings(scale=args.scale, device=args.device, data_dir=str(data_dir),
                         warmup_steps=args.warmup_steps, windows=args.windows,
                         window_s=args.window_s, seed=0, **extra)


class Table:
    """The measured grid, references and re-measurements; saved to ``path`` after each trial."""

    def __init__(self, path: Path | None, meta: dict):
        self.path = path
        self.data = {"meta": meta, "grid": {}, "references": {}, "remeasured": {}}
        if path is not None and path.exists():
            loaded = json.loads(path.read_text())
            if loaded["meta"]["space_file"] != meta["space_file"] or \
                    loaded["meta"]["settings"] != meta["settings"]:
                raise SystemExit(f"--table {path}: measured with another space or settings "
                                 f"({loaded['meta']['space_file']}, {loaded['meta']['settings']}); "
                                 "pass another file")
            self.data = loaded

    def save(self) -> None:
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, indent=1, default=str))
            tmp.replace(self.path)


def measure_missing(table: Table, section: str, jobs: list[tuple[str, dict, Knobs]],
                    workload: Workload, settings: TrialSettings, threads: int | None,
                    label: str) -> None:
    """Measure each (key, params, knobs) not yet in ``table[section]``, printing progress."""
    todo = [job for job in jobs if job[0] not in table.data[section]]
    if len(todo) < len(jobs):
        print(f"{label}: {len(jobs) - len(todo)} of {len(jobs)} already in the table")
    for i, (key, params, knobs) in enumerate(todo, 1):
        row = measure(workload, knobs, settings, threads)
        row["params"] = params
        table.data[section][key] = row
        table.save()
        value = f"{row[METRIC]:7.2f}" if row[METRIC] is not None else f"{row['status']:>7}"
        cv = row["samples_per_sec_cv"]
        print(f"{label} {i:>2}/{len(todo)}  {short(params):<38} {value} samples/s  "
              f"cv {cv if cv is None else f'{cv:.2f}'}  {row['wall_s']:5.1f} s  "
              f"{row['threads']} thr  load {row['load_1min']:.1f}", flush=True)


def grid_section(n: int) -> str:
    """Table section of the n-th measurement pass over the grid (the first is 'grid')."""
    return "grid" if n == 1 else f"grid_pass{n}"


def combine(rows: list[dict]) -> dict:
    """One grid cell from its passes: samples/sec is the median of the passes that ran, the
    status that of the first pass when none ran; wall time and cv those of the first pass."""
    values = [r[METRIC] for r in rows if r[METRIC] is not None]
    out = dict(rows[0])
    out[METRIC] = statistics.median(values) if values else None
    out["status"] = "ok" if values else rows[0]["status"]
    out["passes"] = [r[METRIC] for r in rows]
    return out


# ----------------------------------------------------------------------------- searching

def references(workload: Workload, space: Space, device: str) -> list[tuple[str, dict, Knobs]]:
    """(name, grid params, knobs as run), as tuner.plan.Plan builds reference_params."""
    out = []
    for name, knobs in workload.references.items():
        applied = knobs.clamp(device)[0]
        out.append((name, space.project(applied), applied))
    return out


def tuner_search(space: Space, refs: list, grid: dict[str, dict], trials: int,
                 seed: int, sampler: str) -> tuple[list[str], dict]:
    """The tuner's searcher with ``sampler`` over the table; returns each trial's cell key, in
    the order measured, and counts: distinct configurations measured, proposals answered
    without a trial."""
    from tuner.searcher import SearchSpec, make_searcher

    # A fresh run's searcher: no resume, no warm start, no memory limit.
    searcher = make_searcher(SearchSpec(
        space=space, metric=METRIC, mode="max", sampler=sampler, seed=seed, trials=trials,
        references=tuple(refs), reference_count=len(refs)))
    keys: list[str] = []
    for index in range(trials):
        trial_id = f"trial_{index}"
        searcher.suggest(trial_id)
        key = cell_key(searcher.params(trial_id))
        row = grid[key]
        keys.append(key)
        searcher.on_trial_complete(trial_id, {"status": row["status"], METRIC: row[METRIC]})
    return keys, {"distinct": len(set(keys)), "answered": searcher.answered}


def random_search(refs: list, grid: dict[str, dict], trials: int, seed: int) -> list[str]:
    """References' cells first, then uniform draws without replacement from the rest; the
    cell keys in the order measured."""
    first = list(dict.fromkeys(cell_key(params) for _, params, _ in refs))
    rest = [key for key in grid if key not in first]
    random.Random(seed).shuffle(rest)
    return (first + rest)[:trials]


def grid_order(cell_keys: list[str], seed: int) -> list[str]:
    """The exhaustive grid in a shuffled order: ``cell_keys`` (in ``grid_params`` order)
    shuffled by ``random.Random(seed)``, as pass 1 of the measurement shuffles them with seed 0."""
    order = list(cell_keys)
    random.Random(seed).shuffle(order)
    return order


def curve(keys: list[str], grid: dict[str, dict], grid_best: float) -> list[float]:
    """Best-found / grid best after each trial of ``keys`` (cells in the order measured)."""
    best, out = 0.0, []
    for key in keys:
        best = max(best, grid[key][METRIC] or 0.0)
        out.append(best / grid_best)
    return out


def cell_wall_s(row: dict) -> float | None:
    """Wall time of one measured cell, s: its ``wall_s`` (a timer around ``run_trial``); in
    tables without it, ``warmup_s + measured_s`` when the row has both; None when unknown."""
    if row.get("wall_s") is not None:
        return float(row["wall_s"])
    if row.get("warmup_s") is not None and row.get("measured_s") is not None:
        return float(row["warmup_s"]) + float(row["measured_s"])
    return None


def wall_to_reach_s(keys: list[str], grid: dict[str, dict], grid_best: float) -> float | None:
    """Seconds of measuring, trials summed in the order of ``keys``, until best-found >= REACH
    x grid best: inf if never; None if a trial up to then has no known wall time."""
    total_s: float | None = 0.0
    for key in keys:
        wall_s = cell_wall_s(grid[key])
        total_s = None if total_s is None or wall_s is None else total_s + wall_s
        if (grid[key][METRIC] or 0.0) >= REACH * grid_best:
            return total_s
    return math.inf


def trials_to_reach(ratios: list[float]) -> float:
    """First trial (1-based) at which best-found >= REACH x grid best; inf if never."""
    return next((i for i, r in enumerate(ratios, 1) if r >= REACH), math.inf)


def within_reach_probability(n_cells: int, n_good: int, draws: int) -> float:
    """P(at least one of ``draws`` uniform draws without replacement is one of ``n_good``)."""
    if draws >= n_cells:
        return 1.0 if n_good else 0.0
    return 1.0 - math.comb(n_cells - n_good, draws) / math.comb(n_cells, draws)


# ------------------------------------------------------------------------------- report

def print_grid(grid: dict[str, dict], grid_best: float) -> None:
    ranked = sorted(grid.values(), key=lambda r: r[METRIC] or 0.0, reverse=True)
    passes = len(ranked[0]["passes"])
    print(f"\ngrid ({len(ranked)} configurations), best first"
          + (f"; samples/s is the median of {passes} passes" if passes > 1 else "") + ":")
    print(f"{'rank':>4}  {'configuration':<38} {'samples/s':>9} {'of best':>7} {'cv':>5} "
          f"{'wall s':>6}" + ("  passes" if passes > 1 else ""))
    for rank, r in enumerate(ranked, 1):
        v = r[METRIC]
        cv = r["samples_per_sec_cv"]
        each = "  " + " ".join(f"{p:6.1f}" if p is not None else "     -" for p in r["passes"])
        wall_s = cell_wall_s(r)
        print(f"{rank:>4}  {short(r['params']):<38} "
              f"{(f'{v:9.2f}' if v is not None else r['status']):>9} "
              f"{(f'{v / grid_best:7.3f}' if v is not None else ''):>7} "
              f"{(f'{cv:5.2f}' if cv is not None else ''):>5} "
              f"{(f'{wall_s:6.1f}' if wall_s is not None else 'n/a'):>6}"
              + (each if passes > 1 else ""))
    if passes > 1:
        spreads = [(max(r["passes"]) - min(r["passes"])) / r[METRIC] for r in ranked
                   if r[METRIC] and None not in r["passes"]]
        print(f"pass-to-pass spread (max - min) / median per configuration: median "
              f"{100 * statistics.median(spreads):.0f}%, largest {100 * max(spreads):.0f}%")


def print_noise(table: Table, grid: dict[str, dict], top: list[str], grid_best: float) -> None:
    rows = {k: table.data["remeasured"][k] for k in top if k in table.data["remeasured"]}
    if not rows:
        return
    print("\nordering noise: the top grid configurations measured once more (vs the grid's figure)")
    print(f"{'configuration':<38} {'first':>8} {'again':>8} {'moved':>7} {'again/grid best':>15}")
    moves = []
    for key, again in rows.items():
        first = grid[key][METRIC]
        if first is None or again[METRIC] is None:
            print(f"{short(again['params']):<38} {first} {again['status']}")
            continue
        moved = again[METRIC] / first - 1
        moves.append(abs(moved))
        print(f"{short(again['params']):<38} {first:8.2f} {again[METRIC]:8.2f} "
              f"{100 * moved:+6.1f}% {again[METRIC] / grid_best:15.3f}")
    if moves:
        print(f"largest move {100 * max(moves):.1f}% (the 0.95 threshold is a 5% gap)")


def print_references(table: Table, grid: dict[str, dict], refs: list) -> None:
    print("\nreferences: as the tuner runs them vs the grid cell the search records them at")
    for name, params, knobs in refs:
        as_run = table.data["references"].get(name)
        cell = grid[cell_key(params)][METRIC]
        run_value = as_run[METRIC] if as_run else None
        print(
            f"  {name:<12} as run (bs={knobs.batch_size} nw={knobs.num_workers} amp={knobs.amp}"
            f" pw={_fmt(knobs.persistent_workers)}): "
            f"{f'{run_value:.2f}' if run_value is not None else (as_run or {}).get('status', '-')}"
            f" samples/s; cell {short(params)}: {cell if cell is None else f'{cell:.2f}'}"
        )


def median_or_none(values: list[float | None]) -> float | None:
    """Median of ``values`` (inf sorts last); None when any is None (a wall time unknown)."""
    return None if any(v is None for v in values) else statistics.median(values)


def summarise(name: str, orders: list[list[str]], grid: dict[str, dict],
              grid_best: float) -> dict:
    """One strategy over its seeds; ``orders``: per seed, the cell keys in the order measured.
    Returns its trials, best-found / grid best (median, min, seeds >= REACH), the curves, and
    the median trials and wall seconds to REACH (inf: not reached by most seeds; wall None:
    unknown)."""
    curves = [curve(keys, grid, grid_best) for keys in orders]
    finals = [c[-1] for c in curves]
    return {"name": name, "trials": len(orders[0]), "median": statistics.median(finals),
            "min": min(finals), "reached": sum(f >= REACH for f in finals), "seeds": len(orders),
            "curves": curves,
            "trials_to_reach": statistics.median(trials_to_reach(c) for c in curves),
            "wall_to_reach_s": median_or_none([wall_to_reach_s(keys, grid, grid_best)
                                               for keys in orders])}


def reach_text(value: float | None, fmt: str) -> str:
    """A median trials / seconds to REACH as printed: "not reached", "n/a" (unknown) or fmt."""
    if value is None:
        return "n/a"
    return "not reached" if math.isinf(value) else format(value, fmt)


def print_summary(rows: list[dict], grid_row: dict, grid_total_s: float | None) -> None:
    """The summary table: the grid (shuffled orders) first, then each search strategy."""
    print(f"\n{'strategy':<17} {'trials':>6} {'best/grid median':>16} {'min':>6} "
          f"{'seeds >= 0.95':>13} {'trials to 0.95':>14} {'wall s to 0.95':>14}")
    total = "n/a" if grid_total_s is None else f"{grid_total_s:.0f} s"
    print(f"{'grid (shuffled)':<17} {grid_row['trials']:>6} {1.0:16.3f} {1.0:6.3f} {'-':>13} "
          f"{reach_text(grid_row['trials_to_reach'], 'g'):>14} "
          f"{reach_text(grid_row['wall_to_reach_s'], '.0f'):>14}  (all: {total}, to know)")
    for r in rows:
        seeds = f"{r['reached']}/{r['seeds']}"
        print(f"{r['name']:<17} {r['trials']:>6} {r['median']:16.3f} {r['min']:6.3f} "
              f"{seeds:>13} {reach_text(r['trials_to_reach'], 'g'):>14} "
              f"{reach_text(r['wall_to_reach_s'], '.0f'):>14}")
    print("(trials and wall s to 0.95: median over seeds, wall s = the measured trials' wall "
          "times summed in the order measured; no refs: the same searches without the "
          "references enqueued first)")


def print_curves(rows: list[dict], trials: int) -> None:
    print("\nbest-found / grid best after k trials, median over seeds (fraction of seeds >= 0.95)")
    print(f"{'k':>3}  " + "  ".join(f"{r['name']:>16}" for r in rows))
    for k in range(trials):
        cells = []
        for runs in (r["curves"] for r in rows):
            at_k = [c[k] for c in runs]
            share = sum(v >= REACH for v in at_k) / len(at_k)
            cells.append(f"{statistics.median(at_k):.3f} ({share:.2f})")
        print(f"{k + 1:>3}  " + "  ".join(f"{c:>16}" for c in cells))


# --------------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="ddpm")
    parser.add_argument("--space", default=str(DEFAULT_SPACE), help="reduced space YAML (finite)")
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--window-s", type=float, default=0.5)
    parser.add_argument("--seeds", type=int, default=20, help="searches per strategy")
    parser.add_argument("--budget-fraction", type=float, nargs="+",
                        default=list(TARGET_TRIAL_FRACTIONS), metavar="FRACTION",
                        help="one or more shares of the grid, each in (0, 1]: K = floor(fraction "
                             "x grid size) trials per search, a summary for each "
                             "(default: 0.1 0.2, the targets)")
    parser.add_argument("--passes", type=int, default=1,
                        help="measure the grid this many times (each pass in its own shuffled "
                             "order); a cell's figure is the median of its passes")
    parser.add_argument("--samplers", nargs="+", default=["gp", "tpe"],
                        choices=["gp", "tpe", "random"],
                        help="the tuner's --sampler values to compare (the first is the one read "
                             "against the target; the run's default is gp)")
    parser.add_argument("--remeasure-top", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for every trial (default: as the tuner, the trial's "
                             "CPUs less one per DataLoader worker, at least 1)")
    parser.add_argument("--table", default=None,
                        help="JSON file: measured cells are saved there; cells in it are reused")
    parser.add_argument("--grid-only-measure", action="store_true",
                        help="measure (and save) the table, skip the search part")
    args = parser.parse_args(argv)
    bad = [f for f in args.budget_fraction if not 0 < f <= 1]
    if bad:
        parser.error(f"--budget-fraction {bad[0]:g}: a share of the grid, in (0, 1]")
    return args


def open_table(args, workload: Workload) -> Table:
    """The run's table (``--table`` or in memory), its meta naming the space and trial settings."""
    meta = {"workload": workload.name, "space_file": str(Path(args.space).resolve()),
            "settings": {"scale": args.scale, "device": args.device,
                         "warmup_steps": args.warmup_steps, "windows": args.windows,
                         "window_s": args.window_s, "threads": args.threads},
            "cpu_count": os.cpu_count(), "started_at": dt.datetime.now().isoformat()}
    return Table(Path(args.table) if args.table else None, meta)


def measure_grid(args, table: Table, space: Space, cells: list[dict], refs: list,
                 workload: Workload, settings: TrialSettings) -> tuple[dict[str, dict], list[str]]:
    """Measure what the table lacks (the grid's passes, then the top cells again and the
    references as run); returns the grid (key -> combined row) and the top cells' keys.
    Exits when no grid configuration ran."""
    started = time.perf_counter()
    jobs = [(cell_key(p), p, knobs_of(space, p)) for p in cells]
    sections = [grid_section(n) for n in range(1, args.passes + 1)]
    for n, section in enumerate(sections, 1):
        random.Random(n - 1).shuffle(jobs)  # load drift must not follow a knob
        table.data.setdefault(section, {})
        measure_missing(table, section, jobs, workload, settings, args.threads,
                        "grid" if args.passes == 1 else f"grid pass {n}")
    grid = {key: combine([table.data[section][key] for section in sections])
            for key, _, _ in sorted(jobs)}
    if all(r[METRIC] is None for r in grid.values()):
        sys.exit("no grid configuration ran; nothing to compare")
    top = sorted(grid, key=lambda k: grid[k][METRIC] or 0.0, reverse=True)[:args.remeasure_top]
    measure_missing(table, "remeasured", [(k, grid[k]["params"], knobs_of(space, grid[k]["params"]))
                                          for k in top], workload, settings, args.threads, "again")
    measure_missing(table, "references", [(name, params, knobs) for name, params, knobs in refs],
                    workload, settings, args.threads, "reference")
    loads = [r["load_1min"] for r in grid.values()]
    print(f"measuring took {time.perf_counter() - started:.0f} s in this invocation; load "
          f"average over the grid trials: min {min(loads):.1f}, median "
          f"{statistics.median(loads):.1f}, max {max(loads):.1f} on {os.cpu_count()} CPUs")
    return grid, top


def budget_trials(fraction: float, n_cells: int, n_refs: int) -> int:
    """K for a budget fraction: floor(fraction x grid size), at least the references and one
    more, at most the grid (random search draws without replacement)."""
    return min(n_cells, max(n_refs + 1, math.floor(fraction * n_cells)))


def search_rows(space: Space, refs: list, grid: dict[str, dict], grid_best: float,
                trials: int, args) -> list[dict]:
    """Every search strategy at K = ``trials``, over ``args.seeds`` seeds: the tuner with each
    sampler and random search, with the references first and without; summarised rows, the
    tuner's carrying ``notes`` (per seed: distinct cells, proposals answered)."""
    rows = []
    for label, with_refs in (("", refs), (" no refs", [])):
        for sampler in args.samplers:
            runs = [tuner_search(space, with_refs, grid, trials, seed, sampler)
                    for seed in range(args.seeds)]
            row = summarise(f"tuner {sampler}{label}", [keys for keys, _ in runs], grid, grid_best)
            row["notes"] = [note for _, note in runs]
            rows.append(row)
        rows.append(summarise(f"random{label}", [random_search(with_refs, grid, trials, seed)
                                                 for seed in range(args.seeds)], grid, grid_best))
    return rows


def target_fraction(trials: int, n_cells: int) -> float | None:
    """The smallest target budget (TARGET_TRIAL_FRACTIONS) that ``trials`` of ``n_cells`` fits."""
    return min((f for f in TARGET_TRIAL_FRACTIONS if trials <= f * n_cells), default=None)


def print_reading(rows: list[dict], grid_row: dict, trials: int, n_cells: int) -> None:
    """One line: the first tuner row against the target budget this K fits, with wall times."""
    tuner = rows[0]
    rand = next(r for r in rows if r["name"] == "random")
    target = target_fraction(trials, n_cells)
    verdict = ("meets" if tuner["median"] >= REACH else "misses") if target else \
        f"over every target budget ({', '.join(f'{f:.0%}' for f in TARGET_TRIAL_FRACTIONS)})"
    print(f"\nreading vs target (>= {REACH} of grid best, median over seeds, with <= "
          f"{f'{target:.0%}' if target else '-'} of its trials; targets: "
          f"{' and '.join(f'{f:.0%}' for f in TARGET_TRIAL_FRACTIONS)}): {tuner['name']} median "
          f"{tuner['median']:.3f} (min {tuner['min']:.3f}, {tuner['reached']}/{tuner['seeds']} "
          f"seeds >= {REACH}) with {trials}/{n_cells} trials -> {verdict}; random "
          f"{rand['median']:.3f} ({rand['reached']}/{rand['seeds']}); wall s to {REACH} "
          f"(median): {tuner['name']} {reach_text(tuner['wall_to_reach_s'], '.0f')}, random "
          f"{reach_text(rand['wall_to_reach_s'], '.0f')}, grid "
          f"{reach_text(grid_row['wall_to_reach_s'], '.0f')}")


def report_budget(fraction: float, space: Space, refs: list, grid: dict[str, dict],
                  grid_row: dict, grid_total_s: float | None, args) -> None:
    """Search at K = ``budget_trials(fraction)`` and print its summary, notes, curves, reading."""
    ok = [r[METRIC] for r in grid.values() if r[METRIC] is not None]
    grid_best = max(ok)
    trials = budget_trials(fraction, len(grid), len(refs))
    good = sum(v >= REACH * grid_best for v in ok)
    print(f"\n=== budget fraction {fraction:g}: K = {trials} trials per search "
          f"({100 * trials / len(grid):.0f}% of {len(grid)}), {args.seeds} seeds; references "
          f"first ({', '.join(n for n, _, _ in refs)})")
    print(f"configurations within 0.95 of the grid best: {good} of {len(grid)}; "
          f"{trials - len(refs)} uniform draws (no references) hit one with probability "
          f"{within_reach_probability(len(grid), good, trials - len(refs)):.2f}")
    rows = search_rows(space, refs, grid, grid_best, trials, args)
    print_summary(rows, grid_row, grid_total_s)
    for row in (r for r in rows if "notes" in r):
        print(f"{row['name']}: distinct configurations measured per search median "
              f"{statistics.median(n['distinct'] for n in row['notes']):g} of {trials}; "
              f"proposals answered without a trial (known outcome) median "
              f"{statistics.median(n['answered'] for n in row['notes']):g}")
    print_curves(rows, trials)
    print_reading(rows, grid_row, trials, len(grid))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    workload = resolve(args.workload)
    settings = trial_settings(workload, args)
    samples = workload.check_data(Path(settings.data_dir), args.scale)
    space = load_space(args.space, is_file=True).for_device(
        args.device, max_workers=os.cpu_count() or 1, max_batch=samples)
    cells = grid_params(space)
    refs = references(workload, space, args.device)
    table = open_table(args, workload)
    print(f"workload {workload.name} scale {args.scale} on {args.device}; space {args.space}: "
          f"{len(cells)} configurations; trial: {args.warmup_steps} warm-up steps, "
          f"{args.windows} windows of >= {args.window_s} s; torch threads per trial: "
          f"{args.threads or TUNER_THREADS}")
    print(f"machine: {os.cpu_count()} CPUs, load average now {os.getloadavg()[0]:.1f}; "
          f"figures are from this run only")
    grid, top = measure_grid(args, table, space, cells, refs, workload, settings)
    grid_best = max(r[METRIC] for r in grid.values() if r[METRIC] is not None)
    print_grid(grid, grid_best)
    print_noise(table, grid, top, grid_best)
    print_references(table, grid, refs)
    if args.grid_only_measure:
        return
    # The grid itself as a strategy: all cells, each seed in its own shuffled order.
    grid_row = summarise("grid (shuffled)", [grid_order([cell_key(p) for p in cells], seed)
                                             for seed in range(args.seeds)], grid, grid_best)
    walls = [cell_wall_s(r) for r in grid.values()]
    grid_total_s = None if None in walls else sum(walls)
    for fraction in args.budget_fraction:
        report_budget(fraction, space, refs, grid, grid_row, grid_total_s, args)


if __name__ == "__main__":
    main()
