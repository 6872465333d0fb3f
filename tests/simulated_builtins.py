"""The other built-in workloads on the simulated H200 (``tests.simulated_gpu``): each sleeps
the step costs measured for that built-in, searches its own space from its own references,
with ``tests.simulated_h200``'s cost model (knee, compute per sample, first step, cuDNN's
autotuning at a new shape, compile, memory per sample; its module docstring)::

    TUNER_DEVICE_HOOK=tests.simulated_gpu:install python -m tuner run \\
        --workload tests.simulated_builtins:chargpt --device cuda --time-budget 55 \\
        --trials 3 --confirm 0 --probe off

Sources, "H100" the compute-only figures of one H100 SXM on 2026-11-23 (bf16, channels_last
for conv nets, fused AdamW, cuDNN benchmark, TF32; the H200 has the same compute die, and its
ddpm limit, 5,304 samples/sec, was within 10 % of the H100's 4,851), "H200" the acceptance
rows of 2026-11-27. The step is ``max(overhead, per-sample x batch)``: the overhead is the
step time at the smaller measured batch, the per-sample compute the larger one's step over
its batch. "Guess" marks a figure no measurement gives.

==============  ==========================  ===========================  ================
workload        step (H100)                 memory (H200 peak)           compile (H100)
==============  ==========================  ===========================  ================
chargpt         11.5 ms at 64, 14.3 at 128  11,248 MiB at 256 fp32       14 s, x1.35
headpose        34.4 ms at 128, 64.2 at 256  7,486 MiB at 64 fp32        guess 60 s, x1.2
classifier299   60.7 ms at 128, 115 at 256  3,036 MiB at 16 fp32         guess 60 s, x1.2
segmentation3d  35 ms at 1, 76 at 4         guess 6,000 MiB a sample     guess 120 s, x1.2
classifier      6.9 ms at 16 (H200 fp32),   1,150 MiB at 16 fp32         21 s, x1.36
                12.4 at 512
==============  ==========================  ===========================  ================

Host work per sample (this host's DataLoader workers do it, ``tests.landscapes``): from the
H200 references, the step over the compute: chargpt 0.05 ms (token slices), headpose 6 ms (4
workers at 650 samples/sec: JPEG decode and jitter), classifier299 1.2 ms (batch 16 without
workers, 80.2 ms a step over a 60.7-ms overhead), segmentation3d 37 ms (15 workers at 404
samples/sec on an H100), classifier 0.58 ms (16.1 ms a step over 6.9). fp32 per-sample
compute: chargpt 4.0x bf16 (the H200 baseline: 115.8 ms at 256 against 0.112 ms a sample),
conv nets 2x (cuDNN keeps TF32 convolutions), with the tf32 knob 2.0x and 1.9x (guesses).
First steps as the H200 rows read (chargpt 0.53 s, headpose 1.2, classifier299 0.79,
classifier 0.48; segmentation3d 1.5, a guess).
"""

from __future__ import annotations

from tests import simulated_gpu
from tests.landscapes import Shape
from tests.simulated_h200 import SimulatedH200
from tuner.knobs import Knobs


def _shape(overhead_ms: float, per_sample_ms: float, host_ms: float, samples: int,
           base_mb: float, per_sample_mb: float, channels_last: bool = True) -> Shape:
    """A built-in's step and memory: ``per_sample_ms`` as measured with channels_last (a
    conv net's figure is stored without it, as ``SimulatedH200`` reads it), ``host_ms`` of
    host work a sample (decode 70 %, augmentation 30 %, a guess), AMP memory."""
    per_sample_s = per_sample_ms / 1000 / (SimulatedH200.channels_last_compute
                                           if channels_last else 1.0)
    return Shape(overhead_s=overhead_ms / 1000, per_sample_s=per_sample_s,
                 decode_s=0.7 * host_ms / 1000, augment_s=0.3 * host_ms / 1000,
                 augment_batch_s=0.002, samples=samples, memory_base_mb=base_mb,
                 memory_per_sample_mb=per_sample_mb, memory_limit_mb=simulated_gpu.TOTAL_MB)


