"""The closing summary of a run (rich): the table of the best with its references, ceilings
and this machine's limits, the lines under it and the commands to paste. The verdicts come
from the library (``tuner.winner``, ``tuner.ceilings``, ``tuner.machine_load``); this module
words them. Torch-free."""

from __future__ import annotations

from typing import Mapping

from rich.console import Console
from rich.table import Table

import tuner.noise as noise
import tuner.winner as winner
from tuner.ceilings import (
    MachineCompute,
    Verdict,
    attainable_text,
    lever_text,
    machine_limit_hidden,
    machine_summary,
    pipeline_summary,
)
from tuner.compile_finalists import budget_to_measure_s
from tuner.compile_payback import decide
from tuner.knobs import COMPUTE_SWITCHES, Knobs, knob_text
from tuner.machine_load import busy_note, drift_note
from tuner.price_errors import mispriced_lines
from tuner.status import STATUSES, Phase, Status, answers, phase_of


def print_summary(console: Console, plan, summary) -> None:
    """The closing summary of a run (``summary``: a ``tuner.driver.RunSummary``; ``plan``: its
    plan, for the commands to paste, or None): the trials by phase and status, the best of each
    hardware key with its table (``print_best``), the commands to paste, the machine notes
    (``tuner.machine_load``) and a line for each kind of trial the cost model mispriced
    (``tuner.price_errors.mispriced_lines``)."""
    rows = summary.rows
    ok = [r for r in rows if answers(r)]  # a budget-stopped measurement may answer
    counts = ", ".join(f"{n} {s}" for s in leaderboard_statuses(rows)
                       for n in [sum(r["status"] == s for r in rows)])
    phases = ", ".join(f"{n} {p.value}" for p in Phase
                       for n in [sum(phase_of(r) == p for r in rows)] if n)
    tally = f" ({phases}; {counts})" if rows else ""
    console.print(f"\n{len(rows)} trials in {summary.wall_s:.0f} s{tally}; "
                  f"leaderboard: {summary.results_dir}/leaderboard")
    keys = sorted({r["hardware_key"] for r in ok})
    for key in keys:
        print_best(console, [r for r in rows if r["hardware_key"] == key], summary, plan)
    if keys:
        console.print("ready to paste:")
    for key in keys:
        for line in paste_commands(plan, summary, key if len(keys) > 1 else None):
            console.print(f"  {line}", highlight=False, soft_wrap=True)
    for note in (busy_note(rows), drift_note(rows)):
        if note:
            console.print(f"[yellow]warning:[/] {note}", highlight=False)
    for line in mispriced_lines(rows):
        console.print(f"note: {line}", highlight=False, soft_wrap=True)

