"""Live progress of a run and its closing summary (rich)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

import tuner.noise as noise
import tuner.winner as winner
from tuner.ceilings import (MachineCompute, Verdict, attainable_text, lever_text,
                            machine_limit_hidden, machine_summary)
from tuner.knobs import knob_text
from tuner.status import STATUSES, Phase, Status, phase_of

_SAMPLER_NAMES = {"gp": "Gaussian-process Bayesian optimisation", "tpe": "TPE",
                  "random": "random search"}


def _count(n: int, noun: str) -> str:
    """'1 warm-up step', '3 windows': a count with its noun in the right number."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _duration(seconds: float) -> str:
    """'20 s', '3 min 30 s', '30 min', '1 h 30 min': exact to the second under 10 minutes (a
    budget of 210 s is not '4 min')."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _clock_after(seconds: float) -> str:
    """The local time ``seconds`` (plus ``BUDGET_GRACE_S``) from now, HH:MM:SS."""
    import datetime as dt
    from tuner.budget import BUDGET_GRACE_S
    return (dt.datetime.now() + dt.timedelta(seconds=seconds + BUDGET_GRACE_S)).strftime("%H:%M:%S")


_STATUS_STYLE = {Status.OK: "green", Status.OOM: "yellow", Status.OVER_LIMIT: "yellow",
                 Status.PRUNED: "cyan", Status.TIMEOUT: "magenta", Status.NODE_LOST: "red",
                 Status.ERROR: "red"}


_CEILINGS = {
    "compute": "measuring the winner's compute-only ceiling (batches on the device)",
    "loader": "measuring the winner's loader-only ceiling (its input pipeline, no model)",
    "machine-loader": "measuring this machine's input limit (loader only, every CPU a worker)",
    "machine-compute": "measuring this machine's compute limit (largest batch, fastest precision)",
    "path-loader": "measuring the best configuration's loader-only rate",
    "core-compute": "measuring the winner's compute on one core",
    "core-loader": "measuring the input pipeline on one core (no workers)",
}


def _ceiling_text(name: str) -> str:
    """What measuring ceiling ``name`` ('machine-loader (data_path=cache)') does, in words."""
    kind, _, path = name.partition(" ")
    return _CEILINGS[kind] + (f" {path}" if path else "")


class Progress:
    """Prints the plan, one line per finished trial, and a bar for the trial budget."""

    def __init__(self, console: Console):
        self.console = console
        self.bar = RichProgress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                transient=True)
        self.task = None
        self.best_sps = 0.0
        self.baseline_sps: float | None = None
        self.plan = None
        """The run's plan (the 'start' event): the ready-to-paste commands are made from it."""
        self.counter = _Counter("search", 0, None)
        """The trial counter of the phase in progress: '[search 3/6]', '[remeasure 2/9]'."""

    def on_event(self, kind: str, data: dict) -> None:
        if kind == "start":
            self._start(data["plan"], data["concurrency"])
        elif kind == "trial":
            self._trial(data["row"], data["index"], data["total"])
        elif kind == "complete":
            self.console.print(f"run {data['run_id']} is already complete; nothing to resume")
        elif kind == "probe":
            r = data["result"]
            steps = ", ".join(f"{bs}:{status}" for bs, status, _ in r.probes)
            bound = (f"batch_size <= {r.max_batch}" + (
                " (the time budget ran out: the largest measured by then)" if r.timed_out
                else f" ({r.first_failure} did not fit)" if r.first_failure else " (all fit)"))
            took = "" if r.duration_s is None else f" · {r.duration_s:.1f} s"
            self.console.print(f"  memory probe: {bound} · probes {steps}{took}")
        elif kind == "phase":
            self.console.print(f"  [bold]{_phase_text(data)}[/]", highlight=False)
            self.counter = self.counter.after(data)
            if self.task is not None:  # the bar counts the phase's trials, as the lines do
                self.bar.reset(self.task, total=self.counter.total, completed=self.counter.done,
                               description=self.counter.label)

    def _start(self, plan, concurrency: int) -> None:
        w = plan.workload
        why = "" if plan.options.device != "auto" else (
            " (auto: CUDA found)" if plan.device == "cuda" else " (auto: no CUDA device found)")
        scale_note = "" if plan.options.scale else (
            " (default on CPU; --scale seed for the report's sizes)" if plan.device == "cpu"
            else " (default on CUDA)")
        c = self.console
        c.print(f"[bold]tuner run[/] {w.name} — {w.description}")
        c.print(f"  device: [bold]{plan.device}[/]{why} · scale: [bold]{plan.scale}[/]{scale_note}")
        flops = plan.settings.model_flops_per_sample
        compute = ("FLOPs: not countable for this model" if not flops else
                   f"{flops / 1e9:,.2f} GFLOP/sample (forward + backward)" if flops >= 1e9 else
                   f"{flops / 1e6:,.1f} MFLOP/sample (forward + backward)")
        c.print(f"  model: {w.parameter_count(plan.scale):,} parameters at {plan.scale} scale "
                f"({w.parameter_count('seed'):,} at seed) · {compute}")
        c.print(f"  data: {plan.data_dir} ({plan.samples:,} samples) · space: {plan.space.source}")
        bounds = plan.device_space.bounds()
        shown = " · ".join(f"{name} {bounds[name]}" for name in ("batch_size", "num_workers")
                           if name in bounds)
        if shown:
            c.print(f"  searched: {shown} (workers up to this node's {plan.node_cpus} CPUs; batch "
                    "up to the dataset's size or the memory probe's bound)")
        budget = (f"{plan.trials} search trials (references included)" if plan.trials
                  else "no trial limit")
        if plan.time_budget_s:
            where = "CUDA" if plan.device == "cuda" else "CPU without --trials"
            default = ("" if plan.options.time_budget_s else
                       f" (default on {where}; --time-budget S)")
            left = plan.time_left_s()
            budget += (f", time budget {_duration(plan.time_budget_s)}{default}, ends by "
                       f"{_clock_after(plan.time_budget_s if left is None else left)}")
        budget += ", early stopping " + ("on" if plan.options.early_stop else "off")
        s = plan.settings
        c.print(f"  budget: {budget}, {concurrency} at a time · per trial: "
                f"{_count(s.warmup_steps, 'warm-up step')}, {_count(s.windows, 'window')} of "
                f"{s.window_s:g} s · run id {plan.run_id}")
        if _followups_text(plan):
            c.print(f"  {_followups_text(plan)}")
        if plan.prior_rows:
            c.print(f"  resuming run {plan.run_id}: {len(plan.prior_search_rows)} search trials "
                    f"recorded, {plan.remaining_trials if plan.trials else 'more'} to run")
        todo = [name for name, _, _ in plan.reference_params]
        c.print(f"  references first: {', '.join(todo) if todo else 'already measured'} · then "
                f"{_SAMPLER_NAMES[plan.options.sampler]} (--sampler {plan.options.sampler})")
        self.bar.start()
        self.task = self.bar.add_task("trials", total=plan.trials, completed=len(plan.prior_search_rows))
        self.plan = plan
        self.counter = _Counter("search", len(plan.prior_search_rows), plan.trials)

    def _trial(self, row: dict, index: int, total: int | None) -> None:
        status = row["status"]
        style = _STATUS_STYLE.get(status, "white")
        sps = row["samples_per_sec"]
        if row["reference"] == "baseline" and status == Status.OK:
            self.baseline_sps = sps
        if (status == Status.OK and phase_of(row) != Phase.CEILING
                and noise.impossible(row) is None):  # a ceiling or a disturbed row: no result
            self.best_sps = max(self.best_sps, sps)
        measured = f"{sps:10,.1f} samples/sec" if sps is not None else f"{'':>10} {'':11}"
        ref = f" [bold]({row['reference']})[/]" if row["reference"] else ""
        tail = f" — {row['error']}" if row.get("error") else ""
        self.counter.done += 1
        self.console.print(f"  \\[{self.counter.text()}] [{style}]{status:<6}[/] {measured}  "
                           f"{knob_text(row)}{ref}{tail}", highlight=False, soft_wrap=True)
        if self.task is not None:
            best = f"best {self.best_sps:,.1f} samples/sec" if self.best_sps else "no result yet"
            self.bar.update(self.task, advance=1, description=f"trials · {best}")

    def close(self) -> None:
        self.bar.stop()

    def print_summary(self, summary) -> None:
        rows = summary.rows
        ok = [r for r in rows if r["status"] == Status.OK]
        counts = ", ".join(f"{n} {s}" for s in leaderboard_statuses(rows)
                           for n in [sum(r["status"] == s for r in rows)])
        phases = ", ".join(f"{n} {p.value}" for p in Phase
                           for n in [sum(phase_of(r) == p for r in rows)] if n)
        self.console.print(f"\n{len(rows)} trials in {summary.wall_s:.0f} s ({phases}; {counts}); "
                           f"leaderboard: {summary.results_dir}/leaderboard")
        keys = sorted({r["hardware_key"] for r in ok})
        for key in keys:
            self._print_best([r for r in rows if r["hardware_key"] == key], summary)
        if keys:
            self.console.print("ready to paste:")
        for key in keys:
            for line in paste_commands(self.plan, summary, key if len(keys) > 1 else None):
                self.console.print(f"  {line}", highlight=False, soft_wrap=True)
        for note in (busy_note(rows), drift_note(rows)):
            if note:
                self.console.print(f"[yellow]warning:[/] {note}", highlight=False)

    def _print_best(self, rows: list[dict], summary) -> None:
        best = winner.best(rows)
        if best is None:
            disturbed = sorted({why for r in rows if r["status"] == Status.OK
                                and (why := noise.impossible(r))})
            if disturbed:
                self.console.print(f"[yellow]no result:[/] every measurement had a figure that "
                                   f"cannot be true ({'; '.join(disturbed)}): the machine was "
                                   "disturbed; run again on a quiet one", highlight=False)
            return
        row, ceilings = best.row, best.ceilings
        t = Table(title=f"{summary.workload} on {row['hardware_key']} ({summary.scale} scale)",
                  title_justify="left")
        for col in ("configuration", "samples/sec", "best is", "knobs"):
            t.add_column(col, justify="right" if col in ("samples/sec", "best is") else "left")
        chosen = (f"re-measured, mean of {best.rounds} rounds" if best.rounds > 1 else
                  "re-measured" if best.phase == Phase.REMEASURE else "measured")
        t.add_row(f"[bold]best[/] ({chosen})", f"{best.samples_per_sec:,.1f}", "", knob_text(row))
        _reference_rows(t, best, rows)
        compute = ceilings.compute_verdict(best.samples_per_sec)
        if compute is not None:
            t.add_row("compute-only ceiling", f"{ceilings.compute_samples_per_sec:,.1f}",
                      *_compute_cells(best, compute))
        if ceilings.machine_compute is not None:
            t.add_row("machine's compute limit",
                      f"{ceilings.machine_compute.samples_per_sec:,.1f}",
                      *_machine_cells(ceilings.machine_compute,
                                      ceilings.compute_samples_per_sec))
        loader = ceilings.loader_verdict(best.samples_per_sec)
        if loader is not None:
            t.add_row("loader-only ceiling", f"{ceilings.loader_samples_per_sec:,.1f}",
                      *_loader_cells(loader, ceilings.data_path))
        _attainable_row(t, best.attainable)
        self.console.print(t)
        for line in verdict_lines(best):
            self.console.print(line, highlight=False)
        self.console.print(_compute_line(row), highlight=False)
        if row.get("time_to_train_s") is not None:
            self.console.print(f"predicted time for {row['train_steps']:,} steps: "
                               f"{row['time_to_train_s']:,.1f} s (setup, warm-up and compile included)")


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


