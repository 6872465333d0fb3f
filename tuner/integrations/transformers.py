"""Tune a Hugging Face Transformers ``Trainer``: ``from_transformers(trainer)`` is a Workload.

Needs the extra: ``pip install 'tuner[transformers]'`` (Transformers >= 4.46 and Accelerate,
which its ``Trainer`` needs). The returned workload takes

* the **model**: a fresh ``copy.deepcopy`` of ``trainer.model`` per trial (on the CPU);
* the **dataset** ``trainer.train_dataset`` and the **collate_fn** ``trainer.data_collator``,
  with the columns the model's ``forward`` does not take removed as the Trainer removes them
  (``remove_unused_columns``); the collated batch is handed on as a plain ``dict``;
* the **loss** from ``trainer.compute_loss(model, inputs)``, so a subclass's ``compute_loss``
  and a ``compute_loss_func`` are what the trials train with. It is called without
  ``num_items_in_batch``, as a per-micro-batch mean the harness divides by ``grad_accum``
  (the Trainer's token-count normalisation across micro-batches changes no step time);
* the **optimizer** from ``Trainer.get_optimizer_cls_and_kwargs(args, model)`` (learning rate,
  betas, eps, ``optim``) or the Trainer's ``optimizer_cls_and_kwargs``, over the Trainer's two
  parameter groups (``weight_decay`` on ``get_decay_parameter_names``, 0 on the rest), with
  gradients clipped to ``max_grad_norm`` before each step as the Trainer clips them;
* the **baseline** reference from ``trainer.args`` as written: ``per_device_train_batch_size``,
  ``gradient_accumulation_steps``, the ``dataloader_*`` settings, ``bf16``/``fp16``, ``tf32``,
  ``torch_compile``/``torch_compile_mode``, ``accelerator_config.non_blocking`` and whether the
  optimizer is fused (``optim="adamw_torch_fused"``, Transformers 5's default); the other knobs
  at their ``tuner.knobs.Knobs`` defaults.

The harness applies the knobs as for any workload (its own shuffled DataLoader, incomplete last
batch dropped; autocast; ``torch.compile`` of the model; its own optimizer step). The search
space is ``tuner/workloads/spaces/transformers.yaml``; a Trainer whose optimizer is not torch's
AdamW (``optim`` other than ``adamw_torch``/``adamw_torch_fused``, or its own
``optimizer_cls_and_kwargs``) keeps it as given and is searched in
``transformers-own-optim.yaml``, which holds ``fused_optimizer`` off: the ``optim`` that
``best --format transformers`` prints names AdamW (``tuner.integrations.transformers_args``).

``TransformersWorkload.trainer_samples_per_sec`` trains the answer in ``Trainer.train()``
itself, with ``TrainingArguments`` made of the user's and ``training_arguments(knobs)``.

Not supported, with a one-line ``TunerError`` when ``from_transformers`` is called: no
``train_dataset``, an ``IterableDataset`` (torch's or the ``datasets`` library's), DeepSpeed,
FSDP, a run launched on several processes (``args.world_size > 1``), ready-made
``optimizers=(optimizer, scheduler)``, an ``optim`` whose optimizer is built from the model
(GaLore, LOMO, ...), activation (gradient) checkpointing, a ``torch_compile_backend`` other
than inductor and a ``torch_compile_mode`` tuner has no knob value for. Not applied: the LR
schedule, the callbacks, a ``training_step`` override, label smoothing's cost aside from the
loss, ``auto_find_batch_size``. Every scale builds the same model.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset
from transformers import Trainer, TrainerCallback

from tuner.errors import TunerError
from tuner.integrations.transformers_args import ADAMW_OPTIMS, training_arguments
from tuner.knobs import COMPILE_MODES, Knobs
from tuner.settings import default_cache_dir
from tuner.workload import Workload

PLACEHOLDER_DATA = "transformers-trainer"
"""Name of the empty directory ``prepare_default_data`` returns: the Trainer owns the data."""

TOKEN_CHECK_SAMPLES = 8
"""Samples, spread over the dataset, whose ``input_ids`` must have one length for a causal
LM's tokens per sample (``units_per_sample``) to be reported."""


