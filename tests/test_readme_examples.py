"""The README's code examples, executed, so the README cannot drift from the code.

Every fenced block preceded by ``<!-- example: NAME -->`` in README.md is written to a file
called NAME and used as the README tells the user to use it: the workload module is imported
and held to the ``tuner.workload.Workload`` contract, the search space is loaded and must
contain the workload's references, the README's ``python -m tuner run`` command for them runs
end to end on CPU, and the leaderboard snippet reads what that run wrote.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
README = REPO_ROOT / "README.md"

WORKLOAD_EXAMPLE = "my_workload.py"
SPACE_EXAMPLE = "my_space.yaml"
LEADERBOARD_EXAMPLE = "read_leaderboard.py"
KNOWN_EXAMPLES = (WORKLOAD_EXAMPLE, SPACE_EXAMPLE, LEADERBOARD_EXAMPLE)
FENCE_LANGUAGE = {".py": "python", ".yaml": "yaml", ".yml": "yaml"}

# The smallest measurement that still runs every phase of a trial (added to the README's command).
QUICK_RUN = ["--device", "cpu", "--trials", "2", "--windows", "1", "--window-s", "0.1",
             "--warmup-steps", "1", "--confirm", "0", "--no-ceiling"]
RUN_TIMEOUT_S = 240

_MARKER = re.compile(r"<!--\s*example:\s*(\S+?)\s*-->")
_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")


class Example:
    def __init__(self, name: str, language: str, code: str, line: int, end: int):
        self.name, self.language, self.code = name, language, code
        self.line = line  # 1-based line of the marker
        self.end = end    # 0-based index of the line after the closing fence


def parse_examples(text: str, source: str = "README.md") -> dict[str, Example]:
    """Each ``<!-- example: NAME -->`` marker and the fenced block right after it (blank lines
    allowed in between). Fails the test naming the line when a marker has no block, the block is
    not closed, or a name is used twice."""
    lines = text.splitlines()
    examples: dict[str, Example] = {}
    for i, line in enumerate(lines):
        marker = _MARKER.search(line)
        if not marker:
            continue
        name = marker.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        opening = _FENCE.match(lines[j]) if j < len(lines) else None
        if opening is None:
            found = repr(lines[j]) if j < len(lines) else "the end of the file"
            pytest.fail(f"{source} line {i + 1}: marker 'example: {name}' is not followed by a "
                        f"fenced code block (found {found})")
        fence, language = opening.groups()
        for k in range(j + 1, len(lines)):
            if lines[k].strip() == fence:
                break
        else:
            pytest.fail(f"{source} line {j + 1}: the code block of 'example: {name}' is never closed")
        if name in examples:
            pytest.fail(f"{source} line {i + 1}: example name {name!r} already used on line "
                        f"{examples[name].line}")
        examples[name] = Example(name, language, "\n".join(lines[j + 1:k]) + "\n", i + 1, k + 1)
    return examples


def write_examples(directory: Path) -> dict[str, Example]:
    examples = parse_examples(README.read_text(encoding="utf-8"))
    for example in examples.values():
        (directory / example.name).write_text(example.code, encoding="utf-8")
    return examples


def documented_run_command(text: str, after: Example) -> list[str]:
    """The first ``python -m tuner run`` line of the first bash block after ``after``'s block:
    the command the README gives for running the example."""
    lines = text.splitlines()
    block = None  # the language of the block we are in, None outside blocks
    for line in lines[after.end:]:
        fence = _FENCE.match(line)
        if fence and block is None:
            block = fence.group(2)
        elif fence:
            if block in ("bash", "sh", "shell"):
                break  # only the first shell block after the example
            block = None
        elif block in ("bash", "sh", "shell") and "-m tuner run" in line:
            return shlex.split(line.split(" #", 1)[0])
    pytest.fail(f"README.md: no `python -m tuner run` command in a bash block after "
                f"'example: {after.name}' (line {after.line})")


def import_example(name: str, directory: Path, monkeypatch):
    """Import ``directory/name`` by module name, as ``--workload module:attribute`` does."""
    module_name = Path(name).stem
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.delitem(sys.modules, module_name, raising=False)
    module = importlib.import_module(module_name)
    assert Path(module.__file__).resolve() == (directory / name).resolve(), (
        f"import {module_name} found {module.__file__}, not the README example")
    return module


def load_example_workload(directory: Path):
    """The example's ``workload``, loaded from its file without touching sys.path (fixtures)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("_readme_workload_example",
                                                  directory / WORKLOAD_EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.workload


