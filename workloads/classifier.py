"""Image classifiers trained on an ImageFolder at a fixed input size: 40x40 and 299x299.

Source: ``shared/reports/dataloader-guide-rtx5070.md`` (RTX 5070 12 GB, i7-8700K 12 threads,
WSL2). The guide tunes the DataLoader of the user's ``train.py`` ("Current: train.py:
batch_size=16") and enables cuDNN benchmark "with fixed input sizes (40x40, 299x299)". The
guide names no model; we use the standard ones for those sizes:

* ``classifier`` (40x40): ResNet-18 adapted to small inputs as for CIFAR (3x3 stride-1 stem,
  no max-pool), ~11.2 M parameters.
* ``classifier299`` (299x299): Inception-v3 trained with its auxiliary head
  (loss = CE(logits) + 0.4 * CE(aux_logits)), ~24.4 M parameters (21.8 M + 2.6 M aux head).

The data loading is the point of the guide: every sample is a JPEG decoded, randomly cropped,
flipped and colour-jittered in ``__getitem__``, which is the CPU work ``num_workers`` spreads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset
from torchvision.models import inception_v3, resnet18
from torchvision.models.resnet import BasicBlock, ResNet
from torchvision.transforms import v2

from tuner.errors import DataError
from tuner.harness import make_trainable
from tuner.knobs import Knobs
from tuner.workload import SCALES, Workload
from workloads._data import check_image_folder, image_folder, write_image_folder, write_once

_REPORT = "shared/reports/dataloader-guide-rtx5070.md"
_DATA_VERSION = 1

# ImageNet channel statistics: the usual normalisation for both architectures.
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)

_AUX_LOSS_WEIGHT = 0.4
"""Weight of Inception-v3's auxiliary classifier loss during training (Szegedy et al. 2016,
torchvision's reference training recipe)."""

# Both sizes share the report's references: the guide gives one "before"/"after" for train.py.
_REFERENCES = {
    # "Before: DataLoader(dataset, batch_size=batch_size, shuffle=True)" with "Current:
    # train.py: batch_size=16"; "Before: torch.backends.cudnn.benchmark = False" (the guide
    # also sets cudnn.deterministic = True there, which is not a throughput knob here).
    "baseline": Knobs(batch_size=16, cudnn_benchmark=False),
    # "After: DataLoader(..., num_workers=4, pin_memory=True, persistent_workers=True,
    # prefetch_factor=2)" and "After: torch.backends.cudnn.benchmark = True"; the batch size
    # stays train.py's 16 (the Quick Start runs "--batch-size 16").
    "recommended": Knobs(batch_size=16, num_workers=4, pin_memory=True,
                         persistent_workers=True, prefetch_factor=2, cudnn_benchmark=True),
}


def _as_label(target: int) -> torch.Tensor:
    """ImageFolder class index -> int64 scalar tensor (a module-level function, so the dataset
    pickles into DataLoader workers)."""
    return torch.tensor(target, dtype=torch.int64)


class _ImageFolderClassifier(Workload):
    """Shared logic of the two classifiers; subclasses set the sizes and the model.

    Per-scale class attributes map each scale in ``SCALES`` to a value.
    """

    learning_rate = 1e-3
    num_classes: ClassVar[int] = 4
    """Classifier outputs. A data folder with more class folders is rejected (DataError); one
    with fewer trains on a subset of the outputs."""
    input_px: ClassVar[dict[str, int]]
    """Side of the square network input, in pixels, per scale."""
    source_px: ClassVar[dict[str, int]]
    """Side of the default dataset's JPEGs, in pixels, per scale (larger than the input, so
    that decode and crop cost what they cost)."""
    images_per_class: ClassVar[dict[str, int]]
    """Images per class in the default dataset, per scale."""
    crop_scale: ClassVar[tuple[float, float]] = (0.5, 1.0)
    """RandomResizedCrop area range (fraction of the source image)."""

    def _check_scale(self, scale: str) -> None:
        if scale not in SCALES:
            raise ValueError(f"scale {scale!r}: accepted scales are {', '.join(SCALES)}")

    def transform(self, scale: str) -> v2.Compose:
        """The per-sample CPU pipeline: uint8 ``(3, H, W)`` -> float32 ``(3, S, S)`` normalised."""
        self._check_scale(scale)
        size = self.input_px[scale]
        return v2.Compose([
            v2.RandomResizedCrop(size, scale=self.crop_scale, antialias=True),  # (3, S, S) uint8
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2),
            v2.ToDtype(torch.float32, scale=True),  # [0, 255] -> [0, 1]
            v2.Normalize(mean=_MEAN, std=_STD),
        ])

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        """ImageFolder ``data_dir/<class>/<image>.{png,jpg,jpeg}``; items are ``(image, label)``:
        float32 ``(3, S, S)`` and int64 ``()``.

        Raises:
            ValueError: ``scale`` is not one of SCALES.
            DataError: the directory is missing, holds no class folder with images, or has more
                class folders than ``num_classes``; in ``__getitem__``, a file that fails to
                decode (the message names it).
        """
        dataset = image_folder(Path(data_dir), self.transform(scale))
        if len(dataset.classes) > self.num_classes:
            raise DataError(
                f"data directory {data_dir} has {len(dataset.classes)} class folders; the "
                f"{self.name} model has {self.num_classes} outputs (at most {self.num_classes} "
                "class folders are accepted)")
        dataset.target_transform = _as_label
        return dataset

    def check_data(self, data_dir: Path, scale: str) -> int:
        """Decode every image before the run starts (``check_image_folder``)."""
        return check_image_folder(self.build_dataset(data_dir, scale))

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        """Write ``num_classes`` folders of deterministic synthetic JPEGs (smooth blobs plus
        noise, quality 90) under ``cache_dir/<name>-v<version>-<scale>``; returns that path.

        The report's real dataset is not public (its size and class count are not given); this
        one keeps what the DataLoader knobs see: JPEG files a little larger than the fixed
        input, decoded and augmented per sample.
        """
        self._check_scale(scale)
        side = self.source_px[scale]
        counts = {f"class_{i}": self.images_per_class[scale] for i in range(self.num_classes)}
        target = Path(cache_dir) / f"{self.name}-v{_DATA_VERSION}-{scale}"
        return write_once(target, lambda root: write_image_folder(
            root, counts, size=(side, side), seed=_DATA_VERSION, fmt="jpg"))

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        self._check_scale(scale)
        size = self.input_px[scale]
        return {"image": [3, size, size], "label": []}


