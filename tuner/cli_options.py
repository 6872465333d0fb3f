"""The command line's options and help: ``run``'s options in titled groups, the options the read
commands share, the order commands are listed in, and the epilog of ``python -m tuner --help``.

Torch-free like ``tuner.cli``: building the help reads only ``tuner.settings``.

Every option shows its default. Where the default depends on the device or the scale, the
help shows the rule as text (``show_default="12 on CPU, 40 on CUDA"``) and the option's value
stays None, so ``tuner.plan`` resolves it where the device is known.
"""

from __future__ import annotations

from typing import Any, Callable

import click
from click_option_group import GroupedOption, OptionGroup

import tuner._deprecated as deprecation
from tuner.budget import DEFAULT_CPU_TIME_BUDGET_S, DEFAULT_CUDA_TIME_BUDGET_S
from tuner.settings import (
    DEVICES,
    MEASUREMENT_DEFAULTS,
    OBJECTIVES,
    OLD_SCALES,
    PROBE_MODES,
    SAMPLERS,
    SCALES,
)

COMMAND_ORDER = ("run", "best", "leaderboard", "report", "validate", "profile", "export",
                 "workloads", "check-cluster")
"""The order ``python -m tuner --help`` lists the commands in: a user's workflow (tune, read
the answer, look closer, check it, share it), then the look-ups."""

_EXAMPLES = (
    ("python -m tuner workloads", "list the workloads"),
    ("python -m tuner run -w ddpm",
     f"tune ddpm (on CPU: 36 trials or {DEFAULT_CPU_TIME_BUDGET_S:g} s)"),
    ("python -m tuner best -w ddpm --format python", "the winner as code to paste"),
    ("python -m tuner report -w ddpm --out report", "figures and report.html"),
    ("python -m tuner run -w classifier --model resnet50 --max-memory 12GB", ""),
)

EPILOG = "\n".join([
    "\b", "Examples:", *(f"  {command:<46}{note}".rstrip() for command, note in _EXAMPLES), "",
    "\b", "Exit codes:",
    "  0    done",
    "  1    an unexpected error (with a traceback), or Ctrl-C outside a run's trials",
    '  2    bad input, no result or a failed write, told in one line "error: ..."',
    "  130  run interrupted by Ctrl-C: its recorded trials are kept; go on with --resume RUN_ID",
])
"""The epilog of ``python -m tuner --help`` (``\\b`` keeps click from re-wrapping a paragraph).
The exit codes are those of ``tuner.cli``: ``TunerGroup`` (2), ``run`` (130) and click's own
(1 on Ctrl-C, 2 on a usage error)."""

SHORT_HELP = {
    "run": "Tune a workload: measured trials, best vs baseline.",
    "best": "The winning configuration and its speed-up (95 % CI).",
    "leaderboard": "Every trial ranked by samples/sec, failures last.",
    "report": "PNG figures and one HTML page from a leaderboard.",
    "validate": "Train the winner (loop or trainer): measured vs predicted.",
    "profile": "Per-phase breakdown and bottleneck of one configuration.",
    "export": "The leaderboard as an Optuna study for optuna-dashboard.",
    "workloads": "Built-in and installed workloads, their size and shapes.",
    "check-cluster": "Validate a Ray cluster-launcher YAML against Ray's schema.",
}
"""One-line summary per command, as ``--help`` lists them (at most 59 characters: the width an
80-column terminal leaves beside the command names, so none is cut off)."""


def _without_range(extra: dict) -> dict:
    """Help extras without click's range note ('x>=1'): the metavar (N, S) and the help text
    say what is accepted, and a bad value is refused with the range named."""
    extra.pop("range", None)
    return extra


class TunerOption(click.Option):
    """An option whose text default (``show_default="12 on CPU, 40 on CUDA"``) is shown as
    written, without the parentheses click puts around it."""

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = _without_range(super().get_help_extra(ctx))
        if isinstance(self.show_default, str):
            extra["default"] = self.show_default
        return extra


class TunerGroupedOption(TunerOption, GroupedOption):
    """``TunerOption`` in an option group (``click_option_group``)."""


