"""Benchmark: how many of a CUDA search's first trials meet a cuDNN shape that no earlier trial
autotuned, and what that costs a short run.

Question: cuDNN's benchmark mode (``cudnn_benchmark``) autotunes each new (batch, precision,
layout) once per trial process: 12.2 s of ddpm's first step on one H200 against ~2 s at a tuned
shape (2026-11-27), where a whole screening trial is ~4 s. Of the first N trials after the
references (the structured points included), how many pay it, and how varied are the shapes:
the batch or the precision and layout? And with the knob decided at the finalists instead
(``tuner.plan.Plan.cudnn_at_finalists``: the screens hold it off, the finalists are measured
with it on), how many autotunes are left, and does the answer lose anything?

Design: offline, no trial runs. The tuner's searcher (``tuner.searcher.make_searcher``) as a
CUDA ddpm run builds it after its memory probe (the H200's compute curve: 44.1 ms at batch 104,
123 ms at 652, the largest that fit; the probe in bf16), driven through ``suggest`` /
``on_trial_complete`` as Ray Tune drives it, each configuration scored by a synthetic rate
shaped like the H200's (``rate``: the fitted step time, the precision and compute switches as
factors, the data path's input rate as a cap) with a log-normal measurement noise. A trial
with ``cudnn_benchmark`` on at a shape (``tuner.knobs.CUDNN_SHAPE_KNOBS``) no earlier trial had
it on at counts one autotune. The finalists are the ``--confirm`` best screens by measured
rate, and the answer the fastest of them (true rate). Seeds 0..S-1 for each rule and sampler;
medians.

Prints figures, never pass/fail.

Usage:
  python bench/cudnn_shapes.py [--trials 40] [--seeds 3] [--samplers gp tpe] [--noise 0.03]
                               [--confirm 3] [--rules finalists searched]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.followups import remeasure_configs  # noqa: E402
from tuner.knobs import Knobs, new_cudnn_shapes  # noqa: E402
from tuner.option_checks import make_plan  # noqa: E402
from tuner.plan import Resources  # noqa: E402
from tuner.probe import ComputeCurve, fit_step_time, knee_batch  # noqa: E402
from tuner.search_policy import with_compute_curve  # noqa: E402
from tuner.searcher import make_searcher  # noqa: E402
from tuner.settings import RunOptions  # noqa: E402

AUTOTUNE_S = 12.2 - 2.0
"""Seconds an autotune adds to a trial's first step (ddpm, H200, 2026-11-27)."""
SCREEN_S = 4.0
"""Seconds of a screening trial at a tuned shape on the H200 (0.2-s set-up, 1.8-s first step,
0.5-s warm-up, a 1-s window, 0.5-s teardown: estimated from the 2026-11-27 rows)."""
POINTS = ((104, 44.1), (652, 123.0))
"""(batch, compute-only step ms) of ddpm in bf16 on the H200 (2026-11-27)."""
LOADER_PER_WORKER = 716.0
"""samples/sec one DataLoader worker fed on the loader path (H200 run, bs=32 nw=6)."""
CACHE_PER_WORKER = 1500.0
"""samples/sec one worker feeds from the decoded cache (an assumption: ~2x the loader's)."""


def rate(config: dict, curve: ComputeCurve) -> float:
    """The synthetic samples/sec of ``config``: compute rate from the fitted step time (fp32
    2x slower, 1.9x with TF32 matmuls; channels_last 0.9x and cuDNN benchmark 0.95x the step;
    the fused optimizer 0.85x the per-step overhead), capped by the data path's input rate
    (workers x a rate per worker; none: in series with the step); the device path 5 % below
    compute."""
    b = config["batch_size"]
    alpha, beta = curve.alpha_ms, curve.beta_ms
    if config.get("fused_optimizer"):
        alpha *= 0.85
    step = alpha + beta * b
    if config.get("amp", "off") == "off":
        step *= 1.9 if config.get("tf32") else 2.0  # cuDNN's convolutions are TF32 either way
    step *= (0.9 if config.get("channels_last") else 1.0) * (
        0.95 if config.get("cudnn_benchmark") else 1.0)
    compute = 1000.0 * b / step
    path = config.get("data_path", "loader")
    if path == "device":
        return 0.95 * compute
    per_worker = CACHE_PER_WORKER if path == "cache" else LOADER_PER_WORKER
    workers = config.get("num_workers") or 0
    if workers == 0:
        return 1.0 / (1.0 / compute + 1.0 / per_worker)
    return min(compute, workers * per_worker)


