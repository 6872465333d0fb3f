"""channels_last is searched only where it can change something: models with a 4-D or 5-D
parameter (Conv2d/Conv3d). A transformer or an MLP does not spend trials on it."""

from __future__ import annotations

import pytest

from tuner.option_checks import make_plan
from tuner.settings import RunOptions
from tuner.trial.flops import has_image_layout
from tuner.workload_loader import resolve

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
    from tuner.workload_loader import BUILTINS
    for name in BUILTINS:
        space = load_space(resolve(name).space_name)
        assert (
            "reduce-overhead" in space.for_device("cuda", max_workers=16).domains["compile"].values
        )
        assert space.for_device("cpu", max_workers=2).constants["compile"] == "off"


@pytest.mark.parametrize("line, native", [
    ("flags\t\t: fpu sse2 avx avx2 fma", False),                     # this project's AVX2 EPYC
    ("flags\t\t: fpu avx2 avx512f avx512_bf16", True),
    ("flags\t\t: fpu avx2 amx_tile amx_bf16", True),
    ("Features\t: fp asimd bf16 i8mm", True),                       # Arm
])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, line, native):
    from tuner.hardware import cpu_has_native_bf16
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: some CPU\n{line}\n")
    assert cpu_has_native_bf16(str(info)) is native
    assert cpu_has_native_bf16(str(tmp_path / "missing")) is True   # cannot tell: keep it


X86 = ("processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\n"
       "model name\t: AMD EPYC\n")
ARM = "processor\t: {n}\nBogoMIPS\t: 243.75\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"


@pytest.mark.parametrize("text, key", [
    # one VM model name, two generations: each its own key, so no answer crosses between them
    (X86.format(n=0, family=26, model=2) + "\n" + X86.format(n=1, family=26, model=2),
     "cpu:AMD EPYC (family 26 model 2):2cpu"),
    (X86.format(n=0, family=25, model=1), "cpu:AMD EPYC (family 25 model 1):2cpu"),
    (ARM.format(n=0), "cpu:{name}:2cpu"),  # no model name: the platform's, then the part
])
def test_the_hardware_key_tells_cpu_generations_apart(tmp_path, text, key):
    import platform

    from tuner.hardware import cpu_key
    info = tmp_path / "cpuinfo"
    info.write_text(text)
    name = (platform.processor() or platform.machine()) + " (implementer 0x41 part 0xd4f)"
    assert cpu_key(2, str(info)) == key.format(name=name)
    missing = str(tmp_path / "missing")   # not Linux: the model name alone, as before
    assert cpu_key(4, missing) == f"cpu:{platform.processor() or platform.machine()}:4cpu"


@pytest.mark.parametrize("native", [False, True])
def test_bf16_is_not_searched_on_a_cpu_that_only_emulates_it(tmp_path, regression_data,
                                                              monkeypatch, native):
    """ddpm's default CPU runs spent 15-22 s of their 3 min 30 s on one bf16 proposal at
    ~5 samples/sec (fp32: ~50), pruned after one step: on a CPU without native bf16 the
    search leaves it out and says so; references keep what they use."""
    import tuner.option_checks
    monkeypatch.setattr(tuner.option_checks, "cpu_has_native_bf16", lambda: native)
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  batch_size: {choices: [4, 16]}\n  num_workers: 0\n"
                     "  amp: {choices: [\"off\", fp16, bf16]}\n")
    plan = make_plan(RunOptions(workload="tests.fake_workloads:regression", space_file=str(space),
                                data=str(regression_data), trials=3, device="cpu",
                                results=str(tmp_path / "results"), probe="off"))
    said = [n for n in plan.notes if n.startswith("amp=bf16 is not searched")]
    if native:
        assert plan.device_space.domains["amp"].values == ("off", "bf16") and not said
    else:
        assert "amp" not in plan.device_space.domains and len(said) == 1
        assert plan.device_space.constants["amp"] == "off"
