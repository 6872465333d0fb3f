"""The answer of a run: the winning configuration, its speed-ups over the references, the
ties within the noise, its ceilings and the machine's attainable rate (read by
``tuner.ceilings``).

``best(rows)`` reads leaderboard rows (``tuner.leaderboard.read``, as dicts or a table) and
returns a frozen ``Answer``: typed fields read by attribute, and ``Answer.to_dict()``, the
stable document ``python -m tuner best --format json|yaml`` prints. The rows stay the
leaderboard's (``tuner.leaderboard.SCHEMA``); this module only reads them.

Compile at the finalists: a compiled configuration re-measured beside the same knobs eager
(``tuner.compile_finalists``) does not compete by the tie rule; where the eager one wins,
``tuner.compile_payback.decide`` weighs the pair, and the answer is the compiled one exactly
when it says 'compiled' (``Answer.compile``).

Torch-free: the CLI, the report and the progress printer use it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import tuner.noise as noise
from tuner._deprecated import moved
from tuner.ceilings import Attainable, Ceilings, lever_text  # public here: tuner.winner.Ceilings
from tuner.ceilings import ceilings as _ceilings
from tuner.compile_payback import CompileDecision, decide
from tuner.knobs import Knobs
from tuner.status import Phase, answers, budget_stopped, phase_of

if TYPE_CHECKING:
    import pyarrow as pa

REFERENCES = ("baseline", "recommended")
"""The reference configurations a run measures beside its search (``reference`` column)."""

RATE_COLUMNS = ("tokens_per_sec", "achieved_tflops", "mfu_pct")
"""Columns proportional to samples/sec in one row (the same work per sample)."""

@dataclass(frozen=True)
class Reference:
    """The winner against one reference configuration of its run."""

    name: str
    """'baseline' or 'recommended'."""
    samples_per_sec: float | None
    """The reference's geometric mean over its measurements in the compared phase, samples/sec
    (the winner's own where ``is_best``); None where it failed, did not run or has no
    measurement paired with the winner's."""
    is_best: bool
    """The winner is this reference."""
    speedup: noise.Speedup | None
    """The winner's samples/sec over the reference's from paired rounds, with its 95 %
    interval; None where ``samples_per_sec`` is None or the winner is the reference."""

    @property
    def ratio(self) -> float | None:
        """The speed-up's point estimate; 1.0 when the winner is the reference."""
        return 1.0 if self.is_best else self.speedup.ratio if self.speedup else None

    @property
    def tie(self) -> bool | None:
        """The interval contains 1 (``noise.Speedup.tie``); None without a speed-up."""
        return self.speedup.tie if self.speedup else None


@dataclass(frozen=True)
class TiedFaster:
    """The fastest configuration, set aside by the tie rule for a simpler winner."""

    row: Mapping[str, Any]
    """Its leaderboard row, figures as the geometric mean of its measurements."""
    speedup: noise.Speedup
    """Its samples/sec (or objective) over the winner's, with its 95 % interval (a tie)."""


@dataclass(frozen=True)
class Disturbed:
    """A row of the winner's run set aside: a figure that cannot be true
    (``tuner.noise.impossible``)."""

    trial_id: str
    reason: str
    """The figure that cannot be true, e.g. 'MFU 180 % is above 100 % of the card's peak'."""


@dataclass(frozen=True)
class Answer:
    """The winning configuration of the most recent run, with everything measured beside it.

    Read by attribute; ``to_dict`` is its serialised form."""

    row: Mapping[str, Any]
    """The winner's leaderboard row (``tuner.leaderboard.SCHEMA`` columns, read-only), with
    ``samples_per_sec``, the objective and ``RATE_COLUMNS`` the geometric mean over its
    measurements and ``rounds`` their count; the other columns are those of the measurement
    closest to that mean."""
    baseline: Reference
    """The winner against its run's 'baseline' reference (the user's starting point,
    ``Workload.references``)."""
    recommended: Reference
    """The winner against its run's 'recommended' reference (what the guide says to do), where
    the workload has one."""
    tied_faster: TiedFaster | None
    """Set when the tie rule chose a simpler winner than the fastest."""
    disturbed: tuple[Disturbed, ...]
    """The rows of the winner's run set aside as impossible."""
    ceilings: Ceilings
    """What bounds the winner's own configuration."""
    attainable: Attainable
    """The machine's attainable rate and which limit binds."""
    compile: CompileDecision | None = None
    """Whether ``torch.compile`` pays for the winner's configuration, where its run measured it
    compiled beside it in the re-measurement (``tuner.compile_payback``); None where not. The
    winner is the compiled configuration exactly when ``compile.outcome`` is 'compiled'."""

    @property
    def samples_per_sec(self) -> float:
        """Geometric mean over the winner's measurements, samples/sec."""
        return self.row["samples_per_sec"]

    @property
    def rounds(self) -> int:
        """How many measurements of the winner the figures are the mean of."""
        return self.row["rounds"]

    @property
    def budget_stopped(self) -> bool:
        """The winner's figures come from a trial the time budget stopped after
        ``row['windows']`` of its ``row['windows_planned']`` windows
        (``tuner.status.budget_stopped``)."""
        return budget_stopped(self.row)

    @property
    def ceiling_far_below(self) -> bool:
        """The compute-only ceiling lies more than ``tuner.ceilings.CEILING_NOISE`` below the
        winner ('not a bound', ``tuner.ceilings.verdict``): a disturbed measurement, which a
        run measures again."""
        judged = self.ceilings.compute_verdict(self.samples_per_sec)
        return judged is not None and judged.judgement == "not a bound"

    @property
    def knobs(self) -> Knobs:
        """The winner's knob values."""
        return Knobs.from_dict(self.row, strict=False)

    @property
    def phase(self) -> Phase:
        """``Phase.REMEASURE`` when the winner was chosen among re-measurements, else
        ``Phase.SEARCH``."""
        return phase_of(self.row)

    def reference(self, name: str) -> Reference:
        """``baseline`` or ``recommended`` by name.

        Raises:
            ValueError: ``name`` is neither."""
        if name not in REFERENCES:
            raise ValueError(f"reference {name!r}: accepted: {', '.join(REFERENCES)}")
        return getattr(self, name)

    def to_dict(self) -> dict[str, Any]:
        """The whole answer as plain JSON/YAML values, keys in this order:

        * ``workload``, ``hardware_key``, ``device``, ``scale``, ``run_id``, ``trial_id``;
          ``knobs`` (name -> value); ``samples_per_sec``, ``tokens_per_sec``;
        * per reference ``<ref>`` (``baseline``, ``recommended``): ``<ref>_samples_per_sec``,
          ``speedup_vs_<ref>`` (``Reference.ratio``), then ``speedup_ci_vs_<ref>`` ([low, high]
          or null), ``tie_vs_<ref>``, ``<ref>_is_best``;
        * ``rounds``; ``chosen_over_faster`` (null, or the tied faster configuration:
          ``trial_id``, ``knobs``, ``samples_per_sec``, ``speedup`` over the winner,
          ``speedup_ci``); ``model_flops_per_sample``, ``achieved_tflops``, ``mfu_pct``,
          ``compile_s``, ``peak_device_memory_mb``, ``peak_host_memory_mb``, ``clamped``;
        * ``phase``, ``objective``, ``time_to_train_s``, ``train_steps``;
          ``speedup_pairs_vs_<ref>`` (paired rounds of each speed-up, or null);
        * ``ceilings``: the ``Ceilings`` fields; ``attainable``: the ``Attainable`` fields
          (``input_by_path`` and ``input_core_s_per_sample`` objects keyed by data path) and
          ``lever`` (``tuner.ceilings.lever_text``: which data path lifted the input limit, or
          null); ``disturbed``: a list of {``trial_id``, ``reason``}.

        Every field of the answer is in it; the row's other columns are the leaderboard's.
        """
        row = self.row
        doc: dict[str, Any] = {
            name: row.get(name) for name in ("workload", "hardware_key", "device", "scale",
                                             "run_id", "trial_id")}
        doc.update(knobs=self.knobs.to_dict(), samples_per_sec=self.samples_per_sec,
                   tokens_per_sec=row.get("tokens_per_sec"))
        for ref in (self.baseline, self.recommended):
            doc[f"{ref.name}_samples_per_sec"] = ref.samples_per_sec
            doc[f"speedup_vs_{ref.name}"] = ref.ratio
        for ref in (self.baseline, self.recommended):
            sp = ref.speedup
            doc[f"speedup_ci_vs_{ref.name}"] = ([sp.low, sp.high] if sp and sp.low is not None
                                                else None)
            doc[f"tie_vs_{ref.name}"] = ref.tie
            doc[f"{ref.name}_is_best"] = ref.is_best
        doc["rounds"] = self.rounds
        doc["chosen_over_faster"] = _faster_doc(self.tied_faster)
        for name in ("model_flops_per_sample", "achieved_tflops", "mfu_pct", "compile_s",
                     "peak_device_memory_mb", "peak_host_memory_mb", "clamped"):
            doc[name] = row.get(name)
        doc.update(phase=self.phase.value, objective=row.get("objective") or "samples_per_sec",
                   time_to_train_s=row.get("time_to_train_s"), train_steps=row.get("train_steps"))
        for ref in (self.baseline, self.recommended):
            doc[f"speedup_pairs_vs_{ref.name}"] = ref.speedup.pairs if ref.speedup else None
        doc["ceilings"] = dataclasses.asdict(self.ceilings)
        doc["attainable"] = {**dataclasses.asdict(self.attainable),
                             "lever": lever_text(self.attainable)}
        doc["disturbed"] = [dataclasses.asdict(d) for d in self.disturbed]
        doc["compile"] = self.compile.to_dict() if self.compile else None
        return doc


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def budget_stopped_text(answer: Answer) -> str | None:
    """One line saying the answer is a measurement the time budget cut short, e.g. 'best:
    2,210.4 samples/sec (baseline; 4 of 5 windows, the time budget stopped the 5th)'; None
    when the answer measured all its windows."""
    if not answer.budget_stopped:
        return None
    row = answer.row
    done, planned = row.get("windows") or 0, row.get("windows_planned")
    what = row.get("reference") or "searched"
    if planned is None:  # written before windows_planned: how many were planned is unknown
        windows = f"{done} window{'s' if done != 1 else ''}, the time budget stopped the next"
    else:
        windows = f"{done} of {planned} windows, the time budget stopped the {_ordinal(done + 1)}"
    return f"best: {answer.samples_per_sec:,.1f} samples/sec ({what}; {windows})"


def _faster_doc(faster: TiedFaster | None) -> dict[str, Any] | None:
    if faster is None:
        return None
    row, sp = faster.row, faster.speedup
    return {"trial_id": row["trial_id"], "knobs": Knobs.from_dict(row, strict=False).to_dict(),
            "samples_per_sec": row["samples_per_sec"], "speedup": sp.ratio,
            "speedup_ci": [sp.low, sp.high]}


def best(rows: Iterable[Mapping[str, Any]] | pa.Table) -> Answer | None:
    """The winning configuration, with the references measured in the same run beside it.

    ``rows``: leaderboard rows as mappings, or a ``pyarrow.Table`` of them.

    The objective is that of the most recent run (``samples_per_sec``: highest wins;
    ``time_to_train_s``: lowest wins), and only rows of its scale, hardware and accelerator
    type (and, for a time to train, its ``train_steps``) compete (``_comparable``): a
    tiny-scale row is not a seed-scale answer (``tuner.leaderboard.select(scale=...)`` reads
    another scale's). Where a run re-measured its best configurations in interleaved rounds
    (phase ``remeasure``), the winner of that run is chosen among the re-measurements, each
    configuration by the geometric mean of its rounds, so a single lucky window cannot win;
    a round of two windows whose windows spread far beyond the machine's window noise keeps
    its faster one (``tuner.noise.undisturbed``: the slower is the host's).
    Compute-only ``ceiling`` rows never win, nor does a row with a figure that cannot be true
    (``tuner.noise.impossible``: a disturbed measurement). A row the time budget stopped after
    a complete window (``tuner.status.budget_stopped``) competes as a measurement over fewer
    windows (``Answer.budget_stopped`` says when it wins).

    The tie rule: where the fastest configuration's lead over another of its run and phase is
    within the noise (the 95 % interval of the paired speed-up contains 1,
    ``tuner.noise.speedup``), the simpler of them wins (``tuner.noise.simplicity``: no
    ``torch.compile``, then fewer DataLoader workers, then fewer knobs differing from the
    baseline's values) -- which may be a reference itself -- unless it is clearly slower than
    another configuration tied with the fastest (an interval above 1 over it).

    A reference is compared in the winner's phase where it was measured there, else in the
    search.

    Returns:
        The ``Answer``, or None when no trial measured a window.
    """
    rows = [dict(r) for r in (rows.to_pylist() if hasattr(rows, "to_pylist") else rows)]
    measured = [r for r in rows if answers(r) and phase_of(r) != Phase.CEILING
                and r["samples_per_sec"] is not None]
    if not measured:
        return None
    latest = max(measured, key=lambda r: (r["finished_at"] is not None, r["finished_at"]))
    metric = latest.get("objective") or "samples_per_sec"
    # A re-measured round's disturbed window is the host's (tuner.noise.undisturbed).
    rows = noise.undisturbed(_comparable(rows, latest, metric), RATE_COLUMNS)
    groups = _groups(rows)
    twins = _compiled_twins(groups)  # compile decided at the finalists, not by the tie rule
    chosen = _winner({k: g for k, g in groups.items() if k not in twins}, metric,
                     higher=metric != "time_to_train_s")
    if chosen is None:
        return None
    key, top, tied_faster, compiled = _compile_decision(chosen, groups, twins, metric)
    same_run = [r for r in rows if r["run_id"] == top["run_id"]]
    disturbed = tuple(Disturbed(r["trial_id"], why) for r in same_run
                      if answers(r) and (why := noise.impossible(r)))
    ceilings, attainable = _ceilings(top, same_run)
    return Answer(row=MappingProxyType(top),
                  baseline=_vs_reference(key, top, groups, "baseline"),
                  recommended=_vs_reference(key, top, groups, "recommended"),
                  tied_faster=(TiedFaster(MappingProxyType(tied_faster[0]), tied_faster[1])
                               if tied_faster else None),
                  disturbed=disturbed, ceilings=ceilings, attainable=attainable,
                  compile=compiled)


_COMPILE_AT = Knobs.names().index("compile")


def _compiled_twins(groups: dict[tuple, list[dict]]) -> dict[tuple, tuple]:
    """Compiled group key -> the key of the same knobs eager, for each compiled configuration
    re-measured beside its eager self in one run (``tuner.compile_finalists``)."""
    out = {}
    for run, phase, values in groups:
        if phase != Phase.REMEASURE or values[_COMPILE_AT] in (None, "off"):
            continue
        eager = (run, phase, (*values[:_COMPILE_AT], "off", *values[_COMPILE_AT + 1:]))
        if eager in groups:
            out[(run, phase, values)] = eager
    return out


def _compile_decision(chosen: tuple[tuple, dict, tuple | None],
                      groups: dict[tuple, list[dict]], twins: dict[tuple, tuple], metric: str
                      ) -> tuple[tuple, dict, tuple | None, CompileDecision | None]:
    """(key, mean row, tied faster, compile decision) of the answer: the eager winner
    ``chosen`` (``_winner``'s) with no decision where its run re-measured no configuration
    beside its compiled self (``twins``); with one where it was, and its compiled twin
    instead (no tied faster) exactly when the decision is 'compiled'; where another
    configuration of its run was, that pair's figures, outcome 'eager'. With a time-to-train
    objective the row's ``train_steps`` judge the pay-back."""
    key, top, tied_faster = chosen
    twin = next((c for c, e in twins.items() if e == key), None)
    other = next((c for c, e in twins.items() if c[0] == key[0]), None)
    if twin is None and other is None:
        return key, top, tied_faster, None
    steps = top.get("train_steps") if metric == "time_to_train_s" else None
    measured = twin or other
    decision = decide(pairs(groups[measured], groups[twins[measured]]), groups[measured],
                      mode=measured[2][_COMPILE_AT], train_steps=steps)
    if twin is None:  # the first-ranked's pair, of another configuration than the answer
        return key, top, tied_faster, dataclasses.replace(
            decision, outcome="eager", reason="measured for another configuration")
    mean = _mean_row(groups[twin], metric)
    if decision.outcome == "compiled" and mean is not None:  # a valid pair: a mean row
        return twin, mean, None, decision
    return key, top, tied_faster, decision


def _comparable(rows: list[dict], latest: dict, metric: str) -> list[dict]:
    """The rows comparable with the most recent run's (``latest``, one of its rows): the same
    scale (another model size trains at another rate), the same hardware and accelerator type
    (a run over several types measures each configuration on each) and, for a time to train
    (``metric``), the same ``train_steps``."""
    same = ("scale", "hardware_key", "accelerator_type") + (
        ("train_steps",) if metric == "time_to_train_s" else ())
    return [r for r in rows if all(r.get(c) == latest.get(c) for c in same)]


_EARLIEST = dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def _ran_at(row: dict) -> tuple:
    """Sort key: when a row's trial started (rows without a start last), then its trial id."""
    return (row["started_at"] is None, row["started_at"] or _EARLIEST, row["trial_id"] or "")


def _valid(row: dict, metric: str) -> bool:
    """A measurement that may win or serve as a reference: ok or stopped by the time budget
    after a complete window (``tuner.status.answers``), not a ceiling, a value of ``metric``
    and no impossible figure."""
    return (answers(row) and phase_of(row) != Phase.CEILING
            and row["samples_per_sec"] is not None and row.get(metric) is not None
            and noise.impossible(row) is None)


def _groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Each configuration's rows per (run id, phase, knob values), in the order they ran,
    failed ones included: in a re-measurement, the n-th row of each configuration is its
    n-th round, so rows of two configurations pair by position."""
    out: dict[tuple, list[dict]] = {}
    for r in sorted((r for r in rows if phase_of(r) != Phase.CEILING), key=_ran_at):
        key = (r["run_id"], phase_of(r), tuple(r.get(name) for name in Knobs.names()))
        out.setdefault(key, []).append(r)
    return out


def _mean_row(group: list[dict], metric: str) -> dict | None:
    """The group's valid measurement closest to their geometric mean, with ``samples_per_sec``
    and ``metric`` set to the geometric means, ``RATE_COLUMNS`` scaled to that samples/sec (a
    printed MFU or TFLOP/s belongs to the printed samples/sec, not to one round's), and
    ``rounds`` to their count; None if none."""
    valid = [r for r in group if _valid(r, metric)]
    if not valid:
        return None
    means = {m: (math.exp(sum(math.log(r[m]) for r in valid) / len(valid)) if len(valid) > 1
                 else valid[0][m]) for m in {"samples_per_sec", metric}}
    closest = min(valid, key=lambda r: abs(math.log(r[metric] / means[metric])))
    scale = means["samples_per_sec"] / closest["samples_per_sec"]
    rates = {c: closest[c] * scale for c in RATE_COLUMNS if closest.get(c) is not None}
    return {**closest, **means, **rates, "rounds": len(valid)}


def pairs(a: list[Mapping], b: list[Mapping],
          metric: str = "samples_per_sec") -> list[tuple[Mapping, Mapping]]:
    """Paired measurements of two configurations' rows (each in the order they ran): round by
    round where both were re-measured, else the last valid measurement of each (one pair)."""
    if phase_of(a[0]) == phase_of(b[0]) == Phase.REMEASURE:
        return [(x, y) for x, y in zip(a, b) if _valid(x, metric) and _valid(y, metric)]
    va, vb = [r for r in a if _valid(r, metric)], [r for r in b if _valid(r, metric)]
    return [(va[-1], vb[-1])] if va and vb else []


def _winner(groups: dict[tuple, list[dict]], metric: str,
            higher: bool) -> tuple[tuple, dict, tuple | None] | None:
    """(group key, mean row, (fastest's mean row, its speed-up over the winner) or None) of
    the winner (see ``best``: candidates, the tie rule), or None without a valid measurement."""
    means = {k: m for k, g in groups.items() if (m := _mean_row(g, metric)) is not None}
    remeasured = {k[0] for k in means if k[1] == Phase.REMEASURE}
    candidates = {k: m for k, m in means.items() if k[0] not in remeasured
                  or k[1] == Phase.REMEASURE}
    if not candidates:
        return None
    sign = 1 if higher else -1
    fastest = max(candidates, key=lambda k: sign * candidates[k][metric])
    baseline = next((r for k, g in groups.items() if k[0] == fastest[0] for r in g
                     if r.get("reference") == "baseline"), None)
    tied = {}
    for k in candidates:
        if k[:2] == fastest[:2] and k != fastest:
            sp = noise.speedup(pairs(groups[fastest], groups[k], metric), metric, higher)
            if sp is not None and sp.tie:
                tied[k] = sp
    pool = [fastest, *tied]
    # Each tied configuration is within the noise of the fastest, not necessarily of the
    # others: one measured clearly slower than another of them (the baseline, say) is no answer.
    eligible = [k for k in pool if k == fastest or not any(
        (sp := noise.speedup(pairs(groups[j], groups[k], metric), metric, higher)) is not None
        and not sp.tie and sp.ratio > 1 for j in pool if j != k)]
    chosen = min(eligible, key=lambda k: (noise.simplicity(candidates[k], baseline),
                                          -sign * candidates[k][metric]))
    faster = (candidates[fastest], tied[chosen]) if chosen != fastest else None
    return chosen, candidates[chosen], faster


def _vs_reference(key: tuple, top: dict, groups: dict[tuple, list[dict]],
                  ref: str) -> Reference:
    """The winner (its group ``key``, its mean row ``top``) against reference ``ref``: the
    reference's group in the winner's phase, else in the search."""
    run, phase, knobs = key
    sps = "samples_per_sec"
    keys = sorted((k for k, g in groups.items() if k[0] == run
                   and any(r.get("reference") == ref for r in g)
                   and any(_valid(r, sps) for r in g)), key=lambda k: k[1] != phase)
    if not keys:
        return Reference(ref, None, False, None)
    if keys[0][2] == knobs:
        return Reference(ref, top[sps], True, None)
    sp = noise.speedup(pairs(groups[key], groups[keys[0]], sps))
    if sp is None:
        return Reference(ref, None, False, None)
    return Reference(ref, _mean_row(groups[keys[0]], sps)[sps], False, sp)


__getattr__ = moved(__name__, {"CEILING_NOISE": "tuner.ceilings"})
"""Old import path of the ceiling noise threshold, which lives with the ceilings."""