class Classifier(_ImageFolderClassifier):
    """ResNet-18 (CIFAR-style stem) on 40x40 crops of 48x48 JPEGs.

    Scales:
        seed: torchvision resnet18, conv1 -> 3x3 stride 1, maxpool -> Identity; 11.17 M
            parameters with 4 classes. Default data: 4 x 200 JPEGs of 48x48.
        tiny: the same network with one BasicBlock per stage (ResNet-10 layout); 4.90 M
            parameters. Default data: 4 x 16 JPEGs of 44x44. Input stays 40x40.
    """

    name = "classifier"
    description = "ResNet-18 (CIFAR stem) on 40x40 crops of an ImageFolder of JPEGs"
    source = f"{_REPORT} (train.py, 40x40 input; RTX 5070 12 GB, i7-8700K)"
    references = _REFERENCES
    space = "classifier"
    input_px = {"seed": 40, "tiny": 40}
    source_px = {"seed": 48, "tiny": 44}
    images_per_class = {"seed": 200, "tiny": 16}

    def build_model(self, scale: str) -> nn.Module:
        self._check_scale(scale)
        if scale == "seed":
            model = resnet18(weights=None, num_classes=self.num_classes)
        else:
            model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=self.num_classes)
        # Small-input stem: keep 40x40 resolution into layer1 (a 7x7/2 conv and a 3x3/2
        # max-pool would leave a 10x10 map).
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
        return model

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        images, labels = batch  # (B, 3, 40, 40) float32, (B,) int64
        logits = model(images)  # (B, num_classes)
        return F.cross_entropy(logits, labels)


class Classifier299(_ImageFolderClassifier):
    """Inception-v3 with its auxiliary head on 299x299 crops of 320x320 JPEGs.

    Scales:
        seed: torchvision inception_v3(weights=None, aux_logits=True, init_weights=True);
            24.35 M parameters with 4 classes (21.79 M without the aux head). Default data:
            4 x 80 JPEGs of 320x320 (20 batches of 16).
        tiny: the same network at 75x75, the smallest input Inception-v3 takes, with the aux
            head OFF: torchvision's aux head (5x5 avg-pool stride 3, then a 5x5 conv on the
            17x17 Mixed_6e map) needs the full 299x299 input (298 already fails). 21.79 M
            parameters. Default data: 4 x 8 JPEGs of 84x84.
    """

    name = "classifier299"
    description = "Inception-v3 (aux head on) on 299x299 crops of an ImageFolder of JPEGs"
    source = f"{_REPORT} (train.py, 299x299 input; RTX 5070 12 GB, i7-8700K)"
    references = _REFERENCES
    space = "classifier299"
    input_px = {"seed": 299, "tiny": 75}
    source_px = {"seed": 320, "tiny": 84}
    images_per_class = {"seed": 80, "tiny": 8}

    def build_model(self, scale: str) -> nn.Module:
        self._check_scale(scale)
        return inception_v3(weights=None, aux_logits=(scale == "seed"), init_weights=True,
                            num_classes=self.num_classes)

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        images, labels = batch  # (B, 3, S, S) float32, (B,) int64
        out = model(images)
        # In train mode with aux_logits on, Inception-v3 returns InceptionOutputs(logits,
        # aux_logits), a NamedTuple of two (B, num_classes) tensors; otherwise one tensor.
        if isinstance(out, tuple):
            logits, aux_logits = out
            return (F.cross_entropy(logits, labels)
                    + _AUX_LOSS_WEIGHT * F.cross_entropy(aux_logits, labels))
        return F.cross_entropy(out, labels)


workload = Classifier()
trainable = make_trainable(workload)

workload299 = Classifier299()
trainable299 = make_trainable(workload299)
