"""Tests of the classifier (40x40 ResNet-18) and classifier299 (Inception-v3) workloads."""

from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch

from tuner.errors import DataError
from tuner.space import load_space
from tuner.workload_loader import resolve
from tuner.workloads.classifier import Classifier, Classifier299, workload, workload299

BOTH = [pytest.param(workload, id="classifier"), pytest.param(workload299, id="classifier299")]


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> dict[str, Path]:
    cache = tmp_path_factory.mktemp("cache")
    return {w.name: w.prepare_default_data(cache, "tiny") for w in (workload, workload299)}


def test_registry_names_resolve_to_the_two_instances():
    assert resolve("classifier") is workload
    assert resolve("classifier299") is workload299
    assert isinstance(workload, Classifier) and isinstance(workload299, Classifier299)


@pytest.mark.parametrize("w", BOTH)
def test_references_lie_inside_the_search_space(w):
    space = load_space(w.space_name)
    for ref in w.references.values():
        space.for_device("cuda", max_workers=8).project(ref)  # raises SpaceError if outside
    assert "batch_size" in space.domains and "cudnn_benchmark" in space.domains
    assert w.baseline.batch_size == 16 and w.baseline.num_workers == 0
    assert not w.baseline.cudnn_benchmark and not w.baseline.pin_memory
    rec = w.references["recommended"]
    assert (rec.batch_size, rec.num_workers, rec.prefetch_factor) == (16, 4, 2)
    assert rec.pin_memory and rec.persistent_workers and rec.cudnn_benchmark


def test_default_data_is_written_once_and_deterministic(tmp_path):
    first = workload.prepare_default_data(tmp_path / "a", "full")
    files = _files(first)
    assert len(files) == 800 and all(p.suffix == ".jpg" for p in files)
    assert sorted(p.name for p in first.iterdir()) == [f"class_{i}" for i in range(4)]
    mtime = files[0].stat().st_mtime_ns
    assert workload.prepare_default_data(tmp_path / "a", "full") == first  # reused, not rewritten
    assert files[0].stat().st_mtime_ns == mtime
    second = workload.prepare_default_data(tmp_path / "b", "full")
    assert [p.read_bytes() for p in files[::97]] == [
        (second / p.relative_to(first)).read_bytes() for p in files[::97]]


def test_default_data_sizes_at_tiny(tiny_data):
    assert len(_files(tiny_data["classifier"])) == 64
    assert len(_files(tiny_data["classifier299"])) == 32
    assert tiny_data["classifier"] != tiny_data["classifier299"]


@pytest.mark.parametrize("w", BOTH)
def test_items_are_normalised_float_images_and_int64_labels(w, tiny_data):
    data_dir = tiny_data[w.name]
    assert w.check_data(data_dir, "tiny") == len(_files(data_dir))
    dataset = w.build_dataset(data_dir, "tiny")
    image, label = dataset[len(dataset) - 1]
    assert list(image.shape) == w.sample_shape("tiny")["image"]
    assert image.dtype == torch.float32 and image.min() < 0 < image.max()  # normalised
    assert label.dtype == torch.int64 and label.shape == () and int(label) == 3
    clone = pickle.loads(pickle.dumps(dataset))  # DataLoader workers receive a pickled copy
    assert list(clone[0][0].shape) == w.sample_shape("tiny")["image"]


def test_seed_input_sizes():
    assert workload.sample_shape("full") == {"image": [3, 40, 40], "label": []}
    assert workload299.sample_shape("full") == {"image": [3, 299, 299], "label": []}


@pytest.mark.parametrize("w", BOTH)
def test_corrupt_file_gives_data_error_naming_it(w, tiny_data, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(tiny_data[w.name], data_dir)
    bad = _files(data_dir)[5]
    bad.write_bytes(b"\xff\xd8 not a jpeg at all")
    with pytest.raises(DataError, match=bad.name):
        w.check_data(data_dir, "tiny")
    dataset = w.build_dataset(data_dir, "tiny")
    index = [Path(p) for p, _ in dataset.samples].index(bad)
    with pytest.raises(DataError, match=bad.name):
        dataset[index]


@pytest.mark.parametrize("w", BOTH)
def test_missing_or_empty_dir_gives_data_error(w, tmp_path):
    with pytest.raises(DataError, match="nowhere"):
        w.build_dataset(tmp_path / "nowhere", "tiny")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=re.escape(f"{empty} holds no images")):
        w.check_data(empty, "tiny")


def test_too_many_class_folders_gives_data_error(tiny_data, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(tiny_data["classifier"], data_dir)
    shutil.copytree(data_dir / "class_0", data_dir / "class_9")
    with pytest.raises(DataError, match="5 class folders"):
        workload.build_dataset(data_dir, "tiny")


@pytest.mark.parametrize("w", BOTH)
def test_unknown_scale_is_rejected(w, tmp_path):
    for call in (lambda: w.build_model("huge"), lambda: w.sample_shape("huge"),
                 lambda: w.prepare_default_data(tmp_path, "huge")):
        with pytest.raises(ValueError, match="full, tiny"):
            call()


@pytest.mark.parametrize("w", BOTH)
def test_tiny_training_step_gives_finite_loss_and_gradients(w, tiny_data):
    torch.manual_seed(0)
    model = w.build_model("tiny").train()
    loader = torch.utils.data.DataLoader(w.build_dataset(tiny_data[w.name], "tiny"),
                                         batch_size=4, shuffle=True)
    batch = next(iter(loader))
    assert w.samples_in(batch) == 4
    loss = w.training_step(model, batch)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_inception_aux_head_adds_its_weighted_loss():
    """Seed scale at batch 2: training returns (logits, aux_logits), the loss includes 0.4 x aux."""
    torch.manual_seed(0)
    model = workload299.build_model("full").train()
    images = torch.randn(2, 3, 299, 299)  # (B, C, H, W)
    labels = torch.tensor([0, 3])
    loss = workload299.training_step(model, (images, labels))
    loss.backward()
    assert torch.isfinite(loss)
    assert model.AuxLogits.fc.weight.grad is not None  # the aux head is trained
    assert model.AuxLogits.fc.weight.grad.abs().sum() > 0


def test_parameter_counts():
    # ResNet-18 with a 4-way head: 11.17 M (11.69 M ImageNet version less its 1000-way fc and
    # 7x7 stem); Inception-v3 with aux head: 21.79 M + 2.56 M aux.
    assert workload.parameter_count("full") == pytest.approx(11.17e6, rel=0.01)
    assert workload.parameter_count("tiny") == pytest.approx(4.90e6, rel=0.01)
    assert workload299.parameter_count("full") == pytest.approx(24.35e6, rel=0.01)
    assert workload299.parameter_count("tiny") == pytest.approx(21.79e6, rel=0.01)
