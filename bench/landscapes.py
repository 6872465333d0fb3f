"""Benchmark: how close `python -m tuner run` gets to the known optimum of synthetic landscapes
shaped like the H200's, within a time budget, on CPU.

Question: for each landscape of ``tests/landscapes.py`` (launch-bound, decode-bound,
memory-capped, io-bound: sleeps, so they hold on a loaded machine; each one's optimum follows
from its model) and each seed, what does ``python -m tuner run --workload tests.landscapes:<name>
--time-budget 120 --seed S`` answer, as a share of the optimum, and how many configurations
does it measure? Target: >= 0.9 of the optimum for every landscape and seed.

Each run is a subprocess in its own results directory (the leaderboard then holds that run
only), with the caller's environment (``TUNER_CACHE`` shared, so each landscape's data is
written once). Read from its leaderboard:

* answer: ``tuner.winner.best`` (what ``best`` prints: samples/sec as the geometric mean of
  the winner's measurements) and its knobs; "none" when no trial succeeded;
* optimum: ``Landscape.optimum()``, the model's best over every batch that fits; doubling:
  ``Landscape.doubling_answer()``, the recommended's batch doubled until it no longer fits;
* measured: search-phase rows with at least one window (references included), i.e. the
  configurations the search measured; oom: search rows that ran out of (modelled) memory;
  trials: every row of the run (search, re-measurement and ceiling trials);
* wall s: the subprocess, start to exit; load: the 1-min load average at its start and end;
* reported: the answer's rate over its knobs' modelled rate (``Landscape.samples_per_sec``:
  what full trials of those knobs sustain, ``tests/test_landscapes.py`` checks it with real
  sleeps); no answer may overstate its configuration by more than 25 %.

A measured rate can read slightly above the model (by up to ~2 % on a machine with a load of
20 on 2 cores): the harness's pause between two windows overlaps a modelled step, as a
device's queue would.

Prints figures (a table per landscape, one line per seed, and a reading against the target),
never pass/fail. Runs take the budget plus start-up and follow-ups (~2.5 min each at the
default budget): 3 landscapes x 5 seeds is ~35-40 min. Run it under ``nice``.

Usage:
  nice python bench/landscapes.py [--landscapes launch-bound decode-bound memory-capped]
      [--seeds 0 1 2 3 4] [--time-budget 120] [--out FILE] [--logs DIR]
      [--run-arg=--sampler=tpe ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.landscapes import LANDSCAPES, import_path  # noqa: E402
from tuner import leaderboard, winner  # noqa: E402
from tuner.knobs import Knobs, knob_text  # noqa: E402
from tuner.status import MEASURED, Phase, Status, phase_of  # noqa: E402

TARGET = 0.9
"""The answer's share of the optimum each landscape and seed should reach."""


