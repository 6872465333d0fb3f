"""Benchmark: does the data path lift an input-pipeline bound?

Runs the default tuner run (CPU) of a classifier on a folder of large photos, where decoding
the JPEGs binds, and prints the answer beside the run's compute-only ceiling and beside the best
configuration of the ``loader`` path (the DataLoader settings alone) of the same run.

Targets (docs/benchmarks.md): the answer >= 0.8 x the run's compute-only ceiling, which here
means >= 1.4 x the best ``loader`` configuration.

Usage:
  python bench/data_paths.py --prepare PHOTOS --data /tmp/photos1024   # 4 class folders, 1,024 px
  python bench/data_paths.py --data /tmp/photos1024 [--time-budget S] [--results DIR]
Options: --model NAME (mobilenet_v3_small), --image-size PX (32), --photos N (240).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLASSES = 4
"""Class folders (the classifier's outputs)."""
LONG_SIDE_PX = 1024
"""Long side of the prepared JPEGs: decoding them dominates a 32-px classifier's step."""


def prepare(photos: Path, target: Path, count: int) -> int:
    """The ``count`` photos of ``photos`` with the largest short side, scaled to
    ``LONG_SIDE_PX`` on the long side (Lanczos), JPEG quality 90, dealt into ``CLASSES``
    folders. Returns how many were written."""
    from PIL import Image
    files = sorted(p for p in photos.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    chosen = sorted(sorted(files, key=lambda p: -min(Image.open(p).size))[:count])
    for k, path in enumerate(chosen):
        image = Image.open(path).convert("RGB")
        scale = LONG_SIDE_PX / max(image.size)
        image = image.resize((round(image.width * scale), round(image.height * scale)),
                             Image.LANCZOS)
        folder = target / f"class_{k % CLASSES}"
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / f"{path.stem}.jpg", quality=90)
    return len(chosen)


def best_of(rows: list[dict], path: str | None = None) -> tuple[float | None, dict | None]:
    """The highest median samples/sec over the measurements (search and re-measurement) of one
    configuration, among the ok rows (of one data path when given), and that configuration's
    last row."""
    from tuner.knobs import Knobs
    groups: dict[Knobs, list[dict]] = {}
    for r in rows:
        if r["status"] != "ok" or r.get("phase") == "ceiling":
            continue
        if path is not None and r.get("data_path") != path:
            continue
        groups.setdefault(Knobs.from_dict(r, strict=False), []).append(r)
    if not groups:
        return None, None
    rate, knobs = max((statistics.median(r["samples_per_sec"] for r in g), k)
                      for k, g in groups.items())
    return rate, groups[knobs][-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--prepare", type=Path, default=None,
                        help="a folder of photos to prepare --data from first")
    parser.add_argument("--photos", type=int, default=240)
    parser.add_argument("--model", default="mobilenet_v3_small")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--time-budget", type=float, default=None)
    parser.add_argument("--results", default=None)
    args = parser.parse_args()
    if args.prepare is not None:
        print(f"prepared {prepare(args.prepare, args.data, args.photos)} photos in {args.data}")
    import tuner
    from tuner.knobs import knob_text
    results = args.results or tempfile.mkdtemp(prefix="tuner-data-paths-")
    result = tuner.tune("classifier", device="cpu", data=str(args.data), results=results,
                        time_budget_s=args.time_budget,
                        workload_options={"model": args.model, "image_size": args.image_size})
    if result.best is None:
        print("no trial succeeded")
        return 1
    answer = result.best.answer
    best = result.best.samples_per_sec
    compute = answer.ceilings.compute_samples_per_sec
    loader, loader_row = best_of(result.rows, "loader")
    print(f"\nanswer: {best:,.1f} samples/sec ({knob_text(answer.row)})")
    if compute:
        print(f"compute-only ceiling of the run: {compute:,.1f}; answer / ceiling "
              f"{best / compute:.2f} (target >= 0.80)")
    if loader:
        print(f"best loader-path configuration: {loader:,.1f} ({knob_text(loader_row)}); "
              f"answer / it {best / loader:.2f} (target >= 1.40)")
    for path in ("cache", "device"):
        rate, row = best_of(result.rows, path)
        if rate:
            print(f"best {path}-path configuration: {rate:,.1f} ({knob_text(row)})")
    print(f"results: {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
