"""The winner as one flat dict of derived keys, behind ``tuner.leaderboard``'s deprecated
names ``best_row``, ``best``, ``speedup_vs`` and ``ceiling_far_below`` (removed in the next
release; ``tuner.winner.best`` returns the typed ``Answer``)."""

from __future__ import annotations

import pyarrow as pa

import tuner.noise as noise
import tuner.winner as winner
from tuner.ceilings import verdict


def best_row(rows: list[dict]) -> dict | None:
    """``tuner.winner.best`` as the flat dict the old ``best_row`` returned: the winner's row
    with ``<ref>_samples_per_sec``, ``speedup_vs_<ref>`` (``_low``, ``_high``, ``_pairs``),
    ``tie_vs_<ref>``, ``<ref>_is_best``, ``tied_faster`` ((row, speed-up) or None),
    ``disturbed`` ([(trial id, reason)]), ``ceiling_samples_per_sec``,
    ``ceiling_measurements``, ``ceiling_disturbed``, ``pipeline_efficiency``,
    ``loader_ceiling_samples_per_sec``, ``loader_ceiling_disturbed`` and
    ``attainable_samples_per_sec`` / ``_bound_by`` / ``_share`` added."""
    answer = winner.best(rows)
    if answer is None:
        return None
    top = dict(answer.row)
    faster = answer.tied_faster
    top["tied_faster"] = (dict(faster.row), faster.speedup) if faster else None
    top["disturbed"] = [(d.trial_id, d.reason) for d in answer.disturbed]
    for ref in (answer.baseline, answer.recommended):
        sp, name = ref.speedup, ref.name
        top.update({f"{name}_samples_per_sec": ref.samples_per_sec,
                    f"speedup_vs_{name}": ref.ratio,
                    f"speedup_vs_{name}_low": sp.low if sp else None,
                    f"speedup_vs_{name}_high": sp.high if sp else None,
                    f"tie_vs_{name}": ref.tie, f"speedup_vs_{name}_pairs": sp.pairs if sp else None,
                    f"{name}_is_best": ref.is_best})
    c, a = answer.ceilings, answer.attainable
    top.update(ceiling_samples_per_sec=c.compute_samples_per_sec,
               ceiling_measurements=c.compute_measurements,
               ceiling_disturbed=c.compute_disturbed, pipeline_efficiency=c.pipeline_efficiency,
               loader_ceiling_samples_per_sec=c.loader_samples_per_sec,
               loader_ceiling_disturbed=c.loader_disturbed,
               attainable_samples_per_sec=a.samples_per_sec, attainable_bound_by=a.bound_by,
               attainable_share=a.share)
    return top


def best(table: pa.Table) -> dict | None:
    return best_row(table.to_pylist())


def speedup_vs(top: dict, ref: str) -> noise.Speedup | None:
    """The old ``speedup_vs``: the speed-up over ``ref`` rebuilt from an old ``best_row``."""
    ratio = top.get(f"speedup_vs_{ref}")
    if ratio is None or top.get(f"{ref}_is_best"):
        return None
    return noise.Speedup(ratio, top.get(f"speedup_vs_{ref}_low"),
                         top.get(f"speedup_vs_{ref}_high"),
                         top.get(f"speedup_vs_{ref}_pairs") or 1)


def ceiling_far_below(top: dict) -> bool:
    """The old ``ceiling_far_below`` of an old ``best_row``."""
    bound = top.get("ceiling_samples_per_sec")
    return (bool(top.get("ceiling_disturbed")) and bound is not None
            and verdict(bound, top["samples_per_sec"]).judgement == "not a bound")
