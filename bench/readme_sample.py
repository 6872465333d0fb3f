"""The README's sample output: one real short run, stored, and the README block rendered from it.

    python bench/readme_sample.py --run     # a real run into docs/sample/ (~5 min, 2 quiet cores)
    python bench/readme_sample.py           # print the README block rendered from docs/sample/
    python bench/readme_sample.py --write   # put that block between the markers in README.md
    python bench/readme_sample.py --check   # exit 1 when README.md's block differs from it

The run is the main command with its default settings, ``python -m tuner run --workload ddpm``
(on a machine without a GPU: the CPU, the ``tiny`` scale, the default time budget), made
through ``tuner.tune`` so that its events can be kept. ``docs/sample/`` keeps its leaderboard
(``tuner-results/leaderboard``, one Parquet file) and ``run.json`` (the command, the run's
figures and the sequence of its 'machine', 'phase' and 'trial' events, the trials by id).

The block is drawn by tuner's own printer (``tuner.progress.Progress``) fed with those events and
the stored rows, on a 100-column console: a change in what ``python -m tuner run`` prints changes
the block, and ``tests/test_readme_sample.py`` fails until ``--write`` is run again. ``--run``
checks that this replay gives, line for line, what the live run printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import io
import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DIR = REPO_ROOT / "docs" / "sample"
README = REPO_ROOT / "README.md"
RESULTS = "tuner-results"
"""The results directory of the run, relative to where it ran (the default of ``run``)."""

RUN = {"workload": "ddpm"}
"""The sample run's options (``tuner.tune`` keywords; each is a ``run`` flag): the README's main
command, everything else at its default."""
COMMAND = "python -m tuner run " + " ".join(f"--{k} {v}" for k, v in RUN.items())

WIDTH = 100
"""Console columns: the README's lines are at most this long."""
START = "<!-- sample-output:start: bench/readme_sample.py --write renders this block -->"
END = "<!-- sample-output:end -->"


def _console():
    """A 100-column console writing plain text (no colour, no terminal) to a string."""
    from rich.console import Console
    return Console(file=io.StringIO(), width=WIDTH, force_terminal=False, color_system=None,
                   emoji=False, highlight=False, legacy_windows=False)


def _taken(console) -> list[str]:
    """The lines printed on ``console`` since the last call, without the spaces that pad them
    to the console's width."""
    text = console.file.getvalue()
    console.file.seek(0)
    console.file.truncate()
    return [line.rstrip() for line in text.splitlines()]


# --------------------------------------------------------------------------------------------
# Rendering from docs/sample/


def load(sample_dir: Path = SAMPLE_DIR) -> tuple[dict, dict[str, dict]]:
    """``run.json`` and the stored leaderboard rows by trial id."""
    import tuner.leaderboard as leaderboard
    meta = json.loads((sample_dir / "run.json").read_text(encoding="utf-8"))
    rows = leaderboard.read(sample_dir / RESULTS).to_pylist()
    return meta, {r["trial_id"]: r for r in rows}


def replay(sample_dir: Path = SAMPLE_DIR) -> list[tuple[str, dict, list[str]]]:
    """What the run printed from its first trial on, as ``(kind, data, lines)`` per event, and
    ``("summary", {}, lines)`` last: tuner's printer fed with the stored events and rows."""
    from tuner.driver import RunSummary
    from tuner.progress import Progress

    meta, by_id = load(sample_dir)
    console = _console()
    printer = Progress(console)
    # The 'start' event (it carries the run's plan) sets the search's trial count (None: a
    # count the time budget decides, printed without a denominator, padded to its cap's width).
    printer.counter = dataclasses.replace(printer.counter, total=meta["search_trials"],
                                          cap=meta.get("search_cap"))
    out, rows = [], []
    for kind, data in meta["events"]:
        if kind == "trial":
            rows.append(by_id[data["trial_id"]])
            data = {"row": rows[-1], "index": data["index"], "total": data["total"]}
        printer.on_event(kind, data)
        out.append((kind, data, _taken(console)))
    printer.close()
    printer.print_summary(RunSummary(meta["run_id"], meta["workload"], meta["device"],
                                     meta["scale"], rows, meta["wall_s"], meta["results"]))
    out.append(("summary", {}, _taken(console)))
    return out


