"""chargpt workload: default text, byte-window dataset, data errors, model, optimizer, space."""

from __future__ import annotations

import math
import pickle
import shutil

import pytest
import torch

from tuner.errors import DataError
from tuner.workloads.chargpt import DEFAULT_TEXT_BYTES, VOCAB_SIZE, workload


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    """The default text, written once for the module."""
    return workload.prepare_default_data(tmp_path_factory.mktemp("cache"), "tiny")


def test_default_data_is_one_deterministic_1m_byte_utf8_file(tmp_path, text_file):
    path = workload.prepare_default_data(tmp_path / "a", "full")
    assert path == tmp_path / "a" / "chargpt-v1" / "input.txt"
    assert [p.name for p in path.parent.iterdir()] == ["input.txt"]
    data = path.read_bytes()
    assert len(data) == DEFAULT_TEXT_BYTES
    text = data.decode("utf-8")
    assert ":\n" in text and "\n\n" in text  # speaker lines and speeches, like tiny-shakespeare
    assert len(set(text)) > 40
    assert text_file.read_bytes() == data  # same text for both scales and any cache dir
    mtime = path.stat().st_mtime_ns
    assert workload.prepare_default_data(tmp_path / "a", "tiny") == path  # reused, not rewritten
    assert path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("scale, T", [("tiny", 64), ("full", 256)])
def test_dataset_items_are_shifted_int64_byte_windows(text_file, scale, T):
    ds = workload.build_dataset(text_file, scale)
    assert len(ds) == DEFAULT_TEXT_BYTES // T
    assert workload.check_data(text_file, scale) == len(ds)
    raw = text_file.read_bytes()
    for i in (0, 1, len(ds) - 1):
        x, y = ds[i]
        assert x.dtype == y.dtype == torch.int64
        assert [list(x.shape), list(y.shape)] == [workload.sample_shape(scale)["x"],
                                                  workload.sample_shape(scale)["y"]]
        start = min(i * T, len(raw) - T - 1)
        assert bytes(x.tolist()) == raw[start:start + T]
        assert bytes(y.tolist()) == raw[start + 1:start + T + 1]
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert workload.units_per_sample(scale) == {"tokens": T}


def test_dataset_pickles_and_loads_in_a_worker(text_file):
    ds = workload.build_dataset(text_file, "tiny")
    ds[0]  # opens the memory map, which pickling must drop
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[5][0], ds[5][0])
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1)
    x, y = next(iter(loader))
    assert x.shape == y.shape == (4, 64) and x.dtype == torch.int64


def test_multibyte_utf8_text_is_tokenised_as_bytes(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("Ça va? — naïve café. " * 20, encoding="utf-8")
    x, y = workload.build_dataset(path, "tiny")[0]
    assert int(x.max()) < VOCAB_SIZE and int(x.max()) >= 128  # UTF-8 continuation bytes
    assert bytes(x.tolist()) == path.read_bytes()[:64]


def test_non_utf8_file_gives_data_error_naming_it(tmp_path, text_file):
    bad = tmp_path / "corrupt.txt"
    shutil.copy(text_file, bad)
    with open(bad, "r+b") as f:
        f.seek(500_000)
        f.write(b"\xff\xfe\x80garbage")
    with pytest.raises(DataError, match=r"corrupt\.txt.*not UTF-8.*byte 500000"):
        workload.check_data(bad, "tiny")


@pytest.mark.parametrize("kind, message", [
    ("missing", "does not exist"), ("directory", "is a directory"), ("empty", "is empty"),
    ("short", "needs at least 65"),
])
def test_unusable_path_gives_data_error_naming_it(tmp_path, kind, message):
    path = tmp_path / "input.txt"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "short":
        path.write_text("too short")
    with pytest.raises(DataError, match=message) as info:
        workload.build_dataset(path, "tiny")
    assert str(path) in str(info.value)


def test_tiny_training_step_gives_finite_loss_and_gradients(text_file):
    torch.manual_seed(0)
    model = workload.build_model("tiny")
    loader = torch.utils.data.DataLoader(workload.build_dataset(text_file, "tiny"), batch_size=4)
    loss = workload.training_step(model, next(iter(loader)))
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert abs(loss.item() - math.log(VOCAB_SIZE)) < 1.0  # near-uniform logits at init
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.lm_head.weight is model.wte.weight  # tied, as in nanoGPT


def test_attention_is_causal():
    torch.manual_seed(0)
    model = workload.build_model("tiny").eval()
    a = torch.randint(0, VOCAB_SIZE, (1, 16))
    b = a.clone()
    b[0, 10:] = (b[0, 10:] + 1) % VOCAB_SIZE
    with torch.no_grad():
        la, lb = model(a), model(b)
    assert torch.allclose(la[0, :10], lb[0, :10], atol=1e-5)
    assert not torch.allclose(la[0, 10:], lb[0, 10:])


def test_parameter_counts():
    full = workload.parameter_count("full")
    # nanoGPT prints 10.65M (vocab 65, tied lm_head, position embeddings excluded); with the
    # 256-byte vocabulary and every parameter counted once: 10,818,432.
    assert full == 10_818_432
    assert abs(full - 10.7e6) / 10.7e6 < 0.02
    assert workload.parameter_count("tiny") < 200_000


def test_unknown_scale_is_rejected():
    with pytest.raises(ValueError, match="full, tiny"):
        workload.build_model("huge")


def test_optimizer_decays_matrices_only():
    model = workload.build_model("tiny")
    opt = workload.build_optimizer(model.parameters(), fused=False)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert decay["lr"] == 1e-3 and decay["betas"] == (0.9, 0.99) and decay["fused"] is None


def test_references_follow_the_guide():
    assert workload.references["baseline"].batch_size == 256
    assert workload.references["recommended"].amp == "fp16"
