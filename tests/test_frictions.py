"""What a new user meets: a workload without embedded data, the README's bring-your-own
section, the reusable datasets, a ``./workloads/`` of the user's own beside the built-ins, the
ready-to-paste commands, the trial budget's wording, the leaderboard's phase column and the
``--global-batch-size`` error. In-process, no Ray; a subprocess for the user's ``./workloads/``
in the current directory (a fresh interpreter is the only honest way)."""

from __future__ import annotations

import json
import os
import pickle
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

from tests.conftest import REPO_ROOT
from tests.test_readme_examples import DOCS, README, documented_examples
from tuner.errors import DataError, SpaceError
from tuner.knobs import Knobs
from tuner.status import Phase
from tuner.workload import Workload
from tuner.workload_loader import resolve

TESTS_SPACE = REPO_ROOT / "tests" / "tests-space.yaml"
"""The engine tests' search space (``tests.fake_workloads``)."""

NO_DATA_MODULE = '''
import torch
from torch import nn
from tuner.knobs import Knobs
from tuner.workload import Workload

class NoData(Workload):
    name = "no-data"
    description = "a workload whose data is always the user's"
    source = "tests"
    references = {"baseline": Knobs(batch_size=4)}
    data_is_file = DATA_IS_FILE

    def build_model(self, scale):
        return nn.Linear(16, 1)

    def build_dataset(self, data_dir, scale):
        from tests.fake_workloads import NpyFiles
        return NpyFiles(data_dir)

    def training_step(self, model, batch):
        x, y = batch
        return nn.functional.mse_loss(model(x).squeeze(-1), y)

    def sample_shape(self, scale):
        return {"x": [16], "y": []}

workload = NoData()
'''


def _no_data_module(directory: Path, name: str, data_is_file: bool = False) -> Path:
    path = directory / f"{name}.py"
    path.write_text(NO_DATA_MODULE.replace("DATA_IS_FILE", str(data_is_file)))
    return path


# ---------------------------------------------------------------- 1. prepare_default_data


def test_a_workload_without_embedded_data_runs_on_given_data(tmp_path, regression_data,
                                                              monkeypatch):
    from tuner.option_checks import checked_data
    monkeypatch.setattr(sys, "path", list(sys.path))  # the file's directory goes on it
    path = _no_data_module(tmp_path, "frictions_no_data")
    w = resolve(f"{path}:workload")           # an abstract method would refuse to instantiate
    from tests.fake_workloads import regression
    assert not w.has_default_data and regression.has_default_data
    data_dir, samples = checked_data(w, str(regression_data), "tiny")
    assert samples == 64 and data_dir == regression_data.resolve()


@pytest.mark.parametrize("data_is_file, wanted", [(False, "--data DIR (a directory)"),
                                                  (True, "--data FILE (one file)")])
def test_without_data_or_default_the_run_stops_with_one_line(tmp_path, monkeypatch, data_is_file,
                                                             wanted):
    from tuner.cli import main
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = _no_data_module(tmp_path, f"frictions_no_data_{int(data_is_file)}", data_is_file)
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  batch_size: {choices: [4, 8]}\n  num_workers: 0\n")
    result = CliRunner().invoke(main, ["run", "--workload", f"{path}:workload", "--space",
                                       str(space), "--device", "cpu", "--results",
                                       str(tmp_path / "results")])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "workload 'no-data' has no embedded dataset" in lines[0] and wanted in lines[0]
    assert not (tmp_path / "results").exists()


# ------------------------------------------------- 2. and 3. the README's bring-your-own


