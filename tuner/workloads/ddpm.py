"""DDPM: a class-conditional denoising diffusion model on 40x40 RGB images.

Source: a user's "Performance Analysis Report for DDPM Training" (2025-11-24) (RTX 5070 12 GB,
i7-8700K). The report gives the U-Net's shape (base 64 channels, multipliers (1, 2, 4), attention
(False, False, True), 1000 timesteps), its size (12,817,859 parameters), the augmentation, the
dataset (652 images of 40x40, 546 "Normal" and 106 "Abnormal") and the before/after settings.
Noise schedule and loss follow Ho et al. 2020 (linear betas 1e-4..0.02, epsilon-prediction MSE).

The report's parameter count is matched exactly by a U-Net conditioned on the two image classes
(an embedding of 2 classes + 1 "no class" token, one class projection per residual block, labels
dropped with probability 0.1 for classifier-free guidance); the unconditional variant of the
same U-Net has 12,224,963 parameters (4.6% fewer). The report's author trains the conditional
model, so this workload does too: a batch is ``(images, labels)``.

Shapes: images ``(B, 3, 40, 40)`` float32 in [-1, 1], labels ``(B,)`` int64. The U-Net runs at
40x40, 20x20 and 10x10; self-attention only at 10x10 (100 tokens).

Sample path (``sample_path``, the ``data_path`` knob): decoded samples are the 40x40 uint8
images with their labels (4,808 bytes each, 3.1 MB for the report's 652 images); the random
part is the report's flip, rotation and colour jitter, per sample on either path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset
from torchvision.transforms import v2

from tuner.data import SamplePath
from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.settings import check_scale
from tuner.workload import Workload
from tuner.workloads._data import check_image_folder, image_folder, write_image_folder, write_once

IMAGE_SIZE = 40
"""Image side in pixels (report: "Image Size: 40x40 pixels")."""
CLASS_COUNTS = {"Normal": 546, "Abnormal": 106}
"""Default dataset class folders and image counts (report: "652 images (546 Normal, 106
Abnormal)")."""
NUM_CLASSES = len(CLASS_COUNTS)
"""Classes the U-Net is conditioned on; data with more class folders is rejected."""
DATA_VERSION = "v1"
"""Bump when the default dataset's content changes (the cache directory is named after it)."""
DATA_SEED = 5070
"""Seed of the synthetic default dataset."""

_BASE_CHANNELS = {"full": 64, "tiny": 16}
"""U-Net base width per scale (report: "Base channels: 64")."""
_CHANNEL_MULTIPLIERS = (1, 2, 4)
_ATTENTION = (False, False, True)
_RES_BLOCKS_PER_LEVEL = 2
_NORM_GROUPS = 8
_ATTENTION_HEADS = 4
_DROPOUT = 0.1
_CLASS_DROPOUT = 0.1
"""Probability of replacing a label by the "no class" token (classifier-free guidance)."""
_TIMESTEPS = 1000
_BETA_START, _BETA_END = 1e-4, 0.02


# --------------------------------------------------------------------------------------- model

