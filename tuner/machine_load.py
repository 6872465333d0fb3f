"""Whether the machine was busy or drifting while a run measured, read from its rows' load
figures (``other_cpu_pct``, ``cpu_steal_pct``, ``gpu_other_processes``, ``other_runs``) and its
re-measured rounds (``tuner.noise.round_drift``): one line each for the closing summary.
Torch-free."""

from __future__ import annotations

import tuner.noise as noise

BUSY_STEAL_PCT = 5.0
"""CPU steal above this share of a trial's time means a busy host (a shared VM)."""

BUSY_OTHER_CPU_PCT = 15.0
"""Processes other than the trial's own using more than this share of the machine's CPU time
while it measured mean a busy machine (on 2 cores: 0.3 of a core; this run's Ray processes
and driver use a few %)."""


def _busy_cpu(r: dict) -> bool:
    """Other processes took the trial's CPUs: ``other_cpu_pct`` over ``BUSY_OTHER_CPU_PCT``; for
    rows without it (schema < 6), a 1-minute load average above the CPU count (which a trial's
    own DataLoader workers can reach by themselves)."""
    if r.get("other_cpu_pct") is not None:
        return r["other_cpu_pct"] > BUSY_OTHER_CPU_PCT
    return bool(r.get("cpu_count")) and r["load_avg_1m"] > r["cpu_count"]


def busy_note(rows: list[dict]) -> str | None:
    """One line when trials were measured on a busy machine, or None: other processes used
    the CPUs (``_busy_cpu``), CPU steal over ``BUSY_STEAL_PCT``, other processes on the GPU, or
    another tuner run active on the machine (``other_runs``)."""
    measured = [r for r in rows if r.get("load_avg_1m") is not None]
    busy = [r for r in measured if _busy_cpu(r)
            or (r.get("cpu_steal_pct") or 0) > BUSY_STEAL_PCT or (r.get("gpu_other_processes") or 0)
            or (r.get("other_runs") or 0)]
    if not busy:
        return None
    worst = max(busy, key=lambda r: r["load_avg_1m"])
    parts = [f"load average up to {worst['load_avg_1m']:.1f} on {worst.get('cpu_count')} CPUs"]
    other = max((r.get("other_cpu_pct") or 0) for r in busy)
    if other > BUSY_OTHER_CPU_PCT:
        parts.append(f"other processes used up to {other:.0f} % of its CPU time")
    steal = max((r.get("cpu_steal_pct") or 0) for r in busy)
    if steal > BUSY_STEAL_PCT:
        parts.append(f"CPU steal up to {steal:.0f} %")
    others = max((r.get("gpu_other_processes") or 0) for r in busy)
    if others:
        parts.append(f"{others} other process(es) on the GPU")
    runs = max((r.get("other_runs") or 0) for r in busy)
    if runs:
        parts.append(f"{runs} other tuner run(s) on this machine")
    return (f"the machine was busy during {len(busy)} of {len(measured)} measured trials "
            f"({'; '.join(parts)}): their figures, and speed-ups read from them, may be disturbed")


def drift_note(rows: list[dict]) -> str | None:
    """One line when the re-measured rounds spread more than ``noise.DRIFT_NOTE_CV``
    (``noise.round_drift``): the machine's own speed moved between them, which its load figures
    may not show (a shared VM's host), and the speed-ups' intervals are that wide; else None."""
    drift = noise.round_drift(rows)
    if drift is None or drift.between_cv <= noise.DRIFT_NOTE_CV:
        return None
    windows = ("" if drift.within_cv is None else
               f" while each trial's windows agreed within {100 * drift.within_cv:.0f} %")
    return (f"the machine's speed drifted between the re-measured rounds: the same "
            f"configuration moved {100 * drift.between_cv:.0f} % (CV, median of "
            f"{_configurations(drift.configurations)}) from round to round{windows}; "
            "the speed-ups' intervals widen with it and most differences read as ties; a "
            "quieter machine narrows them")


def _configurations(n: int) -> str:
    """'1 configuration', '3 configurations'."""
    return f"{n} configuration" + ("" if n == 1 else "s")
