"""The answer in Lightning's terms: ``Trainer(...)`` and ``DataLoader(...)`` keyword arguments
from a configuration's knobs, and the text ``tuner best --format lightning`` prints.

Each knob goes where Lightning has a setting for it:

* ``amp`` -> ``Trainer(precision=...)``: 'off' "32-true", 'fp16' "16-mixed", 'bf16'
  "bf16-mixed" (``PRECISION``);
* ``grad_accum`` -> ``Trainer(accumulate_grad_batches=...)``;
* ``cudnn_benchmark`` -> ``Trainer(benchmark=...)``;
* ``batch_size``, ``num_workers``, ``prefetch_factor`` (with workers only), ``pin_memory``,
  ``persistent_workers`` -> ``DataLoader(...)``;
* the DistributedDataParallel knobs -> ``DDPStrategy(...)`` (a multi-rank answer).

The others have no Trainer or DataLoader field; ``format_answer`` prints the lines that apply
them beside the two blocks: ``tf32`` is ``torch.set_float32_matmul_precision("high")``,
``compile`` is ``torch.compile(model, mode=...)`` of the LightningModule (Lightning fits a
compiled module), ``channels_last`` is the module's ``to(memory_format=...)`` and a
``on_after_batch_transfer`` hook for the inputs, ``fused_optimizer`` is ``fused=True`` in
``configure_optimizers``, ``non_blocking`` is what Lightning does on CUDA already, and a data
path other than 'loader' builds the batches with ``tuner.data``.

Torch-free and Lightning-free at import: the arguments are plain values and the text is text.
"""

from __future__ import annotations

from typing import Any

from tuner.knobs import Knobs

PRECISION = {"off": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}
"""The ``amp`` knob -> Lightning's ``Trainer(precision=...)``."""

LOADER_EXTRA = {"shuffle": True, "drop_last": True}
"""What the answer's DataLoader is given besides the knobs: shuffled, incomplete last batch
dropped, as every trial's loader."""


def trainer_arguments(knobs: Knobs, device: str) -> dict[str, Any]:
    """``lightning.pytorch.Trainer(...)`` keyword arguments for ``knobs`` on ``device``.

    Args:
        knobs: the configuration; clamped to ``device`` first (``Knobs.clamp``: fp16 is off on
            the CPU, cuDNN benchmark CUDA only).
        device: 'cpu' or 'cuda'.

    Returns:
        ``precision`` (``PRECISION``), ``accumulate_grad_batches`` and ``benchmark``. Not
        ``accelerator``, ``devices`` or ``strategy``: those name the machine, not the knobs.

    Raises:
        ValueError: a device other than 'cpu' and 'cuda'.
    """
    applied, _ = knobs.clamp(device)
    return {"precision": PRECISION[applied.amp],
            "accumulate_grad_batches": applied.grad_accum,
            "benchmark": applied.cudnn_benchmark}


def dataloader_arguments(knobs: Knobs) -> dict[str, Any]:
    """``torch.utils.data.DataLoader(dataset, ...)`` keyword arguments for ``knobs``:
    ``batch_size`` (the micro-batch), ``num_workers``, ``pin_memory`` and, with workers only
    (DataLoader refuses them without), ``prefetch_factor`` and ``persistent_workers``. The
    knobs as given: clamp them to the device first (``pin_memory`` is CUDA only)."""
    return knobs.dataloader_kwargs()


def format_answer(knobs: Knobs, header_lines: list[str], *, device: str = "cuda",
                  world_size: int = 1, scale: str | None = None,
                  torch_threads: int | None = None) -> str:
    """What ``tuner best --format lightning`` prints: ``header_lines`` as comments, the
    ``Trainer(...)`` and ``DataLoader(...)`` blocks to paste, the lines for the knobs that
    have no Trainer or DataLoader setting, and the ``trainer.fit`` call.

    The text runs as it is with ``model`` (the LightningModule) and ``dataset`` (its training
    dataset; for the 'cache' and 'device' data paths ``workload`` and ``data_dir`` instead)
    bound. ``knobs`` are clamped to ``device`` ('cpu' or 'cuda'); ``world_size`` > 1 adds a
    ``DDPStrategy`` with the knobs' DistributedDataParallel settings; ``scale`` is the
    workload scale the 'cache' and 'device' paths read (None: the name ``scale``, the user's);
    ``torch_threads``, the torch threads a CPU trial trained on (its row's), is printed as
    ``torch.set_num_threads`` for a CPU answer (``tuner validate`` trains with them too).
    """
    applied, _ = knobs.clamp(device)
    yours = ["model (your LightningModule)"]
    yours += ["dataset (its training dataset)"] if applied.data_path == "loader" else [
        "workload (the tuned workload), data_dir" + (", scale" if scale is None else "")]
    lines = [f"# {line}" for line in header_lines]
    lines += [f"# yours: {', '.join(yours)}", "import lightning.pytorch as pl", "import torch"]
    if world_size > 1:
        lines.append("from lightning.pytorch.strategies import DDPStrategy")
    lines += ["", *_trainer_block(applied, device, world_size), ""]
    lines += _data_lines(applied, device, scale)
    lines += _beside_lines(applied, device)
    if device == "cpu" and torch_threads:
        lines += [f"# the trial trained on {torch_threads} torch thread(s) beside its "
                  f"{applied.num_workers} DataLoader worker(s)",
                  f"torch.set_num_threads({torch_threads})"]
    lines += ["", "trainer.fit(model, train_dataloaders=train_loader)"]
    return "\n".join(lines) + "\n"


