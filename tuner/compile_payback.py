"""Whether ``torch.compile`` pays for the first-ranked configuration: its eager and compiled
rates paired round by round in the re-measurement (``tuner.compile_finalists``), the ratio's
95 % interval (``tuner.noise.speedup``), the compile's seconds (cold, and warm from the run's
compile cache) and the pay-back: the optimizer steps, and the minutes of training, after which
the compiled job has made up its compile (compile seconds / the per-step saving).

``decide(pairs, compiled_rows, ...)`` is a pure function of leaderboard rows; ``tuner.winner``
calls it for the winner and gives the compiled configuration as the answer exactly when the
outcome is 'compiled'.

Torch-free (results floor).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import tuner.noise as noise
from tuner.status import Status, answers

PAYBACK_HORIZON_S = 3600.0
"""Without ``--train-steps``, compile is the answer only when it pays back within this many
seconds of training. Reason: a job worth tuning for the default CUDA time budget (600 s) runs
for an hour or more; a compile that needs longer than that to pay back helps only jobs the
tool was not told about (``--train-steps N`` then decides from the job's own length)."""

OUTCOMES = ("compiled", "eager", "not measured")
"""The decision's outcomes."""


@dataclass(frozen=True)
class CompileDecision:
    """The compile decision for one configuration (its eager and compiled rows of one run's
    re-measurement). Rates in samples/sec, times in seconds unless named otherwise."""

    outcome: str
    """One of ``OUTCOMES``."""
    reason: str
    """Why, one phrase: 'pays back within the horizon', 'no gain', 'pay-back beyond the
    horizon', 'pays back within --train-steps', 'pay-back beyond --train-steps', 'measured
    for another configuration' (the figures are of the search's first-ranked, which the
    re-measurement did not choose: ``tuner.winner``), or for 'not measured' what happened to
    the compiled trials."""
    mode: str | None
    """The ``torch.compile`` mode measured."""
    batch_size: int | None
    eager_samples_per_sec: float | None
    compiled_samples_per_sec: float | None
    speedup: noise.Speedup | None
    """Compiled over eager, paired by round, with its 95 % interval."""
    compile_s_cold: float | None
    """The first compiled trial's compile (its first step beyond a steady one)."""
    compile_s_warm: float | None
    """The shortest compile of a later compiled trial of the run (the cache warm); None with
    one compiled trial."""
    saving_s_per_step: float | None
    """Seconds each optimizer step saves compiled (eager step - compiled step)."""
    payback_steps: int | None
    """Optimizer steps after which the cold compile is paid back; None without a saving."""
    payback_min: float | None
    """Minutes of training (at the eager rate) after which it is paid back."""
    horizon_s: float | None
    """The horizon the pay-back was judged against (``PAYBACK_HORIZON_S``); None when
    ``train_steps`` judged it."""
    train_steps: int | None
    """``--train-steps``, which judged the pay-back instead of the horizon."""
    recompiles: int
    """Dynamo's recompilations over the compiled trials."""
    fallbacks: int
    """Compiled trials that hit dynamo's recompile limit and ran eagerly (error rows)."""
    budget_needed_s: float | None = None
    """For 'not measured' for lack of time: the ``--time-budget`` that holds the compiled
    finalist (``tuner.compile_finalists.budget_to_measure_s``); None otherwise."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values; the speed-up as ``speedup`` (ratio), ``speedup_ci`` ([low, high]
        or null) and ``speedup_pairs``."""
        doc = asdict(self)
        sp = doc.pop("speedup")
        doc["speedup"] = sp["ratio"] if sp else None
        doc["speedup_ci"] = [sp["low"], sp["high"]] if sp and sp["low"] is not None else None
        doc["speedup_pairs"] = sp["pairs"] if sp else 0
        return doc

    def text(self) -> str:
        """The summary's line, e.g. 'compile (default): 1.18x [1.09, 1.27] at bs=64; first step
        34 s cold / 6 s warm; pays back after 1,200 steps (3.1 min) -> compiled answer'. Never
        a gain inside the noise: a tie reads 'no gain'."""
        head = f"compile ({self.mode})" if self.mode else "compile"
        if self.outcome == "not measured":
            need = (f"; --time-budget {self.budget_needed_s:,.0f} would measure it"
                    if self.budget_needed_s else "")
            return f"{head}: not measured: {self.reason}{need}{self._recompiled()} -> eager answer"
        sp = self.speedup
        ci = f" [{sp.low:.2f}, {sp.high:.2f}]" if sp and sp.low is not None else " (no interval)"
        parts = [f"{head}: {sp.ratio:.2f}x{ci} at bs={self.batch_size}" if sp else head]
        if self.compile_s_cold is not None:
            warm = (f" / {self.compile_s_warm:,.0f} s warm" if self.compile_s_warm is not None
                    else "")
            parts.append(f"first step {self.compile_s_cold:,.0f} s cold{warm}")
        if self.reason == "no gain":
            parts.append("no gain inside the noise")
        elif self.reason == "measured for another configuration":
            parts.append(f"measured for bs={self.batch_size}, the search's first-ranked, "
                         "not the answer's configuration")
        elif self.payback_steps is not None:
            judge = (f"--train-steps {self.train_steps:,}" if self.train_steps else
                     f"the {self.horizon_s / 60:.0f}-min horizon")
            parts.append(f"pays back after {self.payback_steps:,} steps "
                         f"({self.payback_min:,.1f} min of training; {judge})")
        answer = "compiled answer" if self.outcome == "compiled" else "eager answer"
        return "; ".join(parts) + self._recompiled() + f" -> {answer}"

    def _recompiled(self) -> str:
        out = ""
        if self.recompiles:
            out += f"; recompiled {self.recompiles} time{'s' * (self.recompiles != 1)}"
        if self.fallbacks:
            out += (f"; {self.fallbacks} compiled trial{'s' * (self.fallbacks != 1)} hit "
                    "dynamo's recompile limit and ran eagerly (not counted as compiled)")
        return out


def samples_per_step(row: Mapping[str, Any]) -> int:
    """Samples of one optimizer step: batch x grad_accum x world size."""
    return ((row.get("batch_size") or 1) * (row.get("grad_accum") or 1)
            * (row.get("world_size") or 1))


def compile_seconds(row: Mapping[str, Any]) -> float | None:
    """A compiled row's compile: ``compile_s``, else its first step beyond a steady one; None
    without either."""
    if row.get("compile_s") is not None:
        return row["compile_s"]
    first, step_ms = row.get("first_step_s"), row.get("step_time_ms_p50")
    if first is None or step_ms is None:
        return None
    return max(0.0, first - step_ms / 1000)


def _valid(row: Mapping[str, Any]) -> bool:
    return (answers(row) and row.get("samples_per_sec") is not None
            and noise.impossible(row) is None)


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def decide(pairs: Sequence[tuple[Mapping, Mapping]], compiled_rows: Sequence[Mapping], *,
           mode: str | None, train_steps: int | None = None,
           horizon_s: float = PAYBACK_HORIZON_S,
           budget_needed_s: float | None = None) -> CompileDecision:
    """The decision for one configuration.

    Args:
        pairs: (compiled row, eager row) of the same knobs, measured side by side (round r of
            each; ``tuner.winner.pairs``), valid measurements only.
        compiled_rows: every row of the compiled configuration in the run's re-measurement,
            in the order they ran, failed ones included (for the compile seconds, the
            recompiles and the fallbacks).
        mode: the ``torch.compile`` mode.
        train_steps: ``--train-steps`` N: compiled exactly when it pays back within N
            optimizer steps (the time to train N steps is then shorter); None: the horizon.
        horizon_s: seconds of training the pay-back must lie within (``PAYBACK_HORIZON_S``).
        budget_needed_s: for a compiled configuration that was never measured, the time
            budget that would measure it.

    Returns:
        'compiled' where the ratio's 95 % interval lies above 1 and the pay-back is within
        the horizon (or ``train_steps``); 'eager' where it does not ('no gain': the interval
        reaches 1 or below, or there is no interval); 'not measured' without a valid compiled
        measurement paired with an eager one.
    """
    rows = list(compiled_rows)
    recompiles = sum(r.get("recompiles") or 0 for r in rows)
    fallbacks = sum(bool(r.get("compile_fallback")) for r in rows)
    compiles = [s for r in rows if (s := compile_seconds(r)) is not None and _ran(r)]
    cold = compiles[0] if compiles else None
    warm = min(compiles[1:]) if len(compiles) > 1 else None
    batch = rows[0].get("batch_size") if rows else None
    base = dict(mode=mode, batch_size=batch, compile_s_cold=cold, compile_s_warm=warm,
                train_steps=train_steps, recompiles=recompiles, fallbacks=fallbacks,
                horizon_s=None if train_steps else horizon_s)
    if not pairs:
        return CompileDecision("not measured", _not_measured_reason(rows),
                               eager_samples_per_sec=None, compiled_samples_per_sec=None,
                               speedup=None, saving_s_per_step=None, payback_steps=None,
                               payback_min=None,
                               budget_needed_s=budget_needed_s, **base)
    eager = _geomean([e["samples_per_sec"] for _, e in pairs])
    compiled = _geomean([c["samples_per_sec"] for c, _ in pairs])
    sp = noise.speedup(pairs)
    n = samples_per_step(pairs[0][1])
    saving = n / eager - n / compiled
    steps = math.ceil((cold or 0.0) / saving) if saving > 0 else None
    minutes = steps * n / eager / 60 if steps is not None else None
    gain = sp is not None and sp.low is not None and sp.low > 1.0
    outcome, reason = _judge(gain, steps, minutes, train_steps, horizon_s)
    return CompileDecision(outcome, reason, eager_samples_per_sec=eager,
                           compiled_samples_per_sec=compiled, speedup=sp,
                           saving_s_per_step=saving, payback_steps=steps, payback_min=minutes,
                           **base)


def _judge(gain: bool, steps: int | None, minutes: float | None, train_steps: int | None,
           horizon_s: float) -> tuple[str, str]:
    """(outcome, reason) of a measured compile: 'eager' without a gain outside the noise;
    else 'compiled' where the pay-back (``steps``, ``minutes``) lies within ``train_steps``
    (when given) or ``horizon_s``."""
    if not gain or steps is None or minutes is None:
        return "eager", "no gain"
    if train_steps:
        ok = steps <= train_steps
        return (("compiled", "pays back within --train-steps") if ok else
                ("eager", "pay-back beyond --train-steps"))
    ok = minutes * 60 <= horizon_s
    return (("compiled", "pays back within the horizon") if ok else
            ("eager", "pay-back beyond the horizon"))


def _ran(row: Mapping[str, Any]) -> bool:
    """A compiled trial that got through its first step (its compile is in its row)."""
    return row.get("first_step_s") is not None or row.get("compile_s") is not None


def _not_measured_reason(rows: Sequence[Mapping[str, Any]]) -> str:
    """Why a compiled configuration has no valid measurement, from its rows."""
    if not rows:
        return "the time left held no compiled finalist"
    if any(r.get("compile_fallback") for r in rows):
        return "its trials fell back to eager (dynamo's recompile limit)"
    statuses = sorted({r["status"] for r in rows})
    if statuses == [Status.TIMEOUT]:
        return "the time budget stopped its trials before a window"
    return f"its trials ended {'/'.join(statuses)}"
