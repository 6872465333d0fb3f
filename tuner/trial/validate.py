"""Validation: does a trial's prediction hold in real training?

``validate`` trains with a configuration as a plain training loop — the loop a user writes,
one epoch (or a given number of steps), no windows, no Ray — and compares its steady-state
samples/sec with what the trial measured. Its batches come from executing the lines
``best --format python`` prints for the configuration's data path (``tuner.codegen.data_code``).
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from tuner.codegen import data_code, fill_workers, python_text, workload_lines
from tuner.errors import DataError, TunerError
from tuner.knobs import Knobs
from tuner.settings import compile_cache_path
from tuner.trial.apply import build_training, move_batch, omp_num_threads, trial_state
from tuner.trial.compile_artifacts import artifacts_path
from tuner.trial.measure import synchronize
from tuner.workload import Workload

MIN_MEASURED_STEPS = 20


@dataclass
class Validation:
    steps: int
    """Optimizer steps run in all."""
    warmup_steps: int
    """Leading steps left out of the steady-state figure (as in the trial)."""
    samples_per_sec: float
    """Steady state: samples after the warm-up steps / their wall time."""
    total_s: float
    """Wall time of the whole loop, warm-up included, s."""
    epochs: float
    data_code: str
    """The lines that made the batches, as ``best --format python`` prints them."""
    batches_s: float
    """Seconds those lines took (for 'cache' and 'device': decoding every sample once)."""
    torch_threads: int = 0
    """Torch intra-op threads the loop trained on (``torch.get_num_threads()``)."""
    omp_num_threads: int | None = None
    """``OMP_NUM_THREADS`` while the loop ran (None: unset)."""


# One loop a user would write, kept whole so that it reads as the plain loop it checks against
# the trial (data lines, warm-up, steady part); split, it would no longer read as that loop.
def train_loop(workload: Workload, knobs: Knobs, *, scale: str, device: str, data_dir: Path,
               steps: int | None = None, warmup_steps: int = 3, seed: int = 0,
               threads: int | None = None, warmup_s: float = 0.0,
               min_measured_s: float = 0.0, fill_workers: int = 0,
               world_size: int = 1, omp_threads: int | None = None,
               compile_cache_dir: str | None = None) -> Validation:
    """Train ``steps`` optimizer steps (default: one epoch, at least warm-up + 20 steps) as a
    plain loop and time it, in a trial's process-wide state (``trial_state``), on ``threads``
    torch intra-op threads on any device (None: torch's setting) with ``OMP_NUM_THREADS`` set
    to ``omp_threads`` (None: the environment's), both as a trial's row records them
    (``torch_threads``, ``omp_num_threads``) and put back on return.

    The batches come from executing ``tuner.codegen.data_code`` (what ``best --format python``
    prints) with ``workload``, ``data_dir`` and, for 'loader', ``dataset`` (``build_dataset``)
    bound; ``fill_workers`` decode the samples of a 'cache' or 'device' path once.

    The steady-state figure starts after ``warmup_steps`` steps and ``warmup_s`` seconds, and
    the loop goes on past ``steps`` (across epochs) until it has lasted ``min_measured_s``:
    given the trial's, it warms up and measures as long as the trial did (a short loop would
    measure the batches prefetched during the warm-up: 1.17x the trial's figure in 20 steps
    of ddpm on an H100). ``world_size`` > 1: one rank of a process group (``train_loop_ranks``).
    With compile on, torch.compile's caches live in ``compile_cache_dir`` (None: torch's
    default directory), as a trial's do (``trial_state``).

    Raises:
        DataError: the dataset holds fewer samples than one batch, or its decoded samples
            cannot be cached (``tuner.data.DecodedCache.fill``).
        TunerError: a 'cache' or 'device' path for a workload without ``sample_path``.
        Whatever training raises (OOM included; a DataLoader worker's error with its traceback).
    """
    torch.manual_seed(seed)
    dev = torch.device(device)
    applied, _ = knobs.clamp(dev.type)
    with same_threads(threads, omp_threads), trial_state(
            applied, dev, threads=threads, compile_cache_dir=compile_cache_dir) as state:
        code = data_code(applied, device=str(dev), scale=scale, workers=fill_workers,
                         collate=workload.collate_fn() is not None, world_size=world_size)
        loader, batches_s = _batches(code, workload, applied, Path(data_dir), scale)
        per_epoch = len(loader) // applied.grad_accum
        total = steps or max(per_epoch, warmup_steps + MIN_MEASURED_STEPS)
        training = build_training(workload, applied, scale, dev, world_size > 1)
        loop = _Loop(start=time.perf_counter(), warmup_steps=warmup_steps, warmup_s=warmup_s,
                     total=total, min_measured_s=min_measured_s)
        while not loop.finished:
            for batch in loader:  # a new epoch: workers restart unless persistent
                batch = move_batch(batch, dev, applied)
                with training.sync(last=(loop.micro + 1) % applied.grad_accum == 0):
                    training.backward(training.forward(batch))
                if loop.steady_start is not None:
                    loop.steady_samples += workload.samples_in(batch)
                loop.micro += 1
                if loop.micro % applied.grad_accum:
                    continue
                training.step()
                loop.done += 1
                if loop.steady_start is None and loop.warmed_up():
                    synchronize(dev)
                    loop.steady_start, loop.steady_steps = time.perf_counter(), loop.done
                if loop.finished:
                    break
        synchronize(dev)
        end = time.perf_counter()
    return Validation(steps=loop.done, warmup_steps=loop.steady_steps,
                      samples_per_sec=loop.steady_samples / (end - loop.steady_start),
                      total_s=end - loop.start, epochs=loop.done / max(per_epoch, 1),
                      data_code=code, batches_s=batches_s, torch_threads=state.threads,
                      omp_num_threads=state.omp_num_threads)


@contextlib.contextmanager
def same_threads(threads: int | None, omp_threads: int | None):
    """A trial's thread settings in this process, put back on exit: ``threads`` torch intra-op
    threads (None: unchanged) and ``OMP_NUM_THREADS`` = ``omp_threads`` (None: unchanged), which
    DataLoader workers started inside inherit. On CUDA a trial leaves torch's threads as its
    process had them (``trial_state``), so a plain loop outside that process differs unless
    they are set (a Ray worker has ``OMP_NUM_THREADS`` from Ray and 16 threads on a 16-CPU
    H200 node; a plain process has torch's default)."""
    saved_threads, saved_omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        if omp_threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(omp_threads)
        yield
    finally:
        torch.set_num_threads(saved_threads)
        if omp_threads is not None:
            if saved_omp is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = saved_omp


def train_loop_ranks(workload: Workload, knobs: Knobs, *, world_size: int, device: str,
                     **loop: Any) -> Validation:
    """``train_loop`` as a data-parallel job of ``world_size`` local processes, as ``torchrun
    --nproc-per-node`` would start it (gloo on CPU, nccl with one GPU per rank on CUDA), every
    rank the same steps (``loop``: ``train_loop``'s keywords; its time-based ``warmup_s`` and
    ``min_measured_s`` are not given, as ranks would disagree on them). Returns rank 0's
    figures with ``samples_per_sec`` global (the ranks step together on equal micro-batches).

    Raises:
        TunerError: a rank failed (its error), or none reported within ``RANKS_TIMEOUT_S``.
    """
    import torch.distributed as dist
    import torch.multiprocessing as mp
    # spawn, never fork: a fork of a process whose torch thread pools have run can crash in
    # the child (both ranks ended with SIGSEGV on a loaded 2-core machine)
    ctx = mp.get_context("spawn")
    # the rendezvous store listens here, on a port the OS picks, for the whole job: a port
    # found free and released before the ranks bind it can be taken in between
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=RENDEZVOUS_TIMEOUT_S))
    port = store.port
    results = ctx.SimpleQueue()
    procs = [
        ctx.Process(
            target=_rank_loop, args=(rank, world_size, port, results, workload, knobs, device, loop)
        )
        for rank in range(world_size)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + RANKS_TIMEOUT_S
    while results.empty() and time.monotonic() < deadline:
        if any(p.exitcode not in (None, 0) for p in procs):
            break
        time.sleep(0.2)
    outcome = None if results.empty() else results.get()
    for proc in procs:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    if not isinstance(outcome, Validation):
        failed = [f"rank {i} exit code {p.exitcode}" for i, p in enumerate(procs) if p.exitcode]
        raise TunerError(f"the {world_size}-rank loop failed: "
                         f"{outcome or ', '.join(failed) or 'no result in time'}")
    return outcome


RANKS_TIMEOUT_S = 1800.0
"""The longest ``train_loop_ranks`` waits for rank 0's figures."""

RENDEZVOUS_TIMEOUT_S = 300.0
"""The longest a rank waits for the others at the process group's rendezvous (a loaded host
starts a spawned rank in tens of seconds)."""


def _rank_loop(rank: int, world_size: int, port: int, results: Any, workload: Workload,
               knobs: Knobs, device: str, loop: dict) -> None:
    """One rank of ``train_loop_ranks``: its process group, its loop; rank 0 reports."""
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    dev = device
    if device == "cuda":
        torch.cuda.set_device(rank)
        dev = f"cuda:{rank}"
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False,
                              timeout=timedelta(seconds=RENDEZVOUS_TIMEOUT_S))
        dist.init_process_group("nccl" if device == "cuda" else "gloo", store=store,
                                rank=rank, world_size=world_size)
    except Exception as exc:  # the parent says it in one line
        results.put(f"rank {rank}: joining the process group: {type(exc).__name__}: {exc}")
        raise SystemExit(1) from None
    try:
        v = train_loop(workload, knobs, device=dev, world_size=world_size, **loop)
        if rank == 0:
            results.put(replace(v, samples_per_sec=v.samples_per_sec * world_size))
    except Exception as exc:  # the parent says it in one line
        results.put(f"rank {rank}: {type(exc).__name__}: {exc}")
        raise SystemExit(1) from None
    finally:
        dist.destroy_process_group()


