"""The README's code blocks, executed or checked, so the README cannot drift from the code.

Every fenced block of README.md carries a marker on the line before it (blank lines between
allowed), which says what checks it:

* ``<!-- example: NAME -->``: the block is written to a file called NAME and used as the README
  tells the user to use it, by the test ``EXAMPLE_TESTS[NAME]`` names (the workload module is
  held to the ``tuner.workload.Workload`` contract, the search space must contain the
  workload's references, the leaderboard snippet reads what the README's run wrote);
* ``<!-- checked-by: tests/FILE.py::TEST -->``: that test finds the block by its marker and runs
  its commands (a long run with the smallest measurement added);
* ``<!-- checked-by: .ci/run -->``: install and test commands, which CI runs in a fresh virtual
  environment (a clone, a network and 11+ minutes: no unit test runs them);
* the block between the ``sample-output`` markers is output, compared with what tuner prints
  by ``tests/test_readme_sample.py``.

Examples of the docs pages (``docs/*.md``) use the same ``example`` markers and are found by
``documented_examples``.
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

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"

WORKLOAD_EXAMPLE = "my_workload.py"
SPACE_EXAMPLE = "my_space.yaml"
LEADERBOARD_EXAMPLE = "read_leaderboard.py"
EXAMPLE_TESTS = {
    WORKLOAD_EXAMPLE: "tests/test_readme_examples.py::test_workload_example_honours_the_contract",
    SPACE_EXAMPLE: "tests/test_readme_examples.py::test_space_example_contains_the_references",
    LEADERBOARD_EXAMPLE:
        "tests/test_readme_examples.py::test_readme_leaderboard_snippet_reads_the_run",
    "tune_example.py": "tests/test_docs.py::test_tune_example_returns_values_and_prints_them",
}
"""The README's examples and the test that runs each."""
CI = ".ci/run"
MAIN_JOB = "tests/test_readme_examples.py::test_readme_main_job_runs_on_the_embedded_data"
READ_COMMANDS = "tests/test_readme_examples.py::test_readme_read_commands_answer_from_a_run"
OWN_RUN = "tests/test_readme_examples.py::test_readme_run_command_end_to_end"
FENCE_LANGUAGE = {".py": "python", ".yaml": "yaml", ".yml": "yaml"}

# The smallest measurement that still runs every phase of a trial (added to the README's command).
QUICK_RUN = ["--device", "cpu", "--trials", "2", "--windows", "1", "--window-s", "0.1",
             "--warmup-steps", "1", "--confirm", "0", "--no-ceiling"]
RUN_TIMEOUT_S = 600
"""Seconds a README run may take: about a minute on a quiet 2-core machine; minutes more when
other work shares its CPUs."""

_MARKER = re.compile(r"<!--\s*example:\s*(\S+?)\s*-->")
_CHECKED_BY = re.compile(r"<!--\s*checked-by:\s*(\S+?)\s*-->")
_SAMPLE = re.compile(r"<!--\s*sample-output:(start|end)\b")
_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")


class Example:
    def __init__(self, name: str, language: str, code: str, line: int, end: int):
        self.name, self.language, self.code = name, language, code
        self.line = line  # 1-based line of the marker
        self.end = end    # 0-based index of the line after the closing fence


def _blocks(lines: list[str], source: str) -> list[tuple[int, int, str, str]]:
    """Every fenced block as ``(opening index, closing index, fence language, code)``. Fails
    the test naming the line when a block is never closed."""
    blocks, i = [], 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, language = opening.groups()
        for k in range(i + 1, len(lines)):
            if lines[k].strip() == fence:
                break
        else:
            pytest.fail(f"{source} line {i + 1}: a code block is never closed")
        blocks.append((i, k, language, "\n".join(lines[i + 1:k]) + "\n"))
        i = k + 1
    return blocks


def _marker_before(lines: list[str], i: int) -> str:
    """The line before line ``i`` that is not blank ('' at the top)."""
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    return lines[j] if j >= 0 else ""


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
            pytest.fail(
                f"{source} line {j + 1}: the code block of 'example: {name}' is never closed"
            )
        if name in examples:
            pytest.fail(f"{source} line {i + 1}: example name {name!r} already used on line "
                        f"{examples[name].line}")
        examples[name] = Example(name, language, "\n".join(lines[j + 1:k]) + "\n", i + 1, k + 1)
    return examples


def documented_files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))] if DOCS.is_dir() else [README]


