"""The run's time budget, in one place: its defaults, the share kept for the follow-ups, when a
phase is worth starting, how long a compile needs, and how long past
a deadline a trial may run. What one trial costs is ``tuner.costs``.

Units: every ``*_S`` is seconds, every ``*_SHARE`` a fraction of the run's budget. Clocks: the
driver keeps the run's deadline on its ``time.monotonic()`` (``Plan.deadline_monotonic``);
trials run in other processes, maybe on other nodes, and get the same instant on the wall clock
(``time.time()``: ``TrialSettings.deadline_unix_s``). The figures behind the defaults are in
docs/defaults.md.

Torch-free and Ray-free: the plan, the driver, the recorder, the searcher and the trial
harness all read it.
"""

from __future__ import annotations

from typing import Any, Sequence

from tuner._deprecated import moved

# ---------------------------------------------------------------------- the run's budget

DEFAULT_CUDA_TIME_BUDGET_S = 600.0
"""Time budget of a run on CUDA without ``--time-budget``: 10 minutes, probe, search,
re-measurement and ceilings included. Source: on one H200 a 200-s ddpm run answered 0.99 of the
machine's compute limit; a ``torch.compile`` trial needs ~100 s (``COMPILE_NEEDS_S``), so 10
minutes hold the eager search twice over and a few compiled trials (docs/defaults.md)."""

DEFAULT_CPU_TIME_BUDGET_S = 210.0
"""Time budget of the default run on CPU (neither ``--trials`` nor ``--time-budget``): 3 min
30 s, counted from the command's launch (its imports included), so that with ``BUDGET_GRACE_S``
and Ray's shut-down the run ends within 4 minutes on 2 quiet cores."""

BUDGET_GRACE_S = 10.0
"""A run with a time budget S ends within S + this many seconds: a trial stops at the first
step boundary past the deadline, a step that runs on (a long compile) is stopped by Ray Tune a
few seconds later, and Ray shuts down."""

LAUNCH_AGE_S = 15.0
"""A process older than this when it imported the command line was not started for one
command (a notebook or a test runner calling ``main``): its budget counts from planning."""

PLAN_AGE_S = 60.0
"""The most of a plan's age (``make_plan`` to its run) the time budget counts
(``budget_start``)."""

FOLLOWUP_SHARE = 0.2
"""Least share of the time budget kept for the re-measurement and the ceilings, and the share
when the search has no trial count (``--time-budget`` alone). With a trial count the share
follows the trials (``followup_share``), at most ``MAX_FOLLOWUP_SHARE``."""

MAX_FOLLOWUP_SHARE = 0.5
"""Most of the time left kept for the follow-ups, for a budget of ``FULL_SHARE_BUDGET_S`` or
more: the search is what finds the answer."""

FULL_SHARE_BUDGET_S = DEFAULT_CPU_TIME_BUDGET_S
"""A budget this long or longer (the default CPU run's) may keep ``MAX_FOLLOWUP_SHARE`` for the
follow-ups; a shorter one keeps less, down to ``FOLLOWUP_SHARE`` (``max_followup_share``): on
an H200 the fixed start-up (plan, Ray, probe, the trial process) took 15-34 s, and a 60-s run
that kept half its budget for four ceilings left its first trial 8-15 s, too little for one
full trial."""


def default_time_budget_s(device: str, trials: int | None) -> float | None:
    """The time budget of a run without ``--time-budget``, seconds: on CUDA
    ``DEFAULT_CUDA_TIME_BUDGET_S``; on CPU ``DEFAULT_CPU_TIME_BUDGET_S`` for the default run (no
    ``--trials`` either), None (no budget) when the user asked for a number of trials."""
    if device == "cuda":
        return DEFAULT_CUDA_TIME_BUDGET_S
    return DEFAULT_CPU_TIME_BUDGET_S if trials is None else None


