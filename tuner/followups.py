"""What the run measures after its search, planned from the rows recorded so far: a reference
retried after a transient failure, the re-measurement of the best configurations beside the
references in interleaved rounds (the winner and its speed-ups are read from these), and the
ceilings of the winner and of each data path the search tried (``tuner.ceilings`` reads
them), each sized to the time left.

What the rounds keep is decided by ``tuner.followup_policy.FollowupPolicy.plan`` (a
``FollowupPlan`` value); this module executes it as batches and prices their trials
(``Pricer``: ``tuner.costs.CostModel`` and ``tuner.compile_finalists``). Functions of a
``tuner.plan.Plan`` and the run's rows: the leaderboard dicts (the recorder's list, read anew
before each batch) or a ``tuner.history.History``, typed once (``history_of``).
No Ray, no torch: the driver (``tuner.driver``) runs the batches as trials of its Ray Tune
experiment, and ``followups`` asks for the next batch only once the last one's rows are
recorded, so a resumed run measures only what its rows lack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Iterator, Sequence, Union

import tuner.budget as budget
import tuner.compile_finalists as compiling
import tuner.windows as rule
from tuner._deprecated import Replacement, moved
from tuner.costs import CostModel, TrialCost, TrialShape
from tuner.followup_policy import (
    CAN_WIN_FRACTION,  # noqa: F401  (its name here since 0.2)
    Config,
    FollowupPlan,
    FollowupPolicy,
    with_cudnn_benchmark,  # noqa: F401  (its name here since 0.2)
)
from tuner.history import History, TrialRow
from tuner.knobs import COMPUTE_SWITCHES, Knobs
from tuner.plan import Plan
from tuner.space import candidates
from tuner.status import Phase, Status
from tuner.winner import best as winning

Rows = Union[Sequence[Mapping[str, Any]], History]
"""The run's rows: leaderboard dicts (``tuner.leaderboard`` columns) or a typed ``History``."""

Ceiling = tuple[str, Knobs, str]
"""A ceiling to measure: its name (its kind, followed by ' (data_path=P)' for a data path other
than the winner's), knobs, and mode ('compute_only' or 'loader_only')."""

OnEvent = Callable[[str, dict], None]
"""``on_event(kind, data)``: each batch's 'phase' event as a dict (``Event.data``;
``tuner.progress`` prints it)."""

TRANSIENT_ERRORS = ("DataLoader worker failure", "died", "killed")
"""Error texts of a failure that may not recur: a DataLoader worker died (``tuner.trial.failures``'s
prefix), Ray lost the trial's process or node ('The actor died ...'), a process was killed.
Out-of-memory is a status of its own (``oom``), never transient."""


class Event(Mapping):
    """A follow-up phase's announcement: a frozen dataclass per kind, read as a mapping of its
    fields and ``phase`` (``data``: the dict ``on_event`` gets, which ``tuner.progress``
    prints). An output: the planning never reads one back."""
    phase: ClassVar[Phase]

    def data(self) -> dict[str, Any]:
        return {"phase": self.phase, **{f.name: getattr(self, f.name) for f in fields(self)}}

    def __getitem__(self, key: str) -> Any:
        return self.data()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data())

    def __len__(self) -> int:
        return len(self.data())


@dataclass(frozen=True)
class RetryEvent(Event):
    """References retried after a transient failure (``retry``: their names)."""
    phase = Phase.SEARCH
    count: int
    retry: list[str]


@dataclass(frozen=True)
class RoundsEvent(Event):
    """Rounds ``round`` to ``last_round`` of ``rounds`` (``count`` trials) of ``windows``
    windows each (``round_windows`` planned), ``dropped`` configurations left out, whether the
    compute-only ceiling keeps its time, and whether a cold compile's round runs alone."""
    phase = Phase.REMEASURE
    count: int
    round: int
    last_round: int
    rounds: int
    windows: int
    round_windows: int
    dropped: int
    ceiling_kept: bool
    compile_cold: bool


