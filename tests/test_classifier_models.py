"""Any torchvision classifier by name: ``--model NAME [--image-size PX]`` on the classifier
workloads (``tuner.workloads.classifier.NamedClassifier``), the generic option hook
(``Workload.configure`` through ``tuner.workload_loader.configured``), and the leaderboard name that
keeps each model's rows apart. In-process, no Ray: one resnet50 trial on CPU at 32 px."""

from __future__ import annotations

import contextlib
import io
import pickle
import re
import sys

import pytest
from click.testing import CliRunner
from rich.console import Console
from torchvision.models import ResNet50_Weights

from tests.test_leaderboard import row as leaderboard_row
from tuner import leaderboard
from tuner.cli import main
from tuner.errors import TunerError
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.progress import Progress
from tuner.settings import RunOptions, TrialSettings
from tuner.trial.flops import model_flops_per_sample
from tuner.trial.harness import run_trial
from tuner.workload_loader import configured, resolve
from tuner.workloads.classifier import LIST_TORCHVISION, NamedClassifier

RESNET50_PARAMETERS = 25_557_032
"""torchvision's documented parameter count of resnet50 (1000 classes)."""

TINY = {"model": "resnet50", "image_size": 32}
NAME = "classifier-resnet50-32px"


@pytest.fixture(scope="module")
def resnet50():
    return configured(resolve("classifier"), TINY)


@pytest.fixture(scope="module")
def resnet50_data(resnet50, tmp_path_factory):
    return resnet50.prepare_default_data(tmp_path_factory.mktemp("cache"), "tiny")


def _cli(*args: str):
    """``python -m tuner <args>`` in this process: (exit code, stdout, stderr lines)."""
    result = CliRunner(env={"COLUMNS": "300"}).invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr.splitlines()


# ------------------------------------------------------------------------ the configured model

def test_model_by_name_is_the_published_architecture_at_the_asked_size(resnet50):
    assert isinstance(resnet50, NamedClassifier) and resnet50.name == NAME
    assert (
        resnet50.parameter_count("tiny") == resnet50.parameter_count("full") == RESNET50_PARAMETERS
    )
    assert sum(p.numel() for p in resnet50.build_model("tiny").parameters()) == RESNET50_PARAMETERS
    assert resnet50.sample_shape("tiny") == {"image": [3, 32, 32], "label": []}
    assert resnet50.references is resolve("classifier").references
    assert resnet50.space_name == "classifier"
    # The base workload is untouched; the size defaults to the weights' crop size (224).
    assert resolve("classifier").name == "classifier"
    default = configured(resolve("classifier299"), {"model": "ResNet50"})
    assert (default.name, default.image_px, default.space_name) == (
        "classifier299-resnet50-224px", 224, "classifier299")


def test_resnet50_trains_on_cpu_at_tiny_scale_after_pickling(resnet50, resnet50_data):
    images = sorted(p for p in resnet50_data.rglob("*.jpg"))
    assert len(images) == 64 and resnet50_data.name == "classifier-images-36px-v1-tiny"
    image, label = resnet50.build_dataset(resnet50_data, "tiny")[0]
    assert list(image.shape) == [3, 32, 32] and int(label) == 0
    clone = pickle.loads(pickle.dumps(resnet50))  # what Ray's workers receive
    assert (clone.name, clone.image_px, clone.architecture) == (
        NAME, 32, resnet50.architecture)
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(resnet50_data),
                             warmup_steps=1, windows=1, window_s=0.2, breakdown_steps=0,
                             max_steady_probes=1)
    result = run_trial(clone, Knobs(batch_size=8), settings)
    assert result["status"] == "ok", result["error"]
    assert result["samples_per_sec"] > 0


def test_flops_follow_the_image_area(resnet50, resnet50_data, tmp_path):
    small = model_flops_per_sample(resnet50, "tiny", resnet50_data)
    larger = configured(resolve("classifier"), {"model": "resnet50", "image_size": 64})
    big = model_flops_per_sample(larger, "tiny",
                                 larger.prepare_default_data(tmp_path, "tiny"))
    # torchvision documents resnet50's forward at 224 px as 4.09 G multiply-adds ("_ops"):
    # forward + backward = 3 x 2 FLOP per multiply-add, scaled by the pixel count.
    expected = 6 * ResNet50_Weights.DEFAULT.meta["_ops"] * 1e9 * (32 / 224) ** 2
    assert small == pytest.approx(expected, rel=0.05)
    assert 3.5 < big / small < 4.5  # 4x the pixels, 4x the convolution FLOPs