def _summary_lines(lines: list[str]) -> list[str]:
    """The closing summary without its ready-to-paste commands (their paths are the run's)."""
    if "ready to paste:" not in lines:
        return lines
    cut = lines.index("ready to paste:")
    rest = [line for line in lines[cut + 1:] if not line.startswith("  python -m tuner ")]
    return lines[:cut] + rest


SHOWN_REMEASURE = 2
"""Re-measurement trial lines shown; the others, and the ceilings' lines, are counted."""

SHOWN_SEARCH = 6
"""Search trial lines shown (the references and the first screened configurations); the
others are counted in one line where they would be."""


def output_lines(sample_dir: Path = SAMPLE_DIR) -> list[str]:
    """The sample output: the command, the first search trials' lines, the others counted in
    one line, the re-measurement's first lines, the others and the ceilings counted in one
    line, and the closing summary."""
    meta, _ = load(sample_dir)
    lines = [f"$ {meta['command']}"]
    shown, left_out = 0, {}  # re-measure trial lines shown; trials left out, by phase
    searched, search_left = 0, 0  # search trial lines shown, and left out
    for kind, data, printed in replay(sample_dir):
        phase = data["row"]["phase"] if kind == "trial" else data.get("phase")
        if kind == "trial" and phase == "search":
            searched += 1
            if searched > SHOWN_SEARCH:
                search_left += 1
                continue
        elif search_left:  # the first line after the search trials
            lines.append(f"  ({search_left} more search trial{'s' * (search_left > 1)} "
                         "left out here)")
            search_left = 0
        keep = (kind in ("summary", "machine") or phase == "search"
                or (phase == "remeasure" and kind == "phase" and not shown and not left_out)
                or (phase == "remeasure" and kind == "trial" and shown < SHOWN_REMEASURE))
        if not keep:
            if kind == "trial":
                left_out[phase] = left_out.get(phase, 0) + 1
            continue
        if kind == "trial" and phase == "remeasure":
            shown += 1
        if kind == "summary" and left_out:
            counts = " and ".join(f"{n} {p} trial" + ("s" if n > 1 else "")
                                  for p, n in left_out.items())
            lines.append(f"  ({counts} left out here)")
        lines += _summary_lines(printed) if kind == "summary" else printed
    return lines


def legend() -> list[str]:
    """The abbreviations of the knobs in trial lines and tables, from ``tuner.knobs``."""
    from tuner.knobs import KNOB_INFO
    names = ", ".join(f"`{info.short}` {name}" for name, info in KNOB_INFO.items()
                      if info.short != name and not info.data_parallel)  # one-rank run
    text = (f"Knobs: {names}. A flag is printed when on; `amp` and `compile` print their mode. "
            "Each line: phase and trial count, status, median samples/sec over the windows, knobs.")
    return textwrap.wrap(text, WIDTH, break_on_hyphens=False)


def block(sample_dir: Path = SAMPLE_DIR) -> str:
    """The README block between the markers, markers included."""
    import statistics
    meta, rows = load(sample_dir)
    loads = [r["load_avg_1m"] for r in rows.values() if r.get("load_avg_1m") is not None]
    busy = f", load average {statistics.median(loads):.1f}" if loads else ""
    intro = (f"On {meta['machine']}{busy}, {meta['date']}, tuner {meta['tuner_version']}, torch "
             f"{meta['torch_version']} (the plan printed first and the paste commands last are "
             "left out):")
    return "\n".join([START, *textwrap.wrap(intro, WIDTH, break_on_hyphens=False), "",
                      "```text", *output_lines(sample_dir), "```", "", *legend(), END]) + "\n"