@dataclass
class _Counter:
    """The trial counter printed on each trial's line: the phase, the trials of that phase
    finished, and how many it runs (None: not known ahead, as for a time budget or the
    ceilings). ``--trials`` counts the search only, so its denominator stays that number."""

    label: str
    done: int
    total: int | None

    def text(self) -> str:
        """'search 3/6', 'remeasure 2/9' or 'ceiling 1'."""
        if self.total is None:
            return f"{self.label} {self.done}"
        return f"{self.label} {self.done:>{len(str(self.total))}}/{self.total}"

    def after(self, data: dict) -> "_Counter":
        """The counter once a driver 'phase' event ``data`` starts: a new phase starts from 0,
        a further event of the same phase adds its ``count`` trials (a re-measurement's extra
        round); ceiling measurements add to the ceiling count, which has no total."""
        label = "retry" if data.get("retry") else str(Phase(data["phase"]).value)
        done = self.done if label == self.label else 0
        if label == "ceiling":
            return _Counter(label, done, None)
        return _Counter(label, done, done + data["count"])


def _followups_text(plan) -> str:
    """The line saying what runs after the search, beyond the ``--trials`` budget (empty when
    nothing does): re-measurement of the best beside the references, and the ceilings."""
    parts = []
    if plan.options.confirm:
        parts.append(f"the {plan.options.confirm} best re-measured beside the references "
                     f"(--confirm {plan.options.confirm})")
    if plan.options.ceiling:
        parts.append("the ceilings, one short trial each (--no-ceiling skips them)")
    return f"after the search, beyond its budget: {' · '.join(parts)}" if parts else ""


