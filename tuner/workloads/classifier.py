"""Image classifiers trained on an ImageFolder at a fixed input size: 40x40 and 299x299.

Source: a user's DataLoader "Performance Optimization Guide" (RTX 5070 12 GB, i7-8700K 12 threads,
WSL2). The guide tunes the DataLoader of the user's ``train.py`` ("Current: train.py:
batch_size=16") and enables cuDNN benchmark "with fixed input sizes (40x40, 299x299)". The
guide names no model; we use the standard ones for those sizes:

* ``classifier`` (40x40): ResNet-18 adapted to small inputs as for CIFAR (3x3 stride-1 stem,
  no max-pool), ~11.2 M parameters.
* ``classifier299`` (299x299): Inception-v3 trained with its auxiliary head
  (loss = CE(logits) + 0.4 * CE(aux_logits)), ~24.4 M parameters (21.8 M + 2.6 M aux head).

The data loading is the point of the guide: every sample is a JPEG decoded, randomly cropped,
flipped and colour-jittered in ``__getitem__``, which is the CPU work ``num_workers`` spreads.

Any other classification architecture, by name, on the same pipeline: ``--model NAME``
(``torchvision.models.get_model(NAME, weights=None, num_classes=1000)``; ``timm:NAME`` with
``timm.create_model`` when timm is installed) and ``--image-size PX`` (default: the crop size
of the architecture's pretrained weights, e.g. 224 for resnet50). See ``NamedClassifier``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
import torchvision.models
from torch import nn
from torch.utils.data import Dataset
from torchvision.models import inception_v3, resnet18
from torchvision.models.resnet import BasicBlock, ResNet
from torchvision.transforms import v2

from tuner.data import SamplePath
from tuner.errors import DataError, TunerError
from tuner.knobs import Knobs
from tuner.settings import SCALES, check_scale
from tuner.workload import Workload, option_flag
from tuner.workloads._data import check_image_folder, image_folder, write_image_folder, write_once

_REPORT = "a user's DataLoader Performance Optimization Guide"
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


def _classification_loss(out: Any, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of a classifier's training-mode output: one ``(B, classes)`` tensor, or a
    tuple ``(logits, *aux_logits)`` as Inception-v3 (``InceptionOutputs``) and GoogLeNet
    (``GoogLeNetOutputs``) return in train mode with their auxiliary heads on, each aux head
    weighted ``_AUX_LOSS_WEIGHT`` (an absent head, None, is left out)."""
    if isinstance(out, tuple):
        logits, *aux = out
        loss = F.cross_entropy(logits, labels)
        for extra in aux:
            if extra is not None:
                loss = loss + _AUX_LOSS_WEIGHT * F.cross_entropy(extra, labels)
        return loss
    return F.cross_entropy(out, labels)


def _as_label(target: int) -> torch.Tensor:
    """ImageFolder class index -> int64 scalar tensor (a module-level function, so the dataset
    pickles into DataLoader workers)."""
    return torch.tensor(target, dtype=torch.int64)


def cache_px(input_px: int, first_image: str) -> int:
    """Side of the decoded images a cache holds: twice the network input (the smallest crop,
    half the area at a 3:4 ratio, still spans more pixels than the input), but no larger than
    the first image's longer side (upsampling adds no detail), and never below the input."""
    from torchvision.io import decode_image, read_file
    _, h, w = decode_image(read_file(first_image)).shape
    return max(input_px, min(2 * input_px, max(h, w)))


