"""Tune a PyTorch Lightning model: ``from_lightning(module_or_class, datamodule)`` is a Workload.

Needs the extra: ``pip install 'tuner[lightning]'`` (Lightning >= 2.2; a module of the older
``pytorch_lightning`` package works alike). The returned workload takes

* the **model** from the LightningModule (a fresh ``copy.deepcopy`` of the instance given, or
  ``cls()`` for a class, per trial; its ``configure_model()`` hook is called);
* the **dataset** and ``collate_fn`` from the datamodule's ``train_dataloader()`` (after its
  ``prepare_data()`` and ``setup("fit")``); the datamodule owns its data, so ``run`` needs
  no ``--data`` and refuses one (``prepare_default_data`` only names an empty placeholder);
* the **loss** from ``training_step(batch, batch_idx)`` (a tensor, or a dict with ``"loss"``);
* the **optimizer** from ``configure_optimizers()``: its class and each param group's settings,
  rebuilt over the parameters of each trial's model, with ``fused=True`` when the
  ``fused_optimizer`` knob is on and the class takes ``fused`` (Adam, AdamW, SGD, ...);
* the **baseline** reference from the ``train_dataloader()`` as written (``batch_size``,
  ``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``) and the
  optimizer's ``fused`` setting; the other knobs at their ``tuner.knobs.Knobs`` defaults.

The harness then applies the knobs as for any workload: it builds its own DataLoader over the
dataset (shuffled, incomplete last batch dropped), moves batches to the device, runs
``training_step`` under autocast (``torch.compile`` compiles the whole ``training_step``, as
Lightning does for a compiled LightningModule), calls backward and steps the optimizer. The
search space is ``tuner/workloads/spaces/lightning.yaml``.

Not supported, with a one-line ``TunerError`` when ``from_lightning`` is called: manual
optimization (``automatic_optimization = False``), several optimizers, a ``configure_optimizers``
that needs the Trainer (``self.trainer``), an ``IterableDataset``, a ``train_dataloader`` with
a ``batch_sampler`` (no ``batch_size``) or returning several loaders. Not applied: the
``lr_scheduler`` (a schedule does not change samples/sec), the Trainer's settings (tuner's
knobs set precision and accumulation), the loader's ``sampler`` and ``worker_init_fn``, and
the module's batch hooks (``on_before_batch_transfer``, ``transfer_batch_to_device``, ...).
``self.log`` and ``self.log_dict`` do nothing; code that reads ``self.trainer`` in
``training_step`` fails the trial with Lightning's error. Every scale builds the same model.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from tuner.errors import TunerError
from tuner.knobs import Knobs
from tuner.settings import default_cache_dir
from tuner.workload import Workload

PLACEHOLDER_DATA = "lightning-datamodule"
"""Name of the empty directory ``prepare_default_data`` returns: the datamodule owns the data."""

_RESERVED_GROUP_KEYS = ("params", "fused", "foreach")
"""Param-group keys not copied from the user's optimizer: the params are each trial's, and
``fused``/``foreach`` follow the ``fused_optimizer`` knob."""


def from_lightning(
    module_or_class: Any, datamodule: Any, *, name: str | None = None
) -> "LightningWorkload":
    """A workload training ``module_or_class`` on ``datamodule``'s ``train_dataloader()``.

    Args:
        module_or_class: a LightningModule instance (each trial trains a deep copy of it), or
            its class (each trial trains ``cls()``).
        datamodule: a LightningDataModule, or any object with ``train_dataloader()``
            (``prepare_data()`` and ``setup("fit")`` are called first when it has them). It
            is deep-copied before each use, so the object given stays as it is.
        name: the workload's name in the leaderboard (default: the module's class name,
            lower-cased).

    Returns:
        A ``LightningWorkload``; run it with ``python -m tuner run --workload pkg.mod:attr``.

    Raises:
        TunerError: the module or datamodule is not of the kind above, or uses what the module
            docstring lists as not supported; the message names it in one line.
    """
    module_cls = module_or_class if isinstance(module_or_class, type) else type(module_or_class)
    _check_module_class(module_cls)
    label = module_cls.__name__
    prototype = _fresh_module(module_or_class)
    if getattr(prototype, "automatic_optimization", True) is False:
        raise TunerError(f"{label}: manual optimization (automatic_optimization = False) is not "
                         "supported; tuner steps one optimizer after training_step's loss")
    recipe = OptimizerRecipe.of(prototype, label)
    loader = train_loader(datamodule)
    baseline = _baseline(loader, label, fused=recipe.user_fused)
    return LightningWorkload(
        module_or_class, datamodule, name=name or label.lower(), recipe=recipe,
        baseline=baseline, collate=loader.collate_fn, shape=_sample_shape(loader.dataset[0]))


class _Step(nn.Module):
    """The LightningModule as the harness trains it: ``forward(batch, batch_idx)`` is its
    ``training_step``, so the harness's ``torch.compile`` of the model compiles the whole
    step, the module's forward included (Lightning's ``from_compiled`` compiles
    ``training_step`` too)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        self.batch_idx = 0
        """The next ``batch_idx`` passed to ``training_step`` (counts micro-batches)."""

    def forward(self, batch: Any, batch_idx: int) -> Any:
        return self.module.training_step(batch, batch_idx)

    def to(self, *args: Any, **kwargs: Any) -> "_Step":
        """Moves through the LightningModule's own ``to``, which also updates its ``device``
        and ``dtype`` properties (``nn.Module.to`` on this parent would not)."""
        self.module.to(*args, **kwargs)
        return self