def _bring_your_own() -> str:
    """The README's bring-your-own section and the docs page it links (when there is one)."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## Bring your own model")
    page = DOCS / "bring-your-own.md"
    return text[start:text.index("\n## ", start + 1)] + (
        page.read_text(encoding="utf-8") if page.is_file() else "")


def test_readme_documents_every_optional_member_of_the_contract():
    section = _bring_your_own()
    optional = [name for name, value in vars(Workload).items()
                if not name.startswith("_") and not getattr(value, "__isabstractmethod__", False)
                and name not in ("name", "description", "source", "references", "space",
                                 "space_name", "baseline", "parameter_count", "has_default_data",
                                 "learning_rate", "option_names", "configure")]
    assert {"prepare_default_data", "data_is_file", "units_per_sample", "build_optimizer"} <= set(
        optional)
    missing = [name for name in optional if f"`{name}" not in section]
    assert not missing, f"the bring-your-own section and page do not document {missing}"
    for name in re.findall(r"^\| `(\w+)", section, flags=re.M):   # the table names real members
        assert hasattr(Workload, name), name
    assert "cpu:" in section and "cuda:" in section and "tuner.workloads.datasets" in section


def test_readme_device_sections_example_applies_per_device(tmp_path):
    from tuner.space import IntRange, load_space
    example = documented_examples()["my_space_devices.yaml"]
    file = tmp_path / "space.yaml"
    file.write_text(example.code)
    space = load_space(file, is_file=True)
    cpu, cuda = space.for_device("cpu", max_workers=4), space.for_device("cuda", max_workers=4)
    assert cpu.domains["batch_size"] == IntRange(8, 128, True)
    assert cuda.domains["batch_size"] == IntRange(16, 1024, True)
    assert cpu.constants["amp"] == "off" and "amp" not in cpu.domains
    assert cuda.domains["amp"].values == ("off", "bf16")
    assert cpu.domains["num_workers"] == cuda.domains["num_workers"]  # not named: kept


# ------------------------------------------------------------------ 4. reusable datasets


def test_datasets_are_public_documented_and_the_builtins_own(tmp_path, monkeypatch):
    import tuner.workloads.datasets as datasets
    from tuner.workloads import chargpt, classifier, segmentation3d
    for name in datasets.__all__:
        assert f"``{name}" in datasets.__doc__, f"tuner.workloads.datasets does not document {name}"
    assert datasets.CharWindows is chargpt.CharWindows
    assert datasets.VolumePatchDataset is segmentation3d.VolumePatchDataset
    assert datasets.image_folder is classifier.image_folder

    text = tmp_path / "corpus.txt"
    text.write_text("to be or not to be " * 20)
    windows = datasets.CharWindows(text, block_size=16)
    x, y = windows[3]
    assert len(windows) == 380 // 16 and x.shape == y.shape == (16,) and x.dtype == torch.int64
    assert torch.equal(x[1:], y[:-1])

    from tuner.workloads._data import write_image_folder
    write_image_folder(tmp_path / "images", {"a": 2, "b": 3}, (8, 8), seed=0)
    images = datasets.image_folder(tmp_path / "images", transform=lambda img: img.float())
    assert datasets.check_image_folder(images) == 5 and images[4][0].shape == (3, 8, 8)
    assert images[4][1] == 1


def test_volume_patches_take_the_users_number_of_classes(tmp_path, monkeypatch):
    import nibabel

    from tuner.workloads.datasets import VolumePatchDataset, build_pairs
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))
    for sub in ("images", "labels"):
        (tmp_path / "data" / sub).mkdir(parents=True)
    image = np.arange(6 * 8 * 8, dtype=np.float32).reshape(8, 8, 6)    # NIfTI: (X, Y, Z)
    label = np.full((8, 8, 6), 4, dtype=np.uint8)                        # class 4 of 5
    for sub, volume in (("images", image), ("labels", label)):
        nibabel.Nifti1Image(volume, np.eye(4)).to_filename(tmp_path / "data" / sub / "c0.nii.gz")
    with pytest.raises(DataError, match=r"values must be integers in 0\.\.2"):
        build_pairs(tmp_path / "data")                  # the built-in's 3 classes
    pairs = build_pairs(tmp_path / "data", num_classes=5)
    patches = VolumePatchDataset(pairs, patch=(4, 4, 4), num_classes=5, patches_per_volume=2)
    img, lab = patches[1]
    assert img.shape == (1, 4, 4, 4) and lab.shape == (4, 4, 4) and int(lab.max()) == 4


# --------------------------------------------------- 5. a ./workloads/ of the user's own

BUILTIN_DIR = REPO_ROOT / "tuner" / "workloads"

_NO_EDITABLE_FINDER = (
    "import sys\n"
    "sys.meta_path[:] = [f for f in sys.meta_path\n"
    "                    if not getattr(f, '__module__', '').startswith('__editable__')]\n")
"""tuner importable from the checkout on PYTHONPATH only (no ``pip install -e`` finder), with
the current directory first on ``sys.path`` as ``python -c`` puts it."""

_USERS_OWN = _NO_EDITABLE_FINDER + '''
import json, pickle
from tuner.workload_loader import available, resolve
out = {"known": sorted(available())}
ddpm = resolve("ddpm")
chargpt = resolve("chargpt")
out["builtin_files"] = [sys.modules["tuner.workloads.ddpm"].__file__,
                        sys.modules["tuner.workloads.chargpt"].__file__]
out["user_package"] = sys.modules["workloads"].__file__ if "workloads" in sys.modules else None
out["mine"] = resolve("workloads.mine:workload").name
out["user_package_after"] = sys.modules["workloads"].__file__
# A Ray worker unpickles the workload before importing anything of tuner's.
data = pickle.dumps(ddpm)
for name in [m for m in sys.modules if m.split(".")[0] == "tuner"]:
    del sys.modules[name]
again = pickle.loads(data)
out["unpickled"] = [type(again).__name__, again.name,
                    sys.modules["tuner.workloads.ddpm"].__file__]
print(json.dumps(out))
'''


def test_a_users_own_workloads_folder_in_the_current_directory_changes_nothing(tmp_path):
    """A ``./workloads/`` package of the user's own, holding modules named like the built-ins,
    neither hides the built-ins nor is hidden by them."""
    package = tmp_path / "workloads"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mine.py").write_text(
        "from tests.fake_workloads import regression as workload\n")
    (package / "ddpm.py").write_text("raise RuntimeError('the user ddpm was imported')\n")
    (package / "chargpt.py").write_text("workload = None\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TUNER_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", _USERS_OWN], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"ddpm", "chargpt", "classifier"} <= set(out["known"])
    assert [Path(f) for f in out["builtin_files"]] == [BUILTIN_DIR / "ddpm.py",
                                                       BUILTIN_DIR / "chargpt.py"]
    assert out["user_package"] is None                   # resolving a built-in never imports it
    assert out["mine"] == "fake-regression"
    assert Path(out["user_package_after"]) == package / "__init__.py"
    kind, name, file = out["unpickled"]
    assert (kind, name, Path(file)) == ("DDPMWorkload", "ddpm", BUILTIN_DIR / "ddpm.py")


def test_a_builtin_pickles_and_copies_with_its_attributes():
    import copy
    ddpm = resolve("ddpm")
    again = pickle.loads(pickle.dumps(ddpm))
    assert type(again) is type(ddpm) and again.__dict__ == ddpm.__dict__
    assert copy.copy(ddpm).__dict__ == ddpm.__dict__
    from tests.fake_workloads import regression  # not a built-in: pickled by reference
    assert pickle.loads(pickle.dumps(regression)).name == regression.name


# ---------------------------------------------------------------- 6. ready to paste


def _paste(plan_options: dict, data_dir: Path | None = None):
    from tuner.summary import paste_commands
    options = SimpleNamespace(**{"results": "tuner-results", "device": "auto", "scale": None,
                                 "data": None, "workload_options": {}, **plan_options})
    plan = SimpleNamespace(options=options, data_dir=data_dir, device="cpu", scale="tiny")
    summary = SimpleNamespace(workload="no-data", results_dir="tuner-results")
    return paste_commands(plan, summary)


def test_pasted_commands_parse_and_find_the_workload(tmp_path, regression_data, monkeypatch):
    from tuner.cli import main
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    _no_data_module(tmp_path, "frictions_paste")
    lines = _paste({"workload": "frictions_paste.py:workload", "data": str(regression_data),
                    "scale": "tiny"}, regression_data)
    assert [shlex.split(line)[3] for line in lines] == ["best", "profile", "validate"]
    for line in lines:
        argv = shlex.split(line)
        assert argv[:3] == ["python", "-m", "tuner"]
        command = main.commands[argv[3]]
        params = command.make_context(argv[3], argv[4:]).params   # click parses it as given
        assert params["results"] == "tuner-results"
        if argv[3] == "best":
            assert params["workload"] == "no-data"                   # rows are read by name
            continue
        assert resolve(params["workload"]).name == "no-data"         # imported as the run did
        assert Path(params["data"]) == regression_data
    assert "--scale tiny" in lines[1]


def test_readme_shows_the_paste_lines_the_code_prints():
    from tuner.summary import paste_commands
    options = SimpleNamespace(workload="my_workload:workload", workload_options={},
                              results="tuner-results", data="/path/to/npy-dir", device="auto",
                              scale=None)
    plan = SimpleNamespace(options=options, data_dir=Path("/path/to/npy-dir"))
    summary = SimpleNamespace(workload="my-mlp", results_dir="tuner-results")
    section = _bring_your_own()
    for line in paste_commands(plan, summary):
        assert f"\n  {line}\n" in section, line


def test_paste_without_a_plan_or_with_an_object_gives_best_only():
    from tuner.summary import paste_commands
    summary = SimpleNamespace(workload="ddpm", results_dir="my results")
    assert paste_commands(None, summary) == [
        "python -m tuner best --workload ddpm --results 'my results' --format python"]
    plan = SimpleNamespace(options=SimpleNamespace(workload=resolve("ddpm")))
    assert paste_commands(plan, summary, "cpu:x") == [
        "python -m tuner best --workload ddpm --results 'my results' --hardware cpu:x "
        "--format python"]


# ------------------------------------------------------- 7. budget, counter, phase column


def _row(phase: str = "search", reference: str | None = None, ceiling: str | None = None,
         sps: float = 10.0, batch_size: int = 8) -> dict:
    from tuner import leaderboard
    return leaderboard.normalise_row({
        "status": "ok", "phase": phase, "reference": reference, "ceiling": ceiling,
        "samples_per_sec": sps, "batch_size": batch_size, "num_workers": 0})


def test_trial_counter_keeps_the_search_budget_as_its_denominator():
    from tuner.progress import Progress, _Counter
    console = Console(record=True, width=200)
    progress = Progress(console)
    progress.counter = _Counter("search", 0, 3)
    for i in range(3):
        progress.on_event("trial", {"row": _row(), "index": i + 1, "total": 3})
    # Rounds 1-3 as one experiment (2 configurations: 6 trials), then a 4th round for a
    # figure that could not be true.
    progress.on_event("phase", {"phase": Phase.REMEASURE, "count": 6, "round": 1,
                                "last_round": 3, "rounds": 3, "windows": 2})
    for i in range(4):
        progress.on_event("trial", {"row": _row("remeasure"), "index": 4 + i, "total": 9})
    progress.on_event("phase", {"phase": Phase.REMEASURE, "count": 2, "round": 4,
                                "last_round": 4, "rounds": 4, "windows": 2})
    progress.on_event("trial", {"row": _row("remeasure"), "index": 8, "total": 9})
    for label in ("compute", "loader"):
        progress.on_event("phase", {"phase": Phase.CEILING, "count": 1, "ceiling": label})
        progress.on_event("trial", {"row": _row("ceiling", ceiling=label), "index": 8,
                                    "total": 8})
    printed = console.export_text()
    counters = re.findall(r"^\s+\[([^\]]+)\]\s+ok", printed, flags=re.M)
    assert counters == ["search 1/3", "search 2/3", "search 3/3", "remeasure 1/6",
                        "remeasure 2/6", "remeasure 3/6", "remeasure 4/6", "remeasure 5/6",
                        "ceiling 1", "ceiling 2"]
    text = " ".join(printed.split())
    assert "re-measuring, rounds 1-3 of 3: 6 trials" in text
    assert "re-measuring, round 4 of 4: 2 trials" in text
    # a first round the time left holds alone is not announced as the first of three
    console = Console(record=True, width=300)
    Progress(console).on_event("phase", {"phase": Phase.REMEASURE, "count": 3, "round": 1,
                                         "last_round": 1, "rounds": 3, "windows": 2})
    assert ("re-measuring, round 1 of 3 (the time left holds this one now): 3 trials"
            in " ".join(console.export_text().split()))


def test_the_header_says_what_the_budget_covers(tmp_path, regression_data):
    from tuner.option_checks import make_plan
    from tuner.progress import Progress
    from tuner.settings import RunOptions
    plan = make_plan(RunOptions(workload="tests.fake_workloads:regression", trials=3,
                                device="cpu", data=str(regression_data), probe="off",
                                results=str(tmp_path / "results")))
    console = Console(record=True, width=300)
    Progress(console).on_event("start", {"plan": plan, "concurrency": 1})
    text = console.export_text()
    assert "budget: 3 search trials (references included)" in text
    assert "per trial: 1 warm-up step, 3 windows of 2 s" in text     # the tiny scale's defaults
    assert ("after the search, beyond its budget: the 3 best re-measured beside the references "
            "(--confirm 3) · the ceilings, one short trial each (--no-ceiling skips them)") in text
    quiet = make_plan(RunOptions(workload="tests.fake_workloads:regression", trials=3,
                                 device="cpu", data=str(regression_data), probe="off",
                                 confirm=0, ceiling=False, results=str(tmp_path / "results")))
    console = Console(record=True, width=300)
    Progress(console).on_event("start", {"plan": quiet, "concurrency": 1})
    assert "after the search" not in console.export_text()


def _ten_search_lines(plan) -> str:
    """What the printer shows for ``plan``'s start and ten search trials without a total."""
    from tuner.progress import Progress
    console = Console(record=True, width=300)
    progress = Progress(console)
    progress.on_event("start", {"plan": plan, "concurrency": 1})
    for i in range(10):
        progress.on_event("trial", {"row": _row(), "index": i + 1, "total": None})
    progress.close()
    return console.export_text()


