"""A configuration as code: the Python ``best --format python`` prints, and the part of it
``validate`` runs.

``python_text`` writes the torch flags, the batches of the configuration's data path, the
model, the optimizer and the training loop, to paste into a training script.
``data_code`` is the part that makes the batches (``loader``): a DataLoader over the user's
dataset (``loader``), a DataLoader over a ``tuner.data.CachedDataset`` (``cache``), or
``tuner.data.DeviceBatches`` (``device``). ``python_text`` prints it verbatim and
``tuner.trial.validate.train_loop`` executes that very text to make its batches, so the plain loop
that checks a trial's figure trains on what the printed lines build.

This module imports nothing of tuner's: ``Knobs.to_python`` delegates to it.
"""

from __future__ import annotations

from typing import Any, Mapping

LOADER_ARGS = "shuffle=True, drop_last=True"
"""What every DataLoader of the printed code is given besides the knobs (as the trials)."""


def fill_workers(trial_cpus: float | None) -> int:
    """DataLoader workers for ``DecodedCache.fill``: the CPUs the trial had (a trial fills its
    cache with them, ``tuner.trial.steppers.batch_source``), 0 (decode in the process) with one
    CPU; None (unknown): 0."""
    cpus = int(trial_cpus or 0)
    return cpus if cpus > 1 else 0


def data_code(knobs: Any, *, device: str, scale: str | None = None, workers: int = 0,
              collate: bool = False, world_size: int = 1) -> str:
    """The lines that bind ``loader``, an iterable giving one epoch of batches per ``iter``,
    for ``knobs.data_path``, with the imports they need.

    Names the lines read, to be bound before them: ``dataset`` for 'loader' (the user's
    dataset); ``workload`` (an object with ``sample_path(data_dir, scale)`` returning a
    ``tuner.data.SamplePath``) and ``data_dir`` for 'cache' and 'device', and ``scale`` when
    ``scale`` is None; ``workload`` for ``collate``.

    Args:
        knobs: a ``tuner.knobs.Knobs`` (its ``data_path``, ``batch_size`` and DataLoader kwargs).
        device: where 'device' keeps the decoded samples ('cuda', 'cpu').
        scale: the workload scale the trial ran, written as a literal (None: the name ``scale``).
        workers: DataLoader workers that decode the samples once (``fill_workers``).
        collate: pass ``collate_fn=workload.collate_fn()`` to the DataLoader.
        world_size: ranks of a data-parallel job (> 1: each rank's DataLoader reads its share
            through a ``DistributedSampler``, the process group initialised before).

    Raises:
        ValueError: a data path other than 'loader', 'cache' and 'device'.
    """
    kwargs = ", ".join(f"{k}={v!r}" for k, v in knobs.dataloader_kwargs().items())
    collate_arg = ", collate_fn=workload.collate_fn()" if collate else ""
    if knobs.data_path == "loader":
        return ("import torch\n\nloader = torch.utils.data.DataLoader(dataset, "
                f"{_loader_args('dataset', world_size)}{collate_arg}, {kwargs})\n")
    if knobs.data_path not in ("cache", "device"):
        raise ValueError(f"data_path {knobs.data_path!r}: accepted values are loader, cache, "
                         "device")
    scale_arg = "scale" if scale is None else repr(scale)
    fill = f"DecodedCache.fill(path.decoded, workers={workers})"
    lines = [
        "import torch",
        "from tuner.data import " + ("CachedDataset, DecodedCache" if knobs.data_path == "cache"
                                     else "DecodedCache, DeviceBatches"),
        "",
        f"path = workload.sample_path(data_dir, {scale_arg})  # decoded part + random part",
    ]
    if knobs.data_path == "cache":
        lines += [f"cache = {fill}  # decodes every sample once, into shared host memory",
                  "loader = torch.utils.data.DataLoader(CachedDataset(cache, path.augment), "
                  f"{LOADER_ARGS}{collate_arg}, {kwargs})"]
        if world_size > 1:  # the sampler needs the dataset by name
            lines[-1:] = ["samples = CachedDataset(cache, path.augment)",
                          "loader = torch.utils.data.DataLoader(samples, "
                          f"{_loader_args('samples', world_size)}{collate_arg}, {kwargs})"]
    else:
        lines += [f"cache = {fill}.to({device!r})  # decoded once, kept on the device",
                  f"loader = DeviceBatches(cache, {knobs.batch_size}, path.augment_batch)"
                  "  # shuffled, last batch dropped"]
    return "\n".join(lines) + "\n"