def print_best(console: Console, rows: list[dict], summary, plan=None) -> None:
    """The best of ``rows`` (one hardware key) as the summary table: the best, the references,
    the ceilings with their verdicts (``tuner.ceilings``), this machine's compute limit and the
    attainable rate, then the verdict lines and the compile decision (``compile_line``; ``plan``:
    the run's plan, or None); or why there is no result."""
    best = winner.best(rows)
    if best is None:
        disturbed = sorted({why for r in rows if r["status"] == Status.OK
                            and (why := noise.impossible(r))})
        if disturbed:
            console.print(f"[yellow]no result:[/] every measurement had a figure that "
                               f"cannot be true ({'; '.join(disturbed)}): the machine was "
                               "disturbed; run again on a quiet one", highlight=False)
        return
    row, ceilings = best.row, best.ceilings
    t = Table(title=f"{summary.workload} on {row['hardware_key']} ({summary.scale} scale)",
              title_justify="left")
    for col in ("configuration", "samples/sec", "best is", "knobs"):
        t.add_column(col, justify="right" if col in ("samples/sec", "best is") else "left")
    chosen = (f"re-measured, mean of {best.rounds} rounds" if best.rounds > 1 else
              "re-measured" if best.phase == Phase.REMEASURE else
              "screened only: a first reading, not re-measured" if _screened(row, rows)
              else "measured")
    t.add_row(f"[bold]best[/] ({chosen})", f"{best.samples_per_sec:,.1f}", "", knob_text(row))
    _reference_rows(t, best, rows)
    compute = ceilings.compute_verdict(best.samples_per_sec)
    if compute is not None:
        t.add_row("compute-only ceiling", f"{ceilings.compute_samples_per_sec:,.1f}",
                  *_compute_cells(best, compute))
    if ceilings.machine_compute is not None:
        t.add_row("machine's compute limit",
                  f"{ceilings.machine_compute.samples_per_sec:,.1f}",
                  *_machine_cells(ceilings.machine_compute, row))
    loader = ceilings.loader_verdict(best.samples_per_sec)
    if loader is not None:
        t.add_row("loader-only ceiling", f"{ceilings.loader_samples_per_sec:,.1f}",
                  *_loader_cells(loader, ceilings.data_path))
    _attainable_row(t, best.attainable)
    console.print(t)
    for line in filter(None, [winner.budget_stopped_text(best), drift_gap_line(best, compute, rows),
                              *verdict_lines(best), compile_line(best, plan, rows),
                              pipeline_summary(rows, ceilings.data_path)]):
        console.print(line, highlight=False)
    console.print(_compute_line(row), highlight=False)
    if row.get("time_to_train_s") is not None:
        console.print(f"predicted time for {row['train_steps']:,} steps: "
                           f"{row['time_to_train_s']:,.1f} s (setup, warm-up and compile included)")


def _screened(row: Mapping, rows: list[dict]) -> bool:
    """Whether the best ``row`` is a screening trial's (fewer windows planned than the
    references of its run): its rate is one short reading, no re-measurement confirmed it."""
    full = max((r.get("windows_planned") or 0 for r in rows if r.get("reference")), default=0)
    return phase_of(row) == Phase.SEARCH and 0 < (row.get("windows_planned") or full) < full


def _reference_rows(t: Table, best: winner.Answer, rows: list[dict]) -> None:
    """One table row per reference of the run: its rate and the best's speed-up over it ('the
    best itself' when the winner is that reference; 'tie' inside the noise), or how its trials
    failed ('retried' when it was measured twice)."""
    for ref in (best.baseline, best.recommended):
        matches = [r for r in rows if r["reference"] == ref.name]
        if not matches:
            continue
        shown = next((r for r in matches if r["status"] == Status.OK), matches[-1])
        sps = ref.samples_per_sec
        if ref.is_best:
            t.add_row(ref.name, f"{sps:,.1f}", "the best itself", knob_text(shown))
        elif sps:
            t.add_row(ref.name, f"{sps:,.1f}", ref.speedup.short(), knob_text(shown))
        else:
            tried = " (retried)" if sum(phase_of(r) == Phase.SEARCH for r in matches) > 1 else ""
            t.add_row(ref.name, f"{shown['status']}{tried}", "", knob_text(shown))


def verdict_lines(best: winner.Answer) -> list[str]:
    """The end-of-run lines under the table: each speed-up with its 95 % interval ('tie within
    the noise (speed-up X, 95 % CI [lo, hi])' where it contains 1, never 'X.XXx faster'), the
    faster configuration a tie set aside for a simpler one, the data path that lifted the input
    pipeline's limit (``tuner.ceilings.lever_text``), this machine's compute limit where it
    lies above the best and its same-knobs ceiling (``tuner.ceilings.machine_limit_hidden``,
    ``machine_summary``), and the
    measurements set aside as impossible (``best``: ``tuner.winner.best``'s answer)."""
    lines = []
    for ref in (best.baseline, best.recommended):
        sp = ref.speedup
        if sp is None:  # failed, not run, or the best itself
            continue
        paired = f"; {sp.pairs} interleaved rounds" if sp.pairs > 1 else ""
        lines.append(f"vs {ref.name}: {sp.text()}{paired}")
    if best.tied_faster:
        row, sp = best.tied_faster.row, best.tied_faster.speedup
        lines.append(f"fastest measured, {knob_text(row)} at {row['samples_per_sec']:,.1f} "
                     f"samples/sec, against the best shown: {sp.text()}; the simpler "
                     "configuration is chosen (no compile, then fewer workers, then closer to "
                     "the baseline)")
    lever = lever_text(best.attainable)
    if lever:
        lines.append(lever)
    if machine_limit_hidden(best):
        lines.append(machine_summary(best))
    if best.disturbed:
        shown = "; ".join(f"trial {d.trial_id}: {d.reason}" for d in best.disturbed[:3])
        more = f" and {len(best.disturbed) - 3} more" if len(best.disturbed) > 3 else ""
        lines.append(f"set aside as disturbed (figures that cannot be true, never a result): "
                     f"{shown}{more}")
    return lines




