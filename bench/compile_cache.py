"""Benchmark: torch.compile's first step cold and warm, through the run's shared compile cache.

For each workload, at the tiny scale on the CPU, one trial (``tuner.trial.harness.run_trial``,
as ``tuner profile`` runs one) per case, each in a NEW Python process:
  * cold: compile on, its compile cache a fresh empty directory;
  * warm: compile on, the same directory the cold process filled
    (``TrialSettings.compile_cache_dir``, as every trial process of a run shares
    ``<results>/compile-cache``);
  * eager: compile off.

Prints a table: each case's first step (s), ``compile_s`` (the first step beyond a steady one),
samples/sec and the recompiles counted; then warm's first step as a share of cold's
(target: <= 30 %) and the compiled over the eager rate. Figures, no pass/fail.

Usage: python bench/compile_cache.py [--workloads ddpm,chargpt] [--knobs JSON]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time

CASES = ("cold", "warm", "eager")


def child(workload_name: str, compile_mode: str, cache_dir: str, knobs_json: str) -> None:
    """One trial in this process; prints its row's figures as one JSON line."""
    from tuner.option_checks import checked_data, local_cpus
    from tuner.settings import MEASUREMENT_DEFAULTS, TrialSettings
    from tuner.trial.harness import run_trial
    from tuner.workload_loader import resolve

    workload = resolve(workload_name)
    knobs, _ = workload.baseline.updated({**json.loads(knobs_json), "compile": compile_mode})
    warmup, windows, window_s = MEASUREMENT_DEFAULTS["tiny"]
    settings = TrialSettings(scale="tiny", device="cpu",
                             data_dir=str(checked_data(workload, None, "tiny")[0]),
                             warmup_steps=warmup, windows=windows, window_s=window_s,
                             breakdown_steps=0, compile_cache_dir=cache_dir)
    row = run_trial(workload, knobs, settings, cpus=local_cpus())
    keys = ("status", "error", "first_step_s", "compile_s", "samples_per_sec",
            "step_time_ms_p50", "recompiles", "compile_fallback", "batch_size", "amp")
    print("ROW " + json.dumps({k: row.get(k) for k in keys}), flush=True)


def one_case(workload: str, case: str, cache_dir: str, knobs_json: str) -> dict:
    mode = "off" if case == "eager" else "default"
    cmd = [sys.executable, __file__, "--child", workload, mode, cache_dir, knobs_json]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall_s = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    if proc.returncode != 0 or not lines:
        print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n", flush=True)
        return {"status": f"exit {proc.returncode}", "wall_s": wall_s}
    row = json.loads(lines[-1][4:])
    row["wall_s"] = wall_s
    print(f"{workload} {case}: {json.dumps(row)}", flush=True)
    return row


def _num(value, fmt: str) -> str:
    """``value`` in ``fmt`` (a width, then a precision and type: '10.1f'); '-' as wide for None."""
    width = int(re.match(r"\d+", fmt).group())
    return "-".rjust(width) if value is None else format(value, fmt)


def table(rows: dict[tuple[str, str], dict]) -> None:
    print(f"\n{'workload':10} {'case':6} {'status':8} {'first step s':>12} {'compile_s':>10} "
          f"{'samples/sec':>12} {'recompiles':>10} {'process s':>10}")
    for (workload, case), row in rows.items():
        print(f"{workload:10} {case:6} {str(row.get('status')):8} "
              f"{_num(row.get('first_step_s'), '12.1f')} {_num(row.get('compile_s'), '10.1f')} "
              f"{_num(row.get('samples_per_sec'), '12.1f')} "
              f"{_num(row.get('recompiles'), '10d')} {row['wall_s']:10.1f}")
    for workload in dict.fromkeys(w for w, _ in rows):
        cold, warm, eager = (rows[(workload, c)] for c in CASES)
        if cold.get("first_step_s") and warm.get("first_step_s"):
            print(f"{workload}: warm first step = {warm['first_step_s'] / cold['first_step_s']:.0%}"
                  f" of cold ({warm['first_step_s']:.1f} s vs {cold['first_step_s']:.1f} s)")
        if cold.get("samples_per_sec") and eager.get("samples_per_sec"):
            compiled = max(r.get("samples_per_sec") or 0 for r in (cold, warm))
            print(f"{workload}: compiled / eager samples/sec = "
                  f"{compiled / eager['samples_per_sec']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="ddpm,chargpt")
    parser.add_argument("--knobs", default="{}", help="knobs over the baseline, as JSON")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    rows = {}
    for workload in args.workloads.split(","):
        with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache_dir:
            for case in CASES:
                rows[(workload, case)] = one_case(workload, case, cache_dir, args.knobs)
    table(rows)


if __name__ == "__main__":
    main()
