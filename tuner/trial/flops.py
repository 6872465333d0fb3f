"""Model FLOPs per training sample, dense peak TFLOP/s per GPU, and model FLOPs utilisation.

Three pieces, each usable alone:

* ``model_flops_per_sample``: forward + backward FLOPs of one training sample, counted once per
  (workload name, scale) with ``torch.utils.flop_counter.FlopCounterMode`` on the ``meta`` device
  (shapes only, no arithmetic), on CPU where a workload's step cannot run on ``meta``.
* ``peak_tflops``: the vendor's dense (no sparsity) peak TFLOP/s of a GPU at one precision,
  looked up by the name torch or NVML reports (``PEAK_TFLOPS_DENSE`` names its sources).
* ``utilisation``: achieved TFLOP/s and MFU in percent from a measured samples/sec.
* ``conv_flops_share``: the convolutions' share of those FLOPs (the same count), which run in
  TF32 on a CUDA trial without AMP or the tf32 knob (cuDNN's default) while matmuls run in FP32.

Torch, stdlib and the workload contract only: the trial harness imports this module.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode

from tuner.knobs import AMP_MODES
from tuner.workload import Workload

log = logging.getLogger(__name__)

PRECISIONS = ("bf16", "fp16", "tf32", "fp32")
"""Precisions ``peak_tflops`` knows; ``precision_of`` maps the amp and tf32 knobs onto them."""

SAMPLES_COUNTED = 2
"""Samples in the one real batch the FLOPs are counted on (the count is divided by it)."""

COUNT_DEVICES = ("meta", "cpu")
"""Devices tried in order: ``meta`` counts from shapes at no cost; CPU runs the real step for a
workload whose step uses an op without a meta kernel (or reads a value, e.g. ``.item()``)."""

_FLOPS_CACHE: dict[tuple[str, str], tuple[float, float] | None] = {}
"""(workload name, scale) -> (FLOPs per sample, convolutions' FLOPs per sample); None: not
countable. One count per process."""


# ---------------------------------------------------------------------------------- counting

def model_flops_per_sample(workload: Workload, scale: str, data_dir: Path | str) -> float | None:
    """Forward + backward model FLOPs of one training sample (FLOP/sample, not FLOP/s).

    Counted with ``torch.utils.flop_counter.FlopCounterMode`` over
    ``workload.training_step(model, batch)`` and ``loss.backward()`` on one real batch of
    ``SAMPLES_COUNTED`` samples read from ``workload.build_dataset(data_dir, scale)`` through a
    DataLoader with ``workload.collate_fn()``, divided by ``workload.samples_in(batch)``. The
    model and batch are moved to the ``meta`` device first (FlopCounterMode counts from shapes,
    nothing is computed); a step that fails there is run on CPU instead. The result is cached per
    ``(workload.name, scale)`` for the life of the process (``data_dir`` is not part of the key:
    a workload fixes its sample shape per scale).

    Convention: the 6N model-FLOPs convention of Kaplan et al. 2020 ("Scaling Laws for Neural
    Language Models", section 2.1: C = 6N per token, 2N forward + 4N backward) as used for model
    FLOPs utilisation by PaLM (Chowdhery et al. 2022, appendix B). Floating-point model inputs
    are made to require grad while counting, so every layer's input gradient is counted, the
    first layer's included: a ``Linear(in, out)`` counts 2 x in x out forward + 4 x in x out
    backward = 6 x in x out per sample, a convolution 3 x its forward FLOPs. Attention is
    counted through PyTorch's math SDPA path: QK^T and AV forward, their four gradient matmuls
    backward. (FlopCounterMode's formulas for the fused flash / memory-efficient kernels a GPU
    runs add the backward's recomputation of QK^T, a hardware-FLOPs item PaLM's MFU leaves out;
    so chargpt at seed scale counts 18.27 GFLOP/sample here and 18.6 on an H100.)

    Not counted (FlopCounterMode knows matmul, convolution and attention-family ops only):
    elementwise ops, normalisation, activations, softmax outside SDPA, embeddings lookups, the
    loss reduction, the optimizer step, and data loading. AMP, ``channels_last`` and
    ``torch.compile`` do not change the count: it is a property of the model's shapes.

    Args:
        workload: the workload (its ``name`` keys the cache).
        scale: one of ``tuner.settings.SCALES``.
        data_dir: what ``build_dataset`` takes (a directory, or a file for ``data_is_file``).

    Returns:
        FLOP per sample (> 0), or None when the step fails on both ``meta`` and CPU, or when
        FlopCounterMode finds no op it counts (a workload quirk is logged, never raised).

    Raises:
        tuner.errors.DataError (or what ``build_dataset`` raises): the data cannot be read; a
            user error in the data is not swallowed.
        ValueError: the dataset yields no sample.
    """
    count = _counted(workload, scale, data_dir)
    return None if count is None else count[0]


def conv_flops_share(workload: Workload, scale: str, data_dir: Path | str) -> float | None:
    """The share (0-1) of ``model_flops_per_sample`` in convolution ops (``aten.convolution``
    and its backward), from the same cached count; None where the FLOPs are not countable.
    Raises what ``model_flops_per_sample`` raises."""
    count = _counted(workload, scale, data_dir)
    return None if count is None else count[1] / count[0]


def _counted(workload: Workload, scale: str, data_dir: Path | str) -> tuple[float, float] | None:
    key = (workload.name, scale)
    if key not in _FLOPS_CACHE:
        _FLOPS_CACHE[key] = _count_flops_per_sample(workload, scale, Path(data_dir))
    return _FLOPS_CACHE[key]


def has_image_layout(workload: Workload, scale: str) -> bool:
    """Whether ``channels_last`` can change anything: the model has a 4-D or 5-D parameter
    (a Conv2d/Conv3d weight; channels_last reorders exactly those and 4-D/5-D inputs, which
    then meet such a layer). Built on the ``meta`` device (no memory, no data); a model that
    cannot be built there counts as having one (the knob stays in the search)."""
    try:
        with torch.device("meta"):
            model = workload.build_model(scale)
    # A workload quirk must not fail planning: the knob stays searchable.
    except Exception as exc:  # noqa: BLE001
        log.info("%s (%s) cannot be built on meta (%s): channels_last stays searchable",
                 workload.name, scale, exc)
        return True
    return any(p.dim() in (4, 5) for p in model.parameters())


def _count_flops_per_sample(workload: Workload, scale: str,
                            data_dir: Path) -> tuple[float, float] | None:
    """Uncached (FLOPs per sample, convolutions' FLOPs per sample): read one batch, count on
    each of COUNT_DEVICES until one works. Torch's CPU random state is restored afterwards (the
    DataLoader's augmentation and the step draw from it), so counting does not shift a trial's
    seeded randomness."""
    with torch.random.fork_rng(devices=[]):
        batch = _first_batch(workload, scale, data_dir)  # data errors propagate: the user's
        samples = workload.samples_in(batch)
        for device in COUNT_DEVICES:
            try:
                flop, conv_flop = _count_on(workload, scale, batch, device)
            # A workload quirk (an op without a meta kernel, a value read with .item(), a tensor
            # kept outside the module) must not fail the trial: try the next device, then None.
            except Exception as exc:  # noqa: BLE001
                log.info("FLOP count of %s (%s) on %s failed: %s: %s",
                         workload.name, scale, device, type(exc).__name__, exc)
                continue
            if flop <= 0:
                log.warning("FLOP count of %s (%s): no matmul, convolution or attention op "
                            "found; model FLOPs unknown", workload.name, scale)
                return None
            log.info("FLOP count of %s (%s): %.4g FLOP/sample, counted on %s",
                     workload.name, scale, flop / samples, device)
            return flop / samples, conv_flop / samples
    log.warning("FLOP count of %s (%s) failed on %s; model FLOPs unknown",
                workload.name, scale, " and ".join(COUNT_DEVICES))
    return None


def _first_batch(workload: Workload, scale: str, data_dir: Path) -> Any:
    """One real batch of up to SAMPLES_COUNTED samples, read in this process (no workers).

    Raises:
        ValueError: the dataset yields no sample.
    """
    dataset = workload.build_dataset(data_dir, scale)
    loader = DataLoader(dataset, batch_size=SAMPLES_COUNTED, shuffle=False, num_workers=0,
                        collate_fn=workload.collate_fn())
    batch = next(iter(loader), None)
    if batch is None:
        raise ValueError(f"data {data_dir}: no sample to count {workload.name}'s FLOPs on")
    return batch


def _count_on(workload: Workload, scale: str, batch: Any, device: str) -> tuple[int, int]:
    """FLOPs of one forward + backward of a fresh model on ``device`` (the whole batch): all
    of them, and those of convolution ops.

    SDPA is pinned to its math backend: the CPU's fused attention kernel is not one
    FlopCounterMode counts, and the math path's matmuls give the same count as the GPU kernels.
    """
    model = workload.build_model(scale).to(device).train()
    inputs = _to_device(batch, device)
    counter = FlopCounterMode(display=False)
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        loss = workload.training_step(model, inputs)
        loss.backward()
    per_op = counter.get_flop_counts().get("Global", {})
    conv = sum(n for op, n in per_op.items() if "convolution" in str(op))
    return counter.get_total_flops(), conv


def _to_device(batch: Any, device: str) -> Any:
    """``batch`` with every tensor copied to ``device``; floating-point tensors require grad
    (the 6N convention: the first layer's input gradient is counted too). Tuples (named ones
    included), lists and mappings are rebuilt; anything else is passed through."""
    if isinstance(batch, torch.Tensor):
        moved = batch.detach().to(device)
        return moved.requires_grad_(True) if moved.is_floating_point() else moved
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_to_device(item, device) for item in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(item, device) for item in batch)
    if isinstance(batch, Mapping):
        return {key: _to_device(value, device) for key, value in batch.items()}
    return batch


# ------------------------------------------------------------------------------ peak TFLOP/s

# Dense (no structured sparsity) peak TFLOP/s per precision. 'fp16' is the FP16 tensor-core rate
# with FP32 accumulate (what PyTorch autocast's matmuls use; GeForce cards run it at half their
# FP16-accumulate rate), 'bf16' the BF16 rate with FP32 accumulate, 'tf32' the TF32 tensor-core
# rate, 'fp32' the non-tensor FP32 rate. A precision left out of an entry has no vendor figure.
PEAK_TFLOPS_DENSE: dict[str, dict[str, float]] = {
    # NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5 column: Peak BF16 and FP16
    # Tensor TFLOPS with FP32 Accumulate 989.4 (1978.9 with sparsity), Peak TF32 Tensor 494.7
    # (989.4), Peak FP32 (non-Tensor) 66.9.
    "H100 SXM": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    # NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column: BF16 / FP16 Tensor Core 1,513
    # TFLOPS and TF32 Tensor Core 756 TFLOPS with sparsity (dense: half), FP32 51 TFLOPS.
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0},
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: BF16 / FP16 Tensor Core 1,979 and
    # TF32 Tensor Core 989 TFLOPS with sparsity, FP32 67 TFLOPS: the same GH100 rates as H100 SXM.
    "H200": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    # NVIDIA A100 Tensor Core GPU datasheet (40 GB and 80 GB, PCIe and SXM alike): BF16 / FP16
    # Tensor Core 312 TFLOPS (624 with sparsity), TF32 Tensor Core 156 (312), FP32 19.5.
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    # NVIDIA A10G Tensor Core GPU datasheet for AWS (NVIDIA_AWS_A10G_DataSheet_FINAL_02_17_2022):
    # BF16 / FP16 Tensor Core 70 TFLOPS (140 with sparsity), TF32 Tensor Core 35 (70), FP32 35.
    # Not the plain A10's datasheet (125 / 62.5 / 31.2): the AWS part has other clocks and SMs.
    "A10G": {"bf16": 70.0, "fp16": 70.0, "tf32": 35.0, "fp32": 35.0},
    # NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix C (GB205, GeForce RTX 5070):
    # Peak BF16 / FP16 Tensor TFLOPS with FP32 Accumulate 61.7 (123.5 with sparsity; FP16 with
    # FP16 accumulate is 123.5), Peak TF32 Tensor 30.9, Peak FP32 (non-Tensor) 30.9
    # (= 6,144 CUDA cores x 2 x 2.512 GHz boost).
    "RTX 5070": {"bf16": 61.7, "fp16": 61.7, "tf32": 30.9, "fp32": 30.9},
    # NVIDIA GeForce RTX 4080 SUPER product page: 10,240 CUDA cores, 2.55 GHz boost, "52 shader
    # TFLOPS" (10,240 x 2 x 2.55 GHz = 52.2). Its tensor rates are left out: NVIDIA's Ada GPU
    # Architecture whitepaper (v2.1) tabulates the RTX 4090 and RTX 4080 only, and no NVIDIA
    # document found gives the SUPER's dense BF16 / FP16 / TF32 rows. The 4080's row (97.5 BF16 /
    # FP16 with FP32 accumulate = 2 x its 48.7 FP32, TF32 48.7) scaled the same way would give
    # 104.4 and 52.2: pass that as ``peak_tflops_override`` if you accept the derivation.
    "RTX 4080 SUPER": {"fp32": 52.2},
    # NVIDIA Ampere GA102 GPU Architecture whitepaper, appendix A (GeForce RTX 3090): Peak FP16
    # and BF16 Tensor TFLOPS with FP32 Accumulate 71 (142 with sparsity; FP16 with FP16
    # accumulate is 142), Peak TF32 Tensor 35.6 (71), Peak FP32 (non-Tensor) 35.6.
    "RTX 3090": {"bf16": 71.0, "fp16": 71.0, "tf32": 35.6, "fp32": 35.6},
}

_GPU_NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    # Full matches on the normalised name (lower case; 'nvidia', 'geforce', 'tesla' and
    # -, _, / dropped), so that a sibling card never borrows an entry: 'H100 NVL', 'A10',
    # 'RTX 4080', 'RTX 3090 Ti' and 'RTX 5070 Ti' match nothing.
    (r"h100( \d+gb)? pcie( \d+gb)?", "H100 PCIe"),      # NVIDIA H100 PCIe
    (r"h100( sxm\d?)?( \d+gb)?( hbm3)?", "H100 SXM"),    # NVIDIA H100 80GB HBM3
    (r"h200( sxm\d?)?( \d+gb)?( hbm3e)?", "H200"),       # NVIDIA H200
    (r"a100( sxm\d| pcie)?( \d+gb)?( pcie)?", "A100"),   # NVIDIA A100-SXM4-80GB, A100 80GB PCIe
    (r"a10g", "A10G"),                                   # NVIDIA A10G
    (r"rtx 5070", "RTX 5070"),                           # NVIDIA GeForce RTX 5070
    (r"rtx 4080 super", "RTX 4080 SUPER"),               # NVIDIA GeForce RTX 4080 SUPER
    (r"rtx 3090", "RTX 3090"),                           # NVIDIA GeForce RTX 3090
)

_DROPPED_NAME_WORDS = {"nvidia", "geforce", "tesla"}


def gpu_entry(gpu_name: str | None) -> str | None:
    """The ``PEAK_TFLOPS_DENSE`` key of a torch / NVML device name (case-insensitive), e.g.
    'NVIDIA H100 80GB HBM3' -> 'H100 SXM'; None for a card not in the table or None."""
    if gpu_name is None:
        return None
    words = re.sub(r"[-_/]", " ", gpu_name.lower()).split()
    normalised = " ".join(w for w in words if w not in _DROPPED_NAME_WORDS)
    for pattern, entry in _GPU_NAME_PATTERNS:
        if re.fullmatch(pattern, normalised):
            return entry
    return None


def peak_tflops(gpu_name: str | None, precision: str) -> float | None:
    """Dense peak TFLOP/s (10**12 FLOP per second) of ``gpu_name`` at ``precision``.

    Args:
        gpu_name: the device name torch or NVML reports ('NVIDIA GeForce RTX 4080 SUPER'), or
            a ``PEAK_TFLOPS_DENSE`` key; None (no GPU) gives None.
        precision: one of PRECISIONS ('bf16', 'fp16', 'tf32', 'fp32'); see ``precision_of``.

    Returns:
        TFLOP/s, or None for an unknown card, an unknown precision, or a precision the vendor
        gives no figure for.
    """
    entry = gpu_entry(gpu_name)
    if entry is None:
        return None
    return PEAK_TFLOPS_DENSE[entry].get(precision)


def precision_of(amp: str, tf32: bool) -> str:
    """The precision the matmuls of a trial run at: 'bf16' / 'fp16' under AMP, else 'tf32'
    when TF32 is on, else 'fp32'.

    Raises:
        ValueError: ``amp`` is not one of tuner.knobs.AMP_MODES.
    """
    if amp not in AMP_MODES:
        raise ValueError(f"amp={amp!r}: accepted values are {', '.join(AMP_MODES)}")
    if amp != "off":
        return amp
    return "tf32" if tf32 else "fp32"


# ------------------------------------------------------------------------------- utilisation

def blended_peak_tflops(gpu_name: str | None, precision: str,
                        conv_share: float | None) -> float | None:
    """The peak TFLOP/s a step's FLOP mix could run at, every op at its own peak.

    At 'fp32' (no AMP, no tf32 knob) a CUDA trial's convolutions still run in TF32: cuDNN's
    default, which every trial keeps (``tuner.trial.apply.CUDNN_ALLOW_TF32_DEFAULT``), while its
    matmuls run in FP32. A conv net judged against the FP32 peak alone would read an MFU up to
    7x too high on an H100 (494.7 against 66.9 TFLOP/s), above 100 % for a fast one. With a
    share s of the FLOPs in convolutions the peak is 1 / ((1 - s) / P_fp32 + s / P_tf32): the
    time the whole mix takes at peak. Other precisions, a share of None or 0, or a card without
    a TF32 figure: ``peak_tflops(gpu_name, precision)``.

    Args:
        gpu_name: as for ``peak_tflops``.
        precision: one of PRECISIONS (``precision_of``).
        conv_share: ``conv_flops_share`` of the workload (0-1), or None.
    """
    peak = peak_tflops(gpu_name, precision)
    tf32 = peak_tflops(gpu_name, "tf32")
    if precision != "fp32" or not conv_share or peak is None or tf32 is None:
        return peak
    return 1.0 / ((1.0 - conv_share) / peak + conv_share / tf32)


def utilisation(flops_per_sample: float | None, samples_per_sec: float | None,
                gpu_name: str | None, precision: str,
                peak_tflops_override: float | None = None,
                conv_share: float | None = None) -> dict[str, float | bool | None]:
    """Achieved TFLOP/s and model FLOPs utilisation (MFU, PaLM appendix B) of a measurement.

    Args:
        flops_per_sample: model FLOP per sample (``model_flops_per_sample``), or None.
        samples_per_sec: measured training throughput in samples per second, or None.
        gpu_name: device name for ``peak_tflops``; None on CPU.
        precision: one of PRECISIONS (``precision_of(knobs.amp, knobs.tf32)``).
        peak_tflops_override: peak TFLOP/s to use instead of the table (wins when given).
        conv_share: the convolutions' share of the FLOPs (``conv_flops_share``), for the peak
            at 'fp32' (``blended_peak_tflops``); None: the precision's peak alone.

    Returns:
        ``achieved_tflops``: flops_per_sample x samples_per_sec / 1e12 (TFLOP/s), None when
        either input is None. ``mfu_pct``: 100 x achieved_tflops / peak TFLOP/s, None when no
        peak is known (an unknown card, CPU) or nothing was achieved; never clipped.
        ``mfu_impossible``: True when mfu_pct > 100, which no real run reaches (the measurement
        was disturbed, or the peak is wrong); False otherwise.

    Raises:
        ValueError: ``peak_tflops_override`` is not a positive finite number.
    """
    if peak_tflops_override is not None and not (math.isfinite(peak_tflops_override)
                                                 and peak_tflops_override > 0):
        raise ValueError(f"peak_tflops_override={peak_tflops_override!r}: a positive TFLOP/s "
                         "figure is accepted")
    achieved_tflops = None
    if flops_per_sample is not None and samples_per_sec is not None:
        achieved_tflops = flops_per_sample * samples_per_sec / 1e12
    peak = peak_tflops_override if peak_tflops_override is not None else blended_peak_tflops(
        gpu_name, precision, conv_share)
    mfu_pct = None
    if achieved_tflops is not None and peak is not None:
        mfu_pct = 100.0 * achieved_tflops / peak
    return {"achieved_tflops": achieved_tflops, "mfu_pct": mfu_pct,
            "mfu_impossible": mfu_pct is not None and mfu_pct > 100.0}
