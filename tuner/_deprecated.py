"""tuner's one deprecation policy: a deprecated name or value keeps working for one release, and
every warning names the version it was deprecated in, the version that removes it and what to
use instead.

* A module whose public names moved ends with
  ``__getattr__ = moved(__name__, {"NAME": "new.module"})`` (PEP 562): reading ``old.NAME``
  imports ``new.module`` at that moment (so no import cycle is made at import time), warns and
  returns the value. A name replaced by something else maps to a ``Replacement``.
* Anything else deprecated (an argument's value, a key) calls ``warn``; a value the user's
  own code takes where tuner calls it (a workload method that takes an old scale word) calls
  ``warn_at`` with that code.

Every warning is a ``tuner.errors.TunerDeprecationWarning`` (a ``DeprecationWarning``), with
the text of ``message``. The removal version is ``REMOVED_IN`` unless a name says otherwise;
CHANGELOG.md states the same version.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tuner.errors import TunerDeprecationWarning

__all__ = ["DEPRECATED_IN", "REMOVED_IN", "DEPRECATIONS", "Replacement", "TunerDeprecationWarning",
           "message", "moved", "warn", "warn_at"]

DEPRECATED_IN = "0.3.0"
"""The release the current deprecations are made in (the default of ``deprecated``)."""

REMOVED_IN = "0.4.0"
"""The release that removes them (the default of ``removed``): one release later."""

DEPRECATIONS: dict[str, tuple[str, str]] = {}
"""Old path -> (deprecated in, removed in) of every name ``moved`` serves, for the modules
imported so far (the test suite checks that no removal version has been reached)."""


@dataclass(frozen=True)
class Replacement:
    """How a deprecated module attribute that is not simply moved still reads."""

    source: str
    """``'module'`` or ``'module:attribute'``: where the old value is read from, imported on
    first use (``'module'``: the attribute of the old name)."""
    instead: str
    """What to use instead, as the warning says it ('use tuner.winner.best(rows)')."""
    deprecated: str = DEPRECATED_IN
    removed: str = REMOVED_IN


def message(old: str, instead: str, *, deprecated: str = DEPRECATED_IN,
            removed: str = REMOVED_IN) -> str:
    """The one text of a deprecation: ``'<old> was deprecated in tuner <deprecated> and will be
    removed in tuner <removed>; <instead>'``."""
    return (f"{old} was deprecated in tuner {deprecated} and will be removed in tuner "
            f"{removed}; {instead}")


def warn(old: str, instead: str, *, deprecated: str = DEPRECATED_IN, removed: str = REMOVED_IN,
         stacklevel: int = 2) -> None:
    """Warn that ``old`` (a name, a value, a key: as the user wrote it) is deprecated.

    ``stacklevel`` counts as ``warnings.warn``'s does from the caller of ``warn`` (2: the
    line that called the function that calls ``warn``).

    Warns:
        TunerDeprecationWarning: the text of ``message``.
    """
    warnings.warn(message(old, instead, deprecated=deprecated, removed=removed),
                  TunerDeprecationWarning, stacklevel=stacklevel + 1)


def warn_at(old: str, instead: str, function: Callable, *, deprecated: str = DEPRECATED_IN,
            removed: str = REMOVED_IN) -> None:
    """``warn``, reported at the first line of ``function``, the user's code that uses ``old``
    (a workload method that takes an old scale word), rather than at a caller's line: tuner's
    own code calls it, so a stack level would name tuner. The warning filters see the
    function's module (a workload defined in a script run as ``__main__`` shows it under
    Python's default filters), and the function module's registry shows it once there.

    Warns:
        TunerDeprecationWarning: the text of ``message``.
    """
    target = inspect.unwrap(function)
    code = getattr(target, "__code__", None)
    namespace = getattr(target, "__globals__", None)
    warnings.warn_explicit(
        message(old, instead, deprecated=deprecated, removed=removed), TunerDeprecationWarning,
        filename=code.co_filename if code else "<unknown>",
        lineno=code.co_firstlineno if code else 0,
        module=getattr(target, "__module__", None) or "tuner",
        registry=None if namespace is None else namespace.setdefault("__warningregistry__", {}),
        module_globals=namespace)


def moved(module: str, names: Mapping[str, str | Replacement], *,
          deprecated: str = DEPRECATED_IN, removed: str = REMOVED_IN) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` whose deprecated ``names`` still read.

    Args:
        module: the old module's name (``__name__``).
        names: deprecated name -> the module that now holds it under the same name, or a
            ``Replacement`` (its own versions win over ``deprecated`` and ``removed``).
        deprecated: the version every name given as a module was deprecated in.
        removed: the version that removes them.

    Returns:
        ``__getattr__(name)``: the value, after a ``TunerDeprecationWarning`` reported at the
        line that read it. Raises AttributeError for any other name.
    """
    for name, target in names.items():
        versions = ((target.deprecated, target.removed) if isinstance(target, Replacement)
                    else (deprecated, removed))
        DEPRECATIONS[f"{module}.{name}"] = versions

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if isinstance(target, Replacement):
            warn(f"{module}.{name}", target.instead, deprecated=target.deprecated,
                 removed=target.removed)
            source, _, attribute = target.source.partition(":")
            return getattr(importlib.import_module(source), attribute or name)
        warn(f"{module}.{name}", f"use {target}.{name}, where it moved",
             deprecated=deprecated, removed=removed)
        return getattr(importlib.import_module(target), name)
    return __getattr__
