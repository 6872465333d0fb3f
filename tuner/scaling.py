"""What each extra rank buys: throughput, scaling efficiency and cost per world size, and the
rule of a run over several world sizes (``world_sizes``, ``size_runs``), which both
``python -m tuner run --world-size 1,2`` and ``tuner.tune(world_size=[1, 2])`` follow: each
world size a search of its own, one after another, the time budget shared equally.

Scaling efficiency of a world size N: its best global samples/sec over N times the best
single-rank samples/sec, both measured on the same node type (hardware key) at the same scale.
PyTorch's DDP benchmark reports 91-93 % per GPU from 1 to 8 V100s for ResNets; a figure far
below says the ranks wait on each other (all-reduce, a straggler's input pipeline).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, TypeVar

from tuner.errors import TunerError
from tuner.status import Phase, Status, phase_of

_Options = TypeVar("_Options")

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class WorldSize:
    """The best trial of one world size."""
    world_size: int
    trial_id: str
    run_id: str
    samples_per_sec: float
    """Global: summed over ranks."""
    rank_samples_per_sec: float
    """Per rank (global / world size)."""
    efficiency: float | None
    """``samples_per_sec`` / (world size x the best single-rank samples/sec), at most 1.0;
    None without a single-rank trial to compare with."""
    efficiency_measured_above_one: bool
    """The measured ratio was above 1 (noise between the two measurements: shown as 100 %)."""
    cost_per_million_samples: float | None
    """``gpu_hour_cost`` x world size / samples per hour x 10^6 (one GPU, or one CPU rank, per
    rank); None without a price."""


def world_sizes(value: int | str | Iterable[int]) -> tuple[int, ...]:
    """The world sizes to compare: a rank count (``2``), a comma-separated list (``'1,2,4'``,
    as ``--world-size`` gives it) or a sequence of counts (``[1, 2]``), each >= 1; each size
    once, in the order given.

    Raises:
        TunerError: anything else, naming the value."""
    if isinstance(value, str):
        parts, text = value.split(","), value
    elif isinstance(value, Iterable):
        parts = list(value)
        text = ",".join(str(part) for part in parts)
    else:
        parts, text = [value], str(value)
    try:
        sizes = tuple(dict.fromkeys(_rank_count(part) for part in parts))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise TunerError(f"--world-size {text}: accepted: a rank count >= 1, or a list such as "
                         "1,2,4")
    return sizes


def _rank_count(part: Any) -> int:
    """One world size of a list: an int (not a bool) or its digits. Raises ValueError."""
    if isinstance(part, bool) or not isinstance(part, (int, str)):
        raise ValueError(part)
    return int(part)


def size_runs(options: _Options, sizes: Sequence[int]) -> list[_Options]:
    """One run's options per world size of ``sizes``, in order: ``options`` (a
    ``tuner.settings.RunOptions``) with ``world_size`` set and ``time_budget_s`` (None: no
    budget) shared equally among them. Each is a search of its own, run one after another."""
    budget_s = getattr(options, "time_budget_s")
    share_s = None if budget_s is None else budget_s / len(sizes)
    return [dataclasses.replace(options, world_size=n, time_budget_s=share_s) for n in sizes]


def world_size_of(row: Mapping[str, Any]) -> int:
    """A row's world size (null in files written before the column: 1)."""
    return int(row.get("world_size") or 1)


def scaling(rows: Iterable[Mapping[str, Any]],
            gpu_hour_cost: float | None = None) -> tuple[WorldSize, ...]:
    """The best ok (non-ceiling) trial of each world size among ``rows`` (one workload, scale
    and hardware key: ``tuner.leaderboard.select``), smallest world size first, with its
    scaling efficiency and, given ``gpu_hour_cost``, its cost per million samples. Empty when
    no trial succeeded."""
    best: dict[int, Mapping[str, Any]] = {}
    for row in rows:
        if (row.get("status") != Status.OK or phase_of(row) == Phase.CEILING
                or row.get("samples_per_sec") is None):
            continue
        n = world_size_of(row)
        if n not in best or row["samples_per_sec"] > best[n]["samples_per_sec"]:
            best[n] = row
    single = best[1]["samples_per_sec"] if 1 in best else None
    out = []
    for n in sorted(best):
        row = best[n]
        rate = float(row["samples_per_sec"])
        ratio = None if not single else rate / (n * single)
        cost = (None if gpu_hour_cost is None or rate <= 0
                else gpu_hour_cost * n / (rate * SECONDS_PER_HOUR) * 1e6)
        out.append(WorldSize(n, row.get("trial_id") or "", row.get("run_id") or "", rate,
                             rate / n, None if ratio is None else min(ratio, 1.0),
                             ratio is not None and ratio > 1.0, cost))
    return tuple(out)


def row_efficiency(rows: list[Mapping[str, Any]]) -> list[float | None]:
    """Each row's scaling efficiency: its samples/sec ÷ (its world size x the best single-rank
    samples/sec among ``rows``, one workload, scale and node type), at most 1.0; None for a
    one-rank row, a row without a figure, or without a single-rank figure to compare with."""
    single = [s for s in scaling(rows) if s.world_size == 1]
    best = single[0].samples_per_sec if single else None
    out: list[float | None] = []
    for row in rows:
        n, rate = world_size_of(row), row.get("samples_per_sec")
        out.append(None if n == 1 or rate is None or not best else min(1.0, rate / (n * best)))
    return out


def cost_text(cost: float) -> str:
    """A cost to three significant figures (0.276, 27.6, 0.00412), whole units from 100 up
    (1,234): two decimals would print a cheap run's cost as 0.00."""
    return f"{cost:,.0f}" if float(f"{cost:.3g}") >= 100 else f"{cost:#.3g}"


def scaling_lines(sizes: tuple[WorldSize, ...]) -> list[str]:
    """One line per world size: 'world size 2: 19.5 samples/sec (9.7 per rank), scaling
    efficiency 90 %, 0.310 per million samples'. None when every trial had one rank."""
    if all(s.world_size == 1 for s in sizes):
        return []
    lines = []
    for s in sizes:
        text = (f"world size {s.world_size}: {s.samples_per_sec:,.1f} samples/sec "
                f"({s.rank_samples_per_sec:,.1f} per rank)")
        if s.world_size > 1 and s.efficiency is not None:
            text += f", scaling efficiency {100 * s.efficiency:.0f} %"
            if s.efficiency_measured_above_one:
                text += " (measured above: within the noise)"
        if s.cost_per_million_samples is not None:
            text += f", {cost_text(s.cost_per_million_samples)} per million samples"
        lines.append(text)
    if all(s.efficiency is None for s in sizes):
        lines.append("scaling efficiency needs a single-rank trial of the same workload on this "
                     "node type: --world-size 1,N")
    return lines


def scaling_table(sizes: tuple[WorldSize, ...]) -> tuple[list[str], list[list[str]]]:
    """(header, rows of text cells) of ``sizes`` for a report's table; no rows when every
    trial had one rank (``scaling_lines`` says the same in lines)."""
    if all(s.world_size == 1 for s in sizes):
        return [], []
    header = ["world size", "samples/sec", "per rank", "scaling efficiency",
              "cost per million samples", "trial"]
    rows = [[str(s.world_size), f"{s.samples_per_sec:,.1f}", f"{s.rank_samples_per_sec:,.1f}",
             "—" if s.efficiency is None else f"{100 * s.efficiency:.0f} %",
             "—" if s.cost_per_million_samples is None else cost_text(s.cost_per_million_samples),
             s.trial_id] for s in sizes]
    return header, rows