class ScaleChoice(click.Choice):
    """``--scale``: one of ``SCALES``. A deprecated word (``OLD_SCALES``: 'seed') is taken as
    the scale it names, after one line on stderr naming the versions and the new word; the
    help lists only the current words."""

    def __init__(self) -> None:
        super().__init__(SCALES)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in OLD_SCALES:
            text = deprecation.message(f"--scale {value}",
                                       f"use --scale {OLD_SCALES[value]} (the same scale)")
            click.echo(f"{click.style('note:', fg='yellow')} {text}", err=True)
            return OLD_SCALES[value]
        return super().convert(value, param, ctx)


def option(*decls: str, **attrs: Any) -> Callable:
    """``click.option`` with ``TunerOption``."""
    return click.option(*decls, cls=TunerOption, **attrs)


def grouped(group: OptionGroup) -> Callable:
    """``group.option`` with ``TunerGroupedOption``."""
    def grouped_option(*decls: str, **attrs: Any) -> Callable:
        return group.option(*decls, cls=TunerGroupedOption, **attrs)
    return grouped_option


def _per_scale(index: int) -> str:
    """Item ``index`` of ``MEASUREMENT_DEFAULTS`` in words, e.g. '3 at tiny scale, 5 at full'."""
    tiny, full = MEASUREMENT_DEFAULTS["tiny"][index], MEASUREMENT_DEFAULTS["full"][index]
    return f"{tiny:g}" if tiny == full else f"{tiny:g} at tiny scale, {full:g} at full"


def _time_budget_default() -> str:
    """The rule of ``tuner.budget.default_time_budget_s``, in words."""
    return (f"{DEFAULT_CUDA_TIME_BUDGET_S:g} on CUDA; on CPU {DEFAULT_CPU_TIME_BUDGET_S:g} "
            f"without --trials, none with it")


def model_options(opt: Callable = option) -> list[Callable]:
    """--model and --image-size, the options a workload is configured with (``configure``),
    declared with ``opt`` (``option``, or a group's ``grouped``)."""
    return [
        opt("--model", metavar="NAME", show_default="the workload's own",
            help="Classifier workloads: a torchvision model (resnet50, …) or timm:NAME."),
        opt("--image-size", "image_size", type=click.IntRange(min=1), metavar="PX",
            show_default="the size of the model's pretrained weights",
            help="Input side in pixels, with --model."),
    ]


def common_filter_options() -> list[Callable]:
    """--workload, --results, --hardware and --scale of the commands that read a leaderboard."""
    return [
        option("--workload", "-w", required=True, metavar="NAME|PATH",
               help="Workload name or import path package.module:attribute."),
        option("--results", default="tuner-results", show_default=True, metavar="DIR|URI",
               type=click.Path(file_okay=False), help="Results directory or URI (s3://…)."),
        option("--hardware", metavar="KEY", show_default="the only one, or this machine's",
               help="Hardware key of the rows to read."),
        option("--scale", type=ScaleChoice(),
               show_default="all (best: the latest run's scale)",
               help="Only rows of this model scale."),
    ]


def applied(decorators: list[Callable]) -> Callable:
    """One decorator applying ``decorators``, the first listed shown first in ``--help``."""
    def decorate(f: Callable) -> Callable:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f
    return decorate


class TitledGroup(OptionGroup):
    """An option group shown as its title line, 'Budget:', above its options."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        return None if super().get_help_record(ctx) is None else (f"{self.name}:", "")



def export_options() -> list[Callable]:
    """``export``'s own options, after the leaderboard filters."""
    return [
        option("--optuna-storage", "storage", required=True, metavar="URL",
               help="Database to write the study to, e.g. sqlite:///tuner.db."),
        option("--study-name", "study_name", metavar="NAME",
               show_default="WORKLOAD@HARDWARE_KEY", help="Name of the study."),
        option("--run", "run_id", metavar="RUN_ID", show_default="every run's",
               help="Only this run's rows."),
        option("--overwrite", is_flag=True, show_default="off",
               help="Replace a study of the same name."),
    ]


