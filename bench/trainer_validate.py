"""Does the answer hold in the framework's own trainer? Trains a run's best configuration and
its baseline in ``Trainer.train()`` (``Workload.trainer_samples_per_sec``), interleaved round
after round, and prints each rate beside the trial's, the trainer/trial ratio of each, and the
speed-up in the trainer against the speed-up the run reported.

    python bench/trainer_validate.py --workload bench/hf_gpt2.py:trainer \\
        --results /tmp/hf-results --rounds 2 --timed-s 30

Each measurement runs enough optimizer steps for about ``--timed-s`` seconds of timed steps at
the trial's rate (at least ``MIN_TIMED_STEPS``), after ``warmup_steps_of(steps)`` warm-up
steps, with the torch threads the trial trained on (its ``torch_threads``). ``--harness``
re-measures each configuration with tuner's own harness in this process beside each Trainer
run (after it in odd rounds, before it in even ones), so that the Trainer is compared with the
trial's loop under the same machine load.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from tuner.knobs import Knobs
from tuner.leaderboard import read
from tuner.settings import default_cache_dir
from tuner.winner import best
from tuner.workload_loader import resolve

MIN_TIMED_STEPS = 2
"""Timed optimizer steps of a measurement at the least."""


def steps_for(row: dict, timed_s: float) -> int:
    """Optimizer steps giving about ``timed_s`` seconds of timed steps at the row's rate."""
    from tuner.integrations.transformers import warmup_steps_of
    per_step = row["batch_size"] * (row.get("grad_accum") or 1)
    timed = max(MIN_TIMED_STEPS, math.ceil(timed_s * row["samples_per_sec"] / per_step))
    steps = timed + 1
    while steps - warmup_steps_of(steps) < timed:
        steps += 1
    return steps


def measure(workload, row: dict, device: str, timed_s: float) -> tuple[float, float]:
    """(trainer samples/sec, wall seconds) of one ``trainer_samples_per_sec`` call."""
    knobs = Knobs.from_dict(row, strict=False)
    saved = torch.get_num_threads()
    if row.get("torch_threads"):
        torch.set_num_threads(row["torch_threads"])
    start = time.perf_counter()
    try:
        rate = workload.trainer_samples_per_sec(knobs, steps=steps_for(row, timed_s),
                                                device=device, scale=row["scale"])
    finally:
        torch.set_num_threads(saved)
    return rate, time.perf_counter() - start


def harness_rate(workload, row: dict, device: str, data_dir: str) -> float:
    """Samples/sec of one trial of the row's knobs run here by tuner's harness (1 warm-up
    step, 3 windows of 2 s, the row's trial CPUs), in the same process and load as the
    Trainer."""
    from tuner.settings import TrialSettings
    from tuner.trial.harness import run_trial
    settings = TrialSettings(scale=row["scale"], device=device, data_dir=data_dir,
                             warmup_steps=1, windows=3, window_s=2.0)
    result = run_trial(workload, Knobs.from_dict(row, strict=False), settings,
                       cpus=int(row["trial_cpus"]) if row.get("trial_cpus") else None)
    if result["status"] != "ok":
        raise SystemExit(f"the harness trial failed: {result['error']}")
    return result["samples_per_sec"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", required=True, help="the run's --workload")
    parser.add_argument("--results", required=True, help="the run's --results")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--timed-s", type=float, default=30.0,
                        help="seconds of timed steps per measurement, at the trial's rate")
    parser.add_argument("--harness", action="store_true",
                        help="also re-measure each configuration with tuner's harness here, "
                        "right after its Trainer run (the ratio then compares like with like)")
    opts = parser.parse_args()
    workload = resolve(opts.workload)
    table = read(opts.results, workload=workload.name)
    answer = best(table)
    if answer is None:
        raise SystemExit(f"no answer for {workload.name} in {opts.results}")
    rows = [r for r in table.to_pylist() if r["run_id"] == answer.row["run_id"]
            and r["status"] == "ok"]
    baseline = [r for r in rows if r["reference"] == "baseline"]
    trial = {"answer": dict(answer.row),
             "baseline": {**baseline[-1], "samples_per_sec": statistics.geometric_mean(
                 [r["samples_per_sec"] for r in baseline])}}
    print(f"{workload.name}: run {answer.row['run_id']}, device {opts.device}")
    rates: dict[str, list[float]] = {"baseline": [], "answer": []}
    harness: dict[str, list[float]] = {"baseline": [], "answer": []}
    data_dir = str(workload.prepare_default_data(default_cache_dir() / "data", "tiny"))
    for round_ in range(1, opts.rounds + 1):
        for label in ("baseline", "answer"):
            if opts.harness and round_ % 2 == 0:  # ABBA: the harness first in even rounds
                harness[label].append(harness_rate(workload, trial[label], opts.device,
                                                   data_dir))
            rate, wall_s = measure(workload, trial[label], opts.device, opts.timed_s)
            rates[label].append(rate)
            row = trial[label]
            print(f"round {round_} {label:8s} Trainer.train() {rate:8.2f} samples/sec "
                  f"(trial {row['samples_per_sec']:.2f}; ratio {rate / row['samples_per_sec']:.3f};"
                  f" {wall_s:.0f} s)  bs={row['batch_size']} acc={row.get('grad_accum') or 1} "
                  f"threads={row.get('torch_threads')}", flush=True)
            if opts.harness:
                if round_ % 2:
                    harness[label].append(harness_rate(workload, row, opts.device, data_dir))
                here = harness[label][-1]
                print(f"round {round_} {label:8s} harness here    {here:8.2f} samples/sec "
                      f"(Trainer/harness {rate / here:.3f})", flush=True)
    for label in ("baseline", "answer"):
        mean = statistics.geometric_mean(rates[label])
        print(f"{label}: Trainer.train() {mean:.2f} samples/sec (geometric mean of "
              f"{len(rates[label])}), trial {trial[label]['samples_per_sec']:.2f}: "
              f"ratio {mean / trial[label]['samples_per_sec']:.3f}")
        if harness[label]:
            here = statistics.geometric_mean(harness[label])
            print(f"{label}: harness here {here:.2f} samples/sec: Trainer/harness "
                  f"{mean / here:.3f}")
    in_trainer = (statistics.geometric_mean(rates["answer"])
                  / statistics.geometric_mean(rates["baseline"]))
    in_trials = trial["answer"]["samples_per_sec"] / trial["baseline"]["samples_per_sec"]
    print(f"speed-up in Trainer.train(): {in_trainer:.2f}x; in the trials: {in_trials:.2f}x")


if __name__ == "__main__":
    main()