def budget_start(planned_at: float | None, from_launch: bool, now: float) -> float:
    """When a run's time budget started, on the ``time.monotonic()`` clock: ``planned_at``
    (the command's launch when ``from_launch``, else ``make_plan``'s start, counted at most
    ``PLAN_AGE_S`` before ``now``); ``now`` when it is None."""
    if planned_at is None:
        return now
    return planned_at if from_launch else max(planned_at, now - PLAN_AGE_S)


def max_followup_share(budget_s: float | None) -> float:
    """The most of the time left a run of ``budget_s`` seconds (None: no budget) keeps for the
    follow-ups: ``FOLLOWUP_SHARE`` rising linearly to ``MAX_FOLLOWUP_SHARE`` at
    ``FULL_SHARE_BUDGET_S`` (60 s: 0.29; 210 s and more: 0.5)."""
    if budget_s is None:
        return MAX_FOLLOWUP_SHARE
    ramp = min(1.0, max(0.0, budget_s) / FULL_SHARE_BUDGET_S)
    return FOLLOWUP_SHARE + (MAX_FOLLOWUP_SHARE - FOLLOWUP_SHARE) * ramp


def followup_share(*, trials: int | None, windows: int, round_windows: int, remeasured: int,
                   rounds: int, ceilings: int, budget_s: float | None = None) -> float:
    """Share of the time left kept for the follow-ups, in [0, ``max_followup_share``].

    Args:
        trials: the search's trial count (None: until the budget; the share is then
            ``FOLLOWUP_SHARE``).
        windows: windows of a search trial, >= 1.
        round_windows: windows of a re-measurement trial.
        remeasured: configurations re-measured (0: no re-measurement).
        rounds: re-measurement rounds of each.
        ceilings: ceiling trials (0: none).
        budget_s: the run's time budget (None: none), which bounds the share
            (``max_followup_share``).

    Returns:
        0 without follow-ups; else the follow-up trials' share of all trials, each weighted by
        its windows plus the search's windows again for its warm-up and overhead (a
        re-measurement trial weighs (round_windows + windows) / (2 windows) of a search trial, a
        ceiling trial one), at least ``FOLLOWUP_SHARE``, at most ``max_followup_share``.
    """
    if remeasured <= 0 and ceilings <= 0:
        return 0.0
    if trials is None:
        return FOLLOWUP_SHARE
    weight = (round_windows + windows) / (2 * windows)
    units = remeasured * rounds * weight + ceilings
    return min(max_followup_share(budget_s), max(FOLLOWUP_SHARE, units / (units + trials)))


def search_time_s(left_s: float | None, share: float, budget_s: float | None) -> float | None:
    """Seconds the search may take: ``left_s`` less ``share`` of it (kept for the follow-ups),
    >= 0; None when there is no budget (``left_s`` or ``budget_s`` None). The share is of the
    time left, not of the budget: what has run before (the plan, Ray's start, the probe, the
    first trial process) is spent already, and the search does not pay for it twice."""
    if left_s is None or budget_s is None:
        return None
    return max(0.0, left_s * (1.0 - share))


def split_deadline_unix_s(now_unix_s: float, deadline_unix_s: float, share: float) -> float:
    """When the search ends (``time.time()``) if the budget is split at ``now_unix_s``: the run's
    ``deadline_unix_s`` less ``share`` of the time left then (``search_time_s``); the
    deadline itself when it has passed."""
    return now_unix_s + max(0.0, deadline_unix_s - now_unix_s) * (1.0 - share)


# ------------------------------------------------------------------------ phases and trials

MIN_PHASE_S = 3.0
"""The search, or the follow-ups, are not started with less time left than this: a trial's
set-up and first step take 1.5-3 s on 2 CPU cores (more on a loaded machine), so it would start
trials only to stop them."""

