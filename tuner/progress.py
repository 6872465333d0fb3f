"""Live progress of a run and its closing summary (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

import tuner.leaderboard as leaderboard
import tuner.noise as noise
from tuner.knobs import knob_text
from tuner.status import STATUSES, Phase, Status, phase_of

_SAMPLER_NAMES = {"gp": "Gaussian-process Bayesian optimisation", "tpe": "TPE",
                  "random": "random search"}

_STATUS_STYLE = {Status.OK: "green", Status.OOM: "yellow", Status.OVER_LIMIT: "yellow",
                 Status.PRUNED: "cyan", Status.ERROR: "red"}


_CEILINGS = {
    "compute": "measuring the winner's compute-only ceiling (batches on the device)",
    "loader": "measuring the winner's loader-only ceiling (its DataLoader, no model)",
    "machine-loader": "measuring this machine's input limit (loader only, every CPU a worker)",
    "machine-compute": "measuring this machine's compute limit (largest batch, fastest precision)",
}


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
            bound = (f"batch_size <= {r.max_batch}" + (f" ({r.first_failure} did not fit)"
                                                       if r.first_failure else " (all fit)"))
            self.console.print(f"  memory probe: {bound} · probes {steps}")
        elif kind == "phase":
            what = {Phase.REMEASURE: f"re-measuring the {data['count']} best with twice the windows",
                    Phase.CEILING: _CEILINGS[data.get("ceiling", "compute")]
                    + (" again: it came out below the winner" if data.get("again") else "")}
            self.console.print(f"  [bold]{what[data['phase']]}[/]")
            if self.task is not None and self.bar.tasks[0].total is not None:
                self.bar.update(self.task, total=self.bar.tasks[0].total + data["count"])

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
        c.print(f"  model: {w.parameter_count(plan.scale):,} parameters at {plan.scale} scale "
                f"({w.parameter_count('seed'):,} at seed)")
        c.print(f"  data: {plan.data_dir} ({plan.samples:,} samples) · space: {plan.space.source}")
        bounds = plan.device_space.bounds()
        shown = " · ".join(f"{name} {bounds[name]}" for name in ("batch_size", "num_workers")
                           if name in bounds)
        if shown:
            c.print(f"  searched: {shown} (workers up to this node's {plan.node_cpus} CPUs; batch "
                    "up to the dataset's size or the memory probe's bound)")
        budget = f"{plan.trials} trials" if plan.trials else "no trial limit"
        if plan.options.time_budget_s:
            budget += f", time budget {plan.options.time_budget_s:.0f} s"
        s = plan.settings
        c.print(f"  budget: {budget}, {concurrency} at a time · per trial: {s.warmup_steps} warm-up "
                f"steps, {s.windows} windows of {s.window_s:g} s · run id {plan.run_id}")
        if plan.prior_rows:
            c.print(f"  resuming run {plan.run_id}: {len(plan.prior_search_rows)} search trials "
                    f"recorded, {plan.remaining_trials if plan.trials else 'more'} to run")
        todo = [name for name, _, _ in plan.reference_params]
        c.print(f"  references first: {', '.join(todo) if todo else 'already measured'} · then "
                f"{_SAMPLER_NAMES[plan.options.sampler]} (--sampler {plan.options.sampler})")
        self.bar.start()
        self.task = self.bar.add_task("trials", total=plan.trials, completed=len(plan.prior_search_rows))

    def _trial(self, row: dict, index: int, total: int | None) -> None:
        status = row["status"]
        style = _STATUS_STYLE.get(status, "white")
        sps = row["samples_per_sec"]
        if row["reference"] == "baseline" and status == Status.OK:
            self.baseline_sps = sps
        if status == Status.OK:
            self.best_sps = max(self.best_sps, sps)
        measured = f"{sps:10,.1f} samples/sec" if sps is not None else f"{'':>10} {'':11}"
        ref = f" [bold]({row['reference']})[/]" if row["reference"] else ""
        if phase_of(row) != Phase.SEARCH:
            ref += f" [italic]{row['phase']}[/]"
        tail = f" — {row['error']}" if row.get("error") else ""
        n = f"{index}/{total}" if total else str(index)
        self.console.print(f"  [{n:>5}] [{style}]{status:<6}[/] {measured}  {knob_text(row)}{ref}"
                           f"{tail}", highlight=False, soft_wrap=True)
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
        self.console.print(f"\n{len(rows)} trials in {summary.wall_s:.0f} s ({counts}); "
                           f"leaderboard: {summary.results_dir}/leaderboard")
        for key in sorted({r["hardware_key"] for r in ok}):
            self._print_best([r for r in rows if r["hardware_key"] == key], summary)
        note = busy_note(rows)
        if note:
            self.console.print(f"[yellow]warning:[/] {note}", highlight=False)

    def _print_best(self, rows: list[dict], summary) -> None:
        best = leaderboard.best_row(rows)
        if best is None:
            return
        t = Table(title=f"{summary.workload} on {best['hardware_key']} ({summary.scale} scale)",
                  title_justify="left")
        for col in ("configuration", "samples/sec", "best is", "knobs"):
            t.add_column(col, justify="right" if col in ("samples/sec", "best is") else "left")
        chosen = "re-measured" if phase_of(best) == Phase.REMEASURE else "measured"
        t.add_row(f"[bold]best[/] ({chosen})", f"{best['samples_per_sec']:,.1f}", "", knob_text(best))
        for name in ("baseline", "recommended"):
            matches = [r for r in rows if r["reference"] == name]
            if not matches:
                continue
            sps = best[f"{name}_samples_per_sec"]
            if sps:
                t.add_row(name, f"{sps:,.1f}", f"{best[f'speedup_vs_{name}']:.2f}x faster",
                          knob_text(matches[0]))
            else:
                t.add_row(name, matches[0]["status"], "", knob_text(matches[0]))
        if best["ceiling_disturbed"]:
            t.add_row("compute-only ceiling", f"{best['ceiling_samples_per_sec']:,.1f}",
                      "disturbed", "measured below the pipeline it bounds, twice: no efficiency "
                      "shown (the machine was busy; run again on a quiet one)")
        elif best["ceiling_samples_per_sec"]:
            t.add_row("compute-only ceiling", f"{best['ceiling_samples_per_sec']:,.1f}",
                      f"{100 * best['pipeline_efficiency']:.0f}% of it",
                      "same knobs, batches on the device")
        if best.get("loader_ceiling_samples_per_sec"):
            t.add_row("loader-only ceiling", f"{best['loader_ceiling_samples_per_sec']:,.1f}", "",
                      "same knobs, its DataLoader alone, no model")
        _attainable_row(t, best)
        self.console.print(t)
        self.console.print(_compute_line(best), highlight=False)
        if best.get("time_to_train_s") is not None:
            self.console.print(f"predicted time for {best['train_steps']:,} steps: "
                               f"{best['time_to_train_s']:,.1f} s (setup, warm-up and compile included)")
        self.console.print(f"ready to paste: python -m tuner best --workload {summary.workload} "
                           f"--results {summary.results_dir} --format python")


def leaderboard_statuses(rows: list[dict]) -> list[str]:
    """The final statuses that occur in ``rows``, in ``tuner.status.STATUSES`` order."""
    return [s for s in STATUSES if any(r["status"] == s for r in rows)]


def _compute_line(best: dict) -> str:
    """How far the winner is from the card's peak: FLOP per sample, achieved TFLOP/s, MFU."""
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