def search(plan, sampler: str, seed: int, trials: int, noise: float) -> dict:
    """The first ``trials`` trials after the references, and the finalists after them:
    autotunes paid while screening and at the finalists (``tuner.knobs.new_cudnn_shapes``),
    the batches and precision-layout pairs screened, the best screened rate and the answer's
    (the fastest finalist: the interleaved rounds are taken to tell them apart). Rates are
    true, without the measurement noise the searcher is told (a factor exp(N(0, noise)), drawn
    from ``seed``). The finalists are the run's (``tuner.followups.remeasure_configs`` on the
    screens as leaderboard rows): the ``--confirm`` best by measured rate, with
    ``cudnn_benchmark`` on and the first also as screened where the plan decides the knob there
    (``Plan.cudnn_at_finalists``)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    searcher = make_searcher(replace(plan.search_spec(), seed=seed, sampler=sampler))
    configs, measured = [], []
    for i in range(trials + len(plan.references)):
        config = searcher.suggest(f"t{i}")
        configs.append(config)
        value = rate(config, plan.compute_curve)
        measured.append(value * float(np.exp(rng.normal(0.0, noise))) if noise else value)
        searcher.on_trial_complete(f"t{i}", {"status": "ok", "samples_per_sec": measured[-1]})
    screened = [(c, m) for c, m in zip(configs, measured) if c.get("reference") is None]
    rows = [{**c, "status": "ok", "samples_per_sec": m, "phase": "search"}
            for c, m in zip(configs, measured)]
    top, _ = remeasure_configs(plan, rows)
    finalists = [k.to_dict() for k in top]
    fresh = new_cudnn_shapes(configs + finalists)
    screening = [f for c, f in zip(configs, fresh) if c.get("reference") is None]
    return {"trials": len(screened), "autotunes": sum(screening),
            "finalist_autotunes": sum(fresh[len(configs):]),
            "batches": len({c["batch_size"] for c, _ in screened}),
            "pairs": len({(c.get("amp"), c.get("channels_last")) for c, _ in screened}),
            "best": max(rate(c, plan.compute_curve) for c, _ in screened),
            "answer": max(rate(c, plan.compute_curve) for c in finalists)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--confirm", type=int, default=3, help="finalists (the run's --confirm)")
    parser.add_argument("--rules", nargs="+", default=["finalists", "searched"],
                        choices=("finalists", "searched"),
                        help="where cudnn_benchmark is decided: at the finalists (the tuner's "
                             "rule with screening) or sampled while screening")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--samplers", nargs="+", default=["gp", "tpe"],
                        choices=("gp", "tpe", "random"))
    parser.add_argument("--noise", type=float, default=0.03,
                        help="log-normal sigma of a screen's measurement (H200 windows: CV "
                             "0.1-6.5 %%)")
    args = parser.parse_args(argv)
    alpha, beta = fit_step_time(POINTS)
    max_batch = POINTS[-1][0]
    results = tempfile.mkdtemp(prefix="cudnn-shapes-")
    allowed = range(1, max_batch + 1)
    curve = ComputeCurve(alpha, beta, POINTS, max_batch,
                         knee_batch(alpha, beta, max_batch, allowed),
                         1000.0 * max_batch / POINTS[-1][1])
    options = RunOptions(workload="ddpm", device="cpu", results=results, probe="off",
                         trials=args.trials + 2, confirm=args.confirm)
    # "finalists": the tuner's rule; "searched": the knob sampled while screening, as a
    # search without finalists samples it (the screening trials' own settings do not matter
    # offline)
    plans = {"finalists": make_plan(options, Resources("cuda", 1, 16)),
             "searched": make_plan(replace(options, screen_windows=0), Resources("cuda", 1, 16))}
    plans = {rule: with_compute_curve(plan.with_batch_bound(max_batch), curve,
                                      Knobs(batch_size=max_batch, amp="bf16"))
             for rule, plan in plans.items()}
    assert plans["finalists"].cudnn_at_finalists and not plans["searched"].cudnn_at_finalists
    optimum = rate({"batch_size": max_batch, "amp": "bf16", "channels_last": True,
                    "cudnn_benchmark": True, "fused_optimizer": True, "data_path": "cache",
                    "num_workers": 16}, curve)
    print(f"ddpm on the H200's curve: T(b) = {alpha:.1f} + {beta:.3f} b ms, knee "
          f"{curve.knee_batch}, batch range "
          f"{plans['finalists'].device_space.bounds()['batch_size']}; {args.trials} trials after "
          f"the references, then the {args.confirm} best as finalists; seeds "
          f"0..{args.seeds - 1}, noise {args.noise}; synthetic optimum {optimum:,.0f} "
          f"samples/sec; a screen {SCREEN_S} s, an autotune {AUTOTUNE_S:.1f} s more")
    print("| cudnn_benchmark | sampler | seed | screens | autotunes screening | distinct "
          "batches | distinct (amp, channels_last) | est. s of the screens (autotunes) | "
          "finalists' autotunes | best screened ÷ optimum | answer ÷ optimum |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rule in args.rules:
        for sampler in args.samplers:
            rows = []
            for seed in range(args.seeds):
                r = search(plans[rule], sampler, seed, args.trials, args.noise)
                rows.append(r)
                print(f"| {rule} | {sampler} | {seed} | {r['trials']} | {r['autotunes']} | "
                      f"{r['batches']} | {r['pairs']} | {cost_s(r):.0f} "
                      f"({r['autotunes'] * AUTOTUNE_S:.0f}) | {r['finalist_autotunes']} | "
                      f"{r['best'] / optimum:.3f} | {r['answer'] / optimum:.3f} |", flush=True)
            print(f"median, {rule}, {sampler}: "
                  f"{statistics.median(r['autotunes'] for r in rows)} autotunes in "
                  f"{args.trials} screens and "
                  f"{statistics.median(r['finalist_autotunes'] for r in rows)} at the "
                  f"finalists, {statistics.median(cost_s(r) for r in rows):.0f} s of screens; "
                  f"answer ÷ optimum "
                  f"{statistics.median(r['answer'] for r in rows) / optimum:.3f}", flush=True)
    return 0


def cost_s(r: dict) -> float:
    """Estimated seconds of a search's trials on the H200: each a screen, plus its
    autotunes."""
    return r["trials"] * SCREEN_S + r["autotunes"] * AUTOTUNE_S


if __name__ == "__main__":
    sys.exit(main())