def test_run_start_shows_the_models_parameters_and_flops(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))
    plan = make_plan(RunOptions(workload="classifier", workload_options=TINY, device="cpu",
                                results=str(tmp_path / "results")))
    assert plan.workload.name == NAME and plan.run_id.startswith(f"{NAME}-")
    assert plan.settings.model_flops_per_sample > 0
    console = Console(file=io.StringIO(), width=300)
    Progress(console)._start(plan, 1)
    text = console.file.getvalue()
    assert f"tuner run {NAME} — torchvision resnet50 (random init, 1000 classes) on 32x32" in text
    flops_mb = plan.settings.model_flops_per_sample / 1e6
    assert (f"model: {RESNET50_PARAMETERS:,} parameters at tiny scale "
            f"({RESNET50_PARAMETERS:,} at full) · {flops_mb:,.1f} MFLOP/sample") in text


def test_inception_v3_below_299_px_runs_without_its_aux_head():
    w = configured(resolve("classifier"), {"model": "inception_v3", "image_size": 96})
    assert w.name == "classifier-inception_v3-96px"
    assert w.build_model("tiny").AuxLogits is None


# ------------------------------------------------------------------------------ bad input

def test_unknown_model_is_one_line_that_says_how_to_list_the_names():
    code, _, err = _cli("run", "--workload", "classifier", "--model", "resnet5O",
                        "--device", "cpu", "--results", "unused")
    assert code == 2 and len(err) == 1, err
    assert (
        "--model 'resnet5O': not a torchvision classification model (did you mean resnet50"
        in err[0]
    )
    assert LIST_TORCHVISION in err[0] and "Traceback" not in err[0]
    # The listing command in the message runs and lists what --model accepts.
    source = re.fullmatch(r'python -c "(.*)"', LIST_TORCHVISION).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(source, {})
    assert "resnet50" in out.getvalue().split() and "vit_b_16" in out.getvalue().split()


def test_model_on_a_workload_that_takes_none_names_the_ones_that_do():
    code, _, err = _cli("profile", "--workload", "tests.fake_workloads:regression",
                        "--model", "resnet50", "--device", "cpu")
    assert code == 2 and len(err) == 1, err
    assert ("--model resnet50: workload 'fake-regression' does not take --model; workloads "
            "that do: classifier, classifier299") in err[0]


def test_image_size_without_model_and_bad_sizes_are_one_line():
    code, _, err = _cli("run", "--workload", "classifier", "--image-size", "64",
                        "--device", "cpu", "--results", "unused")
    assert code == 2 and len(err) == 1, err
    assert "--image-size 64: the built-in classifier model's input is fixed at 40 px" in err[0]
    with pytest.raises(TunerError, match=r"--model alexnet --image-size 32: the model does not "
                                         r"run on 32x32 inputs \(RuntimeError: .*; its weights "
                                         r"document inputs of at least 63 px; its default is 224"):
        configured(resolve("classifier"), {"model": "alexnet", "image_size": 32})
    for options, flag in (({"image_size": 0}, "--image-size 0"), ({"model": " "}, "--model ' '")):
        with pytest.raises(TunerError, match=re.escape(flag)):
            RunOptions(workload="classifier", workload_options=options)


def test_timm_model_without_timm_says_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    with pytest.raises(TunerError, match=r"--model 'timm:resnet50': timm models need timm, "
                                         r"which is not installed: pip install timm"):
        configured(resolve("classifier"), {"model": "timm:resnet50"})


def test_timm_model_by_name_when_timm_is_installed():
    pytest.importorskip("timm")
    w = configured(resolve("classifier"), {"model": "timm:resnet18", "image_size": 32})
    assert w.name == "classifier-timm-resnet18-32px"
    assert w.parameter_count("tiny") == sum(p.numel() for p in w.build_model("tiny").parameters())


# ------------------------------------------------------------- leaderboard rows kept apart

def test_read_commands_take_the_configured_name_and_keep_models_apart(tmp_path):
    results = tmp_path / "results"
    leaderboard.append(results, [leaderboard_row(0, workload="classifier", sps=500.0),
                                 leaderboard_row(1, run="run-b", workload=NAME, sps=50.0)])
    code, out, err = _cli("best", "--workload", NAME, "--results", str(results))
    assert code == 0, err
    assert '"run_id": "run-b"' in out and '"samples_per_sec": 50.0' in out
    code, out, err = _cli("best", "--workload", "classifier", "--results", str(results))
    assert code == 0 and '"samples_per_sec": 500.0' in out
    # validate reads the rows of the configured workload, not of the bare 'classifier'.
    code, _, err = _cli("validate", "--workload", "classifier", "--model", "resnet18",
                        "--image-size", "32", "--results", str(results))
    assert code == 2 and len(err) == 1, err
    assert "'classifier-resnet18-32px'" in err[0]
