"""What the run measures after its search, planned from the rows recorded so far: a reference
retried after a transient failure, the re-measurement of the best configurations beside the
references in interleaved rounds (the winner and its speed-ups are read from these), and the
ceilings of the winner and of each data path the search tried (``tuner.ceilings`` reads
them), each sized to the time left (``tuner.budget``).

Pure functions of ``(plan, rows)``: ``rows`` are leaderboard rows (dicts, the columns of
``tuner.leaderboard``), ``plan`` a ``tuner.plan.Plan`` of which they read ``metric``, ``mode``,
``options.confirm``, ``options.ceiling``, ``cudnn_at_finalists``, ``compile_at_finalists``
(where present), ``references``, ``settings.windows``, ``settings.window_s``,
``settings.warmup_steps``, ``settings.max_steady_probes``, ``settings.max_warmup_s``,
``round_windows``, ``accelerator_type``, ``node_cpus``, ``device``, ``device_space``,
``reuses_trial_processes``, ``earlier_trial_ids`` and ``time_left_s()``.
No Ray, no torch: the driver (``tuner.driver``) runs the batches as trials of its Ray Tune
experiment, and ``followups`` asks for the next batch only once the last one's rows are
recorded, so a resumed run measures only what its rows lack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import tuner.budget as budget
import tuner.compile_finalists as compiling
import tuner.noise as noise
import tuner.windows as rule
from tuner.costs import CostModel, TrialCost, TrialShape
from tuner.knobs import Knobs
from tuner.plan import REMEASURE_ROUNDS
from tuner.space import candidates
from tuner.status import Phase, Status, phase_of
from tuner.winner import best as winning

Config = tuple[Knobs, "str | None"]
"""A configuration to measure: its knobs and the reference it is (None: a searched one)."""

Ceiling = tuple[str, Knobs, str]
"""A ceiling to measure: its name (its kind, followed by ' (data_path=P)' for a data path other
than the winner's), knobs, and mode ('compute_only' or 'loader_only')."""

OnEvent = Callable[[str, dict], None]
"""``on_event(kind, data)``: each batch's 'phase' event (``tuner.progress`` prints it)."""

CAN_WIN_FRACTION = 0.5
"""A searched configuration is re-measured only when its search rate is at least this share of
the best search rate (for ``time_to_train_s``: a time at most 1/this of the best): a busy
machine can halve a rate between search and re-measurement, so a configuration below half the
best cannot overtake it (docs/defaults.md)."""

TRANSIENT_ERRORS = ("DataLoader worker failure", "died", "killed")
"""Error texts of a failure that may not recur: a DataLoader worker died (``tuner.trial.failures``'s
prefix), Ray lost the trial's process or node ('The actor died ...'), a process was killed.
Out-of-memory is a status of its own (``oom``), never transient."""


@dataclass(frozen=True)
class Batch:
    """Configurations a follow-up phase measures next, one trial each, in order, with
    ``settings`` (``TrialSettings`` fields) changed for all of them and ``per_trial`` changes
    for each (None: none), and the 'phase' event that announces it."""
    configs: list[Config]
    phase: Phase
    settings: dict = field(default_factory=dict)
    per_trial: list[dict] | None = None
    event: dict = field(default_factory=dict, compare=False)


def type_rows(plan: Any, rows: Sequence[dict]) -> list[dict]:
    """The rows of the accelerator type being tuned (all of them on one type)."""
    return [r for r in rows if r.get("accelerator_type") == plan.accelerator_type]


def followups(plan: Any, rows: Sequence[dict], on_event: OnEvent) -> Iterator[Batch]:
    """The follow-up batches, in order: ``retry_references``, ``rounds`` of the configurations
    ``remeasure_configs`` picks, then (with ``options.ceiling``, once the rows have a winner,
    ``tuner.winner.best``: ceilings need one) ``ceilings`` and ``ceiling_again``. ``rows``:
    the run's rows, a list the caller appends each finished trial's row to before it asks for
    the next batch. Nothing when the time left is under ``budget.MIN_PHASE_S``."""
    if not budget.has_time(plan.time_left_s()):
        return
    yield from retry_references(plan, rows, on_event)
    _, configs = remeasure_configs(plan, type_rows(plan, rows))
    if configs:
        yield from rounds(plan, rows, configs, on_event)
    if plan.options.ceiling:  # (none without a winner: ceilings_batch)
        yield from ceilings(plan, rows, on_event)
        yield from ceiling_again(plan, rows, on_event)


def cost_s(plan: Any, rows: Sequence[dict], knobs: Knobs, windows: int,
           tuned: bool = False, changes: Mapping[str, Any] | None = None) -> float:
    """Seconds one more trial of ``knobs`` with ``windows`` windows of the run's length takes
    in the run's time (``price``'s ``total_s``)."""
    return price(plan, rows, knobs, windows, tuned, changes).total_s


def price(plan: Any, rows: Sequence[dict], knobs: Knobs, windows: int,
          tuned: bool = False, changes: Mapping[str, Any] | None = None) -> TrialCost:
    """``tuner.costs.CostModel.price`` of one more trial of ``knobs`` with ``windows``
    windows of the run's length, in this command's trial processes (``CostModel.of_plan``);
    ``tuned``: a trial of ``knobs`` planned before this one runs first. The run's
    ``TrialSettings``, with the trial's ``changes`` (``round_trial_settings``), say what
    steady-state probes a trial of one window adds. A compile is priced by
    ``tuner.compile_finalists.compile_price_s`` (warm after a trial of the same knobs)."""
    shape = TrialShape.of(plan.settings, {**(changes or {}), "windows": windows})
    model = CostModel.of_plan(plan, rows)
    return compiling.repriced(plan, rows, model, knobs, tuned,
                              model.price(knobs, shape, planned=[knobs] if tuned else ()))


def fits(plan: Any, rows: Sequence[dict], knobs: list[Knobs]) -> bool:
    """Whether the time left holds one more trial of each of ``knobs`` (``cost_s``); always
    without a budget."""
    return budget.trials_fit(plan.time_left_s(), [
        cost_s(plan, rows, k, plan.settings.windows) for k in knobs])


def batch_prices_s(plan: Any, rows: Sequence[dict], batch: Batch) -> list[float]:
    """The price of each of ``batch``'s trials as planned, in seconds of the trial itself
    (``TrialCost.trial_s``: its row's ``priced_s``): with the batch's and its own settings
    changes, a configuration run earlier in the batch counted as run in the same process
    (cuDNN's autotuning paid once)."""
    rows = type_rows(plan, rows)
    changes = batch.per_trial or [{} for _ in batch.configs]
    out, seen = [], set()
    for (knobs, _), change in zip(batch.configs, changes):
        settings = {**batch.settings, **change}
        windows = settings.get("windows", plan.settings.windows)
        out.append(price(plan, rows, knobs, windows, knobs in seen, settings).trial_s)
        seen.add(knobs)
    return out


# ------------------------------------------------------------------------- the retry

def transient(row: dict) -> bool:
    """True for a ``node_lost`` row (run again on the nodes left; a multi-rank trial whose
    ranks no longer fit them ends after Ray Train's worker-group start timeout, an ``error``),
    and an ``error`` row whose error may not recur (``TRANSIENT_ERRORS``)."""
    return row["status"] == Status.NODE_LOST or (
        row["status"] == Status.ERROR
        and any(p in (row.get("error") or "") for p in TRANSIENT_ERRORS))


def retry_batch(plan: Any, rows: Sequence[dict]) -> Batch | None:
    """One search-phase trial of each reference whose only search trial failed for a
    transient reason (a reference is retried once), or None: none to retry, or the time left
    cannot hold them (``fits``)."""
    rows = type_rows(plan, rows)
    todo = []
    for name, _ in plan.references:
        tried = [r for r in rows if r.get("reference") == name and phase_of(r) == Phase.SEARCH]
        if len(tried) == 1 and transient(tried[0]):
            todo.append((Knobs.from_dict(tried[0], strict=False), name))
    if not todo or not fits(plan, rows, [k for k, _ in todo]):
        return None
    return Batch(todo, Phase.SEARCH, event={"phase": Phase.SEARCH, "count": len(todo),
                                            "retry": [n for _, n in todo]})


def retry_references(plan: Any, rows: Sequence[dict], on_event: OnEvent) -> Iterator[Batch]:
    """``retry_batch``, announced: without a retry the run has no speed-up over a reference
    whose only trial a killed worker or process ended."""
    batch = retry_batch(plan, rows)
    if batch is not None:
        on_event("phase", batch.event)
        yield batch


# ------------------------------------------------------------------ the re-measurement

def remeasure_configs(plan: Any, rows: Sequence[dict]) -> tuple[list[Knobs], list[Config]]:
    """The ``--confirm`` best configurations of the search that can still win
    (``CAN_WIN_FRACTION``), and what the re-measurement measures: those and, beside them, the
    references that succeeded (nothing with fewer than two configurations to compare). A best
    whose figures cannot be true (``tuner.noise.impossible``) is among them, measured again; it
    does not set the bar for the others."""
    ok = [r for r in rows if r["status"] == Status.OK and r[plan.metric] is not None
          and phase_of(r) == Phase.SEARCH]
    ok.sort(key=lambda r: r[plan.metric], reverse=plan.mode == "max")
    sound = [r[plan.metric] for r in ok if noise.impossible(r) is None]
    top: list[Knobs] = []
    for r in ok:
        knobs = Knobs.from_dict(r, strict=False)
        can_win = not sound or (r[plan.metric] >= CAN_WIN_FRACTION * sound[0]
                                if plan.mode == "max" else
                                r[plan.metric] <= sound[0] / CAN_WIN_FRACTION)
        if knobs not in top and can_win:
            top.append(knobs)
    top = top[:plan.options.confirm]
    if plan.cudnn_at_finalists:
        top = with_cudnn_benchmark(top)
    if getattr(plan, "compile_at_finalists", None):
        top = compiling.with_compiled(top, plan.compile_at_finalists)
    refs: dict[Knobs, str] = {}
    for r in ok:
        if r["reference"] and r["reference"] not in refs.values():
            refs.setdefault(Knobs.from_dict(r, strict=False), r["reference"])
    configs = [(k, refs.get(k)) for k in top] + [(k, name) for k, name in refs.items()
                                                 if k not in top]
    return top, (configs if top and len(configs) >= 2 else [])


def with_cudnn_benchmark(top: list[Knobs]) -> list[Knobs]:
    """The finalists of a search that screened with ``cudnn_benchmark`` off
    (``Plan.cudnn_at_finalists``), in rank order: the first-ranked as screened, then each
    finalist with it on. The rounds then decide whether cuDNN's autotuning pays for the
    first-ranked (a tie goes to the simpler: ``tuner.winner.best``; the one without it where
    the baseline has it off, as every built-in's does), and the others are measured as a user
    would run them at a fixed shape."""
    out: list[Knobs] = []
    for knobs in [*top[:1], *(k.replace(cudnn_benchmark=True) for k in top)]:
        if knobs not in out:
            out.append(knobs)
    return out


def round_trial_settings(plan: Any, rows: Sequence[dict], knobs: Knobs, windows: int
                         ) -> dict[str, Any]:
    """Trial settings changes of a re-measurement round's trial of ``knobs`` with ``windows``
    windows: none, or for one window of steps the search timed as long
    (``tuner.windows.long_step`` of ``CostModel.step_s``), no steady-state probes
    (``max_steady_probes`` 0). Such steps judge no steady state (the rule), yet after one
    warm-up step (the tiny scale's) the trial cannot tell them long and would probe with one
    step each: two steps more than its window, a round of one window dearer than one of
    two."""
    if windows != 1:
        return {}
    step_s = CostModel(rows).step_s(knobs)
    if step_s is None or not rule.long_step(step_s, plan.settings.window_s):
        return {}
    return {"max_steady_probes": 0}


def rounds_todo(plan: Any, rows: Sequence[dict], configs: list[Config], rounds: range,
                windows: int, timed: bool = True, reserve_s: float = 0.0
                ) -> list[tuple[int, Config]]:
    """(round, configuration) of the re-measurements still to run in ``rounds``, in order:
    round r holds the configurations with fewer than r re-measurement rows; it ends at the
    first round the time left, less ``reserve_s``, cannot hold (unless ``timed`` is False).
    A configuration's trials after its first here are priced as run where that one ran
    (``cost_s``'s ``tuned``: cuDNN's autotuning is paid once), each with its
    ``round_trial_settings``."""
    counts: dict[Knobs, int] = {}
    for x in rows:
        if phase_of(x) == Phase.REMEASURE:
            knobs = Knobs.from_dict(x, strict=False)
            counts[knobs] = counts.get(knobs, 0) + 1
    left = plan.time_left_s() if timed else None
    if left is not None:
        left -= reserve_s
    todo: list[tuple[int, Config]] = []
    cost = 0.0
    planned: set[Knobs] = set()
    for r in rounds:
        round_todo = [(k, ref) for k, ref in configs if counts.get(k, 0) < r]
        cost += sum(cost_s(plan, rows, k, windows, tuned=k in planned,
                           changes=round_trial_settings(plan, rows, k, windows))
                    for k, _ in round_todo)
        if left is not None and left < cost:
            break
        planned.update(k for k, _ in round_todo)
        todo += [(r, config) for config in round_todo]
    return todo


def ceiling_reserve_s(plan: Any, rows: Sequence[dict], configs: list[Config]) -> float:
    """Seconds the re-measurement leaves for the winner's compute-only ceiling: one trial of
    the first-ranked configuration (``cost_s``), or 0 without ``--ceiling`` or
    when the run's rows hold a compute-only ceiling already. Without it a short budget spends
    its follow-up share on the rounds and the summary shows no ceiling at all."""
    if not configs or not plan.options.ceiling or any(
            phase_of(r) == Phase.CEILING and (r.get("ceiling") or "compute") == "compute"
            for r in rows):
        return 0.0
    return cost_s(plan, rows, configs[0][0], plan.settings.windows)


def fitting_configs(plan: Any, rows: Sequence[dict], configs: list[Config],
                    windows: int) -> tuple[list[Config], int]:
    """``configs`` less their lowest-ranked searched ones while the time left, less the
    compute-only ceiling's (``ceiling_reserve_s``) where the rounds of the ones that always
    stay (``required_configs``, never left out) fit beside it, cannot hold all the rounds
    (``rounds_total``) of them of ``windows`` windows, and how many were left out:
    three rounds of fewer configurations give every speed-up a t-interval, two rounds of more
    give none worth reading (quantile 12.7). Where the required ones' rounds leave the
    ceiling no time, the rounds go first (``round_batch``), and a finalist is not left out
    for a ceiling that will not run."""
    required = required_configs(rows, configs)
    reserve_s = ceiling_reserve_s(plan, rows, configs)
    if not all_rounds_fit(plan, rows, required, windows, reserve_s):
        reserve_s = 0.0
    kept = list(configs)
    droppable = [c for c in kept if c not in required]
    while droppable and not all_rounds_fit(plan, rows, kept, windows, reserve_s):
        kept.remove(droppable.pop())  # the lowest-ranked first
    return kept, len(configs) - len(kept)


def required_configs(rows: Sequence[dict], configs: list[Config]) -> list[Config]:
    """The configurations of ``configs`` the rounds never leave out for time: the
    first-ranked, the references, and any already re-measured (a resumed run)."""
    remeasured = {Knobs.from_dict(x, strict=False) for x in rows if phase_of(x) == Phase.REMEASURE}
    return [c for i, c in enumerate(configs) if i == 0 or c[1] is not None or c[0] in remeasured]


def rounds_total(rows: Sequence[dict]) -> int:
    """The re-measurement's rounds: ``REMEASURE_ROUNDS``, one more once a re-measurement row
    records a figure that cannot be true (``tuner.noise.impossible``)."""
    again = any(phase_of(x) == Phase.REMEASURE and x["status"] == Status.OK
                and noise.impossible(x) for x in rows)
    return REMEASURE_ROUNDS + (1 if again else 0)


def all_rounds_fit(plan: Any, rows: Sequence[dict], configs: list[Config], windows: int,
                   reserve_s: float = 0.0) -> bool:
    """Whether the time left, less ``reserve_s``, holds every one of the rounds
    (``rounds_total``) of ``configs`` still to run, of ``windows`` windows each
    (``rounds_todo``)."""
    every = range(1, rounds_total(rows) + 1)
    return (len(rounds_todo(plan, rows, configs, every, windows, reserve_s=reserve_s))
            == len(rounds_todo(plan, rows, configs, every, windows, timed=False)))


def fitting_round_windows(plan: Any, rows: Sequence[dict], configs: list[Config]) -> int:
    """Windows per round for ``configs``: ``plan.round_windows``, or fewer, down to one, where
    only fewer let the time left hold all the rounds (``rounds_total``; beside the compute-only
    ceiling's reserve where some number does, else without it). Where no number holds them
    all, the most that holds one round (``plan.round_windows`` where that does): fewer windows
    for two rounds instead of one would trade a single measurement's ratio for an interval of
    quantile 12.7 on one degree of freedom (``tuner.noise.speedup``). A round is one sample of
    a configuration's rate in a trial of its own, and the speed-ups' intervals come from the
    spread between rounds: three rounds of one window give an interval (quantile 4.3). Set
    once for the rounds still to run: a round added by an impossible figure keeps it."""
    most = plan.round_windows
    for reserve_s in (ceiling_reserve_s(plan, rows, configs), 0.0):
        for windows in range(most, 0, -1):
            if all_rounds_fit(plan, rows, configs, windows, reserve_s):
                return windows
    untimed = rounds_todo(plan, rows, configs, range(1, rounds_total(rows) + 1), most,
                          timed=False)
    if not untimed:
        return most
    nxt = range(untimed[0][0], untimed[0][0] + 1)   # the first round with something to run
    return next((w for w in range(most, 0, -1) if rounds_todo(plan, rows, configs, nxt, w)),
                most)


def round_batch(plan: Any, rows: Sequence[dict], configs: list[Config], first: int,
                dropped: int = 0, windows: int | None = None) -> Batch | None:
    """The rounds from ``first`` on, as one batch (A B C A B C ...) of ``windows`` windows each
    (None: ``plan.round_windows``), as many as the time left holds; None when none is left to
    run. There are ``REMEASURE_ROUNDS``, one more when a re-measurement recorded a figure that
    cannot be true (``tuner.noise.impossible``). ``dropped``: configurations
    ``fitting_configs`` left out, for the event, which also names the windows a round has when
    fewer than ``plan.round_windows`` (``fitting_round_windows``) and whether the rounds leave
    the compute-only ceiling its time (``ceiling_kept``)."""
    windows = plan.round_windows if windows is None else windows
    rows = type_rows(plan, rows)
    total = rounds_total(rows)
    # the rounds leave the compute-only ceiling its time when all of them fit beside it; when
    # they do not, the rounds go first (a speed-up matters more than what bounds it); a cold
    # searched compile's round alone: the next ones are planned from its row
    cold = compiling.compiles_cold(rows, [k for k, ref in configs if ref is None])
    wanted = range(first, (first if cold else total) + 1)
    reserve_s = ceiling_reserve_s(plan, rows, configs)
    todo = rounds_todo(plan, rows, configs, wanted, windows, reserve_s=reserve_s)
    ceiling_kept = reserve_s > 0
    if len(todo) < len(rounds_todo(plan, rows, configs, wanted, windows, timed=False)):
        todo, ceiling_kept = rounds_todo(plan, rows, configs, wanted, windows), False
    if not todo:
        return None
    per_trial = _compile_capped(plan, rows, [c for _, c in todo], windows)
    return Batch([config for _, config in todo], Phase.REMEASURE, {"windows": windows},
                 per_trial=per_trial if any(per_trial) else None,
                 event={"phase": Phase.REMEASURE, "count": len(todo), "round": todo[0][0],
                        "last_round": todo[-1][0], "rounds": total, "windows": windows,
                        "round_windows": plan.round_windows, "dropped": dropped,
                        "ceiling_kept": ceiling_kept, "compile_cold": cold})


def _compile_capped(plan: Any, rows: Sequence[dict], configs: list[Config],
                    windows: int) -> list[dict]:
    """Each round trial's settings changes (``round_trial_settings``), a compiled searched
    one's with its own deadline (``tuner.compile_finalists.with_deadlines``; a reference runs
    as written, to the run's)."""
    per_trial = [round_trial_settings(plan, rows, k, windows) for k, _ in configs]
    batch = Batch(configs, Phase.REMEASURE, {"windows": windows}, per_trial=per_trial)
    capped = [k if ref is None else k.replace(compile="off") for k, ref in configs]
    return compiling.with_deadlines(plan, capped, per_trial, batch_prices_s(plan, rows, batch))


def no_round_event(plan: Any, rows: Sequence[dict], configs: list[Config]) -> dict | None:
    """The event saying the re-measurement is left out, when the time left cannot hold its
    first round; None when nothing is left to re-measure (a resumed run whose rounds are
    recorded)."""
    rows = type_rows(plan, rows)
    windows = plan.round_windows
    first = rounds_todo(plan, rows, configs, range(1, 2), windows, timed=False)
    if not first:
        return None
    need_s = sum(cost_s(plan, rows, k, windows) for _, (k, _) in first)
    return {"phase": Phase.REMEASURE, "count": 0, "no_time": True, "configs": len(first),
            "need_s": need_s, "left_s": plan.time_left_s() or 0.0}


def rounds(plan: Any, rows: Sequence[dict], configs: list[Config],
           on_event: OnEvent) -> Iterator[Batch]:
    """Re-measure ``configs`` in interleaved rounds (``round_batch``), after leaving out what
    the time left cannot hold (``fitting_round_windows`` for the configurations always kept,
    then ``fitting_configs`` at those windows); one more
    batch for a round added by an impossible figure. Says so when not even the first round
    fits (``no_round_event``)."""
    typed = type_rows(plan, rows)
    # the windows that the configurations always kept allow, then as many others as fit at
    # those windows: none is left out that would fit at the windows the rounds then get
    windows = fitting_round_windows(plan, typed, required_configs(typed, configs))
    configs, dropped = fitting_configs(plan, typed, configs, windows)
    first = 1
    while True:  # a compiled finalist whose trial measured nothing is not measured again
        configs = [c for c in configs if c[1] is not None
                   or not compiling.compile_failed(type_rows(plan, rows), c[0])]
        batch = round_batch(plan, rows, configs, first, dropped if first == 1 else 0, windows)
        if batch is None:
            event = no_round_event(plan, rows, configs) if first == 1 else None
            if event is not None:
                on_event("phase", event)
            return
        on_event("phase", batch.event)
        yield batch
        first = batch.event["last_round"] + 1


# ------------------------------------------------------------------------- the ceilings

def fitting_ceilings(plan: Any, rows: Sequence[dict], todo: list[Ceiling]
                     ) -> tuple[list[Ceiling], list[str]]:
    """The ceilings of ``todo`` (``Ceiling``: name, knobs, mode) whose trials the time left
    holds, one after another in order (``cost_s``), and the names of those left
    out: a ceiling started without the time for it measures nothing."""
    left = plan.time_left_s()
    if left is None:
        return todo, []
    kept, left_out, total = [], [], 0.0
    for entry in todo:
        cost = cost_s(plan, rows, entry[1], plan.settings.windows)
        if total + cost <= left:
            kept.append(entry)
            total += cost
        else:
            left_out.append(entry[0])
    return kept, left_out


def ceiling_kind(name: str) -> str:
    """The kind of a ceiling ``name`` (the ``ceiling`` column: 'machine-loader' of
    'machine-loader (data_path=cache)')."""
    return name.partition(" ")[0]


def path_bests(plan: Any, rows: Sequence[dict]) -> dict[str, Knobs]:
    """Data path -> the knobs of its best successful search row (``plan.metric``; a figure
    that cannot be true does not count), best path first."""
    ok = [r for r in rows if r["status"] == Status.OK and phase_of(r) == Phase.SEARCH
          and r.get(plan.metric) is not None and noise.impossible(r) is None]
    ok.sort(key=lambda r: r[plan.metric], reverse=plan.mode == "max")
    out: dict[str, Knobs] = {}
    for r in ok:
        out.setdefault(r.get("data_path") or "loader", Knobs.from_dict(r, strict=False))
    return out


def machine_compute_knobs(plan: Any, knobs: Knobs) -> Knobs:
    """The winner's ``knobs`` at the largest batch the search allows, in the fastest precision
    (bf16 on CUDA): under ``--global-batch-size`` the largest allowed micro-batch with the
    grad_accum that keeps the global batch (``Space.fit_reference``), else the largest batch
    with the winner's grad_accum (at least the winner's batch)."""
    space = plan.device_space
    largest = max(candidates(space))  # the batch sizes the search allows
    amp = "bf16" if plan.device == "cuda" else knobs.amp
    if getattr(space, "global_batch", None) is not None:
        return space.fit_reference(knobs.replace(batch_size=largest, amp=amp))
    return knobs.replace(batch_size=max(largest, knobs.batch_size), amp=amp)


def every_cpu_a_worker(plan: Any, knobs: Knobs) -> Knobs:
    """``knobs`` with a DataLoader worker per CPU, or the search's most where more (a pipeline
    that waits: ``search_policy.workers_past_the_cores``), kept across epochs."""
    high = getattr(plan.device_space.domains.get("num_workers"), "high", 0)
    return knobs.replace(num_workers=max(plan.node_cpus, high), persistent_workers=True,
                         prefetch_factor=max(knobs.prefetch_factor or 2, 4))


def has_machine_compute(rows: Sequence[dict]) -> bool:
    """Whether ``rows`` hold a successful 'machine-compute' ceiling (whatever its data path:
    a compute-only trial reads no data): the run's memory probe records one from its timed
    steps before the search (``tuner.driver.record_machine_limit``)."""
    return any(phase_of(r) == Phase.CEILING and r.get("ceiling") == "machine-compute"
               and r["status"] == Status.OK for r in rows)


def planned_ceilings(plan: Any, rows: Sequence[dict], knobs: Knobs) -> list[Ceiling]:
    """Every ceiling of the winner ``knobs``, most important first: its own compute-only and
    loader-only ('compute', 'loader'); the machine's limits on its data path ('machine-loader',
    none for 'device', which has no workers; 'machine-compute', ``machine_compute_knobs``,
    unless the run's rows hold it: ``has_machine_compute``);
    for each other data path the search tried (best first), its machine limit and its best
    configuration's input pipeline ('path-loader'); on the CPU device, the one-core ceilings
    of the shared-cores model ('core-compute', and 'core-loader' per data path: no workers).
    Clamped to the device."""
    path = knobs.data_path
    bests = {path: knobs, **{p: k for p, k in path_bests(plan, rows).items() if p != path}}
    todo: list[Ceiling] = [("compute", knobs, "compute_only"), ("loader", knobs, "loader_only")]
    if path != "device":
        todo.append(("machine-loader", every_cpu_a_worker(plan, knobs), "loader_only"))
    if not has_machine_compute(rows):  # the memory probe's timed steps may have measured it
        todo.append(("machine-compute", machine_compute_knobs(plan, knobs), "compute_only"))
    for other, best in list(bests.items())[1:]:
        suffix = f" (data_path={other})"
        if other != "device":
            todo.append(("machine-loader" + suffix, every_cpu_a_worker(plan, best), "loader_only"))
        todo.append(("path-loader" + suffix, best, "loader_only"))
    if plan.device == "cpu":
        todo.append(("core-compute", knobs, "compute_only"))
        todo += [("core-loader" + ("" if p == path else f" (data_path={p})"),
                  k.updated({"num_workers": 0})[0], "loader_only") for p, k in bests.items()]
    return [(name, config.clamp(plan.device)[0], mode) for name, config, mode in todo]


def ceilings_batch(plan: Any, rows: Sequence[dict]) -> tuple[Batch | None, dict | None]:
    """What bounds the winner, as one batch, and its event: ``planned_ceilings``, each measured
    once per run (a kind and data path the run's rows hold is not measured again), the
    one-core ones with ``cpus`` 1. Those the time left cannot hold are left out, the least
    important first, and the event says so even when none is measured (batch None).
    (None, None): no winner, or nothing left to measure."""
    rows = type_rows(plan, rows)
    winner = winning(rows)
    if winner is None:
        return None, None
    knobs = winner.knobs
    have = {(r.get("ceiling") or "compute", r.get("data_path") or "loader")
            for r in rows if phase_of(r) == Phase.CEILING}
    todo = [c for c in planned_ceilings(plan, rows, knobs)
            if (ceiling_kind(c[0]), c[1].data_path) not in have]
    if fits(plan, rows, [knobs]):
        todo, left_out = fitting_ceilings(plan, rows, todo)
    else:  # not even the winner's own: none is started, and the run says so
        todo, left_out = [], [name for name, _, _ in todo]
    if not (todo or left_out):
        return None, None
    event = {"phase": Phase.CEILING, "count": len(todo),
             "ceilings": [name for name, _, _ in todo], "left_out": left_out}
    if not todo:
        return None, event
    per_trial = [{"ceiling": ceiling_kind(name), mode: True,
                  **({"cpus": 1} if ceiling_kind(name).startswith("core-") else {})}
                 for name, _, mode in todo]
    return Batch([(config, None) for _, config, _ in todo], Phase.CEILING,
                 per_trial=per_trial, event=event), event


def ceilings(plan: Any, rows: Sequence[dict], on_event: OnEvent) -> Iterator[Batch]:
    """``ceilings_batch``, announced (a ceiling left out is said even when none is measured)."""
    batch, event = ceilings_batch(plan, rows)
    if event is not None:
        on_event("phase", event)
    if batch is not None:
        yield batch


def ceiling_again_batch(plan: Any, rows: Sequence[dict]) -> Batch | None:
    """The winner's compute-only ceiling, when this run's rows lack it or hold one only that
    came out below the winner by more than the noise (``tuner.winner.Answer.ceiling_far_below``:
    a disturbed measurement; within the noise it is the pipeline's own rate, which a second
    trial would not change), and the time left holds it; else None. At most two per run."""
    rows = type_rows(plan, rows)
    winner = winning(rows)
    if winner is None:
        return None
    knobs = winner.knobs
    measured = [r for r in rows if phase_of(r) == Phase.CEILING
                and (r.get("ceiling") or "compute") == "compute"
                and Knobs.from_dict(r, strict=False) == knobs]
    if (measured and not winner.ceiling_far_below) or len(measured) >= 2:
        return None
    if not fits(plan, rows, [knobs]):
        return None
    return Batch([(knobs, None)], Phase.CEILING, {"compute_only": True, "ceiling": "compute"},
                 event={"phase": Phase.CEILING, "count": 1, "again": bool(measured)})


def ceiling_again(plan: Any, rows: Sequence[dict], on_event: OnEvent) -> Iterator[Batch]:
    """``ceiling_again_batch``, announced, asked twice: after the first, from its row."""
    for _ in range(2):
        batch = ceiling_again_batch(plan, rows)
        if batch is None:
            return
        on_event("phase", batch.event)
        yield batch
