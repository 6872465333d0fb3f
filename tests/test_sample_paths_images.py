"""The image workloads' split sample paths (ddpm, headpose, classifier; ``tuner.data``): every
data path trains a trial, the cached and device paths give the loader path's items, and their
random parameters are drawn per sample with the loader's distribution."""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from torch.utils.data import default_collate

from tuner.data import DecodedCache
from tuner.knobs import Knobs
from tuner.settings import TrialSettings, default_cache_dir
from tuner.trial.harness import run_trial
from tuner.workloads import _augment as aug
from tuner.workloads import classifier, ddpm, headpose

WORKLOADS = {"ddpm": ddpm.workload, "headpose": headpose.workload,
             "classifier": classifier.workload}
NORMALIZE = {"ddpm": ((0.5,) * 3, (0.5,) * 3),
             "headpose": (headpose.IMAGENET_MEAN, headpose.IMAGENET_STD),
             "classifier": (classifier._MEAN, classifier._STD)}
"""Each workload's Normalize (mean, std): its items mapped back to pixel levels 0..255."""
LOADER_UINT8_STEPS = {"ddpm": 2, "headpose": 4, "classifier": 3}
"""Colour-jitter steps that torchvision's loader path runs on uint8 images, each truncating
its result to a whole level (0.5 level lower on average), where the device path computes in
float: ddpm brightness and contrast; headpose those, saturation and hue; the classifier
brightness, contrast and saturation. The device path's channel means may lie that many half
levels above the loader's."""
FLIPPED = {"ddpm": None, "headpose": 2, "classifier": None}
"""Index of the label that a flip changes (headpose's angles), None where none does."""


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data_dirs() -> dict:
    """Each workload's tiny default data, in the tuner cache (written once)."""
    return {name: w.prepare_default_data(default_cache_dir() / "data", "tiny")
            for name, w in WORKLOADS.items()}


@pytest.fixture(scope="module")
def paths(data_dirs) -> dict:
    return {name: w.sample_path(data_dirs[name], "tiny") for name, w in WORKLOADS.items()}


def _pixels(name: str, images: torch.Tensor) -> torch.Tensor:
    """Normalised float images ``(N, 3, H, W)`` -> pixel levels (0..255)."""
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in NORMALIZE[name])
    return (images * std + mean) * 255


def _stacked(sample: tuple, n: int) -> tuple:
    """One decoded sample repeated ``n`` times, as a device batch."""
    return tuple(t.unsqueeze(0).expand(n, *t.shape).contiguous() for t in sample)


def _ramp_sample(path, hw: int | None = None) -> tuple:
    """The first decoded sample with its image replaced by a grey left-to-right ramp (levels
    40..215): every crop, rotation and colour jitter keeps its right half brighter, a flip
    makes the left half brighter. ``hw`` replaces a stored source size ([H, W]) where the
    sample has one."""
    sample = list(path.decoded[0])
    _, h, w = sample[0].shape
    sample[0] = torch.linspace(40, 215, w).round().to(torch.uint8).expand(3, h, w).clone()
    if hw is not None and len(sample) == 3:
        sample[1] = torch.tensor([hw, hw])
    return tuple(sample)


def _flipped(name: str, images: torch.Tensor) -> torch.Tensor:
    """Which of the ramp images ``(N, 3, H, W)`` came out mirrored: ``(N,)`` bool."""
    half = images.shape[-1] // 2
    return images[..., :half].mean(dim=(1, 2, 3)) > images[..., -half:].mean(dim=(1, 2, 3))


# ----------------------------------------------------------------------------- every data path

@pytest.mark.parametrize("data_path, num_workers", [("loader", 0), ("cache", 1), ("device", 0)])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_data_path_runs_a_trial(name, data_path, num_workers, data_dirs):
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(data_dirs[name]),
                             windows=1, window_s=0.2, warmup_steps=1)
    knobs = Knobs(batch_size=8, data_path=data_path, num_workers=num_workers)
    result = run_trial(WORKLOADS[name], knobs, settings)
    assert result["status"] == "ok", result.get("error")
    assert result["data_path"] == data_path
    assert result["samples_per_sec"] > 0
    if data_path == "loader":
        assert result["cache_fill_s"] is None
    else:
        assert result["cache_fill_s"] > 0


# --------------------------------------------------------------------------- items and batches

