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
from tuner.knobs import knob_text
from tuner.status import MEASURED, Status


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


def _load(results: str, workload: str, hardware: str | None, scale: str | None = None):
    """The rows a read command shows and their hardware key (``tuner.checks.load_rows``)."""
    from tuner.checks import load_rows
    return load_rows(results, workload, hardware, scale)


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
@option("--format", "fmt", type=click.Choice(["json", "yaml", "python", "lightning",
                                               "transformers"]), default="json",
        show_default=True, help="json/yaml: the whole answer; python: a plain training loop "
        "to paste; lightning: Trainer(...) and DataLoader(...) arguments; transformers: "
        "TrainingArguments(...).")
@option("--gpu-hour-cost", "gpu_hour_cost", type=click.FloatRange(min=0, min_open=True),
        metavar="PRICE", show_default="none",
        help="Price of a GPU-hour: cost per million samples at each world size.")
def best(workload: str, results: str, hardware: str | None, scale: str | None,
         fmt: str, gpu_hour_cost: float | None) -> None:
    """The best configuration and its speed-up over the references of its run, with a 95 %
    interval; where the fastest ties with a simpler configuration within the noise, the
    simpler one (no compile, fewer workers, closer to the baseline: docs/concepts.md, "Tie").

    `--format python` prints the lines to paste for its data path (`tuner.data`), the lines
    `validate` trains with; `lightning` and `transformers` the same answer in those trainers'
    own settings (docs/use-the-answer.md)."""
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
        return
    if fmt == "yaml":
        import yaml
        click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
        return
    row = answer.row
    header = [f"tuner best for {workload} on {hardware}: {_speed(answer)} (run {row['run_id']})",
              *scaling_lines(sizes)]
    device = row.get("device") or "cuda"
    knobs = answer.knobs.clamp(device)[0]  # as the trial's device applied them
    if fmt == "lightning":
        from tuner.integrations.lightning_args import format_answer
        text = format_answer(knobs, header, device=device, scale=row.get("scale"),
                             world_size=int(row.get("world_size") or 1),
                             torch_threads=row.get("torch_threads"))
    elif fmt == "transformers":
        from tuner.integrations.transformers_args import format_answer
        text = format_answer(knobs, header)
    else:
        from tuner.trial.validate import best_code
        text = "".join(f"# {line}\n" for line in header)
        text += best_code(workload, answer.knobs, row, results)  # what `validate` runs
    click.echo(text, nl=False)


def _speed(answer: Any) -> str:
    """'139.7 samples/sec, 2.66x the baseline' (or the baseline itself, or a tie)."""
    speed = f"{answer.samples_per_sec:.1f} samples/sec"
    if answer.baseline.is_best:
        speed += ", the baseline itself"
    elif answer.baseline.tie:
        speed += ", a tie with the baseline within the noise"
    elif answer.baseline.ratio:
        speed += f", {answer.baseline.ratio:.2f}x the baseline"
    return speed


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
    from tuner.checks import workload_name
    name = workload_name(workload)
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


@main.command(short_help=SHORT_HELP["validate"])
@_common_filters
@_model_options
@applied(validate_options())
def validate(steps: int | None, **where: Any) -> None:
    """Train with the best configuration; measured vs predicted samples/sec.

    A workload with a trainer of its own (a LightningModule: `Trainer.fit()`) trains in it,
    the answer's knobs and the baseline's in interleaved rounds. Any other trains as a plain
    loop whose batches come from the very lines `best --format python` prints for the
    configuration's data path (a DataLoader, the decoded cache, or the dataset resident on the
    device); a multi-rank trial as a plain DDP loop of as many local processes."""
    from tuner.checks import plan_validation, run_validation
    with console.status("checking the data…"):
        plan = plan_validation(where.pop("workload"), **where)
    row = plan.row
    console.print(f"validating trial {row['trial_id']} ({row['phase']}, run {row['run_id']}): "
                  f"{knob_text(row)} · {row['scale']} scale on {row['device']}")
    what = f"in {plan.trainer}, answer and baseline in turn" if plan.in_trainer else plan.where
    with console.status(f"training {what}…"):
        v = run_validation(plan, steps=steps)
    if plan.in_trainer:
        _print_trainer(plan, v)
    else:
        _print_loop(plan, v)


