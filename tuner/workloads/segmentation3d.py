"""3D U-Net segmentation trained on random patches cropped from large on-disk volumes.

Source: a user's "Training Performance Analysis & Optimization Plan" (A100 80 GB, 12 vCPUs,
170 GB RAM): a 3D segmentation job trained on 72x136x136 patches at batch size 1 with one
DataLoader worker, ~18 s per step, the GPU idle while the single worker loads the next patch.

Model: a 4-level 3D U-Net (3 down-samplings), each level a double conv block
(Conv3d 3x3x3 -> InstanceNorm3d -> ReLU) x 2, max-pool down, transposed-conv up, skip connections
by concatenation, a 1x1x1 head to ``NUM_CLASSES`` classes. Base width 32 channels at ``full``
(32, 64, 128, 256; 5,601,187 parameters), 4 at ``tiny``. InstanceNorm rather than BatchNorm so
that batch size 1 (the report's baseline) trains as well as batch size 4. The report names neither
the network nor its parameter count; it reports 77 GB of 80 GB in use at batch size 1, far more
than this network's activations need at that patch size, so expect larger batches to fit here.
Loss: cross-entropy + soft Dice (foreground classes, per sample).

Data layout for ``--data DIR``::

    DIR/images/<case>.npy | <case>.nii | <case>.nii.gz   one 3-D image volume per case
    DIR/labels/<case>.<same extension>                   its class map: same shape, integer
                                                         values 0..NUM_CLASSES-1

Every image needs a label of the same case name and extension; other files are ignored.
``.npy`` volumes are (D, H, W) as stored, any integer or float dtype, and are read through
``np.load(mmap_mode="r")``: a sample reads only its patch, so a worker's resident memory stays
at a few patches whatever the volume size (the report saw ~7 GB RSS per worker). NIfTI volumes
(read with nibabel, stored (X, Y, Z)) are converted once to memory-mappable ``.npy`` in
(Z, Y, X) = (D, H, W) order, as nnU-Net-style pipelines do, under
``tuner.workload.default_cache_dir() / "segmentation3d-npy-v1"``, keyed by the source path,
modification time and size (a changed file is converted again).

One sample: a patch at a random position of one volume (torch's RNG, which DataLoader seeds per
worker), mirrored at random along each axis, the image z-scored over the patch:
image ``(1, D, H, W)`` float32 and label ``(D, H, W)`` int64. A volume smaller than the patch
along an axis is zero-padded (label 0, background). An epoch is ``PATCHES_PER_VOLUME`` patches
per volume (item ``i`` reads volume ``i % n_volumes``). For the ``cache`` and ``device``
data paths (``tuner.data``), ``sample_path`` splits this into the volumes read whole
(``DecodedVolumes``) and the patch drawn per sample (``tuner.workloads._patches``).
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from tuner.data import SamplePath
from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.settings import check_scale
from tuner.workload import Workload, default_cache_dir
from tuner.workloads._data import write_once
from tuner.workloads._patches import AugmentVolume, AugmentVolumeBatch, random_patch

NUM_CLASSES = 3
"""Background, class 1, class 2."""
LEVELS = 4
"""U-Net resolution levels: 3 down-samplings, so patch sides must be divisible by 8."""
PATCHES_PER_VOLUME = 64
"""Patches per volume per epoch (an epoch of the default full-scale data: 256 patches)."""
VOLUME_SUFFIXES = (".nii.gz", ".nii", ".npy")
"""Accepted volume file extensions (longest first, so '.nii.gz' is not read as '.gz')."""
NPY_CACHE = "segmentation3d-npy-v1"
"""Folder under the tuner cache holding NIfTI volumes converted to .npy."""
DATA_VERSION = 1
"""Version of the embedded default data; bump it when the generator changes."""

_EXPECTED_LAYOUT = ("DIR/images/<case>.npy|.nii|.nii.gz with DIR/labels/<case>.<same extension>")


@dataclass(frozen=True)
class _ScaleConfig:
    patch: tuple[int, int, int]
    """Patch (D, H, W) in voxels."""
    base_channels: int
    """U-Net channels at full resolution."""
    default_volume: tuple[int, int, int]
    """Shape (D, H, W) of each synthetic default volume."""
    default_volumes: int
    """Number of synthetic default volume pairs."""


_CONFIGS = {
    # Report: "patch_size: [72, 136, 136] (1.3M voxels per patch)".
    "full": _ScaleConfig(patch=(72, 136, 136), base_channels=32,
                         default_volume=(96, 192, 192), default_volumes=4),
    "tiny": _ScaleConfig(patch=(16, 32, 32), base_channels=4,
                         default_volume=(32, 64, 64), default_volumes=3),
}


def _config(scale: str) -> _ScaleConfig:
    """The sizes at ``scale`` (``tuner.settings.check_scale``: raises ValueError)."""
    return _CONFIGS[check_scale(scale)]


# --------------------------------------------------------------------------------------- model


class DoubleConv(nn.Sequential):
    """(Conv3d 3x3x3 -> InstanceNorm3d -> ReLU) x 2: (B, C_in, D, H, W) -> (B, C_out, D, H, W)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(
            nn.Conv3d(in_channels, out_channels, 3, padding=1, bias=False),
            nn.InstanceNorm3d(out_channels, affine=True),
            nn.ReLU(inplace=True),
            nn.Conv3d(out_channels, out_channels, 3, padding=1, bias=False),
            nn.InstanceNorm3d(out_channels, affine=True),
            nn.ReLU(inplace=True),
        )