def test_without_trials_the_count_is_a_cap_and_the_counter_has_no_denominator(
        tmp_path, regression_data):
    """On CPU without --trials the time budget ends the run: the trial count it plans (three
    times 12 with screening) is a cap, printed as one, and the trial lines count up without it
    ('search 2', not 'search 2/36', which would promise 36 trials)."""
    from tuner.option_checks import make_plan
    from tuner.settings import RunOptions
    plan = make_plan(RunOptions(workload="tests.fake_workloads:regression", device="cpu",
                                data=str(regression_data), probe="off",
                                results=str(tmp_path / "results")))
    assert plan.trials == 36 and plan.time_budget_s == 210
    text = _ten_search_lines(plan)
    assert "budget: up to 36 search trials (references included), time budget 3 min 30 s" in text
    assert re.findall(r"^\s+\[([^\]]+)\]\s+ok", text, flags=re.M) == [
        f"search {i}" for i in range(1, 11)]
    # the status column stays where it is past the ninth trial: the count pads to the cap's width
    assert len({line.index(" ok ") for line in text.splitlines() if "] " in line
                and " ok " in line}) == 1
    # --time-budget alone sets no cap: the count pads to two digits
    budget_only = make_plan(RunOptions(workload="tests.fake_workloads:regression", device="cpu",
                                       data=str(regression_data), probe="off", time_budget_s=60,
                                       results=str(tmp_path / "results")))
    assert budget_only.trials is None
    lines = [line for line in _ten_search_lines(budget_only).splitlines() if "] " in line
             and " ok " in line]
    assert len(lines) == 10 and len({line.index(" ok ") for line in lines}) == 1