def compile_line(best: winner.Answer, plan, rows: list[dict]) -> str | None:
    """The compile decision's line (``tuner.compile_payback.CompileDecision.text``) where the
    winner was measured compiled beside itself; where the run's ``plan`` decided compile at
    the finalists (``Plan.compile_at_finalists``) and no compiled trial of the winner ran,
    why: the compiled one was of another configuration, or the time left held none (with the
    ``--time-budget`` that would, ``tuner.compile_finalists.budget_to_measure_s``). None
    where compile was not decided at the finalists."""
    if best.compile is not None:
        return best.compile.text()
    mode = getattr(plan, "compile_at_finalists", None)
    if not mode:
        return None
    remeasured = [r for r in rows if phase_of(r) == Phase.REMEASURE]
    if any((r.get("compile") or "off") != "off" and not r.get("reference") for r in remeasured):
        return (f"compile ({mode}): measured for the search's first-ranked configuration, "
                "which the re-measurement did not choose -> eager answer")
    # without any round, the rounds of the winner and the references are wanted too
    also = [] if remeasured else [best.knobs, *(Knobs.from_dict(r, strict=False)
                                                for r in rows if r.get("reference"))]
    need_s = budget_to_measure_s(plan, rows, best.knobs.replace(compile=mode), also)
    line = decide([], [], mode=mode, budget_needed_s=need_s).text()
    if (best.knobs.compile or "off") == "off":
        return line
    return line.replace("-> eager answer", "-> the answer compiles as measured, its pay-back "
                        "not weighed against its eager self")


def paste_commands(plan, summary, hardware_key: str | None = None) -> list[str]:
    """The commands that read a finished run, to paste as printed from the same directory:
    ``best`` (the winner as code; it reads the rows by the workload's leaderboard name),
    ``profile`` and ``validate`` (they import the workload: ``--workload`` is what the run was
    given, a built-in name, an import path or a file, with the workload's options such as
    ``--model``). ``--data`` is added when the run had it, ``--device``/``--scale`` for
    ``profile`` when the run named them, ``--hardware`` when given (a run over several
    accelerator types). Without a plan, or for a Workload object (the Python API), only
    ``best``."""
    from shlex import quote
    where = [f"--results {quote(str(summary.results_dir))}"]
    where += [f"--hardware {quote(hardware_key)}"] if hardware_key else []
    lines = [" ".join(["python -m tuner best", f"--workload {quote(summary.workload)}", *where,
                       "--format python"])]
    spec = getattr(getattr(plan, "options", None), "workload", None)
    if not isinstance(spec, str):
        return lines
    options = plan.options
    workload = [f"--workload {quote(spec)}"] + [
        f"--{name.replace('_', '-')} {quote(str(value))}"
        for name, value in (getattr(options, "workload_options", None) or {}).items()
        if value is not None]
    data = [f"--data {quote(str(plan.data_dir))}"] if options.data is not None else []
    measure = [f"--device {plan.device}"] if options.device != "auto" else []
    measure += [f"--scale {plan.scale}"] if options.scale else []
    return lines + [" ".join(["python -m tuner profile", *workload, *where, *measure, *data]),
                    " ".join(["python -m tuner validate", *workload, *where, *data])]


