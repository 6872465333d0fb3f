"""segmentation3d's and chargpt's split sample paths (``Workload.sample_path``): every data path
trains at tiny scale on CPU, and the cached and device paths give the ``loader`` path's samples
(the same items for the same draws; the same distribution where the draws differ)."""

from __future__ import annotations

import collections
import math
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tuner.data import CachedDataset, DecodedCache, DeviceBatches, cache_bytes
from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.trial.harness import run_trial
from tuner.workload import default_cache_dir
from tuner.workloads import chargpt, segmentation3d
from tuner.workloads._patches import draw_patches, gather_patches

WORKLOADS = {"segmentation3d": segmentation3d.workload, "chargpt": chargpt.workload}
PATCH = (16, 32, 32)
"""segmentation3d's tiny patch (D, H, W)."""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """Each workload's tiny default data, written under a private $TUNER_CACHE."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TUNER_CACHE", str(tmp_path_factory.mktemp("tuner-cache")))
        yield {name: w.prepare_default_data(default_cache_dir() / "data", "tiny")
               for name, w in WORKLOADS.items()}


@pytest.mark.parametrize("path", ["loader", "cache", "device"])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_data_path_trains_at_tiny_scale_on_cpu(name, path, data):
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(data[name]), windows=2,
                             window_s=0.2, warmup_steps=2)
    knobs = Knobs(batch_size=4, data_path=path, num_workers=1 if path == "cache" else 0)
    result = run_trial(WORKLOADS[name], knobs, settings)
    assert result["status"] == "ok", result.get("error")
    assert result["samples_per_sec"] > 0
    assert (result["cache_fill_s"] is None) == (path == "loader")


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_sample_path_pickles_and_matches_the_datasets_length(name, data):
    workload = WORKLOADS[name]
    path = workload.sample_path(data[name], "tiny")
    assert workload.has_sample_path
    assert len(path.decoded) == len(workload.build_dataset(data[name], "tiny"))
    path.decoded[0]                                        # opens memory maps in this process
    blob = pickle.dumps(path)
    assert len(blob) < 10_000                              # paths and shapes, not the data
    again = pickle.loads(blob)
    assert [t.shape for t in again.decoded[1]] == [t.shape for t in path.decoded[1]]


# ------------------------------------------------------------------------------ segmentation3d


def test_segmentation3d_cached_items_are_the_loaders_for_the_same_draws(data):
    loader_items = segmentation3d.workload.build_dataset(data["segmentation3d"], "tiny")
    path = segmentation3d.workload.sample_path(data["segmentation3d"], "tiny")
    for i in (0, 1, 2, 100, len(loader_items) - 1):
        torch.manual_seed(i)
        expected = loader_items[i]
        torch.manual_seed(i)
        got = path.augment(path.decoded[i])
        for e, g in zip(expected, got):
            assert g.shape == e.shape and g.dtype == e.dtype
            assert torch.equal(g, e)


def test_segmentation3d_cache_epoch_equals_the_loader_epoch(data):
    """With one seed for the draws and one for the shuffle, a DataLoader epoch over the cache
    gives the loader path's batches exactly: the cached path's sample statistics are the
    loader path's."""
    workload = segmentation3d.workload
    path = workload.sample_path(data["segmentation3d"], "tiny")
    cache = DecodedCache.fill(path.decoded)
    epochs = []
    for dataset in (workload.build_dataset(data["segmentation3d"], "tiny"),
                    CachedDataset(cache, path.augment)):
        torch.manual_seed(7)
        loader = DataLoader(dataset, batch_size=8, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(3))
        epochs.append(list(loader))
    assert len(epochs[0]) == len(epochs[1]) == len(cache) // 8
    for (xa, ya), (xb, yb) in zip(*epochs):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def _reference_patch(image, label, start, mirror):
    """random_patch's steps for given draws, written out in numpy."""
    window = tuple(slice(s, s + p) for s, p in zip(start, PATCH))
    axes = tuple(a for a in range(3) if mirror[a])
    img = np.flip(image[window], axes).astype(np.float32)
    lab = np.flip(label[window], axes).astype(np.int64)
    img = (img - img.mean()) / max(float(img.std()), 1e-6)
    pad = [(0, p - s) for s, p in zip(img.shape, PATCH)]
    return np.pad(img, pad), np.pad(lab, pad)


