"""Command line: ``python -m tuner COMMAND``, where COMMAND is run, best, leaderboard, report,
validate, profile, export, workloads or check-cluster.

The options, their help and the order of the commands are declared in ``tuner.cli_options``.

User errors (``TunerError``, bad flags, a workload method that raised outside a trial) print
one line and exit with code 2, no traceback.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
import warnings
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from tuner._deprecated import moved
from tuner.cli_options import (
    COMMAND_ORDER,
    EPILOG,
    SHORT_HELP,
    applied,
    common_filter_options,
    export_options,
    model_options,
    option,
    profile_options,
    run_options,
    validate_options,
)
from tuner.errors import TunerDeprecationWarning, TunerError, one_line
from tuner.knobs import Knobs, knob_text
from tuner.status import MEASURED, Phase, Status, phase_of


def _console(stderr: bool = False) -> Console:
    """A console as wide as the terminal; piped or logged output (no terminal, no COLUMNS)
    gets 160 columns instead of rich's 80, which folded every table and long line."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 160
    return Console(stderr=stderr, width=width)


console = _console()
err_console = _console(stderr=True)

class TunerGroup(click.Group):
    """Turns TunerError into one line on stderr and exit code 2; lists the commands in
    ``COMMAND_ORDER``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        order = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(self.commands, key=lambda name: (order.get(name, len(order)), name))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TunerError as exc:
            err_console.print(f"[bold red]error:[/] {one_line(exc)}", highlight=False,
                              soft_wrap=True)
            ctx.exit(2)
        except click.UsageError as exc:  # a bad flag of a subcommand: one line, not the usage
            err_console.print(f"[bold red]error:[/] {exc.format_message()}", highlight=False,
                              soft_wrap=True)
            ctx.exit(2)
        except Exception as exc:  # a workload's own method raised (outside a trial): one line
            from tuner.workload_calls import user_error
            error = user_error(exc)
            if error is None:
                raise
            err_console.print(f"[bold red]error:[/] {one_line(error)}", highlight=False,
                              soft_wrap=True)
            ctx.exit(2)


@click.group(cls=TunerGroup, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="tuner")
@click.option("--verbose", is_flag=True,
              help="Also show the notices of Ray and other libraries that tuner hides.")
def main(verbose: bool) -> None:
    """tuner: find the fastest way to train a PyTorch model on this hardware."""
    if verbose:
        os.environ["TUNER_VERBOSE"] = "1"
    warnings.showwarning = _show_warning
    # the deprecations the user's own code meets (a workload of tuner 0.2), once each, unless
    # -W / PYTHONWARNINGS or a test suite's filters say otherwise
    if not sys.warnoptions and not any(f[2] is TunerDeprecationWarning for f in warnings.filters):
        warnings.filterwarnings("default", category=TunerDeprecationWarning)


_default_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """The warnings tuner raises for the user (a damaged leaderboard file, another run on this
    machine, a deprecated name or value the user's code uses) as one line."""
    if category.__name__ in ("DamagedLeaderboardWarning", "ConcurrentRunWarning",
                             "RayNodeWarning", "TunerDeprecationWarning"):
        err_console.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def _note(text: str) -> None:
    """One line on stderr about an option that does nothing here; the command goes on."""
    err_console.print(f"[yellow]note:[/] {text}", highlight=False, soft_wrap=True)


_model_options = applied(model_options())
"""--model and --image-size of ``validate`` and ``profile``."""


def _configured(workload: str, model: str | None, image_size: int | None):
    """The workload ``--workload`` names, configured with --model / --image-size."""
    from tuner.option_checks import resolve_workload
    from tuner.settings import RunOptions
    return resolve_workload(RunOptions(workload=workload, workload_options={
        "model": model, "image_size": image_size}))


@main.command(short_help=SHORT_HELP["run"])
@run_options()
def run(**kwargs: Any) -> None:
    """Tune a workload: measured trials under Ray Tune + Optuna, best vs baseline at the end.

    `tuner.tune(...)` in Python runs the same. Defaults that depend on the device or the scale
    are shown as their rule. With `--world-size 1,2,...` each world size is a search of its
    own, one after another (a --time-budget shared equally), then their scaling efficiency."""
    from tuner.scaling import scaling, scaling_lines, size_runs, world_sizes
    from tuner.settings import RunOptions

    kwargs["time_budget_s"] = kwargs.pop("time_budget")
    kwargs["workload_options"] = {"model": kwargs.pop("model"),
                                  "image_size": kwargs.pop("image_size")}
    sizes = world_sizes(kwargs.pop("world_size"))
    runs = size_runs(RunOptions(**kwargs, world_size=sizes[0]), sizes)
    results = []
    for index, options in enumerate(runs):  # each world size its own search, one after another
        if len(runs) > 1:
            console.print(f"[bold]world size {options.world_size}[/bold] ({index + 1} of "
                          f"{len(runs)})")
        results.append(_run_one(options, launched=index == 0))
    # no lines when every trial had one rank (scaling_lines)
    rows = [row for result in results for row in result.rows]
    for line in scaling_lines(scaling(rows, kwargs["gpu_hour_cost"])):
        console.print(line, highlight=False)


def _run_one(options: Any, launched: bool) -> Any:
    """One run's plan, trials and summary (``options``: a ``RunOptions``). Raises TunerError
    when no trial succeeded; exits 130 on Ctrl-C."""
    import contextlib

    from tuner.api import tune_plan
    from tuner.driver import RunInterrupted, planned
    from tuner.progress import Progress
    with contextlib.ExitStack() as stack:
        with console.status("checking the workload, search space and data…"):
            plan = stack.enter_context(planned(options))
        start = _launched_monotonic() if launched else None
        if start is not None:  # the budget counts from the launch
            plan = plan.launched_at(start)
        progress = Progress(console)
        notes = list(plan.notes)
        progress.starting(plan)  # a spinner naming Ray's start (and the probe) until then

        def on_event(kind: str, data: dict) -> None:
            progress.started()  # the spinner ends before anything is printed (stderr too)
            # the notes once the run has started (a run refused before, e.g. by another run
            # into the same results, says so in one line)
            while notes:
                _note(notes.pop(0))
            progress.on_event(kind, data)
        try:
            result = tune_plan(plan, on_event=on_event)
        except RunInterrupted as exc:
            progress.close()
            err_console.print(f"interrupted: {exc.recorded} trials of run {exc.run_id} are in "
                              f"{options.results}/leaderboard; continue with the same command and "
                              f"--resume {exc.run_id}")
            sys.exit(130)
        except BaseException:  # a write failed mid-run (RecordFailed), Ctrl-C during Ray's
            progress.close()   # start, anything else: the spinner and the bar end first
            raise
    progress.close()
    progress.print_summary(result)
    if result.best is None:
        if result.rows and all(r["status"] == Status.TIMEOUT for r in result.rows):
            budget = ("the default time budget" if options.time_budget_s is None
                      else f"--time-budget {options.time_budget_s:g}")
            raise TunerError(f"{budget}: the budget stopped every trial before it measured "
                             f"one window (start-up and set-up took "
                             f"most of it; see `python -m tuner leaderboard --workload "
                             f"{result.workload}`); give a longer budget")
        raise TunerError(f"no trial of run {result.run_id} succeeded; see the error column in "
                         f"`python -m tuner leaderboard --workload {result.workload}`")
    return result


_IMPORTED = (time.monotonic(), time.time())
"""When this module was imported, on the monotonic and the wall clock."""

from tuner.budget import LAUNCH_AGE_S  # noqa: E402  (here, beside its one use)


def _launched_monotonic() -> float | None:
    """When this process started, on the ``time.monotonic()`` clock, for a process started for
    this command (``python -m tuner run``, the ``tuner`` script): ``run --time-budget S`` then
    bounds what a user times, its imports (4-10 s on a busy 2-core machine) included. None for
    a process that imported the command line more than ``LAUNCH_AGE_S`` after it started."""
    import psutil
    age_s = _IMPORTED[1] - psutil.Process().create_time()
    return None if age_s > LAUNCH_AGE_S else _IMPORTED[0] - max(0.0, age_s)


_common_filters = applied(common_filter_options())
"""--workload, --results, --hardware and --scale of the commands that read a leaderboard."""


def _workload_name(spec: str) -> str:
    """Leaderboard rows carry the workload's name; an import path is resolved to it."""
    if ":" in spec:
        from tuner.workload_loader import resolve
        return resolve(spec).name
    return spec


def _load(results: str, workload: str, hardware: str | None, scale: str | None = None):
    """``leaderboard.select`` for a read command: an import path is resolved to its name, with
    rows from several machines this machine's key is taken, and with ``--scale`` only that
    scale's rows are read."""
    import tuner.leaderboard as leaderboard
    return leaderboard.select(results, _workload_name(workload), hardware, scale=scale,
                              this_machine=_this_machine_key)


def _this_machine_key(keys: list[str]) -> str | None:
    import torch

    from tuner.hardware import fingerprint
    for device in (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]:
        key = fingerprint(torch.device(device))["hardware_key"]
        if key in keys:
            return key
    return None


@main.command(name="leaderboard", short_help=SHORT_HELP["leaderboard"])
@_common_filters
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@option("--limit", type=click.IntRange(min=1), metavar="N", show_default="all", help="Rows shown.")
def leaderboard_cmd(workload: str, results: str, hardware: str | None, scale: str | None,
                    fmt: str, limit: int | None) -> None:
    """Trials ranked by samples/sec (failed trials last, with their error)."""
    import tuner.leaderboard as leaderboard
    table, hardware = _load(results, workload, hardware, scale)
    rows = leaderboard.ranked(table)[:limit]
    if fmt == "json":
        click.echo(json.dumps(rows, default=str, indent=1))
    elif fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=leaderboard.SCHEMA.names)
        writer.writeheader()
        writer.writerows(rows)
        click.echo(buf.getvalue(), nl=False)
    else:
        console.print(_rank_table(rows, f"{workload} on {hardware}"))


