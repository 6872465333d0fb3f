"""The segmentation3d workload: default volumes, memory-mapped patches, NIfTI conversion cache,
data errors, Dice + cross-entropy on one CPU step, model size, references inside the space."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from pathlib import Path

import nibabel
import numpy as np
import pytest
import torch

from tuner.errors import DataError
from tuner.workloads.segmentation3d import NPY_CACHE, UNet3d, soft_dice_loss, workload

SEED_PARAMETERS = 5_601_187
"""4-level 3D U-Net, widths 32/64/128/256, 1 input channel, 3 classes. The report gives no
parameter count; this pins the architecture."""


@pytest.fixture(autouse=True)
def one_thread():
    """3-D convolutions on a shared 2-core machine: one intra-op thread is several times faster
    than two threads contending with other processes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return workload.prepare_default_data(tmp_path_factory.mktemp("cache"), "tiny")


@pytest.fixture
def copy(data_dir, tmp_path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(data_dir, target)
    return target


@pytest.fixture
def tuner_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "tuner-cache"
    monkeypatch.setenv("TUNER_CACHE", str(cache))
    return cache


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _write_nifti(path: Path, array: np.ndarray) -> None:
    nibabel.save(nibabel.Nifti1Image(array, affine=np.eye(4)), str(path))


def test_default_data_is_volume_pairs_written_once_and_deterministic(data_dir, tmp_path):
    assert data_dir.name == "segmentation3d-v1-tiny"
    images = sorted(p.name for p in (data_dir / "images").iterdir())
    assert images == ["case_000.npy", "case_001.npy", "case_002.npy"]
    assert sorted(p.name for p in (data_dir / "labels").iterdir()) == images
    image = np.load(data_dir / "images" / images[0])
    label = np.load(data_dir / "labels" / images[0])
    assert image.shape == label.shape == (32, 64, 64)
    assert image.dtype == np.int16 and label.dtype == np.uint8
    assert set(np.unique(label)) == {0, 1, 2}
    # The label is visible in the image: class means differ by far more than the noise.
    assert image[label == 1].mean() - image[label == 0].mean() > 200
    again = workload.prepare_default_data(tmp_path, "tiny")
    assert _digest(again) == _digest(data_dir)
    mtime_ns = (again / "images" / images[0]).stat().st_mtime_ns
    assert workload.prepare_default_data(tmp_path, "tiny") == again
    assert (again / "images" / images[0]).stat().st_mtime_ns == mtime_ns   # reused


def test_seed_data_and_items_have_the_reports_patch_size(tmp_path):
    root = workload.prepare_default_data(tmp_path, "full")
    assert root.name == "segmentation3d-v1-full"
    assert len(list((root / "images").glob("*.npy"))) == 4
    assert np.load(root / "labels" / "case_000.npy", mmap_mode="r").shape == (96, 192, 192)
    dataset = workload.build_dataset(root, "full")
    image, label = dataset[3]
    assert image.shape == (1, 72, 136, 136) and label.shape == (72, 136, 136)
    assert workload.sample_shape("full") == {"image": [1, 72, 136, 136], "label": [72, 136, 136]}
    assert workload.units_per_sample("full") == {"voxels": 72 * 136 * 136}


def test_dataset_items_are_random_normalised_patches(data_dir):
    dataset = workload.build_dataset(data_dir, "tiny")
    assert len(dataset) == 64 * 3
    assert workload.check_data(data_dir, "tiny") == 64 * 3
    assert isinstance(dataset.volumes(0)[0], np.memmap)
    torch.manual_seed(0)
    image, label = dataset[5]
    assert image.shape == (1, 16, 32, 32) and image.dtype == torch.float32
    assert label.shape == (16, 32, 32) and label.dtype == torch.int64
    assert abs(float(image.mean())) < 1e-4 and abs(float(image.std()) - 1) < 1e-3
    assert 0 <= int(label.min()) and int(label.max()) <= 2
    shape = workload.sample_shape("tiny")
    assert list(image.shape) == shape["image"] and list(label.shape) == shape["label"]
    torch.manual_seed(0)
    assert torch.equal(dataset[5][0], image)               # crop and flips follow torch's RNG
    assert not torch.equal(dataset[5][0], image)           # ... and change from draw to draw
    with pytest.raises(IndexError):
        dataset[len(dataset)]


def test_dataset_pickles_without_its_volumes_and_runs_in_workers(data_dir):
    dataset = workload.build_dataset(data_dir, "tiny")
    dataset[0]                                             # opens memory maps in this process
    blob = pickle.dumps(dataset)
    assert len(blob) < 10_000                              # paths, not volumes (~130 KB each)
    assert pickle.loads(blob)[1][0].shape == (1, 16, 32, 32)
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=1)
    images, labels = next(iter(loader))
    assert images.shape == (2, 1, 16, 32, 32) and labels.shape == (2, 16, 32, 32)


