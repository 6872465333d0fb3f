"""Every exception and warning class lives in ``tuner.errors`` (read with ``ast``), the modules
that raise them still export them under their earlier names, and ``one_line`` formats an error
in one line."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import tuner.errors as errors
from tuner.errors import one_line

TUNER = Path(errors.__file__).resolve().parent

_EXCEPTION_BASES = {"Exception", "BaseException", "Warning", "UserWarning", "RuntimeError",
                    "ValueError", "TypeError", "OSError", "DeprecationWarning"}


def _exception_classes(path: Path, known: set[str]) -> list[str]:
    """Classes in ``path`` that derive from a built-in exception, from one of ``known`` or
    from another such class of the same file."""
    classes = [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ClassDef)]
    bases = {node.name: {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases} for node in classes}
    found: list[str] = []
    while grown := [name for name in bases if name not in found
                    and bases[name] & (_EXCEPTION_BASES | known | set(found))]:
        found += grown
    return sorted(found)


def test_every_exception_class_is_defined_in_errors():
    known = set(_exception_classes(TUNER / "errors.py", set()))
    assert {"TunerError", "DataError", "SpaceError", "RecordFailed", "RunInterrupted",
            "TrialFailure", "DeadlineReached", "LimitExceeded", "ProbeOutOfTime",
            "DamagedLeaderboardWarning", "ConcurrentRunWarning"} <= known
    elsewhere = {str(path.relative_to(TUNER.parent)): classes
                 for path in sorted(TUNER.rglob("*.py")) if path.name != "errors.py"
                 if (classes := _exception_classes(path, known))}
    assert elsewhere == {}, f"define these in tuner/errors.py: {elsewhere}"


def test_the_scan_finds_an_exception_class(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("class A(Exception): pass\nclass B(TunerError): pass\nclass C: pass\n"
                      "class D(A): pass\nclass E(errors.DataError): pass\n")
    assert _exception_classes(module, {"TunerError", "DataError"}) == ["A", "B", "D", "E"]


@pytest.mark.parametrize("module, name", [
    ("tuner.driver", "RunInterrupted"),
    ("tuner.trial.harness", "TrialFailure"),
    ("tuner.trial.harness", "DeadlineReached"),
    ("tuner.trial.measure", "LimitExceeded"),
    ("tuner.recorder", "RecordFailed"),
    ("tuner.leaderboard", "DamagedLeaderboardWarning"),
    ("tuner.runlock", "ConcurrentRunWarning"),
])
def test_a_class_is_still_importable_from_its_earlier_module(module, name):
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_record_failed_names_the_run_and_the_resume_command():
    class Options:
        results = "res"

    class Plan:
        run_id = "r1"
        options = Options()

    exc = errors.RecordFailed("to res/leaderboard", OSError(28, "No space left on device"),
                              Plan(), recorded=3, lost="t7")
    assert isinstance(exc, errors.TunerError) and (exc.run_id, exc.recorded) == ("r1", 3)
    assert str(exc) == ("cannot write to res/leaderboard (No space left on device): the run "
                        "stopped; 3 trials of run r1 are in res/leaderboard; the row of trial t7 "
                        "is lost; make room, then continue with the same command and --resume r1")


WORKER = ("Caught DataError in DataLoader worker process 2.\n"
          "Original Traceback (most recent call last):\n"
          '  File "/x/worker.py", line 308, in _worker_loop\n'
          "    data = fetcher.fetch(index)\n"
          "tuner.errors.DataError: image /d/a.png cannot be decoded\n")


@pytest.mark.parametrize("text, expected", [
    ("plain message", "plain message"),
    ("  two\n\n   lines  with   gaps ", "two lines with gaps"),
    (WORKER, "image /d/a.png cannot be decoded (in DataLoader worker process 2)"),
    ("data /d: " + WORKER, "data /d: image /d/a.png cannot be decoded (in DataLoader worker "
                           "process 2)"),
    ("ray::ImplicitFunc.train() (pid=7)\n  File \"/r/f.py\", line 1, in train\n" + WORKER,
     "ray::ImplicitFunc.train() (pid=7) -> image /d/a.png cannot be decoded (in DataLoader "
     "worker process 2)"),
    ("Traceback (most recent call last):\n  File \"m.py\", line 3, in <module>\n    1/0\n"
     "ZeroDivisionError: division by zero",
     "Traceback (most recent call last): -> ZeroDivisionError: division by zero"),
    (ValueError("bad\nvalue"), "bad value"),
    ("", ""),
])
def test_one_line(text, expected):
    assert one_line(text) == expected


def test_one_line_cuts_to_max_chars_with_an_ellipsis():
    assert one_line("abcdef", max_chars=6) == "abcdef"
    assert one_line("abcdefg", max_chars=6) == "abcde…"
    assert len(one_line("x " * 500, max_chars=300)) == 300
