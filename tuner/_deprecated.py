"""Old import paths of moved public names, kept for one release (PEP 562 module ``__getattr__``).

A module whose public names moved defines ``__getattr__ = moved(__name__, {"NAME": "new.module"})``:
reading ``old.NAME`` then imports ``new.module`` (at that moment, so no import cycle is made at
import time), warns with a ``DeprecationWarning`` naming the new path, and returns the value.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, Mapping


def moved(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` whose names ``names`` (name -> the module that
    now holds it, under the same name) moved. Raises AttributeError for any other name."""
    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} moved to {target}.{name}; import it from there "
                      f"(the old path is removed in the next release)",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(target), name)
    return __getattr__
