"""Live progress of a run (rich): the plan, one line per finished trial with its phase's
counter, a line per follow-up phase, and a bar; the closing summary is ``tuner.summary``'s.
Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgress

import tuner.noise as noise
from tuner._deprecated import moved
from tuner.knobs import knob_text
from tuner.status import Phase, Status, phase_of
from tuner.summary import print_summary
from tuner.workload_calls import meta_parameter_count

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


def starting_text(plan) -> str:
    """What a run does before its first line (``Progress.starting``'s spinner): Ray's start or
    the connection to a cluster (``--address``), then the memory probe where it runs
    (``Plan.should_probe``; its line comes when it ends)."""
    ray = "connecting to the Ray cluster" if plan.options.address else "starting Ray (local)"
    then = (", then the memory probe (the step timed at growing batch sizes)"
            if plan.should_probe else "")
    return f"{ray}{then}…"


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
        self.waiting = None
        """The spinner ``starting`` shows until the run's first event (rich ``Status``)."""

    def starting(self, plan) -> None:
        """Show what the run starts before its first line, until its first event: Ray (or the
        connection to a cluster), then the memory probe where it runs (``starting_text``);
        nothing is drawn on a console that is not a terminal."""
        self.waiting = self.console.status(starting_text(plan))
        self.waiting.start()

    def started(self) -> None:
        """End the spinner ``starting`` shows (at the run's first event); no-op without one."""
        if self.waiting is not None:
            self.waiting.stop()
            self.waiting = None

    def on_event(self, kind: str, data: dict) -> None:
        self.started()
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
        elif kind == "machine":
            self.console.print(f"  {data['text']}", highlight=False)
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
            " (default on CPU; --scale full for the full-size model)" if plan.device == "cpu"
            else " (default on CUDA)")
        c = self.console
        c.print(f"[bold]tuner run[/] {w.name} — {w.description}")
        c.print(f"  device: [bold]{plan.device}[/]{why} · scale: [bold]{plan.scale}[/]{scale_note}")
        flops = plan.settings.model_flops_per_sample
        compute = ("FLOPs: not countable for this model" if not flops else
                   f"{flops / 1e9:,.2f} GFLOP/sample (forward + backward)" if flops >= 1e9 else
                   f"{flops / 1e6:,.1f} MFLOP/sample (forward + backward)")
        c.print(f"  model: {_parameters_text(w, plan.scale)} · {compute}")
        c.print(f"  data: {plan.data_dir} ({plan.samples:,} samples) · space: {plan.space.source}")
        bounds = plan.device_space.bounds()
        shown = " · ".join(f"{name} {bounds[name]}" for name in ("batch_size", "num_workers")
                           if name in bounds)
        if shown:
            c.print(f"  searched: {shown} ({_workers_text(plan)}; batch up to the dataset's "
                    "size or the memory probe's bound)")
        # without --trials, the trial count is a cap the time budget normally ends the run before
        budget = ("no trial limit" if not plan.trials else
                  f"{plan.trials} search trials (references included)" if plan.options.trials
                  else f"up to {plan.trials} search trials (references included)")
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
                f"{s.window_s:g} s" + (
                    f" (searched configurations screened over "
                    f"{_count(plan.screen_windows, 'window')} of "
                    f"{getattr(plan, 'screen_window_s', 0):g} s, the best then in full)"
                    if getattr(plan, "screen_windows", 0) else "")
                + f" · run id {plan.run_id}")
        if _followups_text(plan):
            c.print(f"  {_followups_text(plan)}")
        if plan.prior_rows:
            c.print(f"  resuming run {plan.run_id}: {len(plan.prior_search_rows)} search trials "
                    f"recorded, {plan.remaining_trials if plan.trials else 'more'} to run")
        todo = [name for name, _, _ in plan.reference_params]
        c.print(f"  references first: {', '.join(todo) if todo else 'already measured'} · then "
                f"{_SAMPLER_NAMES[plan.options.sampler]} (--sampler {plan.options.sampler})")
        self.bar.start()
        # a trial count the user did not give is a cap, not the number of trials that will run
        total = plan.trials if plan.options.trials or not plan.time_budget_s else None
        self.task = self.bar.add_task("trials", total=total,
                                      completed=len(plan.prior_search_rows))
        self.plan = plan
        self.counter = _Counter("search", len(plan.prior_search_rows), total, cap=plan.trials)

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
        if phase_of(row) == Phase.CEILING and self.counter.label != "ceiling":
            # the memory probe's machine-compute row, before the search: not a search trial
            self.console.print(f"  \\[{row.get('ceiling') or 'ceiling'}] [{style}]{status:<6}[/] "
                               f"{measured}  {knob_text(row)} (the memory probe's timed steps)",
                               highlight=False, soft_wrap=True)
            return
        self.counter.done += 1
        self.console.print(f"  {self.counter.bracketed()} [{style}]{status:<6}[/] {measured}  "
                           f"{knob_text(row)}{ref}{tail}", highlight=False, soft_wrap=True)
        if self.task is not None:
            best = f"best {self.best_sps:,.1f} samples/sec" if self.best_sps else "no result yet"
            self.bar.update(self.task, advance=1, description=f"trials · {best}")

    def close(self) -> None:
        self.started()
        self.bar.stop()

    def print_summary(self, summary) -> None:
        """The closing summary of the run (``tuner.summary.print_summary``)."""
        print_summary(self.console, self.plan, summary)


