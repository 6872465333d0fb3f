"""The workload contract (public API); ``tuner.workload_loader`` finds workloads by name or path.

A workload is the thing being tuned: a model, real on-disk data, and a loss. It holds no knob
logic: the harness applies batch size, DataLoader settings, AMP, channels_last, compile, etc.

Bring your own::

    # mypkg/mod.py
    from tuner.workload import Workload
    from tuner.knobs import Knobs

    class MyWorkload(Workload):
        name = "mymodel"
        description = "my model on my data"
        source = "my team's training script"
        references = {"baseline": Knobs(batch_size=32, num_workers=2)}
        def build_model(self, scale): ...
        def build_dataset(self, data_dir, scale): ...
        def training_step(self, model, batch): ...
        def sample_shape(self, scale): ...
        # optional: def prepare_default_data(self, cache_dir, scale): ...  (runs without --data)

    workload = MyWorkload()

    # python -m tuner run --workload mypkg.mod:workload

``python -m tuner run`` finds a workload by built-in name (``ddpm``), import path, file or
entry point (``tuner.workload_loader.resolve``).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

import torch
from torch import nn
from torch.utils.data import Dataset

from tuner._deprecated import Replacement, moved
from tuner.errors import DataError, TunerError
from tuner.knobs import Knobs
from tuner.settings import SCALES, default_cache_dir  # noqa: F401  (public: workloads import them here)
from tuner.workload_calls import meta_parameter_count, wrap_scale_methods

if TYPE_CHECKING:
    from tuner.data import SamplePath

class Workload(abc.ABC):
    """One model family to tune. Subclass it, fill the class attributes, implement the methods.

    Contract:
      * ``build_dataset`` reads real files and does the CPU work (decode, augment, crop,
        tokenise) in ``__getitem__``: that work is what ``num_workers`` exists for.
      * ``training_step`` returns the scalar loss of one micro-batch already on the device; the
        harness runs it under autocast, calls backward and steps the optimizer.
      * Nothing here reads or applies knobs.
      * The scale-taking methods (``build_model``, ``build_dataset``, ``prepare_default_data``,
        ``check_data``, ``sample_shape``, ``sample_path``, ``units_per_sample``,
        ``parameter_count``) take a scale of ``SCALES``: 'full' or 'tiny'. Every call goes
        through ``tuner.workload_calls`` (put around them when the class is made), which keeps
        a workload written for tuner 0.2 running: a method that raises KeyError or ValueError
        naming 'full' is called once more with 'seed' (0.2's word for it) and, when it takes
        that, gets 'seed' for 'full' from then on, with one ``TunerDeprecationWarning``
        (deprecated in 0.3.0, removed in 0.4.0). A method that treats every word but 'tiny'
        as full-size cannot be told apart, and gets 'full'.
      * An exception one of them raises outside a trial (planning, the data check, the
        parameter count) ends a command with one line naming the method, the scale, the error
        and its line (exit code 2); inside a trial it is the trial's error, traceback kept.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        wrap_scale_methods(cls)

    name: ClassVar[str]
    """Short name used on the command line and in the leaderboard."""
    description: ClassVar[str]
    """One line: the model and the data."""
    source: ClassVar[str]
    """The report or paper the architecture and defaults come from."""
    references: ClassVar[Mapping[str, Knobs]] = {}
    """Named reference configurations, evaluated first in every run: 'baseline' (the user's
    starting point, required) and optionally 'recommended' (what the guide said to do)."""
    space: ClassVar[str | None] = None
    """Name of the built-in search space, ``tuner/workloads/spaces/<space>.yaml`` (default:
    ``name``), or the path of a space file of the workload's own (ending in ``.yaml``)."""
    learning_rate: ClassVar[float] = 1e-4
    """Learning rate of the default optimizer (AdamW)."""
    compile_s_hint: ClassVar[float | None] = None
    """Seconds the first step under ``torch.compile`` (default mode) took for this workload on
    a GPU machine, with its source where it is set; None: not measured. On CUDA a trial starts
    a compile only with that much time left (``tuner.budget.compile_needs_s``); without it,
    the time ddpm's U-Net needed (``tuner.budget.COMPILE_NEEDS_S``)."""
    device_memory_bound: ClassVar[bool] = False
    """True for a workload whose batch size a device memory of its own bounds on every device
    (its ``training_step`` raises ``torch.OutOfMemoryError`` over it: a model of an
    accelerator, or an accelerator the CPU device drives): ``--probe auto`` then probes on the
    CPU device as it does on CUDA, and the search starts from the machine's compute curve.
    False (the default): on the CPU device only ``--max-host-memory`` turns the probe on."""
    data_is_file: ClassVar[bool] = False
    """True when ``--data`` names one file (a text corpus) rather than a directory."""
    option_names: ClassVar[tuple[str, ...]] = ()
    """Options ``configure`` takes, by keyword (``--model`` is 'model', ``--image-size``
    'image_size'); empty (the default): the workload takes none."""

    def configure(self, **options: Any) -> "Workload":
        """This workload with ``options`` applied: a configured copy whose ``name`` tells its
        leaderboard rows apart from the unconfigured workload's (e.g. 'classifier-resnet50-224px'),
        so that rows of different models are never ranked together. The copy is pickled to the
        Ray workers with its options. Called through ``configured``, which passes only names in
        ``option_names`` and only options the user gave. The default takes none.

        Raises:
            TunerError: a value the workload does not accept, in one line naming the option.
        """
        if options:
            raise TunerError(f"workload {self.name!r} takes no options "
                             f"({', '.join(option_flag(o) for o in options)})")
        return self

    @abc.abstractmethod
    def build_model(self, scale: str) -> nn.Module:
        """The model, on CPU, in fp32, for ``scale`` in SCALES."""

    @abc.abstractmethod
    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        """The training dataset reading files under ``data_dir``.

        Raises:
            tuner.errors.DataError: the directory is missing, empty, or has no usable file; a
                file that fails to decode in ``__getitem__`` raises it naming the file.
        """

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        """Write the embedded default dataset under ``cache_dir`` once (deterministically) and
        return its path (what ``build_dataset`` takes). A second call reuses what is there.

        Optional: a workload that always reads the user's data leaves it out, and every
        command then needs ``--data`` (``has_default_data`` says which).

        Raises:
            DataError: (this default) the workload has no embedded dataset: one line asking
                for ``--data``.
        """
        what = "FILE (one file)" if self.data_is_file else "DIR (a directory)"
        raise DataError(f"workload {self.name!r} has no embedded dataset (it does not "
                        f"implement prepare_default_data): give your data with --data {what}")

    @property
    def has_default_data(self) -> bool:
        """Whether the workload implements ``prepare_default_data`` (runs without ``--data``)."""
        return type(self).prepare_default_data is not Workload.prepare_default_data

    @abc.abstractmethod
    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """Forward pass and loss for one micro-batch on the device. Returns a scalar tensor.

        Also called once per run in the driver on ``meta`` tensors (shapes without data) to
        count the model's FLOPs (``tuner.trial.flops``); code that needs real values (``.item()``)
        makes that count fall back to the CPU, or to none."""

    @abc.abstractmethod
    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        """Shapes of one sample's tensors, e.g. ``{"image": [3, 40, 40]}``."""

    def sample_path(self, data_dir: Path, scale: str) -> "SamplePath | None":
        """The sample path split at the cache boundary (``tuner.data.SamplePath``): the
        deterministic part of making a sample (read, decode, resize), which a cache may hold,
        and the random part (augmentation), which runs for every sample in every epoch, on
        the CPU per sample and on a device per batch with per-sample parameters.

        Optional: None (this default) tunes the ``loader`` data path only, and the run says
        once why the ``cache`` and ``device`` paths were not tried.

        Raises:
            tuner.errors.DataError: as ``build_dataset``.
        """
        return None

    @property
    def has_sample_path(self) -> bool:
        """Whether the workload implements ``sample_path`` (the data_path knob applies)."""
        return type(self).sample_path is not Workload.sample_path

    def samples_in(self, batch: Any) -> int:
        """Samples in a batch (default: length of the first tensor)."""
        first = batch[0] if isinstance(batch, (tuple, list)) else batch
        if isinstance(first, Mapping):
            first = next(iter(first.values()))
        return int(first.shape[0])

    def units_per_sample(self, scale: str) -> dict[str, int]:
        """Other throughput units per sample, e.g. ``{"tokens": 256}`` adds ``tokens_per_sec``."""
        return {}

    def build_optimizer(self, params, fused: bool) -> torch.optim.Optimizer:
        """The optimizer; ``fused`` is the fused_optimizer knob. Default: AdamW."""
        return torch.optim.AdamW(params, lr=self.learning_rate, fused=fused or None)

    def collate_fn(self) -> Callable | None:
        """DataLoader ``collate_fn`` (None: torch's default)."""
        return None

    def check_data(self, data_dir: Path, scale: str) -> int:
        """Validate data before any trial starts; returns the number of samples.

        The default builds the dataset and reads one sample. Raises DataError."""
        dataset = self.build_dataset(data_dir, scale)
        n = len(dataset)
        if n == 0:
            from tuner.errors import DataError
            raise DataError(f"data {data_dir}: no samples found")
        dataset[0]
        return n

    @property
    def space_name(self) -> str:
        return self.space or self.name

    @property
    def baseline(self) -> Knobs:
        return self.references["baseline"]

    def parameter_count(self, scale: str) -> int:
        """Parameters of ``build_model(scale)``: counted on torch's ``meta`` device (no
        memory, no initialisation), else on the model built on the CPU."""
        count = meta_parameter_count(self, scale)
        if count is not None:
            return count
        return sum(p.numel() for p in self.build_model(scale).parameters())

    def trainer_samples_per_sec(
        self, knobs: "Knobs", *, steps: int, device: str, scale: str
    ) -> float | None:
        """Samples/sec of the framework's own trainer (Transformers ``Trainer.train()``,
        Lightning ``Trainer.fit()``) run for ``steps`` optimizer steps with ``knobs`` applied
        through the trainer's own settings; None for a workload that has no trainer (the
        default)."""
        return None


def option_flag(option: str) -> str:
    """The command-line flag of a workload option: 'image_size' -> '--image-size'."""
    return "--" + option.replace("_", "-")


wrap_scale_methods(Workload)  # the defaults too (check_data builds the dataset, reads a sample)


LOADER_NAMES = ("ENTRY_POINT_GROUP", "BUILTINS", "available", "resolve", "configured")
"""The finder's public names, which moved to ``tuner.workload_loader``."""

_BUILTINS_PACKAGE = "tuner.workloads"
"""The value the deprecated ``BUILTIN_PACKAGE`` reads."""

_builtin_dir = Path(__file__).resolve().parent / "workloads"
"""The value the deprecated ``BUILTIN_DIR`` reads."""

# Deprecated names (tuner._deprecated's one policy): ``make_trainable`` lives with the harness
# (which builds on this contract, not the other way round), the finder in
# ``tuner.workload_loader``; ``tuner.trial.harness`` is imported on first use only, by ``moved``.
__getattr__ = moved(__name__, {
    "make_trainable": "tuner.trial.harness",
    **{name: "tuner.workload_loader" for name in LOADER_NAMES},
    "BUILTIN_PACKAGE": Replacement(
        "tuner.workload:_BUILTINS_PACKAGE", "the built-in workloads are the package "
        "'tuner.workloads' (their import paths: tuner.workload_loader.BUILTINS)"),
    "BUILTIN_DIR": Replacement(
        "tuner.workload:_builtin_dir", "use importlib.resources.files('tuner.workloads')"),
})