# --------------------------------------------------------------------------------------------
# 1. The markers and their blocks


def test_readme_examples_are_extracted(tmp_path):
    examples = write_examples(tmp_path)
    missing = [name for name in KNOWN_EXAMPLES if name not in examples]
    assert not missing, (f"README.md has no '<!-- example: NAME -->' marker for {missing}; "
                         f"found {sorted(examples)}")
    for name, example in examples.items():
        expected = FENCE_LANGUAGE.get(Path(name).suffix)
        if expected:
            assert example.language == expected, (
                f"README.md line {example.line}: example {name} is fenced as "
                f"{example.language or 'plain text'!r}, expected {expected!r}")
        assert example.code.strip(), f"README.md line {example.line}: example {name} is empty"
        assert (tmp_path / name).read_text(encoding="utf-8") == example.code


def test_marker_without_code_block_fails_clearly():
    text = "intro\n<!-- example: orphan.py -->\n\nsome prose, no code\n"
    with pytest.raises(pytest.fail.Exception, match=r"line 2: marker 'example: orphan.py' is not "
                                                    r"followed by a fenced code block"):
        parse_examples(text)
    good = "<!-- example: a.py -->\n\n```python\nx = 1\n```\n"
    assert parse_examples(good)["a.py"].code == "x = 1\n"


# --------------------------------------------------------------------------------------------
# 2. The workload module honours the Workload contract


def test_workload_example_honours_the_contract(tmp_path, monkeypatch):
    import torch
    from torch.utils.data import DataLoader

    from tuner.knobs import Knobs
    from tuner.workload import Workload, resolve

    write_examples(tmp_path)
    module = import_example(WORKLOAD_EXAMPLE, tmp_path, monkeypatch)
    assert isinstance(module.workload, Workload)
    assert callable(module.trainable)
    workload = module.workload
    assert isinstance(workload.references.get("baseline"), Knobs)
    # The README's `--workload my_workload:workload` resolves to this very object.
    assert resolve(f"{Path(WORKLOAD_EXAMPLE).stem}:workload") is workload

    data_dir = workload.prepare_default_data(tmp_path / "cache", "tiny")
    assert Path(data_dir).is_dir()
    assert workload.prepare_default_data(tmp_path / "cache", "tiny") == data_dir  # reused
    dataset = workload.build_dataset(data_dir, "tiny")
    assert len(dataset) > 0
    assert workload.check_data(data_dir, "tiny") == len(dataset)

    # sample_shape describes one sample's tensors, in order.
    sample = dataset[0]
    shapes = [list(t.shape) for t in (sample if isinstance(sample, (tuple, list)) else (sample,))]
    assert shapes == list(workload.sample_shape("tiny").values())

    torch.manual_seed(0)
    batch = next(iter(DataLoader(dataset, batch_size=8, shuffle=False)))
    assert workload.samples_in(batch) == 8
    model = workload.build_model("tiny")
    loss = workload.training_step(model, batch)
    assert isinstance(loss, torch.Tensor)
    assert loss.ndim == 0, f"training_step returned shape {tuple(loss.shape)}, not a scalar"
    assert torch.isfinite(loss).item()
    loss.backward()  # the harness calls backward on it
    assert any(p.grad is not None for p in model.parameters())


# --------------------------------------------------------------------------------------------
# 3. The search space contains the workload's references


def test_space_example_contains_the_references(tmp_path):
    from tuner.space import IntRange, load_space

    write_examples(tmp_path)
    workload = load_example_workload(tmp_path)
    space = load_space(tmp_path / SPACE_EXAMPLE, is_file=True)
    cpu = space.for_device("cpu", max_workers=2)
    assert "batch_size" in cpu.domains
    assert "pin_memory" not in cpu.domains  # CUDA-only knob dropped on CPU
    assert isinstance(cpu.domains["num_workers"], IntRange) and cpu.domains["num_workers"].high == 2
    params = cpu.project(workload.baseline)
    assert params["batch_size"] == workload.baseline.batch_size
    assert params["num_workers"] == workload.baseline.num_workers
    for device_type in ("cpu", "cuda"):
        for name, knobs in workload.references.items():
            space.for_device(device_type, max_workers=2).project(knobs)  # raises SpaceError


