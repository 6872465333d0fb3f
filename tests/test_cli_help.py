"""``python -m tuner --help`` and ``run --help`` as a user reads them (click's runner, a terminal
100 columns wide, and 80 for the summaries): whole one-line summaries in workflow order, an
epilog whose examples parse and whose exit codes are listed, ``run``'s options under their
group titles, every option's default shown, one-line help texts and honest metavars."""

from __future__ import annotations

import re
import shlex

import click
import pytest
from click.testing import CliRunner

from tuner.budget import DEFAULT_CPU_TIME_BUDGET_S, DEFAULT_CUDA_TIME_BUDGET_S
from tuner.cli import main
from tuner.cli_options import COMMAND_ORDER, RUN_GROUPS, SHORT_HELP
from tuner.settings import MEASUREMENT_DEFAULTS

WIDTH = 100


def help_text(*args: str, width: int = WIDTH) -> str:
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


def section(text: str, title: str) -> list[str]:
    """The lines of a help section ('Commands:', 'Options:') up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def commands_listed(width: int) -> dict[str, str]:
    """Command name -> its summary as ``--help`` lists it (one line each)."""
    rows = section(help_text(width=width), "Commands:")
    assert all(re.match(r"  \S", row) for row in rows), rows   # none wraps to a second line
    return dict(row.strip().split(None, 1) for row in rows)


def option_entries(text: str) -> dict[str, str]:
    """Each option's whole entry in an 'Options:' section, keyed by its first flag; a group
    title ('Budget:') ends the entry before it."""
    entries: dict[str, str] = {}
    current = None
    for line in section(text, "Options:"):
        flag = re.match(r"\s+(?:-\w, )?(--[\w-]+)", line)
        if flag:
            current = flag.group(1)
            entries[current] = line.strip()
        elif re.match(r"\s+[A-Z][\w &]+:$", line):
            current = None
        elif current:
            entries[current] += " " + line.strip()
    return entries


def option_heads(text: str) -> dict[str, str]:
    """Each option's flags and metavar as shown ('--trials N'), keyed by its first flag."""
    heads = {}
    for line in section(text, "Options:"):
        if flag := re.match(r"\s+(?:-\w, )?(--[\w-]+)", line):
            heads[flag.group(1)] = line.strip().split("  ")[0]
    return heads


def run_options() -> list[click.Option]:
    """``run``'s options as a user sees them (not the hidden group-title placeholders)."""
    return [p for p in main.commands["run"].params
            if isinstance(p, click.Option) and not p.hidden]


@pytest.mark.parametrize("width", [WIDTH, 80])
def test_every_summary_is_whole_and_the_commands_come_in_workflow_order(width):
    listed = commands_listed(width)
    assert list(listed) == ["run", "best", "leaderboard", "report", "validate", "profile",
                            "export", "workloads", "check-cluster"] == list(COMMAND_ORDER)
    assert set(COMMAND_ORDER) == set(main.commands)             # no command left unordered
    for name, summary in listed.items():
        assert summary == SHORT_HELP[name]
        assert not summary.endswith(("…", "...")), name


def test_the_epilog_lists_the_exit_codes():
    text = help_text()
    codes = section(text, "  Exit codes:")
    assert [row.split()[0] for row in codes] == ["0", "1", "2", "130"]
    assert "--resume RUN_ID" in next(row for row in codes if row.split()[0] == "130")
    assert "error:" in next(row for row in codes if row.split()[0] == "2")


def test_every_example_in_the_epilog_names_a_command_and_its_own_flags():
    examples = [line.strip().split("  ")[0] for line in section(help_text(), "  Examples:")]
    assert 3 <= len(examples) <= 5
    for example in examples:
        argv = shlex.split(example)
        assert argv[:3] == ["python", "-m", "tuner"], example
        command = main.commands[argv[3]]
        flags = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        used = [token for token in argv[4:] if token.startswith("-")]
        assert set(used) <= flags, (example, set(used) - flags)
        command.make_context(argv[3], argv[4:])                    # click parses it as given