def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps (Transformer positional encoding).

    Args:
        t: ``(B,)`` timesteps in [0, T).
        dim: embedding width (even).

    Returns:
        ``(B, dim)`` float32: ``[sin(t * f_i), cos(t * f_i)]`` with frequencies
        ``f_i = 10000 ** (-i / (dim/2 - 1))``.
    """
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=t.device, dtype=torch.float32)
                      * (-math.log(10000.0) / (half - 1)))             # (dim/2,)
    angles = t.float()[:, None] * freqs[None, :]                        # (B, dim/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1)               # (B, dim)


class ResBlock(nn.Module):
    """Two 3x3 convolutions with GroupNorm, the timestep and class embeddings added between them,
    and a residual connection (1x1 convolution when the width changes).

    ``forward(x (B, C_in, H, W), t_emb (B, E), c_emb (B, E)) -> (B, C_out, H, W)``.
    """

    def __init__(self, in_ch: int, out_ch: int, emb_dim: int, dropout: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.norm1 = nn.GroupNorm(_NORM_GROUPS, out_ch)
        self.time_proj = nn.Linear(emb_dim, out_ch)
        self.class_proj = nn.Linear(emb_dim, out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1)
        self.norm2 = nn.GroupNorm(_NORM_GROUPS, out_ch)
        self.dropout = nn.Dropout(dropout)
        self.skip = nn.Conv2d(in_ch, out_ch, 1) if in_ch != out_ch else nn.Identity()

    def forward(self, x: torch.Tensor, t_emb: torch.Tensor, c_emb: torch.Tensor) -> torch.Tensor:
        h = self.norm1(self.conv1(x))                                   # (B, C_out, H, W)
        cond = self.time_proj(F.silu(t_emb)) + self.class_proj(F.silu(c_emb))  # (B, C_out)
        h = F.silu(h + cond[:, :, None, None])
        h = self.dropout(self.norm2(self.conv2(h)))
        return F.silu(h + self.skip(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention over the H*W positions, with a residual connection.

    ``forward(x (B, C, H, W)) -> (B, C, H, W)``.
    """

    def __init__(self, channels: int, heads: int = _ATTENTION_HEADS) -> None:
        super().__init__()
        if channels % heads:
            raise ValueError(f"attention width {channels} is not divisible by {heads} heads")
        self.heads = heads
        self.norm = nn.GroupNorm(_NORM_GROUPS, channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        qkv = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w)
        q, k, v = qkv.transpose(-1, -2).unbind(1)                       # (B, heads, HW, C/heads)
        a = F.scaled_dot_product_attention(q, k, v)                      # (B, heads, HW, C/heads)
        a = a.transpose(-1, -2).reshape(b, c, h, w)
        return x + self.out(a)


class UNet(nn.Module):
    """Noise-prediction U-Net (DDPM, Ho et al. 2020) with timestep and class conditioning.

    Each level has ``res_blocks`` ResBlocks, then self-attention where ``attention`` says so,
    then a stride-2 convolution (except the last level). The middle is ResBlock, attention,
    ResBlock. Each up level concatenates the skip of its down level, runs ``res_blocks``
    ResBlocks (and attention), then upsamples x2 (nearest + 3x3 convolution).

    ``forward(x (B, 3, H, W), t (B,) int64, labels (B,) int64 in [0, num_classes]) -> (B, 3, H, W)``
    where label ``num_classes`` means "no class". H and W must be divisible by
    ``2 ** (len(multipliers) - 1)``.
    """

    def __init__(self, base: int, multipliers: Sequence[int] = _CHANNEL_MULTIPLIERS,
                 attention: Sequence[bool] = _ATTENTION, res_blocks: int = _RES_BLOCKS_PER_LEVEL,
                 num_classes: int = NUM_CLASSES, dropout: float = _DROPOUT,
                 in_ch: int = 3) -> None:
        super().__init__()
        if len(attention) != len(multipliers):
            raise ValueError(f"attention {tuple(attention)} needs one flag per level "
                             f"of multipliers {tuple(multipliers)}")
        self.emb_dim = 4 * base
        self.num_classes = num_classes
        self.time_mlp = nn.Sequential(nn.Linear(self.emb_dim, 4 * self.emb_dim), nn.SiLU(),
                                      nn.Linear(4 * self.emb_dim, self.emb_dim))
        self.class_emb = nn.Embedding(num_classes + 1, self.emb_dim)    # +1: "no class" token
        self.stem = nn.Conv2d(in_ch, base, 3, padding=1)

        widths = [base * m for m in multipliers]
        last = len(widths) - 1
        self.down = nn.ModuleList()
        ch = base
        for level, width in enumerate(widths):
            self.down.append(self._level(ch, width, res_blocks, attention[level], dropout,
                                         resample=None if level == last else "down"))
            ch = width
        self.mid = nn.ModuleList([ResBlock(ch, ch, self.emb_dim, dropout), SelfAttention(ch),
                                  ResBlock(ch, ch, self.emb_dim, dropout)])
        self.up = nn.ModuleList()
        for level in reversed(range(len(widths))):
            width = widths[level]
            self.up.append(self._level(ch + width, width, res_blocks, attention[level], dropout,
                                       resample=None if level == 0 else "up"))
            ch = width
        self.head = nn.Sequential(nn.GroupNorm(_NORM_GROUPS, ch), nn.SiLU(),
                                  nn.Conv2d(ch, in_ch, 3, padding=1))

    def _level(self, in_ch: int, out_ch: int, res_blocks: int, attend: bool, dropout: float,
               resample: str | None) -> nn.ModuleDict:
        blocks = [ResBlock(in_ch if i == 0 else out_ch, out_ch, self.emb_dim, dropout)
                  for i in range(res_blocks)]
        if resample == "down":
            resampler = nn.Conv2d(out_ch, out_ch, 3, stride=2, padding=1)
        elif resample == "up":
            resampler = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"),
                                      nn.Conv2d(out_ch, out_ch, 3, padding=1))
        else:
            resampler = nn.Identity()
        return nn.ModuleDict({"blocks": nn.ModuleList(blocks),
                              "attention": SelfAttention(out_ch) if attend else nn.Identity(),
                              "resample": resampler})

    @staticmethod
    def _run_level(level: nn.ModuleDict, h: torch.Tensor, t_emb: torch.Tensor,
                   c_emb: torch.Tensor) -> torch.Tensor:
        for block in level["blocks"]:
            h = block(h, t_emb, c_emb)
        return level["attention"](h)

    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        t_emb = self.time_mlp(timestep_embedding(t, self.emb_dim))      # (B, E)
        c_emb = self.class_emb(labels)                                  # (B, E)
        h = self.stem(x)                                                # (B, base, H, W)
        skips = []
        for level in self.down:
            h = self._run_level(level, h, t_emb, c_emb)                 # (B, C_l, H_l, W_l)
            skips.append(h)
            h = level["resample"](h)                                    # (B, C_l, H_l/2, W_l/2)
        h = self.mid[0](h, t_emb, c_emb)
        h = self.mid[1](h)
        h = self.mid[2](h, t_emb, c_emb)
        for level in self.up:
            h = torch.cat([h, skips.pop()], dim=1)                      # (B, C + C_l, H_l, W_l)
            h = self._run_level(level, h, t_emb, c_emb)
            h = level["resample"](h)                                    # (B, C_l, 2 H_l, 2 W_l)
        return self.head(h)                                             # (B, 3, H, W)