def leaderboard_statuses(rows: list[dict]) -> list[str]:
    """The final statuses that occur in ``rows``, in ``tuner.status.STATUSES`` order."""
    return [s for s in STATUSES if any(r["status"] == s for r in rows)]


def _compute_line(best: Mapping) -> str:
    """How far the winner (its row) is from the card's peak: FLOP per sample, achieved
    FLOP/s, MFU, each in the unit that shows it (``flop_text``); FLOPs that are unknown or
    counted as 0 say so, never '0.00 GFLOP/sample · 0.00 TFLOP/s · MFU 0.0%'."""
    flops = best.get("model_flops_per_sample")
    if not flops or flops <= 0:
        return ("compute: FLOPs per sample unknown (the model's could not be counted): no "
                "FLOP/s or MFU")
    text = f"compute: {flop_text(flops)}/sample (forward + backward)"
    achieved = best.get("achieved_tflops")
    if not achieved:
        return text
    text += f" · {flop_text(achieved * 1e12, 'TFLOP')}/s achieved"
    mfu = best.get("mfu_pct")
    if best.get("mfu_impossible"):
        return text + (f" · MFU {mfu:.0f}% is impossible: the measurement was "
                       "disturbed or the card's peak is wrong (--peak-tflops)")
    if mfu is None:
        return text + " · MFU: no peak known for this device (CPU, or --peak-tflops)"
    if mfu < 0.05:
        return text + " · MFU below 0.1% of the card's dense peak"
    return text + f" · MFU {mfu:.1f}% of the card's dense peak"


FLOP_UNITS = ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"), (1.0, "FLOP"))


def flop_text(flop: float, unit: str = "GFLOP") -> str:
    """``flop`` (> 0) with two decimals in ``unit`` (one of ``FLOP_UNITS``), or in the
    first smaller unit where that would read below 0.01: ``flop_text(1.53e10)`` is
    '15.30 GFLOP', ``flop_text(216)`` '0.22 kFLOP', never '0.00 GFLOP'."""
    names = [name for _, name in FLOP_UNITS]
    for size, name in FLOP_UNITS[names.index(unit):]:
        if flop / size >= 0.01 or name == "FLOP":
            return f"{flop / size:,.2f} {name}"
    raise AssertionError("unreachable: FLOP_UNITS ends at 1 FLOP")


def _attainable_row(t: Table, attainable: winner.Attainable) -> None:
    """The machine's attainable rate, the winner's share of it and which limit binds."""
    if attainable.samples_per_sec is None:
        return
    share = attainable.share
    t.add_row("attainable here", f"{attainable.samples_per_sec:,.1f}",
              f"{100 * share:.0f}% of it" if share is not None else "not a bound",
              attainable_text(attainable) if share is not None else
              "the best ran faster than this machine's measured limit: a disturbed measurement")


def _loader_detail(data_path: str) -> str:
    """The 'knobs' cell of the winner's loader-only ceiling on its ``data_path``."""
    if data_path == "loader":
        return "same knobs, its DataLoader alone, no model"
    return f"same knobs, its data path alone (data_path={data_path}), no model"


def drift_gap_line(best: winner.Answer, judged: Verdict | None, rows: list[dict]) -> str | None:
    """One line where the best's share of its compute-only ceiling (``judged``: its verdict,
    None without one) lies within the drift of the run's re-measured rounds
    (``tuner.noise.share_in_drift``): the ceiling is one trial and the best the mean of its
    rounds, so such a gap is no measured headroom; else None."""
    if judged is None or judged.judgement != "bound" or round(100 * judged.share) >= 100:
        return None
    cv = noise.share_in_drift(judged.share, best.rounds, rows)
    if cv is None or round(100 * cv) < 1:  # rounds within 0.5 %: no drift worth a line
        return None
    n = best.ceilings.compute_measurements
    trials = "one trial" if n <= 1 else f"the highest of {n} trials"
    return (f"compute-only ceiling: the best's {100 * judged.share:.0f}% of it lies within the "
            f"rounds' drift ({100 * cv:.0f} % between rounds; the ceiling is {trials}): the gap "
            "may be the machine's, not headroom")


