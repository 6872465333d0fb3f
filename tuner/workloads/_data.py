"""Shared data helpers for built-in workloads: write-once cache directories, deterministic
synthetic image folders, and an ImageFolder whose decode errors name the file. The ones meant
for your own workloads are exported, documented, by ``tuner.workloads.datasets``."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
from PIL import Image

from tuner.errors import DataError

if TYPE_CHECKING:  # annotations only: torchvision loads where it is used
    import torchvision

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")


def write_once(target: Path, writer: Callable[[Path], None]) -> Path:
    """Create ``target`` by calling ``writer(tmp_dir)`` and renaming, unless it exists.

    The rename is atomic, so concurrent callers and crashes never leave a half-written
    dataset at ``target``; a loser of the race discards its copy.
    """
    target = Path(target)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        writer(tmp)
        os.replace(tmp, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def synthetic_images(n: int, size: tuple[int, int], seed: int, label: int = 0) -> np.ndarray:
    """``n`` deterministic RGB images, uint8 ``(n, H, W, 3)``: smooth blobs plus noise, so that
    PNG/JPEG encoding and decoding cost what they cost on natural images (not on flat colour)."""
    rng = np.random.default_rng(seed)
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty((n, h, w, 3), dtype=np.uint8)
    for i in range(n):
        img = np.zeros((h, w, 3), dtype=np.float32)
        for _ in range(4 + label):
            cy, cx = rng.uniform(0, h), rng.uniform(0, w)
            r = rng.uniform(0.1, 0.4) * min(h, w)
            colour = rng.uniform(0, 255, size=3)
            blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
            img += blob[..., None] * colour
        img += rng.normal(0, 12, size=img.shape)
        out[i] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def write_image_folder(root: Path, counts: dict[str, int], size: tuple[int, int], seed: int,
                       fmt: str = "png") -> None:
    """Write an ImageFolder layout ``root/<class>/<i>.<fmt>`` with ``counts[class]`` images."""
    for label, (cls, n) in enumerate(sorted(counts.items())):
        d = root / cls
        d.mkdir(parents=True, exist_ok=True)
        images = synthetic_images(n, size, seed=seed * 1000 + label, label=label)
        for i, img in enumerate(images):
            # Pillow encodes (H, W, 3) directly; torchvision's encoders first copy to CHW, which
            # was 20x slower on a loaded 2-core machine (same libpng/libjpeg output).
            image = Image.fromarray(np.ascontiguousarray(img))
            if fmt == "png":
                image.save(d / f"{i:06d}.png")
            else:
                image.save(d / f"{i:06d}.jpg", quality=90)


def read_image(path: str | Path) -> torch.Tensor:
    """Decode an image file to uint8 ``(3, H, W)``. Raises DataError naming the file."""
    # torchvision is imported where it is used: writing or checking data does not need it (an
    # import that costs 2-3 s, torch._dynamo included, in every trial process).
    from torchvision.io import ImageReadMode, decode_image, read_file
    try:
        data = read_file(str(path))
        return decode_image(data, mode=ImageReadMode.RGB)
    except (RuntimeError, OSError, ValueError) as exc:
        raise DataError(f"image {path} cannot be decoded: {exc}") from None


def image_folder(data_dir: Path, transform: Callable) -> "torchvision.datasets.ImageFolder":
    """torchvision's ImageFolder over ``data_dir`` decoding with ``read_image``.

    Raises:
        DataError: the directory is missing or holds no class folder with images.
    """
    import torchvision
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"data directory {data_dir} does not exist")
    try:
        return torchvision.datasets.ImageFolder(
            str(data_dir), transform=transform, loader=read_image,
            is_valid_file=lambda p: p.lower().endswith(IMAGE_EXTENSIONS))
    except FileNotFoundError as exc:
        raise DataError(
            f"data directory {data_dir} holds no images in class folders "
            f"(expected {data_dir}/<class>/<image>{'|'.join(IMAGE_EXTENSIONS)}): {exc}") from None


def verify_images(paths: list[str]) -> None:
    """Decode every file fully with Pillow (quiet, unlike libpng's own stderr line); raise
    DataError naming the first that fails. Used before a run."""
    for p in paths:
        try:
            with Image.open(p) as image:
                image.load()
        except (OSError, ValueError, SyntaxError) as exc:  # PIL raises these for bad data
            raise DataError(f"image {p} cannot be decoded: {exc}") from None


def check_image_folder(dataset: "torchvision.datasets.ImageFolder") -> int:
    """Decode every image of an ImageFolder before the run starts; returns the image count.

    Raises:
        DataError: naming the first file that fails to decode.
    """
    verify_images([path for path, _ in dataset.samples])
    return len(dataset)