@dataclass(frozen=True)
class NoRoundEvent(Event):
    """The re-measurement left out: its first round of ``configs`` trials needs ``need_s``,
    ``left_s`` are left."""
    phase = Phase.REMEASURE
    configs: int
    need_s: float
    left_s: float
    count: int = 0
    no_time: bool = True


@dataclass(frozen=True)
class CeilingsEvent(Event):
    """The ceilings measured (``ceilings``) and those the time left out (``left_out``)."""
    phase = Phase.CEILING
    count: int
    ceilings: list[str]
    left_out: list[str]


@dataclass(frozen=True)
class CeilingAgainEvent(Event):
    """The winner's compute-only ceiling, measured ``again`` (or first after the others)."""
    phase = Phase.CEILING
    again: bool
    count: int = 1


@dataclass(frozen=True)
class Batch:
    """Configurations a follow-up phase measures next, one trial each, in order, with
    ``settings`` (``TrialSettings`` fields) changed for all of them and ``per_trial`` changes
    for each (None: none), and the event that announces it."""
    configs: list[Config]
    phase: Phase
    settings: dict = field(default_factory=dict)
    per_trial: list[dict] | None = None
    event: Event | None = field(default=None, compare=False)


def history_of(plan: Plan, rows: Rows) -> History:
    """The typed rows of the accelerator type being tuned (all of them on one type)."""
    return History.of(rows).on_type(plan.accelerator_type)


def followups(plan: Plan, rows: Sequence[Mapping[str, Any]], on_event: OnEvent
              ) -> Iterator[Batch]:
    """The follow-up batches, in order: ``retry_references``, ``rounds`` of the configurations
    the policy picks (``FollowupPolicy.finalists``), then (with ``options.ceiling``, once the
    rows have a winner, ``tuner.winner.best``: ceilings need one) ``ceilings`` and
    ``ceiling_again``. ``rows``: the run's rows, a list the caller appends each finished
    trial's row to before it asks for the next batch. Nothing when the time left is under
    ``budget.MIN_PHASE_S``."""
    if not budget.has_time(plan.time_left_s()):
        return
    yield from retry_references(plan, rows, on_event)
    _, configs = remeasure_configs(plan, rows)
    if configs:
        yield from rounds(plan, rows, configs, on_event)
    if plan.options.ceiling:  # (none without a winner: ceilings_batch)
        yield from ceilings(plan, rows, on_event)
        yield from ceiling_again(plan, rows, on_event)


def _announced(batch: Batch | None, on_event: OnEvent) -> Iterator[Batch]:
    """``batch`` (if any), its event sent first."""
    if batch is not None:
        on_event("phase", batch.event.data())
        yield batch


# ------------------------------------------------------------------------- the prices

class Pricer:
    """The prices of the run's next trials (``tuner.followup_policy.Prices``), from one
    ``CostModel.of_plan`` of the rows (the accelerator type's)."""

    def __init__(self, plan: Plan, rows: Rows) -> None:
        self.plan, self.history = plan, history_of(plan, rows)
        self.rows = self.history.dicts()
        self.model = CostModel.of_plan(plan, self.rows)

    def price(self, knobs: Knobs, windows: int, tuned: bool = False,
              changes: Mapping[str, Any] | None = None) -> TrialCost:
        """``CostModel.price`` of one more trial of ``knobs`` with ``windows`` windows of the
        run's length; ``tuned``: a trial of ``knobs`` planned before this one runs first. The
        run's ``TrialSettings`` with the trial's ``changes`` say what steady-state probes a
        trial of one window adds; a compile is priced by ``compile_finalists.repriced``."""
        shape = TrialShape.of(self.plan.settings, {**(changes or {}), "windows": windows})
        cost = self.model.price(knobs, shape, planned=[knobs] if tuned else ())
        return compiling.repriced(self.plan, self.rows, self.model, knobs, tuned, cost)

    def round_changes(self, knobs: Knobs, windows: int) -> dict[str, Any]:
        """Trial settings changes of a round's trial of ``knobs`` with ``windows`` windows:
        none, or for one window of steps the search timed as long (``tuner.windows.long_step``
        of ``CostModel.step_s``), no steady-state probes (``max_steady_probes`` 0). Such steps
        judge no steady state, yet after one warm-up step the trial cannot tell them long and
        would probe with one step each: a round of one window dearer than one of two."""
        if windows != 1:
            return {}
        step_s = self.model.step_s(knobs)
        if step_s is None or not rule.long_step(step_s, self.plan.settings.window_s):
            return {}
        return {"max_steady_probes": 0}

    def round_s(self, knobs: Knobs, windows: int, tuned: bool) -> float:
        return self.price(knobs, windows, tuned, self.round_changes(knobs, windows)).total_s

    def trial_s(self, knobs: Knobs) -> float:
        return self.price(knobs, self.plan.settings.windows).total_s

    def fits(self, knobs: list[Knobs]) -> bool:
        """Whether the time left holds one more trial of each of ``knobs``; always without a
        budget."""
        return budget.trials_fit(self.plan.time_left_s(), [self.trial_s(k) for k in knobs])