def test_device_gather_equals_the_cpu_patch_for_the_same_draws():
    """Volumes of three shapes (one smaller than the patch along two axes) padded to one
    shape: the batched gather gives each sample the CPU path's patch for its start and
    mirroring, padding included."""
    rng = np.random.default_rng(0)
    shapes = [(32, 64, 64), (8, 20, 40), (20, 40, 36)]
    stored = tuple(max(max(s[a] for s in shapes), PATCH[a]) for a in range(3))
    volumes = [(rng.normal(size=s).astype(np.float32) * 50,
                rng.integers(0, 3, size=s).astype(np.uint8)) for s in shapes]
    images = torch.zeros((len(shapes), *stored))
    labels = torch.zeros((len(shapes), *stored), dtype=torch.uint8)
    for k, (image, label) in enumerate(volumes):
        window = tuple(slice(0, side) for side in image.shape)
        images[k][window], labels[k][window] = torch.from_numpy(image), torch.from_numpy(label)
    shape_t = torch.tensor(shapes)
    torch.manual_seed(0)
    for _ in range(8):
        starts, mirror = draw_patches(shape_t, PATCH)
        got_images, got_labels = gather_patches(images, labels, shape_t, starts, mirror, PATCH)
        assert got_images.shape == (3, 1, *PATCH) and got_labels.dtype == torch.int64
        for k, (image, label) in enumerate(volumes):
            img, lab = _reference_patch(image, label, starts[k].tolist(), mirror[k].tolist())
            torch.testing.assert_close(got_images[k, 0], torch.from_numpy(img),
                                       atol=1e-4, rtol=1e-4)
            assert torch.equal(got_labels[k], torch.from_numpy(lab))


def test_device_patch_offsets_and_mirroring_are_drawn_per_sample():
    """2,000 samples of one batch: every start 0..room of each axis occurs (about 2000/17 =
    118 times each for the 17 starts of the first axis), and each axis is mirrored in about
    half (standard error 1.1 %: 0.05 is 4.5 of them)."""
    shapes = torch.tensor([[32, 64, 64]]).expand(2000, 3)
    torch.manual_seed(0)
    starts, mirror = draw_patches(shapes, PATCH)
    room = [32 - 16, 64 - 32, 64 - 32]
    for axis in range(3):
        assert sorted(set(starts[:, axis].tolist())) == list(range(room[axis] + 1))
        assert abs(float(mirror[:, axis].float().mean()) - 0.5) < 0.05
    assert len({tuple(s) for s in starts[:64].tolist()}) > 60   # one batch: distinct offsets


def _assert_same_mean(a: torch.Tensor, b: torch.Tensor) -> None:
    """The means of two independent samples differ by under 5 standard errors (a chance of
    about 6e-7 for equal distributions)."""
    se = math.sqrt(float(a.var()) / len(a) + float(b.var()) / len(b))
    assert abs(float(a.mean()) - float(b.mean())) < 5 * se, (float(a.mean()), float(b.mean()), se)


def test_segmentation3d_device_batches_have_the_loader_paths_statistics(data):
    """Three epochs of each path: per patch, the share of each class and the mean of the raw
    intensity z-scores' square (1 per patch) and of the z-scored image's centre half."""
    workload = segmentation3d.workload
    path = workload.sample_path(data["segmentation3d"], "tiny")
    torch.manual_seed(1)
    device_batches = DeviceBatches(DecodedCache.fill(path.decoded), 16, path.augment_batch)
    loader = DataLoader(workload.build_dataset(data["segmentation3d"], "tiny"), batch_size=16,
                        shuffle=True, drop_last=True)
    stats = []
    for batches in (loader, device_batches):
        images, labels = zip(*(batch for _ in range(3) for batch in batches))
        images, labels = torch.cat(images), torch.cat(labels)
        assert images.shape[1:] == (1, *PATCH) and images.dtype == torch.float32
        assert labels.shape[1:] == PATCH and labels.dtype == torch.int64
        torch.testing.assert_close(images.mean(dim=(1, 2, 3, 4)), torch.zeros(len(images)),
                                   atol=1e-4, rtol=0)
        stats.append({f"class {c}": (labels == c).float().mean(dim=(1, 2, 3)) for c in range(3)}
                     | {"centre": images[:, 0, 4:12, 8:24, 8:24].mean(dim=(1, 2, 3))})
    for key in stats[0]:
        _assert_same_mean(stats[0][key], stats[1][key])


