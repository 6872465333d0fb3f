"""Image augmentations on whole batches with random parameters drawn per sample, on the
batch's device: the random part of the built-ins' sample paths (``tuner.data.SamplePath``).

torchvision's v2 transforms applied to a batched tensor draw one set of parameters for the
whole batch (every image of a batch flipped together); these draw one per sample from torch's
generator on the batch's device and follow torchvision's definitions of each transform (the
source named on each function). The crop and resize is ``torchvision.ops.roi_align`` (one box
per sample; its adaptive sampling averages ``ceil(box / output)`` points per output pixel, as
an antialiased resize does). Each function takes and returns float images ``(B, C, H, W)``,
except ``random_resized_crop_one``: the same crop drawn for one uint8 image on the CPU (a
DataLoader worker's part of the ``cache`` path).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
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
    area = (
        h_img * w_img * torch.empty(b, tries, device=device, dtype=torch.float64).uniform_(*scale)
    )
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


def horizontal_flip(images: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """The images where ``flip`` ``(B,)`` bool is set mirrored left-right, the rest as given
    (for a label that changes with the flip, the caller draws ``flip`` and applies it to both)."""
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


def rotate(images: torch.Tensor, angles_deg: torch.Tensor) -> torch.Tensor:
    """Each image rotated by its angle ``(B,)`` in degrees, counter-clockwise for a positive
    angle, about its centre, same size, nearest-neighbour, the uncovered corners 0: torchvision's
    ``rotate(image, angle)`` with its defaults (``expand=False``, ``center=None``, ``fill=0``),
    one ``grid_sample`` for the batch."""
    b, _, h, w = images.shape
    theta = torch.deg2rad(angles_deg.to(device=images.device, dtype=torch.float32))
    cos, sin = torch.cos(theta), torch.sin(theta)
    zero = torch.zeros_like(cos)
    # output pixel -> input pixel (torchvision's inverse matrix), in grid_sample's [-1, 1]
    # coordinates: the rotation conjugated by the (w/2, h/2) scaling
    affine = torch.stack([torch.stack([cos, -sin * h / w, zero], dim=1),
                          torch.stack([sin * w / h, cos, zero], dim=1)], dim=1)  # (B, 2, 3)
    grid = F.affine_grid(affine, [b, 1, h, w], align_corners=False)
    return F.grid_sample(images.float(), grid, mode="nearest", padding_mode="zeros",
                         align_corners=False)


def random_rotation(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """torchvision's ``RandomRotation(degrees)`` per sample: each image ``rotate``-d by an
    angle uniform in ``[-degrees, degrees]``."""
    angles = torch.empty(images.shape[0], device=images.device).uniform_(-degrees, degrees)
    return rotate(images, angles)


def random_resized_crop_one(image: torch.Tensor, hw: torch.Tensor, scale: tuple[float, float],
                            ratio: tuple[float, float], size: int) -> torch.Tensor:
    """One image's random resized crop, on the CPU: the box drawn by
    ``random_resized_crop_boxes`` against ``hw`` ``(2,)`` (the height and width of the image
    ``image`` is resized from, so areas and aspect ratios are distributed as on that image),
    cut from ``image`` uint8 ``(C, h, w)`` and resized to ``size`` x ``size`` with
    torchvision's antialiased ``resized_crop`` -> uint8 ``(C, size, size)``."""
    from torchvision.transforms.v2 import functional as TF
    side_h, side_w = image.shape[1:]
    x0, y0, x1, y1 = random_resized_crop_boxes(hw[None], scale, ratio)[0].tolist()
    top, left = round(y0 * side_h), round(x0 * side_w)
    height = max(1, round(y1 * side_h) - top)
    width = max(1, round(x1 * side_w) - left)
    return TF.resized_crop(image, top, left, height, width, [size, size], antialias=True)


def _gray(images: torch.Tensor) -> torch.Tensor:
    r, g, b = images.unbind(1)
    return (GRAY_WEIGHTS[0] * r + GRAY_WEIGHTS[1] * g + GRAY_WEIGHTS[2] * b).unsqueeze(1)


def _factors(b: int, amount: float, device: torch.device) -> torch.Tensor:
    return torch.empty(b, 1, 1, 1, device=device).uniform_(max(0.0, 1 - amount), 1 + amount)


