"""tuner.trial.flops: FLOPs per sample of known layers and of a built-in, the peak table, MFU."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.trial import flops
from tuner.workload import Workload

IN_FEATURES, OUT_FEATURES = 32, 16
CONV_IN, CONV_OUT, KERNEL, SIDE = 3, 8, 3, 10
SEQ, HEAD_DIM = 10, 4
N_FILES = 4


class NpyTensors(Dataset):
    """One float32 ``.npy`` array per sample; items are the bare tensors."""

    def __init__(self, data_dir: Path):
        self.files = sorted(Path(data_dir).glob("*.npy"))
        if not self.files:
            raise DataError(f"data directory {data_dir} holds no .npy files")

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.load(self.files[i]))


class LinearSum(Workload):
    """One ``Linear(32, 16, bias=False)``; the loss is the sum of its outputs."""

    name = "flops-linear"
    description = "one bias-free Linear layer (flops tests)"
    source = "tests"
    references = {"baseline": Knobs(batch_size=2)}
    shape: tuple[int, ...] = (IN_FEATURES,)

    def build_model(self, scale: str) -> nn.Module:
        return nn.Linear(IN_FEATURES, OUT_FEATURES, bias=False)

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        return NpyTensors(data_dir)

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        target = Path(cache_dir) / self.name
        target.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        for i in range(N_FILES):
            np.save(target / f"{i:02d}.npy", rng.normal(size=self.shape).astype(np.float32))
        return target

    def training_step(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch).sum()

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        return {"x": list(self.shape)}


class ConvSum(LinearSum):
    """One ``Conv2d(3, 8, 3, padding=1, bias=False)`` on 3 x 10 x 10 inputs."""

    name = "flops-conv"
    shape = (CONV_IN, SIDE, SIDE)

    def build_model(self, scale: str) -> nn.Module:
        return nn.Conv2d(CONV_IN, CONV_OUT, KERNEL, padding=1, bias=False)


class ReadsValue(LinearSum):
    """Reads a value with ``.item()``, which no meta tensor has: counted on CPU instead."""

    name = "flops-item"

    def training_step(self, model, batch):
        norm = float(batch.abs().max().item()) or 1.0
        return model(batch).sum() / norm


class AttentionReadsValue(LinearSum):
    """Self-attention over a (10, 4) sample with no weights; reads a value, so it is counted on
    CPU, where only the math SDPA path is one FlopCounterMode counts."""

    name = "flops-attention"
    shape = (SEQ, HEAD_DIM)

    def build_model(self, scale: str) -> nn.Module:
        return nn.Identity()

    def training_step(self, model, batch):
        norm = float(batch.abs().max().item()) or 1.0
        x = model(batch)[:, None]  # (B, 1 head, SEQ, HEAD_DIM)
        return nn.functional.scaled_dot_product_attention(x, x, x).sum() / norm


class AlwaysFails(LinearSum):
    """A step that fails on every device."""

    name = "flops-broken"

    def training_step(self, model, batch):
        raise RuntimeError("this step never runs")


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    """Each test starts with nothing counted."""
    monkeypatch.setattr(flops, "_FLOPS_CACHE", {})


@pytest.fixture
def devices_used(monkeypatch) -> list[str]:
    """The devices ``_count_on`` was called with, in order."""
    used: list[str] = []
    real = flops._count_on

    def spy(workload, scale, batch, device):
        used.append(device)
        return real(workload, scale, batch, device)

    monkeypatch.setattr(flops, "_count_on", spy)
    return used


def _count(workload: Workload, tmp_path: Path) -> float | None:
    return flops.model_flops_per_sample(workload, "tiny",
                                        workload.prepare_default_data(tmp_path, "tiny"))


# ------------------------------------------------------------------------------------- counting

def test_linear_counts_six_in_out_per_sample_on_meta(tmp_path, devices_used):
    # 2 x in x out forward + 2 x in x out input gradient + 2 x in x out weight gradient
    assert _count(LinearSum(), tmp_path) == 6 * IN_FEATURES * OUT_FEATURES == 3072
    assert devices_used == ["meta"]


def test_conv2d_counts_three_times_its_analytic_forward(tmp_path):
    h_out = w_out = SIDE  # 3x3, stride 1, padding 1
    forward = 2 * CONV_OUT * CONV_IN * KERNEL * KERNEL * h_out * w_out
    assert _count(ConvSum(), tmp_path) == 3 * forward == 129_600


class ConvThenLinear(LinearSum):
    """``ConvSum``'s convolution, then a bias-free ``Linear(800, 16)`` on its flattened output."""

    name = "flops-conv-linear"
    shape = (CONV_IN, SIDE, SIDE)

    def build_model(self, scale: str) -> nn.Module:
        return nn.Sequential(nn.Conv2d(CONV_IN, CONV_OUT, KERNEL, padding=1, bias=False),
                             nn.Flatten(), nn.Linear(CONV_OUT * SIDE * SIDE, OUT_FEATURES,
                                                     bias=False))


