"""The ddpm workload: default data, dataset items, data errors, one CPU training step, model size,
references inside the search space."""

from __future__ import annotations

import hashlib
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from tuner.errors import DataError
from tuner.workloads.ddpm import DiffusionModel, workload

REPORT_PARAMETERS = 12_817_859
"""ddpm-report-rtx5070.md: "Model Size: 12,817,859 parameters (~12.8M)"."""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return workload.prepare_default_data(tmp_path_factory.mktemp("cache"), "tiny")


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_default_data_matches_report_counts_and_is_deterministic(data_dir, tmp_path):
    assert data_dir.name == "ddpm-v1"
    assert len(list((data_dir / "Normal").glob("*.png"))) == 546
    assert len(list((data_dir / "Abnormal").glob("*.png"))) == 106
    again = workload.prepare_default_data(tmp_path, "full")    # same data for both scales
    assert _digest(again) == _digest(data_dir)
    assert workload.prepare_default_data(tmp_path, "full") == again   # reused, not rewritten


def test_dataset_items_are_augmented_images_and_int64_labels(data_dir):
    dataset = workload.build_dataset(data_dir, "tiny")
    assert len(dataset) == 652
    assert workload.check_data(data_dir, "tiny") == 652
    image, label = dataset[0]
    assert image.shape == (3, 40, 40) and image.dtype == torch.float32
    assert -1.0 <= image.min() and image.max() <= 1.0
    assert label.dtype == torch.int64 and label.shape == ()
    assert {int(dataset[i][1]) for i in (0, len(dataset) - 1)} == {0, 1}
    shape = workload.sample_shape("tiny")
    assert list(image.shape) == shape["image"] and list(label.shape) == shape["label"]
    clone = pickle.loads(pickle.dumps(dataset))               # DataLoader workers
    assert clone[0][0].shape == (3, 40, 40)


def test_corrupt_file_is_named_by_check_data_and_getitem(data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    bad = copy / "Abnormal" / "000003.png"
    bad.write_bytes(b"not a png at all")
    with pytest.raises(DataError, match="000003.png"):
        workload.check_data(copy, "tiny")
    dataset = workload.build_dataset(copy, "tiny")
    index = [Path(p) for p, _ in dataset.samples].index(bad)
    with pytest.raises(DataError, match="000003.png"):
        dataset[index]


def test_missing_empty_or_many_class_dirs_raise_data_error(tmp_path):
    with pytest.raises(DataError, match="nowhere"):
        workload.build_dataset(tmp_path / "nowhere", "tiny")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty"):
        workload.check_data(tmp_path / "empty", "tiny")
    many = tmp_path / "many"
    for cls in ("a", "b", "c"):
        (many / cls).mkdir(parents=True)
        shutil.copy(workload.prepare_default_data(tmp_path / "cache", "tiny")
                    / "Normal" / "000000.png", many / cls / "0.png")
    with pytest.raises(DataError, match="3 class folders"):
        workload.build_dataset(many, "tiny")


def test_unknown_scale_names_the_accepted_scales(data_dir):
    with pytest.raises(ValueError, match="full, tiny"):
        workload.build_model("huge")
    with pytest.raises(ValueError, match="full, tiny"):
        workload.build_dataset(data_dir, "huge")


def test_tiny_training_step_on_cpu_gives_finite_loss_and_gradients(data_dir):
    torch.manual_seed(0)
    dataset = workload.build_dataset(data_dir, "tiny")
    batch = torch.utils.data.default_collate([dataset[i] for i in (0, 1, 650, 651)])
    assert batch[0].shape == (4, 3, 40, 40) and batch[1].tolist() == [0, 0, 1, 1]
    model = workload.build_model("tiny")
    loss = workload.training_step(model, batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    assert workload.samples_in(batch) == 4


def test_noise_schedule_is_linear_ho_et_al_and_not_a_parameter():
    model = workload.build_model("tiny")
    assert isinstance(model, DiffusionModel) and model.timesteps == 1000
    alpha_bar = model.sqrt_alpha_bar.double() ** 2
    betas = 1 - alpha_bar / torch.cat([torch.ones(1, dtype=torch.float64), alpha_bar[:-1]])
    assert betas[0].item() == pytest.approx(1e-4, rel=1e-3)
    assert betas[-1].item() == pytest.approx(0.02, rel=1e-2)
    assert sum(p.numel() for p in model.parameters()) == \
        sum(p.numel() for p in model.unet.parameters())


def test_seed_parameter_count_matches_report():
    count = workload.parameter_count("full")
    assert abs(count - REPORT_PARAMETERS) / REPORT_PARAMETERS <= 0.02
    assert count == REPORT_PARAMETERS          # achieved exactly: keep it that way
    assert workload.parameter_count("tiny") < count / 10


def test_references_follow_the_report():
    baseline, recommended = workload.references["baseline"], workload.references["recommended"]
    assert (baseline.batch_size, baseline.num_workers, baseline.amp) == (8, 4, "fp16")
    assert baseline.pin_memory is False and baseline.cudnn_benchmark is False
    assert (recommended.batch_size, recommended.num_workers) == (32, 6)
    assert recommended.pin_memory and recommended.persistent_workers
    assert recommended.cudnn_benchmark and recommended.prefetch_factor == 2
