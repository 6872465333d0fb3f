"""Memory probe: bound the batch size before the search spends trials on configurations that
cannot fit (a power-then-binary search, as Lightning's batch-size finder does).

Each probe is a short trial at one batch size with the lowest-memory settings the space offers
(mixed precision if searched, no workers, no compile): one warm-up step (allocator growth,
autotuning at the new shapes), then ``TIMED_STEPS`` timed windows of one step or a few. The
bound is optimistic: the search may still meet out-of-memory trials above it
with hungrier settings, and learns those as constraint violations. A probe trains on one batch
read once and kept on the device (the compute-only mode): no DataLoader workers, no decoding
after the first read.

Where only device memory is measured, every probe runs in one process (``probe_in_process``):
the allocator's peak is reset and its cache emptied between trials, so one process measures
each batch size on its own, without a process start and CUDA initialisation per probe. A host
memory limit
needs a fresh process per probe: a process keeps the heap it once held, which would be charged
to the next batch size.

**The compute curve.** The timed steps of the probes that fit give the step time T(b) of the
model alone (batches on the device, the fastest precision the space searches, no input
pipeline) at every batch size probed, for about one step more per size than the memory bound
alone needs. ``compute_curve`` fits T(b) = alpha + beta * b (least squares: alpha the per-step
overhead, launch and optimizer; beta the seconds per sample once the device is busy, as
Pollux models it), names the knee (the smallest allowed batch within ``KNEE_TOLERANCE`` of the
largest's rate: above it a larger batch buys almost nothing) and the machine's compute limit
(the rate measured at the largest batch that fit).

**The input pipeline's rates.** After the probes, in the same process, each data path the
space offers is timed alone (a loader-only trial: batches to the device, no model) with no
DataLoader worker and with the most workers the space allows, at the knee batch or smaller
(``measure_input``): the cheapest path first (``ANCHOR_DATA_PATHS``), stopping at the first
that feeds the knee's compute rate with room to spare (``FEED_MARGIN``). Each reads the
samples the probes decoded already (``TrialSettings.sample_limit``), so no cache is filled.
The machine's structured point takes the cheapest path and worker count that feeds the knee,
or the fastest measured when none does (``feeding``). Each rate records the CPU seconds its
workers spent per sample: a pipeline whose workers kept their cores mostly idle waits on I/O
(``input_waits``), and its worker range goes past the cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import groupby
from typing import Callable, Sequence

from tuner.ceilings import WAIT_SHARE
from tuner.errors import ProbeOutOfTime
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.space import Choices, IntRange, Space, candidates
from tuner.status import TELLS_MEMORY, Status
from tuner.workload import Workload


@dataclass
class ProbeResult:
    """Largest batch size that fit (None: not even the smallest did), the first that failed,
    every probe as (batch_size, status, peak memory MiB), and the probe's wall time, s (set by
    the caller that timed it)."""
    max_batch: int | None
    first_failure: int | None
    probes: list[tuple[int, str, float | None]]
    duration_s: float | None = None
    timed_out: bool = False
    """The run's time budget ran out during the probe: ``max_batch`` is the largest batch that
    fit by then (a lower bound), None when none had."""
    step_ms: list[tuple[int, float]] = field(default_factory=list)
    """(batch_size, median step time, ms) of each probe that fit and timed its steps,
    ascending: the compute curve's points (``compute_curve``)."""
    limit_result: dict | None = None
    """The trial result of the probe at ``max_batch`` (a compute-only measurement of
    ``TIMED_STEPS`` windows): the machine's compute limit, recorded as the run's
    'machine-compute' ceiling row."""
    knobs: Knobs | None = None
    """The knobs every probe ran with, less the batch size (``probe_knobs``)."""
    input_rates: list["InputRate"] = field(default_factory=list)
    """What each data path and worker count delivered alone (``measure_input``), in the order
    measured; empty when there was nothing to choose or no compute curve."""