def test_the_convolutions_share_comes_from_the_same_count(tmp_path, devices_used):
    data = ConvThenLinear().prepare_default_data(tmp_path, "tiny")
    conv, linear = 129_600, 6 * CONV_OUT * SIDE * SIDE * OUT_FEATURES
    assert flops.model_flops_per_sample(ConvThenLinear(), "tiny", data) == conv + linear
    assert flops.conv_flops_share(ConvThenLinear(), "tiny", data) == pytest.approx(
        conv / (conv + linear))
    assert devices_used == ["meta"]                              # counted once for both
    assert flops.conv_flops_share(LinearSum(), "tiny",
                                  LinearSum().prepare_default_data(tmp_path, "tiny")) == 0.0
    assert flops.conv_flops_share(AlwaysFails(), "tiny",
                                  AlwaysFails().prepare_default_data(tmp_path, "tiny")) is None


def test_step_that_fails_on_meta_is_counted_on_cpu(tmp_path, devices_used):
    assert _count(ReadsValue(), tmp_path) == 6 * IN_FEATURES * OUT_FEATURES
    assert devices_used == ["meta", "cpu"]


def test_attention_counted_on_cpu_through_the_math_path(tmp_path, devices_used):
    # forward QK^T and AV: 2 x (2 x SEQ^2 x HEAD_DIM); backward: their 4 gradient matmuls
    assert _count(AttentionReadsValue(), tmp_path) == 12 * SEQ * SEQ * HEAD_DIM == 4800
    assert devices_used == ["meta", "cpu"]


def test_step_that_fails_everywhere_gives_none_once(tmp_path, devices_used):
    data = AlwaysFails().prepare_default_data(tmp_path, "tiny")
    assert flops.model_flops_per_sample(AlwaysFails(), "tiny", data) is None
    assert flops.model_flops_per_sample(AlwaysFails(), "tiny", data) is None
    assert devices_used == ["meta", "cpu"]  # the failure is cached too


def test_data_error_is_raised_not_swallowed(tmp_path):
    with pytest.raises(DataError, match="no .npy files"):
        flops.model_flops_per_sample(LinearSum(), "tiny", tmp_path)


def test_counting_leaves_the_random_state_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _count(ReadsValue(), tmp_path)  # runs a real CPU step
    assert torch.equal(torch.rand(3), expected)


@pytest.fixture(scope="module")
def ddpm_data(tmp_path_factory) -> Path:
    from tuner.workloads.ddpm import workload as ddpm
    return ddpm.prepare_default_data(tmp_path_factory.mktemp("ddpm-cache"), "tiny")


def test_ddpm_tiny_is_counted_once(ddpm_data, monkeypatch):
    from tuner.workloads.ddpm import workload as ddpm
    calls = []
    real = flops._count_flops_per_sample

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(flops, "_count_flops_per_sample", counting)
    first = flops.model_flops_per_sample(ddpm, "tiny", ddpm_data)
    assert first is not None and math.isfinite(first) and first > 0
    assert flops.model_flops_per_sample(ddpm, "tiny", ddpm_data) == first
    assert len(calls) == 1


def test_ddpm_seed_matches_the_h100_count(ddpm_data):
    """FlopCounterMode on CUDA counts 15.3 GFLOP/sample for ddpm at full scale on an H100
    (docs/benchmarks.md); both scales read the same default data."""
    from tuner.workloads.ddpm import workload as ddpm
    assert flops.model_flops_per_sample(ddpm, "full", ddpm_data) == pytest.approx(15.3e9, rel=0.01)


# ------------------------------------------------------------------------------------ peak table

@pytest.mark.parametrize("gpu_name, precision, expected", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
    ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
    ("NVIDIA H100 80GB HBM3", "fp32", 66.9),
    ("NVIDIA H100 PCIe", "fp16", 756.0),
    ("NVIDIA H100 PCIe", "tf32", 378.0),
    ("NVIDIA H100 PCIe", "fp32", 51.0),
    ("NVIDIA H200", "bf16", 989.4),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100-PCIE-40GB", "tf32", 156.0),
    ("NVIDIA A100 80GB PCIe", "fp32", 19.5),
    ("NVIDIA A10G", "bf16", 70.0),
    ("NVIDIA GeForce RTX 5070", "fp16", 61.7),
    ("NVIDIA GeForce RTX 4080 SUPER", "fp32", 52.2),
    ("NVIDIA GeForce RTX 3090", "fp16", 71.0),
    ("nvidia geforce rtx 3090", "tf32", 35.6),
    ("H100 SXM", "fp16", 989.4),
])
def test_peak_tflops_of_known_cards(gpu_name, precision, expected):
    assert flops.peak_tflops(gpu_name, precision) == expected


