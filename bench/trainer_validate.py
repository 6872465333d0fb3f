"""Does the answer hold in the framework's own trainer? Trains a run's best configuration and
its baseline in the workload's trainer (``Workload.trainer_samples_per_sec``: Transformers'
``Trainer.train()``, Lightning's ``Trainer.fit()``), interleaved round after round, and prints
each rate beside the trial's, the trainer/trial ratio of each, and the speed-up in the trainer
against the speed-up the run reported.

    python bench/trainer_validate.py --workload bench/hf_gpt2.py:trainer \\
        --results /tmp/hf-results --rounds 2 --timed-s 30
    python bench/trainer_validate.py --workload bench/lit_example.py:workload \\
        --results /tmp/lit-results --rounds 4 --timed-s 4 --harness

Each measurement runs enough optimizer steps for about ``--timed-s`` seconds of timed steps at
the trial's rate (at least ``MIN_TIMED_STEPS``) after the trainer's warm-up steps (Transformers:
``warmup_steps_of(steps)``; Lightning: the scale's, ``tuner.settings.MEASUREMENT_DEFAULTS``),
on the torch threads and ``OMP_NUM_THREADS`` the trial trained with, as ``tuner validate``
sets them (``tuner.checks.training_threads``). Each side trains once, not counted, before the
rounds (as ``validate`` does, ``tuner.checks.TRAINER_WARMUP_ROUNDS``). ``--harness``
re-measures each configuration with tuner's own harness in this process beside each trainer
run (after it in odd rounds, before it in even ones), with the trial's measurement settings,
so that the trainer is compared with the trial's loop in the same process under the same
machine load; each line also gives the process's CPU cores busy while it measured.

``--step-cpu N`` (Lightning) compares the work of one step instead of wall-clock rates: the
answer's knobs on one torch thread, N optimizer steps of the harness's step
(``tuner.trial.steppers.Stepper``) then N of ``Trainer.fit()``, ``--rounds`` times, each step's
CPU seconds (``getrusage``) and minor page faults. On one thread CPU time counts the step's work
and not OpenMP threads spin-waiting for a core, so the figure holds on a loaded machine.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

from tuner.knobs import Knobs
from tuner.leaderboard import read
from tuner.settings import MEASUREMENT_DEFAULTS, default_cache_dir
from tuner.winner import best
from tuner.workload_loader import resolve

MIN_TIMED_STEPS = 2
"""Timed optimizer steps of a measurement at the least."""


def is_lightning(workload) -> bool:
    """Whether ``workload`` trains in Lightning's ``Trainer.fit()`` (``from_lightning``)."""
    return getattr(workload, "trainer_name", "") == "Lightning Trainer.fit()"


def steps_for(workload, row: dict, timed_s: float) -> int:
    """Optimizer steps giving about ``timed_s`` seconds of timed steps at the row's rate, after
    the trainer's warm-up steps."""
    per_step = row["batch_size"] * (row.get("grad_accum") or 1)
    timed = max(MIN_TIMED_STEPS, math.ceil(timed_s * row["samples_per_sec"] / per_step))
    if is_lightning(workload):
        return MEASUREMENT_DEFAULTS[row["scale"]][0] + timed
    from tuner.integrations.transformers import warmup_steps_of
    steps = timed + 1
    while steps - warmup_steps_of(steps) < timed:
        steps += 1
    return steps


def busy_cores(cpu_s: float, wall_s: float) -> float:
    """CPU cores this process (and its children) kept busy over ``wall_s`` seconds."""
    return cpu_s / wall_s if wall_s > 0 else 0.0


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(workload, row: dict, device: str, timed_s: float) -> tuple[float, float, float]:
    """(trainer samples/sec, wall seconds, busy cores) of one ``trainer_samples_per_sec``
    call, on the trial's threads as ``tuner validate`` sets them."""
    from tuner.checks import training_threads
    from tuner.trial.validate import same_threads
    knobs = Knobs.from_dict(row, strict=False)
    cpu0, start = own_cpu_s(), time.perf_counter()
    with same_threads(training_threads(row), row.get("omp_num_threads")):
        rate = workload.trainer_samples_per_sec(knobs, steps=steps_for(workload, row, timed_s),
                                                device=device, scale=row["scale"])
    wall_s = time.perf_counter() - start
    return rate, wall_s, busy_cores(own_cpu_s() - cpu0, wall_s)


def harness_rate(workload, row: dict, device: str, data_dir: str) -> tuple[float, float]:
    """(samples/sec, busy cores) of one trial of the row's knobs run here by tuner's harness
    (the scale's warm-up steps, windows and window length, the row's trial CPUs), in the same
    process and load as the trainer. Busy cores: the trial's own CPU seconds per wall second
    while it measured (``cpu_s_per_sample`` x samples/sec)."""
    from tuner.settings import TrialSettings
    from tuner.trial.harness import run_trial
    warmup, windows, window_s = MEASUREMENT_DEFAULTS[row["scale"]]
    settings = TrialSettings(scale=row["scale"], device=device, data_dir=data_dir,
                             warmup_steps=warmup, windows=windows, window_s=window_s)
    result = run_trial(workload, Knobs.from_dict(row, strict=False), settings,
                       cpus=int(row["trial_cpus"]) if row.get("trial_cpus") else None)
    if result["status"] != "ok":
        raise SystemExit(f"the harness trial failed: {result['error']}")
    rate = result["samples_per_sec"]
    return rate, (result.get("cpu_s_per_sample") or 0.0) * rate


