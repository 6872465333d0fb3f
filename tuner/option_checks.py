"""A run's options checked and resolved into a plan (``tuner.plan.Plan``) before any trial.

Everything a user can get wrong (workload, search space, data, limits, objective, device) is
checked by ``make_plan`` and raised as ``TunerError`` with one clear line; nothing is written
before it passes. A cluster address is checked where Ray connects (``tuner.ray_runtime``).
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import time
from dataclasses import replace
from pathlib import Path

import tuner.leaderboard as leaderboard
from tuner.budget import default_time_budget_s
from tuner.errors import DataError, TunerError
from tuner.hardware import cpu_has_native_bf16
from tuner.plan import Plan, Resources, is_earlier_row
from tuner.search_policy import SCREENED_TRIALS_FACTOR, narrow_space
from tuner.settings import (
    DEVICES,
    MEASUREMENT_DEFAULTS,
    MemoryLimit,
    RunOptions,
    TrialSettings,
    compile_cache_path,
    default_cache_dir,
    default_scale,
)
from tuner.space import Space, load_space
from tuner.trial.flops import conv_flops_share, has_image_layout, model_flops_per_sample
from tuner.workload import Workload
from tuner.workload_loader import configured, resolve


def local_cpus() -> int:
    """This machine's CPUs: the node a local run's trials have, one at a time
    (``TrialResources.whole_node``), and so what ``profile`` measures a configuration with."""
    return os.cpu_count() or 1


def local_resources(device: str) -> Resources:
    """This machine's resources for ``--device`` ('auto', 'cpu' or 'cuda'). Raises TunerError."""
    device = resolve_device(device)
    import torch
    return Resources(device, torch.cuda.device_count() if device == "cuda" else 0, local_cpus())


def make_plan(options: RunOptions, resources: Resources | None = None) -> Plan:
    """Resolve and validate a run: workload, space, results location, device, data, references,
    trial settings, and the run to resume. Starts nothing: with ``--address`` the caller
    connects first and passes the cluster's ``resources`` (default: this machine's).

    Raises:
        TunerError (DataError, SpaceError): anything a user can get wrong, in one line.
    """
    planned_at = time.monotonic()  # the time budget counts from here (Plan.planned_at)
    ceiling_note = []
    if options.world_size > 1 and options.ceiling:
        options = replace(options, ceiling=False)
        ceiling_note.append(f"--world-size {options.world_size}: the ceilings (compute-only, "
                            "loader-only, the machine's) are measured in one-rank runs only")
    workload = resolve_workload(options)
    space = (load_space(options.space_file, is_file=True) if options.space_file
             else load_space(workload.space_name))
    leaderboard.check_results(options.results)
    resources = resources or local_resources(options.device)
    device = resources.device
    notes = ceiling_note + check_limits(options, device)
    scale = options.scale or default_scale(device)
    data_dir, samples = checked_data(workload, options.data, scale)
    device_space = _device_space(space, workload, options, resources, scale, samples, notes)
    references = device_space.fit_references(
        {name: knobs.clamp(device)[0] for name, knobs in workload.references.items()})
    max_host_memory_mb = _host_limit_mb(options.max_host_memory)
    warmup, windows, window_s = MEASUREMENT_DEFAULTS[scale]
    settings = TrialSettings(
        scale=scale, device=device, data_dir=str(data_dir),
        warmup_steps=options.warmup_steps or warmup, windows=options.windows or windows,
        window_s=options.window_s or window_s, seed=options.seed,
        max_memory=options.max_memory, max_host_memory_mb=max_host_memory_mb,
        train_steps=options.train_steps, default_data=options.data is None,
        model_flops_per_sample=model_flops_per_sample(workload, scale, data_dir),
        conv_flops_share=conv_flops_share(workload, scale, data_dir),
        peak_tflops=options.peak_tflops, world_size=options.world_size,
        rank_cpus=_rank_cpus(options, resources), keep_cache=max_host_memory_mb is None,
        compile_cache_dir=compile_cache_path(options.results))  # keep_cache: processes are reused
    screened = options.screen_windows > 0 and options.confirm > 0
    trials = options.trials or (None if options.time_budget_s else (
        (40 if device == "cuda" else 12) * (SCREENED_TRIALS_FACTOR if screened else 1)))
    time_budget_s = options.time_budget_s or default_time_budget_s(device, options.trials)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id, prior_rows = f"{workload.name}-{stamp}-{secrets.token_hex(2)}", ()
    if options.resume is not None:
        run_id, prior_rows = _resumed_run(options, workload.name, scale, device)
    if options.warm_start and not _has_earlier_rows(options, workload.name, scale, device, run_id):
        where = f" on {_local_hardware_key(device)}" if options.address is None else ""
        notes.append(f"--warm-start: no earlier rows of {workload.name} at {scale} scale{where} "
                     f"in {options.results}; the search starts from scratch")
    plan = Plan(options=options, workload=workload, space=space, device=device,
                gpus=resources.gpus, node_cpus=resources.node_cpus, scale=scale,
                data_dir=data_dir, samples=samples, device_space=device_space,
                references=references, settings=settings, trials=trials, run_id=run_id,
                max_host_memory_mb=max_host_memory_mb, prior_rows=prior_rows,
                notes=tuple(notes), time_budget_s=time_budget_s, planned_at=planned_at)
    plan = narrow_space(plan)
    plan.reference_params  # a reference outside the space fails here, before Ray starts
    return plan


