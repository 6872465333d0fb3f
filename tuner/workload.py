"""The workload contract (public API) and the registry that finds workloads.

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

Built-ins are found by name (``ddpm``); others by import path (``pkg.module:attribute``), by
file (``path/to/mod.py:attribute``: imported as the module ``mod`` with its directory appended
to ``sys.path``, which Ray's workers inherit) or by the entry-point group ``tuner.workloads``.
A module that fails to import is reported in one line naming its file and line.

The built-ins are the subpackage ``tuner.workloads`` (their search spaces are its package data,
``tuner/workloads/spaces/<name>.yaml``), so a user's own ``workloads`` package or folder cannot
hide them, and they pickle to Ray's workers by their module path like any other class.
"""

from __future__ import annotations

import abc
import importlib
import importlib.util
import os
import sys
import warnings
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

import torch
from torch import nn
from torch.utils.data import Dataset

from tuner._deprecated import moved
from tuner.errors import DataError, TunerError, one_line
from tuner.knobs import Knobs
from tuner.settings import SCALES, default_cache_dir  # noqa: F401  (public: workloads import them here)

if TYPE_CHECKING:
    from tuner.data import SamplePath

ENTRY_POINT_GROUP = "tuner.workloads"

BUILTINS: dict[str, str] = {
    "ddpm": "tuner.workloads.ddpm:workload",
    "classifier": "tuner.workloads.classifier:workload",
    "classifier299": "tuner.workloads.classifier:workload299",
    "segmentation3d": "tuner.workloads.segmentation3d:workload",
    "headpose": "tuner.workloads.headpose:workload",
    "chargpt": "tuner.workloads.chargpt:workload",
}
"""Built-in workload names and where they live. A name whose module is missing is skipped."""


class Workload(abc.ABC):
    """One model family to tune. Subclass it, fill the class attributes, implement the methods.

    Contract:
      * ``build_dataset`` reads real files and does the CPU work (decode, augment, crop,
        tokenise) in ``__getitem__``: that work is what ``num_workers`` exists for.
      * ``training_step`` returns the scalar loss of one micro-batch already on the device; the
        harness runs it under autocast, calls backward and steps the optimizer.
      * Nothing here reads or applies knobs.
    """

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
    ``name``)."""
    learning_rate: ClassVar[float] = 1e-4
    """Learning rate of the default optimizer (AdamW)."""
    compile_s_hint: ClassVar[float | None] = None
    """Seconds the first step under ``torch.compile`` (default mode) took for this workload on
    a GPU machine, with its source where it is set; None: not measured. On CUDA a trial starts
    a compile only with that much time left (``tuner.budget.compile_needs_s``); without it,
    the time ddpm's U-Net needed (``tuner.budget.COMPILE_NEEDS_S``)."""
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
        count the model's FLOPs (``tuner.flops``); code that needs real values (``.item()``)
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
        return sum(p.numel() for p in self.build_model(scale).parameters())


def _load_import_path(spec: str) -> Any:
    """The object ``spec`` names: ``package.module:attribute``, or ``path/to/file.py:attribute``
    (see ``_load_file``). Raises TunerError."""
    head, _, tail = spec.rpartition(":")
    if head.endswith(".py") or "/" in head or os.sep in head:
        return _load_file(spec, head, tail)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TunerError(
            f"workload {spec!r}: an import path looks like 'package.module:attribute' "
            "(or path/to/file.py:attribute)")
    return _attribute(spec, _import(spec, module_name), module_name, attr)


def _load_file(spec: str, file: str, attr: str) -> Any:
    """``path/to/mod.py:attribute``: the file's directory goes on ``sys.path`` (at the end, so
    it shadows no installed module) and the file is imported as the top-level module ``mod``.
    Ray's workers get the driver's ``sys.path`` as PYTHONPATH (``tuner.ray_runtime.ray_init``,
    which runs after the plan is made), so they import it by the same name."""
    if not attr:
        raise TunerError(f"workload {spec!r}: name the workload object after the file, "
                         f"e.g. '{file}:workload'")
    path = Path(file).expanduser()
    if path.suffix != ".py":
        raise TunerError(f"workload {spec!r}: {file} is not a .py file; a workload is "
                         "'package.module:attribute' or 'path/to/file.py:attribute'")
    if not path.is_file():
        raise TunerError(f"workload {spec!r}: no such file {file}; a workload is "
                         "'package.module:attribute' or 'path/to/file.py:attribute'")
    path = path.resolve()
    module_name = path.stem
    if not module_name.isidentifier():
        raise TunerError(f"workload {spec!r}: {path.name} cannot be imported under the name "
                         f"{module_name!r} (not a Python identifier); rename the file, e.g. to "
                         f"{_identifier(module_name)}.py")
    directory = str(path.parent)
    if directory not in sys.path:
        sys.path.append(directory)
        importlib.invalidate_caches()
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        found = None
    origin = found.origin if found is not None else None
    if origin is None or not os.path.exists(origin) or Path(origin).resolve() != path:
        raise TunerError(f"workload {spec!r}: the module name {module_name!r} of {path} is "
                         f"already taken by {origin or 'a built-in module'}; rename the file, "
                         f"or use 'package.module:{attr}' with the package's directory on "
                         "PYTHONPATH")
    return _attribute(spec, _import(spec, module_name), module_name, attr)