def run_rows(workload, results: str) -> dict[str, dict]:
    """The answer's row and its run's baseline (its rows' geometric mean), by label."""
    table = read(results, workload=workload.name)
    answer = best(table)
    if answer is None:
        raise SystemExit(f"no answer for {workload.name} in {results}")
    rows = [r for r in table.to_pylist() if r["run_id"] == answer.row["run_id"]
            and r["status"] == "ok"]
    baseline = [r for r in rows if r["reference"] == "baseline" and r.get("ceiling") is None]
    return {"answer": dict(answer.row),
            "baseline": {**baseline[-1], "samples_per_sec": statistics.geometric_mean(
                [r["samples_per_sec"] for r in baseline])}}


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
                        "right after its trainer run (the ratio then compares like with like)")
    parser.add_argument("--step-cpu", type=int, default=0, metavar="N",
                        help="Lightning: CPU time per step of the harness and of Trainer.fit(), "
                        "N steps each per round, on one thread (see above)")
    opts = parser.parse_args()
    workload = resolve(opts.workload)
    trial = run_rows(workload, opts.results)
    if opts.step_cpu:
        from step_cpu import compare_step_cpu
        compare_step_cpu(workload, trial["answer"], opts.step_cpu, opts.rounds)
        return
    name = getattr(workload, "trainer_name", "Trainer.train()")
    print(f"{workload.name}: run {trial['answer']['run_id']}, device {opts.device}, "
          f"{name}; load {os.getloadavg()[0]:.2f}")
    for label in ("baseline", "answer"):  # each side once, not counted (as validate does)
        measure(workload, trial[label], opts.device, opts.timed_s)
    rates: dict[str, list[float]] = {"baseline": [], "answer": []}
    harness: dict[str, list[float]] = {"baseline": [], "answer": []}
    data_dir = str(workload.prepare_default_data(default_cache_dir() / "data", "tiny"))
    for round_ in range(1, opts.rounds + 1):
        for label in ("baseline", "answer"):
            row = trial[label]
            if opts.harness and round_ % 2 == 0:  # ABBA: the harness first in even rounds
                harness[label].append(harness_line(workload, row, opts, data_dir, round_, label))
            rate, wall_s, cores = measure(workload, row, opts.device, opts.timed_s)
            rates[label].append(rate)
            print(f"round {round_} {label:8s} trainer      {rate:10.1f} samples/sec "
                  f"(trial {row['samples_per_sec']:.1f}; ratio {rate / row['samples_per_sec']:.3f};"
                  f" {wall_s:.0f} s, {cores:.2f} cores busy)  bs={row['batch_size']} "
                  f"acc={row.get('grad_accum') or 1} threads={row.get('torch_threads')} "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
            if opts.harness and round_ % 2:
                harness[label].append(harness_line(workload, row, opts, data_dir, round_, label))
            if opts.harness:
                print(f"round {round_} {label:8s} trainer/harness {rate / harness[label][-1]:.3f}",
                      flush=True)
    summary(trial, rates, harness, name)


def harness_line(workload, row: dict, opts, data_dir: str, round_: int, label: str) -> float:
    """One harness trial here, printed; returns its samples/sec."""
    rate, cores = harness_rate(workload, row, opts.device, data_dir)
    print(f"round {round_} {label:8s} harness here {rate:10.1f} samples/sec ({cores:.2f} cores "
          f"busy) load {os.getloadavg()[0]:.2f}", flush=True)
    return rate


def summary(trial: dict, rates: dict, harness: dict, name: str) -> None:
    for label in ("baseline", "answer"):
        mean = statistics.geometric_mean(rates[label])
        print(f"{label}: {name} {mean:.1f} samples/sec (geometric mean of "
              f"{len(rates[label])}), trial {trial[label]['samples_per_sec']:.1f}: "
              f"ratio {mean / trial[label]['samples_per_sec']:.3f}")
        if harness[label]:
            here = statistics.geometric_mean(harness[label])
            pairs = [t / h for t, h in zip(rates[label], harness[label])]
            print(f"{label}: harness here {here:.1f} samples/sec: trainer/harness "
                  f"{mean / here:.3f} (rounds {', '.join(f'{p:.3f}' for p in pairs)}); "
                  f"harness here/trial {here / trial[label]['samples_per_sec']:.3f}")
    in_trainer = (statistics.geometric_mean(rates["answer"])
                  / statistics.geometric_mean(rates["baseline"]))
    in_trials = trial["answer"]["samples_per_sec"] / trial["baseline"]["samples_per_sec"]
    print(f"speed-up in {name}: {in_trainer:.2f}x; in the trials: {in_trials:.2f}x")


if __name__ == "__main__":
    main()