@dataclass
class _Counter:
    """The trial counter printed on each trial's line: the phase, the trials of that phase
    finished, and how many it runs (None: not known ahead, as for a time budget or the
    ceilings). ``--trials`` counts the search only, so its denominator stays that number."""

    label: str
    done: int
    total: int | None
    cap: int | None = None
    """The most trials the phase may run where ``total`` is not known (a time budget's search:
    the plan's trial cap); the lines keep its width."""

    def text(self) -> str:
        """'search 3/6', 'remeasure 2/9' or 'ceiling 1'."""
        if self.total is None:
            return f"{self.label} {self.done}"
        return f"{self.label} {self.done:>{len(str(self.total))}}/{self.total}"

    def bracketed(self) -> str:
        """``text()`` in brackets (the '[' escaped for rich), padded on the right to the width
        of the phase's last count, so that the status columns of its lines stay aligned
        ('[search 9] ', '[search 10]'): the cap's where there is one, else two digits (a time
        budget alone, the ceilings)."""
        text = self.text()
        width = len(f"{self.label} {self.cap or 99}") if self.total is None else 0
        return f"\\[{text}]" + " " * max(0, width - len(text))

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
        cudnn = (" with cudnn_benchmark on (off while screening), the first also without it,"
                 if getattr(plan, "cudnn_at_finalists", False) else "")
        if getattr(plan, "compile_at_finalists", None):  # tuner.compile_finalists
            cudnn += (f"{'' if cudnn else ','} the first-ranked also compiled "
                      f"(mode={plan.compile_at_finalists}, to weigh its pay-back),")
        parts.append(f"the {plan.options.confirm} best re-measured{cudnn} beside the "
                     f"references (--confirm {plan.options.confirm})")
    if plan.options.ceiling:
        parts.append("the ceilings, one short trial each (--no-ceiling skips them)")
    return f"after the search, beyond its budget: {' · '.join(parts)}" if parts else ""


def _parameters_text(workload, scale: str) -> str:
    """'806,771 parameters at tiny scale (12,817,859 at full)': the count at ``scale``
    (``Workload.parameter_count``: on torch's meta device, else built on the CPU) and, at another
    scale, the full-size model's where it builds on the meta device (never built on the CPU: a
    full-size model's memory and seconds at every start for one figure)."""
    text = f"{workload.parameter_count(scale):,} parameters at {scale} scale"
    full = None if scale == "full" else meta_parameter_count(workload, "full")
    return text if full is None else f"{text} ({full:,} at full)"


def _workers_text(plan) -> str:
    """How far the searched ``num_workers`` range goes: the node's CPUs, or past them where
    the input pipeline waits on I/O (``tuner.search_policy.workers_past_the_cores``)."""
    workers = getattr(plan.device_space.domains.get("num_workers"), "high", 0)
    if workers > plan.node_cpus:
        return (f"workers up to {workers}, past this node's {plan.node_cpus} CPUs: the input "
                "pipeline waits on I/O")
    return f"workers up to this node's {plan.node_cpus} CPUs"


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
        if data.get("compile_cold"):  # tuner.compile_finalists.compiles_cold
            which += " (alone: the next are planned from its cold compile's time)"
        elif last < data["rounds"]:  # the rest run only where the time left then holds them
            which += f" (the time left holds {'this one' if first == last else 'these'} now)"
        dropped = data.get("dropped") or 0
        left_out = (f"; {dropped} lower-ranked searched configuration(s) left out: the time "
                    "left holds more rounds"
                    + (" (and the compute-only ceiling)" if data.get("ceiling_kept") else "")
                    + " without them" if dropped else "")
        windows = data["windows"]
        planned = data.get("round_windows") or windows
        each = f"{windows} window{'s' if windows != 1 else ''} each" + (
            f", not {planned}, so that the time left holds "
            f"{'the rounds' if last == data['rounds'] else 'a round'}"
            if windows < planned else "")
        return (f"re-measuring, {which}: {data['count']} trials, the configurations in turn "
                f"round after round, {each} (interleaved: the speed-ups pair rounds)"
                f"{left_out}")
    if data.get("ceilings") or data.get("left_out"):
        left_out = data.get("left_out") or []
        them = "it" if len(left_out) == 1 else "them"
        return "; ".join([_ceiling_text(name) for name in data.get("ceilings") or []] + (
            [f"left out, the time left cannot hold {them}: {', '.join(left_out)}"]
            if left_out else []))
    return (_CEILINGS[data.get("ceiling", "compute")]
            + (" again: it came out below the winner" if data.get("again") else ""))


__getattr__ = moved(__name__, {
    **{name: "tuner.summary" for name in ("verdict_lines", "paste_commands",
                                          "leaderboard_statuses")},
    **{name: "tuner.machine_load" for name in ("busy_note", "drift_note", "BUSY_STEAL_PCT",
                                               "BUSY_OTHER_CPU_PCT")}})
"""Old import paths of the summary's and the machine notes' public names."""
