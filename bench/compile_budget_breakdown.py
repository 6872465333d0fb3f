"""The ``--time-budget`` a run's summary names for a compiled finalist it could not measure,
part by part (``tuner.compile_finalists.budget_need``), from the run's stored rows.

    python bench/compile_budget_breakdown.py --workload chargpt --results R --time-budget 900

The plan is rebuilt from the same options (``--device cpu``), the follow-ups' time taken to
end at the run's last row (its deadline is not stored); the compiled configuration is
the winner's knobs compiled in the plan's finalist mode, as ``tuner.summary.compile_line``
prices it (with the winner's and the references' rounds where no round ran).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace

import tuner.compile_finalists as compiling
import tuner.leaderboard as leaderboard
import tuner.winner as winner
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.settings import RunOptions
from tuner.status import Phase, phase_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--time-budget", type=float, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        plan = make_plan(RunOptions(workload=args.workload, device="cpu", results=scratch,
                                    time_budget_s=args.time_budget))
    # the run's deadline is not stored: the follow-ups' time ends at its last row's end
    plan = replace(plan, settings=replace(plan.settings, deadline_unix_s=None))
    rows = sorted(leaderboard.read(args.results, workload=plan.workload.name).to_pylist(),
                  key=lambda r: r["started_at"])
    mode = plan.compile_at_finalists
    best = winner.best(rows)
    remeasured = any(phase_of(r) == Phase.REMEASURE for r in rows)
    also = [] if remeasured else [best.knobs, *(Knobs.from_dict(r, strict=False)
                                                for r in rows if r.get("reference"))]
    knobs = best.knobs.replace(compile=mode)
    print(f"compiled configuration: {knobs}")
    print(f"follow-up share {plan.followup_share():.3f} (held for its compiles: "
          f"{compiling.compile_reserve_s(plan):.1f} s)")
    print(compiling.budget_need(plan, rows, knobs, also).text())


if __name__ == "__main__":
    main()
