"""Benchmark: the same configuration measured several times; how much the figure moves.

For each configuration (default: the workload's references, clamped to the device as a run clamps
them, e.g. ddpm's 'baseline' and 'recommended'), ``tuner.trial.harness.run_trial`` measures it
``--repeats`` times in this process, with the measurement settings a real run uses at that scale
(``tuner.plan.MEASUREMENT_DEFAULTS``, overridable) and the torch threads the tuner gives the trial
(a local run's trial has the machine's CPUs; less one per DataLoader worker:
``tuner.trial.harness.training_threads``; ``--threads N`` fixes them). Repeats are interleaved (A,
B, A, B, ...) so that load drift on a shared machine spreads over every configuration alike.

Prints (figures, no pass/fail), per configuration: each repeat's samples/sec, its within-trial
``samples_per_sec_cv`` (spread over the trial's windows), wall time and load average; then the
median, mean and the CV across repeats (stdev / mean), and max / min. The CV across repeats is
the noise a single trial's figure carries when the tuner ranks configurations; the within-trial
CV is what a trial can see of it by itself.

Usage: python bench/repeatability.py [--workload ddpm] [--repeats 5]
           [--config baseline --config recommended] [--knobs '{"batch_size": 16}']
           [--threads N] [--warmup-steps N] [--windows N] [--window-s S]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from tuner.knobs import Knobs
from tuner.option_checks import local_cpus
from tuner.settings import MEASUREMENT_DEFAULTS, TrialSettings
from tuner.trial.harness import run_trial
from tuner.workload import Workload, default_cache_dir
from tuner.workload_loader import resolve

METRIC = "samples_per_sec"
TUNER_THREADS = "the trial's CPUs less one per DataLoader worker (as the tuner)"

def configurations(workload: Workload, names: list[str], knobs_json: list[str],
                   device: str) -> dict[str, Knobs]:
    """Named configurations to repeat, clamped to ``device`` as a run clamps references."""
    chosen: dict[str, Knobs] = {}
    for name in names:
        if name not in workload.references:
            raise SystemExit(f"--config {name}: workload {workload.name} has references "
                             f"{', '.join(workload.references)}")
        chosen[name] = workload.references[name]
    for i, text in enumerate(knobs_json, 1):
        try:
            chosen[f"knobs{i}"] = Knobs.from_dict(json.loads(text))
        except (ValueError, TypeError) as exc:
            raise SystemExit(f"--knobs {text}: {exc}") from None
    return {name: knobs.clamp(device)[0] for name, knobs in chosen.items()}


def describe(knobs: Knobs) -> str:
    defaults = Knobs(batch_size=knobs.batch_size)
    changed = {k: v for k, v in knobs.to_dict().items()
               if k == "batch_size" or v != getattr(defaults, k)}
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in changed.items())


def settings_for(workload: Workload, args: argparse.Namespace) -> TrialSettings:
    warmup, windows, window_s = MEASUREMENT_DEFAULTS[args.scale]
    data_dir = workload.prepare_default_data(default_cache_dir() / "data", args.scale)
    extra = {}
    if "breakdown_steps" in TrialSettings.__dataclass_fields__:
        extra["breakdown_steps"] = 0  # per-phase timing after the windows: no effect on the figure
    return TrialSettings(scale=args.scale, device=args.device, data_dir=str(data_dir),
                         warmup_steps=args.warmup_steps or warmup, windows=args.windows or windows,
                         window_s=args.window_s or window_s, seed=0, **extra)


def measure_once(workload: Workload, knobs: Knobs, settings: TrialSettings,
                 threads: int | None) -> dict:
    """One trial, with ``threads`` torch threads or, when None, the tuner's
    (``run_trial`` given the trial's CPUs); ``torch_threads`` in the result says which."""
    import torch
    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    try:
        result = run_trial(workload, knobs, settings,
                           cpus=None if threads is not None else local_cpus())
    finally:
        torch.set_num_threads(saved)
    result["wall_s"] = time.perf_counter() - started
    result["load_1min"] = (load_before + os.getloadavg()[0]) / 2
    return result


def print_config(name: str, knobs: Knobs, results: list[dict]) -> None:
    threads = results[0]["torch_threads"]
    print(f"\n{name}: {describe(knobs)} ({threads} torch thread{'s' if threads > 1 else ''})")
    print(f"{'repeat':>6} {'samples/s':>9} {'within-trial cv':>15} {'wall s':>7} {'load':>5}")
    for i, r in enumerate(results, 1):
        value = f"{r[METRIC]:9.2f}" if r["status"] == "ok" else f"{r['status']:>9}"
        cv = r.get("samples_per_sec_cv")
        print(f"{i:>6} {value} {(f'{cv:15.3f}' if cv is not None else '-'):>15} "
              f"{r['wall_s']:7.1f} {r['load_1min']:5.1f}")
    values = [r[METRIC] for r in results if r["status"] == "ok"]
    if len(values) < 2:
        print(f"{len(values)} repeat(s) ran: no spread to report"
              + "".join(f"; {r['error']}" for r in results if r["status"] != "ok"))
        return
    mean = statistics.fmean(values)
    print(
        f"median {statistics.median(values):.2f} samples/s, mean {mean:.2f}; CV across "
        f"repeats {statistics.stdev(values) / mean:.3f} (sample stdev / mean); max/min "
        f"{max(values) / min(values):.3f}; within-trial cv median "
        f"{statistics.median(r['samples_per_sec_cv'] for r in results if r['status'] == 'ok'):.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="ddpm")
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--config", action="append", default=None,
                        help="a reference name (repeatable); default: all references")
    parser.add_argument("--knobs", action="append", default=[],
                        help="a configuration as JSON knobs (repeatable)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for every trial (default: as the tuner, the trial's "
                             "CPUs less one per DataLoader worker, at least 1)")
    parser.add_argument("--warmup-steps", type=int, default=None)
    parser.add_argument("--windows", type=int, default=None)
    parser.add_argument("--window-s", type=float, default=None)
    args = parser.parse_args(argv)
    if args.repeats < 2:
        parser.error(f"--repeats {args.repeats}: needs >= 2 for a spread")

    workload = resolve(args.workload)
    names = (
        args.config
        if args.config is not None
        else ([] if args.knobs else list(workload.references))
    )
    configs = configurations(workload, names, args.knobs, args.device)
    settings = settings_for(workload, args)
    workload.check_data(Path(settings.data_dir), args.scale)
    print(f"workload {workload.name} scale {args.scale} on {args.device}; {args.repeats} repeats "
          f"of {len(configs)} configuration(s), interleaved; trial: {settings.warmup_steps} "
          f"warm-up steps, {settings.windows} windows of >= {settings.window_s} s; torch threads "
          f"per trial: {args.threads or TUNER_THREADS}")
    print(f"machine: {os.cpu_count()} CPUs, load average now {os.getloadavg()[0]:.1f}: the "
          f"spread includes whatever else runs on it")

    results: dict[str, list[dict]] = {name: [] for name in configs}
    started = time.perf_counter()
    for repeat in range(1, args.repeats + 1):
        for name, knobs in configs.items():
            r = measure_once(workload, knobs, settings, args.threads)
            results[name].append(r)
            value = f"{r[METRIC]:.2f}" if r["status"] == "ok" else r["status"]
            print(f"repeat {repeat}/{args.repeats} {name}: {value} samples/s "
                  f"({r['wall_s']:.1f} s, load {r['load_1min']:.1f})", flush=True)
    for name, knobs in configs.items():
        print_config(name, knobs, results[name])
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