def test_run_help_shows_every_group_title_in_order_with_its_options_below_it():
    text = help_text("run")
    rows = section(text, "Options:")
    titles = [row.strip()[:-1] for row in rows if re.match(r"  [A-Z][\w &]+:$", row)]
    assert titles == [group.name for group in RUN_GROUPS]
    assert titles == ["Workload & data", "Budget", "Search", "Measurement", "Memory",
                      "Results & resume", "Cluster"]
    under, group_of = None, {}
    for row in rows:
        if re.match(r"  [A-Z][\w &]+:$", row):
            under = row.strip()[:-1]
        elif flag := re.match(r"    (?:-\w, )?(--[\w-]+)", row):
            group_of[flag.group(1)] = under
    for option in run_options():
        assert group_of.get(option.opts[-1] if option.opts[0] == "-w" else option.opts[0]) \
            == option.group.name, option.opts


def test_every_run_option_shows_its_default_or_that_it_is_required():
    entries = option_entries(help_text("run"))
    shown = {flag: entry for flag, entry in entries.items() if flag != "--help"}
    assert len(shown) == len(run_options())
    for flag, entry in shown.items():
        assert "[default: " in entry or "[required]" in entry, entry


def test_the_measurement_and_memory_defaults_are_the_codes():
    entries = option_entries(help_text("run"))
    tiny, full = MEASUREMENT_DEFAULTS["tiny"], MEASUREMENT_DEFAULTS["full"]
    assert f"[default: {tiny[0]} at tiny scale, {full[0]} at full]" in entries["--warmup-steps"]
    assert f"[default: {tiny[1]} at tiny scale, {full[1]} at full]" in entries["--windows"]
    assert tiny[2] == full[2] and f"[default: {tiny[2]:g}]" in entries["--window-s"]
    assert "[default: none: the whole device]" in entries["--max-memory"]
    budget = entries["--time-budget"]
    assert f"{DEFAULT_CUDA_TIME_BUDGET_S:g} on CUDA" in budget
    assert f"on CPU {DEFAULT_CPU_TIME_BUDGET_S:g} without --trials" in budget
    assert "[default: 3]" in entries["--confirm"] and "3 rounds" in entries["--confirm"]


def test_options_with_a_value_default_show_that_value():
    entries = option_entries(help_text("run"))
    for option in run_options():
        if option.show_default is True and not option.is_bool_flag:
            assert f"[default: {option.default}]" in entries[option.opts[0]], option.opts


def test_help_texts_are_one_line_and_metavars_say_what_is_accepted():
    for option in run_options():
        assert option.help and len(option.help) <= 80, (option.opts, option.help)
        assert "\n" not in option.help
    head = option_heads(help_text("run"))
    assert head["--results"] == "--results DIR|URI"
    assert head["--resume"] == "--resume [RUN_ID]"
    assert head["--max-memory"] == "--max-memory FRACTION|SIZE"
    assert head["--max-host-memory"] == "--max-host-memory FRACTION|SIZE"
    assert head["--time-budget"] == "--time-budget S"
    assert head["--trials"] == "--trials N"
    assert not any("RANGE" in h or "INTEGER" in h or "FLOAT" in h for h in head.values()), head


def test_the_resume_metavar_matches_its_optional_value():
    # --resume alone continues the newest run; --resume RUN_ID a given one.
    ctx = main.commands["run"].make_context("run", ["-w", "ddpm", "--resume"])
    assert ctx.params["resume"] == "latest"
    ctx = main.commands["run"].make_context("run", ["-w", "ddpm", "--resume", "ddpm-1"])
    assert ctx.params["resume"] == "ddpm-1"


def test_every_command_has_help_with_its_defaults():
    for name in COMMAND_ORDER:
        text = help_text(name)
        for flag, entry in option_entries(text).items():
            if flag == "--help":
                continue
            command = main.commands[name]
            option = next(p for p in command.params if flag in p.opts)
            if option.is_flag and not option.secondary_opts and option.show_default is None:
                continue
            assert "[default: " in entry or "[required]" in entry, (name, entry)