def _rank_table(rows: list[dict], title: str) -> Table:
    """The leaderboard as a table; its phase column tells a re-measured configuration from its
    search row, and names each ceiling ('ceiling: loader' is the DataLoader alone, no model)."""
    from tuner.scaling import row_efficiency, world_size_of
    from tuner.windows import window_iqr
    ranks = any(world_size_of(r) > 1 for r in rows)  # data-parallel rows: ranks, efficiency
    t = Table(title=title, title_justify="left")
    for col in ("#", "status", "phase", "ref", *(("ranks", "eff.") if ranks else ()),
                "samples/sec", "±IQR", "step ms p50", "warm-up s", "peak dev MiB",
                "peak host MiB", "knobs / error"):
        t.add_column(col, justify="left" if col in ("status", "phase", "ref", "knobs / error")
                     else "right", overflow="fold")
    efficiency = row_efficiency(rows)
    for i, r in enumerate(rows, 1):
        detail = knob_text(r) if r["status"] in MEASURED else f"{knob_text(r)} — {r['error']}"
        phase = r.get("phase") or "search"
        if phase == "ceiling":
            phase = f"ceiling: {r.get('ceiling') or 'compute'}"
        eff = efficiency[i - 1]
        t.add_row(str(i), r["status"], phase, r["reference"] or "",
                  *((str(world_size_of(r)), "" if eff is None else f"{100 * eff:.0f} %")
                    if ranks else ()), _num(r["samples_per_sec"], 1),
                  _num(window_iqr(r), 1), _num(r["step_time_ms_p50"], 1),
                  _num(r["warmup_s"], 1), _num(r["peak_device_memory_mb"], 0),
                  _num(r["peak_host_memory_mb"], 0), detail)
    return t