def price(plan: Plan, rows: Rows, knobs: Knobs, windows: int, tuned: bool = False,
          changes: Mapping[str, Any] | None = None) -> TrialCost:
    """``Pricer.price`` of one more trial of ``knobs`` (``rows``: the run's)."""
    return Pricer(plan, rows).price(knobs, windows, tuned, changes)


def cost_s(plan: Plan, rows: Rows, knobs: Knobs, windows: int, tuned: bool = False,
           changes: Mapping[str, Any] | None = None) -> float:
    """Seconds one more trial of ``knobs`` with ``windows`` windows takes in the run's time
    (``price``'s ``total_s``)."""
    return price(plan, rows, knobs, windows, tuned, changes).total_s


def batch_prices_s(plan: Plan, rows: Rows, batch: Batch) -> list[float]:
    """The price of each of ``batch``'s trials as planned, in seconds of the trial itself
    (``TrialCost.trial_s``: its row's ``priced_s``): with the batch's and its own settings
    changes, a configuration run earlier in the batch counted as run in the same process
    (cuDNN's autotuning paid once)."""
    pricer = Pricer(plan, rows)
    changes = batch.per_trial or [{} for _ in batch.configs]
    out, seen = [], set()
    for (knobs, _), change in zip(batch.configs, changes):
        settings = {**batch.settings, **change}
        windows = settings.get("windows", plan.settings.windows)
        out.append(pricer.price(knobs, windows, knobs in seen, settings).trial_s)
        seen.add(knobs)
    return out


# ------------------------------------------------------------------------- the retry

def transient(row: TrialRow | Mapping[str, Any]) -> bool:
    """True for a ``node_lost`` row (run again on the nodes left; a multi-rank trial whose
    ranks no longer fit them ends after Ray Train's worker-group start timeout, an ``error``),
    and an ``error`` row whose error may not recur (``TRANSIENT_ERRORS``)."""
    row = row if isinstance(row, TrialRow) else TrialRow.of(row)
    return row.status == Status.NODE_LOST or (
        row.status == Status.ERROR and any(p in (row.error or "") for p in TRANSIENT_ERRORS))


def retry_batch(plan: Plan, rows: Rows) -> Batch | None:
    """One search-phase trial of each reference whose only search trial failed for a
    transient reason (a reference is retried once), or None: none to retry, or the time left
    cannot hold them."""
    history = history_of(plan, rows)
    todo = []
    for name, _ in plan.references:
        tried = [r for r in history.search() if r.reference == name]
        if len(tried) == 1 and transient(tried[0]):
            todo.append((tried[0].knobs, name))
    if not todo or not Pricer(plan, history).fits([k for k, _ in todo]):
        return None
    return Batch(todo, Phase.SEARCH, event=RetryEvent(len(todo), [n for _, n in todo]))