def test_leaderboard_table_has_a_phase_column():
    from tuner.cli import _rank_table
    rows = [_row(batch_size=16), _row("remeasure", batch_size=16), _row("ceiling", ceiling=None),
            _row("ceiling", ceiling="loader")]
    console = Console(record=True, width=250)
    console.print(_rank_table(rows, "t"))
    lines = [ln for ln in console.export_text().splitlines() if re.match(r"^│ \d", ln)]
    phases = [ln.split("│")[3].strip() for ln in lines]
    assert phases == ["search", "remeasure", "ceiling: compute", "ceiling: loader"]


def test_a_row_of_one_window_shows_no_window_spread():
    """A round of one window records an IQR of 0 (one rate): the table leaves its ±IQR blank
    rather than print a spread of 0.0; a row of two windows shows its own."""
    from tuner.cli import _rank_table
    one = {**_row("remeasure"), "windows": 1, "samples_per_sec_iqr": 0.0}
    two = {**_row("remeasure"), "windows": 2, "samples_per_sec_iqr": 1.25}
    console = Console(record=True, width=250)
    console.print(_rank_table([one, two], "t"))
    lines = [ln for ln in console.export_text().splitlines() if re.match(r"^│ \d", ln)]
    spreads = [ln.split("│")[6].strip() for ln in lines]
    assert spreads == ["", "1.2"]