def ranks_for(row: dict, world_size: int | None) -> int:
    """The ranks ``validate`` trains for a leaderboard ``row``: the trial's world size;
    ``world_size`` (``--world-size``) must say the same, as a global figure holds for its own
    world size.

    Raises:
        TunerError: another world size, or fewer GPUs here than a CUDA trial's ranks.
    """
    ranks = int(row.get("world_size") or 1)
    if world_size is not None and world_size != ranks:
        raise TunerError(f"--world-size {world_size}: trial {row['trial_id']} trained on {ranks} "
                         f"rank(s); accepted: {ranks}")
    if row["device"] == "cuda" and ranks > 1 and torch.cuda.device_count() < ranks:
        raise TunerError(f"trial {row['trial_id']} trained on {ranks} GPUs; this machine has "
                         f"{torch.cuda.device_count()}")
    return ranks


def loop_for_row(workload: Workload, knobs: Knobs, row: dict, *, data_dir: Path,
                 steps: int | None, threads: int | None, ranks: int,
                 compile_cache_dir: str | None = None) -> Validation:
    """The plain loop for a leaderboard ``row``: its scale and device, its scale's warm-up
    steps, the trial's CPUs as the cache's fill workers, its torch threads (``threads``, else
    the row's ``torch_threads``) and ``OMP_NUM_THREADS`` (the row's ``omp_num_threads``); one
    rank: warmed up and measured as long as the trial was, without ``steps``; ``ranks`` > 1:
    ``train_loop_ranks``. One rank compiles into ``compile_cache_dir`` (the run's cache)."""
    from tuner.settings import MEASUREMENT_DEFAULTS
    threads = threads or row.get("torch_threads")
    common = dict(scale=row["scale"], data_dir=data_dir, steps=steps, threads=threads,
                  omp_threads=row.get("omp_num_threads"),
                  warmup_steps=MEASUREMENT_DEFAULTS[row["scale"]][0],
                  fill_workers=fill_workers(row.get("trial_cpus")))
    if ranks > 1:
        return train_loop_ranks(workload, knobs, world_size=ranks, device=row["device"],
                                **common)
    return train_loop(workload, knobs, device=row["device"],
                      warmup_s=0.0 if steps else row.get("warmup_s") or 0.0,
                      min_measured_s=0.0 if steps else row.get("measured_s") or 0.0,
                      compile_cache_dir=compile_cache_dir, **common)


