"""How tuner calls a workload's scale-taking methods: the one place every call goes through.

``tuner.workload.Workload`` puts ``scale_taking`` around each method of ``SCALE_ARGS`` (its own
and every subclass's, when the class is made), so the call paths of the run (plan, progress,
the trial harness in Ray's workers, ``validate``, ``profile``, the memory probe) all go through
it without knowing it. It does two things:

* **tuner 0.2's scale word** (``OLD_SCALES``: 'seed', which tuner 0.3 calls 'full'). A caller
  that passes 'seed' itself gets ``scale_word``'s warning at its own line, and the method is
  called as with 'full'. A scale-taking method called with 'full' that raises ``KeyError`` or
  ``ValueError`` whose message names 'full' is called once more with 'seed'. When that call
  returns (or raises a ``TunerError``, such as a ``DataError``: the method got past its scale),
  the method takes 'seed': it gets 'seed' for 'full' from then on, in this process and in every
  process the workload is pickled to (the choice is kept in the workload object), and the first
  such method of the workload warns once (``TunerDeprecationWarning``, deprecated in 0.3.0,
  removed in 0.4.0, reported at the method's first line). Otherwise the first error stands. A
  method that takes any word (one that treats every scale but 'tiny' as full-size) is never
  retried.
* **a workload method's error in one line.** An exception a method raises (other than a
  ``TunerError``, already a line for the user) leaves the method as it came, type and traceback
  kept (so a trial's row records it as before), marked with the method and the scale; outside
  a trial it reaches the command line, which prints ``user_error``'s one line and exits 2.

Torch-free at import (``tuner.progress`` imports it; ``meta_parameter_count`` imports torch).
"""

from __future__ import annotations

import contextvars
import functools
import re
from typing import Any, Callable

import tuner._deprecated as deprecation
from tuner.errors import TunerError, WorkloadError, one_line
from tuner.settings import OLD_SCALES, scale_word

SCALE_ARGS: dict[str, int] = {
    "build_model": 0, "sample_shape": 0, "units_per_sample": 0, "parameter_count": 0,
    "build_dataset": 1, "prepare_default_data": 1, "check_data": 1, "sample_path": 1,
}
"""Each scale-taking method of the workload contract -> the position of its ``scale`` among
its arguments after ``self`` (it may also be given by keyword, ``scale=``)."""

FULL = "full"
OLD_FULL = next(old for old, new in OLD_SCALES.items() if new == FULL)
"""'seed': tuner 0.2's word for the full-size scale."""

_STATE = "_tuner_calls"
"""The workload object's own attribute holding ``{"words": {method: word}, "warned": bool,
"spec": str}``: pickled with it to the trial processes, shared by its ``copy.copy``."""

_CALL = "_tuner_workload_call"
"""The attribute ``scale_taking`` sets on an exception a method raised: (label, method,
scale, the method's module)."""

_TRANSLATED: contextvars.ContextVar[bool] = contextvars.ContextVar("tuner_scale_translated",
                                                                  default=False)
"""True inside a method tuner called with 'seed' (the word the workload takes): the 'seed' its
code passes on to another of its methods is that word, not a caller's deprecated one."""

_MESSAGE_CHARS = 300
"""An exception's message is cut to this many characters in the one error line."""


def scale_taking(name: str, function: Callable) -> Callable:
    """``function``, the workload method ``name`` of ``SCALE_ARGS``, called through
    ``call_at_scale`` (the old scale word, the error's mark); a function already wrapped is
    returned as it is."""
    if getattr(function, "__tuner_scale_taking__", False):
        return function

    @functools.wraps(function)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return call_at_scale(self, name, function, args, kwargs)

    method.__tuner_scale_taking__ = True
    return method


def wrap_scale_methods(cls: type) -> None:
    """Put ``scale_taking`` around each method of ``SCALE_ARGS`` that ``cls`` itself defines."""
    for name in SCALE_ARGS:
        function = cls.__dict__.get(name)
        if callable(function):
            setattr(cls, name, scale_taking(name, function))


def call_at_scale(workload: Any, name: str, function: Callable, args: tuple,
                  kwargs: dict) -> Any:
    """``function(workload, *args, **kwargs)`` with the scale word the workload takes (module
    docstring). Raises what the method raises, marked for ``user_error``."""
    scale = _scale_in(args, kwargs, SCALE_ARGS[name])
    if isinstance(scale, str) and scale in OLD_SCALES and not _TRANSLATED.get():  # the caller's
        scale = scale_word(scale, stacklevel=4)  # own old word: reported at the caller's line
        args, kwargs = _with_scale(args, kwargs, name, scale)
    if scale != FULL:
        return _marked(workload, name, scale, function, args, kwargs)
    word = _state(workload)["words"].get(name, FULL)
    if word != FULL:
        return _marked(workload, name, word, function, *_with_scale(args, kwargs, name, word))
    try:
        return _marked(workload, name, FULL, function, args, kwargs)
    except (KeyError, ValueError) as exc:
        if not _names(exc, FULL):
            raise
        first = exc
    return _old_word(workload, name, function, args, kwargs, first)  # outside the handler


