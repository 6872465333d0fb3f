"""Random patches of 3-D volumes: the random part of segmentation3d's sample path, one patch at
a time on the CPU (the ``loader`` and ``cache`` paths) and a whole batch at a time on the
batch's device with an offset and mirroring drawn per sample (the ``device`` path).

One patch of a volume of shape ``(D, H, W)``, the patch ``(pd, ph, pw)``: along each axis a
start drawn uniformly from ``0 .. max(side - p, 0)``, the window ``start .. start + p``
(cut at the volume's end), each axis mirrored with probability 1/2, the image z-scored over
the window's voxels, then padded at the high end with 0 (image and label, background) up to
the patch where the volume is smaller than it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from tuner.errors import DataError

Z_SCORE_MIN_STD = 1e-6
"""Floor of the standard deviation a patch is divided by (a constant patch stays 0)."""


def random_patch(image: np.ndarray, label: np.ndarray, patch: Sequence[int],
                 num_classes: int, label_file: str | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One random patch (module docstring) of ``image`` and ``label``, both ``(D, H, W)``
    (numpy arrays or memory maps: only the window is read), drawn from torch's generator
    (DataLoader seeds it per worker): the start of each axis as ``torch.randint``, then the
    three mirror draws as ``torch.rand(3)``.

    Returns:
        image float32 ``(1, pd, ph, pw)``, label int64 ``(pd, ph, pw)``.

    Raises:
        DataError: a label value outside ``0 .. num_classes - 1`` in the window, naming
            ``label_file`` (None: the labels are known to be in range, not checked).
    """
    patch = tuple(patch)
    starts = [int(torch.randint(0, max(side - p, 0) + 1, ()))
              for side, p in zip(image.shape, patch)]
    window = tuple(slice(s, s + p) for s, p in zip(starts, patch))
    axes = tuple(int(a) for a in torch.nonzero(torch.rand(3) < 0.5).flatten())
    # One copy each: read the patch through the map, mirror, cast.
    img = np.ascontiguousarray(np.flip(image[window], axes), dtype=np.float32)  # (d, h, w)
    lab = np.ascontiguousarray(np.flip(label[window], axes), dtype=np.int64)  # (d, h, w)
    if label_file is not None and (lab.min() < 0 or lab.max() >= num_classes):
        raise DataError(f"label volume {label_file}: values must be in "
                        f"0..{num_classes - 1}, found {lab.min()}..{lab.max()}")
    img -= img.mean()
    img /= max(float(img.std()), Z_SCORE_MIN_STD)
    if img.shape != patch:  # volume smaller than the patch: pad with background
        pad = [(0, p - s) for s, p in zip(img.shape, patch)]
        img, lab = np.pad(img, pad), np.pad(lab, pad)
    return torch.from_numpy(img)[None], torch.from_numpy(lab)  # (1, D, H, W), (D, H, W)


class AugmentVolume:
    """The random part of one decoded sample on the CPU (the ``cache`` path, in DataLoader
    workers): ``(image (D', H', W'), label uint8 (D', H', W'), shape int64 (3,))``, the volume
    padded to ``(D', H', W')`` with its own shape beside it -> ``random_patch`` of the volume's
    own ``shape[0] x shape[1] x shape[2]`` voxels, the same draws in the same order as the
    ``loader`` path: image float32 ``(1, pd, ph, pw)``, label int64 ``(pd, ph, pw)``."""

    def __init__(self, patch: Sequence[int]):
        self.patch = tuple(patch)

    def __call__(self, sample: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        image, label, shape = sample
        d, h, w = (int(side) for side in shape)
        return random_patch(image.numpy()[:d, :h, :w], label.numpy()[:d, :h, :w], self.patch,
                            num_classes=0, label_file=None)


class AugmentVolumeBatch:
    """The random part of a batch of decoded samples on their device (the ``device`` path):
    ``(images (B, D', H', W'), labels uint8 (B, D', H', W'), shapes int64 (B, 3))`` ->
    images float32 ``(B, 1, pd, ph, pw)``, labels int64 ``(B, pd, ph, pw)``, as the default
    collate stacks ``AugmentVolume``'s items; starts and mirroring drawn per sample
    (``gather_patches``)."""

    def __init__(self, patch: Sequence[int]):
        self.patch = tuple(patch)

    def __call__(self, batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels, shapes = batch
        starts, mirror = draw_patches(shapes, self.patch)
        return gather_patches(images, labels, shapes, starts, mirror, self.patch)


def draw_patches(shapes: torch.Tensor, patch: Sequence[int]
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample random patch parameters for volumes of shapes ``shapes`` (int64 ``(B, 3)``)
    from torch's generator on their device: starts int64 ``(B, 3)``, each uniform on
    ``0 .. max(side - p, 0)`` as ``random_patch`` draws them, and mirror flags bool
    ``(B, 3)``, each true with probability 1/2."""
    device = shapes.device
    room = (shapes - torch.tensor(patch, device=device)).clamp(min=0)          # (B, 3)
    u = torch.rand(shapes.shape, device=device, dtype=torch.float64)
    starts = torch.floor(u * (room + 1).double()).long().minimum(room)        # (B, 3)
    mirror = torch.rand(shapes.shape, device=device) < 0.5                    # (B, 3)
    return starts, mirror


def gather_patches(images: torch.Tensor, labels: torch.Tensor, shapes: torch.Tensor,
                   starts: torch.Tensor, mirror: torch.Tensor, patch: Sequence[int]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The patches at ``starts`` ``(B, 3)``, mirrored along the axes ``mirror`` ``(B, 3)``
    flags, of volumes ``images`` and ``labels`` ``(B, D', H', W')`` (each volume's own
    shape ``shapes`` ``(B, 3)`` at the low corner, zeros beyond; D' >= pd and so on), in one
    advanced-indexing gather on their device; each image z-scored over its patch's voxels
    inside its volume, the voxels beyond it 0 (image and label), as ``random_patch`` pads.

    Returns:
        images float32 ``(B, 1, pd, ph, pw)``, labels int64 ``(B, pd, ph, pw)``.
    """
    b, device = images.shape[0], images.device
    index, inside = [], []
    for axis, p in enumerate(patch):
        j = torch.arange(p, device=device)[None]                               # (1, p)
        extent = torch.minimum(shapes[:, axis:axis + 1], torch.tensor(p, device=device))
        within = j < extent                                                     # (B, p)
        mirrored = torch.where(mirror[:, axis:axis + 1] & within, extent - 1 - j, j)
        index.append(starts[:, axis:axis + 1] + mirrored)                       # (B, p)
        inside.append(within)
    sample = torch.arange(b, device=device)[:, None, None, None]
    d, h, w = index[0][:, :, None, None], index[1][:, None, :, None], index[2][:, None, None, :]
    mask = inside[0][:, :, None, None] & inside[1][:, None, :, None] & inside[2][:, None, None, :]
    img = images[sample, d, h, w].float() * mask                                # (B, pd, ph, pw)
    count = mask.sum(dim=(1, 2, 3), keepdim=True)
    mean = img.sum(dim=(1, 2, 3), keepdim=True) / count
    centred = (img - mean) * mask
    std = (centred.square().sum(dim=(1, 2, 3), keepdim=True) / count).sqrt()
    img = centred / std.clamp(min=Z_SCORE_MIN_STD)
    lab = labels[sample, d, h, w].long() * mask
    return img[:, None], lab