class LightningWorkload(Workload):
    """A Workload made by ``from_lightning`` (see the module docstring for what it takes from
    the LightningModule and datamodule). Picklable: Ray sends it to each trial's worker, where
    the module's and datamodule's classes are imported by their module path."""

    description = "a LightningModule on its datamodule's train_dataloader()"
    source = "the user's LightningModule and datamodule (tuner.integrations.lightning)"
    space = "lightning"
    trainer_name = "Lightning Trainer.fit()"
    """The trainer ``trainer_samples_per_sec`` runs, as ``validate`` names it."""

    def __init__(self, module_or_class: Any, datamodule: Any, *, name: str,
                 recipe: "OptimizerRecipe", baseline: Knobs, collate: Callable | None,
                 shape: dict[str, list[int]]):
        self.name = name
        self.references = {"baseline": baseline}
        self._module = module_or_class
        self._datamodule = datamodule
        self._recipe = recipe
        self._collate = collate
        self._shape = shape

    def build_model(self, scale: str) -> nn.Module:
        """A fresh LightningModule inside the wrapper whose forward is its training_step."""
        return _Step(_fresh_module(self._module))

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        """The dataset of the datamodule's ``train_dataloader()``; ``data_dir`` is not read."""
        return train_loader(self._datamodule).dataset

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        """An empty placeholder directory: the datamodule owns the data, no file is written."""
        path = Path(cache_dir) / PLACEHOLDER_DATA
        path.mkdir(parents=True, exist_ok=True)
        return path

    def check_data(self, data_dir: Path, scale: str) -> int:
        """Raises TunerError when ``--data`` named a directory (the datamodule's data is used,
        so a ``--data`` would be ignored); otherwise the base class's check."""
        placeholder = self.prepare_default_data(default_cache_dir() / "data", scale)
        if Path(data_dir).resolve() != placeholder.resolve():
            raise TunerError(f"--data {data_dir}: workload {self.name} takes its data from its "
                             "datamodule's train_dataloader(); leave out --data")
        return super().check_data(data_dir, scale)

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """The loss ``training_step(batch, batch_idx)`` returns (a tensor, or a dict's
        ``"loss"``). ``batch_idx`` counts micro-batches from 0 per model built. Raises
        TunerError when the step returns something else (None: the step was skipped)."""
        step = getattr(model, "_orig_mod", model)  # under torch.compile: the _Step compiled
        batch_idx = step.batch_idx
        step.batch_idx += 1
        return _loss(model(batch, batch_idx), self.name)

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        """Shapes of the tensors of the dataset's first sample, keyed by their place in it."""
        return self._shape

    def build_optimizer(self, params, fused: bool) -> torch.optim.Optimizer:
        """The module's ``configure_optimizers()`` optimizer, rebuilt over ``params``."""
        return self._recipe.build(params, fused)

    def collate_fn(self) -> Callable | None:
        """The ``collate_fn`` of the datamodule's ``train_dataloader()``."""
        return self._collate

    def trainer_samples_per_sec(self, knobs: Knobs, *, steps: int, device: str,
                                scale: str) -> float | None:
        """Steady-state samples/sec of ``lightning.pytorch.Trainer.fit()`` training a fresh
        module for ``steps`` optimizer steps with ``knobs`` (clamped to ``device``) applied
        through Lightning's own settings (``tuner.integrations.lightning_args``): the Trainer's
        precision, accumulation and cuDNN benchmark, a DataLoader over the datamodule's
        dataset (shuffled, last batch dropped, its ``collate_fn``), the optimizer of
        ``configure_optimizers`` (fused per the knob, as a trial builds it), ``torch.compile``
        of the module, channels_last module and inputs, TF32 matmuls, one device.

        The rate counts the samples of the batches after ``warmup_steps`` of ``scale``
        (``tuner.settings.MEASUREMENT_DEFAULTS``) over their wall time, timed by a Callback at
        optimizer-step boundaries (the device synchronised). Raises ValueError for fewer steps
        than the warm-up plus one; whatever ``fit`` raises."""
        from tuner.integrations.lightning_fit import fit_samples_per_sec
        return fit_samples_per_sec(self, knobs, steps=steps, device=device, scale=scale)

    def trainer_parts(self, fused: bool) -> tuple[nn.Module, Dataset]:
        """A fresh module for ``Trainer.fit`` (``cls()`` or a deep copy; Lightning calls its
        ``configure_model`` and ``log`` works) whose ``configure_optimizers`` returns the
        optimizer a trial builds (``fused`` as the knob), and the datamodule's dataset."""
        module = (self._module() if isinstance(self._module, type)
                  else copy.deepcopy(self._module))
        recipe = self._recipe
        module.configure_optimizers = lambda: recipe.build(module.parameters(), fused)
        return module, train_loader(self._datamodule).dataset