def _loader_args(dataset: str, world_size: int) -> str:
    """The DataLoader's arguments besides the knobs: shuffled, last batch dropped; over
    ranks, through a ``DistributedSampler`` of ``dataset`` (it shuffles)."""
    if world_size <= 1:
        return LOADER_ARGS
    return (f"sampler=torch.utils.data.DistributedSampler({dataset}, drop_last=True), "
            "drop_last=True")


def workload_lines(import_path: str, options: Mapping[str, Any] | None = None) -> list[str]:
    """The lines that bind ``workload`` (for 'cache', 'device' and a ``collate_fn``).

    Args:
        import_path: where the tuned workload lives: 'package.module:attribute', or
            'path/to/file.py:attribute' (imported with ``tuner.workload_loader.resolve``).
        options: ``Workload.configure`` keyword arguments (``--model``, ``--image-size``).
    """
    module, _, attr = import_path.rpartition(":")
    if module.endswith(".py") or "/" in module:
        lines = ["from tuner.workload_loader import resolve",
                 f"workload = resolve({import_path!r})  # the tuned workload"]
    else:
        alias = "" if attr == "workload" else " as workload"
        lines = [f"from {module} import {attr}{alias}  # the tuned workload"]
    given = {k: v for k, v in (options or {}).items() if v is not None}
    if given:
        args = ", ".join(f"{k}={v!r}" for k, v in given.items())
        lines.append(f"workload = workload.configure({args})")
    return lines


def python_text(knobs: Any, device: str = "cuda", *, scale: str | None = None,
                workers: int = 0, workload: list[str] | None = None,
                collate: bool = False, world_size: int = 1,
                compile_artifacts: str | None = None) -> str:
    """``knobs`` as Python to paste into a training script: ``data_code`` verbatim (after
    ``workload`` on the 'cache' and 'device' paths), torch's flags (CUDA), the model, the
    optimizer and the loop. The user's names are said in
    the first line: ``model``, ``loss_fn`` and ``lr``, with ``dataset`` ('loader') or
    ``data_dir`` ('cache', 'device'). Batches are taken as ``x, y``; on the 'device' path they
    are on the device already (no copies in the loop).

    Args:
        knobs: a ``tuner.knobs.Knobs``.
        device: 'cuda' or 'cpu'.
        scale, workers, collate: as ``data_code``.
        workload: ``workload_lines``, printed for 'cache', 'device' and ``collate`` (None:
            the name ``workload`` is the user's, said in a comment).
        world_size: ranks of a data-parallel job: > 1 adds the launch lines (``torchrun``, Ray
            Train), the process group, the ``DistributedSampler`` and
            ``DistributedDataParallel`` with the knobs' DDP settings.
        compile_artifacts: the path of the trial's saved torch.compile artifacts
            (``tuner.trial.compile_artifacts``): with compile on, the lines that load them
            before the first step follow ``torch.compile``. None: no such lines.
    """
    on_device = knobs.data_path == "device"
    yours = ["model", "loss_fn", "lr"]
    yours += ["dataset"] if knobs.data_path == "loader" else ["data_dir"]
    if knobs.data_path != "loader" and scale is None:
        yours.append("scale")
    needs_workload = knobs.data_path != "loader" or collate
    if needs_workload and workload is None:
        yours.append("workload")
    lines = [f"# yours: {', '.join(yours)}"]
    if world_size > 1:
        lines += _launch_lines(device, world_size)
    if needs_workload:
        lines += workload if workload is not None else [
            "# workload: the tuner Workload you tuned, or an object of yours whose "
            "sample_path(data_dir, scale) returns a tuner.data.SamplePath"]
    lines += data_code(knobs, device=device, scale=scale, workers=workers,
                       collate=collate, world_size=world_size).splitlines()
    if device == "cuda":
        precision = "high" if knobs.tf32 else "highest"
        lines += [
            f"torch.backends.cudnn.benchmark = {knobs.cudnn_benchmark}",
            f"torch.set_float32_matmul_precision({precision!r})  # TF32 matmuls: {knobs.tf32}",
            "torch.backends.cudnn.allow_tf32 = True  # torch's default",
        ]
    lines += _model_lines(knobs, device, world_size, compile_artifacts)
    lines += _loop_lines(knobs, device, on_device)
    return "\n".join(lines) + "\n"