@pytest.mark.parametrize("gpu_name, precision", [
    ("NVIDIA GeForce GT 710", "fp32"),
    (None, "bf16"),
    ("NVIDIA A10", "bf16"),                      # the plain A10 is not the A10G
    ("NVIDIA H100 NVL", "bf16"),                 # nor is the NVL an SXM
    ("NVIDIA GeForce RTX 4080", "fp16"),         # nor the 4080 a 4080 SUPER
    ("NVIDIA GeForce RTX 3090 Ti", "fp16"),
    ("NVIDIA GeForce RTX 5070 Ti", "fp16"),
    ("NVIDIA GeForce RTX 4080 SUPER", "bf16"),   # no vendor figure: left out
    ("NVIDIA H100 80GB HBM3", "fp8"),            # unknown precision
])
def test_peak_tflops_is_none_when_unknown(gpu_name, precision):
    assert flops.peak_tflops(gpu_name, precision) is None


def test_every_entry_is_reachable_and_positive():
    for entry, peaks in flops.PEAK_TFLOPS_DENSE.items():
        assert flops.gpu_entry(entry) == entry
        assert peaks and set(peaks) <= set(flops.PRECISIONS)
        assert all(value > 0 for value in peaks.values())


@pytest.mark.parametrize("amp, tf32, expected", [
    ("bf16", False, "bf16"), ("fp16", True, "fp16"), ("off", True, "tf32"), ("off", False, "fp32"),
])
def test_precision_of(amp, tf32, expected):
    assert flops.precision_of(amp, tf32) == expected


def test_precision_of_rejects_an_unknown_amp_mode():
    with pytest.raises(ValueError, match="amp='fp8'"):
        flops.precision_of("fp8", False)


# ------------------------------------------------------------------------------------ utilisation

def test_utilisation_arithmetic():
    # 1 GFLOP/sample x 1,000 samples/sec = 1 TFLOP/s; H100 SXM bf16 peak 989.4 TFLOP/s
    result = flops.utilisation(1e9, 1000.0, "NVIDIA H100 80GB HBM3", "bf16")
    assert result["achieved_tflops"] == pytest.approx(1.0)
    assert result["mfu_pct"] == pytest.approx(100 / 989.4)
    assert result["mfu_impossible"] is False


def test_override_wins_over_the_table():
    result = flops.utilisation(1e9, 1000.0, "NVIDIA H100 80GB HBM3", "bf16",
                               peak_tflops_override=4.0)
    assert result["mfu_pct"] == pytest.approx(25.0)
    unknown_card = flops.utilisation(1e9, 1000.0, "NVIDIA GeForce GT 710", "fp32",
                                     peak_tflops_override=2.0)
    assert unknown_card["mfu_pct"] == pytest.approx(50.0)


def test_mfu_above_100_is_returned_unclipped_and_flagged():
    # 1 TFLOP/sample x 2,000 samples/sec = 2,000 TFLOP/s on a 989.4 TFLOP/s card
    result = flops.utilisation(1e12, 2000.0, "NVIDIA H100 80GB HBM3", "bf16")
    assert result["mfu_pct"] == pytest.approx(100 * 2000 / 989.4)
    assert result["mfu_impossible"] is True


@pytest.mark.parametrize("flops_per_sample, samples_per_sec, gpu_name, achieved", [
    (None, 100.0, "NVIDIA A10G", None),
    (1e9, None, "NVIDIA A10G", None),
    (1e9, 100.0, None, 0.1),          # CPU: achieved is known, no peak
])
def test_utilisation_without_inputs_or_peak(flops_per_sample, samples_per_sec, gpu_name,
                                            achieved):
    result = flops.utilisation(flops_per_sample, samples_per_sec, gpu_name, "bf16")
    assert result["achieved_tflops"] == (None if achieved is None else pytest.approx(achieved))
    assert result["mfu_pct"] is None
    assert result["mfu_impossible"] is False


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_override_must_be_a_positive_number(bad):
    with pytest.raises(ValueError, match="peak_tflops_override"):
        flops.utilisation(1e9, 1.0, None, "fp32", peak_tflops_override=bad)


def test_fp32_mfu_judges_convolutions_against_the_tf32_peak():
    """Without AMP or the tf32 knob a CUDA trial's convolutions still run in TF32 (cuDNN's
    default, kept in every trial): a conv net's FLOPs at 100 TFLOP/s on an H100 SXM are 21 %
    of what the mix could reach, not 149 % of the FP32 peak."""
    h100 = "NVIDIA H100 80GB HBM3"
    all_conv = flops.utilisation(1e11, 1000.0, h100, "fp32", conv_share=1.0)
    assert all_conv["mfu_pct"] == pytest.approx(100 * 100 / 494.7)
    assert all_conv["mfu_impossible"] is False
    assert flops.utilisation(1e11, 1000.0, h100, "fp32")["mfu_impossible"] is True
    half = flops.blended_peak_tflops(h100, "fp32", 0.5)
    assert half == pytest.approx(1 / (0.5 / 66.9 + 0.5 / 494.7))
    assert 66.9 < half < 494.7
    for precision in ("bf16", "tf32"):       # every op runs at that precision's peak already
        assert flops.blended_peak_tflops(h100, precision, 0.5) == flops.peak_tflops(h100,
                                                                                      precision)
    assert flops.blended_peak_tflops(h100, "fp32", None) == 66.9
    assert flops.blended_peak_tflops("NVIDIA GeForce RTX 4080 SUPER", "fp32", 1.0) == 52.2
