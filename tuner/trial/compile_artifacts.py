"""A compiled trial's torch.compile artifacts, kept for the user's job.

After a compiled trial's warm-up, ``save`` writes what ``torch.compiler.save_cache_artifacts``
returns (Inductor's and AOTAutograd's cached graphs, Triton's kernels) to one file in the run's
compile cache, ``<results>/compile-cache/artifacts/<workload>-<key>.bin``, keyed by what the
trial compiled (``artifacts_path``: workload, scale, device type, world size, knobs as
applied). ``best --format python`` shows the file and the line that loads it
(``torch.compiler.load_cache_artifacts``) when the answer's file exists, so the user's first
compiled step reuses the tuner's compile instead of compiling again. It needs the same torch,
Triton and device.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from tuner.knobs import Knobs
    from tuner.settings import TrialSettings

ARTIFACTS_FOLDER = "artifacts"
"""The artifact files' folder inside the compile cache (``TrialSettings.compile_cache_dir``)."""

log = logging.getLogger(__name__)


def artifacts_path(cache_dir: str | Path, workload: str, scale: str | None, device: str,
                   world_size: int, knobs: Mapping[str, Any]) -> Path:
    """The artifact file of a compiled configuration in ``cache_dir``.

    Args:
        cache_dir: the run's compile cache (``tuner.settings.compile_cache_path(results)``).
        workload: the workload's leaderboard name (``Workload.name``, the row's ``workload``).
        scale: the trial's scale (the row's ``scale``).
        device: the device type, 'cuda' or 'cpu' (the row's ``device``).
        world_size: ranks of the trial (1 without data parallelism).
        knobs: ``Knobs.to_dict()`` of the knobs as the device applied them (``Knobs.clamp``).

    Returns:
        ``<cache_dir>/artifacts/<workload>-<16 hex digits>.bin``: the digits a SHA-256 of the
        arguments, so a trial and ``best`` reading its row name the same file.
    """
    what = {"workload": workload, "scale": scale, "device": device,
            "world_size": int(world_size or 1), "knobs": dict(knobs)}
    key = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in workload)
    return Path(cache_dir) / ARTIFACTS_FOLDER / f"{safe}-{key[:16]}.bin"


def compiled_before(workload: str, knobs: "Knobs", settings: "TrialSettings",
                    device: str) -> bool:
    """Whether an earlier trial saved the compile of ``knobs`` (as applied) to
    ``settings.compile_cache_dir`` (``save_trial``: after its warm-up), so that the cache holds
    its graphs and this trial compiles warm. False for knobs that do not compile or without a
    cache directory. ``workload``: ``Workload.name``; ``device``: the device type."""
    if knobs.compile == "off" or settings.compile_cache_dir is None:
        return False
    return artifacts_path(settings.compile_cache_dir, workload, settings.scale, device,
                          settings.world_size, knobs.to_dict()).exists()


def start_trial(knobs: "Knobs") -> None:
    """Before a compiled trial builds its model: forget the artifacts torch recorded for
    earlier trials of this process (a Ray worker runs several), so that ``save_trial`` writes
    this trial's alone. Nothing where this torch keeps no such record."""
    if knobs.compile == "off":
        return
    import torch

    manager = getattr(getattr(torch.compiler, "_cache", None), "CacheArtifactManager", None)
    if manager is not None:
        manager.clear()


def save_trial(workload: str, knobs: "Knobs", settings: "TrialSettings", device: str,
               rank: int = 0) -> str | None:
    """After a compiled trial's warm-up (outside its timed steps): rank 0 ``save``s what it
    compiled to its ``artifacts_path`` in ``settings.compile_cache_dir``. Nothing for knobs
    that do not compile, a loader-only trial (no model), no cache directory, or rank > 0.

    Args:
        workload: ``Workload.name``. knobs: as applied (clamped). device: the device type.
        rank: the trial's rank (0 without data parallelism).

    Returns:
        ``save``'s warning, or None.
    """
    if (knobs.compile == "off" or settings.loader_only or settings.compile_cache_dir is None
            or rank != 0):
        return None
    return save(artifacts_path(settings.compile_cache_dir, workload, settings.scale, device,
                               settings.world_size, knobs.to_dict()))


def save(path: Path) -> str | None:
    """Write ``torch.compiler.save_cache_artifacts()``'s bytes to ``path`` atomically (a
    temporary file in the same folder, then ``os.replace``): a reader sees the old file or the
    whole new one, never a part.

    Returns:
        None when the file was written, or when there was nothing to write (a torch without
        ``save_cache_artifacts``, or one returning None); otherwise the warning, also logged:
        a failed save never fails the trial, which measured without it.
    """
    import torch

    saver = getattr(torch.compiler, "save_cache_artifacts", None)
    if saver is None:
        return None
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        saved = saver()
        if saved is None:
            return None
        data = saved[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return None
    except Exception as exc:  # noqa: BLE001 - a warning, never a failed trial
        tmp.unlink(missing_ok=True)
        warning = f"compile artifacts not saved to {path}: {type(exc).__name__}: {exc}"
        log.warning(warning)
        return warning