class UNet3d(nn.Module):
    """3D U-Net: (B, in_channels, D, H, W) -> logits (B, num_classes, D, H, W).

    D, H and W must be divisible by 2 ** (levels - 1). Widths double at each level:
    base_channels * (1, 2, 4, ...).
    """

    def __init__(self, in_channels: int = 1, num_classes: int = NUM_CLASSES,
                 base_channels: int = 32, levels: int = LEVELS) -> None:
        super().__init__()
        widths = [base_channels * 2 ** i for i in range(levels)]
        self.divisor = 2 ** (levels - 1)
        self.encoders = nn.ModuleList(
            DoubleConv(c_in, c_out) for c_in, c_out in zip([in_channels] + widths[:-1], widths))
        self.pool = nn.MaxPool3d(2)
        self.ups = nn.ModuleList(
            nn.ConvTranspose3d(widths[i + 1], widths[i], 2, stride=2)
            for i in reversed(range(levels - 1)))
        self.decoders = nn.ModuleList(
            DoubleConv(2 * widths[i], widths[i]) for i in reversed(range(levels - 1)))
        self.head = nn.Conv3d(widths[0], num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if any(side % self.divisor for side in x.shape[2:]):
            raise ValueError(f"UNet3d input {tuple(x.shape)}: D, H and W must be divisible by "
                             f"{self.divisor}")
        skips = []
        for level, encoder in enumerate(self.encoders):
            if level:
                x = self.pool(x)  # (B, C, D, H, W) -> (B, C, D/2, H/2, W/2)
            x = encoder(x)
            skips.append(x)
        skips.pop()  # the bottleneck output is x itself
        for up, decoder in zip(self.ups, self.decoders):
            x = decoder(torch.cat([up(x), skips.pop()], dim=1))  # (B, 2C, ...) -> (B, C, ...)
        return self.head(x)  # (B, num_classes, D, H, W)


def soft_dice_loss(logits: torch.Tensor, labels: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """1 - soft Dice, averaged over samples and foreground classes (class 0 is background).

    Args:
        logits: (B, C, D, H, W), any float dtype (computed in float32).
        labels: (B, D, H, W) int64 in 0..C-1.
        eps: smoothing: a class absent from both prediction and label scores Dice 1.
    """
    probs = logits.float().softmax(dim=1)  # (B, C, D, H, W)
    onehot = F.one_hot(labels, probs.shape[1]).permute(0, 4, 1, 2, 3).to(probs.dtype)
    dims = (2, 3, 4)
    intersection = (probs * onehot).sum(dims)  # (B, C)
    total = probs.sum(dims) + onehot.sum(dims)  # (B, C)
    dice = (2 * intersection + eps) / (total + eps)  # (B, C)
    return 1 - dice[:, 1:].mean()


# ---------------------------------------------------------------------------------------- data


def _split_suffix(path: Path) -> tuple[str, str] | None:
    """('case', '.nii.gz') for 'case.nii.gz'; None for a file that is not a volume."""
    name = path.name
    for suffix in VOLUME_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], name[-len(suffix):]
    return None


def find_pairs(data_dir: Path) -> list[tuple[Path, Path]]:
    """(image, label) paths of every case under ``data_dir``, sorted by case name.

    Raises:
        DataError: the directory or ``images/`` is missing, holds no volume, or an image has no
            label file.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"data directory {data_dir} does not exist (expected {_EXPECTED_LAYOUT})")
    images_dir, labels_dir = data_dir / "images", data_dir / "labels"
    images = sorted(p for p in images_dir.glob("*")
                    if p.is_file() and not p.name.startswith(".") and _split_suffix(p))
    if not images:
        raise DataError(f"data directory {data_dir} holds no volumes in {images_dir} "
                        f"(expected {_EXPECTED_LAYOUT})")
    pairs = []
    for image in images:
        label = labels_dir / image.name
        if not label.is_file():
            raise DataError(f"image {image} has no label volume {label} "
                            f"(expected {_EXPECTED_LAYOUT})")
        pairs.append((image, label))
    return pairs


def open_volume(path: Path) -> np.ndarray:
    """A 3-D ``.npy`` volume as a read-only memory map (reads only the header now).

    Raises:
        DataError: naming ``path``: not a readable .npy file, truncated, not 3-D, not numeric.
    """
    try:
        volume = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"volume {path} cannot be read as a .npy array: {exc}") from None
    if volume.ndim != 3 or volume.dtype.kind not in "biuf":
        raise DataError(f"volume {path}: expected a 3-D numeric array (D, H, W), "
                        f"found shape {volume.shape} dtype {volume.dtype}")
    return volume


def _read_nifti(path: Path, is_label: bool, num_classes: int = NUM_CLASSES) -> np.ndarray:
    """A NIfTI volume decoded in (Z, Y, X) = (D, H, W) order; labels as uint8.

    Raises:
        DataError: naming ``path``: undecodable, not 3-D, or label values not integers in
            0..num_classes-1.
    """
    import nibabel  # only NIfTI data needs it

    try:
        data = np.asanyarray(nibabel.load(str(path)).dataobj)  # (X, Y, Z)
    except (nibabel.filebasedimages.ImageFileError, OSError, EOFError, ValueError,
            zlib.error) as exc:
        raise DataError(f"volume {path} cannot be decoded as NIfTI: {exc}") from None
    if data.ndim != 3 or data.dtype.kind not in "biuf":
        raise DataError(f"volume {path}: expected a 3-D numeric volume, found shape {data.shape} "
                        f"dtype {data.dtype}")
    data = np.ascontiguousarray(data.T)  # (X, Y, Z) -> (Z, Y, X) = (D, H, W)
    if is_label:
        if (not np.array_equal(np.rint(data), data)) or data.min() < 0 or data.max() >= num_classes:
            raise DataError(f"label volume {path}: values must be integers in "
                            f"0..{num_classes - 1} (found {data.min()}..{data.max()})")
        return data.astype(np.uint8)
    return data.astype(np.float32) if data.dtype == np.float64 else data


def as_npy(path: Path, is_label: bool, num_classes: int = NUM_CLASSES) -> Path:
    """``path`` itself for a ``.npy`` file; for NIfTI, its ``.npy`` copy in the cache, written
    once (atomically, with ``write_once``) and reused while the source is unchanged.

    Raises:
        DataError: the NIfTI file cannot be decoded (see ``_read_nifti``).
    """
    path = Path(path)
    if path.name.lower().endswith(".npy"):
        return path
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_mtime_ns}|{stat.st_size}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    case, _ = _split_suffix(path)
    target = default_cache_dir() / NPY_CACHE / f"{case}-{digest}"

    def convert(tmp: Path) -> None:
        np.save(tmp / "volume.npy", _read_nifti(path, is_label, num_classes))

    return write_once(target, convert) / "volume.npy"


class VolumePatchDataset(Dataset):
    """Random patches of image/label volume pairs, read through memory maps.

    Item ``i``: a ``patch`` (D, H, W) at a random position of volume ``i % num_volumes``:
    image (1, D, H, W) float32, z-scored over the patch; label (D, H, W) int64. Memory maps are
    opened lazily in each process and never pickled (a pickled memmap would copy its volume).

    Raises (from ``__getitem__``):
        DataError: a label value outside 0..num_classes-1, naming the label file.
    """

    def __init__(self, pairs: list[tuple[str, str]], patch: tuple[int, int, int],
                 num_classes: int = NUM_CLASSES,
                 patches_per_volume: int = PATCHES_PER_VOLUME) -> None:
        self.pairs = [(str(image), str(label)) for image, label in pairs]
        self.patch = tuple(patch)
        self.num_classes = num_classes
        self.patches_per_volume = patches_per_volume
        self._open: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_open"] = {}  # workers open their own maps
        return state

    @property
    def num_volumes(self) -> int:
        return len(self.pairs)

    def __len__(self) -> int:
        return self.patches_per_volume * self.num_volumes

    def volumes(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The memory-mapped (image, label) of pair ``k``, each (D, H, W)."""
        if k not in self._open:
            image_path, label_path = self.pairs[k]
            self._open[k] = (open_volume(image_path), open_volume(label_path))
        return self._open[k]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} patches")
        k = index % self.num_volumes
        image, label = self.volumes(k)
        # torch's RNG: DataLoader gives every worker its own seed, epoch after epoch.
        return random_patch(image, label, self.patch, self.num_classes, self.pairs[k][1])