def from_transformers(trainer: Any, *, name: str | None = None) -> "TransformersWorkload":
    """A workload training what ``trainer`` trains, as the module docstring lists.

    Args:
        trainer: a ``transformers.Trainer`` (or a subclass) with a ``train_dataset``. It is
            left as it is: the workload keeps copies of its model and settings.
        name: the workload's name in the leaderboard (default: the model's class name,
            lower-cased, e.g. 'gpt2lmheadmodel').

    Returns:
        A ``TransformersWorkload``; run it with ``python -m tuner run --workload
        mod:trainer`` (the loader wraps a Trainer itself) or ``tuner.tune(workload=...)``.

    Raises:
        TunerError: ``trainer`` is not a Trainer, or uses what the module docstring lists as
            not supported; the message names it in one line.
    """
    if not isinstance(trainer, Trainer):
        raise TunerError(f"from_transformers: a {type(trainer).__name__} is not a "
                         "transformers.Trainer")
    label = type(trainer).__name__
    _check_supported(trainer, label)
    model = _unwrapped(trainer.model)
    recipe = OptimizerRecipe.of(trainer, model, label)
    dataset, collate = _train_data(trainer)
    loss_trainer = _loss_trainer(trainer)
    prototype = copy.deepcopy(model).to("cpu")
    return TransformersWorkload(
        name=name or type(model).__name__.lower(), model=prototype, recipe=recipe,
        baseline=_baseline(trainer.args, recipe, label), dataset=dataset, collate=collate,
        loss_trainer=loss_trainer, trainer_cls=type(trainer),
        trainer_kwargs=_trainer_kwargs(trainer),
        tokens=_tokens_per_sample(model, trainer.train_dataset))