def _trainer_block(knobs: Knobs, device: str, world_size: int) -> list[str]:
    args = {**trainer_arguments(knobs, device), "accelerator": device, "devices": world_size}
    lines = ["trainer = pl.Trainer("]
    lines += [f"    {key}={value!r},  # {_TRAINER_NOTES[key]}" for key, value in args.items()]
    if world_size > 1:
        ddp = ", ".join(f"{k}={v!r}" for k, v in knobs.ddp_kwargs().items())
        lines.append(f"    strategy=DDPStrategy({ddp}),  # DistributedDataParallel settings")
    return lines + ["    # ... and your own: max_epochs, logger, callbacks, ...", ")"]


_TRAINER_NOTES = {
    "precision": "amp",
    "accumulate_grad_batches": "grad_accum",
    "benchmark": "cudnn_benchmark",
    "accelerator": "the trial's device",
    "devices": "world size",
}


def _data_lines(knobs: Knobs, device: str, scale: str | None) -> list[str]:
    """The DataLoader block ('loader', 'cache'), or the 'device' path's batches."""
    path = f"path = workload.sample_path(data_dir, {'scale' if scale is None else repr(scale)})"
    if knobs.data_path == "device":
        return ["# data_path=device: decoded samples resident on the device, augmented there;",
                "# no DataLoader (Lightning fits any iterable of batches)",
                "from tuner.data import DecodedCache, DeviceBatches",
                path,
                f"cache = DecodedCache.fill(path.decoded).to({device!r})",
                f"train_loader = DeviceBatches(cache, {knobs.batch_size}, "
                "path.augment_batch)  # shuffled, last batch dropped"]
    source = "dataset"
    lines = []
    if knobs.data_path == "cache":
        lines = ["# data_path=cache: decoded samples held in host memory, augmented by workers",
                 "from tuner.data import CachedDataset, DecodedCache",
                 path,
                 "cache = DecodedCache.fill(path.decoded)"]
        source = "CachedDataset(cache, path.augment)"
    args = {**LOADER_EXTRA, **dataloader_arguments(knobs)}
    lines += ["train_loader = torch.utils.data.DataLoader(", f"    {source},"]
    lines += [f"    {key}={value!r}," for key, value in args.items()]
    return lines + ["    # ... and your own collate_fn, if any", ")"]


def _beside_lines(knobs: Knobs, device: str) -> list[str]:
    """Lines for the knobs with no Trainer or DataLoader setting, each under a comment
    naming its knob; the 'device' path's no-op knobs in a comment."""
    lines: list[str] = []
    if knobs.tf32:
        lines += ["# tf32 (no Trainer setting): TF32 matmuls",
                  'torch.set_float32_matmul_precision("high")']
    if knobs.channels_last:
        lines += ["# channels_last (no Trainer setting): the module and its 4-D inputs",
                  "model = model.to(memory_format=torch.channels_last)",
                  "# and in your LightningModule, for the inputs:",
                  "#     def on_after_batch_transfer(self, batch, dataloader_idx):",
                  "#         x, y = batch",
                  "#         return x.contiguous(memory_format=torch.channels_last), y"]
    if knobs.fused_optimizer:
        lines += ["# fused_optimizer (no Trainer setting): in your configure_optimizers,",
                  "#     torch.optim.AdamW(self.parameters(), lr=..., fused=True)"]
    if knobs.non_blocking and device == "cuda":
        lines += ["# non_blocking: Lightning copies CUDA batches with non_blocking=True itself"]
    if knobs.compile != "off":
        mode = "" if knobs.compile == "default" else f", mode={knobs.compile!r}"
        lines += ["# compile (no Trainer setting): Lightning fits the compiled module",
                  f"model = torch.compile(model{mode})"]
    return [""] + lines if lines else []