def _launch_lines(device: str, world_size: int) -> list[str]:
    """How a data-parallel job of ``world_size`` ranks starts, and its process group."""
    gpu = device == "cuda"
    return [
        f"# {world_size} ranks, one process each{' on its own GPU' if gpu else ''}; launch with",
        f"#   torchrun --nproc-per-node {world_size} train.py",
        "# or from Ray Train: TorchTrainer(train_fn, scaling_config=ray.train.ScalingConfig("
        f"num_workers={world_size}, use_gpu={gpu})).fit()",
        *(["import os"] if gpu else []),
        "import torch.distributed as dist",
        "from torch.nn.parallel import DistributedDataParallel",
        "",
        f"dist.init_process_group({'nccl' if gpu else 'gloo'!r})  # reads RANK, WORLD_SIZE, "
        "MASTER_ADDR (torchrun and Ray Train set them)",
        *(["local_rank = int(os.environ['LOCAL_RANK'])", "torch.cuda.set_device(local_rank)"]
          if gpu else []),
        "",
    ]


def _model_lines(knobs: Any, device: str, world_size: int = 1,
                 compile_artifacts: str | None = None) -> list[str]:
    fmt = ", memory_format=torch.channels_last" if knobs.channels_last else ""
    lines = [f"model = model.to({device!r}{fmt})"]
    if world_size > 1:
        ids = "device_ids=[local_rank], " if device == "cuda" else ""
        ddp = ", ".join(f"{k}={v!r}" for k, v in knobs.ddp_kwargs().items())
        lines.append(f"model = DistributedDataParallel(model, {ids}{ddp})")
    if knobs.compile != "off":
        mode = "" if knobs.compile == "default" else f", mode={knobs.compile!r}"
        lines.append(f"model = torch.compile(model{mode})")
        if compile_artifacts is not None:
            lines += _artifact_lines(compile_artifacts)
    fused = ", fused=True" if knobs.fused_optimizer else ""
    lines.append(f"optimizer = torch.optim.AdamW(model.parameters(), lr=lr{fused})")
    if knobs.amp == "fp16":
        lines.append(f"scaler = torch.amp.GradScaler({device!r})")
    return lines + [""]


def _artifact_lines(path: str) -> list[str]:
    """Load the tuner's compile before the first step, so that it compiles from the cache."""
    return ["# the tuner's compile of this configuration; needs the same torch, Triton and "
            "device",
            f"with open({path!r}, 'rb') as f:",
            "    torch.compiler.load_cache_artifacts(f.read())"]


def _loop_lines(knobs: Any, device: str, on_device: bool) -> list[str]:
    """The training loop: inputs moved to the device (not on the 'device' path: there
    ``channels_last`` alone converts them), the loss under autocast, the GradScaler's step,
    accumulation over ``grad_accum`` micro-batches."""
    accum = knobs.grad_accum > 1
    where = "on the device already" if on_device else "adapt to your batch structure"
    lines = [f"for step, (x, y) in enumerate(loader):  # {where}" if accum
             else f"for x, y in loader:  # {where}"]
    cl = ", memory_format=torch.channels_last" if knobs.channels_last else ""
    if on_device:
        if knobs.channels_last:
            lines.append("    x = x.contiguous(memory_format=torch.channels_last)")
    else:
        nb = ", non_blocking=True" if knobs.non_blocking else ""
        lines += [f"    x = x.to({device!r}{nb}{cl})", f"    y = y.to({device!r}{nb})"]
    body = "loss_fn(model(x), y)" + (f" / {knobs.grad_accum}" if accum else "")
    if knobs.amp == "off":
        lines.append(f"    loss = {body}")
    else:
        dtype = "torch.float16" if knobs.amp == "fp16" else "torch.bfloat16"
        lines += [f"    with torch.autocast({device!r}, dtype={dtype}):", f"        loss = {body}"]
    lines.append("    scaler.scale(loss).backward()" if knobs.amp == "fp16"
                 else "    loss.backward()")
    indent = "    "
    if accum:
        lines.append(f"    if (step + 1) % {knobs.grad_accum} == 0:  # global batch "
                     f"{knobs.batch_size * knobs.grad_accum}")
        indent = "        "
    if knobs.amp == "fp16":
        lines += [f"{indent}scaler.step(optimizer)", f"{indent}scaler.update()"]
    else:
        lines.append(f"{indent}optimizer.step()")
    lines.append(f"{indent}optimizer.zero_grad(set_to_none=True)")
    return lines