class DiffusionModel(nn.Module):
    """A UNet plus the DDPM forward process; ``forward`` returns the training loss.

    The linear beta schedule (``beta_start``..``beta_end`` over ``timesteps`` steps) is held as
    buffers, so it moves with the model and adds no parameters.
    """

    def __init__(self, unet: UNet, timesteps: int = _TIMESTEPS, beta_start: float = _BETA_START,
                 beta_end: float = _BETA_END, class_dropout: float = _CLASS_DROPOUT) -> None:
        super().__init__()
        self.unet = unet
        self.timesteps = timesteps
        self.class_dropout = class_dropout
        betas = torch.linspace(beta_start, beta_end, timesteps, dtype=torch.float64)   # (T,)
        alpha_bar = torch.cumprod(1.0 - betas, dim=0)                                  # (T,)
        self.register_buffer("sqrt_alpha_bar", alpha_bar.sqrt().float())
        self.register_buffer("sqrt_one_minus_alpha_bar", (1.0 - alpha_bar).sqrt().float())

    def forward(self, x0: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Epsilon-prediction loss of one batch.

        Samples ``t ~ U{0..T-1}`` and ``eps ~ N(0, I)``, builds
        ``x_t = sqrt(alpha_bar_t) x0 + sqrt(1 - alpha_bar_t) eps`` and returns
        ``mean((unet(x_t, t, labels) - eps) ** 2)``.

        Args:
            x0: ``(B, 3, H, W)`` clean images in [-1, 1].
            labels: ``(B,)`` int64 class indices, or None for unconditional training. In
                training mode each label becomes the "no class" token with probability
                ``class_dropout``.

        Returns:
            Scalar float32 loss.
        """
        b = x0.shape[0]
        t = torch.randint(0, self.timesteps, (b,), device=x0.device)    # (B,)
        noise = torch.randn_like(x0)                                    # (B, 3, H, W)
        x_t = (self.sqrt_alpha_bar[t].view(b, 1, 1, 1) * x0
               + self.sqrt_one_minus_alpha_bar[t].view(b, 1, 1, 1) * noise)
        no_class = torch.full((b,), self.unet.num_classes, device=x0.device, dtype=torch.long)
        if labels is None:
            labels = no_class
        elif self.training and self.class_dropout > 0:
            drop = torch.rand(b, device=x0.device) < self.class_dropout
            labels = torch.where(drop, no_class, labels)                # no host sync
        predicted = self.unet(x_t, t, labels)
        return F.mse_loss(predicted.float(), noise.float())


# ---------------------------------------------------------------------------------------- data

def _label_tensor(label: int) -> torch.Tensor:
    """Class index -> scalar int64 tensor (module-level so that datasets pickle to workers)."""
    return torch.tensor(label, dtype=torch.long)


FLIP_P = 0.5
"""Probability of the horizontal flip (report: "RandomHorizontalFlip (p=0.5)")."""
ROTATION_DEG = 15.0
"""Rotation angles are uniform in [-ROTATION_DEG, ROTATION_DEG] (report: "RandomRotation (15
deg)")."""
BRIGHTNESS = CONTRAST = 0.1
"""ColorJitter factors uniform in [0.9, 1.1] (report: "ColorJitter (brightness=0.1,
contrast=0.1)")."""
_HALF = (0.5, 0.5, 0.5)
"""Normalize's mean and std: [0, 1] -> [-1, 1]."""


def augmentation() -> v2.Compose:
    """The report's augmentation, the random part of a sample: uint8 ``(3, 40, 40)`` ->
    float32 ``(3, 40, 40)`` in [-1, 1] (flip with ``FLIP_P``, rotation within ``ROTATION_DEG``,
    nearest-neighbour with black corners, brightness and contrast jitter, then scaled)."""
    return v2.Compose([
        v2.RandomHorizontalFlip(p=FLIP_P),
        v2.RandomRotation(ROTATION_DEG),
        v2.ColorJitter(brightness=BRIGHTNESS, contrast=CONTRAST),
        v2.ToDtype(torch.float32, scale=True),                          # [0, 1]
        v2.Normalize(mean=list(_HALF), std=list(_HALF)),                # [-1, 1]
    ])


def train_transform() -> v2.Compose:
    """The report's augmentation on a uint8 ``(3, H, W)`` image -> float32 ``(3, 40, 40)`` in
    [-1, 1] (report: "RandomHorizontalFlip (p=0.5), RandomRotation (15 deg), ColorJitter
    (brightness=0.1, contrast=0.1)"). Images of another size are resized to 40x40 first."""
    return v2.Compose([v2.Resize((IMAGE_SIZE, IMAGE_SIZE), antialias=True), augmentation()])


class _Decode:
    """ImageFolder transform of the decoded part: uint8 ``(3, H, W)`` -> uint8
    ``(3, 40, 40)``, resized as ``train_transform`` resizes (unchanged at 40x40)."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return v2.functional.resize(image, [IMAGE_SIZE, IMAGE_SIZE], antialias=True)


class _AugmentOne:
    """The random part on one decoded sample ``(image uint8 (3, 40, 40), label int64 ())``, in
    a DataLoader worker: ``augmentation`` -> ``(float32 (3, 40, 40) in [-1, 1], int64 ())``,
    the item ``build_dataset`` gives (the same transforms, drawing the same random numbers)."""

    def __init__(self) -> None:
        self.transform = augmentation()

    def __call__(self, sample: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = sample
        return self.transform(image), label


class _AugmentBatch:
    """The random part on a batch of decoded samples stacked on a device ``(uint8
    (B, 3, 40, 40), int64 (B,))``: ``augmentation``'s flip, rotation and colour jitter with
    parameters drawn per sample (``tuner.workloads._augment``) -> ``(float32 (B, 3, 40, 40)
    in [-1, 1], int64 (B,))``, the collated batch of ``build_dataset``'s items."""

    def __call__(self, batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        from tuner.workloads import _augment as aug
        images, labels = batch
        x = aug.random_horizontal_flip(images.float() / 255.0, FLIP_P)
        x = aug.random_rotation(x, ROTATION_DEG)
        x = aug.color_jitter(x, brightness=BRIGHTNESS, contrast=CONTRAST, saturation=0.0)
        return aug.normalize(x, _HALF, _HALF), labels


# ------------------------------------------------------------------------------------ workload

class DDPMWorkload(Workload):
    """Class-conditional DDPM U-Net (12.8M parameters) on 40x40 RGB images in class folders."""

    name = "ddpm"
    description = ("class-conditional DDPM U-Net (64 ch, x(1,2,4), attention at 10x10, T=1000) "
                   "on 40x40 RGB images")
    source = "ddpm-report-rtx5070.md (RTX 5070 12 GB, i7-8700K); architecture: Ho et al. 2020"
    learning_rate = 2e-4  # Ho et al. 2020 (the report gives none)
    # first step under torch.compile, full scale, one H100 (docs/benchmarks.md)
    compile_s_hint = 80.0
    references = {
        "baseline": Knobs(
            batch_size=8,       # report: "Batch Size: 8 (default in code ...)"
            num_workers=4,      # report: "DataLoader Workers: 4"
            amp="fp16",         # report: "Mixed Precision (AMP): Enabled (default)"
        ),
        "recommended": Knobs(
            # report section 1: "Recommended: 32-64"; "Test with batch_size=32 (most likely
            # optimal)"
            batch_size=32,
            # report section 3: "6-8 workers"; dataloader guide: "ddpm_train.py ... --num-workers 6"
            num_workers=6,
            amp="fp16",         # report section 2: keep AMP enabled
            pin_memory=True,    # dataloader guide: "pin_memory=True  # Faster GPU transfers"
            persistent_workers=True,  # dataloader guide: "persistent_workers=True"
            prefetch_factor=2,  # dataloader guide: "prefetch_factor=2"
            cudnn_benchmark=True,  # dataloader guide: "torch.backends.cudnn.benchmark = True"
        ),
    }

    def build_model(self, scale: str) -> DiffusionModel:
        """The U-Net (base 64 at ``full``: 12,817,859 parameters; base 16 at ``tiny``) wrapped
        with the noise schedule. Raises ValueError for an unknown scale."""
        scale = check_scale(scale)
        return DiffusionModel(UNet(_BASE_CHANNELS[scale]))

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        """An ImageFolder of ``data_dir/<class>/<image>.png|jpg``: items are
        ``(image (3, 40, 40) float32 in [-1, 1], label () int64)``, decoded and augmented in
        ``__getitem__``.

        Raises:
            ValueError: unknown scale.
            DataError: ``data_dir`` is missing, holds no class folder with images, or holds
                more than 2 class folders; a file that fails to decode (in ``__getitem__``).
        """
        scale = check_scale(scale)
        dataset = image_folder(Path(data_dir), transform=train_transform())
        if len(dataset.classes) > NUM_CLASSES:
            raise DataError(
                f"data directory {data_dir} has {len(dataset.classes)} class folders "
                f"({', '.join(dataset.classes)}); the ddpm model is conditioned on at most "
                f"{NUM_CLASSES} classes (e.g. {' and '.join(sorted(CLASS_COUNTS))})")
        dataset.target_transform = _label_tensor
        return dataset

    def sample_path(self, data_dir: Path, scale: str) -> SamplePath:
        """Decoded: each image read and resized to 40x40 (``train_transform``'s deterministic
        step), ``(uint8 (3, 40, 40), int64 ())``, 4,808 bytes per sample; random:
        ``augmentation`` per sample (``_AugmentOne``) or per batch with per-sample parameters
        (``_AugmentBatch``). Items as ``build_dataset``'s.

        Raises:
            ValueError, DataError: as ``build_dataset``.
        """
        self.build_dataset(data_dir, scale)                             # the same checks
        folder = image_folder(Path(data_dir), transform=_Decode())
        folder.target_transform = _label_tensor
        return SamplePath(decoded=folder, augment=_AugmentOne(),
                          augment_batch=_AugmentBatch())

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        """Write 652 synthetic 40x40 PNGs, ``Normal/`` (546) and ``Abnormal/`` (106), into
        ``cache_dir/ddpm-v1`` once (same data for both scales; about 1 s).

        The report's real images are 40x40 crops of the user's own data; these are smooth
        colour blobs plus noise, with the same count, size, class split and file format, so
        decode and augmentation cost what they cost there. Raises ValueError for an unknown
        scale.
        """
        scale = check_scale(scale)
        target = Path(cache_dir) / f"{self.name}-{DATA_VERSION}"
        return write_once(target, lambda tmp: write_image_folder(
            tmp, CLASS_COUNTS, (IMAGE_SIZE, IMAGE_SIZE), seed=DATA_SEED, fmt="png"))

    def check_data(self, data_dir: Path, scale: str) -> int:
        """Decode every image before the run starts (``check_image_folder``)."""
        return check_image_folder(self.build_dataset(data_dir, scale))

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """``batch = (images (B, 3, 40, 40), labels (B,))`` on the device -> scalar MSE loss."""
        images, labels = batch
        return model(images, labels)

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        scale = check_scale(scale)
        return {"image": [3, IMAGE_SIZE, IMAGE_SIZE], "label": []}


workload = DDPMWorkload()