def test_small_volume_is_padded_with_background(tmp_path):
    for sub, array in (("images", np.ones((8, 20, 40), np.float32)),
                       ("labels", np.ones((8, 20, 40), np.uint8))):
        (tmp_path / sub).mkdir()
        np.save(tmp_path / sub / "small.npy", array)
    image, label = workload.build_dataset(tmp_path, "tiny")[0]
    assert image.shape == (1, 16, 32, 32) and label.shape == (16, 32, 32)
    assert int(label.sum()) == 8 * 20 * 32                 # real voxels keep class 1
    assert int(label[8:].sum()) == 0 and int(label[:, 20:].sum()) == 0


def test_nifti_is_converted_once_to_npy_and_read_through_a_memory_map(tmp_path, tuner_cache):
    rng = np.random.default_rng(0)
    image = rng.normal(size=(40, 36, 20)).astype(np.float32)      # (X, Y, Z)
    label = rng.integers(0, 3, size=(40, 36, 20)).astype(np.uint8)
    for sub, array in (("images", image), ("labels", label)):
        (tmp_path / "nii" / sub).mkdir(parents=True)
        _write_nifti(tmp_path / "nii" / sub / "brain.nii.gz", array)
    dataset = workload.build_dataset(tmp_path / "nii", "tiny")
    converted = sorted((tuner_cache / NPY_CACHE).glob("*/volume.npy"))
    assert len(converted) == 2 and all(p.parent.name.startswith("brain-") for p in converted)
    mtimes = [p.stat().st_mtime_ns for p in converted]
    volume_image, volume_label = dataset.volumes(0)
    assert isinstance(volume_image, np.memmap) and isinstance(volume_label, np.memmap)
    np.testing.assert_array_equal(volume_image, image.T)          # (Z, Y, X) = (D, H, W)
    np.testing.assert_array_equal(volume_label, label.T)
    assert dataset[0][0].shape == (1, 16, 32, 32)
    assert workload.check_data(tmp_path / "nii", "tiny") == 64
    assert sorted((tuner_cache / NPY_CACHE).glob("*/volume.npy")) == converted
    assert [p.stat().st_mtime_ns for p in converted] == mtimes     # second build: cache reused
    changed = tmp_path / "nii" / "images" / "brain.nii.gz"
    _write_nifti(changed, image + 1)
    os.utime(changed, ns=(0, changed.stat().st_mtime_ns + 10**9))   # a later mtime, for sure
    workload.build_dataset(tmp_path / "nii", "tiny")
    assert len(list((tuner_cache / NPY_CACHE).glob("*/volume.npy"))) == 3


def test_mismatched_volume_shapes_name_the_file(copy):
    np.save(copy / "labels" / "case_001.npy", np.zeros((32, 64, 60), np.uint8))
    with pytest.raises(DataError, match=r"case_001\.npy.*\(32, 64, 60\).*\(32, 64, 64\)"):
        workload.build_dataset(copy, "tiny")