@dataclass(frozen=True)
class OptimizerRecipe:
    """How to rebuild the optimizer ``configure_optimizers()`` returned over other parameters
    in the same order (``module.parameters()``): class, constructor arguments, param groups."""
    cls: type
    kwargs: dict[str, Any]
    """Constructor arguments taken from the optimizer's ``defaults`` (lr, betas, ...)."""
    groups: tuple[tuple[tuple[int, ...], dict[str, Any]], ...]
    """Per param group: indices into ``module.parameters()``, and its settings."""
    takes_fused: bool
    """The class's constructor has a ``fused`` argument."""

    @property
    def user_fused(self) -> bool:
        """The user's optimizer was fused."""
        return bool(self.kwargs.get("fused"))

    @classmethod
    def of(cls, module: nn.Module, label: str) -> "OptimizerRecipe":
        """The recipe of ``module.configure_optimizers()``. Raises TunerError."""
        try:
            conf = module.configure_optimizers()
        except Exception as exc:
            raise TunerError(f"{label}.configure_optimizers() raised {type(exc).__name__}: "
                             f"{exc} (tuner calls it without a Trainer)") from None
        optimizer = _the_optimizer(conf, label)
        index = {id(p): i for i, p in enumerate(module.parameters())}
        groups = []
        for group in optimizer.param_groups:
            if any(id(p) not in index for p in group["params"]):
                raise TunerError(f"{label}.configure_optimizers(): the optimizer holds a "
                                 "parameter that is not one of the module's parameters()")
            settings = {k: v for k, v in group.items() if k not in _RESERVED_GROUP_KEYS}
            groups.append((tuple(index[id(p)] for p in group["params"]), settings))
        accepted = inspect.signature(type(optimizer)).parameters
        kwargs = {k: v for k, v in optimizer.defaults.items() if k in accepted and k != "params"}
        return cls(type(optimizer), kwargs, tuple(groups), "fused" in accepted)

    def build(self, params, fused: bool) -> torch.optim.Optimizer:
        """The optimizer over ``params`` (each trial's model's ``parameters()``, in the order
        the recipe was taken in); ``fused`` is the fused_optimizer knob, applied when the class
        takes it (and then ``foreach`` is left to torch)."""
        params = list(params)
        groups = [{**settings, "params": [params[i] for i in indices]}
                  for indices, settings in self.groups]
        kwargs = dict(self.kwargs)
        if self.takes_fused:
            kwargs["fused"] = fused or None
            if fused:
                kwargs.pop("foreach", None)
        return self.cls(groups, **kwargs)


def _the_optimizer(conf: Any, label: str) -> torch.optim.Optimizer:
    """The one optimizer in what ``configure_optimizers`` returned: an optimizer, a dict with
    ``"optimizer"``, a list or tuple of those, or ``([optimizers], [schedulers])``. Raises
    TunerError for none or several."""
    found = _optimizers_in(conf)
    if len(found) != 1:
        what = "no optimizer" if not found else f"{len(found)} optimizers"
        raise TunerError(f"{label}.configure_optimizers() returned {what}; tuner tunes a module "
                         "with exactly one optimizer (manual optimization is not supported)")
    return found[0]


def _optimizers_in(conf: Any) -> list[torch.optim.Optimizer]:
    if isinstance(conf, torch.optim.Optimizer):
        return [conf]
    if isinstance(conf, Mapping):
        return _optimizers_in(conf.get("optimizer"))
    if isinstance(conf, (list, tuple)):
        if len(conf) == 2 and all(isinstance(c, (list, tuple)) for c in conf):
            return _optimizers_in(conf[0])  # ([optimizers], [lr schedulers])
        return [opt for item in conf for opt in _optimizers_in(item)]
    return []  # None, or a scheduler next to its optimizer