def _rank_cpus(options: RunOptions, resources: Resources) -> int | None:
    """CPUs each rank of a data-parallel trial asks for: the node's CPUs shared among the
    ranks on it (all of them on CPU or on one node's GPUs). None with world size 1.

    Raises:
        TunerError: more ranks than the machine has GPUs (CUDA) or CPUs (CPU).
    """
    n = options.world_size
    if n == 1:
        return None
    have = resources.gpus if resources.device == "cuda" else resources.node_cpus
    what = "GPUs" if resources.device == "cuda" else "CPUs"
    if n > have and options.address is None:
        raise TunerError(f"--world-size {n}: this machine has {have} {what}; a rank needs one "
                         f"(accepted: 1..{have})")
    per_node = min(n, resources.gpus) if resources.device == "cuda" else n
    return max(1, resources.node_cpus // max(1, per_node))


def _resumed_run(options: RunOptions, workload: str, scale: str,
                 device: str) -> tuple[str, tuple[dict, ...]]:
    """(run id, rows) of the run ``--resume`` names ('latest': the newest of this workload,
    scale and device). Raises TunerError when there is none."""
    which = options.resume
    rows = [r for r in leaderboard.read(options.results, workload=workload).to_pylist()
            if r["scale"] == scale and r["device"] == device]
    runs: dict[str, list[dict]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], []).append(r)
    if not runs:
        raise TunerError(f"--resume: no run of {workload} at {scale} scale on "
                         f"{device} in {options.results}")
    if which == "latest":
        earliest = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        which = max(runs, key=lambda rid: max(
            (r["started_at"] for r in runs[rid] if r["started_at"] is not None),
            default=earliest))
    if which not in runs:
        raise TunerError(f"--resume {which}: no such run; runs of {workload} here: "
                         f"{', '.join(sorted(runs))}")
    return which, tuple(leaderboard.normalise_row(r) for r in runs[which])


def checked_data(workload: Workload, data: str | None, scale: str) -> tuple[Path, int]:
    """The data a command reads (``run``, ``profile``, ``validate``), checked before anything
    is measured: ``data`` (``--data``; None: the workload's embedded data, written to the
    cache once) must exist in the form the workload takes (a directory, not empty; or one
    file), and ``workload.check_data`` must pass (the built-ins decode every file).

    Returns:
        (the resolved data path, the number of samples ``check_data`` counted).

    Raises:
        DataError: naming ``--data`` or the file that fails, in one line.
    """
    data_dir = _data_dir(workload, data, scale)
    return data_dir, workload.check_data(data_dir, scale)