@dataclass
class InterleavedRound:
    """One round of ``interleaved``: the plain loop, then the harness, on the same knobs."""
    loop_samples_per_sec: float
    harness_samples_per_sec: float | None
    """The harness's median over its windows; None when its trial did not measure (status)."""
    harness_status: str

    @property
    def ratio(self) -> float | None:
        """Plain loop ÷ harness in this round."""
        h = self.harness_samples_per_sec
        return None if not h else self.loop_samples_per_sec / h


@dataclass
class Interleaved:
    """``interleaved``'s rounds, and the threads both sides ran with."""
    rounds: list[InterleavedRound] = field(default_factory=list)
    torch_threads: int = 0
    omp_num_threads: int | None = None

    @property
    def ratios(self) -> list[float]:
        return [r.ratio for r in self.rounds if r.ratio is not None]

    @property
    def median_ratio(self) -> float | None:
        """The median of the rounds' plain loop ÷ harness ratios; None without a round."""
        return statistics.median(self.ratios) if self.ratios else None


def interleaved(workload: Workload, knobs: Knobs, row: dict, settings: Any, *, rounds: int = 2,
                stop_at: float | None = None) -> Interleaved:
    """The plain loop (``train_loop``) and the harness's measurement
    (``tuner.trial.harness.run_trial`` with ``settings``, a ``TrialSettings``) of the same
    ``knobs``, alternating in this process (A B A B ...), ``rounds`` rounds or fewer where a
    round would start after ``stop_at`` (``time.time()``; one round always runs).
    Both run with the trial's thread settings (the ``row``'s ``torch_threads`` and
    ``omp_num_threads``, ``same_threads``) and, on CPU, its CPUs (``trial_cpus``); the loop
    warms up for ``settings.warmup_steps`` steps and as long as the
    trial's warm-up beyond its first step, then measures as long as ``settings``' windows. So
    both sides see the same host, threads and process: the ratio says what the plain loop
    and the harness measure differently, not how the host or the process differ.

    Raises:
        Whatever ``train_loop`` raises; a harness trial that fails is a round without a ratio.
    """
    from tuner.status import Status
    from tuner.trial.harness import run_trial
    warmup_s = max(0.0, (row.get("warmup_s") or 0.0) - (row.get("first_step_s") or 0.0))
    measured_s = settings.windows * settings.window_s
    cpus = int(row["trial_cpus"]) if row.get("trial_cpus") else None
    out = Interleaved()
    with same_threads(row.get("torch_threads"), row.get("omp_num_threads")):
        out.torch_threads, out.omp_num_threads = torch.get_num_threads(), omp_num_threads()
        started = time.time()
        while len(out.rounds) < rounds:
            if out.rounds and stop_at is not None:
                round_s = (time.time() - started) / len(out.rounds)
                if time.time() + round_s > stop_at:
                    break
            a = train_loop(workload, knobs, scale=settings.scale, device=settings.device,
                           data_dir=Path(settings.data_dir), warmup_steps=settings.warmup_steps,
                           threads=row.get("torch_threads"), warmup_s=warmup_s,
                           min_measured_s=measured_s, omp_threads=row.get("omp_num_threads"))
            b = run_trial(workload, knobs, settings, cpus=cpus)
            ok = b["status"] == Status.OK and b.get("samples_per_sec")
            out.rounds.append(InterleavedRound(a.samples_per_sec,
                                               b["samples_per_sec"] if ok else None,
                                               str(b["status"])))
    return out