def retry_references(plan: Plan, rows: Rows, on_event: OnEvent) -> Iterator[Batch]:
    """``retry_batch``, announced: without a retry the run has no speed-up over a reference
    whose only trial a killed worker or process ended."""
    yield from _announced(retry_batch(plan, rows), on_event)


# ------------------------------------------------------------------ the re-measurement

def remeasure_configs(plan: Plan, rows: Rows) -> tuple[list[Knobs], list[Config]]:
    """``FollowupPolicy.finalists`` of the run's rows: the finalists, and what the
    re-measurement measures (them and the references beside them)."""
    return FollowupPolicy.of(plan).finalists(history_of(plan, rows))


def round_plan(plan: Plan, rows: Rows, configs: list[Config]) -> FollowupPlan:
    """``FollowupPolicy.plan`` of re-measuring ``configs`` in the time left."""
    history = history_of(plan, rows)
    return FollowupPolicy.of(plan).plan(history, plan.time_left_s(), Pricer(plan, history),
                                        configs)


def round_batch(plan: Plan, rows: Rows, decided: FollowupPlan | list[Config], first: int,
                dropped: int = 0, windows: int | None = None) -> Batch | None:
    """The rounds of ``decided`` from ``first`` on, as one batch (A B C A B C ...), as many as
    the time left holds (``FollowupPolicy.next_rounds``); None when none is left to run. A
    compiled finalist whose trial measured nothing is not measured again; a cold searched
    compile's round runs alone (the next ones are planned from its row). (tuner 0.2's
    arguments, configurations with ``dropped`` and ``windows``, still read.)"""
    if not isinstance(decided, FollowupPlan):
        decided = FollowupPlan(tuple(decided), dropped, windows or plan.round_windows, 0, 0.0,
                               True)
    history = history_of(plan, rows)
    dicts = history.dicts()
    configs = [c for c in decided.configs
               if c[1] is not None or not compiling.compile_failed(dicts, c[0])]
    cold = compiling.compiles_cold(dicts, [k for k, ref in configs if ref is None])
    pricer = Pricer(plan, history)
    todo = FollowupPolicy.of(plan).next_rounds(history, decided, configs, first,
                                               plan.time_left_s(), pricer, cold)
    if not todo.todo:
        return None
    trials = [c for _, c in todo.todo]
    per_trial = _compile_capped(plan, pricer, trials, decided.windows)
    return Batch(trials, Phase.REMEASURE, {"windows": decided.windows},
                 per_trial=per_trial if any(per_trial) else None,
                 event=RoundsEvent(len(trials), todo.todo[0][0], todo.todo[-1][0],
                                   todo.rounds, decided.windows, plan.round_windows,
                                   decided.dropped if first == 1 else 0, todo.ceiling_kept,
                                   cold))


def _compile_capped(plan: Plan, pricer: Pricer, configs: list[Config],
                    windows: int) -> list[dict]:
    """Each round trial's settings changes (``Pricer.round_changes``), a compiled searched
    one's with its own deadline (``tuner.compile_finalists.with_deadlines``; a reference runs
    as written, to the run's)."""
    per_trial = [pricer.round_changes(k, windows) for k, _ in configs]
    batch = Batch(configs, Phase.REMEASURE, {"windows": windows}, per_trial=per_trial)
    capped = [k if ref is None else k.replace(compile="off") for k, ref in configs]
    return compiling.with_deadlines(plan, capped, per_trial,
                                    batch_prices_s(plan, pricer.history, batch))


def no_round_event(plan: Plan, rows: Rows, configs: list[Config]) -> NoRoundEvent | None:
    """The event saying the re-measurement is left out, when the time left cannot hold its
    first round; None when nothing is left to re-measure (a resumed run whose rounds are
    recorded)."""
    history = history_of(plan, rows)
    pricer = Pricer(plan, history)
    first = FollowupPolicy.of(plan).rounds_todo(history, configs, range(1, 2),
                                                plan.round_windows, pricer)
    if not first:
        return None
    need_s = sum(pricer.price(k, plan.round_windows).total_s for _, (k, _) in first)
    return NoRoundEvent(len(first), need_s, plan.time_left_s() or 0.0)


