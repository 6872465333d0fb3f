"""The README's sample output is what tuner's printer draws from the stored run in docs/sample/
(``bench/readme_sample.py``): a change in what ``python -m tuner run`` prints fails here until
the block is rendered again with ``python bench/readme_sample.py --write``."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sample():
    spec = importlib.util.spec_from_file_location("readme_sample",
                                                  REPO_ROOT / "bench" / "readme_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered(sample) -> str:
    return sample.block()


def test_the_readme_sample_is_what_the_generator_renders(sample, rendered):
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert sample.readme_block(readme) == rendered, (
        "README.md's sample output differs from what tuner prints for the stored run: run "
        "`python bench/readme_sample.py --write` (and commit README.md)")


def test_every_line_of_the_sample_fits_100_columns(rendered):
    long = [line for line in rendered.splitlines() if len(line) > 100]
    assert not long, f"{len(long)} lines over 100 characters: {long}"


def test_the_sample_shows_trials_of_every_phase_the_summary_and_the_legend(sample, rendered):
    meta, rows = sample.load()
    lines = rendered.splitlines()
    assert f"$ {sample.COMMAND}" in lines
    # the sample is the README's main command, run with its defaults
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    main_command = readme.split("## Tune the built-in DDPM job", 1)[1].split("```bash\n")[1]
    assert sample.COMMAND == main_command.split("\n")[0] == "python -m tuner run --workload ddpm"
    searched = [line for line in lines if line.startswith("  [search ")]
    trial_events = [data for kind, data in meta["events"] if kind == "trial"]
    search_trials = sum(1 for data in trial_events if rows[data["trial_id"]]["phase"] == "search")
    assert len(searched) == min(search_trials, sample.SHOWN_SEARCH) > 2
    assert re.match(r"  \[search 1(/\d+)?\] +ok +[\d,.]+ samples/sec  bs=\d+", searched[0])
    assert searched[0].endswith("(baseline)")
    remeasured = [line for line in lines if line.startswith("  [remeasure ")]
    assert len(remeasured) == sample.SHOWN_REMEASURE
    left_out = len(trial_events) - len(searched) - len(remeasured)
    counted = re.findall(r"^  \((.*) left out here\)$", rendered, flags=re.M)
    assert counted, "no line counting the trials left out"
    assert sum(int(n) for line in counted
               for n in re.findall(r"(\d+) (?:more )?\w+ trials?", line)) == left_out
    assert any(line.startswith("│ compute-only ceiling") for line in lines)
    # the summary table, with the winner and a speed-up over the baseline
    assert any(line.startswith("│ best (re-measured") for line in lines)
    assert any(line.startswith("│ baseline") for line in lines)
    assert not any(line.startswith("  python -m tuner ") for line in lines)
    # the legend names every abbreviation the trial lines use
    used = {part.split("=")[0] for line in searched for part in line.split("samples/sec")[1]
            .split("(")[0].split()}
    legend = " ".join(sample.legend())
    missing = [short for short in used if short not in ("amp", "compile")
               and f"`{short}`" not in legend]
    assert not missing, f"abbreviations without a legend entry: {missing}"
    # every stored row is a trial of the run the events describe
    trial_ids = [data["trial_id"] for kind, data in meta["events"] if kind == "trial"]
    assert sorted(trial_ids) == sorted(rows) and len(set(trial_ids)) == len(trial_ids)


def test_the_stored_run_is_small(sample):
    files = [p for p in sample.SAMPLE_DIR.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"run.json"}
    assert any(p.suffix == ".parquet" for p in files)
    size = sum(p.stat().st_size for p in files)
    assert size < 200_000, f"docs/sample/ holds {size:,} bytes"
    json.loads((sample.SAMPLE_DIR / "run.json").read_text(encoding="utf-8"))


def test_a_changed_output_format_is_caught(sample, rendered, monkeypatch):
    import dataclasses

    import tuner.knobs
    info = tuner.knobs.KNOB_INFO["batch_size"]
    monkeypatch.setitem(
        tuner.knobs.KNOB_INFO, "batch_size", dataclasses.replace(info, short="batch")
    )
    changed = sample.block()
    assert changed != rendered and "batch=" in changed and " bs=" not in changed


def test_write_replaces_only_the_block(sample, rendered):
    text = f"# title\n\nbefore\n\n{sample.START}\nold\n{sample.END}\n\nafter\n"
    new = sample.written(text, rendered)
    assert new == f"# title\n\nbefore\n\n{rendered}\nafter\n"
    assert sample.readme_block(new) == rendered
    with pytest.raises(ValueError, match="sample-output"):
        sample.readme_block("# no markers\n")