def _identifier(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out.isidentifier() else f"_{out}"


def _import(spec: str, module_name: str) -> Any:
    """``importlib.import_module`` with whatever the module's own code raises turned into one
    line naming the file and line it happened at. Raises TunerError."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:  # the module, or something it imports, is not there
        where = _where(exc, module_name)
        raise TunerError(f"workload {spec!r}: cannot import module {module_name!r} ({exc})"
                         f"{f' at {where}' if where else ''}") from None
    except SyntaxError as exc:
        where = f" at {exc.filename}:{exc.lineno}" if exc.filename else ""
        raise TunerError(f"workload {spec!r}: importing it raised {type(exc).__name__}: "
                         f"{one_line(exc.msg, _MESSAGE_CHARS)}{where}") from None
    except SystemExit as exc:  # a script's top-level argparse / sys.exit()
        where = _where(exc, module_name)
        raise TunerError(f"workload {spec!r}: importing it called sys.exit({exc.code!r})"
                         f"{f' at {where}' if where else ''}; code at a module's top level runs "
                         "on import: put a script's own code under "
                         "`if __name__ == \"__main__\":`") from None
    except Exception as exc:
        raise TunerError(f"workload {spec!r}: importing it raised {_describe(exc, module_name)}"
                         ) from None


def _attribute(spec: str, module: Any, module_name: str, attr: str) -> Any:
    try:
        return getattr(module, attr)
    except AttributeError:
        raise TunerError(f"workload {spec!r}: module {module_name!r} has no attribute {attr!r}") from None


def _describe(exc: BaseException, module_name: str) -> str:
    """``ZeroDivisionError: division by zero at /path/mod.py:3``."""
    message = one_line(exc, _MESSAGE_CHARS)
    where = _where(exc, module_name)
    return (f"{type(exc).__name__}{f': {message}' if message else ''}"
            f"{f' at {where}' if where else ''}")


def _where(exc: BaseException, module_name: str) -> str | None:
    """``file:line`` of the last traceback frame in the user's code: the module
    ``module_name`` or one of its parent packages (an exception raised deeper, in a library,
    is reported where the user's code called it). None when no such frame exists."""
    parts = module_name.split(".")
    own = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    where = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals.get("__name__") in own:
            where = f"{frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


_MESSAGE_CHARS = 300
"""An exception's message is cut to this many characters in the one error line."""


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(name: str) -> Any:
    ep = _entry_points()[name]
    module_name = ep.value.partition(":")[0].strip()
    try:
        return ep.load()
    except ImportError as exc:
        raise TunerError(f"workload {name!r} (entry point {ep.value}): cannot import it "
                         f"({exc})") from None
    except SyntaxError as exc:
        raise TunerError(f"workload {name!r} (entry point {ep.value}): importing it raised "
                         f"SyntaxError: {one_line(exc.msg, _MESSAGE_CHARS)} at "
                         f"{exc.filename}:{exc.lineno}") from None
    except Exception as exc:
        raise TunerError(f"workload {name!r} (entry point {ep.value}): importing it raised "
                         f"{_describe(exc, module_name)}") from None


def option_flag(option: str) -> str:
    """The command-line flag of a workload option: 'image_size' -> '--image-size'."""
    return "--" + option.replace("_", "-")


def configured(workload: Workload, options: Mapping[str, Any] | None) -> Workload:
    """``workload.configure(**options)`` for the options given (None values are left out);
    ``workload`` itself when none is given.

    Raises:
        TunerError: an option the workload does not take (one line naming its flag and the
            known workloads that take it), or a value it rejects.
    """
    given = {k: v for k, v in (options or {}).items() if v is not None}
    for option, value in given.items():
        if option not in workload.option_names:
            takers = [name for name in sorted(available()) if _takes(name, option)]
            raise TunerError(f"{option_flag(option)} {value}: workload {workload.name!r} does "
                             f"not take {option_flag(option)}; workloads that do: "
                             f"{', '.join(takers) or 'none'}")
    return workload.configure(**given) if given else workload


def _takes(name: str, option: str) -> bool:
    """Whether the known workload ``name`` takes ``option`` (False when it fails to load)."""
    try:
        return option in resolve(name).option_names
    except TunerError:
        return False


def available() -> dict[str, str]:
    """Known workload names -> where they come from (built-in import path or entry point)."""
    names = {}
    for name, path in BUILTINS.items():
        module = path.partition(":")[0]
        if importlib.util.find_spec(module) is not None:
            names[name] = path
    for name, ep in _entry_points().items():
        names.setdefault(name, ep.value)
    return names


def resolve(spec: "str | Workload") -> Workload:
    """Find a workload by built-in name, entry-point name, or import path; a Workload
    instance (the Python API) is checked and returned as it is.

    Raises:
        TunerError: unknown name (the message lists the known ones), bad import path or
            file, a module whose import raises (named with the file and line), or an object
            that is not a Workload.
    """
    if isinstance(spec, Workload):
        return _checked(spec, spec.name)
    if not isinstance(spec, str):
        raise TunerError(f"workload {spec!r}: give a name, an import path 'package.module:attribute' "
                         f"or a tuner.workload.Workload instance, not a {type(spec).__name__}")
    known = available()
    if spec in known:
        obj = (_load_import_path(known[spec]) if spec in BUILTINS
               else _load_entry_point(spec))
    elif ":" in spec:
        obj = _load_import_path(spec)
    else:
        hint = ""
        if spec.endswith(".py") or "/" in spec:
            hint = f"; a file needs the object's name after it, e.g. '{spec}:workload'"
        raise TunerError(
            f"unknown workload {spec!r}; known: {', '.join(sorted(known))} "
            f"(or an import path 'package.module:attribute'){hint}")
    if isinstance(obj, type) and issubclass(obj, Workload):
        try:
            obj = obj()
        except Exception as exc:
            raise TunerError(f"workload {spec!r}: creating {obj.__name__}() raised "
                             f"{_describe(exc, obj.__module__)}") from None
    return _checked(obj, spec)


def _checked(obj: Any, spec: str) -> Workload:
    """``obj`` if it is a Workload with a baseline reference. Raises TunerError."""
    if not isinstance(obj, Workload):
        raise TunerError(f"workload {spec!r} is a {type(obj).__name__}, not a tuner.workload.Workload")
    if "baseline" not in obj.references:
        raise TunerError(f"workload {spec!r} has no 'baseline' reference configuration")
    return obj


def __getattr__(name: str) -> Any:
    """Deprecated names (PEP 562), kept for the 0.3 releases and removed in 0.4:

    * ``make_trainable``: moved to ``tuner.harness`` in 0.2 (the harness builds on this
      contract, not the other way round);
    * ``BUILTIN_PACKAGE``, ``BUILTIN_DIR``: the built-in workloads are the package
      ``tuner.workloads`` (their import paths: ``BUILTINS``).

    ``tuner.harness`` is imported on first use only, by the deprecation helper
    (``tuner._deprecated.moved``): this contract imports nothing of the trial itself.

    Warns:
        DeprecationWarning: naming what to use instead.

    Raises:
        AttributeError: any other name.
    """
    if name == "make_trainable":
        _deprecated(name, "use `from tuner.harness import make_trainable`")
        with warnings.catch_warnings():  # warned above, at the caller's line
            warnings.simplefilter("ignore", DeprecationWarning)
            return _MOVED(name)
    if name == "BUILTIN_PACKAGE":
        _deprecated(name, "the built-in workloads are the package 'tuner.workloads' "
                          "(their import paths: `tuner.workload.BUILTINS`)")
        return "tuner.workloads"
    if name == "BUILTIN_DIR":
        _deprecated(name, "the built-in workloads are the package 'tuner.workloads': use "
                          "`importlib.resources.files('tuner.workloads')`")
        return Path(__file__).resolve().parent / "workloads"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MOVED = moved(__name__, {"make_trainable": "tuner.harness"})
"""Reads a moved name from its new module, importing it then."""


def _deprecated(name: str, instead: str) -> None:
    warnings.warn(f"tuner.workload.{name} is deprecated and will be removed in tuner 0.4; "
                  f"{instead}", DeprecationWarning, stacklevel=3)