def rounds(plan: Plan, rows: Sequence[Mapping[str, Any]], configs: list[Config],
           on_event: OnEvent) -> Iterator[Batch]:
    """Re-measure ``configs`` in interleaved rounds as the policy decides (``round_plan``:
    the configurations kept, the windows of a round, the ceiling's time kept), one batch
    after another (``round_batch``; another for a round added by an impossible figure or
    after a cold compile's round). Says so when not even the first round fits
    (``no_round_event``)."""
    decided = round_plan(plan, rows, configs)
    first = 1
    while True:
        batch = round_batch(plan, rows, decided, first)
        if batch is None:
            event = no_round_event(plan, rows, list(decided.configs)) if first == 1 else None
            if event is not None:
                on_event("phase", event.data())
            return
        yield from _announced(batch, on_event)
        first = batch.event.last_round + 1


# ------------------------------------------------------------------------- the ceilings

def fitting_ceilings(plan: Plan, rows: Rows, todo: list[Ceiling]
                     ) -> tuple[list[Ceiling], list[str]]:
    """``FollowupPolicy.fitting_ceilings`` of ``todo`` in the time left: those whose trials
    it holds one after another, and the names of those left out."""
    return FollowupPolicy.fitting_ceilings(todo, plan.time_left_s(), Pricer(plan, rows))


def ceiling_kind(name: str) -> str:
    """The kind of a ceiling ``name`` (the ``ceiling`` column: 'machine-loader' of
    'machine-loader (data_path=cache)')."""
    return name.partition(" ")[0]


def path_bests(plan: Plan, rows: Rows) -> dict[str, Knobs]:
    """Data path -> the knobs of its best successful search row (``plan.metric``; a figure
    that cannot be true does not count), best path first."""
    out: dict[str, Knobs] = {}
    for r in history_of(plan, rows).ranked(plan.metric, plan.mode, sound=True):
        out.setdefault(r.data_path, r.knobs)
    return out


def machine_compute_knobs(plan: Plan, knobs: Knobs) -> Knobs:
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


def every_cpu_a_worker(plan: Plan, knobs: Knobs) -> Knobs:
    """``knobs`` with a DataLoader worker per CPU, or the search's most where more (a pipeline
    that waits: ``search_policy.workers_past_the_cores``), kept across epochs."""
    high = getattr(plan.device_space.domains.get("num_workers"), "high", 0)
    return knobs.replace(num_workers=max(plan.node_cpus, high), persistent_workers=True,
                         prefetch_factor=max(knobs.prefetch_factor or 2, 4))


def has_machine_compute(rows: Rows, knobs: Knobs | None = None) -> bool:
    """Whether ``rows`` hold a successful 'machine-compute' ceiling (whatever its data path:
    a compute-only trial reads no data) with every compute switch ``knobs`` has on
    (``tuner.knobs.COMPUTE_SWITCHES``; None: any): one measured without the winner's
    ``channels_last``, say, is no limit for it. The run's memory probe records one from its
    timed steps before the search (``tuner.driver.record_machine_limit``)."""
    on = [name for name in COMPUTE_SWITCHES if knobs is not None and getattr(knobs, name)]
    return any(r.ok and r.knobs is not None and all(getattr(r.knobs, name) for name in on)
               for r in History.of(rows).ceilings("machine-compute"))