def documented_examples() -> dict[str, Example]:
    """The ``example`` blocks of README.md and the docs pages, by name. A page may repeat an
    example of the README under its name (a page reads on its own); the README's is returned,
    then the first page's in name order. A name used twice in one file fails the test."""
    found: dict[str, Example] = {}
    for path in documented_files():
        source = str(path.relative_to(REPO_ROOT))
        for name, example in parse_examples(path.read_text(encoding="utf-8"), source).items():
            found.setdefault(name, example)
    return found


def documented_text() -> str:
    """README.md and the docs pages, one after the other."""
    return "\n".join(path.read_text(encoding="utf-8") for path in documented_files())


def checked_blocks(text: str, source: str = "README.md") -> dict[str, list[str]]:
    """The code of each ``<!-- checked-by: WHERE -->`` block, by WHERE (blocks naming the same
    WHERE are joined)."""
    lines = text.splitlines()
    found: dict[str, list[str]] = {}
    for i, _, _, code in _blocks(lines, source):
        marker = _CHECKED_BY.search(_marker_before(lines, i))
        if marker:
            found.setdefault(marker.group(1), []).append(code)
    return found


def commands(where: str) -> list[list[str]]:
    """The commands of the README's blocks checked by ``where``, one argv each (comments off)."""
    blocks = checked_blocks(README.read_text(encoding="utf-8")).get(where)
    assert blocks, f"README.md has no block marked '<!-- checked-by: {where} -->'"
    return [shlex.split(line.split(" #", 1)[0]) for code in blocks
            for line in code.splitlines() if line.strip()]


def write_examples(directory: Path) -> dict[str, Example]:
    examples = parse_examples(README.read_text(encoding="utf-8"))
    for example in examples.values():
        (directory / example.name).write_text(example.code, encoding="utf-8")
    return examples


def write_vector_folders(root: Path, classes: int = 4, per_class: int = 32) -> Path:
    """The layout the README's workload reads: ``root/<class>/<sample>.npy``, 32 float32 each."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            np.save(root / f"class{c}" / f"{i:03d}.npy", rng.normal(size=32).astype(np.float32))
    return root


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


def _run(argv: list[str], root: Path, pythonpath: list[Path]) -> dict:
    """``argv`` (a README ``python -m tuner run``) with the quick measurement, in ``root``,
    results in ``root/tuner-results``, data cache in ``root/cache``."""
    assert argv[:4] == ["python", "-m", "tuner", "run"], f"unexpected README command {argv}"
    results = root / "tuner-results"
    argv = [sys.executable, *argv[1:], *QUICK_RUN, "--results", str(results)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [*pythonpath, REPO_ROOT])
    env["TUNER_CACHE"] = str(root / "cache")
    env.pop("RAY_ADDRESS", None)
    try:
        proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        out, err = (s.decode(errors="replace") if isinstance(s, bytes) else s or ""
                    for s in (exc.stdout, exc.stderr))
        pytest.fail(f"{shlex.join(argv)} did not finish in {RUN_TIMEOUT_S} s:\n"
                    f"{out[-3000:]}\n{err[-3000:]}")
    assert proc.returncode == 0, (
        f"{shlex.join(argv)} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return {"root": root, "argv": argv, "proc": proc, "env": env, "results": results}


def _cli(args: list[str], env: dict, cwd: Path, monkeypatch):
    """``python -m tuner ARGS`` through its click entry point in this process."""
    from click.testing import CliRunner

    from tuner.cli import main
    monkeypatch.chdir(cwd)
    result = CliRunner(env={"TUNER_CACHE": env["TUNER_CACHE"], "COLUMNS": "200"}).invoke(main, args)
    assert result.exit_code == 0, f"{args} exited {result.exit_code}:\n{result.stderr[-3000:]}"
    assert result.exception is None, result.exception
    return result.stdout


# --------------------------------------------------------------------------------------------
# 1. The markers and their blocks


def test_every_readme_code_block_says_what_checks_it():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    in_sample = [i for i, line in enumerate(lines) if _SAMPLE.search(line)]
    assert len(in_sample) == 2, "README.md needs one sample-output:start and one :end marker"
    unmarked, unknown = [], []
    for i, _, _, _ in _blocks(lines, "README.md"):
        if in_sample[0] < i < in_sample[1]:
            continue  # output: tests/test_readme_sample.py
        before = _marker_before(lines, i)
        example, checked = _MARKER.search(before), _CHECKED_BY.search(before)
        if example:
            where = EXAMPLE_TESTS.get(example.group(1))
            if where is None:
                unknown.append(f"line {i + 1}: example {example.group(1)!r} has no test in "
                               "EXAMPLE_TESTS")
        elif checked:
            where = checked.group(1)
        else:
            unmarked.append(f"line {i + 1}")
            continue
        if where == CI:
            continue
        path, _, test = where.partition("::")
        if not (REPO_ROOT / path).is_file() or not re.search(
                rf"^def {re.escape(test)}\(", (REPO_ROOT / path).read_text(encoding="utf-8"),
                flags=re.M):
            unknown.append(f"line {i + 1}: {where} is not a test")
    assert not unmarked, f"README.md code blocks with no example/checked-by marker: {unmarked}"
    assert not unknown, unknown


def test_the_readme_is_short_and_keeps_its_two_commands():
    """At most 250 lines (the details live in docs/), with the main job on the embedded data
    and the test command."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250, f"README.md has {len(text.splitlines())} lines"
    assert "\npython -m tuner run --workload ddpm\n" in text
    assert '\npip install -e ".[test]" && pytest\n' in text