def _old_word(workload: Any, name: str, function: Callable, args: tuple, kwargs: dict,
              first: Exception) -> Any:
    """The method called with 'seed' after ``first`` (its error at 'full'). Raises ``first``
    unless the method takes 'seed'."""
    old_args, old_kwargs = _with_scale(args, kwargs, name, OLD_FULL)
    error: Exception | None = None
    token = _TRANSLATED.set(True)
    try:
        result = function(workload, *old_args, **old_kwargs)
    except TunerError as exc:  # past its scale: e.g. tuner 0.2's data check failing
        error = exc
    except Exception:  # noqa: BLE001  (the old word is no better: the first error stands)
        error = first
    finally:
        _TRANSLATED.reset(token)
    if error is first:
        raise first
    _takes_old_word(workload, name, function)
    if error is not None:
        raise error
    return result


def _takes_old_word(workload: Any, name: str, function: Callable) -> None:
    """Remember that method ``name`` takes 'seed'; the workload's first such method warns."""
    state = _state(workload)
    state["words"][name] = OLD_FULL
    if state["warned"]:
        return
    state["warned"] = True
    deprecation.warn_at(
        f"the scale word {OLD_FULL!r} in workload {label(workload)!r} ({name} takes "
        f"{OLD_FULL!r} and rejects {FULL!r})",
        f"make its methods take {FULL!r} (the same scale): until then tuner passes them "
        f"{OLD_FULL!r}", function)


def _marked(workload: Any, name: str, scale: Any, function: Callable, args: tuple,
            kwargs: dict) -> Any:
    """``function(workload, *args, **kwargs)``; an exception it raises (not a TunerError) is
    marked with the workload, the method and the scale, once (the innermost method wins).
    Called with 'seed', the methods it calls pass 'seed' on as tuner gave it."""
    token = _TRANSLATED.set(scale == OLD_FULL)
    try:
        return function(workload, *args, **kwargs)
    except TunerError:
        raise
    except Exception as exc:
        if getattr(exc, _CALL, None) is None:
            try:
                setattr(exc, _CALL, (label(workload), name, scale, function.__module__))
            except AttributeError:  # an exception type without attributes: no mark
                pass
        raise
    finally:
        _TRANSLATED.reset(token)


def user_error(exc: BaseException) -> WorkloadError | None:
    """``exc`` as the user's error in one line, when a workload's scale-taking method raised
    it: ``workload 'mymod:workload': build_model(scale='full') raised KeyError: 'full' at
    /path/mymod.py:12`` (the last line of the workload's own module in the traceback). None
    for any other exception (a bug of tuner's own keeps its traceback)."""
    call = getattr(exc, _CALL, None)
    if call is None or not isinstance(exc, Exception):
        return None
    workload, method, scale, module = call
    message = one_line(exc, _MESSAGE_CHARS)
    where = _where(exc, module)
    return WorkloadError(f"workload {workload!r}: {method}(scale={scale!r}) raised "
                         f"{type(exc).__name__}{f': {message}' if message else ''}"
                         f"{f' at {where}' if where else ''}")


def named_by(workload: Any, spec: str) -> Any:
    """``workload``, named by ``spec`` (what the user gave: 'mymod:workload', 'ddpm') in the
    error lines of ``user_error``; returns it."""
    _state(workload)["spec"] = spec
    return workload


def label(workload: Any) -> str:
    """How the error lines name ``workload``: as the user gave it (``named_by``), else by
    its ``name``."""
    return _state(workload).get("spec") or getattr(workload, "name", type(workload).__name__)


def meta_parameter_count(workload: Any, scale: str) -> int | None:
    """Parameters of ``workload.build_model(scale)`` built on torch's ``meta`` device (shapes
    without memory or initialisation: 0.03-0.06 s for a built-in's full-size model, where the
    CPU build takes 0.06-0.5 s and the model's memory; ``bench/parameter_count.py``). None
    when the model cannot be built there (a checkpoint read, a ``.item()``, a lazy module)."""
    import torch
    try:
        with torch.device("meta"):
            model = workload.build_model(scale)
        return sum(p.numel() for p in model.parameters())
    # Any error means "not countable there": the caller builds on the CPU or says nothing.
    except Exception:  # noqa: BLE001
        return None


def _state(workload: Any) -> dict:
    return vars(workload).setdefault(_STATE, {"words": {}, "warned": False})


def _scale_in(args: tuple, kwargs: dict, index: int) -> Any:
    if "scale" in kwargs:
        return kwargs["scale"]
    return args[index] if len(args) > index else None


def _with_scale(args: tuple, kwargs: dict, name: str, word: str) -> tuple[tuple, dict]:
    if "scale" in kwargs:
        return args, {**kwargs, "scale": word}
    index = SCALE_ARGS[name]
    return (*args[:index], word, *args[index + 1:]), kwargs


def _names(exc: BaseException, word: str) -> bool:
    """Whether ``exc``'s message names the scale ``word`` (KeyError('full'), 'unknown scale
    full')."""
    return re.search(rf"\b{re.escape(word)}\b", str(exc)) is not None


def _where(exc: BaseException, module: str) -> str | None:
    """``file:line`` of the last traceback frame in ``module`` (the workload's own code);
    None when the traceback has none."""
    where = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") == module:
            where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where