def _num(v: float | None, digits: int) -> str:
    return "" if v is None else f"{v:,.{digits}f}"


@main.command(short_help=SHORT_HELP["best"])
@_common_filters
@click.option("--format", "fmt", type=click.Choice(["json", "yaml", "python"]), default="json",
              show_default=True)
@option("--gpu-hour-cost", "gpu_hour_cost", type=click.FloatRange(min=0, min_open=True),
        metavar="PRICE", show_default="none",
        help="Price of a GPU-hour: cost per million samples at each world size.")
def best(workload: str, results: str, hardware: str | None, scale: str | None,
         fmt: str, gpu_hour_cost: float | None) -> None:
    """The best configuration and its speed-up over the references of its run, with a 95 %
    interval; where the fastest ties with a simpler configuration within the noise, the
    simpler one (no compile, fewer workers, closer to the baseline: docs/concepts.md, "Tie").

    `--format python` prints the lines to paste for its data path (`tuner.data`), the lines
    `validate` trains with."""
    from tuner.winner import best as winner
    table, hardware = _load(results, workload, hardware, scale)
    answer = winner(table)
    if answer is None:
        raise TunerError(f"no successful trial for {workload!r} on {hardware} in {results}")
    # The whole answer (tuner.winner.Answer.to_dict), named as the command was given.
    doc = {**answer.to_dict(), "workload": workload, "hardware_key": hardware}
    from dataclasses import asdict

    from tuner.scaling import scaling, scaling_lines
    sizes = scaling(table.to_pylist(), gpu_hour_cost)
    doc["world_sizes"] = [asdict(size) for size in sizes]
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2, default=str))
    elif fmt == "yaml":
        import yaml
        click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
    else:
        speed = f"{answer.samples_per_sec:.1f} samples/sec"
        if answer.baseline.is_best:
            speed += ", the baseline itself"
        elif answer.baseline.tie:
            speed += ", a tie with the baseline within the noise"
        elif answer.baseline.ratio:
            speed += f", {answer.baseline.ratio:.2f}x the baseline"
        from tuner.trial.validate import best_code
        code = best_code(workload, answer.knobs, answer.row)  # what `validate` runs
        click.echo(f"# tuner best for {workload} on {hardware}: {speed} "
                   f"(run {answer.row['run_id']})")
        for line in scaling_lines(sizes):
            click.echo(f"# {line}")
        click.echo(code, nl=False)