TUNE_STOP_GRACE_S = 4.0
"""Ray Tune stops an experiment this long after its trials' deadline (``time_budget_s``). A
trial stops itself at the first step boundary past its deadline; the recorder kills one still
inside a longer step (a compile) ``OVERDUE_S`` past it; Tune then stops what is left."""

def has_time(seconds: float | None) -> bool:
    """Whether a phase with ``seconds`` left (None: no budget) is worth starting
    (``MIN_PHASE_S``)."""
    return seconds is None or seconds >= MIN_PHASE_S


def tune_time_budget_s(seconds: float | None) -> float | None:
    """``TuneConfig.time_budget_s`` for an experiment whose trials must end ``seconds`` from
    now: that plus ``TUNE_STOP_GRACE_S``; None: no budget."""
    return None if seconds is None else seconds + TUNE_STOP_GRACE_S


def trials_fit(left_s: float | None, costs_s: Sequence[float]) -> bool:
    """Whether ``left_s`` seconds (None: no budget) hold trials costing ``costs_s``."""
    return left_s is None or left_s >= sum(costs_s)


# ------------------------------------------------------------------------ torch.compile

COMPILE_NEEDS_S = {"default": 90.0, "reduce-overhead": 120.0, "max-autotune": 600.0}
"""Seconds a ``torch.compile`` mode needs before its first step ends, for a trial that would
start one with less time left. Source: the ddpm U-Net's first default-mode compile on an H100
(~80 s, docs/benchmarks.md); reduce-overhead adds CUDA-graph capture; max-autotune benchmarks
kernel choices for minutes."""

COMPILE_NEEDS_CPU_S = {"default": 150.0, "reduce-overhead": 150.0, "max-autotune": 600.0}
"""``COMPILE_NEEDS_S`` on a CPU (Inductor's C++ kernels, built by the host's compiler). Source:
chargpt's first default-mode compile at the tiny scale took 112-126 s on 2 CPU cores at load
3.7-7.7 and 347 s at load 15 (bench/results/compile-cache-2026-12-02.txt,
bench/results/compile-finalists-2026-12-02-chargpt.txt); ddpm's U-Net took 878 s, a workload
this prior cannot hold, whose measured compile then prices its rounds
(``tuner.costs.CostModel.compile_s``). CUDA graphs do not exist on a CPU: reduce-overhead
compiles as default."""

COMPILE_WARM_SHARE = 0.3
"""A compile whose FX-graph and AOTAutograd caches an earlier trial filled (the run's one
compile cache, ``TrialSettings.compile_cache_dir``) is assumed to need this share of the cold
one until a warm one is measured. Source: on 2 CPU cores the warm first step took 3.5 % of the
cold one for ddpm and 8-20 % for chargpt (bench/results/compile-cache-2026-12-02.txt); 30 %
leaves room for dynamo's tracing, which no cache skips."""

COMPILE_MARGIN = 1.25
"""Factor on a workload's ``compile_s_hint``: the machine the hint was measured on is not this
one (the ddpm hint, 80 s, becomes 100 s)."""


COMPILE_TRIALS_IN_SEARCH = 3
"""A ``torch.compile`` mode is searched under a time budget only when the search holds this
many of its compiles (``compile_needs_s``), so that one compiled trial takes at most a third of
the search. Source: on an H200 a compiled ddpm trial (~100 s) costs about 25 eager screening
trials of a 5-minute run's ~170-s search (docs/defaults.md)."""


def compile_searched_from_s(needs_s: float) -> float:
    """The least search time (seconds) in which a ``torch.compile`` mode needing ``needs_s``
    (``compile_needs_s``) is searched: ``COMPILE_TRIALS_IN_SEARCH`` of its compiles."""
    return COMPILE_TRIALS_IN_SEARCH * needs_s


