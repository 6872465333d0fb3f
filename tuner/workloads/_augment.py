"""Image augmentations on whole batches with random parameters drawn per sample, on the
batch's device: the random part of the built-ins' sample paths (``tuner.data.SamplePath``).

torchvision's v2 transforms applied to a batched tensor draw one set of parameters for the
whole batch (every image of a batch flipped together); these draw one per sample from torch's
generator on the batch's device and follow torchvision's definitions of each transform (the
source named on each function). The crop and resize is ``torchvision.ops.roi_align`` (one box
per sample; its adaptive sampling averages ``ceil(box / output)`` points per output pixel, as
an antialiased resize does). Each function takes and returns float images ``(B, C, H, W)``.
"""

from __future__ import annotations

import math

import torch
from torchvision.ops import roi_align

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
"""RGB -> luma weights of torchvision's ``rgb_to_grayscale`` (ITU-R 601-2)."""


def random_resized_crop_boxes(hw: torch.Tensor, scale: tuple[float, float],
                              ratio: tuple[float, float] = (3 / 4, 4 / 3),
                              tries: int = 10) -> torch.Tensor:
    """Per-sample crop boxes as torchvision's ``RandomResizedCrop.get_params`` draws them for
    images of heights and widths ``hw`` ``(B, 2)``: up to ``tries`` draws of an area share in
    ``scale`` and a log-uniform aspect ratio in ``ratio``, the first that fits, else the
    central crop at the nearest ratio. Returns ``(B, 4)`` float boxes ``(x0, y0, x1, y1)`` as
    fractions of each image's width and height."""
    device = hw.device
    h_img, w_img = hw[:, 0:1].double(), hw[:, 1:2].double()          # (B, 1)
    b = hw.shape[0]
    area = h_img * w_img * torch.empty(b, tries, device=device, dtype=torch.float64).uniform_(*scale)
    log_r = torch.empty(b, tries, device=device, dtype=torch.float64).uniform_(
        math.log(ratio[0]), math.log(ratio[1]))
    aspect = torch.exp(log_r)
    w = torch.round(torch.sqrt(area * aspect))
    h = torch.round(torch.sqrt(area / aspect))
    fits = (w > 0) & (h > 0) & (w <= w_img) & (h <= h_img)
    first = torch.argmax(fits.int(), dim=1, keepdim=True)               # first try that fits
    any_fits = fits.any(dim=1, keepdim=True)
    w, h = w.gather(1, first), h.gather(1, first)
    top = torch.floor(torch.rand(b, 1, device=device, dtype=torch.float64) * (h_img - h + 1))
    left = torch.floor(torch.rand(b, 1, device=device, dtype=torch.float64) * (w_img - w + 1))
    # fallback: the central crop, its ratio clamped into ``ratio``
    in_ratio = w_img / h_img
    fw = torch.where(in_ratio < ratio[0], w_img,
                     torch.where(in_ratio > ratio[1], torch.round(h_img * ratio[1]), w_img))
    fh = torch.where(in_ratio < ratio[0], torch.round(w_img / ratio[0]), h_img)
    w, h = torch.where(any_fits, w, fw), torch.where(any_fits, h, fh)
    top = torch.where(any_fits, top, torch.div(h_img - h, 2, rounding_mode="floor"))
    left = torch.where(any_fits, left, torch.div(w_img - w, 2, rounding_mode="floor"))
    return torch.cat([left / w_img, top / h_img, (left + w) / w_img, (top + h) / h_img],
                     dim=1).float()


def resized_crop(images: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Each image's box (``(B, 4)`` fractions ``x0, y0, x1, y1``) resized to ``size`` x
    ``size``: ``(B, C, H, W)`` -> float32 ``(B, C, size, size)``, bilinear with adaptive
    averaging (``roi_align``)."""
    b, _, h, w = images.shape
    scale = torch.tensor([w, h, w, h], device=images.device, dtype=torch.float32)
    rois = torch.cat([torch.arange(b, device=images.device, dtype=torch.float32)[:, None],
                      boxes.to(torch.float32) * scale], dim=1)
    return roi_align(images.float(), rois, output_size=(size, size), spatial_scale=1.0,
                     sampling_ratio=-1, aligned=True)


def random_horizontal_flip(images: torch.Tensor, p: float = 0.5) -> torch.Tensor:
    """Each image mirrored left-right with probability ``p``, drawn per sample."""
    flip = torch.rand(images.shape[0], device=images.device) < p
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


def _gray(images: torch.Tensor) -> torch.Tensor:
    r, g, b = images.unbind(1)
    return (GRAY_WEIGHTS[0] * r + GRAY_WEIGHTS[1] * g + GRAY_WEIGHTS[2] * b).unsqueeze(1)


def _factors(b: int, amount: float, device: torch.device) -> torch.Tensor:
    return torch.empty(b, 1, 1, 1, device=device).uniform_(max(0.0, 1 - amount), 1 + amount)


def color_jitter(images: torch.Tensor, brightness: float, contrast: float,
                 saturation: float) -> torch.Tensor:
    """torchvision's ``ColorJitter(brightness, contrast, saturation)`` per sample, on RGB
    images in [0, 1]: factors uniform in ``[1 - x, 1 + x]``, the three adjustments in a random
    order per sample (torchvision permutes them per call), each blended and clamped to [0, 1]
    as ``adjust_brightness`` (with black), ``adjust_contrast`` (with the mean luma of the
    image) and ``adjust_saturation`` (with the image's luma) do."""
    b, device = images.shape[0], images.device
    factor = [_factors(b, amount, device) for amount in (brightness, contrast, saturation)]
    order = torch.argsort(torch.rand(b, 3, device=device), dim=1)      # a permutation each
    x = images
    for stage in range(3):
        op = order[:, stage].view(b, 1, 1, 1)
        bright = (x * factor[0]).clamp(0, 1)
        mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
        contr = (factor[1] * x + (1 - factor[1]) * mean).clamp(0, 1)
        satur = (factor[2] * x + (1 - factor[2]) * _gray(x)).clamp(0, 1)
        x = torch.where(op == 0, bright, torch.where(op == 1, contr, satur))
    return x


def normalize(images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """(x - mean) / std per channel."""
    m = torch.tensor(mean, device=images.device, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, device=images.device, dtype=images.dtype).view(1, -1, 1, 1)
    return (images - m) / s
