"""Benchmark: the GPU plan on a simulated H200, on CPU.

Question: with tuner's own planner and harness on a card whose costs are the H200's measured
ones (``tests/simulated_gpu.py``: the card; ``tests/simulated_h200.py``: a ddpm-like workload,
its cost model and sources), does a 300-s run screen enough configurations, reach the card's
limit, beat doubling the batch under a 12-GB cap, and price its trials right?

Design: two ``python -m tuner run --workload tests.simulated_h200:ddpm --device cuda
--time-budget B`` subprocesses (the default budget 300 s), one without a memory limit and one
with ``--max-memory 12GB``, each in its own results directory, with
``TUNER_DEVICE_HOOK=tests.simulated_gpu:install`` (every process of the run, Ray's workers
included, sees the card). Read from each leaderboard:

* screened: search-phase rows (references included) with at least one window;
* answer: ``tuner.winner.best`` (what ``best`` prints) and its knobs;
* machine limit: ``SimulatedH200.machine_limit()`` under the run's memory limit, the model's
  best eager configuration (compile is left out of a 300-s budget, and the measured 5,304
  samples/sec was the eager limit too); doubling: ``SimulatedH200.doubling_answer()``;
* price error per kind of trial: ``bench/price_error.py``'s table
  (``tuner.price_errors.price_errors``: ``|priced_s / wall - 1|``).

Targets (printed beside the figures, never pass/fail): >= 40 configurations screened;
answer >= 0.9 x the machine limit; under the cap, answer >= 1.1 x the doubling answer; price
error per kind median <= 10 %, 90th percentile <= 25 %.

Steps are slept in real time (45 ms and up): on a machine loaded beyond its cores a step can
overrun its modelled time and read slower; the load is printed with each run.

Usage:
  nice python bench/simulated_h200.py [--time-budget 300] [--out FILE] [--logs DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from landscapes import bench_start, run_logged  # noqa: E402
from price_error import table as price_table  # noqa: E402

from tests import simulated_gpu  # noqa: E402
from tests.simulated_h200 import SimulatedH200, ddpm  # noqa: E402
from tuner import leaderboard, winner  # noqa: E402
from tuner.knobs import knob_text  # noqa: E402
from tuner.price_errors import price_errors  # noqa: E402
from tuner.settings import MemoryLimit  # noqa: E402
from tuner.status import MEASURED, Phase, phase_of  # noqa: E402

SCREENED_TARGET = 40
LIMIT_TARGET = 0.9
DOUBLING_TARGET = 1.1
MEDIAN_TARGET, P90_TARGET = 0.10, 0.25
CAP = "12GB"


def run_once(label: str, extra: list[str], budget_s: int, logs: Path) -> dict:
    """One ``tuner run`` on the simulated card with ``extra`` options; its figures."""
    results = Path(tempfile.mkdtemp(prefix=f"simulated-h200-{label}-"))
    command = [sys.executable, "-m", "tuner", "run", "--workload", "tests.simulated_h200:ddpm",
               "--device", "cuda", "--time-budget", str(budget_s), "--results", str(results),
               *extra]
    log = logs / f"simulated-h200-{label}.log"
    proc, wall_s, load_before = run_logged(command, simulated_gpu.hook_environment(), log)
    rows = leaderboard.read(results, workload=ddpm.name).to_pylist() if \
        (results / "leaderboard").exists() else []
    search = [r for r in rows if phase_of(r) == Phase.SEARCH]
    answer = winner.best(rows) if rows else None
    return {"label": label, "exit": proc.returncode, "wall_s": wall_s, "rows": rows,
            "answer": answer.samples_per_sec if answer else None,
            "knobs": knob_text(answer.row) if answer else "-",
            "screened": sum(1 for r in search if r["status"] in MEASURED
                            and (r["windows"] or 0) >= 1),
            "load": (load_before, os.getloadavg()[0]), "log": log}


def report(run: dict, card: SimulatedH200) -> list[str]:
    """The lines printed for one run against the model of ``card``."""
    limit, doubling = card.machine_limit(), card.doubling_answer()
    answer = run["answer"]
    out = [f"== {run['label']}: exit {run['exit']}, wall {run['wall_s']:.0f} s, load "
           f"{run['load'][0]:.1f}-{run['load'][1]:.1f}, {len(run['rows'])} rows (log "
           f"{run['log']})",
           f"configurations screened: {run['screened']} (target >= {SCREENED_TARGET})",
           f"simulated machine limit: {limit.samples_per_sec:,.1f} samples/sec at "
           f"{knob_text(limit.knobs.to_dict())}",
           f"doubling answer: {doubling.samples_per_sec:,.1f} samples/sec at "
           f"{knob_text(doubling.knobs.to_dict())}"]
    if answer is None:
        out.append("answer: none (no trial succeeded)")
    else:
        out += [f"answer: {answer:,.1f} samples/sec at {run['knobs']}",
                f"answer / machine limit: {answer / limit.samples_per_sec:.3f} "
                f"(target >= {LIMIT_TARGET})",
                f"answer / doubling answer: {answer / doubling.samples_per_sec:.2f}"
                + (f" (target >= {DOUBLING_TARGET})" if card.memory_limit_mb < ddpm.memory_limit_mb
                   else "")]
    out += ["price error per kind (|priced / wall - 1| of ok rows):", *price_table(run["rows"])]
    errors = price_errors(run["rows"])
    over = [e.kind for e in errors if e.median > MEDIAN_TARGET or e.p90 > P90_TARGET]
    verdict = ("no ok row with a price" if not errors else "met by every kind" if not over
               else "missed by " + ", ".join(over))
    out.append(f"price error targets (median <= 10 %, p90 <= 25 %): {verdict}")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-budget", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None, help="also write the output here")
    parser.add_argument("--logs", type=Path, default=None,
                        help="where the runs' logs go (default: a temporary directory)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs, lines = bench_start("simulated H200", args.logs,
                              f"--time-budget {args.time_budget}, ")
    cap_mb = MemoryLimit.parse(CAP).resolve_mib(simulated_gpu.TOTAL_MB)
    for label, extra, card in (("uncapped", [], SimulatedH200()),
                               ("max-memory-12GB", ["--max-memory", CAP],
                                SimulatedH200(memory_limit_mb=cap_mb))):
        run = run_once(label, extra, args.time_budget, logs)
        block = ["", *report(run, card)]
        lines += block
        print("\n".join(block), flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