def test_corrupt_or_truncated_files_name_the_file(copy, tmp_path, tuner_cache):
    (copy / "images" / "case_002.npy").write_bytes(b"not a numpy array at all")
    with pytest.raises(DataError, match="case_002.npy"):
        workload.check_data(copy, "tiny")
    label = copy / "labels" / "case_001.npy"
    label.write_bytes(label.read_bytes()[:5000])
    with pytest.raises(DataError, match="case_001.npy"):
        workload.build_dataset(copy, "tiny")
    nii = tmp_path / "nii"
    for sub in ("images", "labels"):
        (nii / sub).mkdir(parents=True)
        (nii / sub / "bad.nii.gz").write_bytes(b"\x1f\x8b garbage, not gzip")
    with pytest.raises(DataError, match="bad.nii.gz"):
        workload.build_dataset(nii, "tiny")
    assert not list((tuner_cache / NPY_CACHE).glob("*/volume.npy"))   # nothing half-written


def test_out_of_range_labels_name_the_label_file(copy):
    np.save(copy / "labels" / "case_000.npy", np.full((32, 64, 64), 7, np.uint8))
    with pytest.raises(DataError, match=r"case_000\.npy.*0\.\.2"):
        workload.check_data(copy, "tiny")


def test_missing_or_incomplete_data_dirs_raise_data_error(copy, tmp_path):
    with pytest.raises(DataError, match="nowhere"):
        workload.build_dataset(tmp_path / "nowhere", "tiny")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty.*images"):
        workload.check_data(tmp_path / "empty", "tiny")
    (copy / "labels" / "case_002.npy").unlink()
    with pytest.raises(DataError, match=r"labels.case_002\.npy"):
        workload.build_dataset(copy, "tiny")


def test_unknown_scale_names_the_accepted_scales(data_dir):
    with pytest.raises(ValueError, match="full, tiny"):
        workload.build_model("huge")
    with pytest.raises(ValueError, match="full, tiny"):
        workload.build_dataset(data_dir, "huge")


def test_tiny_training_step_on_cpu_gives_finite_loss_and_gradients(data_dir):
    torch.manual_seed(0)
    dataset = workload.build_dataset(data_dir, "tiny")
    batch = torch.utils.data.default_collate([dataset[i] for i in range(4)])
    model = workload.build_model("tiny")
    loss = workload.training_step(model, batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert loss.item() > 1.0             # CE ~ ln 3 plus Dice loss near 1 at initialisation
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)
    assert all(g.abs().sum() > 0 for g in grads)
    assert workload.samples_in(batch) == 4


def test_soft_dice_is_zero_for_a_perfect_prediction_and_ignores_background():
    labels = torch.randint(0, 3, (2, 8, 8, 8))
    perfect = 50.0 * torch.nn.functional.one_hot(labels, 3).permute(0, 4, 1, 2, 3).float()
    assert float(soft_dice_loss(perfect, labels)) < 1e-4
    background_only = torch.zeros(2, 3, 8, 8, 8)
    background_only[:, 0] = 50.0
    assert float(soft_dice_loss(background_only, labels)) > 0.99


def test_unet_needs_sides_divisible_by_eight():
    model = UNet3d(base_channels=2)
    assert model(torch.zeros(1, 1, 8, 16, 24)).shape == (1, 3, 8, 16, 24)
    with pytest.raises(ValueError, match="divisible by 8"):
        model(torch.zeros(1, 1, 12, 16, 16))


def test_seed_parameter_count_is_a_standard_base32_unet():
    count = workload.parameter_count("full")
    assert count == SEED_PARAMETERS
    assert workload.parameter_count("tiny") < count / 50


def test_references_follow_the_report():
    baseline, recommended = workload.references["baseline"], workload.references["recommended"]
    assert (baseline.batch_size, baseline.num_workers, baseline.prefetch_factor) == (1, 1, 1)
    assert baseline.persistent_workers is False
    assert ((recommended.batch_size, recommended.num_workers, recommended.prefetch_factor)
            == (4, 6, 2))
    assert recommended.persistent_workers is True
    assert baseline.amp == recommended.amp == "off" and not recommended.pin_memory
