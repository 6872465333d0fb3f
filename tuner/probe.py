"""Memory probe: bound the batch size before the search spends trials on configurations that
cannot fit (a power-then-binary search, as Lightning's batch-size finder does).

Each probe is a short trial (two optimizer steps, no measurement windows) at one batch size
with the lowest-memory settings the space offers (mixed precision if searched, no workers, no
compile), so the bound is optimistic: the search may still meet out-of-memory trials above it
with hungrier settings, and learns those as constraint violations. A probe trains on one batch
read once and kept on the device (the compute-only mode): no DataLoader workers, no decoding
after the first read.

Where only device memory is measured, every probe runs in one process (``probe_in_process``):
the allocator's peak is reset and its cache emptied between trials, so one process measures
each batch size on its own, without a process start and CUDA initialisation per probe. A host
memory limit
needs a fresh process per probe: a process keeps the heap it once held, which would be charged
to the next batch size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from tuner.errors import ProbeOutOfTime
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.space import Choices, Space, candidates
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


def probe_knobs(space: Space, base: Knobs) -> Knobs:
    """The lowest-memory configuration of the space around ``base``."""
    amp = base.amp
    dom = space.domains.get("amp")
    if isinstance(dom, Choices):
        amp = next((a for a in ("bf16", "fp16") if a in dom.values), amp)
    return base.replace(amp=amp, compile="off", num_workers=0, prefetch_factor=None,
                        persistent_workers=False, grad_accum=1)


def probe_batch_limit(space: Space, base: Knobs, settings: TrialSettings,
                      run: Callable[[Knobs, TrialSettings], dict]) -> ProbeResult:
    """Find the largest allowed batch size whose short trial ends ``ok``.

    Args:
        space: the device space (its batch_size domain is searched).
        base: a reference configuration; see ``probe_knobs``.
        settings: the run's trial settings (memory limits included).
        run: runs one trial and returns its result (``tuner.harness.run_trial`` in a Ray task).
    """
    sizes = candidates(space)
    knobs = probe_knobs(space, base)
    short = replace(settings, warmup_steps=2, windows=1, window_s=0.01, breakdown_steps=0,
                    max_steady_probes=0, train_steps=None, compute_only=True,
                    resident_batches=1, ceiling=None)
    probes: list[tuple[int, str, float | None]] = []
    cache: dict[int, bool] = {}

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
        return cache[i]

    bounds = [-1, None]  # index of the last batch that fit, of the first that did not
    try:
        _search(sizes, fits, bounds)
    except ProbeOutOfTime:  # the run's deadline: what fit so far bounds the search
        pass
    lo, hi = bounds
    return ProbeResult(sizes[lo] if lo >= 0 else None, sizes[hi] if hi is not None else None,
                       sorted(probes), timed_out=any(p[1] == Status.TIMEOUT for p in probes))


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


def probe_in_process(workload: Workload, space: Space, base: Knobs,
                     settings: TrialSettings) -> ProbeResult:
    """``probe_batch_limit`` with every short trial run here, one after another
    (``tuner.harness.run_trial``: each trial resets the device's peak memory statistics when it
    starts and frees the allocator's cache when it ends, an out-of-memory one included).
    Measures device memory only: with a host memory limit, use a fresh process per probe."""
    from tuner.harness import run_trial
    return probe_batch_limit(space, base, settings,
                             lambda knobs, short: run_trial(workload, knobs, short))