def color_jitter(images: torch.Tensor, brightness: float, contrast: float,
                 saturation: float, hue: float = 0.0) -> torch.Tensor:
    """torchvision's ``ColorJitter(brightness, contrast, saturation, hue)`` per sample, on RGB
    images in [0, 1]: factors uniform in ``[1 - x, 1 + x]`` (hue: a shift uniform in
    ``[-hue, hue]``, a fraction of the hue circle, at most 0.5), the adjustments in a random
    order per sample (torchvision permutes them per call), each blended and clamped to [0, 1]
    as ``adjust_brightness`` (with black), ``adjust_contrast`` (with the mean luma of the
    image) and ``adjust_saturation`` (with the image's luma) do; the hue as ``adjust_hue``
    (``adjust_hue_per_sample``). With ``hue`` 0 no hue step is drawn or applied."""
    b, device = images.shape[0], images.device
    factor = [_factors(b, amount, device) for amount in (brightness, contrast, saturation)]
    if hue:
        if not 0 <= hue <= 0.5:
            raise ValueError(f"hue {hue}: accepted 0..0.5 (a fraction of the hue circle)")
        factor.append(torch.empty(b, device=device).uniform_(-hue, hue))
    order = torch.argsort(torch.rand(b, len(factor), device=device), dim=1)  # a permutation each
    x = images
    zero = torch.zeros((), device=device)
    for stage in range(len(factor)):
        op = order[:, stage].view(b, 1, 1, 1)
        # Each of the three is a blend a * x + (1 - a) * other: with black (brightness), the
        # image's mean luma (contrast), its luma per pixel (saturation). Each sample's stage
        # takes its own op's factor and blend, in one pass over the batch.
        a = torch.where(op == 0, factor[0], torch.where(op == 1, factor[1], factor[2]))
        a = torch.where(op > 2, torch.ones((), device=device), a)   # the hue stage: below
        gray = _gray(x)
        other = torch.where(op == 1, gray.mean(dim=(1, 2, 3), keepdim=True),
                            torch.where(op == 2, gray, zero))
        x = (a * x + (1 - a) * other).clamp(0, 1)
        if hue:
            x = torch.where(op == 3, adjust_hue_per_sample(x, factor[3]), x)
    return x


def _hue(images: torch.Tensor, maxc: torch.Tensor, minc: torch.Tensor) -> torch.Tensor:
    """Hue in [0, 1) of RGB images in [0, 1] ``(B, 3, H, W)`` given their channel max and min
    ``(B, 1, H, W)``: Pillow's conversion, as torchvision's ``adjust_hue`` computes it (a grey
    pixel has hue 0) -> ``(B, 1, H, W)``."""
    r, g, _ = images.split(1, dim=1)
    spread = maxc - minc
    rc, gc, bc = ((maxc - images) / torch.where(spread == 0, 1.0, spread)).split(1, dim=1)
    is_r, is_g = maxc == r, (maxc == g) & (maxc != r)
    h = torch.where(is_r, bc - gc, torch.where(is_g, 2.0 + rc - bc, 4.0 + gc - rc))
    return torch.fmod(h / 6.0 + 1.0, 1.0)


def _rgb_to_hsv(images: torch.Tensor) -> torch.Tensor:
    """RGB in [0, 1] -> HSV in [0, 1], ``(B, 3, H, W)`` (torchvision's conversion)."""
    maxc, minc = images.amax(dim=1, keepdim=True), images.amin(dim=1, keepdim=True)
    saturation = (maxc - minc) / torch.where(maxc == 0, 1.0, maxc)
    return torch.cat([_hue(images, maxc, minc), saturation, maxc], dim=1)


_HSV_N = (5.0, 3.0, 1.0)
"""Per channel R, G, B: the offsets of the HSV -> RGB formula ``f(n) = V - V S max(0,
min(k, 4 - k, 1))``, ``k = (n + 6 H) mod 6``."""


def adjust_hue_per_sample(images: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Each image's hue shifted by ``shift`` ``(B,)`` (fractions of the hue circle, in
    [-0.5, 0.5]), as torchvision's ``adjust_hue``: through HSV, the hue taken modulo 1 (value
    and saturation, so each pixel's channel max and min, kept)."""
    maxc, minc = images.amax(dim=1, keepdim=True), images.amin(dim=1, keepdim=True)
    h = (_hue(images, maxc, minc) + shift.view(-1, 1, 1, 1)).remainder(1.0)  # (B, 1, H, W)
    n = torch.tensor(_HSV_N, device=images.device, dtype=images.dtype).view(1, 3, 1, 1)
    k = (n + 6 * h).remainder(6.0)                                          # (B, 3, H, W)
    return maxc - (maxc - minc) * torch.minimum(k, 4 - k).clamp(0, 1)


def normalize(
    images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]
) -> torch.Tensor:
    """(x - mean) / std per channel."""
    m = torch.tensor(mean, device=images.device, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, device=images.device, dtype=images.dtype).view(1, -1, 1, 1)
    return (images - m) / s