def _compute_cells(best: winner.Answer, judged: Verdict) -> tuple[str, str]:
    """The 'best is' and 'knobs' cells of the winner's compute-only ceiling by its verdict
    (``tuner.ceilings.verdict``): its share where it bounds the best, 'at it' within the noise
    below (bound by compute), else 'disturbed'. Never an efficiency over 100 %."""
    if judged.judgement == "bound":
        return f"{100 * judged.share:.0f}% of it", "same knobs, batches on the device"
    if judged.judgement == "at it":
        return "at it", (f"same knobs, batches on the device: {100 * judged.below:.0f} % below "
                         "the pipeline, within the noise: it runs at its compute-only rate, "
                         "bound by compute")
    how = ("twice" if best.ceilings.compute_measurements >= 2 else
           "once (the time budget left none to measure it again)")
    return "disturbed", (f"measured below the pipeline it bounds, {how}: no efficiency shown "
                         "(the machine was busy; run again on a quiet one)")


def _loader_cells(judged: Verdict, data_path: str) -> tuple[str, str]:
    """The 'best is' and 'knobs' cells of the winner's loader-only ceiling by its verdict: the
    winner trains no faster than its input pipeline delivers alone, so below it within the
    noise it runs at its loader's rate ('at it'), further below it is a disturbed
    measurement, never a bound."""
    if judged.judgement == "bound":
        return "", _loader_detail(data_path)
    if judged.judgement == "at it":
        return "at it", (f"same knobs, its DataLoader alone: {100 * judged.below:.0f} % below "
                         "the pipeline, within the noise: it runs at its loader's rate, bound "
                         "by the input pipeline")
    return "disturbed", ("measured below the pipeline it bounds: not a bound (the machine was "
                         "busy; run again on a quiet one)")


def _machine_cells(limit: MachineCompute, best: Mapping) -> tuple[str, str]:
    """The 'best is' and 'knobs' cells of this machine's compute limit (the fastest
    compute-only rate measured: its largest batch in the fastest precision, or a
    configuration's own) against the winner's row ``best``: the best's share of it and how
    many times the best's rate it is; where the best ran faster, within the noise 'at it',
    further 'not a bound', and why: the compute switches the best ran with that the limit
    did not (``without_best_switches``), else a disturbed measurement or a smaller batch."""
    knobs = f"{limit.knobs_text}, {limit.data_path}"
    judged = limit.verdict
    if judged.judgement == "bound":
        which = ("largest batch, fastest precision" if limit.kind == "machine-compute" else
                 "the fastest compute-only rate measured")
        return f"{100 * judged.share:.0f}% of it", (
            f"{knobs} ({which}): {judged.headroom:.2f}x the best")
    if judged.judgement == "at it":
        return "at it", (f"{knobs}: {100 * judged.below:.0f} % below the best, within the "
                         "noise: the best computes at this machine's limit")
    missing = without_best_switches(limit, best)
    if missing:
        return "not a bound", (f"{knobs}: measured without the best's {', '.join(missing)}, "
                               "which the best ran faster with: no limit for its knobs")
    return "not a bound", (f"{knobs}: the best ran faster, so this is no limit (a disturbed "
                           "measurement, or a smaller batch computes faster here)")


def without_best_switches(limit: MachineCompute, best: Mapping) -> list[str]:
    """The compute switches (``tuner.knobs.COMPUTE_SWITCHES``: channels_last, tf32, ...) on in
    the winner's row ``best`` and off in the limit's measurement, and 'amp=<the best's>' where
    the precisions differ: a limit measured otherwise than the best computes is not the
    best's."""
    missing = [name for name in COMPUTE_SWITCHES
               if best.get(name) is True and name not in limit.switches]
    if (best.get("amp") or "off") != limit.amp:
        missing.append(f"amp={best.get('amp') or 'off'}")
    return missing