@main.command(short_help=SHORT_HELP["report"])
@_common_filters
@option("--out", "out_dir", required=True, type=click.Path(file_okay=False), metavar="DIR",
        help="Directory for the PNG figures and report.html.")
@option("--max-memory-mb", "max_memory_mb", type=click.FloatRange(min=0, min_open=True),
        metavar="MIB", show_default="none", help="Memory limit drawn on the memory figure.")
def report(workload: str, results: str, hardware: str | None, scale: str | None,
           out_dir: str, max_memory_mb: float | None) -> None:
    """PNG figures and one self-contained HTML page from a workload's leaderboard."""
    from tuner.report import write_report
    _, hardware = _load(results, workload, hardware, scale)
    paths = write_report(results, workload, out_dir, hardware=hardware, scale=scale,
                         max_memory_mb=max_memory_mb)
    for path in paths:
        console.print(f"  {path}")
    console.print(f"open {paths[-1]}")


@main.command(name="export", short_help=SHORT_HELP["export"])
@_common_filters
@applied(export_options())
def export_cmd(workload: str, results: str, hardware: str | None, scale: str | None,
               storage: str, study_name: str | None, run_id: str | None,
               overwrite: bool) -> None:
    """The leaderboard as an Optuna study: one trial per row, for optuna-dashboard."""
    from collections import Counter

    from tuner.export import default_study_name, shown_url, write_study
    table, hardware = _load(results, workload, hardware, scale)
    name = _workload_name(workload)
    rows = table.to_pylist()
    if run_id is not None:
        runs = sorted({r["run_id"] for r in rows})
        rows = [r for r in rows if r["run_id"] == run_id]
        if not rows:
            raise TunerError(f"--run {run_id}: no rows of {name} on {hardware} for it; runs "
                             f"here: {', '.join(runs)}")
    study_name = study_name or default_study_name(name, hardware)
    study = write_study(rows, storage, study_name, overwrite=overwrite,
                        study_attrs={"workload": name, "hardware_key": hardware,
                                     "results": str(results), "value": "samples_per_sec"})
    states = Counter(t.state.name for t in study.get_trials(deepcopy=False))
    url = shown_url(storage)
    console.print(f"wrote {len(rows)} trials of {name} on {hardware} to study {study_name!r} in "
                  f"{url} ({', '.join(f'{n} {s}' for s, n in states.most_common())})",
                  highlight=False, soft_wrap=True)
    console.print(f"open it with: optuna-dashboard {url}", highlight=False, soft_wrap=True)


