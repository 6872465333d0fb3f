"""How a workload is found by name or path (``resolve``): built-ins by name (``ddpm``,
``BUILTINS``); others by import path (``pkg.module:attribute``), by file
(``path/to/mod.py:attribute``: imported as the module ``mod`` with its directory appended to
``sys.path``, which Ray's workers inherit) or by the entry-point group ``tuner.workloads``
(``ENTRY_POINT_GROUP``). A module that fails to import is reported in one line naming its file
and line. ``configured`` applies a workload's options (``--model``, ``--image-size``).

The built-ins are the subpackage ``tuner.workloads`` (their search spaces are its package data,
``tuner/workloads/spaces/<name>.yaml``), so a user's own ``workloads`` package or folder cannot
hide them, and they pickle to Ray's workers by their module path like any other class. The
contract itself is ``tuner.workload``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from tuner.errors import TunerError, one_line
from tuner.workload import Workload, option_flag
from tuner.workload_calls import named_by

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
        raise TunerError(
            f"workload {spec!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None


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
        raise TunerError(
            f"workload {spec!r}: give a name, an import path 'package.module:attribute' "
            f"or a tuner.workload.Workload instance, not a {type(spec).__name__}"
        )
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
    obj = _from_trainer(obj)
    if isinstance(obj, type) and issubclass(obj, Workload):
        try:
            obj = obj()
        except Exception as exc:
            raise TunerError(f"workload {spec!r}: creating {obj.__name__}() raised "
                             f"{_describe(exc, obj.__module__)}") from None
    return _checked(obj, spec)


def _from_trainer(obj: Any) -> Any:
    """A ``transformers.Trainer`` (or subclass) as a Workload
    (``tuner.integrations.transformers.from_transformers``); any other object as it is.
    Transformers is imported only for an object of one of its Trainer classes."""
    if any(cls.__name__ == "Trainer" and cls.__module__ == "transformers.trainer"
           for cls in type(obj).__mro__):
        from tuner.integrations.transformers import from_transformers
        return from_transformers(obj)
    return obj


def _checked(obj: Any, spec: str) -> Workload:
    """``obj`` if it is a Workload with a baseline reference. Raises TunerError."""
    if not isinstance(obj, Workload):
        raise TunerError(
            f"workload {spec!r} is a {type(obj).__name__}, not a tuner.workload.Workload"
        )
    if "baseline" not in obj.references:
        raise TunerError(f"workload {spec!r} has no 'baseline' reference configuration")
    return named_by(obj, spec)  # its methods' errors name it as the user did
