"""A run's plan: the options of ``python -m tuner run`` resolved into one value that every phase
of the run reads (workload, device space, references, trial settings, the trial count and the
time budget), with the budget terms derived from it (the follow-ups' share, the search's time,
the trials at once).

Made, and every option checked, by ``tuner.option_checks.make_plan``; the search's policy (which
values the device space keeps, where the search starts) is ``tuner.search_policy``.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tuner.budget as budget
import tuner.compile_finalists as compiling
import tuner.leaderboard as leaderboard
from tuner._deprecated import Replacement, moved
from tuner.followup_policy import OWN_CEILINGS, REMEASURE_ROUNDS, FollowupPolicy
from tuner.history import History, TrialRow
from tuner.knobs import Knobs
from tuner.probe import ComputeCurve, InputRate
from tuner.searcher import MemoryLimits, SearchSpec
from tuner.settings import RunOptions, TrialSettings
from tuner.space import Space
from tuner.status import TELLS_MEMORY, Phase, Status
from tuner.workload import Workload

_CEILING_TRIALS = len(OWN_CEILINGS)
"""``CEILING_TRIALS``'s value while it is deprecated: the split now asks the follow-up policy
(``FollowupPolicy.need``)."""


SCREEN_WINDOW_SHARE = 0.5
"""A screening trial's window is this share of the run's ``window_s`` (a window still ends at
the first step past it, so it holds at least one step): a screened trial's time is mostly its
window, and its figure only has to pick the finalists, which are measured in full windows."""


@dataclass(frozen=True)
class Resources:
    """Where the trials run: the device type, the GPUs, and the CPUs of the smallest node that
    runs trials (this machine, or a connected cluster: ``tuner.ray_runtime.cluster_resources``)."""
    device: str
    gpus: int
    node_cpus: int


@dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
    """A run, resolved and validated before any trial (bad input fails in
    ``tuner.option_checks.make_plan``).

    A value: what changes during a run (the memory probe's batch cap, the accelerator type
    being tuned, the hardware key Ray reports) makes a new plan (``with_batch_bound``,
    ``for_accelerator``, ``with_hardware_key``)."""

    options: RunOptions
    workload: Workload
    space: Space
    """The search space as loaded (the workload's or --space)."""
    device: str
    """'cpu' or 'cuda'."""
    gpus: int
    node_cpus: int
    """CPUs of the smallest node that runs trials (caps num_workers)."""
    scale: str
    data_dir: Path
    samples: int
    """Samples in the dataset (caps batch_size)."""
    device_space: Space
    """The space this run samples: device-specific, capped, global batch applied."""
    references: tuple[tuple[str, Knobs], ...]
    """(name, knobs as run) of the workload's reference configurations."""
    settings: TrialSettings
    trials: int | None
    """Search trials in all, references included (None: until the time budget)."""
    run_id: str
    max_host_memory_mb: float | None
    prior_rows: tuple[dict, ...] = ()
    """A resumed run's rows."""
    hardware_key: str | None = None
    """The trials' hardware key, known once Ray runs (on a cluster a GPU worker decides)."""
    accelerator_type: str | None = None
    """The accelerator type being tuned on a heterogeneous cluster (one search per type)."""
    type_slots: int = 0
    """Trials that run at once on that accelerator type."""
    notes: tuple[str, ...] = ()
    """One line each about an option that does nothing in this run (``--max-memory`` on the
    CPU device, ``--warm-start`` with no earlier rows), for the CLI to print."""
    time_budget_s: float | None = None
    """Seconds the whole run may take: ``--time-budget``, or without it the default
    (``default_time_budget_s``); None: no time budget."""
    deadline_monotonic: float | None = None
    """When the run must end, on the driver's ``time.monotonic()`` clock (``with_deadline``,
    as the run starts); None: no deadline."""
    planned_at: float | None = None
    """When the run began (``time.monotonic()``): ``make_plan``'s start
    (``tuner.option_checks``), so that the data checks and the FLOP count (seconds on a busy
    machine) are inside the time budget, or the process's launch for the command line
    (``launched_at``)."""
    from_launch: bool = False
    """``planned_at`` is the process's launch (``launched_at``): the run counts its budget from
    there however long ago, not from at most 60 s ago as for a plan made long before."""
    compute_curve: ComputeCurve | None = None
    """The machine's compute curve from the memory probe's timed steps
    (``tuner.search_policy.with_compute_curve``); None: no probe, or one that timed too
    little."""
    anchors: tuple[tuple[str, Knobs], ...] = ()
    """(name, knobs as run) of the machine's structured points the search starts from after
    the references (``tuner.search_policy.anchor_points``)."""
    input_rates: tuple[InputRate, ...] = ()
    """The input pipeline's rates the memory probe measured (``tuner.probe.measure_input``)."""
    cudnn_at_finalists: bool = False
    """``cudnn_benchmark`` is decided at the finalists (``tuner.search_policy``): the screening
    trials run with it off, and the re-measurement measures each finalist with it on and the
    first-ranked with it off too (``tuner.followups.remeasure_configs``)."""
    compile_at_finalists: str | None = None
    """The ``torch.compile`` mode decided at the finalists (``tuner.search_policy``; None: not):
    the search screens eager, and the re-measurement measures the first-ranked compiled in this
    mode beside its eager self (``tuner.compile_finalists``, ``tuner.compile_payback``)."""

    @property
    def metric(self) -> str:
        return self.options.metric

    @property
    def mode(self) -> str:
        return self.options.mode

    @functools.cached_property
    def prior_history(self) -> History:
        """The resumed run's rows, typed, for the accelerator type being tuned."""
        return History.of(self.prior_rows).on_type(self.accelerator_type)

    @property
    def prior_search_rows(self) -> list[dict]:
        """The resumed run's search rows for the accelerator type being tuned."""
        return [r.raw for r in self.prior_history.search()]

    @property
    def remaining_trials(self) -> int | None:
        """Search trials still to run (None: no trial budget)."""
        if self.trials is None:
            return None
        return max(0, self.trials - len(self.prior_search_rows))

    @property
    def reference_params(self) -> list[tuple[str, dict, Knobs]]:
        """References still to measure: (name, their parameters in the device space, knobs)."""
        done = {r.reference for r in self.prior_history if r.reference}
        return [(name, self.device_space.project(knobs), knobs)
                for name, knobs in self.references if name not in done]

    @property
    def anchor_params(self) -> list[tuple[str, dict, Knobs]]:
        """The anchors as (name, their parameters in the device space, knobs); one the space
        cannot describe is left out."""
        from tuner.errors import SpaceError
        out = []
        for name, knobs in self.anchors:
            try:
                out.append((name, self.device_space.project(knobs), knobs))
            except (SpaceError, ValueError):
                continue
        return out

    @property
    def screen_windows(self) -> int:
        """Windows of a screening trial; 0 (no screening) without finalists (``--confirm 0``)
        or when it would not be shorter than a full trial."""
        n = self.options.screen_windows
        return n if 0 < n < self.settings.windows and self.options.confirm > 0 else 0

    @property
    def screen_window_s(self) -> float:
        """Seconds of a screening trial's window (``SCREEN_WINDOW_SHARE`` of the run's); 0
        when nothing is screened."""
        return SCREEN_WINDOW_SHARE * self.settings.window_s if self.screen_windows else 0.0

    @property
    def should_probe(self) -> bool:
        """Whether the memory probe runs: ``--probe on|off``; with 'auto', on CUDA, with
        ``--max-host-memory``, or for a workload that declares a device memory of its own
        (``Workload.device_memory_bound``)."""
        if self.options.probe != "auto":
            return self.options.probe == "on"
        return (self.device == "cuda" or self.max_host_memory_mb is not None
                or self.workload.device_memory_bound)

    def search_spec(self) -> SearchSpec:
        """What the searcher needs from this plan."""
        return SearchSpec(
            space=self.device_space, metric=self.metric, mode=self.mode,
            sampler=self.options.sampler,
            # a resumed run must not replay proposals
            seed=self.options.seed + len(self.prior_rows),
            trials=self.trials, references=tuple(self.reference_params),
            reference_count=len(self.references),
            limits=MemoryLimits(self.options.max_memory, self.max_host_memory_mb),
            seed_rows=tuple(self._seed_rows()),
            deadline_unix_s=self.settings.deadline_unix_s,
            followup_share=self.followup_share(),
            window_s=self.settings.window_s, anchors=tuple(self.anchor_params),
            screen_windows=self.screen_windows, screen_window_s=self.screen_window_s,
            settings=self.settings, reused=self.reuses_trial_processes)

    def _seed_rows(self) -> list[tuple[dict, bool]]:
        """Rows the search starts from, each with whether a proposal equal to it is answered
        from it instead of measured: the resumed run's own rows (always), and with --warm-start
        earlier rows of this workload, scale and hardware (unless --remeasure)."""
        # A stopped trial's partial measurement too, as the searcher was told it when it ran.
        seeds = [(r.raw, True) for r in self.prior_history.search() if r.status in TELLS_MEMORY
                 or (r.status in (Status.PRUNED, Status.TIMEOUT) and r.figure(self.metric))]
        if self.options.warm_start:
            table = leaderboard.read(self.options.results, workload=self.workload.name,
                                     hardware_key=self.hardware_key)
            for r in table.to_pylist():
                if is_earlier_row(r, self.run_id, self.scale):
                    seeds.append((r, not self.options.remeasure))
        return seeds

    def launched_at(self, launched_monotonic: float) -> "Plan":
        """The plan whose time budget counts from ``launched_monotonic`` (``time.monotonic()``
        of this process, before ``make_plan``: the command line's launch), not from planning."""
        return replace(self, planned_at=min(launched_monotonic, self.planned_at or math.inf),
                       from_launch=True)

    def budget_start(self) -> float:
        """When the time budget started (``time.monotonic()``): the command's launch
        (``from_launch``), else planning, at most ``budget.PLAN_AGE_S`` ago
        (``tuner.budget.budget_start``)."""
        return budget.budget_start(self.planned_at, self.from_launch, time.monotonic())

    def with_batch_bound(self, max_batch: int) -> "Plan":
        """The plan with the searched batch size ending at the memory probe's bound, which may
        lie above the space file's ``high`` (``Space.with_batch_high``)."""
        return replace(self, device_space=self.device_space.with_batch_high(max_batch))

    def with_hardware_key(self, key: str) -> "Plan":
        return replace(self, hardware_key=key)

    def with_deadline(self, deadline_monotonic: float | None) -> "Plan":
        """The plan whose run ends at ``deadline_monotonic`` (``time.monotonic()`` of this
        process; None: no deadline). Its trials get the same instant on the wall clock
        (``TrialSettings.deadline_unix_s``: they run in other processes, maybe on other nodes,
        whose monotonic clocks differ) and stop at the first step boundary past it."""
        unix = (None if deadline_monotonic is None
                else time.time() + (deadline_monotonic - time.monotonic()))
        return replace(self, deadline_monotonic=deadline_monotonic,
                       settings=replace(self.settings, deadline_unix_s=unix))

    def time_left_s(self) -> float | None:
        """Seconds until the run's deadline, >= 0; None when the run has no time budget."""
        if self.deadline_monotonic is None:
            return None
        return max(0.0, self.deadline_monotonic - time.monotonic())

    def search_time_s(self) -> float | None:
        """Seconds the search may take if the budget were split now: the time left less
        ``followup_share()`` of it, kept for the re-measurement and the ceilings; None: no
        budget. The searcher splits the budget itself, once a trial has measured
        (``tuner.searcher.ConstrainedSearch.deadline_unix_s``)."""
        return budget.search_time_s(self.time_left_s(), self.followup_share(), self.time_budget_s)

    @property
    def reuses_trial_processes(self) -> bool:
        """Whether a trial runs in a process an earlier trial of the run ran in, keeping what
        cuDNN autotuned there: Ray Tune reuses trial processes except under
        ``--max-host-memory`` (``tuner.driver``), and a data-parallel trial starts its ranks
        anew (Ray Train); with several trials at once (``one_trial_at_a_time``) the next one
        may run in another process."""
        return (self.max_host_memory_mb is None and self.options.world_size <= 1
                and self.one_trial_at_a_time)

    def trials_at_once(self, alive_nodes: int = 1) -> int:
        """Trials run at once (``tuner.driver``): one per device (a data-parallel trial's
        world size of them: Ray Train starts its run only when every rank's resources are
        free), one per node of a CPU cluster of ``alive_nodes``, else one."""
        n = self.settings.world_size
        if self.accelerator_type is not None:
            return max(1, self.type_slots // n)
        if self.device == "cuda":
            return max(1, self.gpus // n)
        if n > 1 or self.options.address is None:
            return 1
        return max(1, alive_nodes)

    @property
    def one_trial_at_a_time(self) -> bool:
        """Whether the run's trials run one after another in one place, so that the next
        trial runs where the last one ran: on this machine, ``trials_at_once`` 1. On a
        cluster a trial may run on another node: never assumed."""
        return self.options.address is None and self.trials_at_once() == 1

    @functools.cached_property
    def earlier_trial_ids(self) -> frozenset[str]:
        """The ``trial_id`` of the rows an earlier command of this run recorded (``--resume``):
        their trial processes are gone, and what they kept (cuDNN's autotuning at their
        shapes) with them."""
        return frozenset(r.trial_id for r in History.of(self.prior_rows) if r.trial_id)

    @property
    def remeasure_rounds(self) -> int:
        """The re-measurement's rounds, ``REMEASURE_ROUNDS`` (for the modules below this one)."""
        return REMEASURE_ROUNDS

    @property
    def round_windows(self) -> int:
        """Windows per re-measurement round: the rounds together about twice the search's
        windows (as one re-measurement with twice the windows was), at least 2 per round (a
        spread)."""
        return max(2, math.ceil(2 * self.settings.windows / REMEASURE_ROUNDS))

    def followup_share(self) -> float:
        """Share of the time left kept for the follow-ups (``tuner.budget.followup_share``) of
        what the follow-up policy says they measure (``FollowupPolicy.need``: the finalists
        and the references in its rounds, the winner's own ceilings), weighed against the
        search's trials (a screened trial measures its screening windows), at most
        ``budget.max_followup_share`` of this run's budget; 0 without follow-ups; and the
        compiled finalist's compiles on top (``tuner.compile_finalists.followup_share``)."""
        need = FollowupPolicy.of(self).need(len(self.references))
        return compiling.followup_share(self, budget.followup_share(
            trials=self.trials, windows=self.screen_windows or self.settings.windows,
            round_windows=need.round_windows, remeasured=need.configs, rounds=need.rounds,
            ceilings=need.ceilings, budget_s=self.time_budget_s))

    def for_accelerator(self, accelerator: str | None, *, type_slots: int,
                        node_cpus: int) -> "Plan":
        """The plan of one accelerator type's search (trials pinned to its nodes)."""
        return replace(self, accelerator_type=accelerator, type_slots=type_slots,
                       node_cpus=node_cpus,
                       settings=replace(self.settings, accelerator_type=accelerator))


def is_earlier_row(row: dict, run_id: str, scale: str) -> bool:
    """A row ``--warm-start`` seeds the search with: another run's measured search or
    re-measure row at this scale."""
    typed = TrialRow.of(row)
    return (typed.run_id != run_id and typed.scale == scale and typed.status in TELLS_MEMORY
            and typed.phase in (Phase.SEARCH, Phase.REMEASURE))


__getattr__ = moved(__name__, {
    **{name: "tuner.budget" for name in ("FOLLOWUP_SHARE", "MAX_FOLLOWUP_SHARE", "PLAN_AGE_S")},
    "CEILING_TRIALS": Replacement("tuner.plan:_CEILING_TRIALS",
                                  "use tuner.followup_policy.FollowupPolicy.need(...).ceilings")})
