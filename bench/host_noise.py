"""Benchmark: the host's own noise floor, with nothing of the tuner's running.

One thread does a fixed amount of work (384 x 384 fp32 matmuls, torch) over and over; its rate is
read every ``--window-s`` seconds for ``--seconds``. On a quiet dedicated core the windows agree
within a fraction of a percent; on a shared VM whose host is busy the same work runs faster or
slower from one window to the next, and no measurement taken on it can repeat more closely than
this. Prints each window's rate, then min, max, max/min and the CV (stdev / mean) over windows,
which ``bench/overhead.py --runs N`` sets beside the CV of the tuner's final answer.

Usage: python bench/host_noise.py [--seconds 60] [--window-s 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def host_noise(seconds: float = 60.0, window_s: float = 5.0, verbose: bool = True) -> dict:
    """Rates (matmuls/sec) of fixed single-thread work in windows of ``window_s`` over
    ``seconds``, and their CV (%) and max/min; torch's thread count is put back after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(384, 384), torch.randn(384, 384)
        end, rates = time.monotonic() + seconds, []
        while time.monotonic() < end or len(rates) < 2:
            t0, done = time.perf_counter(), 0
            while time.perf_counter() - t0 < window_s:
                for _ in range(20):
                    torch.mm(a, b)
                done += 20
            rates.append(done / (time.perf_counter() - t0))
            if verbose:
                print(f"  {time.strftime('%H:%M:%S')} {rates[-1]:,.0f} matmuls/sec", flush=True)
    finally:
        torch.set_num_threads(threads)
    return {"rates": rates, "cv_pct": 100 * statistics.stdev(rates) / statistics.mean(rates),
            "max_over_min": max(rates) / min(rates)}


def summary(noise: dict) -> str:
    rates = noise["rates"]
    return (f"host noise floor: fixed single-thread work, {len(rates)} windows: min "
            f"{min(rates):,.0f}, max {max(rates):,.0f} matmuls/sec, max/min "
            f"{noise['max_over_min']:.2f}, CV {noise['cv_pct']:.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--window-s", type=float, default=5.0)
    args = parser.parse_args()
    if args.seconds <= 0 or args.window_s <= 0:
        parser.error(f"--seconds {args.seconds}, --window-s {args.window_s}: both must be > 0")
    print(summary(host_noise(args.seconds, args.window_s)))


if __name__ == "__main__":
    main()
