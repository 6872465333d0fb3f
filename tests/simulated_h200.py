"""A ddpm-like workload whose step costs are those measured for ddpm on one NVIDIA H200
(2026-11-27, torch 2.11, 16-CPU host; the H100 run of 2026-11-23 where the H200's is missing),
for CPU runs on the simulated card of ``tests.simulated_gpu``::

    TUNER_DEVICE_HOOK=tests.simulated_gpu:install \\
        python -m tuner run --workload tests.simulated_h200:ddpm --device cuda --time-budget 300

The training step sleeps what the card would take, reading the knobs the harness applied:
autocast's state for ``"cuda"`` (``torch.is_autocast_enabled``/``get_autocast_dtype``), the
layout of the model's 4-D weight (the harness makes it ``channels_last``; the uint8 input is
left as it is), ``torch.backends.cudnn.benchmark``, the matmul precision (``tf32``), the
fused optimizer, and the compile mode ``torch.compile`` marked. The host side (decoding,
augmentation, DataLoader workers on this machine's ``HOST_CORES``) is ``tests.landscapes``'.

The cost model (seconds, samples, MiB); "measured" figures are the H200's of 2026-11-27:

* step time ``T(b) = max(overhead, per_sample x b)``: a flat 45 ms per step (measured 44.9-47.1
  ms from batch 8 to 104, fp16/bf16) up to the knee, then 0.189 ms a sample (measured: 123 ms at
  batch 652, bf16, channels_last: the 5,304 samples/sec machine-compute ceiling); knee ~batch 240.
  ``channels_last`` off: per-sample x 1/0.8, ``fused_optimizer``: overhead x 0.85 (both guesses,
  ``tests.landscapes``' factors); fp32: per-sample x 2 (convolutions keep cuDNN's TF32), x 1.9
  with the ``tf32`` knob (guesses; no fp32 ddpm figure on a card exists).
* the first step of a model: 0.9 s (``FIRST_STEP_S``), plus
  10.0 s when ``cudnn.benchmark`` meets a (batch, precision, layout) shape new to the process
  (measured 12.19 s first step; 2.16 s for the same shapes later in the process).
* ``torch.compile``: 90 s at the first step (H100: ~80 s for the ddpm U-Net, default mode;
  "~90 s" on the H200); ``max-autotune`` x 2 (guess). Compiled: per-sample x 1/1.65 (H100
  measured: 7,982 vs 4,851 samples/sec at batch 1,024); ``reduce-overhead`` (CUDA graphs) also
  cuts the per-step overhead to 30 % (guess).
* memory ``990 + 26.5 x b`` MiB with AMP (measured peaks 1,198 at batch 8, 1,824 at 32 fp16,
  3,778 at 104 bf16), per-sample x 2 in fp32 (guess): charged to the card's ledger every step,
  which raises CUDA's out-of-memory error past ``--max-memory``.
* host: decoding 0.73 ms and host augmentation 0.67 ms a sample (measured: 716 samples/sec per
  loader worker at batch 32, ~1,495 per cache worker, a guess); 2 ms of device augmentation
  a batch on the ``device`` path (guess); the seed dataset's 652 samples.
* process start: ``tests.simulated_gpu.CONTEXT_READY_S``; the memory probe's cost is its steps'
  (a new model at each size, ``FIRST_STEP_S`` each, then its timed steps).
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

from tests import landscapes, simulated_gpu
from tests.landscapes import HOST_CORES, Landscape, Optimum, Shape
from tuner.knobs import Knobs

FIRST_STEP_S = 0.9
"""A model's first step on the card without DataLoader workers: (17 s probe - 8 s process
start) / 9 batch sizes, each size's own 2 steps included (measured). A trial's first step was
1.81-2.16 s: its workers' start, which this host pays for real, makes the rest."""
CUDNN_AUTOTUNE_S = 10.0
"""The first step's extra when cuDNN benchmark meets a new shape: 12.19 s measured, against
2.16 s at the same shapes later in the same process (both with the trial's workers)."""
COMPILE_S = {"default": 90.0, "reduce-overhead": 90.0, "max-autotune": 180.0}
COMPILED_COMPUTE = 1 / 1.65
REDUCE_OVERHEAD = 0.3
FP32_COMPUTE = 2.0
FP32_TF32_COMPUTE = 1.9
FP32_MEMORY = 2.0

