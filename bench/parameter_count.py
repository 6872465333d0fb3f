"""Benchmark: what the plan's parameter count costs at a run's start, per built-in workload.

The plan's ``model:`` line counts the parameters at the run's scale and, beside a tiny run's,
at full. Before tuner 0.3 both counts built the model on the CPU; now each is counted on
torch's ``meta`` device (``tuner.workload_calls.meta_parameter_count``), and the full-size model
is never built on the CPU for it. For each workload and scale this prints the median seconds
of a CPU build + count and of a meta build + count over ``--reps`` (each in this process, after
one build of each to import and warm up), the parameters, and the memory a CPU build holds
(fp32 parameters and buffers, MiB). The saving of a default CPU run's start is the CPU column
of both scales less the meta column of both.

Usage:
  python bench/parameter_count.py [--reps 5] [--workloads ddpm classifier ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.workload_calls import meta_parameter_count  # noqa: E402
from tuner.workload_loader import BUILTINS, resolve  # noqa: E402


def cpu_count(workload, scale: str) -> tuple[int, float]:
    """(parameters, MiB of parameters and buffers) of a model built on the CPU."""
    model = workload.build_model(scale)
    held = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    return sum(p.numel() for p in model.parameters()), held / 2**20


def median_s(call, reps: int) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workloads", nargs="+", default=sorted(BUILTINS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'workload':<16}{'scale':<6}{'parameters':>13}{'CPU MiB':>9}{'CPU s':>8}"
          f"{'meta s':>8}")
    saved = {}
    for name in args.workloads:
        workload = resolve(name)
        for scale in ("full", "tiny"):
            params, mib = cpu_count(workload, scale)
            assert meta_parameter_count(workload, scale) == params, (name, scale)
            cpu_s = median_s(lambda: cpu_count(workload, scale), args.reps)
            meta_s = median_s(lambda: meta_parameter_count(workload, scale), args.reps)
            saved[name] = saved.get(name, 0.0) + cpu_s - meta_s
            print(f"{name:<16}{scale:<6}{params:>13,}{mib:>9.1f}{cpu_s:>8.3f}{meta_s:>8.3f}",
                  flush=True)
    print("a default CPU run's start (tiny + full counted), seconds saved: " + ", ".join(
        f"{name} {s:.2f}" for name, s in saved.items()))


if __name__ == "__main__":
    main()