def test_decoded_volumes_of_different_shapes_are_padded_to_one(tmp_path):
    rng = np.random.default_rng(1)
    for case, shape in (("a", (8, 20, 40)), ("b", (20, 40, 36))):
        for sub, array in (("images", rng.integers(-500, 500, shape).astype(np.int16)),
                           ("labels", rng.integers(0, 3, shape).astype(np.uint8))):
            (tmp_path / sub).mkdir(exist_ok=True)
            np.save(tmp_path / sub / f"{case}.npy", array)
    path = segmentation3d.workload.sample_path(tmp_path, "tiny")
    image, label, shape = path.decoded[1]
    assert image.shape == label.shape == (20, 40, 40) and image.dtype == torch.int16
    assert shape.tolist() == [20, 40, 36] and int(label[:, :, 36:].sum()) == 0
    loader_items = segmentation3d.workload.build_dataset(tmp_path, "tiny")
    for i in range(4):
        torch.manual_seed(i)
        expected = loader_items[i]
        torch.manual_seed(i)
        got = path.augment(path.decoded[i])
        assert all(torch.equal(g, e) for g, e in zip(got, expected))


def test_a_cache_fill_names_a_label_file_out_of_range(data, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(data["segmentation3d"], copy)
    label = np.load(copy / "labels" / "case_001.npy")
    label[-1, -1, -1] = 7                               # one voxel: a patch rarely reads it
    np.save(copy / "labels" / "case_001.npy", label)
    path = segmentation3d.workload.sample_path(copy, "tiny")
    with pytest.raises(DataError, match="case_001.npy.*found 0..7"):
        DecodedCache.fill(path.decoded)


def test_storage_dtype_keeps_values_or_takes_the_loaders_float32():
    dtype = segmentation3d.storage_dtype
    assert dtype([np.dtype(np.int16)]) == np.int16
    assert dtype([np.dtype(np.uint16)]) == np.int32
    assert dtype([np.dtype(np.int16), np.dtype(np.uint8)]) == np.int16
    assert dtype([np.dtype(np.float64)]) == np.float32


# ------------------------------------------------------------------------------------- chargpt


def test_chargpt_cached_items_are_the_loaders(data):
    windows = chargpt.workload.build_dataset(data["chargpt"], "tiny")
    path = chargpt.workload.sample_path(data["chargpt"], "tiny")
    (tokens,) = path.decoded[0]
    assert tokens.shape == (65,) and tokens.dtype == torch.uint8
    assert cache_bytes(path) == len(windows) * 65        # the token array, once
    for i in (0, 1, 777, len(windows) - 1):
        for e, g in zip(windows[i], path.augment(path.decoded[i])):
            assert g.shape == e.shape == (64,) and g.dtype == e.dtype == torch.int64
            assert torch.equal(g, e)


def test_chargpt_device_epoch_is_every_window_once_in_a_shuffled_order(data):
    """A ``device`` epoch gives the ``loader`` path's windows, each once (batch 125 divides
    the 15,625 windows); one batch's windows lie all over the text; the next epoch's order
    differs."""
    path = chargpt.workload.sample_path(data["chargpt"], "tiny")
    cache = DecodedCache.fill(path.decoded)
    index_of = {bytes(t.tolist()): i for i, t in enumerate(cache.tensors[0])}
    assert len(index_of) == len(cache)                    # the windows are distinct texts
    torch.manual_seed(0)
    batches = DeviceBatches(cache, 125, path.augment_batch)
    epochs = []
    for _ in range(2):
        order = []
        for x, y in batches:
            assert x.shape == y.shape == (125, 64) and x.dtype == y.dtype == torch.int64
            assert x.is_contiguous() and torch.equal(x[:, 1:], y[:, :-1])
            order += [index_of[bytes(row.tolist()) + bytes([last])]
                      for row, last in zip(x, y[:, -1].tolist())]
        epochs.append(order)
    n = len(cache)
    assert sorted(epochs[0]) == list(range(n))
    first = epochs[0][:125]
    assert min(first) < n / 4 and max(first) > 3 * n / 4
    assert epochs[0] != epochs[1] and sorted(epochs[1]) == list(range(n))


def test_chargpt_cache_epoch_equals_the_loader_epoch(data):
    path = chargpt.workload.sample_path(data["chargpt"], "tiny")
    cache = DecodedCache.fill(path.decoded)
    epochs = []
    for dataset in (chargpt.workload.build_dataset(data["chargpt"], "tiny"),
                    CachedDataset(cache, path.augment)):
        loader = DataLoader(dataset, batch_size=256, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(5))
        epochs.append(list(loader))
    assert len(epochs[0]) == len(epochs[1]) == len(cache) // 256
    counts = collections.Counter(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                                 for a, b in zip(*epochs))
    assert counts == {True: len(epochs[0])}
