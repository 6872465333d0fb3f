"""The Python API: ``tuner.tune(...)`` runs what ``python -m tuner run`` runs and returns the
answer as values, for notebooks and scripts (as ``study.optimize`` does for Optuna and
``Tuner.fit()`` for Ray Tune). The command line is a thin layer over it.

    import tuner
    result = tuner.tune("ddpm", trials=6, device="cpu")
    result.best.samples_per_sec, result.speedup["baseline"]
    print(result.to_python())

With several world sizes (``world_size=[1, 2]``) each is a run of its own, one after another
under an equal share of the time budget, and ``tune`` returns a ``ScalingResult`` with their
scaling efficiency (``tuner.scaling``), as ``run --world-size 1,2`` prints it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

import tuner._deprecated as deprecation
import tuner.winner as winner
from tuner.driver import RunSummary, planned, run
from tuner.errors import TunerError
from tuner.knobs import Knobs
from tuner.scaling import WorldSize, scaling, scaling_lines, size_runs, world_sizes
from tuner.settings import RunOptions

if TYPE_CHECKING:  # pandas and the workload contract load only when used
    import pandas as pd
    import pyarrow as pa

    from tuner.plan import Plan
    from tuner.workload import Workload

_OPTIONS = tuple(f.name for f in dataclasses.fields(RunOptions)
                 if f.name not in ("workload", "trials", "time_budget_s", "device", "space_file",
                                   "results", "data"))
"""RunOptions fields ``tune`` takes as ``**options`` (the rest are its named arguments)."""


class WinnerRow(dict):
    """The winner's leaderboard row (``tuner.leaderboard.SCHEMA``). The derived keys this row
    carried up to 0.2 (``speedup_vs_baseline``, ``ceiling_samples_per_sec``,
    ``attainable_samples_per_sec`` and the others of ``tuner.leaderboard.best_row``) are still
    read, by ``row[key]`` and ``row.get(key)``, until tuner 0.4.0, with a
    ``TunerDeprecationWarning`` naming ``Best.answer`` (``tuner.winner.Answer``), which holds
    them as attributes."""

    def __init__(self, row: dict, rows: list[dict]):
        super().__init__(row)
        self._rows = rows

    def _derived(self, key: str) -> Any:
        from tuner._best_row import best_row
        derived = best_row(self._rows) or {}
        if key not in derived:
            raise KeyError(key)
        deprecation.warn(f"TuneResult.best.row[{key!r}]", "read TuneResult.best.answer, a "
                         "tuner.winner.Answer (answer.to_dict() has every derived key)",
                         stacklevel=3)
        return derived[key]

    def __missing__(self, key: str) -> Any:
        return self._derived(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            return dict.get(self, key)
        try:
            return self._derived(key)
        except KeyError:
            return default


@dataclass(frozen=True)
class Best:
    """The winner of a run: its knobs and its throughput (from the re-measurement when the run
    had one: ``phase`` says which)."""

    knobs: Knobs
    samples_per_sec: float
    """Median over the measurement windows, samples/sec; with re-measured rounds, the geometric
    mean of their medians."""
    trial_id: str
    phase: str
    """'search' or 'remeasure'."""
    row: dict
    """The whole leaderboard row (``tuner.leaderboard.SCHEMA``), figures as in ``answer.row``."""
    answer: winner.Answer
    """The winner with its speed-ups over the references, ties, ceilings and the attainable
    rate (``tuner.winner.best``)."""


@dataclass(frozen=True)
class TuneResult(RunSummary):
    """What a run found: the driver's ``RunSummary`` (``run_id``, ``workload`` as named in the
    leaderboard, ``device``, ``scale``, this run's ``rows``, ``wall_s``, ``results_dir``) with
    the answer read from it."""

    notes: tuple[str, ...] = ()
    """One line each about an option that did nothing in this run (``--max-memory`` on the
    CPU device, ``warm_start`` with no earlier rows); printed at the start with ``progress``."""

    @property
    def best(self) -> Best | None:
        """The fastest successful configuration (``tuner.winner.best``'s rule: the
        re-measured figures when there are any; on a cluster of several accelerator types,
        that of the type whose trials finished last: each type has its own answer in
        ``rows``), or None when no trial succeeded."""
        answer = winner.best(self.rows)
        if answer is None:
            return None
        return Best(answer.knobs, answer.samples_per_sec, answer.row["trial_id"],
                    answer.phase, WinnerRow(answer.row, self.rows), answer)

    @property
    def speedup(self) -> dict[str, float]:
        """The winner's speed-up over each reference that was measured, e.g.
        ``{"baseline": 1.8, "recommended": 1.1}`` (samples/sec ÷ samples/sec)."""
        best = self.best
        if best is None:
            return {}
        refs = (best.answer.baseline, best.answer.recommended)
        return {ref.name: ref.ratio for ref in refs if ref.ratio}

    @property
    def leaderboard(self) -> "pd.DataFrame":
        """This run's rows as a pandas DataFrame, ranked as ``python -m tuner leaderboard``
        ranks them (the fastest first, failed trials last)."""
        import pandas as pd

        import tuner.leaderboard as leaderboard
        return pd.DataFrame(leaderboard.ranked(self.table), columns=leaderboard.SCHEMA.names)

    @property
    def table(self) -> "pa.Table":
        """This run's rows as an Arrow table with the leaderboard's schema."""
        import pyarrow as pa

        import tuner.leaderboard as leaderboard
        return pa.Table.from_pylist([leaderboard.normalise_row(r) for r in self.rows],
                                    schema=leaderboard.SCHEMA)

    def to_python(self) -> str:
        """The winner as Python to paste into a training script: what ``tuner best --format
        python`` prints (its data path's batches included).

        Raises:
            TunerError: no trial of the run succeeded, or its data path needs a
                ``Workload.sample_path`` the workload does not have."""
        best = self.best
        if best is None:
            raise TunerError(f"no trial of run {self.run_id} succeeded: nothing to paste")
        from tuner.trial.validate import best_code  # what `tuner best --format python` prints
        return best_code(best.row["workload"], best.knobs, dict(best.row))


@dataclass(frozen=True)
class ScalingResult:
    """What ``tune(..., world_size=[1, 2, ...])`` found: a run per world size, in the order
    given, each a search of its own under an equal share of ``time_budget_s``, and what each
    extra rank bought."""

    runs: Mapping[int, TuneResult]
    """World size -> its run's ``TuneResult``, in the order given."""
    world_sizes: tuple[WorldSize, ...]
    """The best of each world size with its scaling efficiency and, given ``gpu_hour_cost``,
    its cost per million samples (``tuner.scaling.scaling``), smallest world size first; empty
    when no trial succeeded."""

    def lines(self) -> list[str]:
        """The lines ``run --world-size 1,2`` prints at the end (``tuner.scaling``)."""
        return scaling_lines(self.world_sizes)


def tune(workload: "str | Workload", *, trials: int | None = None,
         time_budget_s: float | None = None, device: str = "auto", space: str | None = None,
         results: str = "tuner-results", data: str | None = None, progress: bool = True,
         on_event: Callable[[str, dict], None] | None = None,
         **options: Any) -> "TuneResult | ScalingResult":
    """Tune a workload's training throughput: memory probe (when asked for), search,
    re-measurement of the best, ceilings. The same run as ``python -m tuner run``; every trial
    is recorded in ``<results>/leaderboard`` as it finishes.

    Args:
        workload: a built-in name ('ddpm'), an import path ('pkg.module:attribute' or
            'path/to/file.py:attribute'), or a ``tuner.workload.Workload`` instance.
        trials: trials in all, references included (default: 12 on CPU, 40 on CUDA, three
            times that when searched trials are screened, as they are by default).
        time_budget_s: seconds for the run.
        device: 'auto', 'cpu' or 'cuda'.
        space: a search-space YAML file (default: the workload's own).
        results: results directory or URI.
        data: the dataset (default: the workload's embedded data).
        progress: print the plan, a line per trial and the closing summary, as the CLI does
            (False: silent).
        on_event: instead of that, ``on_event(kind, data)`` receives the run's events
            ('start', 'probe', 'phase', 'trial', 'complete'; see ``tuner.progress``).
        **options: any other field of ``tuner.settings.RunOptions`` (``seed``, ``sampler``,
            ``scale``, ``max_memory``, ``confirm``, ``resume``, ...), named as there;
            ``world_size`` may also be a list of rank counts (``[1, 2]``, or ``"1,2"``) to
            compare (``tuner.scaling.size_runs``: a run per size, one after another, the time
            budget shared equally).

    Returns:
        A ``TuneResult``; ``result.best`` is None when no trial succeeded (their errors are in
        ``result.leaderboard``). With several world sizes, a ``ScalingResult`` holding one
        per size and their scaling efficiency.

    Raises:
        TunerError: bad input, in one line naming the value and what is accepted, found
            before any trial.
        tuner.errors.RunInterrupted: Ctrl-C, SIGTERM or SIGHUP; the finished trials are in the
            leaderboard and ``tune(..., resume=exc.run_id)`` continues the run.
    """
    _check_option_names(options)
    sizes = world_sizes(options.pop("world_size", 1))
    run_options = RunOptions(workload=workload, trials=trials, time_budget_s=time_budget_s,
                             device=device, space_file=space, results=results, data=data,
                             world_size=sizes[0], **options)
    if len(sizes) == 1:
        return _tune_one(run_options, progress, on_event)
    from rich.console import Console
    printed = on_event is None and progress
    runs = {}
    for index, one in enumerate(size_runs(run_options, sizes)):
        if printed:
            Console().print(f"[bold]world size {one.world_size}[/bold] ({index + 1} of "
                            f"{len(sizes)})")
        runs[one.world_size] = _tune_one(one, progress, on_event)
    found = ScalingResult(MappingProxyType(runs), scaling(
        [row for result in runs.values() for row in result.rows], run_options.gpu_hour_cost))
    for line in found.lines() if printed else ():
        Console().print(line, highlight=False)
    return found


def _tune_one(run_options: RunOptions, progress: bool,
              on_event: Callable[[str, dict], None] | None) -> TuneResult:
    """One run of ``run_options``, printed as ``tune`` says (``progress``, ``on_event``)."""
    printer = None
    if on_event is None and progress:
        from rich.console import Console

        from tuner.progress import Progress
        printer = Progress(Console())
        on_event = printer.on_event
    try:
        with planned(run_options) as plan:
            if printer is not None:
                for note in plan.notes:  # an option that does nothing here, said once
                    printer.console.print(f"note: {note}", highlight=False, soft_wrap=True)
                printer.starting(plan)  # until the first event: Ray's start, the probe
            result = tune_plan(plan, on_event)
    finally:
        if printer is not None:
            printer.close()
    if printer is not None:
        printer.print_summary(result)
    return result


def _check_option_names(options: dict[str, Any]) -> None:
    """Raise TunerError naming an unknown ``**options`` key, the closest accepted one and all."""
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        import difflib
        close = difflib.get_close_matches(unknown[0], _OPTIONS + ("trials", "time_budget_s"), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise TunerError(f"tune(): unknown option {', '.join(unknown)}{hint}; accepted: trials, "
                         f"time_budget_s, device, space, results, data, {', '.join(_OPTIONS)}")


def tune_plan(plan: "Plan", on_event: Callable[[str, dict], None] | None = None) -> TuneResult:
    """Run a plan made by ``tuner.driver.planned`` (what the CLI does, with its progress
    printer) and return the result. Raises as ``tune``."""
    summary = run(plan, on_event=on_event)
    return TuneResult(**vars(summary), notes=tuple(plan.notes))