def validate_options() -> list[Callable]:
    """``validate``'s own options, after the leaderboard filters and --model/--image-size."""
    return [
        option("--trial", "trial_id", metavar="TRIAL_ID", show_default="the best",
               help="Trial whose configuration to train."),
        option("--steps", type=click.IntRange(min=1), metavar="N",
               show_default="an epoch (23 or more), and as long as the trial measured",
               help="Optimizer steps to train (in a trainer: per round)."),
        option("--data", type=click.Path(), metavar="PATH",
               show_default="the workload's embedded data", help="Your dataset."),
        option("--world-size", "world_size", type=click.IntRange(min=1), metavar="N",
               show_default="the trial's", help="Ranks of the plain DDP loop (local processes)."),
    ]


def profile_options() -> list[Callable]:
    """Every option of ``profile``."""
    return [
        option("--workload", "-w", required=True, metavar="NAME|PATH",
               help="Workload name or import path package.module:attribute."),
        *model_options(),
        option("--knobs", "knobs_json", metavar="JSON",
               show_default="--trial, else the best, else the baseline",
               help="Knobs over the baseline, e.g. '{\"batch_size\": 64}'."),
        option("--trial", "trial_id", metavar="TRIAL_ID", show_default="the best in --results",
               help="Take the knobs of this leaderboard trial."),
        option("--results", default="tuner-results", show_default=True, metavar="DIR|URI",
               type=click.Path(file_okay=False), help="Results directory or URI (s3://…)."),
        option("--hardware", metavar="KEY", show_default="the only one, or this machine's",
               help="Hardware key of the rows to read."),
        option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
               help="Where to measure; auto: CUDA when torch sees a GPU."),
        option("--scale", type=ScaleChoice(), show_default="full on CUDA, tiny on CPU",
               help="Model and batch sizes."),
        option("--data", type=click.Path(), metavar="PATH",
               show_default="the workload's embedded data", help="Your dataset."),
        option("--steps", type=click.IntRange(min=1), default=10, show_default=True, metavar="N",
               help="Synchronised steps timed per phase."),
    ]


WORKLOAD = TitledGroup("Workload & data")
BUDGET = TitledGroup("Budget")
SEARCH = TitledGroup("Search")
MEASUREMENT = TitledGroup("Measurement")
MEMORY = TitledGroup("Memory")
RESULTS = TitledGroup("Results & resume")
CLUSTER = TitledGroup("Cluster")
RUN_GROUPS = (WORKLOAD, BUDGET, SEARCH, MEASUREMENT, MEMORY, RESULTS, CLUSTER)
"""``run``'s option groups, in the order ``run --help`` shows them."""


def _workload_and_data() -> list[Callable]:
    opt = grouped(WORKLOAD)
    return [
        opt("--workload", "-w", required=True, metavar="NAME|PATH",
            help="Built-in name (see `tuner workloads`) or package.module:attribute."),
        *model_options(opt),
        opt("--data", type=click.Path(), metavar="PATH",
            show_default="the workload's embedded data",
            help="Your dataset: a directory, or a file for text workloads."),
        opt("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
            help="Where trials run; auto: CUDA when torch sees a GPU."),
        opt("--scale", type=ScaleChoice(), show_default="full on CUDA, tiny on CPU",
            help="Model and batch sizes: full (the workload's own) or tiny (CPU tests)."),
    ]


def _budget() -> list[Callable]:
    opt = grouped(BUDGET)
    return [
        opt("--trials", type=click.IntRange(min=1), metavar="N",
            show_default="36 on CPU, 120 on CUDA, a cap the time budget usually ends first; "
                         "with --time-budget alone, until the budget ends",
            help="Search trials, references included; follow-up trials come on top."),
        opt("--time-budget", "time_budget", type=click.FloatRange(min=0, min_open=True),
            metavar="S", show_default=_time_budget_default(),
            help="Seconds the whole run may take, from launch; it ends within 10 s more."),
    ]


