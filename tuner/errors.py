"""Every exception and warning class tuner raises, and ``one_line``, the one formatter of an
error message shown or stored in one line.

* User errors (``TunerError`` and its subclasses): bad input, missing data, a failed write, a
  workload method that raised outside a trial. The CLI prints their message in one line and
  exits 2, without a traceback.
* A run stopped by the user: ``RunInterrupted`` (the CLI exits 130).
* A trial's own outcomes, raised and caught inside the trial or the memory probe:
  ``TrialFailure``, ``DeadlineReached``, ``LimitExceeded``, ``ProbeOutOfTime``; each becomes a
  leaderboard status, never an exit.
* Warnings: ``DamagedLeaderboardWarning``, ``ConcurrentRunWarning`` (the CLI prints each in
  one line); ``TunerDeprecationWarning`` for a deprecated name or value.

The modules that raise them re-export them under their earlier names
(``tuner.driver.RunInterrupted``, ``tuner.trial.harness.TrialFailure``, ...): the same objects.
Torch-free and Ray-free, like the rest of the base floor.
"""

from __future__ import annotations

import re
from typing import Any

# ------------------------------------------------------------------------------ user errors


class TunerError(Exception):
    """A user error: bad input, missing data, unreachable cluster. The message names the bad
    value and what is accepted; no traceback is shown for it."""


class DataError(TunerError):
    """The data directory or one of its files cannot be used (missing, empty, fails to decode).
    The message names the path."""


class SpaceError(TunerError):
    """A search-space YAML file is malformed or describes an impossible range."""


class WorkloadError(TunerError):
    """A workload's own scale-taking method raised outside a trial (planning, the data check,
    the parameter count): the message names the workload as the user gave it, the method, the
    scale, the error and the workload's line (``tuner.workload_calls.user_error``). Inside a
    trial the method's own exception stays the trial's error, traceback kept."""


class RecordFailed(TunerError):
    """A write the run needs failed (a full disk, a lost mount): the run stops at once. The
    message names what failed and why, what the leaderboard kept, and the ``--resume`` command.

    Args:
        what: what could not be written, e.g. 'to results/leaderboard'.
        error: the OSError the write raised.
        plan: the run's ``tuner.plan.Plan`` (its ``run_id`` and ``options.results`` are read).
        recorded: trials of the run in the leaderboard.
        lost: the trial whose row is lost, if any.
    """

    def __init__(self, what: str, error: OSError, plan: Any, recorded: int,
                 lost: str | None = None):
        cause = error.strerror or str(error) or type(error).__name__
        lost_text = f"; the row of trial {lost} is lost" if lost else ""
        super().__init__(
            f"cannot write {what} ({cause}): the run stopped; {recorded} trials of run "
            f"{plan.run_id} are in {plan.options.results}/leaderboard{lost_text}; make room, "
            f"then continue with the same command and --resume {plan.run_id}")
        self.run_id = plan.run_id
        self.recorded = recorded


# --------------------------------------------------------------------------------- the run


class RunInterrupted(Exception):
    """The run was interrupted (Ctrl-C); its finished trials are in the leaderboard."""

    def __init__(self, run_id: str, recorded: int):
        super().__init__(f"run {run_id} interrupted with {recorded} trials recorded")
        self.run_id = run_id
        self.recorded = recorded


# ------------------------------------------------------------------------------- a trial


class TrialFailure(Exception):
    """A trial cannot run as configured (e.g. batch larger than the dataset)."""


class DeadlineReached(Exception):
    """The run's time budget ran out during the trial (``TrialSettings.deadline_unix_s``)."""


class LimitExceeded(Exception):
    """A trial went over its memory limit (status ``over_limit``); ``memory`` says which:
    'device' (allocator + CUDA context) or 'host' (process + DataLoader workers)."""

    def __init__(self, message: str, memory: str):
        super().__init__(message)
        self.memory = memory


class ProbeOutOfTime(Exception):
    """A memory-probe trial stopped at the run's deadline (status ``timeout``); raised and
    caught inside ``tuner.probe``."""


# -------------------------------------------------------------------------------- warnings


class DamagedLeaderboardWarning(UserWarning):
    """``tuner.leaderboard.read`` skipped files in the leaderboard directory that are not
    readable Parquet parts; the message names them and says how to move them aside."""


class ConcurrentRunWarning(UserWarning):
    """Another tuner run is active on this machine: both runs' measurements are disturbed."""


class RayNodeWarning(UserWarning):
    """Ray reported a node's failure (a raylet that died, a node marked dead); the message
    names the file that keeps Ray's full text (``tuner.ray_runtime.ray_messages_to``)."""


class TunerDeprecationWarning(DeprecationWarning):
    """A deprecated tuner name or value was used; the message names the version it was
    deprecated in, the version that removes it and what to use instead (``tuner._deprecated``).
    A subclass, so that a test suite or an application can make tuner's own deprecations
    errors and leave those of other packages alone
    (``-W error::tuner.errors.TunerDeprecationWarning``)."""


# ---------------------------------------------------------------------------- one line

_CAUGHT_IN_WORKER = re.compile(r"Caught (\w+) (in DataLoader worker process \d+)")
_TRACEBACK_LINE = ("Traceback (most recent call last)", 'File "')


def one_line(text: Any, max_chars: int | None = None) -> str:
    """``text`` (a message or an exception) as one line, for the console and the leaderboard's
    ``error`` column.

    * An exception raised in a DataLoader worker, which torch raises again in the main process
      with the worker's traceback as its message ("Caught DataError in DataLoader worker
      process 0. Original Traceback ... tuner.errors.DataError: image x.png cannot be
      decoded"): what came before it, its final cause without the exception's module path, and
      the worker ("image x.png cannot be decoded (in DataLoader worker process 0)"); when
      several lines came before it (Ray's traceback of the trial), only the first, joined by
      " -> ".
    * A traceback (Ray's text of a failed trial): its first line and its final cause, joined
      by " -> ".
    * Anything else: its lines joined by single spaces.

    Runs of whitespace become one space. With ``max_chars``, a longer line is cut to that many
    characters, the last one "…".
    """
    message = str(text)
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    caught = _CAUGHT_IN_WORKER.search(message)
    if caught and len(lines) > 1 and "Original Traceback" in message:
        before = [line.strip() for line in message[:caught.start()].splitlines() if line.strip()]
        cause = re.sub(rf"^([\w.]+\.)?{caught.group(1)}: ", "", lines[-1])
        head = f"{before[0]} -> " if len(before) > 1 else "".join(f"{b} " for b in before)
        line = f"{head}{cause} ({caught.group(2)})"
    elif len(lines) > 1 and any(line.startswith(_TRACEBACK_LINE) for line in lines):
        line = f"{lines[0]} -> {lines[-1]}"
    else:
        line = " ".join(lines)
    line = " ".join(line.split())
    if max_chars is not None and len(line) > max_chars:
        line = line[:max_chars - 1] + "…"
    return line
