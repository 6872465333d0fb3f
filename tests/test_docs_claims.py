"""What the README, the docs and ``--help`` say the code does, held against the code.

Four kinds of claim are checked; none needs Ray or a trial:

* **Quoted output.** A line a command prints, quoted verbatim, must be one the source can print.
  Verbatim are: the lines of a ```` ```text ```` block and the inline code spans that begin with
  ``error:``, ``warning:`` or ``note:`` (prefixes the command line prints: the rest is a whole
  message), and the quotes in the second column of docs/exit-codes.md's "Exit code 2" table
  (each the line or a part of it). In a quote ``...`` or ``…`` stands for a variable part; the
  message templates are the string literals and f-strings under tuner/, whose ``{...}`` fields
  stand for the values put in them (at most ``HOLE_CHARS`` characters each). A quote holds
  when a template matches it with its fixed text giving at least ``ANCHORED_SHARE`` of the
  quote's characters: a clause one function adds to another's message (a "did you mean") is
  quoted apart. Click's own messages (``Invalid value for ...``) are checked by giving ``run``
  the quoted value.
* **Named defaults.** Each figure the pages give for a default (the time budgets, the default
  trial caps, the follow-ups' share, the budget's grace, the windows and warm-up per scale,
  and every "`CONSTANT` = value" of docs/defaults.md) equals the code's value, computed from
  the constants or through ``tuner.option_checks.make_plan``, never copied here.
* **--help.** ``run --help`` and ``python -m tuner --help`` show the same defaults.
* **Getting started** shows what ``best --format python`` prints for the stored run in
  docs/sample/ (the README's sample).
"""

from __future__ import annotations

import ast
import math
import re
from functools import lru_cache
from pathlib import Path

import pytest
from click.testing import CliRunner

import tuner.budget as budget
from tuner.cli import main
from tuner.settings import MEASUREMENT_DEFAULTS

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = REPO_ROOT / "docs"
SOURCE = REPO_ROOT / "tuner"

PREFIXES = ("error: ", "warning: ", "note: ")
"""Prefixes of the lines the command line prints: a quote beginning with one is verbatim."""
ELLIPSIS = re.compile(r"\.\.\.|…|\{\.\.\.\}")
STAR = None
"""A pattern's wildcard token (any text, empty included)."""