def _attainable_row(t: Table, best: dict) -> None:
    """The machine's attainable rate, the winner's share of it and which limit binds."""
    attainable = best.get("attainable_samples_per_sec")
    if attainable is None:
        return
    share = best.get("attainable_share")
    t.add_row("attainable here", f"{attainable:,.1f}",
              f"{100 * share:.0f}% of it" if share is not None else "not a bound",
              f"bound by {best['attainable_bound_by']}: min(the best compute-only rate measured, "
              "loader-only with every CPU a worker)" if share is not None else
              "the best ran faster than this machine's measured limit: a disturbed measurement")


BUSY_STEAL_PCT = 5.0
"""CPU steal above this share of a trial's time means a busy host (a shared VM)."""


def busy_note(rows: list[dict]) -> str | None:
    """One line when trials were measured on a busy machine, or None: a 1-minute load average
    above the machine's CPU count (a trial alone keeps it at or below: its threads plus its
    workers fit its CPUs), CPU steal over ``BUSY_STEAL_PCT``, or other processes on the GPU."""
    measured = [r for r in rows if r.get("load_avg_1m") is not None]
    busy = [r for r in measured if (r.get("cpu_count") and r["load_avg_1m"] > r["cpu_count"])
            or (r.get("cpu_steal_pct") or 0) > BUSY_STEAL_PCT or (r.get("gpu_other_processes") or 0)]
    if not busy:
        return None
    worst = max(busy, key=lambda r: r["load_avg_1m"])
    parts = [f"load average up to {worst['load_avg_1m']:.1f} on {worst.get('cpu_count')} CPUs"]
    steal = max((r.get("cpu_steal_pct") or 0) for r in busy)
    if steal > BUSY_STEAL_PCT:
        parts.append(f"CPU steal up to {steal:.0f} %")
    others = max((r.get("gpu_other_processes") or 0) for r in busy)
    if others:
        parts.append(f"{others} other process(es) on the GPU")
    return (f"the machine was busy during {len(busy)} of {len(measured)} measured trials "
            f"({'; '.join(parts)}): their figures, and speed-ups read from them, may be disturbed")