def _pick_row(table, trial_id: str | None) -> dict:
    from tuner.winner import best
    rows = table.to_pylist()
    if trial_id is None:
        answer = best(rows)
        if answer is None:
            raise TunerError("no successful trial to take the configuration from")
        return dict(answer.row)
    match = [r for r in rows if r["trial_id"] == trial_id]
    if not match:
        raise TunerError(f"--trial {trial_id}: no such trial; trials here: "
                         f"{', '.join(r['trial_id'] for r in rows[:20])}")
    return match[0]


def _check_validatable(row: dict) -> None:
    """Raise TunerError unless ``row`` is a whole training measurement ``validate`` can check:
    status ok (a pruned or timed-out trial holds a partial figure, a failed one none), not a
    ceiling (no configuration trains at a compute-only or loader-only rate), no impossible
    figure (``tuner.noise.impossible``)."""
    import tuner.noise as noise
    what = f"--trial {row['trial_id']}"
    if row["status"] != Status.OK or row["samples_per_sec"] is None:
        raise TunerError(f"{what} ended {row['status']} and has no whole measurement to "
                         f"validate; accepted: a trial whose status is ok")
    if phase_of(row) == Phase.CEILING:
        raise TunerError(f"{what} is a {row.get('ceiling') or 'compute'}-only ceiling, not a "
                         f"configuration's training rate; accepted: a search or re-measured trial")
    reason = noise.impossible(row)
    if reason:
        raise TunerError(f"{what} was disturbed ({reason}); accepted: a trial with no "
                         f"impossible figure")



def _data_for(workload, data: str | None, scale: str):
    """The data ``profile`` and ``validate`` read, checked as ``run`` checks it before
    measuring (``tuner.option_checks.checked_data``: every image decoded for the built-ins).
    Raises DataError naming the path or file."""
    from tuner.option_checks import checked_data
    with console.status("checking the data…"):
        return checked_data(workload, data, scale)[0]


