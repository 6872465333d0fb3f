"""What bounds a run's winner and the machine: the ceilings read from one run's phase
``ceiling`` rows (``tuner.followups.ceilings_batch`` plans them), per data path.

Each ceiling row names its kind in the ``ceiling`` column and its data path in the
``data_path`` knob column (rows written before that column are the 'loader' path):

* ``compute``, ``loader``: the winner's own configuration, batches already on the device / its
  input pipeline alone (no model);
* ``machine-compute``: the largest batch the run allows (its global batch kept) in the fastest
  precision, batches on the device;
* ``machine-loader``: a data path's input pipeline with every CPU a trial may have as DataLoader
  workers ('loader' and 'cache'; the 'device' path has no workers);
* ``path-loader``: the best searched configuration of another data path, its input pipeline alone;
* ``core-compute``, ``core-loader``: on the CPU device, the compute on one core (one torch
  thread) and a data path's input pipeline on one core (no workers, one thread), for the
  shared-cores model.

The attainable rate is min(the compute limit, the best input-pipeline rate over the data paths)
where the compute runs on a GPU. On the CPU device the DataLoader workers and the model share
the cores, so both cannot run at their every-core rates at once: the attainable rate is then
``cores / (core-seconds per sample of the compute + of the input pipeline)``, never above that
minimum (``Attainable.model`` 'shared cores'). The input pipeline's core-seconds are the CPU
seconds its one-core ceiling used per sample (``cpu_s_per_sample``), not its wall seconds: a
pipeline that waits (a read from network storage) holds no core while it waits, and its
workers past the cores then deliver more (``pipeline_kind``).

Torch-free; ``tuner.winner`` re-exports ``Ceilings`` and ``Attainable``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping

from tuner.knobs import COMPUTE_SWITCHES, KNOB_INFO, Knobs, knob_text
from tuner.status import Phase, Status, phase_of

COMPUTE_LABELS = ("compute", "machine-compute", "core-compute")
"""Ceiling kinds that measure compute only (batches already on the device)."""

LOADER_LABELS = ("loader", "machine-loader", "path-loader", "core-loader")
"""Ceiling kinds that measure an input pipeline only (no model)."""

CORE_LABELS = ("core-compute", "core-loader")
"""Ceiling kinds measured on one core (the CPU device's shared-cores model)."""

WINNER_LABELS = ("compute", "loader", "core-compute")
"""Ceiling kinds measured with the winner's knobs unchanged: only rows with its knobs count."""

CEILING_NOISE = 0.05
"""A ceiling at most this share below the pipeline it bounds is read as the pipeline's own rate
within the noise (a compute-bound or input-bound configuration: 'at it'), not as a busy
machine, and not measured again. Either way no efficiency is shown. Source: the spread of the
default CPU ddpm run's compute-only ceiling against its pipeline on a quiet machine (about
2 %)."""

LEVERS = {"loader": "the DataLoader", "cache": "the decoded cache",
          "device": "the dataset resident on the device"}
"""How the summary names each data path (``tuner.data``)."""


Judgement = Literal["bound", "at it", "not a bound"]
"""What a ceiling says of the best that ran under it (``verdict``): 'bound' (the ceiling is at
or above the best: the best's share of it is shown), 'at it' (at most ``CEILING_NOISE`` below:
the best runs at the ceiling's rate, bound by what it measures) or 'not a bound' (further
below: a disturbed measurement, or a limit that does not hold for the best's knobs)."""


@dataclass(frozen=True)
class Verdict:
    """One ceiling against the best it bounds (``verdict``)."""

    judgement: Judgement
    share: float | None
    """Best ÷ ceiling, 0 < share <= 1, where 'bound'; else None (a share is never shown above
    100 %)."""
    below: float | None
    """How far the ceiling lies below the best, as a share of the best (0 < below < 1), where
    not 'bound'; else None."""

    @property
    def headroom(self) -> float | None:
        """Ceiling ÷ best (>= 1: what is left above the best) where 'bound'; else None."""
        return None if self.share is None else 1 / self.share


def verdict(ceiling_samples_per_sec: float, best_samples_per_sec: float) -> Verdict:
    """The verdict of a ceiling measured at ``ceiling_samples_per_sec`` on the best that ran at
    ``best_samples_per_sec`` (both > 0): 'bound' with the best's share where the ceiling is at
    or above it, 'at it' within ``CEILING_NOISE`` below, else 'not a bound'."""
    if ceiling_samples_per_sec >= best_samples_per_sec:
        return Verdict("bound", best_samples_per_sec / ceiling_samples_per_sec, None)
    below = 1 - ceiling_samples_per_sec / best_samples_per_sec
    return Verdict("at it" if below <= CEILING_NOISE else "not a bound", None, below)


MACHINE_BATCHES = "batches on the device"
"""How a ``machine-compute`` measurement feeds the model: its batches are already on the device
(compute only, no input pipeline), whatever its row's ``data_path`` knob."""


MACHINE_COMPUTE_KINDS = ("machine-compute", "compute")
"""Ceilings that measure the model on the whole machine with its batches on the device: the
largest batch in the fastest precision, and a configuration's own compute-only rate (one core,
``core-compute``, is not the machine's)."""


@dataclass(frozen=True)
class MachineCompute:
    """This machine's compute limit for this model: the fastest successful compute-only
    ceiling row of the winner's run (``MACHINE_COMPUTE_KINDS``: the largest batch the run
    allows, its global batch kept, in the fastest precision, or a configuration's own, such as
    the winner's with a layout or optimizer the largest batch did not use), batches already
    on the device, against the winner."""

    samples_per_sec: float
    """Its measured rate, samples/sec."""
    trial_id: str
    """The ceiling row's trial id."""
    batch_size: int
    """Its micro-batch size."""
    grad_accum: int
    """Its micro-batches per optimizer step (global batch = batch_size x grad_accum)."""
    amp: str
    """Its precision: the ``amp`` knob ('off' is fp32)."""
    data_path: str
    """How its batches reach the model: always ``MACHINE_BATCHES`` (compute only)."""
    verdict: Verdict
    """The limit against the winner: 'bound' with the winner's share of it (and the
    ``Verdict.headroom`` left above the winner), else 'at it' or 'not a bound' (the winner ran
    faster: a disturbed measurement, or a batch no compute-only ceiling measured computes
    faster here)."""
    kind: str = "machine-compute"
    """The ceiling it comes from (``MACHINE_COMPUTE_KINDS``)."""
    switches: list[str] = field(default_factory=list)
    """The on/off compute knobs it ran with (``channels_last``, ``fused_optimizer``, ...)."""

    @property
    def knobs_text(self) -> str:
        """Its batch, precision and compute switches as the trial lines name them:
        'bs=652 amp=bf16', 'bs=224 amp=off cl' (``tuner.knobs.knob_text``; the precision shown
        even when 'off')."""
        switches = knob_text(dict.fromkeys(self.switches, True))
        return (knob_text({"batch_size": self.batch_size, "grad_accum": self.grad_accum})
                + f" {KNOB_INFO['amp'].short}={self.amp}" + (f" {switches}" if switches else ""))


def machine_compute(rows: list[dict], best_samples_per_sec: float) -> MachineCompute | None:
    """The fastest successful compute-only ceiling row (``MACHINE_COMPUTE_KINDS``) among one
    run's ``rows``, judged against the winner's ``best_samples_per_sec``; None without a
    ``machine-compute`` one (the run did not measure the machine's limit)."""
    def kind(r: Mapping) -> str:
        return (r.get("ceiling") or "compute").partition(" ")[0]
    measured = [r for r in rows if phase_of(r) == Phase.CEILING and r["status"] == Status.OK
                and kind(r) in MACHINE_COMPUTE_KINDS and r.get("samples_per_sec")]
    if not any(kind(r) == "machine-compute" for r in measured):
        return None
    top = max(measured, key=lambda r: r["samples_per_sec"])
    return MachineCompute(
        samples_per_sec=top["samples_per_sec"], trial_id=top.get("trial_id") or "",
        batch_size=top["batch_size"], grad_accum=top.get("grad_accum") or 1,
        amp=top.get("amp") or "off", data_path=MACHINE_BATCHES,
        verdict=verdict(top["samples_per_sec"], best_samples_per_sec),
        kind=kind(top),
        switches=[name for name in COMPUTE_SWITCHES if top.get(name) is True])


@dataclass(frozen=True)
class Ceilings:
    """What bounds the winner: its own configuration measured without a part of the pipeline
    (phase ``ceiling`` rows of its run). All rates in samples/sec."""

    compute_samples_per_sec: float | None
    """The highest of its compute-only measurements (batches already on the device); None
    without one."""
    compute_measurements: int
    """How many compute-only measurements there are."""
    compute_disturbed: bool
    """The compute-only ceiling is below the winner: a disturbed measurement (or a
    compute-bound pipeline within ``CEILING_NOISE``), never a bound (``verdict``)."""
    pipeline_efficiency: float | None
    """Winner ÷ compute-only ceiling (<= 1); None without a ceiling or with a disturbed one."""
    loader_samples_per_sec: float | None
    """Its input pipeline alone, no model (its data path's batches: for 'device' the gather
    and augmentation on the device); None without one."""
    loader_disturbed: bool
    """The loader-only rate is below the winner (which trains no faster than its input
    pipeline delivers): a disturbed measurement, never a bound."""
    data_path: str = "loader"
    """The winner's data path ('loader', 'cache' or 'device'), the one its loader-only
    ceiling measured."""
    machine_compute: MachineCompute | None = None
    """This machine's compute limit for this model (``MachineCompute``), beside the winner's
    same-knobs compute-only ceiling; None without a ``machine-compute`` measurement."""

    def compute_verdict(self, best_samples_per_sec: float) -> Verdict | None:
        """The compute-only ceiling against the winner (``verdict``); None without one."""
        bound = self.compute_samples_per_sec
        return None if bound is None else verdict(bound, best_samples_per_sec)

    def loader_verdict(self, best_samples_per_sec: float) -> Verdict | None:
        """The loader-only ceiling against the winner (``verdict``); None without one."""
        loader = self.loader_samples_per_sec
        return None if loader is None else verdict(loader, best_samples_per_sec)


@dataclass(frozen=True)
class Attainable:
    """The machine's attainable samples/sec. Its compute limit: the best compute-only rate
    measured (the largest batch in the fastest precision, the run's global batch kept, or the
    winner's own). Its input limit: per data path the run tried, the highest loader-only rate
    measured for it, counted once the path's own machine limit is measured (every CPU a worker;
    for 'device', which has no workers, its loader-only rate). On a GPU the attainable rate is
    min(compute limit, best input limit over the paths) (``model`` 'min'); on the CPU device,
    with the one-core ceilings measured for every such path, it is the best over the paths of
    min(cores / (compute + input core-seconds per sample), compute limit, the path's input
    limit) (``model`` 'shared cores'). The first three fields are None without a compute
    limit and an input limit."""

    samples_per_sec: float | None
    bound_by: str | None
    """Which limit binds: 'compute', 'input pipeline', or 'shared cores' (the CPU's cores
    cannot run the compute and the input pipeline at their own limits at once)."""
    share: float | None
    """Winner ÷ attainable (<= 1); None when the winner ran above it (a limit measured low:
    disturbed), or without it."""
    compute_samples_per_sec: float | None = None
    """The compute limit, samples/sec; None without a ``machine-compute`` measurement."""
    input_by_path: Mapping[str, float] = field(default_factory=dict)
    """Data path -> its input limit, samples/sec (the paths whose machine limit is measured)."""
    data_path: str | None = None
    """The data path of the attainable rate: the best input limit (under 'shared cores', the
    highest bound); None without one."""
    input_samples_per_sec: float | None = None
    """That path's input limit, samples/sec."""
    model: str = "min"
    """'min' (the lower limit binds: the compute runs on a GPU, or the one-core ceilings are
    missing) or 'shared cores' (the CPU device: see the class docstring)."""
    cores: int | None = None
    """CPUs a trial may use (the most any trial of the run was given), for 'shared cores'."""
    compute_core_s_per_sample: float | None = None
    """Core-seconds the compute takes per sample, measured on one core; None without it."""
    input_core_s_per_sample: Mapping[str, float] = field(default_factory=dict)
    """Data path -> core-seconds its input pipeline takes per sample, measured on one core."""

    @property
    def lever(self) -> tuple[str, float, float] | None:
        """(data path, the 'loader' path's input limit, that path's) where a data path other
        than 'loader' gave the attainable rate with an input limit over ``LEVER_MIN_RATIO``
        times the loader path's, both measured; else None (a lift within the noise is none)."""
        path = self.data_path
        loader = self.input_by_path.get("loader")
        if path in (None, "loader") or loader is None or self.input_samples_per_sec is None:
            return None
        lifted = self.input_samples_per_sec > LEVER_MIN_RATIO * loader
        return (path, loader, self.input_samples_per_sec) if lifted else None


LEVER_MIN_RATIO = 1.10
"""The least lift of the input limit a data path must give over the 'loader' path's to be
named as the lever: two loader-only measurements of one configuration differ by up to about
5 % on a quiet CPU (``CEILING_NOISE``); a lift within twice that is not claimed."""


def lever_text(attainable: Attainable) -> str | None:
    """'input pipeline: 212 → 2,140 samples/sec with the decoded cache (10.1x)': which data
    path lifted the input limit over the DataLoader's and by how much; None without a lever
    (``Attainable.lever``)."""
    if attainable.lever is None:
        return None
    path, before, after = attainable.lever
    return (f"input pipeline: {before:,.0f} → {after:,.0f} samples/sec with "
            f"{LEVERS.get(path, path)} ({after / before:.1f}x)")


def attainable_text(attainable: Attainable) -> str:
    """How the attainable rate was bound, in one phrase: 'bound by input pipeline:
    min(compute-only 400.0, input pipeline 125.0 with the DataLoader)', or on the CPU device
    'bound by shared cores: on CPU the input pipeline and the model share the 2 cores:
    2 / (4.00 + 3.00 core-ms per sample), at most min(...)'."""
    a = attainable
    path = LEVERS.get(a.data_path or "loader", a.data_path)
    limits = (f"min(compute-only {a.compute_samples_per_sec:,.1f}, input pipeline "
              f"{a.input_samples_per_sec:,.1f} with {path})")
    if a.model != "shared cores":
        return f"bound by {a.bound_by}: {limits}"
    core_ms = 1e3 * a.input_core_s_per_sample[a.data_path]
    return (f"bound by {a.bound_by}: on CPU the input pipeline and the model share the "
            f"{a.cores} cores: {a.cores} / ({1e3 * a.compute_core_s_per_sample:.2f} + "
            f"{core_ms:.2f} core-ms per sample), at most {limits}")


def attainable_summary(attainable: Attainable) -> str | None:
    """'125.0 samples/sec attainable here, 80 % of it reached; ' + ``attainable_text`` and, where
    a data path lifted the input limit, '; ' + ``lever_text``. None without an attainable rate
    the best stayed under (``Attainable.share`` None)."""
    a = attainable
    if a.share is None:
        return None
    parts = [f"{a.samples_per_sec:,.1f} samples/sec attainable here, {100 * a.share:.0f} % of it "
             "reached", attainable_text(a), lever_text(a)]
    return "; ".join(part for part in parts if part)


def machine_summary(answer: Any) -> str | None:
    """'this machine's compute limit: 5,304.0 samples/sec at bs=652 amp=bf16 (batches on the
    device), 42 % of it reached (2.40x the best); the same knobs' compute-only ceiling 94 %
    reached' for an answer (``tuner.winner.Answer``) whose run measured its machine-compute
    ceiling (``MachineCompute``); where the best ran faster, that the row is no bound. None
    without one."""
    limit = answer.ceilings.machine_compute
    if limit is None:
        return None
    judged = limit.verdict
    head = (f"this machine's compute limit: {limit.samples_per_sec:,.1f} samples/sec at "
            f"{limit.knobs_text} ({limit.data_path})")
    if judged.judgement == "at it":
        return (f"{head}, {100 * judged.below:.0f} % below the best, within the noise: the "
                "best computes at this machine's limit")
    if judged.judgement == "not a bound":
        return (f"{head}: the best ran faster, so it is no limit (a disturbed measurement, or "
                "a smaller batch computes faster here)")
    same = answer.ceilings.compute_verdict(answer.samples_per_sec)
    same_text = (f"; the same knobs' compute-only ceiling {100 * same.share:.0f} % reached"
                 if same is not None and same.judgement == "bound" else "")
    return (f"{head}, {100 * judged.share:.0f} % of it reached ({judged.headroom:.2f}x the "
            f"best){same_text}")


def machine_limit_hidden(answer: Any) -> bool:
    """This machine's compute limit (``Ceilings.machine_compute``) lies more than the noise
    (``CEILING_NOISE``) above both the best (``tuner.winner.Answer``) and its same-knobs
    compute-only ceiling: that ceiling's share alone ('94 % of it') would hide the rate left in
    the batch size and precision."""
    limit = answer.ceilings.machine_compute
    if limit is None or limit.verdict.judgement != "bound":
        return False
    below = max(answer.samples_per_sec, answer.ceilings.compute_samples_per_sec or 0.0)
    return limit.samples_per_sec * (1 - CEILING_NOISE) > below


def ceiling_rates(rows: list[dict], knobs: Mapping) -> dict[tuple[str, str], list[float]]:
    """The successful measurements (samples/sec) of each ceiling among one run's rows, by
    (kind, data path): the winner's own kinds (``WINNER_LABELS``) only from rows with its
    ``knobs`` (name -> value); rows before the ``ceiling`` column are compute ceilings."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if phase_of(r) != Phase.CEILING or r["status"] != Status.OK:
            continue
        kind = r.get("ceiling") or "compute"
        if kind in WINNER_LABELS and any(r.get(n) != v for n, v in knobs.items()):
            continue
        out.setdefault((kind, r.get("data_path") or "loader"), []).append(r["samples_per_sec"])
    return out


def ceilings(top: Mapping, same_run: list[dict]) -> tuple[Ceilings, Attainable]:
    """The winner's ceilings and the machine's attainable rate, from its run's rows (``top``:
    the winner's row, ``samples_per_sec`` its mean)."""
    best_sps = top["samples_per_sec"]
    path = top.get("data_path") or "loader"
    measured = ceiling_rates(same_run, {name: top.get(name) for name in Knobs.names()})
    highest = {key: max(rates) for key, rates in measured.items()}
    # A ceiling below what it bounds is a disturbed measurement (measured again by the run):
    # the highest of its measurements counts, and none below the winner gives an efficiency.
    bound, loader = highest.get(("compute", path)), highest.get(("loader", path))
    disturbed = bound is not None and bound < best_sps
    found = Ceilings(
        compute_samples_per_sec=bound,
        compute_measurements=len(measured.get(("compute", path), [])),
        compute_disturbed=disturbed,
        pipeline_efficiency=best_sps / bound if bound is not None and not disturbed else None,
        loader_samples_per_sec=loader,
        # The winner trains no faster than its input pipeline delivers alone.
        loader_disturbed=loader is not None and loader < best_sps, data_path=path,
        machine_compute=machine_compute(same_run, best_sps))
    # The machine computes at least as fast as any compute-only rate measured on it; on CPU
    # the largest batch is not always the fastest, so the winner's own ceiling counts too.
    compute = max((r for (kind, _), r in highest.items() if kind == "machine-compute"),
                  default=None)
    if compute is not None and bound is not None:
        compute = max(compute, bound)
    # The shared-cores model is the CPU device's: on a GPU the compute does not use the cores.
    on_cpu = (top.get("device") or "cpu") == "cpu"
    core_compute = highest.get(("core-compute", path)) if on_cpu else None
    return found, attainable(
        best_sps, compute, input_limits(highest),
        cores=_cores(same_run) if core_compute else None,
        compute_core_s=1 / core_compute if core_compute else None,
        input_core_s=input_core_seconds(same_run))


def input_core_seconds(rows: list[dict]) -> dict[str, float]:
    """Data path -> core-seconds its input pipeline takes per sample: of its fastest one-core
    ceiling ('core-loader'), the CPU seconds it used per sample (``cpu_s_per_sample``), or
    where the row has none (files before the column) its wall seconds (1 / its rate)."""
    out: dict[str, tuple[float, float]] = {}
    for r in rows:
        rate = r.get("samples_per_sec")
        if (phase_of(r) != Phase.CEILING or r["status"] != Status.OK or not rate
                or (r.get("ceiling") or "").partition(" ")[0] != "core-loader"):
            continue
        path = r.get("data_path") or "loader"
        if path not in out or rate > out[path][0]:
            out[path] = (rate, r.get("cpu_s_per_sample") or 1 / rate)
    return {path: core_s for path, (_, core_s) in out.items()}


def input_limits(highest: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Data path -> its input limit: the highest loader-only rate measured for it (its
    one-core rate aside), for each path whose machine limit is measured ('machine-loader',
    or any loader-only row for 'device', which has no workers)."""
    out: dict[str, float] = {}
    for (kind, path), rate in highest.items():
        if kind in LOADER_LABELS and kind not in CORE_LABELS:
            out[path] = max(out.get(path, rate), rate)
    return {path: rate for path, rate in out.items()
            if path == "device" or ("machine-loader", path) in highest}


def _cores(rows: list[dict]) -> int | None:
    """The CPUs a trial of the run may use: the most any of its trials was given (a trial
    alone on its node is given all of them), else the machine's CPU count."""
    given = [r["trial_cpus"] for r in rows if r.get("trial_cpus")]
    if given:
        return int(max(given))
    return next((int(r["cpu_count"]) for r in rows if r.get("cpu_count")), None)


def attainable(best_sps: float, compute: float | None, inputs: Mapping[str, float], *,
               cores: int | None = None, compute_core_s: float | None = None,
               input_core_s: Mapping[str, float] | None = None) -> Attainable:
    """The attainable rate from the compute limit ``compute`` and each data path's input limit
    ``inputs`` (samples/sec), which binds, and ``best_sps``'s share of it (none when the best
    ran above it: a limit was measured low). With ``cores``, ``compute_core_s`` and every
    path's ``input_core_s`` (core-seconds per sample, one core each), the shared-cores model
    (see ``Attainable``)."""
    input_core_s = dict(input_core_s or {})
    shared = bool(cores and compute_core_s and inputs and set(inputs) <= set(input_core_s))
    base = dict(compute_samples_per_sec=compute, input_by_path=dict(inputs),
                model="shared cores" if shared else "min", cores=cores,
                compute_core_s_per_sample=compute_core_s, input_core_s_per_sample=input_core_s)
    if compute is None or not inputs:
        return Attainable(None, None, None, **base)
    bounds = {}
    for path, rate in inputs.items():
        limits = {"compute": compute, "input pipeline": rate}
        if shared:
            limits["shared cores"] = cores / (compute_core_s + input_core_s[path])
        # the lowest limit binds; compute first on a tie (the order above)
        bound_by = min(limits, key=limits.get)
        bounds[path] = (limits[bound_by], rate, bound_by)
    path = max(bounds, key=lambda p: bounds[p][:2])
    rate, input_rate, bound_by = bounds[path]
    return Attainable(rate, bound_by, best_sps / rate if best_sps <= rate else None,
                      **base, data_path=path, input_samples_per_sec=input_rate)


WAIT_SHARE = 0.5
"""An input pipeline waits (on storage, a network) rather than computes when its workers keep
less than this share of the cores they could use busy (CPU seconds per sample x samples/sec <
``WAIT_SHARE`` x min(workers, cores)). Source: a pipeline bound by its decoding keeps its
workers' cores near 100 % busy; one whose decode sleeps 20 ms a sample (tests/landscapes.py,
io-bound) kept eight workers on two cores about 5 % busy."""


@dataclass(frozen=True)
class PipelineKind:
    """Whether an input pipeline computes or waits, from a loader-only ceiling row (its
    pipeline alone, no model) that measured its CPU seconds (``pipeline_kind``)."""

    waits: bool
    """Its workers kept under ``WAIT_SHARE`` of the cores they could use busy: more workers
    than cores deliver more (bounded by what the workers deliver, not by the cores)."""
    workers: int
    cores: int
    samples_per_sec: float
    cpu_s_per_sample: float

    @property
    def busy_cores(self) -> float:
        """Cores its workers kept busy: CPU seconds per sample x samples/sec."""
        return self.cpu_s_per_sample * self.samples_per_sec

    def text(self) -> str:
        """'input pipeline: waits on I/O (8 DataLoader workers delivered 385.2 samples/sec
        keeping 0.1 of 2 cores busy: 0.25 core-ms per sample against 20.8 ms of wall time per
        worker); workers past the cores pay' or 'input pipeline: compute-bound (...)'."""
        kind = "waits on I/O" if self.waits else "compute-bound"
        wall_ms = 1e3 * max(1, self.workers) / self.samples_per_sec
        tail = ("; workers past the cores pay" if self.waits
                else "; workers past the cores add nothing")
        return (f"input pipeline: {kind} ({self.workers} DataLoader workers delivered "
                f"{self.samples_per_sec:,.1f} samples/sec keeping {self.busy_cores:.1f} of "
                f"{self.cores} cores busy: {1e3 * self.cpu_s_per_sample:.2f} core-ms per sample "
                f"against {wall_ms:.1f} ms of wall time per worker){tail}")


def pipeline_kind(rows: list[dict], data_path: str = "loader") -> PipelineKind | None:
    """The kind of the ``data_path`` input pipeline of one run's ``rows``: from its loader-only
    ceiling with the most DataLoader workers (the fastest of those) that recorded its CPU
    seconds (``cpu_s_per_sample``); None without one (no workers, the 'device' path, files
    before the column) or without the machine's core count."""
    cores = _cores(rows)
    measured = [r for r in rows if phase_of(r) == Phase.CEILING and r["status"] == Status.OK
                and (r.get("ceiling") or "").partition(" ")[0] in LOADER_LABELS
                and (r.get("data_path") or "loader") == data_path and r.get("num_workers")
                and r.get("cpu_s_per_sample") and r.get("samples_per_sec")]
    if not measured or not cores:
        return None
    top = max(measured, key=lambda r: (r["num_workers"], r["samples_per_sec"]))
    kind = PipelineKind(False, int(top["num_workers"]), cores, float(top["samples_per_sec"]),
                        float(top["cpu_s_per_sample"]))
    usable = min(kind.workers, cores)
    return replace(kind, waits=kind.busy_cores < WAIT_SHARE * usable)


def pipeline_summary(rows: list[dict], data_path: str = "loader") -> str | None:
    """``PipelineKind.text`` of the ``data_path`` input pipeline of one run's ``rows``
    (``pipeline_kind``); None where none measured its CPU seconds."""
    kind = pipeline_kind(rows, data_path)
    return None if kind is None else kind.text()