def compile_needs_s(mode: str, workload: Any, device_type: str) -> float:
    """Seconds a ``torch.compile`` ``mode`` ('default', 'reduce-overhead', 'max-autotune') is
    assumed to need before its first step ends. ``workload``: anything with a
    ``compile_s_hint`` (seconds or None; ``Workload.compile_s_hint``). On CUDA with a hint:
    the hint x ``COMPILE_MARGIN``, plus the CUDA-graph capture ``COMPILE_NEEDS_S`` adds for
    reduce-overhead. On a CPU ``COMPILE_NEEDS_CPU_S[mode]`` (the hints are GPU machines').
    Otherwise, and for max-autotune, ``COMPILE_NEEDS_S[mode]``. Raises KeyError for another
    mode."""
    if device_type == "cpu":
        return COMPILE_NEEDS_CPU_S[mode]
    hint = getattr(workload, "compile_s_hint", None) if device_type == "cuda" else None
    if hint is None or mode not in ("default", "reduce-overhead"):
        return COMPILE_NEEDS_S[mode]
    capture_s = COMPILE_NEEDS_S[mode] - COMPILE_NEEDS_S["default"]
    return hint * COMPILE_MARGIN + capture_s


def compile_refusal(mode: str, workload: Any, device_type: str,
                    left_s: float | None, warm: bool = False) -> str | None:
    """Why a trial must not start a ``torch.compile`` ``mode`` with ``left_s`` seconds left
    (None: no deadline), or None when it may: 'off' always may; otherwise the compile needs
    ``compile_needs_s``, ``COMPILE_WARM_SHARE`` of it where ``warm`` (the run's compile cache
    holds the configuration's compile). The reason is one line, for the trial's ``timeout``
    row."""
    if mode == "off" or left_s is None:
        return None
    needs_s = compile_needs_s(mode, workload, device_type) * (COMPILE_WARM_SHARE if warm else 1)
    if left_s >= needs_s:
        return None
    cache = " from the run's compile cache" if warm else ""
    return (f"set-up: torch.compile mode={mode} was not started "
            f"(it needs about {needs_s:.0f} s{cache}; {max(left_s, 0):.0f} s were left)")


# ---------------------------------------------------------------- past a trial's deadline

OVERDUE_S = 2.0
"""Seconds past its deadline a trial may still run before its process is killed."""

STEP_GRACE = 1.5
"""Past the search's deadline (the run goes on with its follow-ups in the same process), a
trial is left this many of its steps (``step_time_ms_p95`` of its last report) to stop itself
at a step boundary, up to ``STEP_GRACE_MAX_S``: a killed trial's process is gone, and the next
trial starts a new one."""

STEP_GRACE_MAX_S = 10.0
"""The most a trial past the search's deadline is waited for: about what a new trial process
costs (5.7-7 s on 2 CPU cores). A compile, whose first step is far longer, is killed at
``OVERDUE_S``: no step time is reported before it ends."""


def kill_at_unix_s(deadline_unix_s: float, run_deadline_unix_s: float | None,
                   step_ms: float | None) -> float:
    """When (``time.time()``) a trial still running past its ``deadline_unix_s`` is killed:
    ``OVERDUE_S`` after it; for a search trial whose run goes on (``run_deadline_unix_s``
    later), after ``STEP_GRACE`` of its steps (``step_ms``, its p95; None: none measured) when
    that is longer, at most ``STEP_GRACE_MAX_S`` and never past the run's deadline."""
    grace = OVERDUE_S
    if run_deadline_unix_s is not None and deadline_unix_s < run_deadline_unix_s and step_ms:
        grace = max(grace, min(STEP_GRACE * step_ms / 1000, STEP_GRACE_MAX_S,
                               run_deadline_unix_s - deadline_unix_s))
    return deadline_unix_s + grace


__getattr__ = moved(__name__, {name: "tuner.costs" for name in (
    "TRIAL_OVERHEAD_S", "CUDNN_AUTOTUNE_S", "trial_cost_s", "priced_step_s", "cudnn_autotune_s",
    "autotuned_s", "per_step_warmup_s", "first_window_need_s")})
