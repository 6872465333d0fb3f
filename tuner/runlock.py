"""Runs on one machine know of each other: a run that starts its own local Ray believes it owns
every core and GPU, so two at once slow and disturb each other's measurements.

Each local run (no ``--address``: on a cluster Ray shares the nodes between drivers) registers
in ``REGISTRY``, one JSON file per run (its PID, run id and results location), under an
exclusive ``flock`` held for the run's life. The kernel drops the lock when the process ends,
however it ends (``kill -9`` included), so a file nobody holds is a dead run's: ignored and
removed. A second run into the same results directory is refused; a run beside another one
on the machine is warned in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from tuner.errors import ConcurrentRunWarning, TunerError

REGISTRY = Path(tempfile.gettempdir()) / "tuner-runs"
"""Where the runs of this machine register (shared by its users: sticky, world-writable)."""


@dataclass(frozen=True)
class ActiveRun:
    """A run registered and alive on this machine."""

    pid: int
    run_id: str
    results: str
    """Its results location as ``results_key`` gives it."""


def results_key(results: str | os.PathLike) -> str:
    """A results location compared across runs: a directory's resolved absolute path, a URI
    as given."""
    text = str(results)
    return text if "://" in text else str(Path(text).resolve())


def active_runs(registry: Path = REGISTRY) -> list[ActiveRun]:
    """The runs registered in ``registry`` whose process still holds its lock (files of dead
    runs are removed on the way; unreadable ones skipped)."""
    found = []
    for path in sorted(registry.glob("*.json")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held: the run is alive
                with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                    found.append(ActiveRun(**json.loads(Path(path).read_text())))
                continue
            with contextlib.suppress(OSError):
                path.unlink()  # nobody holds it: the run died without cleaning up
        finally:
            os.close(fd)
    return found


def _open_registry(registry: Path) -> int:
    """The registry's own lock file, opened (the directory created world-writable)."""
    if not registry.is_dir():
        registry.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            registry.chmod(0o1777)
    return os.open(registry / ".lock", os.O_RDWR | os.O_CREAT, 0o666)


def _check(me: ActiveRun, others: list[ActiveRun]) -> None:
    """Refuse a run into a results directory another live run writes; warn of the others."""
    for other in others:
        if other.results == me.results:
            raise TunerError(
                f"--results {me.results}: run {other.run_id} (PID {other.pid}) is tuning into "
                "it on this machine now; two runs at once share its CPUs and GPUs and disturb "
                "each other's measurements: wait for it to finish, or stop it")
    for other in others:
        warnings.warn(
            f"run {other.run_id} (PID {other.pid}, results {other.results}) is also tuning on "
            "this machine: both runs share its CPUs and GPUs, so the measurements of both are "
            "slowed and noisy (`leaderboard` shows load_avg_1m per trial)",
            ConcurrentRunWarning, stacklevel=4)


@contextlib.contextmanager
def registered(run_id: str, results: str | os.PathLike, *, local: bool,
               registry: Path = REGISTRY) -> Iterator[None]:
    """Register this run for the block (nothing when ``local`` is False: trials on a cluster).

    Raises:
        TunerError: another live run on this machine writes into the same ``results``.
    Warns:
        ConcurrentRunWarning: one line per other live run on this machine.
    A registry that cannot be written (a read-only temporary directory) registers nothing:
    the run goes on without the check."""
    if not local:
        yield
        return
    me = ActiveRun(os.getpid(), run_id, results_key(results))
    try:
        guard = _open_registry(registry)
    except OSError:
        yield
        return
    mine = None
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)  # check and register as one step
        _check(me, [r for r in active_runs(registry) if r.pid != me.pid])
        with contextlib.suppress(OSError):
            mine = _register(me, registry)
    finally:
        os.close(guard)  # releases the registry lock; this run's own lock stays
    try:
        yield
    finally:
        if mine is not None:
            path, fd = mine
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)


def _register(me: ActiveRun, registry: Path) -> tuple[Path, int]:
    """Write this run's file locked: written under a temporary name, then renamed, so no
    reader sees it unlocked. Returns its path and the descriptor that holds the lock."""
    fd, tmp = tempfile.mkstemp(dir=registry, prefix=".new-", suffix=".json")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps(asdict(me)).encode())
        os.fchmod(fd, 0o644)
        path = registry / f"{me.pid}-{me.run_id}.json"
        os.replace(tmp, path)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path, fd
