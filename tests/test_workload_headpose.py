"""The headpose workload: labels-CSV face-crop data, flip rule, model, loss, references."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.workloads import headpose
from tuner.workloads.headpose import workload

TINY_IMAGES = headpose.DEFAULT_DATA["tiny"][0]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return workload.prepare_default_data(tmp_path_factory.mktemp("cache"), "tiny")


@pytest.fixture
def tiny_copy(tiny_dir, tmp_path) -> Path:
    """A writable copy of the tiny default data."""
    return Path(shutil.copytree(tiny_dir, tmp_path / "data"))


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_default_data_is_written_once_and_deterministic(tiny_dir, tmp_path):
    jpegs = sorted(tiny_dir.glob("images/*.jpg"))
    assert len(jpegs) == TINY_IMAGES
    lines = (tiny_dir / "labels.csv").read_text().splitlines()
    assert lines[0] == "file,yaw,pitch,roll"
    assert len(lines) == TINY_IMAGES + 1
    assert workload.check_data(tiny_dir, "tiny") == TINY_IMAGES

    mtime_ns = (tiny_dir / "labels.csv").stat().st_mtime_ns
    assert workload.prepare_default_data(tiny_dir.parent, "tiny") == tiny_dir
    assert (tiny_dir / "labels.csv").stat().st_mtime_ns == mtime_ns   # reused, not rewritten

    again = workload.prepare_default_data(tmp_path, "tiny")
    assert again != tiny_dir
    assert _digest(again) == _digest(tiny_dir)


def test_default_angles_span_the_documented_ranges(tiny_dir):
    _, angles_deg = headpose.read_labels(tiny_dir)
    assert angles_deg.shape == (TINY_IMAGES, 3) and angles_deg.dtype == np.float32
    limits = np.array(headpose.ANGLE_RANGE_DEG)
    assert (np.abs(angles_deg) <= limits).all()
    assert (angles_deg.max(0) > 0.8 * limits).all() and (angles_deg.min(0) < -0.8 * limits).all()


def test_item_shapes_and_dtypes(tiny_dir):
    dataset = workload.build_dataset(tiny_dir, "tiny")
    assert len(dataset) == TINY_IMAGES
    image, angles_deg = dataset[3]
    shape = workload.sample_shape("tiny")
    assert list(image.shape) == shape["image"] == [3, 64, 64]
    assert list(angles_deg.shape) == shape["angles_deg"] == [3]
    assert image.dtype == torch.float32 and angles_deg.dtype == torch.float32
    assert workload.sample_shape("full") == {"image": [3, 224, 224], "angles_deg": [3]}
    # Normalised, not raw bytes.
    assert -3.0 < image.mean().item() < 3.0


def test_flip_mirrors_the_image_and_negates_yaw_and_roll(tiny_dir):
    dataset = workload.build_dataset(tiny_dir, "tiny")
    _, labels_deg = headpose.read_labels(tiny_dir)
    dataset.flip_p = 0.0
    torch.manual_seed(7)
    plain, plain_deg = dataset[5]
    dataset.flip_p = 1.0
    torch.manual_seed(7)   # same crop and colour jitter
    flipped, flipped_deg = dataset[5]
    torch.testing.assert_close(flipped, plain.flip(-1))
    yaw, pitch, roll = labels_deg[5]
    torch.testing.assert_close(plain_deg, torch.tensor([yaw, pitch, roll]))
    torch.testing.assert_close(flipped_deg, torch.tensor([-yaw, pitch, -roll]))


def test_synthetic_faces_obey_the_flip_rule():
    """Mirroring the drawing of (yaw, pitch, roll) gives the drawing of (-yaw, pitch, -roll),
    so the default data agrees with the labels the flip produces."""
    parts = headpose._part_map(40.0, 15.0, 20.0, 96)
    mirrored = headpose._part_map(-40.0, 15.0, -20.0, 96)
    assert (parts[:, ::-1] == mirrored).mean() > 0.995
    # ... and the angles change the picture (the task is learnable).
    assert (headpose._part_map(-40.0, 15.0, 20.0, 96) != parts).mean() > 0.01


def test_missing_dir_and_missing_labels_raise(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        workload.build_dataset(tmp_path / "nope", "tiny")
    with pytest.raises(DataError, match="labels.csv"):
        workload.check_data(tmp_path, "tiny")


@pytest.mark.parametrize("row, message", [
    ("images/missing.jpg,1,2,3", r"line 3: image .*missing\.jpg does not exist"),
    ("images/000000.jpg,1,up,3", r"line 3: angles must be numbers"),
    ("images/000000.jpg,1,nan,3", r"line 3: angles must be finite"),
])
def test_bad_label_rows_name_the_line(tmp_path, tiny_dir, row, message):
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    shutil.copy(tiny_dir / "images" / "000000.jpg", data / "images")
    (data / "labels.csv").write_text(f"file,yaw,pitch,roll\nimages/000000.jpg,1,2,3\n{row}\n")
    with pytest.raises(DataError, match=message):
        workload.build_dataset(data, "tiny")


def test_header_without_angle_columns_raises(tmp_path):
    (tmp_path / "labels.csv").write_text("path,yaw,pitch\n")
    with pytest.raises(DataError, match="lacks column.*file, roll"):
        workload.build_dataset(tmp_path, "tiny")


def test_corrupt_jpeg_is_named_by_check_data_and_getitem(tiny_copy):
    bad = tiny_copy / "images" / "000010.jpg"
    bad.write_bytes(b"\x00garbage" * 50)
    with pytest.raises(DataError, match="000010.jpg"):
        workload.check_data(tiny_copy, "tiny")
    dataset = workload.build_dataset(tiny_copy, "tiny")
    with pytest.raises(DataError, match="000010.jpg"):
        dataset[10]


def test_truncated_jpeg_is_found_by_check_data(tiny_copy):
    bad = tiny_copy / "images" / "000020.jpg"
    bad.write_bytes(bad.read_bytes()[:200])   # valid JPEG header, body cut
    with pytest.raises(DataError, match="000020.jpg"):
        workload.check_data(tiny_copy, "tiny")


def test_tiny_training_step_gives_finite_loss_and_gradients(tiny_dir):
    model = workload.build_model("tiny")
    dataset = workload.build_dataset(tiny_dir, "tiny")
    batch = torch.utils.data.default_collate([dataset[i] for i in range(4)])
    assert workload.samples_in(batch) == 4
    loss = workload.training_step(model, batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    with torch.no_grad():
        pred_deg = model(batch[0])
    assert pred_deg.shape == (4, 3)
    # The loss is the MSE in degrees^2; the metric is the MAE in degrees.
    torch.testing.assert_close(loss.detach(), ((pred_deg - batch[1]) ** 2).mean())


def test_mae_deg_per_angle():
    pred = torch.tensor([[10.0, 0.0, -5.0], [0.0, 2.0, 5.0]])
    target = torch.tensor([[12.0, 0.0, -5.0], [0.0, -2.0, 1.0]])
    torch.testing.assert_close(headpose.mae_deg(pred, target), torch.tensor([1.0, 2.0, 2.0]))


def test_parameter_counts():
    # ResNet-50 (25,557,032) less its 1000-way fc (2,049,000) plus Linear(2048, 3) (6,147).
    # The guide gives no parameter count.
    assert workload.parameter_count("full") == 23_514_179
    assert workload.parameter_count("tiny") < workload.parameter_count("full") / 2


def test_unknown_scale_lists_the_accepted_ones(tmp_path):
    for call in (lambda: workload.build_model("huge"),
                 lambda: workload.prepare_default_data(tmp_path, "huge"),
                 lambda: workload.sample_shape("huge")):
        with pytest.raises(ValueError, match="full, tiny"):
            call()


def test_references_match_the_guide():
    base, rec = workload.references["baseline"], workload.references["recommended"]
    assert base == Knobs(batch_size=64, num_workers=4)
    assert rec == Knobs(batch_size=128, num_workers=8, persistent_workers=True,
                        prefetch_factor=4, pin_memory=True, non_blocking=True, amp="fp16")



def test_dataset_pickles_for_dataloader_workers(tiny_dir):
    import pickle
    dataset = pickle.loads(pickle.dumps(workload.build_dataset(tiny_dir, "tiny")))
    image, angles_deg = dataset[0]
    assert image.shape == (3, 64, 64) and angles_deg.shape == (3,)