@main.command(short_help=SHORT_HELP["validate"])
@_common_filters
@_model_options
@applied(validate_options())
def validate(workload: str, results: str, hardware: str | None, scale: str | None,
             model: str | None, image_size: int | None, trial_id: str | None,
             steps: int | None, data: str | None, world_size: int | None) -> None:
    """Train with the best configuration as a plain loop; measured vs predicted samples/sec.

    Its batches come from the very lines `best --format python` prints for the configuration's
    data path (a DataLoader, the decoded cache, or the dataset resident on the device). A
    multi-rank trial is checked by a plain DDP loop of as many local processes."""
    import torch

    from tuner.trial.validate import check_data_path, loop_for_row, ranks_for
    w = _configured(workload, model, image_size)
    table, hardware = _load(results, w.name, hardware, scale)
    row = _pick_row(table, trial_id)
    _check_validatable(row)
    if row["device"] == "cuda" and not torch.cuda.is_available():
        raise TunerError(f"trial {row['trial_id']} ran on CUDA ({hardware}); no CUDA device here")
    knobs = Knobs.from_dict(row, strict=False)
    check_data_path(w, knobs)
    ranks = ranks_for(row, world_size)
    data_dir = _data_for(w, data, row["scale"])
    console.print(f"validating trial {row['trial_id']} ({row['phase']}, run {row['run_id']}): "
                  f"{knob_text(row)} · {row['scale']} scale on {row['device']}")
    from tuner.trial.harness import training_threads
    threads = None
    if row["device"] == "cpu" and row.get("trial_cpus"):
        # Train with the threads the trial's training process had.
        threads = row.get("torch_threads") or training_threads(knobs.num_workers,
                                                               int(row["trial_cpus"]))
    where = (
        f"{threads or torch.get_num_threads()} CPU threads" if row["device"] == "cpu" else "CUDA"
    )
    what = f"{ranks} ranks, each on {where}" if ranks > 1 else where
    with console.status(f"training {what}…"):
        v = loop_for_row(w, knobs, row, data_dir=data_dir, steps=steps, threads=threads,
                         ranks=ranks)
    predicted = row["samples_per_sec"]
    t = Table(title=f"{w.name}: plain training loop vs the trial", title_justify="left")
    for col in ("", "samples/sec"):
        t.add_column(col, justify="right" if col else "left")
    t.add_row("predicted (trial median" + (f", {ranks} ranks)" if ranks > 1 else ")"),
              f"{predicted:,.1f}")
    t.add_row(f"measured ({v.steps} steps, {v.epochs:.1f} epochs, first {v.warmup_steps} left out)",
              f"{v.samples_per_sec:,.1f}")
    t.add_row("[bold]measured ÷ predicted[/]", f"[bold]{v.samples_per_sec / predicted:.2f}[/]")
    console.print(t)
    console.print(f"whole loop, warm-up included: {v.total_s:.1f} s")
    console.print(
        f"threads: torch {v.torch_threads}, OMP_NUM_THREADS "
        f"{v.omp_num_threads or 'unset'} (the trial's: {row.get('torch_threads') or '?'}, "
        f"{row.get('omp_num_threads') or 'unset'})"
    )
    if knobs.data_path != "loader":  # the fill: one decoding pass, before the loop
        trial_fill = row.get("cache_fill_s")
        console.print(f"cache fill ({knobs.data_path} path): {v.batches_s:.1f} s" + (
            f" (the trial's: {trial_fill:.1f} s)" if trial_fill is not None else ""))


@main.command(short_help=SHORT_HELP["profile"])
@applied(profile_options())
def profile(
    workload: str,
    model: str | None,
    image_size: int | None,
    knobs_json: str | None,
    trial_id: str | None,
    results: str,
    hardware: str | None,
    device: str,
    scale: str | None,
    data: str | None,
    steps: int,
) -> None:
    """Per-phase breakdown of one configuration, and its bottleneck in one sentence.

    Knobs: --knobs, else --trial, else the best trial in --results, else the baseline."""
    from tuner.diagnose import bottleneck, breakdown_table
    from tuner.option_checks import local_cpus, resolve_device
    from tuner.settings import MEASUREMENT_DEFAULTS, TrialSettings, default_scale
    from tuner.trial.harness import run_trial
    w = _configured(workload, model, image_size)
    device = resolve_device(device)
    scale = scale or default_scale(device)
    source = "the workload's baseline"
    knobs = w.baseline
    if knobs_json is not None:
        knobs, dropped = _knobs_over(w.baseline, knobs_json)
        if dropped:
            _note(f"--knobs: {', '.join(dropped)} of the baseline dropped: "
                  f"{'it needs' if len(dropped) == 1 else 'they need'} num_workers > 0")
        source = "--knobs"
    elif trial_id is not None or _has_rows(results, w.name):
        table, hardware = _load(results, w.name, hardware)
        row = _pick_row(table, trial_id)
        knobs, source = Knobs.from_dict(row, strict=False), f"trial {row['trial_id']}"
    warmup, _, window_s = MEASUREMENT_DEFAULTS[scale]
    settings = TrialSettings(
        scale=scale,
        device=device,
        data_dir=str(_data_for(w, data, scale)),
        warmup_steps=warmup,
        windows=2,
        window_s=window_s,
        breakdown_steps=steps,
    )
    console.print(f"profiling {w.name} ({scale} scale on {device}) with {source}: "
                  f"{knob_text(knobs.to_dict())}")
    with console.status("measuring…"):
        row = run_trial(w, knobs, settings, cpus=local_cpus())  # as a local run's trial
    if row["status"] != Status.OK:
        raise TunerError(f"the configuration failed ({row['status']}): {row['error']}")
    console.print(f"{row['samples_per_sec']:,.1f} samples/sec, step time p50 "
                  f"{row['step_time_ms_p50']:.1f} ms (unsynchronised windows)")
    console.print(breakdown_table(row))
    if row.get("gpu_util_pct") is not None:
        console.print(
            f"GPU utilisation {row['gpu_util_pct']:.0f}%, power {row['gpu_power_w']:.0f} W"
        )
    console.print(bottleneck(row))