class DecodedVolumes(Dataset):
    """The deterministic part of the sample path (``Segmentation3dWorkload.sample_path``):
    the volume pairs of a ``VolumePatchDataset``, whole, one shape for all.

    Item ``i``, volume pair ``i % num_volumes``: image ``(D', H', W')`` in ``dtype``, label
    uint8 ``(D', H', W')``, and the volume's own shape, int64 ``(3,)``. Every volume sits at
    the low corner of ``shape`` = ``(D', H', W')``, the largest side of any volume or the
    patch along each axis, with zeros beyond it. The padding does not change the patches:
    ``tuner.workloads._patches`` draws each patch's start and mirroring against the volume's
    own shape, so a patch reads padding only where the volume is smaller than the patch, and
    there it is 0 as the ``loader`` path pads. Image values are kept exactly (``dtype`` holds
    every source dtype's values, or is float32 where the ``loader`` path's first step, the
    cast to float32, would round them anyway).

    ``len`` is the patch dataset's (``PATCHES_PER_VOLUME`` per volume), so an epoch of the
    ``cache`` and ``device`` paths has as many samples as the ``loader`` path's; items
    ``i`` and ``i + distinct`` are the same (``distinct`` = the volume pairs).

    Raises (from ``__getitem__``):
        DataError: a label value outside ``0 .. num_classes - 1`` anywhere in the volume,
            naming the label file.
    """

    def __init__(self, patches: VolumePatchDataset):
        self.patches = patches
        shapes, dtypes = [], []
        for k in range(patches.num_volumes):
            image, _ = patches.volumes(k)
            shapes.append(image.shape)
            dtypes.append(image.dtype)
        self.shape = tuple(max(max(s[axis] for s in shapes), p)
                           for axis, p in enumerate(patches.patch))
        self.np_dtype = storage_dtype(dtypes)
        self.dtype = torch.from_numpy(np.zeros(0, self.np_dtype)).dtype
        self.distinct = patches.num_volumes

    def __len__(self) -> int:
        return len(self.patches)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} samples")
        k = index % self.distinct
        image, label = self.patches.volumes(k)
        lab = np.asarray(label).astype(np.int64)  # as the loader path casts its window
        if lab.min() < 0 or lab.max() >= self.patches.num_classes:
            raise DataError(f"label volume {self.patches.pairs[k][1]}: values must be in "
                            f"0..{self.patches.num_classes - 1}, found {lab.min()}..{lab.max()}")
        window = tuple(slice(0, side) for side in image.shape)
        out_image = torch.zeros(self.shape, dtype=self.dtype)              # (D', H', W')
        out_image[window] = torch.from_numpy(np.array(image, dtype=self.np_dtype))
        out_label = torch.zeros(self.shape, dtype=torch.uint8)             # (D', H', W')
        out_label[window] = torch.from_numpy(lab.astype(np.uint8))
        return out_image, out_label, torch.tensor(image.shape, dtype=torch.int64)