class TransformersWorkload(Workload):
    """A Workload made by ``from_transformers`` (see the module docstring for what it takes).
    Picklable: Ray sends it to each trial's worker, the Trainer's class imported by its module
    path."""

    description = "a Transformers Trainer's model on its train_dataset"
    source = "the user's transformers.Trainer (tuner.integrations.transformers)"

    def __init__(self, *, name: str, model: nn.Module, recipe: "OptimizerRecipe",
                 baseline: Knobs, dataset: Dataset, collate: Callable, loss_trainer: Any,
                 trainer_cls: type, trainer_kwargs: dict[str, Any], tokens: int | None):
        self.name = name
        self.references = {"baseline": baseline}
        self.space = "transformers-own-optim" if recipe.own else "transformers"
        self._model = model
        self._recipe = recipe
        self._dataset = dataset
        self._collate = collate
        self._loss_trainer = loss_trainer
        self._trainer_cls = trainer_cls
        self._trainer_kwargs = trainer_kwargs
        self._tokens = tokens

    def build_model(self, scale: str) -> nn.Module:
        """A deep copy of the Trainer's model, on the CPU."""
        return copy.deepcopy(self._model)

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        """The Trainer's ``train_dataset`` (unused columns removed); ``data_dir`` is not read."""
        return self._dataset

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        """An empty placeholder directory: the Trainer owns the data, no file is written."""
        path = Path(cache_dir) / PLACEHOLDER_DATA
        path.mkdir(parents=True, exist_ok=True)
        return path

    def check_data(self, data_dir: Path, scale: str) -> int:
        """Raises TunerError when ``--data`` named a directory (the Trainer's
        ``train_dataset`` is used, so a ``--data`` would be ignored); otherwise the base
        class's check."""
        placeholder = self.prepare_default_data(default_cache_dir() / "data", scale)
        if Path(data_dir).resolve() != placeholder.resolve():
            raise TunerError(f"--data {data_dir}: workload {self.name} takes its data from the "
                             "Trainer's train_dataset; leave out --data")
        return super().check_data(data_dir, scale)

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """``trainer.compute_loss(model, batch)`` of the user's Trainer class (its override, or
        its ``compute_loss_func``), with the Trainer's ``model`` set to the trial's model while
        it runs. Raises TunerError when it returns no tensor."""
        trainer = self._loss_trainer
        trainer.model = getattr(model, "_orig_mod", model)  # the model under torch.compile
        try:
            out = trainer.compute_loss(model, batch)
        finally:
            trainer.model = None
        loss = out[0] if isinstance(out, tuple) else out
        if not isinstance(loss, torch.Tensor):
            raise TunerError(f"workload {self.name}: {type(trainer).__name__}.compute_loss "
                             f"returned a {type(loss).__name__}; tuner needs the loss tensor")
        return loss

    def samples_in(self, batch: Any) -> int:
        """Rows of ``input_ids`` (else of the batch's first tensor)."""
        if isinstance(batch, Mapping) and isinstance(batch.get("input_ids"), torch.Tensor):
            return int(batch["input_ids"].shape[0])
        first = next(v for v in batch.values() if isinstance(v, torch.Tensor))
        return int(first.shape[0])

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        """Shapes of the first sample's fields (a list counts as one dimension)."""
        return _sample_shape(self._dataset[0])

    def units_per_sample(self, scale: str) -> dict[str, int]:
        """``{"tokens": T}`` for a causal LM whose samples' ``input_ids`` have one length T
        (checked on ``TOKEN_CHECK_SAMPLES`` samples spread over the dataset), as the built-in
        chargpt workload reports its context length; else none."""
        return {"tokens": self._tokens} if self._tokens else {}

    def build_optimizer(self, params, fused: bool) -> torch.optim.Optimizer:
        """The Trainer's optimizer over ``params`` (see ``OptimizerRecipe.build``)."""
        return self._recipe.build(params, fused)

    def collate_fn(self) -> Callable:
        """The Trainer's ``data_collator``, its batch as a plain dict."""
        return self._collate

    def trainer_samples_per_sec(self, knobs: Knobs, *, steps: int, device: str,
                                scale: str) -> float | None:
        """Steady-state samples/sec of ``Trainer.train()`` run for ``steps`` optimizer steps
        with ``knobs`` applied through ``TrainingArguments``.

        A fresh Trainer of the user's class gets a fresh model copy, the ``train_dataset``,
        ``data_collator``, ``compute_loss_func`` and ``optimizer_cls_and_kwargs`` the user's
        had, and ``trainer_args``: the user's arguments with ``training_arguments(knobs,
        device)`` (the user's ``optim`` kept when it is not AdamW), ``max_steps=steps``, no
        saving, evaluation, logging or reporting, the incomplete last batch dropped (as in
        the trials) and a temporary ``output_dir``. A ``TrainerCallback`` times optimizer
        steps from the end of step ``warmup_steps_of(steps)`` to the end of the last (the
        device synchronised at both), so start-up, compilation and the first steps are left
        out, unlike the Trainer's own ``train_samples_per_second``. A step trains
        ``per_device_train_batch_size x gradient_accumulation_steps x world size`` samples.

        Args:
            knobs: the configuration (clamped to ``device`` here).
            steps: optimizer steps in all, >= 2.
            device: 'cpu' (the Trainer gets ``use_cpu=True``) or 'cuda'.
            scale: not used (every scale builds the same model).

        Raises:
            TunerError: ``steps`` < 2, or the user's Trainer class cannot be built from the
                keyword arguments above (one line naming the error).
        """
        if steps < 2:
            raise TunerError(f"trainer_samples_per_sec: steps={steps}; needs at least 2 (a "
                             "warm-up step and a timed one)")
        knobs = knobs.clamp(device)[0]
        timer = StepTimer(warmup_steps_of(steps), steps, device)
        with tempfile.TemporaryDirectory(prefix="tuner-trainer-") as out:
            args = trainer_args(self._trainer_kwargs["args"], knobs, device=device, steps=steps,
                                output_dir=out, keep_optim=self._recipe.own)
            kwargs = {**self._trainer_kwargs, "args": args, "model": self.build_model(scale),
                      "callbacks": [timer]}
            try:
                trainer = self._trainer_cls(**kwargs)
            except Exception as exc:
                raise TunerError(f"trainer_samples_per_sec: {self._trainer_cls.__name__}"
                                 f"(model=..., args=..., ...) raised {type(exc).__name__}: "
                                 f"{exc}") from None
            trainer.train()
        return timer.samples_per_sec(knobs.batch_size * knobs.grad_accum * args.world_size)