def user_pages() -> list[Path]:
    """README.md and every page under docs/ (the contributors' log included)."""
    return [REPO_ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# ------------------------------------------------------------------ quoted output


def text_block_lines(markdown: str) -> list[str]:
    """The lines inside ```text fences."""
    lines, inside = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```text" if not inside else False
        elif inside:
            lines.append(line)
    return lines


def inline_spans(markdown: str) -> list[str]:
    """Inline code spans outside fenced blocks (a span does not cross a line)."""
    prose, inside = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            prose.append(line)
    return re.findall(r"`([^`\n]+)`", "\n".join(prose))


def exit_code_table_quotes() -> list[str]:
    """The quotes in docs/exit-codes.md's "Exit code 2" table (second column), ``;``-separated."""
    page = (DOCS / "exit-codes.md").read_text(encoding="utf-8")
    section = page.split("## Exit code 2", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    assert rows, "the Exit code 2 table has no rows"
    return [span for row in rows for span in re.findall(r"`([^`]+)`", row.split(" | ")[1])]


def quoted_lines() -> list[tuple[str, str]]:
    """(page, quote) for every verbatim quote of the rule in the module docstring, the prefix
    removed (the command line adds it to the message). A prefixed quote is a whole message;
    one of the exit-code table may be part of one, and is marked so by a leading and a
    trailing ``...``."""
    found = []
    for page in user_pages():
        text = page.read_text(encoding="utf-8")
        for quote in text_block_lines(text) + inline_spans(text):
            if quote.startswith(PREFIXES):
                found.append((page.name, quote.split(": ", 1)[1]))
    found += [("exit-codes.md", f"...{quote}...") for quote in exit_code_table_quotes()]
    # a bare placeholder ("error: ...") names the form of the line, not a message
    return [(page, squeeze(q)) for page, q in found if ELLIPSIS.sub("", q).strip()]


def pattern(parts: list) -> tuple:
    """Characters and ``STAR`` tokens; neighbouring stars merged."""
    tokens: list = []
    for part in parts:
        if part is STAR:
            if not tokens or tokens[-1] is not STAR:
                tokens.append(STAR)
        else:
            tokens.extend(part)
    return tuple(tokens)


def quote_pattern(quote: str) -> tuple:
    pieces = ELLIPSIS.split(quote)
    parts: list = []
    for i, piece in enumerate(pieces):
        parts += ([STAR] if i else []) + [piece]
    return pattern(parts)


def _template_parts(node: ast.AST) -> list | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value if isinstance(v, ast.Constant) else STAR for v in node.values]
    return None


@lru_cache(maxsize=1)
def templates() -> tuple[tuple, ...]:
    """Every string literal and f-string under tuner/ as a pattern (fields are stars; a
    message's whitespace squeezed as the pages' is)."""
    found = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            parts = _template_parts(node)
            if parts and any(p is not STAR and len(p.strip()) > 3 for p in parts):
                found.add(pattern([p if p is STAR else re.sub(r"\s+", " ", p) for p in parts]))
    return tuple(found)


HOLE_CHARS = 60
"""The most of a quote's characters one field of a template may stand for."""

ANCHORED_SHARE = 0.5
"""The least share of a quote's own characters (its ``...`` left out) that a template's fixed
text must give: the rest may be the fields' values (names, numbers, paths, a clause another
function makes), but never most of the quote."""


def anchored_chars(quote: tuple, template: tuple) -> int:
    """The most characters of ``quote`` that a template's fixed text gives, over every way the
    template (fields of at most ``HOLE_CHARS`` characters) and the quote (a star: any text)
    match one string; -1 when they match none."""
    # every move takes a token of the quote or of the template or both: states by i + j
    layers: list[dict] = [{} for _ in range(len(quote) + len(template) + 1)]
    layers[0][(0, 0, 0)] = 0
    for layer in layers:
        for (i, j, n), score in layer.items():
            moves = []
            if i < len(quote) and quote[i] is STAR:
                moves += [((i + 1, j, n), 0)] + ([((i, j + 1, 0), 0)] if j < len(template) else [])
            if j < len(template) and template[j] is STAR:
                moves.append(((i, j + 1, 0), 0))
                if i < len(quote) and n < HOLE_CHARS:
                    moves.append(((i + 1, j, n + 1), 0))
            if (i < len(quote) and j < len(template) and quote[i] is not STAR
                    and quote[i] == template[j]):
                moves.append(((i + 1, j + 1, 0), 1))
            for state, gain in moves:
                following = layers[state[0] + state[1]]
                if following.get(state, -1) < score + gain:
                    following[state] = score + gain
    return max((v for (i, j, _), v in layers[-1].items()
                if i == len(quote) and j == len(template)), default=-1)


def _words(tokens: tuple) -> set[str]:
    text = "".join(t if t is not STAR else " " for t in tokens)
    return set(re.findall(r"[a-z_]{4,}", text.lower()))


def printable(quote: str) -> bool:
    """Whether some template in tuner/ can print ``quote`` (a whole message; ``...`` at either
    end: a part of one)."""
    wanted = quote_pattern(quote)
    need = ANCHORED_SHARE * sum(token is not STAR for token in wanted)
    words = _words(wanted)
    for template in templates():
        if len(words & _words(template)) < 0.3 * len(words):   # a quick filter
            continue
        if anchored_chars(wanted, template) >= need:
            return True
    return False


def click_message_holds(quote: str) -> bool:
    """A click error quoted as 'Invalid value for '--flag': VALUE ...': ``run --flag VALUE``
    prints it."""
    match = re.search(r"Invalid value for '(--[\w-]+)': '?([^' ]+)'? ", quote)
    assert match, f"a click message this test cannot replay: {quote}"
    result = CliRunner().invoke(main, ["run", "-w", "ddpm", match.group(1), match.group(2)],
                                terminal_width=400)
    printed = squeeze(result.output)
    return result.exit_code == 2 and all(part.strip() in printed
                                         for part in ELLIPSIS.split(quote) if part.strip())


def test_the_rule_finds_the_quotes_it_is_meant_to():
    quotes = dict((q, page) for page, q in quoted_lines())
    assert sum(page == "exit-codes.md" for page in quotes.values()) >= 15
    assert any(q.startswith("workload 'my-mlp' has no embedded dataset") for q in quotes)
    assert not any(ELLIPSIS.sub("", q).strip() == "" for q in quotes)


def test_a_quote_the_source_cannot_print_is_caught():
    assert printable("no trial of run ... succeeded; see the error column in ...")
    assert printable("unknown workload 'nosuch'; known: ...")
    assert printable("...did you mean 'num_workers'?...")
    assert not printable("...did you mean 'num_workers' or 'prefetch_factor'?...")
    assert not printable("unknown workload 'nosuch'")   # a part, unmarked
    assert not printable("no trial of run ... failed; see the error column in ...")
    assert not printable("...the budget stopped every trial before it finished measuring...")


@pytest.mark.parametrize("page, quote", quoted_lines(),
                         ids=[f"{page}: {quote[:40]}" for page, quote in quoted_lines()])
def test_every_quoted_output_line_is_one_the_source_prints(page, quote):
    if quote.strip(".").startswith("Invalid value for"):
        assert click_message_holds(quote), f"{page}: click does not print {quote!r}"
    else:
        assert printable(quote), f"{page}: no message under tuner/ prints {quote!r}"


# ------------------------------------------------------------------ named defaults


@pytest.fixture(scope="module")
def default_plans(tmp_path_factory) -> dict:
    """The default ddpm run's plan on CPU (2 cores) and on CUDA (one GPU, 16 CPUs), as
    ``make_plan`` resolves them (the embedded dataset written to a private cache)."""
    from tuner.option_checks import make_plan
    from tuner.plan import Resources
    from tuner.settings import RunOptions
    cache = tmp_path_factory.mktemp("cache")
    results = str(tmp_path_factory.mktemp("results"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TUNER_CACHE", str(cache))
        return {device: make_plan(RunOptions(workload="ddpm", device=device, probe="off",
                                             results=results), Resources(device, gpus, cpus))
                for device, gpus, cpus in (("cpu", 0, 2), ("cuda", 1, 16))}


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _minutes(seconds: float) -> str:
    """'3 min 30 s' or '10 minutes', as the pages write a budget."""
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} minutes" if not rest else f"{minutes} min {rest} s"


def expected_claims(plans: dict) -> list[tuple[str, str, tuple]]:
    """(page, regex, the values its groups must read) for each default the pages give."""
    cpu, cuda = plans["cpu"], plans["cuda"]
    cpu_s, cuda_s = budget.DEFAULT_CPU_TIME_BUDGET_S, budget.DEFAULT_CUDA_TIME_BUDGET_S
    share = (round(cpu.followup_share(), 2), round(cuda.followup_share(), 2))
    tiny, full = MEASUREMENT_DEFAULTS["tiny"], MEASUREMENT_DEFAULTS["full"]
    windows = (tiny[1], tiny[2], full[1], full[2])
    return [
        ("README.md", r"within its (\d+)-s budget", (cpu_s,)),
        ("README.md", r"about ([\d.]+)\s+minutes", (cpu_s / 60,)),
        ("README.md", r"full-size model within (\d+) minutes", (cuda_s / 60,)),
        ("README.md", r"\(([\d.]+) minutes on CPU, (\d+) on a GPU\)", (cpu_s / 60, cuda_s / 60)),
        ("index.md", r"within (\d+) minutes on a CPU, up to (\d+) min on a GPU",
         (math.ceil((cpu_s + budget.BUDGET_GRACE_S) / 60), cuda_s / 60)),
        ("getting-started.md", r"(\d+) screened trials or a time budget of (\d+) s",
         (cpu.trials, cpu_s)),
        ("getting-started.md", r"\(`full` scale\): (\d+) screened trials or (\d+) minutes",
         (cuda.trials, cuda_s / 60)),
        ("time-budget.md", r"\(default (\d+) on CPU, (\d+) on CUDA", (cpu.trials, cuda.trials)),
        ("time-budget.md", rf"\| (\d+) trials or {_minutes(cpu_s)}, whichever", (cpu.trials,)),
        ("time-budget.md", rf"\| (\d+) trials or {_minutes(cuda_s)} \|", (cuda.trials,)),
        ("time-budget.md", r"The run ends within S \+ (\d+) s", (budget.BUDGET_GRACE_S,)),
        ("time-budget.md", r"([\d.]+) of the time left in the default CPU run, ([\d.]+) in the "
         r"default CUDA run, ([\d.]+) with `--time-budget` alone",
         (*share, budget.FOLLOWUP_SHARE)),
        ("time-budget.md", r"at\s+least (\d+) % and at most (\d+) %",
         (100 * budget.FOLLOWUP_SHARE, 100 * budget.MAX_FOLLOWUP_SHARE)),
        ("defaults.md", r"default CPU run \([^)]*\) keeps ([\d.]+), default CUDA run \([^)]*\) "
         r"([\d.]+)", share),
        ("defaults.md", r"`max_followup_share` \(([\d.]+), rising to ([\d.]+)",
         (budget.FOLLOWUP_SHARE, budget.MAX_FOLLOWUP_SHARE)),
        ("measurement.md", r"\((\d+) on CPU, (\d+) on CUDA\)", (cpu.trials, cuda.trials)),
        ("measurement.md", r"(\d+) × (\d+) s at `tiny`, (\d+) × (\d+) s at `full`", windows),
        ("concepts.md", r"(\d+) × (\d+) s at `tiny` scale, (\d+) × (\d+) s at `full`", windows),
    ]


def page_text(name: str) -> str:
    path = REPO_ROOT / name if name == "README.md" else DOCS / name
    return squeeze(path.read_text(encoding="utf-8"))


def test_the_default_run_plans_what_the_pages_derive_from(default_plans):
    """The figures below come from the plans; these are their sources in the code."""
    cpu, cuda = default_plans["cpu"], default_plans["cuda"]
    assert cpu.time_budget_s == budget.DEFAULT_CPU_TIME_BUDGET_S
    assert cuda.time_budget_s == budget.DEFAULT_CUDA_TIME_BUDGET_S
    assert cpu.trials < cuda.trials and budget.FOLLOWUP_SHARE < cpu.followup_share()


def test_every_quoted_default_is_the_codes(default_plans):
    wrong = []
    for page, regex, values in expected_claims(default_plans):
        found = re.findall(regex, page_text(page))
        if not found:
            wrong.append(f"{page}: nothing reads /{regex}/ (reworded? update this claim)")
        for groups in found:
            groups = groups if isinstance(groups, tuple) else (groups,)
            if [_number(g) for g in groups] != [float(v) for v in values]:
                wrong.append(f"{page}: /{regex}/ reads {groups}, the code gives {values}")
    assert not wrong, "\n".join(wrong)


def test_every_cpu_and_cuda_trial_cap_on_any_page_is_the_plans(default_plans):
    caps = (default_plans["cpu"].trials, default_plans["cuda"].trials)
    wrong = [(page.name, got) for page in user_pages()
             for got in re.findall(r"(\d+) (?:trials )?on CPU, (\d+) on CUDA",
                                   squeeze(page.read_text(encoding="utf-8")))
             if tuple(map(int, got)) != caps]
    assert not wrong, f"the default trial caps are {caps}: {wrong}"


def module_constants() -> dict[str, object]:
    """Module-level ``NAME = value`` of tuner/ whose value is a literal or another such name."""
    values: dict[str, object] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name) and node.targets[0].id.isupper():
                value = node.value
                if isinstance(value, ast.Name) and value.id in values:
                    values[node.targets[0].id] = values[value.id]
                    continue
                try:
                    values[node.targets[0].id] = ast.literal_eval(value)
                except ValueError:
                    pass
    return values


def test_every_constant_the_defaults_page_gives_has_the_codes_value():
    constants = module_constants()
    claims = re.findall(r"`([A-Z][A-Z0-9_]+)` = ([\d.,]+)",
                        (DOCS / "defaults.md").read_text(encoding="utf-8"))
    assert len(claims) >= 8
    wrong = [(name, got, constants.get(name)) for name, got in claims
             if not isinstance(constants.get(name), (int, float))
             or not math.isclose(_number(got.rstrip(".,")), constants[name])]
    assert not wrong, f"(constant, the page's value, the code's): {wrong}"


# ------------------------------------------------------------------ --help


def help_text(*args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return squeeze(result.output)


def test_run_help_gives_the_codes_defaults(default_plans):
    text = help_text("run")
    cpu, cuda = default_plans["cpu"].trials, default_plans["cuda"].trials
    assert f"[default: {cpu} on CPU, {cuda} on CUDA" in text
    assert (f"[default: {budget.DEFAULT_CUDA_TIME_BUDGET_S:g} on CUDA; on CPU "
            f"{budget.DEFAULT_CPU_TIME_BUDGET_S:g} without --trials" in text)
    assert f"it ends within {budget.BUDGET_GRACE_S:g} s more" in text
    tiny, full = MEASUREMENT_DEFAULTS["tiny"], MEASUREMENT_DEFAULTS["full"]
    assert f"[default: {tiny[1]} at tiny scale, {full[1]} at" in text
    assert re.search(rf"--warmup-steps N .*\[default: {tiny[0]} at tiny.*{full[0]} at full",
                     text)


def test_the_top_level_example_gives_the_default_cpu_run(default_plans):
    text = help_text()
    cap = default_plans["cpu"].trials
    assert (f"tune ddpm (on CPU: {cap} trials or {budget.DEFAULT_CPU_TIME_BUDGET_S:g} s)"
            in text)


# ------------------------------------------------------------------ Getting started


def test_getting_started_shows_what_best_prints_for_the_stored_sample_run():
    """Step 4's output is ``best --format python`` on the run in docs/sample/ (the README's
    sample): paste it again from that command when the printed code changes."""
    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    step = page.split("## 4. Paste the code", 1)[1].split("\n## ", 1)[0]
    shown = step.split("```text\n", 1)[1].split("\n```", 1)[0]
    result = CliRunner().invoke(main, ["best", "--workload", "ddpm", "--format", "python",
                                       "--results", str(DOCS / "sample" / "tuner-results")],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert shown == result.output.rstrip("\n"), (
        "docs/getting-started.md step 4 differs from `python -m tuner best --workload ddpm "
        "--format python --results docs/sample/tuner-results`: paste its output again")
    assert "from tuner.data import" in shown   # the sample's answer takes the device data path