def readme_block(text: str) -> str:
    """The block between the markers in the README's ``text``, markers included.

    Raises:
        ValueError: a marker is missing or they are out of order."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md: no '{START}' ... '{END}' block")
    return text[start:end + len(END)] + "\n"


def written(text: str, new_block: str) -> str:
    """``text`` with its block replaced by ``new_block``."""
    old = readme_block(text)
    return text.replace(old, new_block, 1)


# --------------------------------------------------------------------------------------------
# The run


def record(sample_dir: Path = SAMPLE_DIR) -> None:
    """Run ``COMMAND`` for real, store its leaderboard and events under ``sample_dir``, and
    check that ``replay`` prints what the run printed."""
    import platform

    from rich.console import Console

    import tuner
    import tuner.leaderboard as leaderboard
    from tuner.progress import Progress

    shown, live, events, plan = Progress(Console()), Progress(_console()), [], {}

    def on_event(kind: str, data: dict) -> None:
        shown.on_event(kind, data)
        live.on_event(kind, data)
        if kind == "start":  # the search's trial counter: None when the time budget decides
            plan["search_trials"] = live.counter.total
            plan["search_cap"] = live.counter.cap  # the width its lines are padded to
        elif kind == "trial":
            events.append(["trial", {"trial_id": data["row"]["trial_id"], "index": data["index"],
                                     "total": data["total"]}])
        elif kind == "phase":
            events.append(["phase", data])
        elif kind == "machine":  # the printer reads its text only
            events.append(["machine", {"text": data["text"]}])
        else:
            raise SystemExit(f"event {kind!r}: the sample run is not expected to have one")

    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            result = tuner.tune(**RUN, results=RESULTS, progress=False, on_event=on_event)
        finally:
            os.chdir(here)
            shown.close()
            live.close()
        shown.print_summary(result)
        live.print_summary(result)
        rows = leaderboard.read(Path(tmp) / RESULTS).to_pylist()
        shutil.rmtree(sample_dir / RESULTS, ignore_errors=True)
        leaderboard.append(sample_dir / RESULTS, rows)
    key = result.rows[0]["hardware_key"]
    meta = {"command": COMMAND, "run_id": result.run_id, "workload": result.workload,
            "device": result.device, "scale": result.scale, "wall_s": round(result.wall_s, 1),
            "results": RESULTS, "search_trials": plan["search_trials"],
            "search_cap": plan["search_cap"],
            "machine": f"{key.split(':', 2)[1]}, {os.cpu_count()} CPUs, no GPU"
                       if key.startswith("cpu:") else key,
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "tuner_version": rows[0]["tuner_version"], "torch_version": rows[0]["torch_version"],
            "python": platform.python_version(), "events": events}
    (sample_dir / "run.json").write_text(json.dumps(meta, indent=1, default=str) + "\n",
                                         encoding="utf-8")
    printed = [line.rstrip() for line in live.console.file.getvalue().splitlines()]
    replayed = [line for _, _, lines in replay(sample_dir) for line in lines]
    # the replay starts at the first event it keeps (the plan printed before it is not kept)
    first = printed.index(replayed[0]) if replayed and replayed[0] in printed else 0
    printed, replayed = _summary_lines(printed[first:]), _summary_lines(replayed)
    if printed != replayed:
        diff = "\n".join(difflib.unified_diff(printed, replayed, "live", "replay", lineterm=""))
        raise SystemExit(f"the replay of {sample_dir} differs from the live run:\n{diff}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--run", action="store_true", help="make the real run first (minutes)")
    what.add_argument("--check", action="store_true",
                      help="exit 1 when README.md's block differs from the rendered one")
    parser.add_argument("--write", action="store_true", help="write the block into README.md")
    args = parser.parse_args(argv)
    if args.run:
        record()
    new = block()
    long = [line for line in new.splitlines() if len(line) > WIDTH]
    if long:
        print(f"lines over {WIDTH} characters:\n" + "\n".join(long), file=sys.stderr)
        return 1
    text = README.read_text(encoding="utf-8")
    if args.check:
        old = readme_block(text)
        if old != new:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       "README.md", "rendered"))
            return 1
        return 0
    if args.write:
        README.write_text(written(text, new), encoding="utf-8")
        print(f"README.md: sample block written ({len(new.splitlines())} lines)")
    else:
        sys.stdout.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