_EXACT_DTYPES = {np.dtype(source): np.dtype(stored) for source, stored in (
    (np.bool_, np.uint8), (np.uint8, np.uint8), (np.int8, np.int8), (np.int16, np.int16),
    (np.uint16, np.int32), (np.int32, np.int32), (np.uint32, np.int64), (np.int64, np.int64),
    (np.float16, np.float16), (np.float32, np.float32))}
"""Source dtype -> a dtype torch supports that holds its every value."""


def storage_dtype(dtypes: list[np.dtype]) -> np.dtype:
    """The dtype that holds image volumes of ``dtypes`` in a cache: their common type when
    torch supports one that holds every value exactly, else float32 (float64, uint64: the
    ``loader`` path casts a patch to float32 first, so the values it sees are the same)."""
    return _EXACT_DTYPES.get(np.result_type(*dtypes), np.dtype(np.float32))


def build_pairs(data_dir: Path, num_classes: int = NUM_CLASSES) -> list[tuple[Path, Path]]:
    """``find_pairs`` with NIfTI converted to cached ``.npy`` (labels checked to lie in
    0..num_classes-1), every pair checked.

    Raises:
        DataError: see ``find_pairs``, ``open_volume``, ``as_npy``; an image and label of
            different shapes, naming both files.
    """
    pairs = []
    for image, label in find_pairs(data_dir):
        image_npy = as_npy(image, is_label=False)
        label_npy = as_npy(label, is_label=True, num_classes=num_classes)
        image_shape, label_shape = open_volume(image_npy).shape, open_volume(label_npy).shape
        if image_shape != label_shape:
            raise DataError(f"label volume {label} has shape {label_shape} but image {image} "
                            f"has shape {image_shape}; they must match")
        pairs.append((image_npy, label_npy))
    return pairs