def check_data_path(workload: Workload, knobs: Knobs) -> None:
    """Raise TunerError (one line) when ``knobs.data_path`` needs a ``Workload.sample_path``
    that ``workload`` does not implement."""
    if knobs.data_path != "loader" and not workload.has_sample_path:
        raise TunerError(f"data_path={knobs.data_path}: workload {workload.name!r} does not "
                         "split its sample path (Workload.sample_path); accepted for it: "
                         "data_path=loader")


def _batches(code: str, workload: Workload, knobs: Knobs, data_dir: Path, scale: str):
    """``loader`` as ``code`` (``data_code``) binds it, and the seconds the lines took.
    Raises TunerError, DataError."""
    check_data_path(workload, knobs)
    namespace = {"workload": workload, "data_dir": data_dir}
    if knobs.data_path == "loader":
        namespace["dataset"] = workload.build_dataset(data_dir, scale)
    started = time.perf_counter()
    try:
        exec(compile(code, "<best --format python>", "exec"), namespace)
    except ValueError as exc:  # DecodedCache.fill, DeviceBatches: samples that cannot batch
        raise DataError(f"data {data_dir}: {exc}") from None
    loader = namespace["loader"]
    if len(loader) == 0:  # every epoch would be empty: the loop would never end
        samples = len(loader.dataset)  # a DataLoader: DeviceBatches refuses an empty epoch
        raise DataError(f"data {data_dir}: its {samples} samples make no batch of "
                        f"batch_size {knobs.batch_size} (batches drop the incomplete "
                        "last one)")
    return loader, time.perf_counter() - started


