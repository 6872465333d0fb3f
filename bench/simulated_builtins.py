"""Benchmark: every built-in besides ddpm on the simulated H200, on CPU, at its acceptance budget.

Question: does each simulated built-in (``tests/simulated_builtins.py``: chargpt, headpose,
classifier299, segmentation3d, classifier, each with the step costs measured for it) answer
within the time budget ``bench/gpu_check.sh``'s acceptance gives it on a card?

Design: per workload one ``python -m tuner run --workload tests.simulated_builtins:<name>
--device cuda --time-budget B --trials 3 --confirm 0 --probe off`` subprocess, as
``bench/gpu_acceptance.py --quick`` runs a built-in that is not ddpm (``QUICK_BUDGETS_S``: B =
45-60 s; ``QUICK_TRIALS``: 3 trials; ``QUICK_CONFIRM``: 0; no memory probe), with
``TUNER_DEVICE_HOOK=tests.simulated_gpu:install``, each in its own results directory. Read
from each leaderboard: the answer (``tuner.winner.best``; a trial the budget stopped after a
window counts, as the acceptance counts it), its share of the model's machine limit
(``SimulatedH200.machine_limit``), the trials, and the wall time against B plus
``tuner.budget.BUDGET_GRACE_S``.

Target (printed, never pass/fail): every workload answers, within its budget and grace.

Usage:
  nice python bench/simulated_builtins.py [--workloads NAME ...] [--out FILE] [--logs DIR]
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

from gpu_acceptance import QUICK_BUDGETS_S, QUICK_CONFIRM  # noqa: E402
from landscapes import bench_start, run_logged  # noqa: E402

from tests import simulated_gpu  # noqa: E402
from tests.simulated_builtins import BUILTINS  # noqa: E402
from tuner import leaderboard, winner  # noqa: E402
from tuner.budget import BUDGET_GRACE_S  # noqa: E402
from tuner.knobs import knob_text  # noqa: E402

TRIALS = 3
"""``bench/gpu_acceptance.py``'s ``QUICK_TRIALS`` for a workload other than ddpm."""


def command(name: str, results: Path) -> list[str]:
    """The ``tuner run`` of the simulated ``name`` as the acceptance runs the built-in."""
    return [sys.executable, "-m", "tuner", "run", "--workload",
            f"tests.simulated_builtins:{name}", "--device", "cuda", "--time-budget",
            f"{QUICK_BUDGETS_S[name]:g}", "--trials", str(TRIALS), "--confirm",
            str(QUICK_CONFIRM), "--probe", "off", "--results", str(results)]


def run_one(name: str, logs: Path) -> list[str]:
    """Run the simulated ``name`` once; the lines printed for it."""
    workload = BUILTINS[name]
    results = Path(tempfile.mkdtemp(prefix=f"simulated-{name}-"))
    log = logs / f"simulated-{name}.log"
    proc, wall_s, load_before = run_logged(command(name, results),
                                           simulated_gpu.hook_environment(), log)
    rows = (leaderboard.read(results, workload=workload.name).to_pylist()
            if (results / "leaderboard").exists() else [])
    answer = winner.best(rows) if rows else None
    budget_s = QUICK_BUDGETS_S[name]
    limit = workload.machine_limit().samples_per_sec
    within = wall_s <= budget_s + BUDGET_GRACE_S
    head = (f"{name}: exit {proc.returncode}, wall {wall_s:.1f} s of a {budget_s:g}-s budget "
            f"(+{BUDGET_GRACE_S:g} s grace: {'within' if within else 'OVER'}), load "
            f"{load_before:.1f}-{os.getloadavg()[0]:.1f}, {len(rows)} rows")
    if answer is None:
        return [head, "  answer: none (no trial measured a window)"]
    return [head, f"  answer: {answer.samples_per_sec:,.1f} samples/sec at "
                  f"{knob_text(answer.row)} ({answer.samples_per_sec / limit:.2f} of the "
                  f"model's machine limit {limit:,.1f})"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=sorted(BUILTINS),
                        default=list(BUILTINS))
    parser.add_argument("--out", type=Path, default=None, help="also write the output here")
    parser.add_argument("--logs", type=Path, default=None,
                        help="where the runs' logs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    logs, lines = bench_start("simulated built-ins", args.logs)
    for name in args.workloads:
        block = run_one(name, logs)
        lines += block
        print("\n".join(block), flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