H200_DDPM = Shape(overhead_s=0.045, per_sample_s=0.189e-3 / landscapes.CHANNELS_LAST_COMPUTE,
                  decode_s=0.00073, augment_s=0.00067, augment_batch_s=0.002, samples=652,
                  memory_base_mb=990.0, memory_per_sample_mb=26.5,
                  memory_limit_mb=simulated_gpu.TOTAL_MB)


def applied_precision() -> str:
    """The precision the harness put in effect for ``"cuda"``: 'bf16', 'fp16', 'tf32' (fp32
    with TF32 matmuls) or 'fp32'."""
    if torch.is_autocast_enabled("cuda"):
        return "bf16" if torch.get_autocast_dtype("cuda") == torch.bfloat16 else "fp16"
    return "tf32" if torch.get_float32_matmul_precision() != "highest" else "fp32"


def is_channels_last(t: torch.Tensor) -> bool:
    """Whether a 4-D tensor is laid out channels_last (and not also contiguous)."""
    return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


class SimulatedH200(Landscape):
    """ddpm on the simulated H200 (the module's docstring gives the cost model)."""

    name = "simulated-h200-ddpm"
    description = "sleeps costed as ddpm on one H200 (tests: the simulated card)"
    source = "tests: the H200 ddpm measurements of 2026-11-27"
    shape = H200_DDPM
    first_step_s = FIRST_STEP_S
    compile_s = COMPILE_S
    """Seconds of a first compiled step by compile mode."""
    compiled_compute = COMPILED_COMPUTE
    channels_last_compute = landscapes.CHANNELS_LAST_COMPUTE
    fp32_compute, tf32_compute, fp32_memory = FP32_COMPUTE, FP32_TF32_COMPUTE, FP32_MEMORY
    """Per-sample compute (and memory) in fp32 relative to AMP, and in fp32 with the tf32
    knob: one workload's costs (``tests.simulated_builtins`` sets the others')."""

    def __init__(self, memory_limit_mb: float = simulated_gpu.TOTAL_MB):
        self.memory_limit_mb = memory_limit_mb

    # ------------------------------------------------------------------ the step

    def training_step(self, model: nn.Module, batch) -> torch.Tensor:
        image, target = batch
        loss = nn.functional.mse_loss(model(image.float() / 255).mean(dim=(1, 2, 3)), target)
        if image.device.type == "meta":  # the run's FLOP count: no time
            return loss
        precision = applied_precision()
        channels_last = is_channels_last(model.weight)
        fused = getattr(model.weight, "landscape_fused", False)
        mode = getattr(model, "sim_compile_mode", "off")
        b = image.shape[0]
        simulated_gpu.allocate(self.memory_mb_at(b, precision))
        one_off = self.one_off_s(model, b, precision, channels_last, mode)
        step_s = self.step_time_s(b, precision, channels_last, fused, mode)
        model.sim_last_step = {"precision": precision, "channels_last": channels_last,
                               "fused": fused, "compile": mode, "step_s": step_s,
                               "one_off_s": one_off}
        self._pace(model, step_s, one_off)
        return loss

    def one_off_s(self, model: nn.Module, b: int, precision: str, channels_last: bool,
                  mode: str) -> float:
        """This step's one-off seconds: the model's first step (and its compile), cuDNN's
        autotuning at a shape new to the process. Marks them paid."""
        seconds = 0.0
        if not getattr(model, "sim_started", False):
            model.sim_started = True
            seconds += self.first_step_s + self.compile_s.get(mode, 0.0)
        shape = (b, precision, channels_last)
        if torch.backends.cudnn.benchmark and shape not in simulated_gpu.STATE.cudnn_shapes:
            simulated_gpu.STATE.cudnn_shapes.add(shape)
            seconds += CUDNN_AUTOTUNE_S
        return seconds

    def _pace(self, model: nn.Module, step_s: float, one_off_s: float) -> None:
        """Sleep so that this step ends ``step_s`` (+ host work in this process) after the
        previous one's modelled end (or the last ``synchronize``, if later), or ``step_s +
        one_off_s`` after now when it has one-offs (``tests.landscapes``' pacing: the real
        cost of a step is absorbed inside ``T``)."""
        last = getattr(model, "landscape_step_end", None)
        if last is not None:  # a synchronize emptied the queue: no time banked before it
            last = max(last, simulated_gpu.STATE.synced_at)
        now = time.perf_counter()
        if last is None or one_off_s:
            if one_off_s:
                simulated_gpu.STATE.charges.append(("first step", one_off_s))
            time.sleep(step_s + one_off_s * simulated_gpu.one_off_scale())
            end = time.perf_counter()
        else:
            end = max(now, last + step_s + landscapes._host_s)
            if end > now:
                time.sleep(end - now)
        landscapes._host_s = 0.0
        model.landscape_step_end = end
        landscapes._clock.update(pid=os.getpid(), due=end)

    # ------------------------------------------------------------------ the model

    def step_time_s(self, b: int, precision: str, channels_last: bool, fused: bool,
                    mode: str = "off") -> float:
        """Modelled steady step time ``T(b)``, s."""
        s = self.shape
        overhead = s.overhead_s * (landscapes.FUSED_OVERHEAD if fused else 1.0)
        per_sample = s.per_sample_s * (self.channels_last_compute if channels_last else 1)
        per_sample *= {"fp32": self.fp32_compute, "tf32": self.tf32_compute}.get(precision, 1.0)
        if mode != "off":
            per_sample *= self.compiled_compute
            overhead *= REDUCE_OVERHEAD if mode == "reduce-overhead" else 1.0
        return max(overhead, per_sample * b)

    def memory_mb_at(self, b: int, precision: str) -> float:
        """Modelled device memory of a step at batch ``b``, MiB."""
        per_sample = self.shape.memory_per_sample_mb * (
            self.fp32_memory if precision in ("fp32", "tf32") else 1.0)
        return self.shape.memory_base_mb + per_sample * b

    def max_batch_at(self, precision: str) -> int:
        """The largest batch whose memory fits ``memory_limit_mb`` (and the dataset)."""
        per_sample = self.memory_mb_at(1, precision) - self.memory_mb_at(0, precision)
        fits = (self.memory_limit_mb - self.memory_mb_at(0, precision)) // per_sample
        return int(max(0, min(self.shape.samples, fits)))

    def samples_per_sec(self, knobs: Knobs) -> float | None:
        """Modelled steady samples/sec of ``knobs`` on the card (None: out of memory)."""
        precision = knobs.amp if knobs.amp != "off" else ("tf32" if knobs.tf32 else "fp32")
        if knobs.batch_size > self.max_batch_at(precision):
            return None
        return self._rate(knobs.batch_size, knobs.data_path, knobs.num_workers,
                          self.step_time_s(knobs.batch_size, precision, knobs.channels_last,
                                           knobs.fused_optimizer, knobs.compile))

    def _rate(self, b: int, path: str, workers: int, step_s: float) -> float:
        """samples/sec of batch ``b`` on ``path`` with ``workers`` at step time ``step_s``."""
        s = self.shape
        if path == "device":
            return b / (step_s + s.augment_batch_s)
        host = s.augment_s + (s.decode_s if path == "loader" else 0.0)
        if workers == 0:
            return b / (step_s + b * host)
        return min(b / step_s, min(workers, HOST_CORES) / host)

    def machine_limit(self) -> Optimum:
        """The best modelled eager configuration (compile off, as a 300-s budget leaves it:
        the 5,304 samples/sec measured was the eager limit too): bf16, channels_last, fused,
        every path and worker count, every batch that fits."""
        best = (0.0, 0, "device", 0)
        for path in ("device", "cache", "loader"):
            for workers in ([0] if path == "device" else range(HOST_CORES + 1)):
                for b in range(1, self.max_batch_at("bf16") + 1):
                    rate = self._rate(b, path, workers, self.step_time_s(b, "bf16", True, True))
                    if rate > best[0] * (1 + 1e-9):
                        best = (rate, b, path, workers)
        rate, b, path, workers = best
        extra = {"persistent_workers": True} if workers else {}
        return Optimum(rate, Knobs(batch_size=b, data_path=path, num_workers=workers, amp="bf16",
                                   channels_last=True, fused_optimizer=True,
                                   cudnn_benchmark=True, **extra))

    def doubling_answer(self) -> Optimum:
        """Doubling the recommended's batch until it no longer fits (Lightning's
        ``BatchSizeFinder`` in power mode), the recommended's other knobs on CUDA with this
        host's workers."""
        knobs = self.references["recommended"].clamp("cuda")[0]
        knobs = knobs.replace(num_workers=min(knobs.num_workers, HOST_CORES))
        b = knobs.batch_size
        while 2 * b <= self.max_batch_at(knobs.amp):
            b *= 2
        knobs = knobs.replace(batch_size=b)
        return Optimum(self.samples_per_sec(knobs), knobs)


ddpm = SimulatedH200()
"""The workload ``tests.simulated_h200:ddpm``."""