TIMED_STEPS = 3
"""Timed windows of each probe after its warm-up step; each holds one step, or several where
a step is shorter than ``PROBE_WINDOW_S``."""

PROBE_WINDOW_S = 0.01
"""Seconds of a probe's timed window: a window ends at the first step boundary past it."""

KNEE_TOLERANCE = 0.05
"""The knee is the smallest batch whose rate is within this fraction of the largest's."""

ANCHOR_DATA_PATHS = ("device", "cache", "loader")
"""Data paths, cheapest in host work first: batches already decoded on the device need no
worker; a decoded cache needs only the augmentation's; the loader decodes every sample."""

INPUT_WINDOW_S = 0.3
"""Seconds of the one timed window of each input-rate trial (``measure_input``)."""

FEED_MARGIN = 1.25
"""A data path feeds the knee when its rate alone is at least this times the knee's compute
rate: in training its loading shares the host with the training step."""


@dataclass(frozen=True)
class InputRate:
    """What one data path delivered alone at ``batch_size`` with ``num_workers`` DataLoader
    workers (a loader-only trial: batches to the device, no model), samples/sec; None when the
    trial failed."""
    data_path: str
    num_workers: int
    batch_size: int
    samples_per_sec: float | None
    error: str | None = None
    cpu_s_per_sample: float | None = None
    """CPU seconds its process and workers spent per sample (None: not read)."""

    def waits(self, cores: int) -> bool:
        """Whether its DataLoader workers waited rather than computed: they kept under
        ``tuner.ceilings.WAIT_SHARE`` of the ``cores`` they could use busy (False without
        workers or a CPU reading)."""
        if not self.num_workers or not self.samples_per_sec or not self.cpu_s_per_sample:
            return False
        busy = self.cpu_s_per_sample * self.samples_per_sec
        return busy < WAIT_SHARE * min(self.num_workers, max(1, cores))


@dataclass(frozen=True)
class ComputeCurve:
    """The model's compute-only step time against the batch size on this machine, from the
    memory probe's timed steps: T(b) = alpha_ms + beta_ms * b, ms.

    ``points``: (batch_size, step ms) measured, ascending. ``knee_batch``: the smallest batch
    the space allows whose rate (fitted) is within ``KNEE_TOLERANCE`` of the rate at
    ``max_batch``. ``limit_samples_per_sec``: the rate measured at ``max_batch`` (the largest
    that fit): the machine's compute limit for this model."""
    alpha_ms: float
    beta_ms: float
    points: tuple[tuple[int, float], ...]
    max_batch: int
    knee_batch: int
    limit_samples_per_sec: float

    def step_ms(self, batch_size: float) -> float:
        """The fitted step time at ``batch_size``, ms."""
        return self.alpha_ms + self.beta_ms * batch_size

    def samples_per_sec(self, batch_size: float) -> float:
        """The fitted compute-only rate at ``batch_size``."""
        return 1000.0 * batch_size / self.step_ms(batch_size)