class _DecodeResize:
    """uint8 ``(3, H, W)`` -> (uint8 ``(3, side, side)``, int64 ``(2,)`` [H, W])."""

    def __init__(self, side: int):
        self.side = side

    def __call__(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        resized = v2.functional.resize(image, [self.side, self.side], antialias=True)
        return resized, torch.tensor(image.shape[1:], dtype=torch.int64)


class _Decoded(Dataset):
    """An ImageFolder of ``_DecodeResize`` items as flat tuples: (image, [H, W], label)."""

    def __init__(self, folder: Dataset):
        self.folder = folder

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        (image, hw), label = self.folder[index]
        return image, hw, torch.tensor(label, dtype=torch.int64)


class _AugmentBatch:
    """The classifiers' random part on a batch of decoded samples (``_Decoded`` stacked):
    ``transform``'s RandomResizedCrop, RandomHorizontalFlip and ColorJitter with parameters
    drawn per sample, then ToDtype and Normalize -> (float32 ``(B, 3, S, S)``, int64 ``(B,)``)."""

    def __init__(self, size: int, crop_scale: tuple[float, float]):
        self.size, self.crop_scale = size, crop_scale

    def __call__(self, batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        from tuner.workloads import _augment as aug
        images, hw, labels = batch
        boxes = aug.random_resized_crop_boxes(hw, self.crop_scale)
        x = aug.resized_crop(images, boxes, self.size) / 255.0
        x = aug.random_horizontal_flip(x)
        x = aug.color_jitter(x, brightness=0.2, contrast=0.2, saturation=0.2)
        return aug.normalize(x, _MEAN, _STD), labels


class _AugmentOne:
    """The classifiers' random part on one decoded sample, in a DataLoader worker (the
    ``cache`` path): the crop box drawn against the image's own size as ``_AugmentBatch``
    draws it, then torchvision's per-sample transforms, as ``transform`` -> (float32
    ``(3, S, S)``, int64 ``()``)."""

    def __init__(self, size: int, crop_scale: tuple[float, float]):
        self.size, self.crop_scale = size, crop_scale
        self.rest = v2.Compose([
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=_MEAN, std=_STD),
        ])

    def __call__(self, sample: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        from tuner.workloads._augment import random_resized_crop_one
        image, hw, label = sample
        crop = random_resized_crop_one(image, hw, self.crop_scale, (3 / 4, 4 / 3), self.size)
        return self.rest(crop), label


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
    default_classes: ClassVar[int] = 4
    """Class folders of the default dataset (at most ``num_classes``)."""
    crop_scale: ClassVar[tuple[float, float]] = (0.5, 1.0)
    """RandomResizedCrop area range (fraction of the source image)."""
    option_names = ("model", "image_size")

    def configure(self, *, model: str | None = None, image_size: int | None = None) -> Workload:
        """``--model NAME [--image-size PX]``: a ``NamedClassifier`` on this workload's data
        pipeline, search space and references (``tuner.workload_loader.configured`` calls it).

        Raises:
            TunerError: ``image_size`` without ``model`` (the built-in models' inputs are
                fixed), an unknown model name, timm missing for ``timm:NAME``, or a model that
                does not run at ``image_size`` px.
        """
        if model is None:
            raise TunerError(
                f"{option_flag('image_size')} {image_size}: the built-in {self.name} model's "
                f"input is fixed at {self.input_px['full']} px; give {option_flag('model')} "
                f"NAME with it (e.g. --model resnet18 --image-size {image_size})")
        return NamedClassifier(self, model, image_size)

    def data_name(self) -> str:
        """The default dataset's folder name in the cache (before ``-v<version>-<scale>``)."""
        return self.name

    def transform(self, scale: str) -> v2.Compose:
        """The per-sample CPU pipeline: uint8 ``(3, H, W)`` -> float32 ``(3, S, S)`` normalised."""
        scale = check_scale(scale)
        size = self.input_px[scale]
        return v2.Compose([
            v2.RandomResizedCrop(size, scale=self.crop_scale, antialias=True),  # (3, S, S) uint8
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2),
            v2.ToDtype(torch.float32, scale=True),  # [0, 255] -> [0, 1]
            v2.Normalize(mean=_MEAN, std=_STD),
        ])

    def sample_path(self, data_dir: Path, scale: str) -> SamplePath:
        """Decoded: each image resized to ``cache_px`` x ``cache_px`` (its height and width
        kept beside it), uint8; random: ``transform``'s crop (its box drawn against the image's
        own size, so areas and aspect ratios are distributed as on the full image), flip and
        colour jitter per sample (``tuner.workloads._augment``), then normalised. Items as
        ``build_dataset``'s: float32 ``(3, S, S)`` and int64 ``()``.

        Raises:
            DataError: as ``build_dataset``.
        """
        scale = check_scale(scale)
        folder = self.build_dataset(data_dir, scale)
        side = cache_px(self.input_px[scale], folder.samples[0][0])
        decoded = _Decoded(image_folder(Path(data_dir), _DecodeResize(side)))
        args = (self.input_px[scale], self.crop_scale)
        batch = _AugmentBatch(*args)
        return SamplePath(decoded=decoded, augment=_AugmentOne(*args), augment_batch=batch)

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
        """Write ``default_classes`` folders of deterministic synthetic JPEGs (smooth blobs plus
        noise, quality 90) under ``cache_dir/<name>-v<version>-<scale>``; returns that path.

        The report's real dataset is not public (its size and class count are not given); this
        one keeps what the DataLoader knobs see: JPEG files a little larger than the fixed
        input, decoded and augmented per sample.
        """
        scale = check_scale(scale)
        side = self.source_px[scale]
        counts = {f"class_{i}": self.images_per_class[scale] for i in range(self.default_classes)}
        target = Path(cache_dir) / f"{self.data_name()}-v{_DATA_VERSION}-{scale}"
        return write_once(target, lambda root: write_image_folder(
            root, counts, size=(side, side), seed=_DATA_VERSION, fmt="jpg"))

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        scale = check_scale(scale)
        size = self.input_px[scale]
        return {"image": [3, size, size], "label": []}


class Classifier(_ImageFolderClassifier):
    """ResNet-18 (CIFAR-style stem) on 40x40 crops of 48x48 JPEGs.

    Scales:
        full: torchvision resnet18, conv1 -> 3x3 stride 1, maxpool -> Identity; 11.17 M
            parameters with 4 classes. Default data: 4 x 200 JPEGs of 48x48.
        tiny: the same network with one BasicBlock per stage (ResNet-10 layout); 4.90 M
            parameters. Default data: 4 x 16 JPEGs of 44x44. Input stays 40x40.
    """

    name = "classifier"
    description = "ResNet-18 (CIFAR stem) on 40x40 crops of an ImageFolder of JPEGs"
    source = f"{_REPORT} (train.py, 40x40 input; RTX 5070 12 GB, i7-8700K)"
    references = _REFERENCES
    # first step under torch.compile, full scale, one H100 (docs/benchmarks.md)
    compile_s_hint = 21.0
    space = "classifier"
    input_px = {"full": 40, "tiny": 40}
    source_px = {"full": 48, "tiny": 44}
    images_per_class = {"full": 200, "tiny": 16}

    def build_model(self, scale: str) -> nn.Module:
        scale = check_scale(scale)
        if scale == "full":
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
        full: torchvision inception_v3(weights=None, aux_logits=True, init_weights=True);
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
    input_px = {"full": 299, "tiny": 75}
    source_px = {"full": 320, "tiny": 84}
    images_per_class = {"full": 80, "tiny": 8}

    def build_model(self, scale: str) -> nn.Module:
        scale = check_scale(scale)
        return inception_v3(weights=None, aux_logits=(scale == "full"), init_weights=True,
                            num_classes=self.num_classes)

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        images, labels = batch  # (B, 3, S, S) float32, (B,) int64
        # In train mode with aux_logits on, Inception-v3 returns InceptionOutputs(logits,
        # aux_logits), a NamedTuple of two (B, num_classes) tensors; otherwise one tensor.
        return _classification_loss(model(images), labels)


TIMM_PREFIX = "timm:"
"""``--model timm:NAME`` names a timm architecture (``timm.create_model``)."""

LIST_TORCHVISION = 'python -c "import torchvision.models as m; print(*m.list_models(module=m))"'
"""The command that prints the torchvision names ``--model`` accepts."""

LIST_TIMM = 'python -c "import timm; print(*timm.list_models())"'
"""The command that prints the timm names ``--model timm:NAME`` accepts."""


@dataclass(frozen=True)
class Architecture:
    """A classification architecture found by name (``find_architecture``)."""

    library: str
    """'torchvision' or 'timm'."""
    name: str
    """The library's own name, e.g. 'resnet50'."""
    default_px: int
    """Input side, pixels, its pretrained weights were evaluated at (torchvision's
    ``weights.transforms`` crop_size, timm's ``pretrained_cfg.input_size``; 224 when none)."""
    min_px: int | None = None
    """Smallest input side its weights document (torchvision ``meta['min_size']``); None:
    not documented."""

    @property
    def spec(self) -> str:
        """As given to ``--model``: 'resnet50', 'timm:resnet50'."""
        return f"{TIMM_PREFIX}{self.name}" if self.library == "timm" else self.name

    @property
    def label(self) -> str:
        """As it appears in the workload name: 'resnet50', 'timm-resnet50' (no ':', which
        would read as an import path)."""
        return f"timm-{self.name}" if self.library == "timm" else self.name

    def build(self, image_px: int, num_classes: int) -> nn.Module:
        """The model with random weights (weights=None / pretrained=False) and ``num_classes``
        outputs, for square inputs of ``image_px`` pixels, on the current default device."""
        if self.library == "timm":
            import timm
            try:  # transformers size their position embeddings to the input
                return timm.create_model(self.name, pretrained=False, num_classes=num_classes,
                                         img_size=image_px)
            except TypeError:  # a model without an img_size argument (a CNN)
                return timm.create_model(self.name, pretrained=False, num_classes=num_classes)
        kwargs: dict[str, Any] = {}
        if self.name.startswith("vit_"):  # the position embedding is sized to the input
            kwargs["image_size"] = image_px
        elif self.name.startswith("maxvit_"):  # its relative-position tables likewise
            kwargs["input_size"] = (image_px, image_px)
        elif self.name in ("inception_v3", "googlenet"):
            kwargs["init_weights"] = True  # torchvision's init (unset, it warns on every build)
            if self.name == "inception_v3" and image_px < 299:
                # Its aux head (5x5 conv on the 17x17 Mixed_6e map) needs 299 px or more.
                kwargs["aux_logits"] = False
        return torchvision.models.get_model(self.name, weights=None, num_classes=num_classes,
                                            **kwargs)


def find_architecture(model: str) -> Architecture:
    """The architecture ``--model`` names: any ``torchvision.models`` classification model
    (``list_models(module=torchvision.models)``, case-insensitive), or ``timm:NAME``.

    Raises:
        TunerError: an unknown name (one line with close matches and the command that lists
            the accepted names), or ``timm:NAME`` without timm installed.
    """
    if model.startswith(TIMM_PREFIX):
        return _timm_architecture(model)
    names = torchvision.models.list_models(module=torchvision.models)
    name = model.strip().lower()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise TunerError(f"--model {model!r}: not a torchvision classification model{hint}; "
                         f"list the accepted names with: {LIST_TORCHVISION} (timm models: "
                         f"{TIMM_PREFIX}NAME)")
    try:
        weights = torchvision.models.get_model_weights(name).DEFAULT
        crop = int(weights.transforms.keywords.get("crop_size", 224))
        min_size = weights.meta.get("min_size")
    except (ValueError, KeyError, AttributeError):  # no pretrained weights to read them from
        return Architecture("torchvision", name, 224)
    return Architecture("torchvision", name, crop, max(min_size) if min_size else None)


def _timm_architecture(model: str) -> Architecture:
    name = model[len(TIMM_PREFIX):].strip()
    try:
        import timm
    except ImportError:
        raise TunerError(f"--model {model!r}: timm models need timm, which is not installed: "
                         f"pip install timm (torchvision names need nothing: "
                         f"{LIST_TORCHVISION})") from None
    if not name or not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f" (did you mean {', '.join(TIMM_PREFIX + c for c in close)}?)" if close else ""
        raise TunerError(f"--model {model!r}: not a timm model{hint}; list the accepted names "
                         f"with: {LIST_TIMM}")
    cfg = timm.get_pretrained_cfg(name)
    size = getattr(cfg, "input_size", None) if cfg is not None else None
    return Architecture("timm", name, int(size[-1]) if size else 224)


def _checked_parameter_count(arch: Architecture, image_px: int, num_classes: int) -> int:
    """Parameters of ``arch`` built for ``image_px`` inputs, after one training-mode forward
    of a ``(2, 3, image_px, image_px)`` batch shows it runs at that size. Built on the ``meta``
    device (shapes only: no memory, no init cost), on CPU for a constructor that computes on
    tensor values (torchvision's RegNets).

    Raises:
        TunerError: the model does not run on ``image_px`` inputs (one line with the reason).
    """
    try:
        with torch.device("meta"):
            model = arch.build(image_px, num_classes)
    except (NotImplementedError, RuntimeError):  # "Cannot copy out of meta tensor"
        model = arch.build(image_px, num_classes)
    device = next(model.parameters()).device
    model.train()
    try:
        with torch.no_grad():
            model(torch.zeros(2, 3, image_px, image_px, device=device))
    except Exception as exc:  # whatever the model raises at this size becomes one line
        reason = " ".join(str(exc).split())[:200]
        floor = (f"; its weights document inputs of at least {arch.min_px} px"
                 if arch.min_px and image_px < arch.min_px else "")
        raise TunerError(f"--model {arch.spec} --image-size {image_px}: the model does not run "
                         f"on {image_px}x{image_px} inputs ({type(exc).__name__}: {reason})"
                         f"{floor}; its default is {arch.default_px} px") from None
    return sum(p.numel() for p in model.parameters())


class NamedClassifier(_ImageFolderClassifier):
    """A classification architecture chosen by name (``--model``) at ``--image-size`` px, on
    the data pipeline, search space and reference configurations of the built-in workload it
    is configured from (``classifier`` or ``classifier299``; ``configure`` makes it).

    * Model: ``Architecture.build``, random weights (throughput does not depend on their
      values), ``num_classes`` = 1000 outputs as published, so the parameter count is the
      library's own (25,557,032 for resnet50) and a data folder of up to 1000 classes is
      accepted. Auxiliary heads (Inception-v3, GoogLeNet) train as torchvision's recipe does
      (Inception-v3's only from 299 px: below, its aux head cannot run and is off).
    * Input: ``image_px`` square crops at every scale (the size asked for; ``tiny`` shrinks
      only the default dataset). Default ``image_px``: ``Architecture.default_px``.
    * Default data: 4 class folders of ``image_px * 9 // 8`` px JPEGs, 200 per class at full
      and 16 at tiny, cached per size and shared by every model.
    * Name: '<base>-<model>-<px>px', e.g. 'classifier-resnet50-224px' ('timm:NAME' gives
      'timm-NAME'): the leaderboard's workload column, so rows of different models or sizes
      are never ranked together; the read commands take it as ``--workload``.

    Raises (on construction): TunerError from ``find_architecture`` and
    ``_checked_parameter_count``.
    """

    num_classes: ClassVar[int] = 1000
    option_names = ()

    def __init__(self, base: _ImageFolderClassifier, model: str, image_px: int | None):
        arch = find_architecture(model)
        size = image_px or arch.default_px
        self.architecture = arch
        self.image_px = size
        self.name = f"{base.name}-{arch.label}-{size}px"
        self.description = (f"{arch.library} {arch.name} (random init, {self.num_classes} "
                            f"classes) on {size}x{size} crops of an ImageFolder of JPEGs")
        self.source = f"--model {arch.spec} --image-size {size} on {base.name} ({base.source})"
        self.references = base.references
        self.space = base.space_name
        self.input_px = dict.fromkeys(SCALES, size)
        self.source_px = dict.fromkeys(SCALES, size + size // 8)
        self.images_per_class = {"full": 200, "tiny": 16}
        self.parameters_total = _checked_parameter_count(arch, size, self.num_classes)

    def data_name(self) -> str:
        return f"classifier-images-{self.source_px['full']}px"

    def parameter_count(self, scale: str) -> int:
        """The same at every scale (the model is the one asked for); counted on construction."""
        scale = check_scale(scale)
        return self.parameters_total

    def build_model(self, scale: str) -> nn.Module:
        scale = check_scale(scale)
        return self.architecture.build(self.image_px, self.num_classes)

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        images, labels = batch  # (B, 3, S, S) float32, (B,) int64
        return _classification_loss(model(images), labels)  # logits (B, 1000) [+ aux heads]


workload = Classifier()

workload299 = Classifier299()
