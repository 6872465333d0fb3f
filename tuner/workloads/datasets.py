"""Datasets and data helpers of the built-in workloads, public for your own workloads.

Import them in a workload module (``from tuner.workloads.datasets import CharWindows``); the
built-in workloads use these very objects, so they are as tested as the built-ins are. Every one
reads real files in ``__getitem__`` (the CPU work DataLoader workers parallelise) and raises
``tuner.errors.DataError`` naming the file that cannot be used, which tuner reports in one line.

Image folders (``ddpm``, ``classifier``, ``classifier299``)::

    DIR/<class>/<image>.png|.jpg|.jpeg        one folder per class, sorted names = labels 0..C-1

* ``image_folder(DIR, transform)``: torchvision's ``ImageFolder`` decoding with ``read_image``.
  Sample: ``(transform(image), label)``, ``image`` uint8 ``(3, H, W)`` RGB, ``label`` an int.
* ``check_image_folder(dataset)``: decodes every image before a run (use it in
  ``Workload.check_data``); returns the image count.
* ``read_image(path)``: one file as uint8 ``(3, H, W)``.
* ``IMAGE_EXTENSIONS``: the file suffixes ``image_folder`` takes; other files are ignored.

One text file (``chargpt``; set ``data_is_file = True`` on the workload)::

    FILE                                        UTF-8 text, at least block_size + 1 bytes

* ``CharWindows(FILE, block_size)``: consecutive windows as next-byte pairs ``x, y``, both
  int64 ``(block_size,)`` (byte values 0..255 as token ids); ``len`` = bytes // block_size.
  The file is memory-mapped, so a corpus of any size costs no memory.
* ``check_text_file(FILE, min_bytes)``: the UTF-8 check it runs (byte offset of a bad byte).

Image/label volume pairs (``segmentation3d``)::

    DIR/images/<case>.npy|.nii|.nii.gz          one 3-D volume (D, H, W) per case
    DIR/labels/<case>.<same extension>          its class map, integers 0..num_classes-1

* ``VolumePatchDataset(build_pairs(DIR, num_classes), patch=(D, H, W), num_classes=...)``:
  random patches read through memory maps: image float32 ``(1, D, H, W)`` z-scored over the
  patch, label int64 ``(D, H, W)``; ``patches_per_volume`` (default 64) patches per volume make
  an epoch. ``build_pairs`` pairs the files, converts NIfTI once to cached ``.npy`` and checks
  that shapes match.

Default data: ``write_once(target, writer)`` creates a directory atomically (what a
``prepare_default_data`` needs when several Ray workers prepare data at once).
"""

from __future__ import annotations

from tuner.workloads._data import (
    IMAGE_EXTENSIONS,
    check_image_folder,
    image_folder,
    read_image,
    write_once,
)
from tuner.workloads.chargpt import CharWindows, check_text_file
from tuner.workloads.segmentation3d import VolumePatchDataset, build_pairs

__all__ = ["IMAGE_EXTENSIONS", "CharWindows", "VolumePatchDataset", "build_pairs",
           "check_image_folder", "check_text_file", "image_folder", "read_image", "write_once"]