@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_items_and_batches_have_the_loader_items_shapes_and_dtypes(name, paths, data_dirs):
    path = pickle.loads(pickle.dumps(paths[name]))            # as DataLoader workers get it
    dataset = WORKLOADS[name].build_dataset(data_dirs[name], "tiny")
    assert len(path.decoded) == len(dataset)
    decoded = path.decoded[0]
    assert decoded[0].dtype == torch.uint8 and decoded[0].dim() == 3
    assert [t.shape for t in path.decoded[len(dataset) - 1]] == [t.shape for t in decoded]
    item = dataset[0]
    cached = path.augment(decoded)
    assert [(t.shape, t.dtype) for t in cached] == [(t.shape, t.dtype) for t in item]
    batch = path.augment_batch(_stacked(decoded, 5))
    collated = default_collate([dataset[i] for i in range(5)])
    assert [(t.shape, t.dtype) for t in batch] == [(t.shape, t.dtype) for t in collated]


def test_ddpm_cached_item_is_the_loader_item_for_the_same_seed(paths, data_dirs):
    """ddpm's decoded part is the loader's resize, and its random part the same transforms:
    seeded alike, the two paths give the same tensors."""
    dataset = ddpm.workload.build_dataset(data_dirs["ddpm"], "tiny")
    path = paths["ddpm"]
    for index in (0, 100, len(dataset) - 1):
        torch.manual_seed(index)
        image, label = dataset[index]
        torch.manual_seed(index)
        cached_image, cached_label = path.augment(path.decoded[index])
        assert torch.equal(image, cached_image) and torch.equal(label, cached_label)


def test_headpose_cache_side_keeps_the_smallest_crop_at_the_input_size():
    assert headpose.cache_side_px(224, (450, 450)) == 263     # ceil(224 / sqrt(0.8 / 1.1))
    assert headpose.cache_side_px(224, (250, 250)) == 250     # no upsampling
    assert headpose.cache_side_px(64, (48, 60)) == 64         # never below the input
    smallest = math.sqrt(headpose.CROP_SCALE[0] / headpose.CROP_RATIO[1]) * 263
    assert smallest >= 224


# ------------------------------------------------------------------- random parameters per sample

@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_flips_are_drawn_per_sample_within_one_batch(name, paths):
    """128 copies of one ramp image in one device batch: about half come out mirrored (a
    binomial(128, 0.5) lies within 0.5 +- 0.18 with 4 standard deviations), and where a
    label follows the flip (headpose's yaw and roll), it follows it sample by sample."""
    torch.manual_seed(0)
    sample = _ramp_sample(paths[name])
    images, labels = paths[name].augment_batch(_stacked(sample, 128))
    flipped = _flipped(name, images)
    assert 0.32 <= flipped.float().mean().item() <= 0.68
    if FLIPPED[name] is None:
        assert torch.equal(labels, _stacked(sample, 128)[-1])
    else:
        angles = sample[FLIPPED[name]]
        sign = torch.where(flipped[:, None], headpose.FLIP_SIGN, 1.0)
        assert torch.equal(labels, angles * sign)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_cached_path_flips_each_item_independently(name, paths):
    torch.manual_seed(0)
    sample = _ramp_sample(paths[name])
    items = [paths[name].augment(sample) for _ in range(128)]
    flipped = _flipped(name, torch.stack([image for image, _ in items]))
    assert 0.32 <= flipped.float().mean().item() <= 0.68
    if FLIPPED[name] is not None:
        for was_flipped, (_, angles) in zip(flipped, items):
            expected = sample[FLIPPED[name]] * (headpose.FLIP_SIGN if was_flipped else 1.0)
            assert torch.equal(angles, expected)