class SimulatedBuiltin(SimulatedH200):
    """One built-in on the simulated H200: ``SimulatedH200``'s cost model with the built-in's
    figures (the module docstring), space and references."""

    def __init__(self, name: str, shape: Shape, references: dict[str, Knobs], *,
                 first_step_s: float, compile_s: float, compiled_speedup: float,
                 fp32_compute: float = 2.0, tf32_compute: float = 1.9,
                 channels_last: bool = True,
                 memory_limit_mb: float = simulated_gpu.TOTAL_MB):
        super().__init__(memory_limit_mb)
        self.name = f"simulated-h200-{name}"
        self.space = name
        self.description = f"sleeps costed as {name} on one H200 (tests: the simulated card)"
        self.source = f"tests: the {name} measurements of 2026-11-23 (H100) and 2026-11-27 (H200)"
        self.shape = shape
        self.references = references
        self.first_step_s = first_step_s
        self.compile_s = {"default": compile_s, "reduce-overhead": compile_s,
                          "max-autotune": 2 * compile_s}
        self.compile_s_hint = compile_s
        self.compiled_compute = 1 / compiled_speedup
        self.fp32_compute, self.tf32_compute = fp32_compute, tf32_compute
        self.channels_last_compute = SimulatedH200.channels_last_compute if channels_last \
            else 1.0


chargpt = SimulatedBuiltin(
    "chargpt", _shape(11.5, 0.112, 0.05, 4096, 600.0, 21.0, channels_last=False),
    {"baseline": Knobs(batch_size=256, num_workers=2),
     "recommended": Knobs(batch_size=128, num_workers=4, persistent_workers=True,
                          prefetch_factor=2, pin_memory=True, non_blocking=True,
                          compile="default", tf32=True, fused_optimizer=True,
                          cudnn_benchmark=True)},
    first_step_s=0.53, compile_s=14.0, compiled_speedup=1.35, fp32_compute=4.0,
    tf32_compute=2.0, channels_last=False)
"""``tests.simulated_builtins:chargpt``: nanoGPT's character model (sequences of 256 tokens);
its references are ``tuner.workloads.chargpt``'s. Memory: 11,248 MiB at 256 in fp32 is ~42
MiB a sequence past a 600-MiB base (a guess), half of it with AMP."""

headpose = SimulatedBuiltin(
    "headpose", _shape(34.4, 0.251, 6.0, 1024, 600.0, 54.0),
    {"baseline": Knobs(batch_size=64, num_workers=4),
     "recommended": Knobs(batch_size=128, num_workers=8, persistent_workers=True,
                          prefetch_factor=4, pin_memory=True, non_blocking=True, amp="fp16")},
    first_step_s=1.2, compile_s=60.0, compiled_speedup=1.2)
"""``tests.simulated_builtins:headpose``: ResNet-50 on 224-px face crops; its references are
``tuner.workloads.headpose``'s. Memory: 7,486 MiB at 64 in fp32, ~108 MiB a sample past a
600-MiB base, half with AMP."""

CLASSIFIER_REFERENCES = {
    "baseline": Knobs(batch_size=16, num_workers=0),
    "recommended": Knobs(batch_size=16, num_workers=4, prefetch_factor=2, pin_memory=True,
                         persistent_workers=True, cudnn_benchmark=True)}
"""The references of ``tuner.workloads.classifier`` (both image sizes): batch 16, the guide's
loader."""

classifier299 = SimulatedBuiltin(
    "classifier299", _shape(60.7, 0.45, 1.2, 320, 600.0, 76.0),
    CLASSIFIER_REFERENCES,
    first_step_s=0.79, compile_s=60.0, compiled_speedup=1.2)
"""``tests.simulated_builtins:classifier299``: the 299-px classifier on 320 samples; references
as ``tuner.workloads.classifier``'s (batch 16; the guide's loader). Memory: 3,036 MiB at 16 in
fp32, ~152 MiB a sample past a 600-MiB base, half with AMP."""

segmentation3d = SimulatedBuiltin(
    "segmentation3d", _shape(35.0, 19.0, 37.0, 64, 2000.0, 6000.0),
    {"baseline": Knobs(batch_size=1, num_workers=1, prefetch_factor=1,
                       persistent_workers=False),
     "recommended": Knobs(batch_size=4, num_workers=6, prefetch_factor=2,
                          persistent_workers=True)},
    first_step_s=1.5, compile_s=120.0, compiled_speedup=1.2)
"""``tests.simulated_builtins:segmentation3d``: the 3-D U-Net on 72x136x136 patches; its
references are ``tuner.workloads.segmentation3d``'s."""

classifier = SimulatedBuiltin(
    "classifier", _shape(6.9, 0.0242, 0.58, 800, 1000.0, 5.0),
    CLASSIFIER_REFERENCES,
    first_step_s=0.48, compile_s=21.0, compiled_speedup=1.36)
"""``tests.simulated_builtins:classifier``: the 800-sample classifier; 1,150 MiB at 16 in fp32
(~10 MiB a sample past a 1,000-MiB base, a guess: half with AMP)."""

BUILTINS = {w.space: w for w in (chargpt, headpose, classifier299, segmentation3d, classifier)}
"""Built-in name -> its simulated workload (ddpm's is ``tests.simulated_h200:ddpm``)."""