def _phase_text(data: dict) -> str:
    """The line announcing a follow-up phase (a driver 'phase' event)."""
    if data["phase"] == Phase.SEARCH:  # a reference retried
        return (f"measuring {', '.join(data['retry'])} once more: its trial failed for a "
                "transient reason (a process killed)")
    if data["phase"] == Phase.REMEASURE and data.get("no_time"):
        return (f"re-measurement left out: the time left ({data['left_s']:.0f} s) cannot hold "
                f"one round of its {data['configs']} configurations (~{data['need_s']:.0f} s); "
                "the speed-ups are single measurements, without an interval (a longer "
                "--time-budget gives interleaved rounds)")
    if data["phase"] == Phase.REMEASURE:
        first, last = data["round"], data.get("last_round", data["round"])
        which = (f"round {first} of {data['rounds']}" if first == last
                 else f"rounds {first}-{last} of {data['rounds']}")
        dropped = data.get("dropped") or 0
        left_out = (f"; {dropped} lower-ranked searched configuration(s) left out: the time "
                    f"left holds all {data['rounds']} rounds only without them" if dropped else "")
        return (f"re-measuring, {which}: {data['count']} trials, the configurations in turn "
                f"round after round, {data['windows']} windows each (interleaved: the "
                f"speed-ups pair rounds){left_out}")
    if data.get("ceilings") or data.get("left_out"):
        left_out = data.get("left_out") or []
        them = "it" if len(left_out) == 1 else "them"
        return "; ".join([_ceiling_text(name) for name in data.get("ceilings") or []] + (
            [f"left out, the time left cannot hold {them}: {', '.join(left_out)}"]
            if left_out else []))
    return (_CEILINGS[data.get("ceiling", "compute")]
            + (" again: it came out below the winner" if data.get("again") else ""))


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
    TFLOP/s, MFU."""
    flops = best.get("model_flops_per_sample")
    if flops is None:
        return "compute: the model's FLOPs could not be counted"
    text = (f"compute: {flops / 1e9:,.2f} GFLOP/sample (forward + backward) · "
            f"{best['achieved_tflops']:,.2f} TFLOP/s achieved")
    if best.get("mfu_impossible"):
        return text + (f" · MFU {best['mfu_pct']:.0f}% is impossible: the measurement was "
                       "disturbed or the card's peak is wrong (--peak-tflops)")
    if best.get("mfu_pct") is None:
        return text + " · MFU: no peak known for this device (CPU, or --peak-tflops)"
    return text + f" · MFU {best['mfu_pct']:.1f}% of the card's dense peak"


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


def _machine_cells(limit: MachineCompute, same_knobs: float | None) -> tuple[str, str]:
    """The 'best is' and 'knobs' cells of this machine's compute limit (its largest batch in
    the fastest precision): the best's share of it and how many times the best's rate it is
    (saying so where it lies below the best's same-knobs compute-only ceiling
    ``same_knobs``); where the best ran faster, within the noise 'at it', further 'not a
    bound'."""
    knobs = f"{limit.knobs_text}, {limit.data_path}"
    judged = limit.verdict
    if judged.judgement == "bound":
        if same_knobs and limit.samples_per_sec < same_knobs:
            return f"{100 * judged.share:.0f}% of it", (
                f"{knobs}: {judged.headroom:.2f}x the best; the largest batch is slower here "
                "than the best's own")
        return f"{100 * judged.share:.0f}% of it", (
            f"{knobs} (largest batch, fastest precision): {judged.headroom:.2f}x the best")
    if judged.judgement == "at it":
        return "at it", (f"{knobs}: {100 * judged.below:.0f} % below the best, within the "
                         "noise: the best computes at this machine's limit")
    return "not a bound", (f"{knobs}: the best ran faster, so this is no limit (a disturbed "
                           "measurement, or a smaller batch computes faster here)")


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
            f"{_count(drift.configurations, 'configuration')}) from round to round{windows}; "
            "the speed-ups' intervals widen with it and most differences read as ties; a "
            "quieter machine narrows them")