def warmup_steps_of(steps: int) -> int:
    """Leading optimizer steps ``trainer_samples_per_sec`` leaves out: a quarter of
    ``steps``, at least 1 and at most 5 (the first step compiles and starts workers)."""
    return max(1, min(5, steps // 4))


class StepTimer(TrainerCallback):
    """Times ``Trainer.train()``'s optimizer steps after ``warmup`` of them: the clock is read
    at the end of step ``warmup`` and of step ``last``, after a device synchronisation."""

    def __init__(self, warmup: int, last: int, device: str):
        self.warmup = warmup
        self.last = last
        self.cuda = device == "cuda"
        self.times: dict[int, float] = {}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step in (self.warmup, self.last):
            if self.cuda:
                torch.cuda.synchronize()
            self.times[state.global_step] = time.perf_counter()

    def samples_per_sec(self, samples_per_step: int) -> float:
        """Samples/sec over the timed steps. Raises TunerError when the Trainer stopped
        before the last step (a callback or the dataset ended it)."""
        if self.last not in self.times or self.warmup not in self.times:
            raise TunerError(f"Trainer.train() stopped before step {self.last}; no steady-state "
                             "rate to report")
        seconds = self.times[self.last] - self.times[self.warmup]
        return (self.last - self.warmup) * samples_per_step / seconds


def trainer_args(args: Any, knobs: Knobs, *, device: str, steps: int, output_dir: str,
                 keep_optim: bool = False) -> Any:
    """``args`` (TrainingArguments) with ``training_arguments(knobs, device)`` and a short
    run's settings (see ``TransformersWorkload.trainer_samples_per_sec``); a field the knobs
    turn off is reset (``dataloader_prefetch_factor`` without workers, ``torch_compile_mode``
    without compile), and on 'cpu' ``use_cpu=True``. ``keep_optim`` keeps the user's
    ``optim``."""
    changes = training_arguments(knobs, device)
    if keep_optim:
        changes.pop("optim")
    changes.setdefault("dataloader_prefetch_factor", None)
    if not changes["torch_compile"]:
        changes.update(torch_compile_mode=None, torch_compile_backend=None)
    accelerator = args.accelerator_config
    own = accelerator if isinstance(accelerator, dict) else dataclasses.asdict(accelerator)
    changes["accelerator_config"] = {**own, "non_blocking": knobs.non_blocking}
    changes.update(output_dir=output_dir, max_steps=steps, save_strategy="no",
                   eval_strategy="no", logging_strategy="no", report_to="none",
                   disable_tqdm=True, load_best_model_at_end=False, push_to_hub=False,
                   dataloader_drop_last=True)
    if device == "cpu":
        changes["use_cpu"] = True
    return dataclasses.replace(args, **changes)


@dataclass(frozen=True)
class OptimizerRecipe:
    """The Trainer's optimizer, to rebuild over each trial's parameters (in the order of
    ``model.parameters()``): class, constructor arguments, the two weight-decay groups."""
    cls: type
    kwargs: dict[str, Any]
    groups: tuple[tuple[tuple[int, ...], float], ...]
    """Per param group: indices into ``model.parameters()``, and its weight decay."""
    own: bool
    """The optimizer is not torch's AdamW picked by ``optim``: kept as given, ``fused`` not
    touched."""
    max_grad_norm: float | None
    """Gradients are clipped to this norm before each step (None: not clipped)."""

    @property
    def user_fused(self) -> bool:
        return bool(self.kwargs.get("fused"))

    @classmethod
    def of(cls, trainer: Trainer, model: nn.Module, label: str) -> "OptimizerRecipe":
        """The recipe of ``trainer``'s ``create_optimizer``. Raises TunerError."""
        args = trainer.args
        given = getattr(trainer, "optimizer_cls_and_kwargs", None)
        try:
            opt_cls, kwargs = given or Trainer.get_optimizer_cls_and_kwargs(args, model)
        except (ValueError, ImportError) as exc:
            raise TunerError(f"{label}: optim {_optim_name(args)!r}: {exc}") from None
        if not (isinstance(opt_cls, type) and issubclass(opt_cls, torch.optim.Optimizer)) \
                or {"params", "model"} & set(kwargs):
            raise TunerError(f"{label}: optim {_optim_name(args)!r} builds its optimizer from "
                             "the model; tuner rebuilds a torch optimizer class over each "
                             "trial's parameters")
        decay = set(trainer.get_decay_parameter_names(model))
        named = list(model.named_parameters())
        groups = tuple(
            (tuple(i for i, (n, p) in enumerate(named) if p.requires_grad and (n in decay) == d),
             args.weight_decay if d else 0.0) for d in (True, False))
        own = given is not None or _optim_name(args) not in ADAMW_OPTIMS
        norm = args.max_grad_norm if args.max_grad_norm and args.max_grad_norm > 0 else None
        return cls(opt_cls, dict(kwargs), tuple(g for g in groups if g[0]), own, norm)

    def build(self, params, fused: bool) -> torch.optim.Optimizer:
        """The optimizer over ``params``; ``fused`` (the fused_optimizer knob) sets AdamW's
        ``fused`` (an ``own`` optimizer keeps its settings). With ``max_grad_norm``, a step
        pre-hook clips the gradients first (after the GradScaler unscaled them)."""
        params = list(params)
        groups = [{"params": [params[i] for i in indices], "weight_decay": decay}
                  for indices, decay in self.groups]
        kwargs = dict(self.kwargs)
        if not self.own:
            kwargs["fused"] = fused or None
            if fused:
                kwargs.pop("foreach", None)
        optimizer = self.cls(groups, **kwargs)
        if self.max_grad_norm is not None:
            optimizer.register_step_pre_hook(GradClip(
                [p for group in groups for p in group["params"]], self.max_grad_norm))
        return optimizer


class GradClip:
    """An optimizer step pre-hook clipping ``params``' gradients to ``max_norm`` (the
    Trainer's ``clip_grad_norm_`` before its ``optimizer.step()``)."""

    def __init__(self, params: list[nn.Parameter], max_norm: float):
        self.params = params
        self.max_norm = max_norm

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        nn.utils.clip_grad_norm_(self.params, self.max_norm)


class DictBatches:
    """The Trainer's collator, its batch (a ``BatchEncoding`` or other mapping) as a plain
    ``dict``, which the harness moves to the device field by field."""

    def __init__(self, collator: Callable):
        self.collator = collator

    def __call__(self, features: list) -> dict:
        return dict(self.collator(features))


def _optim_name(args: Any) -> str:
    optim = args.optim
    return str(getattr(optim, "value", optim))


def _unwrapped(model: Any) -> nn.Module:
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module  # DataParallel / DistributedDataParallel
    return getattr(model, "_orig_mod", model)


def _check_supported(trainer: Trainer, label: str) -> None:
    """Raises TunerError for what the module docstring lists as not supported."""
    args = trainer.args
    dataset = trainer.train_dataset
    hf_datasets = sys.modules.get("datasets")
    refused = [
        (dataset is None, "has no train_dataset"),
        (isinstance(dataset, IterableDataset) or (hf_datasets is not None and isinstance(
            dataset, getattr(hf_datasets, "IterableDataset", ()))),
         "trains on an IterableDataset; tuner shuffles a map-style dataset with a len()"),
        (bool(args.deepspeed), "uses DeepSpeed (args.deepspeed); tuner tunes one process's "
         "plain PyTorch training"),
        (bool(args.fsdp), "uses FSDP (args.fsdp); tuner tunes one process's plain PyTorch "
         "training"),
        (args.world_size > 1, f"runs on {args.world_size} processes; build it in one process "
         "(tuner runs data-parallel trials itself)"),
        (trainer.optimizer is not None, "was given optimizers=(optimizer, scheduler); give "
         "optimizer_cls_and_kwargs (or TrainingArguments' optim) so each trial builds its own"),
        (bool(args.gradient_checkpointing or getattr(args, "activation_checkpointing", False)),
         "uses activation (gradient) checkpointing, which tuner does not apply yet"),
        (args.torch_compile and (args.torch_compile_backend or "inductor") != "inductor",
         f"compiles with backend {args.torch_compile_backend!r}; tuner compiles with inductor"),
        (args.torch_compile and (args.torch_compile_mode or "default") not in COMPILE_MODES,
         f"compiles with mode {args.torch_compile_mode!r}; accepted: {', '.join(COMPILE_MODES)}"),
    ]
    for bad, why in refused:
        if bad:
            raise TunerError(f"from_transformers: the {label} {why}")


def _train_data(trainer: Trainer) -> tuple[Dataset, Callable]:
    """The dataset and collator the Trainer's train DataLoader uses: unused columns removed
    from a ``datasets.Dataset``, or by a collator wrapper around the user's (as
    ``Trainer._get_dataloader`` does)."""
    dataset, collator = trainer.train_dataset, trainer.data_collator
    hf_datasets = sys.modules.get("datasets")
    if hf_datasets is not None and isinstance(dataset, hf_datasets.Dataset):
        dataset = trainer._remove_unused_columns(dataset, description="training")
    else:
        collator = trainer._get_collator_with_removed_columns(collator, description="training")
    return dataset, DictBatches(collator)


_NOT_CARRIED = ("model", "model_wrapped", "optimizer", "lr_scheduler", "train_dataset",
                "eval_dataset", "callback_handler", "_train_dataloader", "gather_function")
"""Attributes of the Trainer its ``compute_loss`` does not need; the workload holds its own
model and data, so they are not carried to every trial (``gather_function`` is bound to the
Accelerator, see ``_loss_trainer``)."""


def _loss_trainer(trainer: Trainer) -> Trainer:
    """A shallow copy of ``trainer`` to call ``compute_loss`` on, without its model, data and
    optimizer (``training_step`` sets ``model`` while the loss runs), and with a
    ``LossAccelerator`` for its Accelerator: Accelerate's state is shared by every
    Accelerator of the process, and a Trainer trained since (``trainer_samples_per_sec``)
    leaves weak references in it that cannot be pickled to Ray's workers."""
    lean = copy.copy(trainer)
    for attr in _NOT_CARRIED:
        if attr in vars(lean):
            setattr(lean, attr, None)
    lean.accelerator = LossAccelerator()
    return lean


class LossAccelerator:
    """What ``Trainer.compute_loss`` reads of its Accelerator in one process: no
    ``parallelism_config``, and ``unwrap_model`` (its label smoother names the model)."""

    parallelism_config = None
    num_processes = 1

    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True) -> nn.Module:
        return _unwrapped(model)


def _trainer_kwargs(trainer: Trainer) -> dict[str, Any]:
    """What ``trainer_samples_per_sec`` builds the user's Trainer class with (besides model,
    args and callbacks); arguments the Trainer was not given are left out."""
    kwargs = {"args": copy.deepcopy(trainer.args), "train_dataset": trainer.train_dataset,
              "data_collator": trainer.data_collator}
    for attr in ("processing_class", "compute_loss_func", "optimizer_cls_and_kwargs"):
        value = getattr(trainer, attr, None)
        if value is not None:
            kwargs[attr] = value
    return kwargs


def _baseline(args: Any, recipe: OptimizerRecipe, label: str) -> Knobs:
    """The knobs of ``args`` as written (see the module docstring)."""
    workers = args.dataloader_num_workers
    accelerator = args.accelerator_config
    non_blocking = (accelerator.get("non_blocking") if isinstance(accelerator, dict)
                    else getattr(accelerator, "non_blocking", False))
    try:
        return Knobs(
            batch_size=args.per_device_train_batch_size,
            grad_accum=args.gradient_accumulation_steps, num_workers=workers,
            prefetch_factor=args.dataloader_prefetch_factor if workers > 0 else None,
            persistent_workers=bool(args.dataloader_persistent_workers) and workers > 0,
            pin_memory=bool(args.dataloader_pin_memory), non_blocking=bool(non_blocking),
            amp="bf16" if args.bf16 else "fp16" if args.fp16 else "off",
            tf32=bool(args.tf32),
            compile=(args.torch_compile_mode or "default") if args.torch_compile else "off",
            fused_optimizer=recipe.user_fused and not recipe.own)
    except ValueError as exc:
        raise TunerError(f"from_transformers: the {label}'s TrainingArguments: {exc}") from None


def _tokens_per_sample(model: nn.Module, dataset: Any) -> int | None:
    """The one ``input_ids`` length of a causal LM's samples (see ``units_per_sample``)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if type(model).__name__ not in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()):
        return None
    n = len(dataset)
    picks = sorted({i * (n - 1) // max(1, TOKEN_CHECK_SAMPLES - 1)
                    for i in range(min(n, TOKEN_CHECK_SAMPLES))})
    lengths = set()
    for i in picks:
        sample = dataset[i]
        ids = sample.get("input_ids") if isinstance(sample, Mapping) else None
        if ids is None:
            return None
        lengths.add(len(ids))
    return lengths.pop() if len(lengths) == 1 else None


def _sample_shape(sample: Any, key: str = "") -> dict[str, list[int]]:
    """``{"input_ids": [128], "labels": [128]}``: each field's shape (a list's length)."""
    if isinstance(sample, torch.Tensor):
        return {key or "sample": list(sample.shape)}
    if isinstance(sample, Mapping):
        return {name: shape for k, v in sample.items()
                for name, shape in _sample_shape(v, f"{key}.{k}" if key else str(k)).items()}
    if isinstance(sample, (list, tuple)) and sample and not isinstance(sample[0], (list, tuple,
                                                                                  Mapping)):
        return {key or "sample": [len(sample)]}
    return {}

