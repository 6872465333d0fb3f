"""Benchmark: the device path's per-sample augmentation, three ways, on one batch.

The classifiers' random part (RandomResizedCrop to 32 px from a 64-px decoded image, horizontal
flip, ColorJitter 0.2/0.2/0.2, Normalize), each parameter drawn per sample:

* ``tuner``: ``tuner.workloads.classifier._AugmentBatch`` (torch ops and torchvision's
  ``roi_align``, the whole batch at once);
* ``kornia``: ``kornia.augmentation`` with ``same_on_batch=False`` (its default);
* ``torchvision loop``: torchvision's v2 transforms applied to one sample at a time.

Prints the median milliseconds per batch over ``--reps`` after a warm-up, per device.

Usage:
  pip install -e ".[bench]"     # kornia
  python bench/augment_per_sample.py [--batch 256] [--reps 20] [--device cpu|cuda|all]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.workloads.classifier import _MEAN, _STD, _AugmentBatch  # noqa: E402

SIZE, DECODED, CROP_SCALE = 32, 64, (0.5, 1.0)


def batch(n: int, device: str) -> tuple:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, DECODED, DECODED), generator=g, dtype=torch.uint8)
    hw = torch.tensor([[768, 1024]] * n)
    return images.to(device), hw.to(device), torch.zeros(n, dtype=torch.int64, device=device)


def ways(device: str) -> dict:
    out = {"tuner": _AugmentBatch(SIZE, CROP_SCALE)}
    try:
        import kornia.augmentation as K
        pipeline = K.AugmentationSequential(
            K.RandomResizedCrop((SIZE, SIZE), scale=CROP_SCALE),
            K.RandomHorizontalFlip(),
            K.ColorJitter(0.2, 0.2, 0.2, p=1.0),
            K.Normalize(mean=torch.tensor(_MEAN), std=torch.tensor(_STD))).to(device)
        out["kornia"] = lambda b: (pipeline(b[0].float() / 255), b[2])
    except ImportError:
        print("kornia is not installed (pip install -e \".[bench]\"): left out")
    from torchvision.transforms import v2
    one = v2.Compose([v2.RandomResizedCrop(SIZE, scale=CROP_SCALE, antialias=True),
                      v2.RandomHorizontalFlip(),
                      v2.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2),
                      v2.ToDtype(torch.float32, scale=True), v2.Normalize(_MEAN, _STD)])
    out["torchvision loop"] = lambda b: (torch.stack([one(x) for x in b[0]]), b[2])
    return out


def timed(fn, data: tuple, device: str, reps: int) -> float:
    for _ in range(2):
        fn(data)
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(data)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    args = parser.parse_args()
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    print(f"batch {args.batch}, {DECODED}-px uint8 -> {SIZE}-px float32; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads")
    print("| device | way | ms per batch (median) | samples/sec |")
    print("| --- | --- | --- | --- |")
    for device in devices:
        data = batch(args.batch, device)
        for name, fn in ways(device).items():
            ms = timed(fn, data, device, args.reps)
            print(f"| {device} | {name} | {ms:,.2f} | {1000 * args.batch / ms:,.0f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