def test_readme_examples_are_extracted(tmp_path):
    examples = write_examples(tmp_path)
    missing = [name for name in EXAMPLE_TESTS if name not in examples]
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
    checked = "<!-- checked-by: .ci/run -->\n```bash\npytest   # all\n```\n```bash\nls\n```\n"
    assert checked_blocks(checked) == {".ci/run": ["pytest   # all\n"]}


def test_the_readme_install_and_test_commands_are_what_ci_runs():
    """The blocks marked ``checked-by: .ci/run``: CI makes a fresh venv and runs the README's
    install (with the test extras) and test commands, as written."""
    argvs = commands(CI)
    assert ["pip", "install", "-e", "."] in argvs
    assert ["pip", "install", "-e", ".[test]", "&&", "pytest"] in argvs
    assert ["python", "-m", "venv", ".venv", "&&", "source", ".venv/bin/activate"] in argvs
    ci = (REPO_ROOT / CI).read_text(encoding="utf-8")
    assert re.search(r"^python3? -m venv ", ci, flags=re.M)
    assert re.search(r"^pip install (--quiet )?-e \"\.\[test\]\"$", ci, flags=re.M)
    assert re.search(r"^pytest$", ci, flags=re.M)


# --------------------------------------------------------------------------------------------
# 2. The workload module honours the Workload contract


def test_workload_example_honours_the_contract(tmp_path, monkeypatch):
    import torch
    from torch.utils.data import DataLoader

    from tuner.knobs import Knobs
    from tuner.workload import Workload
    from tuner.workload_loader import resolve

    write_examples(tmp_path)
    module = import_example(WORKLOAD_EXAMPLE, tmp_path, monkeypatch)
    assert isinstance(module.workload, Workload)
    workload = module.workload
    assert isinstance(workload.references.get("baseline"), Knobs)
    # The README's `--workload my_workload:workload` resolves to this very object.
    assert resolve(f"{Path(WORKLOAD_EXAMPLE).stem}:workload") is workload

    data_dir = write_vector_folders(tmp_path / "npy-dir")
    dataset = workload.build_dataset(data_dir, "tiny")
    assert len(dataset) == 4 * 32
    assert workload.check_data(data_dir, "tiny") == len(dataset)

    # sample_shape describes one sample's tensors, in order.
    shapes = [list(torch.as_tensor(t).shape) for t in dataset[0]]
    assert shapes == list(workload.sample_shape("tiny").values())

    torch.manual_seed(0)
    batch = next(iter(DataLoader(dataset, batch_size=8, shuffle=True, num_workers=1)))
    assert workload.samples_in(batch) == 8
    for scale in ("tiny", "full"):
        model = workload.build_model(scale)
        loss = workload.training_step(model, batch)
        assert isinstance(loss, torch.Tensor)
        assert loss.ndim == 0, f"training_step returned shape {tuple(loss.shape)}, not a scalar"
        assert torch.isfinite(loss).item()
        loss.backward()  # the harness calls backward on it
        assert all(p.grad is not None for p in model.parameters())
    assert workload.parameter_count("full") > workload.parameter_count("tiny")