@pytest.mark.parametrize("name, scale, ratio", [
    ("classifier", classifier.workload.crop_scale, (3 / 4, 4 / 3)),
    ("headpose", headpose.CROP_SCALE, headpose.CROP_RATIO),
])
def test_crop_boxes_are_drawn_per_sample_over_the_scale_range(name, scale, ratio, paths,
                                                              monkeypatch):
    """The boxes the device batch crops (recorded from ``random_resized_crop_boxes``, on a
    1000x1000 source so whole-pixel rounding stays under 0.3 %): areas inside the crop scale
    and spread over it (128 uniform draws all missing a tenth at one end: p = 0.9^128 < 1e-5),
    aspect ratios inside the ratio range."""
    drawn, draw = [], aug.random_resized_crop_boxes

    def recording(*args, **kwargs):
        drawn.append(draw(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(aug, "random_resized_crop_boxes", recording)
    torch.manual_seed(0)
    paths[name].augment_batch(_stacked(_ramp_sample(paths[name], hw=1000), 128))
    (boxes,) = drawn
    width, height = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    area = width * height
    low, high = scale
    assert area.min() >= low - 0.003 and area.max() <= high + 0.003
    assert area.min() < low + 0.1 * (high - low) and area.max() > high - 0.1 * (high - low)
    assert (width / height).min() >= ratio[0] - 0.003
    assert (width / height).max() <= ratio[1] + 0.003


def _orientation_deg(images: torch.Tensor) -> torch.Tensor:
    """Orientation of the brightest structure of each image ``(N, C, H, W)``, degrees
    counter-clockwise, from the intensity's second central moments (the background's level
    subtracted: a constant over the square frame has no orientation)."""
    w = images.mean(1)
    w = w - w.amin(dim=(1, 2), keepdim=True)
    _, h, wd = w.shape
    ys, xs = torch.meshgrid(torch.arange(h) - (h - 1) / 2, torch.arange(wd) - (wd - 1) / 2,
                            indexing="ij")
    mass = w.sum((1, 2))
    dx = xs - ((w * xs).sum((1, 2)) / mass)[:, None, None]
    dy = ys - ((w * ys).sum((1, 2)) / mass)[:, None, None]
    mu20, mu02 = (w * dx * dx).sum((1, 2)), (w * dy * dy).sum((1, 2))
    mu11 = (w * dx * dy).sum((1, 2))
    return -torch.rad2deg(0.5 * torch.atan2(2 * mu11, mu20 - mu02))     # y points down


def test_ddpm_rotation_angles_are_drawn_per_sample_over_the_range():
    """128 copies of a horizontal bar in one device batch: the measured angles (accurate to
    about 0.5 degrees on 40x40) stay within +-ROTATION_DEG (1 degree of margin), reach past
    12 degrees on both sides, spread as a uniform's (standard deviation 15 / sqrt(3) = 8.66,
    +-1.5) and are positive for about half."""
    bar = torch.zeros(3, 40, 40, dtype=torch.uint8)
    bar[:, 19:21, 5:35] = 200
    assert _orientation_deg(bar[None].float()).abs().item() < 0.01
    torch.manual_seed(0)
    labels = torch.zeros(128, dtype=torch.int64)
    images, _ = ddpm._AugmentBatch()((_stacked((bar,), 128)[0], labels))
    angle = _orientation_deg(images)
    limit = ddpm.ROTATION_DEG
    assert angle.abs().max() <= limit + 1
    assert angle.min() < -0.8 * limit and angle.max() > 0.8 * limit
    assert abs(angle.std().item() - limit / math.sqrt(3)) < 1.5
    assert 0.32 <= (angle > 0).float().mean().item() <= 0.68


def test_rotate_is_torchvisions_rotate_per_sample():
    from torchvision.transforms.v2 import functional as TF
    torch.manual_seed(0)
    for h, w in ((40, 40), (30, 50)):
        images = torch.randint(0, 256, (5, 3, h, w), dtype=torch.uint8)
        angles = torch.tensor([-15.0, -7.3, 3.1, 12.9, 15.0])
        expected = torch.stack([TF.rotate(img, float(a)) for img, a in zip(images, angles)])
        assert torch.equal(aug.rotate(images.float(), angles), expected.float())


@pytest.mark.parametrize("levels", [4, 256])
def test_hue_shift_is_torchvisions_adjust_hue_per_sample(levels):
    """Random images of ``levels`` grey levels per channel (4: many grey pixels and channel
    ties, where the hue formula switches branch)."""
    from torchvision.transforms.v2 import functional as TF
    torch.manual_seed(0)
    images = torch.randint(0, levels, (5, 3, 16, 16)).float() / (levels - 1)
    shift = torch.tensor([-0.5, -0.05, 0.0, 0.03, 0.5])
    expected = torch.stack([TF.adjust_hue(img, float(s)) for img, s in zip(images, shift)])
    assert torch.allclose(aug.adjust_hue_per_sample(images, shift), expected, atol=1e-5)


def test_color_jitter_draws_a_hue_shift_per_sample_over_the_range():
    """A saturated colour, hue jitter only: each sample's hue moves by its own shift, spread
    over [-0.05, 0.05]; with hue 0 nothing moves."""
    colour = torch.tensor([0.8, 0.3, 0.2]).view(1, 3, 1, 1).expand(128, 3, 4, 4)
    torch.manual_seed(0)
    jittered = aug.color_jitter(colour, 0.0, 0.0, 0.0, hue=0.05)
    hue = aug._rgb_to_hsv(jittered)[:, 0, 0, 0]
    shift = (hue - aug._rgb_to_hsv(colour)[:, 0, 0, 0] + 0.5).remainder(1.0) - 0.5
    assert shift.abs().max() <= 0.05 + 1e-5
    assert shift.min() < -0.04 and shift.max() > 0.04
    assert torch.equal(aug.color_jitter(colour, 0.0, 0.0, 0.0), colour)
    with pytest.raises(ValueError, match="hue 0.6"):
        aug.color_jitter(colour, 0.0, 0.0, 0.0, hue=0.6)


# ------------------------------------------------------------- the loader path's distribution

def _channel_stats(name: str, images: torch.Tensor) -> torch.Tensor:
    """Per item: the channel means and standard deviations in pixel levels, ``(N, 6)``."""
    px = _pixels(name, images)
    return torch.cat([px.mean(dim=(2, 3)), px.std(dim=(2, 3))], dim=1)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_cached_and_device_items_match_the_loader_items_statistics(name, paths, data_dirs):
    """256 items over the dataset (every one; the classifier's 64 four times), each path
    augmenting the same decoded images: per item the channel means and standard deviations
    (pixel levels) and the labels. The paired differences average to zero within 4 standard
    errors, plus for the device path the loader's uint8 truncations
    (``LOADER_UINT8_STEPS`` half levels on the means); labels are the loader's (a flip
    negates headpose's yaw and roll for half of the items on every path)."""
    workload, path = WORKLOADS[name], paths[name]
    dataset = workload.build_dataset(data_dirs[name], "tiny")
    index = torch.arange(256) * len(dataset) // 256 if len(dataset) >= 256 \
        else torch.arange(256) % len(dataset)
    torch.manual_seed(0)
    loader = [dataset[i] for i in index.tolist()]
    cache = DecodedCache.fill(path.decoded)
    cached = [path.augment(cache[i]) for i in index.tolist()]
    device = [path.augment_batch(tuple(t[chunk] for t in cache.tensors))
              for chunk in index.split(64)]
    images = {"loader": torch.stack([x for x, _ in loader]),
              "cache": torch.stack([x for x, _ in cached]),
              "device": torch.cat([x for x, _ in device])}
    labels = {"loader": torch.stack([y for _, y in loader]),
              "cache": torch.stack([y for _, y in cached]),
              "device": torch.cat([y for _, y in device])}
    reference = _channel_stats(name, images["loader"])
    for other in ("cache", "device"):
        diff = reference - _channel_stats(name, images[other])
        bound = 4 * diff.std(0) / math.sqrt(len(diff))
        if other == "device":
            bound[:3] += 0.5 * LOADER_UINT8_STEPS[name]
        assert (diff.mean(0).abs() <= bound).all(), (other, diff.mean(0), bound)
    if FLIPPED[name] is None:
        for other in ("cache", "device"):
            assert torch.equal(labels[other], labels["loader"])
    else:
        stored = torch.as_tensor(dataset.angles_deg)[index]
        for labelled in labels.values():
            assert torch.equal(labelled.abs(), stored.abs())
            assert torch.equal(labelled[:, 1], stored[:, 1])                 # pitch kept
            flips = (labelled[:, 0] != stored[:, 0]) | (labelled[:, 2] != stored[:, 2])
            assert 0.375 <= flips.float().mean().item() <= 0.625          # 4 sd of 256


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_augmentation_spread_of_one_image_matches_the_loader(name, paths, data_dirs):
    """One decoded image augmented 512 times on each path: the spread of its channel means
    (brightness, contrast, saturation, hue and crop draws) matches the loader's within
    4 / sqrt(512) = 18 % (the relative standard error of the ratio of two standard deviations
    of n samples is about 1 / sqrt(n)), and their averages within 4 standard errors plus the
    device path's truncation allowance (``LOADER_UINT8_STEPS``)."""
    n = 512
    workload, path = WORKLOADS[name], paths[name]
    dataset = workload.build_dataset(data_dirs[name], "tiny")
    torch.manual_seed(0)
    loader = _channel_stats(name, torch.stack([dataset[3][0] for _ in range(n)]))[:, :3]
    cached = _channel_stats(name, torch.stack([path.augment(path.decoded[3])[0]
                                               for _ in range(n)]))[:, :3]
    device = _channel_stats(name, path.augment_batch(_stacked(path.decoded[3], n))[0])[:, :3]
    for other, stats in (("cache", cached), ("device", device)):
        ratio = stats.std(0) / loader.std(0)
        assert ((ratio - 1).abs() <= 4 / math.sqrt(n)).all(), (other, ratio)
        bound = 4 * torch.sqrt((stats.var(0) + loader.var(0)) / n)
        if other == "device":
            bound += 0.5 * LOADER_UINT8_STEPS[name]
        assert ((stats.mean(0) - loader.mean(0)).abs() <= bound).all(), (other, bound)