def _print_loop(plan: Any, v: Any) -> None:
    """The plain loop's figures against the trial's (a ``tuner.trial.validate.Validation``)."""
    row, predicted = plan.row, plan.row["samples_per_sec"]
    t = _figures_table(f"{plan.workload.name}: plain training loop vs the trial")
    t.add_row("predicted (trial median" + (f", {plan.ranks} ranks)" if plan.ranks > 1 else ")"),
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
    if plan.knobs.data_path != "loader":  # the fill: one decoding pass, before the loop
        trial_fill = row.get("cache_fill_s")
        console.print(f"cache fill ({plan.knobs.data_path} path): {v.batches_s:.1f} s" + (
            f" (the trial's: {trial_fill:.1f} s)" if trial_fill is not None else ""))


def _print_trainer(plan: Any, v: Any) -> None:
    """The trainer's rounds against the trials (a ``tuner.checks.TrainerValidation``)."""
    t = _figures_table(f"{plan.workload.name}: {plan.trainer} vs the trial")
    n = len(v.answer_samples_per_sec)
    t.add_row("predicted (trial median)", f"{v.predicted_samples_per_sec:,.1f}")
    t.add_row(f"measured in the trainer (median of {n} rounds, {v.answer_steps} steps each)",
              f"{v.measured_samples_per_sec:,.1f}")
    t.add_row("[bold]measured ÷ predicted[/]", f"[bold]{v.ratio:.2f}[/]")
    base = v.baseline_predicted_samples_per_sec
    t.add_row(f"baseline in the trainer (median of {n}, {v.baseline_steps} steps each)",
              f"{v.baseline_measured_samples_per_sec:,.1f}")
    t.add_row("baseline predicted (its trial)", "" if base is None else f"{base:,.1f}")
    low, high = min(v.round_speedups), max(v.round_speedups)
    t.add_row(f"[bold]speed-up over the baseline in the trainer[/] (rounds {low:.2f}-{high:.2f}x"
              + (", within the noise)" if low <= 1.0 <= high else ")"),
              f"[bold]{v.speedup:.2f}x[/]")
    if v.trial_speedup is not None:
        t.add_row("speed-up over the baseline in the trials", f"{v.trial_speedup:.2f}x")
    console.print(t)
    rounds = "; ".join(f"{a:,.1f} / {b:,.1f}" for a, b in
                       zip(v.answer_samples_per_sec, v.baseline_samples_per_sec))
    console.print(f"rounds in order (answer / baseline samples/sec): {rounds}", highlight=False)


def _figures_table(title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("", "samples/sec"):
        t.add_column(col, justify="right" if col else "left")
    return t


@main.command(short_help=SHORT_HELP["profile"])
@applied(profile_options())
def profile(workload: str, **options: Any) -> None:
    """Per-phase breakdown of one configuration, and its bottleneck in one sentence.

    Knobs: --knobs, else --trial, else the best trial in --results, else the baseline."""
    from tuner.checks import plan_profile, run_profile
    from tuner.diagnose import bottleneck, breakdown_table
    with console.status("checking the data…"):
        plan = plan_profile(workload, **options)
    if plan.dropped:
        _note(f"--knobs: {', '.join(plan.dropped)} of the baseline dropped: "
              f"{'it needs' if len(plan.dropped) == 1 else 'they need'} num_workers > 0")
    console.print(f"profiling {plan.workload.name} ({plan.settings.scale} scale on "
                  f"{plan.settings.device}) with {plan.source}: {knob_text(plan.knobs.to_dict())}")
    with console.status("measuring…"):
        row = run_profile(plan)  # as a local run's trial
    console.print(f"{row['samples_per_sec']:,.1f} samples/sec, step time p50 "
                  f"{row['step_time_ms_p50']:.1f} ms (unsynchronised windows)")
    console.print(breakdown_table(row))
    if row.get("gpu_util_pct") is not None:
        console.print(
            f"GPU utilisation {row['gpu_util_pct']:.0f}%, power {row['gpu_power_w']:.0f} W"
        )
    console.print(bottleneck(row))


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
