"""channels_last is searched only where it can change something: models with a 4-D or 5-D
parameter (Conv2d/Conv3d). A transformer or an MLP does not spend trials on it."""

from __future__ import annotations

from tuner.flops import has_image_layout
from tuner.plan import make_plan
from tuner.settings import RunOptions
from tuner.workload import resolve

SPACE = ("knobs:\n  batch_size: {choices: [4, 16]}\n  num_workers: 0\n"
         "  channels_last: {choices: [false, true]}\n")


def test_models_with_and_without_an_image_layout():
    assert has_image_layout(resolve("ddpm"), "tiny")              # a U-Net: Conv2d
    assert has_image_layout(resolve("segmentation3d"), "tiny")    # Conv3d
    assert not has_image_layout(resolve("chargpt"), "tiny")       # a transformer
    assert not has_image_layout(resolve("tests.fake_workloads:regression"), "tiny")  # an MLP


def test_a_model_without_one_does_not_sample_channels_last(tmp_path, regression_data):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    plan = make_plan(RunOptions(workload="tests.fake_workloads:regression", space_file=str(space),
                                data=str(regression_data), trials=3, device="cpu",
                                results=str(tmp_path / "results"), probe="off"))
    assert "channels_last" not in plan.device_space.domains
    assert plan.device_space.constants["channels_last"] is False
    assert "channels_last" in plan.space.domains                   # the file is unchanged


def test_builtin_spaces_offer_cuda_graphs_on_cuda_only():
    """Every built-in workload trains on static shapes (drop_last batches, fixed crops and
    contexts), so torch.compile's reduce-overhead mode (CUDA graphs) is searched on CUDA."""
    from tuner.space import load_space
    from tuner.workload import BUILTINS
    for name in BUILTINS:
        space = load_space(resolve(name).space_name)
        assert "reduce-overhead" in space.for_device("cuda", max_workers=16).domains["compile"].values
        assert space.for_device("cpu", max_workers=2).constants["compile"] == "off"