# --------------------------------------------------------------------------------------------
# 4. and 5. The README's command runs end to end; the leaderboard snippet reads its results


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """The README's `python -m tuner run` for the examples, on CPU with the smallest settings,
    from a directory holding the example files. Results go to ./tuner-results (the default the
    leaderboard snippet reads)."""
    root = tmp_path_factory.mktemp("readme-run")
    text = README.read_text(encoding="utf-8")
    examples = write_examples(root)
    workload = load_example_workload(root)
    data_dir = workload.prepare_default_data(root / "my-data", "tiny")

    argv = documented_run_command(text, examples[SPACE_EXAMPLE])
    assert argv[:3] == ["python", "-m", "tuner"], f"unexpected README command {argv}"
    if "--data" in argv:  # the README's placeholder path -> real .npy files
        argv[argv.index("--data") + 1] = str(data_dir)
    results = root / "tuner-results"
    argv = [sys.executable, *argv[1:], *QUICK_RUN, "--results", str(results)]

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(REPO_ROOT)])
    env["TUNER_CACHE"] = str(root / "cache")
    env.pop("RAY_ADDRESS", None)
    try:
        proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{shlex.join(argv)} did not finish in {RUN_TIMEOUT_S} s:\n"
                    f"{(exc.stdout or '')[-3000:]}\n{(exc.stderr or '')[-3000:]}")
    return {"root": root, "argv": argv, "proc": proc, "env": env, "results": results,
            "workload": workload.name}


@pytest.mark.slow
def test_readme_run_command_end_to_end(readme_run, monkeypatch):
    from click.testing import CliRunner
    from tuner.cli import main
    proc = readme_run["proc"]
    assert proc.returncode == 0, (
        f"{shlex.join(readme_run['argv'])} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    assert (readme_run["results"] / "leaderboard").is_dir()

    # `python -m tuner leaderboard` through its click entry point in this process, from the
    # run's directory with the example importable (the run's PYTHONPATH)
    monkeypatch.chdir(readme_run["root"])
    monkeypatch.syspath_prepend(str(readme_run["root"]))
    board = CliRunner(env={"TUNER_CACHE": readme_run["env"]["TUNER_CACHE"]}).invoke(
        main, ["leaderboard", "--workload", readme_run["workload"],
               "--results", str(readme_run["results"]), "--format", "json"])
    assert board.exit_code == 0, f"leaderboard exited {board.exit_code}:\n{board.stderr[-3000:]}"
    assert board.exception is None, board.exception
    rows = json.loads(board.stdout)
    assert len(rows) == 2, f"--trials 2 recorded {len(rows)} rows: {rows}"
    assert all(r["status"] == "ok" for r in rows), [(r["status"], r.get("error")) for r in rows]
    assert all(r["workload"] == readme_run["workload"] for r in rows)
    assert all(r["samples_per_sec"] and math.isfinite(r["samples_per_sec"])
               and r["samples_per_sec"] > 0 for r in rows)
    baseline = [r for r in rows if r["reference"] == "baseline"]
    assert len(baseline) == 1, "the workload's baseline reference was not measured"
    assert baseline[0]["batch_size"] == 64 and baseline[0]["num_workers"] == 1


@pytest.mark.slow
def test_readme_leaderboard_snippet_reads_the_run(readme_run, monkeypatch):
    assert readme_run["proc"].returncode == 0, "the README's run failed (see the test above)"
    snippet = readme_run["root"] / LEADERBOARD_EXAMPLE
    monkeypatch.chdir(readme_run["root"])  # the snippet reads ./tuner-results, unchanged
    namespace = runpy.run_path(str(snippet), run_name="__main__")
    df = namespace.get("df")
    assert df is not None, f"{LEADERBOARD_EXAMPLE} defines no `df`"
    assert len(df) == 2
    assert set(df["status"]) == {"ok"}
    assert set(df["workload"]) == {readme_run["workload"]}
    assert df["samples_per_sec"].gt(0).all()