def _knobs_over(baseline: Knobs, knobs_json: str) -> tuple[Knobs, list[str]]:
    """``--knobs`` JSON over the baseline (``Knobs.updated``: knobs that no longer apply are
    dropped, and listed). Raises TunerError naming the text."""
    try:
        changes = json.loads(knobs_json)
        if not isinstance(changes, dict):
            raise ValueError(f"expected a JSON object of knobs such as {{\"batch_size\": 64}}, "
                             f"got a {type(changes).__name__}")
        return baseline.updated(changes)
    except (json.JSONDecodeError, ValueError, TypeError) as exc:
        raise TunerError(f"--knobs {knobs_json!r}: {exc}") from None


def _has_rows(results: str, workload: str) -> bool:
    import tuner.leaderboard as leaderboard
    return leaderboard.read(results, workload=workload).num_rows > 0


@main.command(name="check-cluster", short_help=SHORT_HELP["check-cluster"])
@click.argument("path", type=click.Path(dir_okay=False))
def check_cluster(path: str) -> None:
    """Validate a Ray cluster-launcher YAML against the schema shipped with Ray."""
    from tuner.cluster import validate_cluster_config
    config = validate_cluster_config(path)
    types = ", ".join(config.get("available_node_types", {})) or "none"
    console.print(f"{path}: valid Ray cluster config (cluster {config.get('cluster_name')!r}; "
                  f"node types: {types})")


@main.command(short_help=SHORT_HELP["workloads"])
@option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
        help="A table, or JSON with each workload's import path.")
def workloads(fmt: str) -> None:
    """Known workloads with their source, parameter count (full scale) and sample shape.

    ``--format json`` gives each its ``parameters_full``; ``parameters_seed``, the same count,
    stays until tuner 0.4.0."""
    from tuner.workload_loader import available, resolve
    entries = []
    for name, where in sorted(available().items()):
        w = resolve(name)
        entries.append({"name": name, "description": w.description, "source": w.source,
                        "parameters_full": w.parameter_count("full"),
                        "parameters_seed": w.parameter_count("full"),
                        "sample_shape": w.sample_shape("full"), "import_path": where})
    if fmt == "json":
        click.echo(json.dumps(entries, indent=2))
        return
    t = Table(title="workloads", title_justify="left")
    for col in ("name", "parameters (full)", "sample shape (full)", "description"):
        t.add_column(col, overflow="fold", justify="right" if col.startswith("param") else "left")
    for e in entries:
        shape = ", ".join(
            f"{k} {'x'.join(map(str, v)) or 'scalar'}" for k, v in e["sample_shape"].items()
        )
        t.add_row(e["name"], f"{e['parameters_full']:,}", shape, e["description"])
    console.print(t)
    console.print("sources: `python -m tuner workloads --format json`")


if __name__ == "__main__":
    sys.exit(main())


__getattr__ = moved(__name__, {"world_sizes": "tuner.scaling"})
"""Old import path of the ``--world-size`` parser, which the Python API shares now."""