def run_logged(command: list[str], env: dict[str, str], log: Path
               ) -> tuple[subprocess.CompletedProcess, float, float]:
    """Runs ``command`` from the repository root (its environment with ``env``, the checkout
    on ``PYTHONPATH``, 200 columns), writes its command, exit code, wall time and output to
    ``log``; returns the process, its wall seconds and the 1-minute load average before it."""
    env = {**os.environ, **env, "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT),
                                                     os.environ.get("PYTHONPATH")) if p)}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    log.write_text(f"$ {shlex.join(command)}\n# exit {proc.returncode}, {wall_s:.1f} s\n"
                   f"{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc, wall_s, load_before


def bench_start(title: str, logs: Path | None, details: str = "") -> tuple[Path, list[str]]:
    """The runs' logs directory (``logs``, or a new temporary one named after ``title``) and the
    output's first line (``title``, UTC time, commit, ``details``, CPUs), printed."""
    logs = logs or Path(tempfile.mkdtemp(prefix=title.replace(" ", "-") + "-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                            capture_output=True, text=True).stdout.strip()
    line = (f"{title} bench, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"commit {commit}, {details}{os.cpu_count()} CPUs")
    print(line, flush=True)
    return logs, [line]


def run_once(name: str, seed: int, args, logs: Path) -> dict:
    """One ``tuner run`` of landscape ``name`` with ``seed``; its figures (see the module)."""
    results = Path(tempfile.mkdtemp(prefix=f"landscape-{name}-{seed}-"))
    command = [sys.executable, "-m", "tuner", "run", "--workload", import_path(name),
               "--time-budget", str(args.time_budget), "--seed", str(seed),
               "--results", str(results), *args.run_arg]
    log = logs / f"{name}-seed{seed}.log"
    proc, wall_s, load_before = run_logged(command, {}, log)
    workload = LANDSCAPES[name]
    rows = leaderboard.read(results, workload=workload.name).to_pylist()
    search = [r for r in rows if phase_of(r) == Phase.SEARCH]
    answer = winner.best(rows) if rows else None
    return {"landscape": name, "seed": seed, "exit": proc.returncode, "wall_s": wall_s,
            "answer": answer.samples_per_sec if answer else None,
            "knobs": knob_text(answer.row) if answer else "-",
            "sustained": (workload.samples_per_sec(Knobs.from_dict(answer.row, strict=False))
                          if answer else None),
            "optimum": workload.optimum().samples_per_sec,
            "doubling": workload.doubling_answer().samples_per_sec,
            "measured": sum(1 for r in search if r["status"] in MEASURED
                            and (r["windows"] or 0) >= 1),
            "oom": sum(1 for r in search if r["status"] == Status.OOM),
            "trials": len(rows), "load": (load_before, os.getloadavg()[0]), "log": log}


def print_table(name: str, runs: list[dict]) -> None:
    workload = LANDSCAPES[name]
    best, doubling = workload.optimum(), workload.doubling_answer()
    print(f"\n== {name} ({workload.name}): optimum {best.samples_per_sec:,.1f} samples/s at "
          f"{knob_text(best.knobs.to_dict())}; doubling answer {doubling.samples_per_sec:,.1f} "
          f"({doubling.samples_per_sec / best.samples_per_sec:.2f} of it) at "
          f"{knob_text(doubling.knobs.to_dict())}")
    print(f"{'seed':>4} {'answer/s':>9} {'optimum/s':>9} {'ratio':>6} {'x doubling':>10} "
          f"{'reported':>8} {'measured':>8} {'oom':>3} {'trials':>6} {'wall s':>6} "
          f"{'load':>9}  answer knobs")
    for r in runs:
        answer = "none" if r["answer"] is None else f"{r['answer']:,.1f}"
        ratio = "-" if r["answer"] is None else f"{r['answer'] / r['optimum']:.3f}"
        reported = "-" if not r.get("sustained") else f"{r['answer'] / r['sustained']:.3f}"
        over = "-" if r["answer"] is None else f"{r['answer'] / r['doubling']:.2f}"
        load = f"{r['load'][0]:.1f}-{r['load'][1]:.1f}"
        exit_note = "" if r["exit"] == 0 else f"  (exit {r['exit']}, see {r['log']})"
        print(f"{r['seed']:>4} {answer:>9} {r['optimum']:>9,.1f} {ratio:>6} {over:>10} "
              f"{reported:>8} {r['measured']:>8} {r['oom']:>3} {r['trials']:>6} "
              f"{r['wall_s']:>6.0f} {load:>9}  {r['knobs']}{exit_note}")
    ratios = [0.0 if r["answer"] is None else r["answer"] / r["optimum"] for r in runs]
    print(f"{name}: ratio min {min(ratios):.3f}, median {statistics.median(ratios):.3f}; "
          f"{sum(x >= TARGET for x in ratios)}/{len(runs)} seeds >= {TARGET}; configurations "
          f"measured median {statistics.median(r['measured'] for r in runs):g}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscapes", nargs="+", default=list(LANDSCAPES),
                        choices=list(LANDSCAPES), metavar="NAME",
                        help=f"landscapes to run: {', '.join(LANDSCAPES)} (default: all)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4],
                        help="--seed of each run (default: 0 1 2 3 4)")
    parser.add_argument("--time-budget", type=float, default=120.0,
                        help="--time-budget of each run, s (default: 120)")
    parser.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for every run, e.g. --run-arg=--sampler=tpe "
                             "(repeat it for several)")
    parser.add_argument("--logs", default=None,
                        help="directory for each run's output (default: a new temporary one)")
    parser.add_argument("--out", default=None, help="also write the printed tables to FILE")
    args = parser.parse_args(argv)
    if args.time_budget <= 0:
        parser.error(f"--time-budget {args.time_budget:g}: seconds, > 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="landscapes-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    header = (f"landscapes bench {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit "
              f"{commit}, {os.cpu_count()} CPUs, load average now {os.getloadavg()[0]:.1f}; "
              f"each run: tuner run --time-budget {args.time_budget:g} "
              f"{' '.join(args.run_arg)}".rstrip() + f"; logs in {logs}")
    print(header, flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in args.landscapes}
    # Seed by seed, every landscape in each: a bench stopped early has figures for all.
    for seed in args.seeds:
        for name in args.landscapes:
            r = run_once(name, seed, args, logs)
            runs[name].append(r)
            answer = "none" if r["answer"] is None else f"{r['answer']:,.1f}"
            ratio = "" if r["answer"] is None else f" ({r['answer'] / r['optimum']:.3f})"
            print(f"  {name} seed {seed}: answer {answer}{ratio} samples/s of optimum "
                  f"{r['optimum']:,.1f}, {r['measured']} measured, {r['trials']} trials, "
                  f"{r['wall_s']:.0f} s, load {r['load'][0]:.1f}-{r['load'][1]:.1f}, exit "
                  f"{r['exit']}: {r['knobs']}", flush=True)
            if args.out:  # the tables so far, after every run
                Path(args.out).write_text(tables(header, runs))
    print(tables(header, runs))


def tables(header: str, runs: dict[str, list[dict]]) -> str:
    """The header and ``print_table`` of every landscape with runs, as printed."""
    import contextlib
    import io
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print(header)
        for name, done in runs.items():
            if done:
                print_table(name, done)
    return buffer.getvalue()


if __name__ == "__main__":
    main()