def _device_space(space: Space, workload: Workload, options: RunOptions, resources: Resources,
                  scale: str, samples: int, notes: list[str]) -> Space:
    """The space a run samples on its device (``Space.for_device``), less what cannot change
    anything there: ``channels_last`` for a model without Conv2d/3d, bf16 on a CPU that only
    emulates it (said in ``notes``); fitted to ``--global-batch-size``."""
    device = resources.device
    device_space = space.for_device(device, max_workers=resources.node_cpus, max_batch=samples)
    if options.world_size > 1:
        device_space = device_space.for_world_size(options.world_size, resources.node_cpus)
    if not has_image_layout(workload, scale):  # no Conv2d/3d: channels_last changes nothing
        device_space = device_space.fixed("channels_last", False)
    amp = device_space.domains.get("amp")
    if (device == "cpu" and options.address is None
            and "bf16" in getattr(amp, "values", ()) and not cpu_has_native_bf16()):
        device_space = device_space.without("amp", "bf16")
        notes.append("amp=bf16 is not searched: this CPU has no native bf16 (AVX512-BF16, AMX "
                     "or Arm BF16 in /proc/cpuinfo), where torch emulates it through fp32 (~10x "
                     "slower than fp32 for ddpm on a 2-core AVX2 EPYC); a reference using it "
                     "still runs")
    if options.global_batch_size is not None:
        n = options.world_size
        if options.global_batch_size % n:
            raise TunerError(f"--global-batch-size {options.global_batch_size} is not a multiple "
                             f"of --world-size {n}: each rank takes an equal share")
        device_space = device_space.with_global_batch(options.global_batch_size // n)
    return device_space


def check_limits(options: RunOptions, device: str) -> list[str]:
    """Check ``--max-memory`` and ``--max-host-memory`` against the machine the trials run on
    (this one; on a cluster, ``--address``, the nodes' memory is not known here and a size
    larger than a node's is that node's memory, ``MemoryLimit.resolve_mib``).

    Returns:
        Notes for options that do nothing here: ``--max-memory`` on the CPU device.

    Raises:
        TunerError: a size larger than this machine's RAM (psutil) or, on CUDA, than the
            smallest visible GPU's memory (torch), naming that figure.
    """
    notes = []
    if options.max_memory is not None and device != "cuda":
        notes.append(f"--max-memory {_shown(options.max_memory)} does nothing on the CPU "
                     "device (it limits GPU memory); host memory is --max-host-memory")
    if options.address is not None:
        return notes
    if options.max_memory is not None and device == "cuda":
        import torch
        props = min((torch.cuda.get_device_properties(i)
                     for i in range(torch.cuda.device_count())), key=lambda p: p.total_memory)
        _check_size("--max-memory", options.max_memory, props.total_memory / 2**20,
                    f"the memory of this machine's GPU ({props.name})")
    if options.max_host_memory is not None:
        import psutil
        _check_size("--max-host-memory", options.max_host_memory,
                    psutil.virtual_memory().total / 2**20, "this machine's RAM")
    return notes


def _check_size(flag: str, limit: MemoryLimit, total_mib: float, what: str) -> None:
    """Raise TunerError when ``limit`` is a size above ``total_mib`` MiB (``what`` has it)."""
    if limit.mib is not None and limit.mib > total_mib:
        raise TunerError(f"{flag} {_shown(limit)}: more than {what}, {total_mib / 1024:,.1f} GiB "
                         f"({total_mib:,.0f} MiB); give a size up to that, or a fraction such "
                         "as 0.8")


def _shown(limit: MemoryLimit) -> str:
    return limit.text or str(limit)


def _local_hardware_key(device: str) -> str:
    import torch

    from tuner.hardware import fingerprint
    return fingerprint(torch.device(device))["hardware_key"]


def _has_earlier_rows(options: RunOptions, workload: str, scale: str, device: str,
                      run_id: str) -> bool:
    """Whether ``--warm-start`` finds rows to seed from (``Plan._seed_rows`` reads them once
    Ray knows the hardware key: here, without ``--address``, this machine's key)."""
    key = _local_hardware_key(device) if options.address is None else None
    table = leaderboard.read(options.results, workload=workload, hardware_key=key)
    return any(is_earlier_row(r, run_id, scale) for r in table.to_pylist())


def resolve_workload(options: RunOptions) -> Workload:
    """The run's workload: ``options.workload`` resolved (``tuner.workload_loader.resolve``) and
    configured with ``options.workload_options`` (--model, --image-size).

    Raises:
        TunerError: an unknown workload, an option it does not take, or a value it rejects.
    """
    return configured(resolve(options.workload), options.workload_options)


def _data_dir(workload: Workload, data: str | None, scale: str) -> Path:
    if data is None:
        return workload.prepare_default_data(default_cache_dir() / "data", scale)
    path = Path(data).expanduser().resolve()
    if workload.data_is_file:
        if not path.is_file():
            raise DataError(f"--data {data}: no such file (workload {workload.name} "
                            "takes one text file)")
    elif not path.is_dir():
        raise DataError(f"--data {data}: no such directory")
    elif not any(path.iterdir()):
        raise DataError(f"--data {data}: the directory is empty")
    return path


def _host_limit_mb(limit: MemoryLimit | None) -> float | None:
    """The host memory limit in MiB, a fraction resolved against this machine's RAM."""
    if limit is None:
        return None
    import psutil
    return limit.resolve_mib(psutil.virtual_memory().total / 2**20)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA device is visible, else 'cpu'. Raises TunerError."""
    import torch
    if device not in DEVICES:
        raise TunerError(f"--device {device!r}: accepted values are {', '.join(DEVICES)}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise TunerError("--device cuda: no CUDA device is visible to torch on this machine")
    return device
