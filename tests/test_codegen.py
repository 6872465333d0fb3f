"""The winner handed back as code (``tuner.codegen``): ``best --format python`` prints the
lines of the winner's data path (a DataLoader, the decoded cache, or the dataset resident on
the device), the printed code trains when executed, and ``validate`` makes its batches with
those very lines and reads the trial's samples/sec again. On CPU, on the built-in classifier
configured as mobilenet_v3_small at 32 px (its tiny default data: 64 JPEGs of 36 px)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import tuner_in_process
from tests.test_leaderboard import row as leaderboard_row
from tuner import leaderboard
from tuner.codegen import data_code, fill_workers, python_text, workload_lines
from tuner.knobs import Knobs

OPTIONS = {"model": "mobilenet_v3_small", "image_size": 32}
NAME = "classifier-mobilenet_v3_small-32px"
"""The leaderboard name of ``--workload classifier --model mobilenet_v3_small --image-size 32``."""
VALIDATE = ["--workload", "classifier", "--model", "mobilenet_v3_small", "--image-size", "32"]
REGRESSION = "tests.fake_workloads:regression"
"""A workload without ``sample_path``."""

PATHS = {
    "loader": Knobs(batch_size=16),
    "cache": Knobs(batch_size=16, data_path="cache", num_workers=1),
    "device": Knobs(batch_size=16, data_path="device", channels_last=True),
}


@pytest.fixture(scope="module")
def workload():
    from tuner.workload_loader import configured, resolve
    return configured(resolve("classifier"), OPTIONS)


@pytest.fixture(scope="module")
def data_dir(workload, tmp_path_factory):
    return workload.prepare_default_data(tmp_path_factory.mktemp("codegen-data"), "tiny")


# ------------------------------------------------------------------------------ the text


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_printed_code_holds_the_data_lines_verbatim_and_compiles(path, device):
    knobs = PATHS[path]
    lines = workload_lines("tuner.workloads.classifier:workload", OPTIONS)
    text = python_text(knobs, device, scale="tiny", workers=2, workload=lines)
    compile(text, "best.py", "exec")
    data = data_code(knobs, device=device, scale="tiny", workers=2)
    assert data in text
    if path == "loader":
        assert "DataLoader(dataset, shuffle=True, drop_last=True, batch_size=16" in text
        assert "workload" not in text and "x = x.to(" in text
        return
    assert text.startswith("# yours: model, loss_fn, lr, data_dir\n"
                           "from tuner.workloads.classifier import workload")
    assert "workload = workload.configure(model='mobilenet_v3_small', image_size=32)" in text
    assert "path = workload.sample_path(data_dir, 'tiny')" in text
    assert "DecodedCache.fill(path.decoded, workers=2)" in text
    if path == "cache":
        assert "DataLoader(CachedDataset(cache, path.augment), shuffle=True" in text
        assert "num_workers=1" in text and "x = x.to(" in text
    else:
        assert f".to({device!r})  # decoded once" in text
        assert "DeviceBatches(cache, 16, path.augment_batch)" in text
        assert ".to(" not in text.split("for x, y in loader")[1]  # no copies in the loop
        assert "x = x.contiguous(memory_format=torch.channels_last)" in text


def test_workload_lines_name_the_import_path():
    assert workload_lines("tuner.workloads.ddpm:workload") == [
        "from tuner.workloads.ddpm import workload  # the tuned workload"]
    assert workload_lines("my_pkg.wl:mine") == [
        "from my_pkg.wl import mine as workload  # the tuned workload"]
    assert workload_lines("src/wl.py:mine") == [
        "from tuner.workload_loader import resolve",
        "workload = resolve('src/wl.py:mine')  # the tuned workload"]


def test_workload_source_finds_names_import_paths_and_configured_names(workload):
    from tuner.trial.validate import workload_source
    found, lines = workload_source("classifier")
    assert found.name == "classifier"
    assert lines == ["from tuner.workloads.classifier import workload  # the tuned workload"]
    found, lines = workload_source(NAME)
    assert found.name == NAME and lines[1] == (
        "workload = workload.configure(model='mobilenet_v3_small', image_size=32)")
    found, lines = workload_source(REGRESSION)
    assert found.name == "fake-regression"
    assert lines == [
        "from tests.fake_workloads import regression as workload  # the tuned workload"
    ]
    assert workload_source("fake-regression") == (None, None)  # a name, not found from here
    assert workload_source("classifier-nosuchmodel-32px") == (None, None)


def test_without_a_known_workload_the_text_says_whose_names_are_missing():
    text = python_text(PATHS["cache"], "cpu")
    assert text.splitlines()[0] == "# yours: model, loss_fn, lr, data_dir, scale, workload"
    assert "returns a tuner.data.SamplePath" in text
    assert "path = workload.sample_path(data_dir, scale)" in text
    compile(text, "best.py", "exec")


def test_fill_workers_are_the_trials_cpus():
    assert [fill_workers(c) for c in (None, 1.0, 2.0, 8.0)] == [0, 0, 2, 8]


# ---------------------------------------------- best --format python, executed as printed


def _rows(knobs: Knobs, workload: str = NAME, **extra) -> list[dict]:
    return [leaderboard_row(0, workload=workload, knobs=knobs, sps=100.0, trial_cpus=None,
                            **extra)]


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_best_python_for_each_path_trains_when_executed(path, workload, data_dir, tmp_path):
    knobs = PATHS[path]
    leaderboard.append(tmp_path, _rows(knobs))
    proc = tuner_in_process("best", "--workload", NAME, "--results", str(tmp_path),
                            "--format", "python")
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout
    assert data_code(knobs, device="cpu", scale="tiny") in printed
    torch.manual_seed(0)
    model = workload.build_model("tiny")
    before = [p.detach().clone() for p in model.parameters()]
    losses = []

    def loss_fn(logits, labels):
        assert logits.shape == (16, 1000) and labels.shape == (16,)
        losses.append(F.cross_entropy(logits, labels))
        return losses[-1]

    namespace = {"model": model, "loss_fn": loss_fn, "lr": 1e-3, "data_dir": data_dir}
    if path == "loader":
        namespace["dataset"] = workload.build_dataset(data_dir, "tiny")
    exec(compile(printed, "best.py", "exec"), namespace)
    assert len(losses) == 64 // 16                      # one epoch, the last batch dropped
    assert all(math.isfinite(loss.item()) for loss in losses)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    if path != "loader":
        assert namespace["workload"].name == NAME       # the printed import, configured


# ------------------------------------------------------ validate runs the printed lines


@pytest.mark.slow
@pytest.mark.parametrize("path", ["cache", "device"])
def test_validate_trains_with_the_printed_lines_and_reads_the_trials_rate(
        path, workload, data_dir, tmp_path, monkeypatch):
    """A real trial of the path, then ``validate`` on its row: the batches come from the lines
    ``best --format python`` prints, and the figure it holds the plain loop to is the trial's.
    How closely the two agree is a benchmark's question (docs/benchmarks.md): two measurements
    minutes apart on 2 busy cores differ by 2x and more. A unit slip (per step, per rank) would
    be off by the batch size, 16x: the ratio stays within 8x."""
    import tuner.trial.validate as validate
    from tuner.settings import TrialSettings
    from tuner.trial.harness import run_trial
    knobs = PATHS[path]
    result = run_trial(workload, knobs, TrialSettings(
        scale="tiny", device="cpu", data_dir=str(data_dir), warmup_steps=1, windows=3,
        window_s=0.5), cpus=1)
    assert result["status"] == "ok", result["error"]
    assert result["cache_fill_s"] > 0
    leaderboard.append(tmp_path, [{**leaderboard_row(0, workload=NAME, knobs=knobs),
                                   **result, "trial_cpus": 2.0}])
    best = tuner_in_process("best", "--workload", NAME, "--results", str(tmp_path),
                            "--format", "python")
    assert best.returncode == 0, best.stderr
    ran = []
    real = validate.train_loop
    monkeypatch.setattr(
        validate, "train_loop", lambda *a, **k: ran.append(real(*a, **k)) or ran[-1]
    )
    proc = tuner_in_process("validate", *VALIDATE, "--results", str(tmp_path),
                            "--data", str(data_dir))
    assert proc.returncode == 0, proc.stderr
    assert ran[0].data_code in best.stdout              # the printed lines made its batches
    assert "workers=2" in ran[0].data_code
    assert f"cache fill ({path} path)" in proc.stdout
    predicted = proc.stdout.split("predicted (trial median)")[1].split("│")[1]
    assert float(predicted.replace(",", "")) == round(result["samples_per_sec"], 1)
    ratio = float(proc.stdout.split("measured ÷ predicted")[1].split()[1])
    assert ratio == round(ran[0].samples_per_sec / result["samples_per_sec"], 2)
    assert 1 / 8 <= ratio <= 8, proc.stdout


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("command", ["best", "validate"])
def test_a_path_the_workload_cannot_take_is_one_line_exit_2(command, tmp_path):
    leaderboard.append(tmp_path, _rows(Knobs(batch_size=8, data_path="device"),
                                       workload="fake-regression"))
    args = ["--workload", REGRESSION, "--results", str(tmp_path)]
    proc = tuner_in_process(command, *args, *(["--format", "python"] if command == "best" else []))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["error: data_path=device: workload 'fake-regression' does not split its "
                     "sample path (Workload.sample_path); accepted for it: data_path=loader"]