def test_global_batch_error_names_the_multiple_that_fits_every_reference(tmp_path):
    from tuner.space import load_space
    space = load_space(TESTS_SPACE, is_file=True).for_device("cpu", max_workers=2)
    space = space.with_global_batch(20)
    refs = {"baseline": Knobs(batch_size=8), "recommended": Knobs(batch_size=12)}
    with pytest.raises(SpaceError) as caught:
        space.fit_references(refs)
    message = str(caught.value)
    assert "baseline (8), recommended (12)" in message
    assert "a multiple of 24" in message and "e.g. 24 or 48" in message
    fitted = dict(load_space(TESTS_SPACE, is_file=True).for_device("cpu", max_workers=2)
                  .with_global_batch(48).fit_references(refs))
    assert fitted["baseline"].grad_accum == 6 and fitted["recommended"].grad_accum == 4


def test_the_run_names_what_it_starts_before_its_first_line(tmp_path, regression_data,
                                                           monkeypatch):
    """Ray's start and the memory probe print nothing of their own (15-34 s on an H200 with
    the plan and the first trial process): a spinner names them until the run's first event,
    then gives way to it."""
    import io
    import time

    import tuner.api
    import tuner.cli as cli
    from tuner.errors import TunerError
    screen = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=screen, force_terminal=True, width=200))
    seen = {}

    def tune_plan(plan, on_event):
        time.sleep(0.3)  # the spinner draws a frame or more
        seen["before"] = screen.getvalue()
        on_event("machine", {"text": "machine limit: from the probe"})
        seen["after"] = screen.getvalue()[len(seen["before"]):]
        time.sleep(0.3)  # a spinner still running would draw again
        raise TunerError("stopped here")

    monkeypatch.setattr(tuner.api, "tune_plan", tune_plan)
    done = CliRunner().invoke(cli.main, [
        "run", "--workload", "tests.fake_workloads:regression", "--data", str(regression_data),
        "--device", "cpu", "--results", str(tmp_path / "r"), "--trials", "2", "--probe", "on"])
    assert done.exit_code == 2, done.output
    assert "starting Ray (local), then the memory probe" in seen["before"]
    assert "machine limit: from the probe" in seen["after"]
    assert "starting Ray" not in screen.getvalue().split("machine limit: from the probe")[1]
    # Ctrl-C before the first event (during Ray's start): the spinner ends with the command

    def interrupted(plan, on_event):
        time.sleep(0.3)
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner.api, "tune_plan", interrupted)
    CliRunner().invoke(cli.main, [
        "run", "--workload", "tests.fake_workloads:regression", "--data", str(regression_data),
        "--device", "cpu", "--results", str(tmp_path / "r2"), "--trials", "2", "--probe", "on"])
    drawn = len(screen.getvalue())
    time.sleep(0.3)  # a spinner left running would draw again
    assert len(screen.getvalue()) == drawn
    from tuner.progress import starting_text
    plan = SimpleNamespace(options=SimpleNamespace(address="10.0.0.1:6379"), should_probe=False)
    assert starting_text(plan) == "connecting to the Ray cluster…"