def fit_step_time(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares fit of step ms = alpha + beta * batch over ``points`` ((batch, ms), at
    least one), each weighted by 1/ms (relative errors: a 5-ms step counts as much as a
    500-ms one). Returns (alpha_ms >= 0, beta_ms >= 0): a negative intercept (noise at small
    batches) refits through the origin, a negative slope (a flat curve) is 0 with alpha the
    mean step."""
    import numpy as np
    b = np.array([p[0] for p in points], dtype=float)
    t = np.array([p[1] for p in points], dtype=float)
    if len(points) == 1 or np.ptp(b) == 0:
        return float(t.mean()), 0.0
    w = 1.0 / t
    design = np.stack([np.ones_like(b), b], axis=1) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, t * w, rcond=None)
    if beta <= 0:
        return float(np.average(t, weights=w)), 0.0
    if alpha < 0:
        beta = float(np.sum(w * w * b * t) / np.sum(w * w * b * b))
        return 0.0, beta
    return float(alpha), float(beta)


def knee_batch(alpha_ms: float, beta_ms: float, max_batch: int, allowed: Sequence[int],
               tolerance: float = KNEE_TOLERANCE) -> int:
    """The smallest of ``allowed`` (ascending batch sizes) up to ``max_batch`` whose fitted
    rate b / (alpha + beta * b) is at least (1 - tolerance) x the rate at ``max_batch``;
    ``max_batch`` when none smaller is."""
    def rate(b: float) -> float:
        step = alpha_ms + beta_ms * b
        return math.inf if step <= 0 else b / step
    bar = (1.0 - tolerance) * rate(max_batch)
    return next((b for b in allowed if b <= max_batch and rate(b) >= bar), max_batch)


def compute_curve(result: ProbeResult, allowed: Sequence[int]) -> ComputeCurve | None:
    """The compute curve of a probe (``ComputeCurve``), or None when it timed fewer than two
    batch sizes or none at its ``max_batch`` (a probe stopped by the budget, a workload whose
    probe reported no step time)."""
    points = [(b, ms) for b, ms in result.step_ms if ms and ms > 0]
    limit = result.limit_result or {}
    rate = limit.get("samples_per_sec")
    if len(points) < 2 or result.max_batch is None or not rate:
        return None
    alpha, beta = fit_step_time(points)
    knee = knee_batch(alpha, beta, result.max_batch, sorted(allowed))
    return ComputeCurve(alpha, beta, tuple(points), result.max_batch, knee, float(rate))


def probe_knobs(space: Space, base: Knobs) -> Knobs:
    """The lowest-memory configuration of the space around ``base``, its batch read through
    the 'device' data path where the space searches it: the decoded samples gathered into the
    resident batch, without the per-sample host augmentation, and each sample decoded once
    for all the probes of a process (``tuner.trial.steppers.decoded_prefix``), where the
    loader path reads every probe's batch anew (seconds per probe for a slow decoder)."""
    amp = base.amp
    dom = space.domains.get("amp")
    if isinstance(dom, Choices):
        amp = next((a for a in ("bf16", "fp16") if a in dom.values), amp)
    knobs = base.replace(amp=amp, compile="off", num_workers=0, prefetch_factor=None,
                         persistent_workers=False, grad_accum=1)
    paths = space.domains.get("data_path")
    if isinstance(paths, Choices) and "device" in paths.values:
        knobs = knobs.updated({"data_path": "device"})[0]
    return knobs


def probe_batch_limit(space: Space, base: Knobs, settings: TrialSettings,
                      run: Callable[[Knobs, TrialSettings], dict]) -> ProbeResult:
    """Find the largest allowed batch size whose short trial ends ``ok``.

    Args:
        space: the device space (its batch_size domain is searched).
        base: a reference configuration; see ``probe_knobs``.
        settings: the run's trial settings (memory limits included).
        run: runs one trial and returns its result (``tuner.trial.harness.run_trial`` in a
            Ray task).
    """
    sizes = candidates(space)
    knobs = probe_knobs(space, base)
    short = replace(settings, warmup_steps=1, windows=TIMED_STEPS, window_s=PROBE_WINDOW_S,
                    breakdown_steps=0, max_steady_probes=0, train_steps=None, compute_only=True,
                    resident_batches=1, ceiling=None)
    probes: list[tuple[int, str, float | None]] = []
    cache: dict[int, bool] = {}
    results: dict[int, dict] = {}

    def fits(i: int) -> bool:
        if i not in cache:
            bs = sizes[i]
            result = run(knobs.replace(batch_size=bs), short)
            peak = result.get("peak_device_memory_mb") or result.get("peak_host_memory_mb")
            probes.append((bs, result["status"], peak))
            if result["status"] == Status.TIMEOUT:
                raise ProbeOutOfTime
            if result["status"] not in TELLS_MEMORY:
                raise RuntimeError(f"memory probe at batch_size {bs} failed: {result.get('error')}")
            cache[i] = result["status"] == Status.OK
            if cache[i]:
                results[bs] = result
        return cache[i]

    bounds = [-1, None]  # index of the last batch that fit, of the first that did not
    try:
        _search(sizes, fits, bounds)
    except ProbeOutOfTime:  # the run's deadline: what fit so far bounds the search
        pass
    lo, hi = bounds
    max_batch = sizes[lo] if lo >= 0 else None
    step_ms = sorted((bs, float(r["step_time_ms_p50"])) for bs, r in results.items()
                     if r.get("step_time_ms_p50"))
    return ProbeResult(max_batch, sizes[hi] if hi is not None else None,
                       sorted(probes), timed_out=any(p[1] == Status.TIMEOUT for p in probes),
                       step_ms=step_ms, limit_result=results.get(max_batch), knobs=knobs)


def _search(sizes: list[int], fits: Callable[[int], bool], bounds: list) -> None:
    """Doubling, then bisection to within 25 %, of the index of the largest of ``sizes`` that
    ``fits``; ``bounds`` (last fit, first failure) is updated after every probe, so that a
    probe stopped by the deadline leaves what was found before it."""
    # Power phase: double the batch size (the smallest allowed size >= twice the last).
    i = 0
    while True:
        if not fits(i):
            bounds[1] = i
            break
        bounds[0] = i
        if i == len(sizes) - 1:
            break
        i = next((j for j in range(i + 1, len(sizes)) if sizes[j] >= 2 * sizes[i]), len(sizes) - 1)
    # Binary phase between the last fit and the first failure, to within 25%.
    lo, hi = bounds
    if hi is not None and lo >= 0:
        while hi - lo > 1 and sizes[hi] > 1.25 * sizes[lo]:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = bounds[0] = mid
            else:
                hi = bounds[1] = mid


def offered_paths(space: Space, default: str) -> list[str]:
    """The data paths ``space`` searches, cheapest first (``ANCHOR_DATA_PATHS``); a space that
    does not search the knob offers ``default`` (its constant, or the configuration's)."""
    dom = space.domains.get("data_path")
    paths = dom.values if isinstance(dom, Choices) else (default,)
    return [p for p in ANCHOR_DATA_PATHS if p in paths]


def input_knobs(space: Space, knobs: Knobs, batch_size: int,
                samples: int) -> list[Knobs]:
    """The configurations whose input pipeline ``measure_input`` times, cheapest first
    (``ANCHOR_DATA_PATHS``): ``knobs`` (the probe's) on each data path the space offers, the
    device path without workers, the others with none and with the most the space allows
    (kept across epochs, two batches prefetched each; pinned memory where the device is CUDA:
    the run clamps it off on CPU). The batch is ``batch_size`` on the
    device path, else at most ``samples`` / (2 x the workers), so that each worker reads two
    batches of every pass over the ``samples`` read."""
    workers = space.domains.get("num_workers")
    most = (workers.high if isinstance(workers, IntRange) else max(workers.values)
            if isinstance(workers, Choices) else int(space.constants.get("num_workers", 0)))
    out = []
    for path in offered_paths(space, knobs.data_path):
        if path == "device":
            out.append(knobs.updated({"data_path": "device", "num_workers": 0})[0]
                       .replace(batch_size=batch_size))
            continue
        for n in sorted({0, most}):
            per_pass = max(1, samples // (2 * max(1, n)))
            out.append(knobs.replace(
                data_path=path, num_workers=n, batch_size=min(batch_size, per_pass),
                persistent_workers=n > 0, prefetch_factor=2 if n else None, pin_memory=True))
    return out


def measure_input(space: Space, knobs: Knobs, settings: TrialSettings,
                  run: Callable[[Knobs, TrialSettings], dict], batch_size: int, samples: int,
                  target_samples_per_sec: float) -> list[InputRate]:
    """Time the input pipelines of ``input_knobs`` (one warm-up batch, one window of
    ``INPUT_WINDOW_S``, the first ``samples`` of the dataset), a data path at a time, cheapest
    first, until one feeds ``target_samples_per_sec`` with ``FEED_MARGIN`` to spare. Nothing
    when there is only one configuration (nothing to choose). A trial that fails is recorded
    with its error; one stopped by the run's deadline ends the measurement.

    Args:
        run: runs one trial and returns its result (``tuner.trial.harness.run_trial``).
        batch_size: the knee batch; samples: samples the probes decoded (their largest batch).
    """
    configs = input_knobs(space, knobs, batch_size, samples)
    if len(configs) < 2:
        return []
    short = replace(settings, warmup_steps=1, windows=1, window_s=INPUT_WINDOW_S,
                    breakdown_steps=0, max_steady_probes=0, train_steps=None,
                    compute_only=False, loader_only=True, ceiling=None,
                    sample_limit=samples, keep_cache=False)
    rates: list[InputRate] = []
    for path, same_path in groupby(configs, key=lambda k: k.data_path):  # cheapest first
        for config in same_path:
            result = run(config, short)
            if result["status"] == Status.TIMEOUT:
                return rates
            ok = result["status"] == Status.OK and result.get("samples_per_sec")
            rates.append(InputRate(path, config.num_workers, config.batch_size,
                                   float(result["samples_per_sec"]) if ok else None,
                                   None if ok else str(result.get("error") or result["status"]),
                                   result.get("cpu_s_per_sample") if ok else None))
        if feeding(rates, target_samples_per_sec, strict=True) is not None:
            break
    return rates


def input_waits(rates: Sequence[InputRate], cores: int) -> bool:
    """Whether the input pipeline waits rather than computes: the measured rate with the most
    DataLoader workers kept its cores mostly idle (``InputRate.waits``); then workers past the
    ``cores`` deliver more, and the search's worker range goes past them
    (``tuner.search_policy.with_compute_curve``)."""
    measured = [r for r in rates if r.samples_per_sec and r.num_workers]
    return bool(measured) and max(measured, key=lambda r: r.num_workers).waits(cores)


def feeding(rates: Sequence[InputRate], target_samples_per_sec: float,
            strict: bool = False) -> InputRate | None:
    """The first of ``rates`` (cheapest first) that feeds ``target_samples_per_sec`` with
    ``FEED_MARGIN`` to spare; when none does, the fastest measured (None with ``strict``, or
    when none was measured)."""
    measured = [r for r in rates if r.samples_per_sec]
    feeds = next((r for r in measured
                  if r.samples_per_sec >= FEED_MARGIN * target_samples_per_sec), None)
    if feeds is not None or strict or not measured:
        return feeds
    return max(measured, key=lambda r: r.samples_per_sec)


def probe_in_process(workload: Workload, space: Space, base: Knobs,
                     settings: TrialSettings) -> ProbeResult:
    """``probe_batch_limit`` with every short trial run here, one after another
    (``tuner.trial.harness.run_trial``: each trial resets the device's peak memory statistics
    when it starts and frees the allocator's cache when it ends, an out-of-memory one included),
    then, where the probes give a compute curve, the input pipeline's rates at its knee
    (``measure_input``). Measures device memory only: with a host memory limit, use a fresh
    process per probe."""
    from tuner.trial.harness import run_trial
    run = partial(run_trial, workload)
    result = probe_batch_limit(space, base, settings, run)
    curve = compute_curve(result, candidates(space))
    if curve is None or result.knobs is None or result.timed_out:
        return result
    rates = measure_input(space, result.knobs, settings, run, curve.knee_batch,
                          curve.max_batch, curve.samples_per_sec(curve.knee_batch))
    return replace(result, input_rates=rates)
