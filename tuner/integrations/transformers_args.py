"""Knobs as Transformers ``TrainingArguments``: what ``best --format transformers`` prints.

Torch-free, and Transformers is not imported: the text and the keyword arguments are built
from the knobs alone (``transformers>=4.46`` field names), so the command line prints them in
a process that never loads either.

* ``training_arguments(knobs, device)``: the ``TrainingArguments`` keyword arguments of a
  configuration (``TrainingArguments(output_dir=..., **training_arguments(knobs))``);
* ``format_answer(knobs, header_lines)``: comment lines, a ``TrainingArguments(...)`` block to
  paste, and the few lines of code for the knobs that have no ``TrainingArguments`` field.
"""

from __future__ import annotations

from typing import Any

from tuner.knobs import CUDA_ONLY_KNOBS, Knobs

ADAMW_OPTIMS = ("adamw_torch", "adamw_torch_fused")
"""The ``optim`` names of torch's AdamW, unfused and fused: the ``fused_optimizer`` knob picks
one of them (Transformers 5 defaults to the fused one)."""

DEVICES = ("cpu", "cuda")

_COMMENTS = {"optim": "  # torch AdamW (a Trainer with another optim: keep yours)"}
"""Comments on lines of the printed ``TrainingArguments(...)`` block."""


def training_arguments(knobs: Knobs, device: str = "cuda") -> dict[str, Any]:
    """The ``TrainingArguments`` keyword arguments that apply ``knobs``.

    Args:
        knobs: the configuration (clamped to ``device`` or not: a knob the device cannot honour
            is left out, as ``Knobs.clamp`` would turn it off).
        device: 'cuda' (default) or 'cpu', where the arguments are used. On 'cpu' the
            CUDA-only fields are left out (``tf32``: TrainingArguments refuses ``tf32=True``
            without an Ampere or newer GPU; ``dataloader_pin_memory`` is false), and bf16
            adds ``use_cpu=True`` (TrainingArguments refuses ``bf16=True`` on a machine
            without a GPU unless told to train on the CPU).

    Returns:
        Keyword arguments in a fixed order: ``per_device_train_batch_size``,
        ``gradient_accumulation_steps``, ``dataloader_num_workers``,
        ``dataloader_prefetch_factor`` (with workers only: TrainingArguments refuses it
        without), ``dataloader_persistent_workers``, ``dataloader_pin_memory``, ``bf16``,
        ``fp16``, ``tf32`` (CUDA), ``torch_compile`` (and ``torch_compile_mode`` when on),
        ``optim`` (``ADAMW_OPTIMS``: fused or not), ``accelerator_config`` (with
        ``non_blocking``), ``ddp_bucket_cap_mb`` and ``ddp_static_graph`` (when set).

    Raises:
        ValueError: ``device`` is not one of 'cpu', 'cuda'.
    """
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: accepted values are {', '.join(DEVICES)}")
    knobs = knobs.clamp(device)[0]
    out: dict[str, Any] = {
        "per_device_train_batch_size": knobs.batch_size,
        "gradient_accumulation_steps": knobs.grad_accum,
        "dataloader_num_workers": knobs.num_workers,
    }
    if knobs.num_workers > 0:
        out["dataloader_prefetch_factor"] = knobs.prefetch_factor
    out["dataloader_persistent_workers"] = knobs.persistent_workers
    out["dataloader_pin_memory"] = knobs.pin_memory
    out["bf16"] = knobs.amp == "bf16"
    out["fp16"] = knobs.amp == "fp16"
    if device == "cpu" and knobs.amp == "bf16":
        out["use_cpu"] = True
    if device == "cuda":
        out["tf32"] = knobs.tf32
    out["torch_compile"] = knobs.compile != "off"
    if knobs.compile != "off":
        out["torch_compile_mode"] = knobs.compile
    out["optim"] = ADAMW_OPTIMS[knobs.fused_optimizer]
    if knobs.non_blocking:
        out["accelerator_config"] = {"non_blocking": True}
    if knobs.ddp_bucket_cap_mb is not None:
        out["ddp_bucket_cap_mb"] = knobs.ddp_bucket_cap_mb
    if knobs.static_graph:
        out["ddp_static_graph"] = True
    return out


def extra_lines(knobs: Knobs) -> list[str]:
    """Code and comments for the knobs ``TrainingArguments`` has no field for: the lines to
    put beside it (``torch.backends.cudnn.benchmark = True``, the model in channels_last), and
    a comment for each knob with no Transformers equivalent."""
    lines = []
    if knobs.cudnn_benchmark:
        lines.append("torch.backends.cudnn.benchmark = True  # before trainer.train()")
    if knobs.channels_last:
        lines.append("model = model.to(memory_format=torch.channels_last)  # before Trainer(...)")
    if knobs.data_path != "loader":
        lines.append(f"# data_path={knobs.data_path}: no Trainer equivalent (the Trainer feeds "
                     "train_dataset through its DataLoader); `best --format python` prints the "
                     "batches of this path for a loop of your own")
    if knobs.gradient_as_bucket_view:
        lines.append("# gradient_as_bucket_view=true: no TrainingArguments field (a "
                     "DistributedDataParallel argument the Trainer does not pass)")
    return lines


def format_answer(knobs: Knobs, header_lines: list[str]) -> str:
    """The text ``best --format transformers`` prints for ``knobs``.

    Args:
        knobs: the answer.
        header_lines: lines put first, each as a ``#`` comment (the workload, the figures).

    Returns:
        The comment header, ``import torch`` when the extra lines need it, ``from
        transformers import TrainingArguments``, an ``args = TrainingArguments(...)``
        statement with ``output_dir="out"`` (the user's own output directory goes there) and
        ``training_arguments(knobs)`` for CUDA (a CPU answer's CUDA-only knobs are off, so
        it reads ``tf32=False``, which TrainingArguments accepts on a CPU), a comment when
        bf16 may need ``use_cpu=True`` (an answer with no CUDA-only knob on), then
        ``extra_lines(knobs)``. Ends with a newline.
    """
    lines = [f"# {line}" if line else "#" for line in header_lines]
    extra = extra_lines(knobs)
    if any(line.startswith(("torch.", "model = ")) for line in extra):
        lines.append("import torch")
    lines.append("from transformers import TrainingArguments")
    lines.append("")
    lines.append("args = TrainingArguments(")
    lines.append('    output_dir="out",  # yours')
    lines.extend(f"    {name}={_literal(value)},{_COMMENTS.get(name, '')}"
                 for name, value in training_arguments(knobs, "cuda").items())
    lines.append("    # ... your other arguments (learning rate, schedule, logging, saving)")
    lines.append(")")
    if knobs.amp == "bf16" and not any(getattr(knobs, name) for name in CUDA_ONLY_KNOBS):
        lines.append("# bf16 on a machine without a GPU: add use_cpu=True (TrainingArguments "
                     "refuses bf16 there otherwise)")
    if extra:
        lines.append("")
        lines.extend(extra)
    return "\n".join(lines) + "\n"


def _literal(value: Any) -> str:
    """``value`` as Python source, strings in double quotes (``"adamw_torch"``)."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)