def planned_ceilings(plan: Plan, rows: Rows, knobs: Knobs) -> list[Ceiling]:
    """Every ceiling of the winner ``knobs``, most important first: its own
    (``tuner.followup_policy.OWN_CEILINGS``: compute-only, loader-only, the machine's limits
    on its data path: 'machine-loader', none for 'device', which has no workers;
    'machine-compute', ``machine_compute_knobs``, unless the rows hold it:
    ``has_machine_compute``); for each other data path the search tried (best first), its
    machine limit and its best configuration's input pipeline ('path-loader'); on the CPU
    device, the one-core ceilings of the shared-cores model ('core-compute', and
    'core-loader' per data path: no workers). Clamped to the device."""
    path = knobs.data_path
    bests = {path: knobs, **{p: k for p, k in path_bests(plan, rows).items() if p != path}}
    todo: list[Ceiling] = [("compute", knobs, "compute_only"), ("loader", knobs, "loader_only")]
    if path != "device":
        todo.append(("machine-loader", every_cpu_a_worker(plan, knobs), "loader_only"))
    if not has_machine_compute(rows, knobs.clamp(plan.device)[0]):  # the probe's may hold it
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


def ceilings_batch(plan: Plan, rows: Rows) -> tuple[Batch | None, CeilingsEvent | None]:
    """What bounds the winner, as one batch, and its event: ``planned_ceilings``, each measured
    once per run (a kind and data path the run's rows hold is not measured again), the
    one-core ones with ``cpus`` 1. Those the time left cannot hold are left out, the least
    important first, and the event says so even when none is measured (batch None).
    (None, None): no winner, or nothing left to measure."""
    history = history_of(plan, rows)
    winner = winning(history.dicts())
    if winner is None:
        return None, None
    knobs = winner.knobs
    have = {(r.ceiling, r.data_path) for r in history.ceilings()}
    todo = [c for c in planned_ceilings(plan, history, knobs)
            if (ceiling_kind(c[0]), c[1].data_path) not in have]
    pricer = Pricer(plan, history)
    if pricer.fits([knobs]):
        todo, left_out = FollowupPolicy.fitting_ceilings(todo, plan.time_left_s(), pricer)
    else:  # not even the winner's own: none is started, and the run says so
        todo, left_out = [], [name for name, _, _ in todo]
    if not (todo or left_out):
        return None, None
    event = CeilingsEvent(len(todo), [name for name, _, _ in todo], left_out)
    if not todo:
        return None, event
    per_trial = [{"ceiling": ceiling_kind(name), mode: True,
                  **({"cpus": 1} if ceiling_kind(name).startswith("core-") else {})}
                 for name, _, mode in todo]
    return Batch([(config, None) for _, config, _ in todo], Phase.CEILING,
                 per_trial=per_trial, event=event), event


def ceilings(plan: Plan, rows: Rows, on_event: OnEvent) -> Iterator[Batch]:
    """``ceilings_batch``, announced (a ceiling left out is said even when none is measured)."""
    batch, event = ceilings_batch(plan, rows)
    if batch is None and event is not None:
        on_event("phase", event.data())
    yield from _announced(batch, on_event)


def ceiling_again_batch(plan: Plan, rows: Rows) -> Batch | None:
    """The winner's compute-only ceiling, when this run's rows lack it or hold one only that
    came out below the winner by more than the noise (``tuner.winner.Answer.ceiling_far_below``:
    a disturbed measurement; within the noise it is the pipeline's own rate, which a second
    trial would not change), and the time left holds it; else None. At most two per run."""
    history = history_of(plan, rows)
    winner = winning(history.dicts())
    if winner is None:
        return None
    knobs = winner.knobs
    measured = [r for r in history.ceilings("compute") if r.knobs == knobs]
    if (measured and not winner.ceiling_far_below) or len(measured) >= 2:
        return None
    if not Pricer(plan, history).fits([knobs]):
        return None
    return Batch([(knobs, None)], Phase.CEILING, {"compute_only": True, "ceiling": "compute"},
                 event=CeilingAgainEvent(bool(measured)))


def ceiling_again(plan: Plan, rows: Rows, on_event: OnEvent) -> Iterator[Batch]:
    """``ceiling_again_batch``, announced, asked twice: after the first, from its row."""
    for _ in range(2):
        batch = ceiling_again_batch(plan, rows)
        if batch is None:
            return
        yield from _announced(batch, on_event)