def test_the_workload_example_is_at_most_30_lines():
    code = parse_examples(README.read_text(encoding="utf-8"))[WORKLOAD_EXAMPLE].code
    assert len(code.splitlines()) <= 40
    assert len([line for line in code.splitlines() if line.strip()]) <= 30


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
# 4. and 5. The README's runs end to end; the leaderboard snippet and the read commands read them


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """The README's `python -m tuner run` for the examples, on CPU with the smallest settings,
    from a directory holding the example files. Results go to ./tuner-results (the default the
    leaderboard snippet reads)."""
    root = tmp_path_factory.mktemp("readme-run")
    write_examples(root)
    data_dir = write_vector_folders(root / "npy-dir")
    (argv,) = commands(OWN_RUN)
    if "--data" in argv:  # the README's placeholder path -> real .npy files
        argv[argv.index("--data") + 1] = str(data_dir)
    return {**_run(argv, root, [root]), "workload": load_example_workload(root).name}


@pytest.mark.slow
def test_readme_run_command_end_to_end(readme_run, monkeypatch):
    assert (readme_run["results"] / "leaderboard").is_dir()
    # `python -m tuner leaderboard` from the run's directory with the example importable
    monkeypatch.syspath_prepend(str(readme_run["root"]))
    rows = json.loads(_cli(["leaderboard", "--workload", readme_run["workload"], "--results",
                            str(readme_run["results"]), "--format", "json"],
                           readme_run["env"], readme_run["root"], monkeypatch))
    assert len(rows) == 2, f"--trials 2 recorded {len(rows)} rows: {rows}"
    assert all(r["status"] == "ok" for r in rows), [(r["status"], r.get("error")) for r in rows]
    assert all(r["workload"] == readme_run["workload"] for r in rows)
    assert all(r["samples_per_sec"] and math.isfinite(r["samples_per_sec"])
               and r["samples_per_sec"] > 0 for r in rows)
    baseline = [r for r in rows if r["reference"] == "baseline"]
    assert len(baseline) == 1, "no row of the workload's baseline reference"
    assert baseline[0]["batch_size"] == 64 and baseline[0]["num_workers"] == 1


@pytest.mark.slow
def test_readme_leaderboard_snippet_reads_the_run(readme_run, monkeypatch):
    snippet = readme_run["root"] / LEADERBOARD_EXAMPLE
    monkeypatch.chdir(readme_run["root"])  # the snippet reads ./tuner-results, unchanged
    namespace = runpy.run_path(str(snippet), run_name="__main__")
    df = namespace.get("df")
    assert df is not None, f"{LEADERBOARD_EXAMPLE} defines no `df`"
    assert len(df) == 2
    assert set(df["status"]) == {"ok"}
    assert set(df["workload"]) == {readme_run["workload"]}
    assert df["samples_per_sec"].gt(0).all()


@pytest.fixture(scope="module")
def ddpm_run(tmp_path_factory):
    """The README's main job, as written, with the smallest measurement added: the built-in
    ddpm on its embedded dataset (written to a fresh cache)."""
    (argv,) = commands(MAIN_JOB)
    assert argv == ["python", "-m", "tuner", "run", "--workload", "ddpm"], argv
    return _run(argv, tmp_path_factory.mktemp("readme-ddpm"), [])


@pytest.mark.slow
def test_readme_main_job_runs_on_the_embedded_data(ddpm_run):
    out = ddpm_run["proc"].stdout
    assert "tuner run ddpm" in out and "data: " in out
    assert re.search(r"\[search 2/2\] ok +[\d,.]+ samples/sec", out), out[-3000:]
    assert (ddpm_run["root"] / "cache" / "data").is_dir()  # the embedded data, written once


@pytest.mark.slow
def test_readme_read_commands_answer_from_a_run(ddpm_run, monkeypatch):
    argvs = commands(READ_COMMANDS)
    assert [argv[3] for argv in argvs] == ["best", "leaderboard"]
    printed = {}
    for argv in argvs:
        assert argv[:3] == ["python", "-m", "tuner"], argv
        printed[argv[3]] = _cli([*argv[3:], "--results", str(ddpm_run["results"])],
                                ddpm_run["env"], ddpm_run["root"], monkeypatch)
    assert printed["best"].startswith("# tuner best for ddpm on ")
    assert "batch_size=" in printed["best"]
    compile(printed["best"], "best.py", "exec")  # code to paste: valid Python
    assert "samples/sec" in printed["leaderboard"] and "bs=" in printed["leaderboard"]