def _search() -> list[Callable]:
    opt = grouped(SEARCH)
    return [
        opt("--space", "space_file", type=click.Path(dir_okay=False), metavar="FILE",
            show_default="the workload's built-in space", help="Search-space YAML."),
        opt("--sampler", type=click.Choice(SAMPLERS), default="gp", show_default=True,
            help="gp: Gaussian-process Bayesian optimisation; tpe: Optuna's TPE; random."),
        opt("--seed", default=0, show_default=True, type=int, metavar="N",
            help="Seed of the sampler and of torch."),
        opt("--objective", type=click.Choice(tuple(OBJECTIVES)), default="samples-per-sec",
            show_default=True,
            help="Steady-state throughput, or the wall time of --train-steps steps."),
        opt("--train-steps", "train_steps", type=click.IntRange(min=1), metavar="N",
            show_default="none; needed by time-to-train",
            help="Optimizer steps of your real job, for --objective time-to-train."),
        opt("--global-batch-size", "global_batch_size", type=click.IntRange(min=1), metavar="N",
            show_default="none: batch_size is searched freely",
            help="Keep batch_size x grad_accum at N; only the micro-batch varies."),
        opt("--early-stop/--no-early-stop", "early_stop", default=True, show_default=True,
            help="Stop a search trial that is slower than the best by more than the noise."),
    ]


def _measurement() -> list[Callable]:
    opt = grouped(MEASUREMENT)
    return [
        opt("--warmup-steps", "warmup_steps", type=click.IntRange(min=1), metavar="N",
            show_default=_per_scale(0), help="Optimizer steps before the first window."),
        opt("--windows", type=click.IntRange(min=1), metavar="N", show_default=_per_scale(1),
            help="Measurement windows per trial."),
        opt("--window-s", "window_s", type=click.FloatRange(min=0, min_open=True), metavar="S",
            show_default=_per_scale(2), help="Seconds per measurement window."),
        opt("--confirm", type=click.IntRange(min=0), default=3, show_default=True, metavar="N",
            help="Re-measure the N best and the references in 3 rounds, to pick the winner; "
                 "0: off"),
        opt("--ceiling/--no-ceiling", default=True, show_default=True,
            help="Measure what bounds the winner: compute-only, loader-only, machine limits."),
        opt("--peak-tflops", "peak_tflops", type=click.FloatRange(min=0, min_open=True),
            metavar="TFLOPS", show_default="tuner's table of known cards",
            help="Your card's dense peak TFLOP/s, for MFU."),
    ]


def _memory() -> list[Callable]:
    opt = grouped(MEMORY)
    return [
        opt("--max-memory", "max_memory", metavar="FRACTION|SIZE",
            show_default="none: the whole device",
            help="Device memory limit, 0.9 or 12GB; a size below the card's is enforced."),
        opt("--max-host-memory", "max_host_memory", metavar="FRACTION|SIZE", show_default="none",
            help="Host memory limit per trial (process + workers), 0.5 or 8GB."),
        opt("--probe", type=click.Choice(PROBE_MODES), default="auto", show_default=True,
            help="Memory probe bounding the batch; auto: CUDA, a host limit, or the workload's."),
    ]


def _results_and_resume() -> list[Callable]:
    opt = grouped(RESULTS)
    return [
        opt("--results", default="tuner-results", show_default=True, metavar="DIR|URI",
            type=click.Path(file_okay=False),
            help="Where the leaderboard goes: a directory or a URI (s3://…, file://…)."),
        opt("--resume", "resume", is_flag=False, flag_value="latest", default=None,
            metavar="[RUN_ID]", show_default="a new run",
            help="Continue an interrupted run (alone: the newest); recorded trials stay."),
        opt("--warm-start", "warm_start", is_flag=True, show_default="off",
            help="Seed the search with earlier rows of this workload and hardware."),
        opt("--remeasure", is_flag=True, show_default="off",
            help="With --warm-start: measure configurations that have rows again."),
    ]


def _cluster() -> list[Callable]:
    opt = grouped(CLUSTER)
    return [
        opt("--address", metavar="ADDRESS", show_default="a local Ray instance",
            help="Ray cluster to run on: auto, HOST:PORT or ray://HOST:PORT."),
        opt("--world-size", "world_size", default="1", show_default=True, metavar="N[,N...]",
            help="Ranks per trial: DDP over N GPUs (N processes on CPU); a list compares."),
        opt("--gpu-hour-cost", "gpu_hour_cost", type=click.FloatRange(min=0, min_open=True),
            metavar="PRICE", show_default="none",
            help="Price of a GPU-hour: cost per million samples at each world size."),
    ]


def run_options() -> Callable:
    """Every option of ``run`` in its groups (``RUN_GROUPS``), shown in the order listed."""
    return applied([*_workload_and_data(), *_budget(), *_search(), *_measurement(), *_memory(),
                    *_results_and_resume(), *_cluster()])