def best_code(spec: str, knobs: Knobs, row: dict, results: str | None = None) -> str:
    """What ``best --format python`` prints for a leaderboard row: ``knobs`` as the row's
    device applied them (``Knobs.clamp``), its scale, the trial's CPUs as the cache's fill
    workers, and the lines that import the workload ``spec`` names (``workload_source``).
    With ``results`` (the row's results folder), a compiled row whose trial saved its
    compile artifacts there (``tuner.trial.compile_artifacts``) gets the lines that load them.

    Raises:
        TunerError: a 'cache' or 'device' path for a workload without ``sample_path``.
    """
    device = row.get("device") or "cuda"
    applied, _ = knobs.clamp(device)
    workload, lines = workload_source(spec)
    if workload is not None:
        check_data_path(workload, applied)
    return python_text(applied, device, scale=row.get("scale"),
                       workers=fill_workers(row.get("trial_cpus")), workload=lines,
                       collate=workload is not None and workload.collate_fn() is not None,
                       world_size=int(row.get("world_size") or 1),
                       compile_artifacts=_saved_artifacts(results, applied, row))


def _saved_artifacts(results: str | None, knobs: Knobs, row: dict) -> str | None:
    """The compiled row's artifact file in ``results``' compile cache, if it exists."""
    if results is None or knobs.compile == "off":
        return None
    path = artifacts_path(compile_cache_path(results), row.get("workload") or "",
                          row.get("scale"), row.get("device") or "cuda",
                          int(row.get("world_size") or 1), knobs.to_dict())
    return str(path) if path.is_file() else None


def workload_source(spec: str) -> tuple[Workload | None, list[str] | None]:
    """The workload a read command's ``--workload`` names, and the lines that import it
    (``tuner.codegen.workload_lines``): an import path, a known name (built-in or entry
    point), or a configured classifier's leaderboard name ('classifier-resnet50-224px':
    the base workload with ``configure(model=..., image_size=...)``). (None, None) for a
    name not found from here or a workload that fails to import."""
    from tuner.workload_loader import available, configured, resolve
    known = available()
    try:
        if ":" in spec or spec in known:
            return resolve(spec), workload_lines(spec if ":" in spec else known[spec])
        for base, path in known.items():
            match = re.fullmatch(rf"{re.escape(base)}-(.+)-([0-9]+)px", spec)
            if match is None:
                continue
            model = match[1]
            model = "timm:" + model[len("timm-"):] if model.startswith("timm-") else model
            options = {"model": model, "image_size": int(match[2])}
            workload = configured(resolve(base), options)
            if workload.name == spec:
                return workload, workload_lines(path, options)
    except TunerError:
        pass
    return None, None


@dataclass
class _Loop:
    """Where ``train_loop`` is: steps done, micro-batches, the steady part's start and samples."""
    start: float
    warmup_steps: int
    warmup_s: float
    total: int
    min_measured_s: float
    done: int = 0
    micro: int = 0
    steady_start: float | None = None
    steady_steps: int = 0
    steady_samples: int = 0

    def warmed_up(self) -> bool:
        return (self.done >= self.warmup_steps
                and time.perf_counter() - self.start >= self.warmup_s)

    @property
    def finished(self) -> bool:
        """``total`` steps done, the steady part begun and ``min_measured_s`` long (at least
        one step past its start)."""
        return (self.done >= self.total and self.steady_start is not None
                and self.done > self.steady_steps
                and time.perf_counter() - self.steady_start >= self.min_measured_s)