# ----------------------------------------- tuner 0.2's planning functions, for one release

def _parts(plan: Plan, rows: Rows) -> tuple[FollowupPolicy, History, Pricer]:
    history = history_of(plan, rows)
    return FollowupPolicy.of(plan), history, Pricer(plan, history)


def _v02_type_rows(plan: Plan, rows: Rows) -> list[Mapping[str, Any]]:
    return history_of(plan, rows).dicts()


def _v02_fits(plan: Plan, rows: Rows, knobs: list[Knobs]) -> bool:
    return Pricer(plan, rows).fits(knobs)


def _v02_round_trial_settings(plan: Plan, rows: Rows, knobs: Knobs, windows: int) -> dict:
    return Pricer(plan, rows).round_changes(knobs, windows)


def _v02_rounds_todo(plan: Plan, rows: Rows, configs: list[Config], rounds: range,
                     windows: int, timed: bool = True, reserve_s: float = 0.0) -> list:
    policy, history, prices = _parts(plan, rows)
    left = plan.time_left_s() if timed else None
    return policy.rounds_todo(history, configs, rounds, windows, prices,
                              None if left is None else left - reserve_s)


def _v02_ceiling_reserve_s(plan: Plan, rows: Rows, configs: list[Config]) -> float:
    policy, history, prices = _parts(plan, rows)
    return policy.reserve_s(history, configs, prices)


def _v02_required_configs(rows: Rows, configs: list[Config]) -> list[Config]:
    return FollowupPolicy.required(History.of(rows), configs)


def _v02_rounds_total(rows: Rows) -> int:
    return FollowupPolicy("samples_per_sec", "max", 0, False, 1).rounds_total(History.of(rows))


def _v02_all_rounds_fit(plan: Plan, rows: Rows, configs: list[Config], windows: int,
                        reserve_s: float = 0.0) -> bool:
    every = range(1, _v02_rounds_total(history_of(plan, rows)) + 1)
    return (len(_v02_rounds_todo(plan, rows, configs, every, windows, reserve_s=reserve_s))
            == len(_v02_rounds_todo(plan, rows, configs, every, windows, timed=False)))


def _v02_fitting_configs(plan: Plan, rows: Rows, configs: list[Config], windows: int
                         ) -> tuple[list[Config], int]:
    policy, history, prices = _parts(plan, rows)
    reserve_s = policy.reserve_s(history, configs, prices)
    kept = next((k for k, w, c in policy.candidates(history, configs) if w == windows
                 and _v02_all_rounds_fit(plan, rows, k, w, reserve_s if c else 0.0)),
                policy.required(history, configs))
    return kept, len(configs) - len(kept)


def _v02_fitting_round_windows(plan: Plan, rows: Rows, configs: list[Config]) -> int:
    return round_plan(plan, rows, configs).windows


_V02_INSTEAD = {
    "type_rows": "tuner.followups.history_of(plan, rows)",
    "fits": "tuner.followups.Pricer(plan, rows).fits",
    "round_trial_settings": "tuner.followups.Pricer(plan, rows).round_changes",
    "rounds_todo": "tuner.followup_policy.FollowupPolicy.rounds_todo",
    "ceiling_reserve_s": "tuner.followup_policy.FollowupPolicy.reserve_s",
    "required_configs": "tuner.followup_policy.FollowupPolicy.required",
    "rounds_total": "tuner.followup_policy.FollowupPolicy.rounds_total",
    "all_rounds_fit": "tuner.followups.round_plan(plan, rows, configs).fits",
    "fitting_configs": "tuner.followups.round_plan(plan, rows, configs)",
    "fitting_round_windows": "tuner.followups.round_plan(plan, rows, configs).windows",
}
"""The planning functions of tuner 0.2 that the follow-up policy replaced, and what to use."""

__getattr__ = moved(__name__, {name: Replacement(f"tuner.followups:_v02_{name}", f"use {use}")
                               for name, use in _V02_INSTEAD.items()})