def _check_module_class(module_cls: type) -> None:
    """Raises TunerError unless ``module_cls`` looks like a LightningModule."""
    missing = [m for m in ("training_step", "configure_optimizers")
               if not callable(getattr(module_cls, m, None))]
    if not issubclass(module_cls, nn.Module) or missing:
        raise TunerError(f"from_lightning: {module_cls.__name__} is not a LightningModule "
                         f"(an nn.Module with training_step and configure_optimizers)")


def _fresh_module(module_or_class: Any) -> nn.Module:
    """A new module to train: ``cls()`` or a deep copy of the instance, its ``configure_model``
    hook called, and ``log``/``log_dict`` made no-ops (without a Trainer Lightning warns on
    every call). Raises TunerError when the class cannot be built without arguments."""
    if isinstance(module_or_class, type):
        try:
            module = module_or_class()
        except Exception as exc:
            raise TunerError(f"from_lightning: creating {module_or_class.__name__}() raised "
                             f"{type(exc).__name__}: {exc}; pass an instance instead") from None
    else:
        module = copy.deepcopy(module_or_class)
    configure = getattr(module, "configure_model", None)
    if callable(configure):
        configure()
    module.log = _no_log
    module.log_dict = _no_log
    return module


def _no_log(*args: Any, **kwargs: Any) -> None:
    """``LightningModule.log`` outside a Trainer: nothing to log to."""


def train_loader(datamodule: Any) -> DataLoader:
    """The ``train_dataloader()`` of a deep copy of ``datamodule``, after its
    ``prepare_data()`` and ``setup("fit")``. Raises TunerError for a loader tuner cannot
    rebuild (not one DataLoader, an IterableDataset, or no batch_size)."""
    label = type(datamodule).__name__
    if not callable(getattr(datamodule, "train_dataloader", None)):
        raise TunerError(f"from_lightning: the datamodule {label} has no train_dataloader()")
    dm = copy.deepcopy(datamodule)
    if callable(getattr(dm, "prepare_data", None)):
        dm.prepare_data()
    if callable(getattr(dm, "setup", None)):
        dm.setup("fit")
    loader = dm.train_dataloader()
    if not isinstance(loader, DataLoader):
        raise TunerError(f"{label}.train_dataloader() returned a {type(loader).__name__}; "
                         "tuner needs one torch DataLoader")
    if isinstance(loader.dataset, IterableDataset):
        raise TunerError(f"{label}.train_dataloader(): an IterableDataset is not supported "
                         "(tuner shuffles a map-style dataset with a len())")
    if loader.batch_size is None:
        raise TunerError(f"{label}.train_dataloader() uses a batch_sampler; tuner needs "
                         "DataLoader(batch_size=...) to set the batch size itself")
    return loader


def _baseline(loader: DataLoader, label: str, *, fused: bool) -> Knobs:
    """The knobs of the user's loader and optimizer, the rest at the Knobs defaults."""
    workers = loader.num_workers
    try:
        return Knobs(batch_size=loader.batch_size, num_workers=workers,
                     prefetch_factor=loader.prefetch_factor if workers > 0 else None,
                     persistent_workers=bool(loader.persistent_workers) and workers > 0,
                     pin_memory=bool(loader.pin_memory), fused_optimizer=fused)
    except ValueError as exc:
        raise TunerError(f"{label}.train_dataloader(): {exc}") from None


def _loss(out: Any, name: str) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping) and isinstance(out.get("loss"), torch.Tensor):
        return out["loss"]
    got = "None (the step was skipped)" if out is None else f"a {type(out).__name__}"
    raise TunerError(f"workload {name}: training_step returned {got}; tuner needs the loss "
                     "(a tensor, or a dict with 'loss')")


def _sample_shape(sample: Any, key: str = "") -> dict[str, list[int]]:
    """``{"[0]": [16], "[1]": []}`` for a ``(x, y)`` sample; mapping keys name their values."""
    if isinstance(sample, torch.Tensor):
        return {key or "sample": list(sample.shape)}
    if isinstance(sample, Mapping):
        items = [(f"{key}.{k}" if key else str(k), v) for k, v in sample.items()]
    elif isinstance(sample, (list, tuple)):
        items = [(f"{key}[{i}]", v) for i, v in enumerate(sample)]
    else:
        return {}
    return {name: shape for k, v in items for name, shape in _sample_shape(v, k).items()}