# ------------------------------------------------------------------------------- default data


def synthetic_volume(shape: tuple[int, int, int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One deterministic (image int16, label uint8) pair of ``shape`` (D, H, W).

    Labels: random ellipsoids of class 1 and 2 on background 0. Image: a class-dependent
    intensity, a smooth background field and Gaussian noise, so the label is learnable.
    """
    rng = np.random.default_rng(seed)
    label = np.zeros(shape, dtype=np.uint8)  # (D, H, W)
    for _ in range(12):
        centre = [rng.uniform(0, side) for side in shape]
        radii = [rng.uniform(0.06, 0.16) * side for side in shape]
        lo = [max(int(c - r), 0) for c, r in zip(centre, radii)]
        hi = [min(int(c + r) + 1, side) for c, r, side in zip(centre, radii, shape)]
        grid = np.ogrid[tuple(slice(a, b) for a, b in zip(lo, hi))]
        inside = sum(((g - c) / r) ** 2 for g, c, r in zip(grid, centre, radii)) <= 1.0
        label[tuple(slice(a, b) for a, b in zip(lo, hi))][inside] = rng.integers(1, NUM_CLASSES)
    coarse = torch.from_numpy(rng.standard_normal(
        [1, 1] + [side // 16 + 2 for side in shape], dtype=np.float32))
    background = F.interpolate(coarse, size=shape, mode="trilinear", align_corners=False)[0, 0]
    class_mean = np.array([0.0, 400.0, -300.0], dtype=np.float32)
    image = (class_mean[label] + 150.0 * background.numpy()
             + rng.standard_normal(shape, dtype=np.float32) * 80.0)
    return np.clip(image, -32768, 32767).astype(np.int16), label


def write_synthetic_volumes(root: Path, count: int, shape: tuple[int, int, int],
                            seed: int) -> None:
    """Write ``root/images/case_<i>.npy`` and ``root/labels/case_<i>.npy`` for ``count`` cases."""
    for sub in ("images", "labels"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        image, label = synthetic_volume(shape, seed=seed * 1000 + i)
        np.save(root / "images" / f"case_{i:03d}.npy", image)
        np.save(root / "labels" / f"case_{i:03d}.npy", label)


# ------------------------------------------------------------------------------------ workload


class Segmentation3dWorkload(Workload):
    """3D U-Net, Dice + cross-entropy, on random patches of memory-mapped volumes."""

    name = "segmentation3d"
    description = ("3D U-Net (4 levels, InstanceNorm) on random 72x136x136 patches of large "
                   "memory-mapped image/label volumes; Dice + cross-entropy")
    source = ("a user's Training Performance Analysis & Optimization Plan (A100 80 GB, 12 vCPUs, "
              "170 GB RAM)")
    learning_rate = 3e-4
    references = {
        # "Current Configuration": batch_size 1, workers 1, prefetch_factor 1,
        # persistent_workers False.
        "baseline": Knobs(batch_size=1, num_workers=1, prefetch_factor=1,
                          persistent_workers=False),
        # "Step 4: Full Optimization": train_batch_size 4, workers 6, prefetch_factor=2,
        # persistent_workers=True.
        "recommended": Knobs(batch_size=4, num_workers=6, prefetch_factor=2,
                             persistent_workers=True),
    }

    def build_model(self, scale: str) -> nn.Module:
        return UNet3d(in_channels=1, num_classes=NUM_CLASSES,
                      base_channels=_config(scale).base_channels, levels=LEVELS)

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        """Patches of the volume pairs under ``data_dir`` (layout: module docstring).

        NIfTI volumes are converted to cached ``.npy`` here, once. Raises DataError naming the
        path: missing directory, no volumes, a missing label, an unreadable or mismatched file.
        """
        patch = _config(scale).patch
        return VolumePatchDataset(build_pairs(Path(data_dir)), patch)

    def sample_path(self, data_dir: Path, scale: str) -> SamplePath:
        """Decoded: each volume pair read whole, padded to one shape (``DecodedVolumes``: an
        item per patch of an epoch, the volumes' own dtypes, labels uint8); random: the patch
        at a random start mirrored at random along each axis and z-scored, per sample
        (``tuner.workloads._patches``: on the CPU the ``loader`` path's own code and draws; on
        a device one gather per batch). Items as ``build_dataset``'s: image float32
        ``(1, D, H, W)``, label int64 ``(D, H, W)``. A cache holds ``len(decoded)`` items of
        the padded shape's bytes (image dtype + 1 per voxel).

        Raises:
            DataError: as ``build_dataset``.
        """
        patch = _config(scale).patch
        decoded = DecodedVolumes(self.build_dataset(data_dir, scale))
        return SamplePath(decoded=decoded, augment=AugmentVolume(patch),
                          augment_batch=AugmentVolumeBatch(patch))

    def check_data(self, data_dir: Path, scale: str) -> int:
        """Every file's header and shapes (in ``build_dataset``), then one patch of every volume
        read through its memory map. Returns the patches per epoch. Raises DataError."""
        dataset = self.build_dataset(data_dir, scale)
        for k in range(dataset.num_volumes):
            dataset[k]
        return len(dataset)

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        """Synthetic volumes as ``.npy`` pairs: full, 4 cases of 96x192x192 (int16 image 7 MB,
        uint8 label 3.5 MB each); tiny, 3 cases of 32x64x64.

        The report's real volumes are not public; they are larger than the page cache allows
        to assume, whereas these stay in it after the first epoch, so the disk reads here are
        cheaper than in the report's job.
        """
        scale = check_scale(scale)
        config = _CONFIGS[scale]
        target = Path(cache_dir) / f"{self.name}-v{DATA_VERSION}-{scale}"
        writer = functools.partial(write_synthetic_volumes, count=config.default_volumes,
                                   shape=config.default_volume, seed=DATA_VERSION)
        return write_once(target, writer)

    def training_step(self, model: nn.Module, batch) -> torch.Tensor:
        images, labels = batch  # (B, 1, D, H, W) float32, (B, D, H, W) int64
        logits = model(images)  # (B, NUM_CLASSES, D, H, W)
        return F.cross_entropy(logits, labels) + soft_dice_loss(logits, labels)

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        patch = list(_config(scale).patch)
        return {"image": [1] + patch, "label": patch}

    def units_per_sample(self, scale: str) -> dict[str, int]:
        d, h, w = _config(scale).patch
        return {"voxels": d * h * w}


workload = Segmentation3dWorkload()
