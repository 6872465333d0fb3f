"""Small workloads for engine tests: real files on disk, tiny model, and ways to fail.

Importable as ``tests.fake_workloads`` (tests/ is a package) so Ray workers can load them by
import path, exactly as a user's own workload is loaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.trial.harness import make_trainable
from tuner.workload import Workload
from tuner.workloads._data import write_once

N_FILES = 64
FEATURES = 16


class StepClock:
    """A stand-in for the ``time`` module of tuner.trial.harness (monkeypatched in its place):
    ``perf_counter`` and ``time`` move only when a test's steps move ``now``, so windows hold
    an exact number of steps however busy the machine is."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return 1e9 + self.now


class NpyFiles(Dataset):
    """Reads one ``.npy`` vector per sample: x (FEATURES,), y () float32."""

    def __init__(self, data_dir: Path, fail_at: int | None = None):
        self.files = sorted(Path(data_dir).glob("*.npy"))
        if not self.files:
            raise DataError(f"data directory {data_dir} holds no .npy files")
        self.fail_at = fail_at

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        if self.fail_at is not None and i == self.fail_at:
            raise DataError(f"sample file {self.files[i]} cannot be decoded")
        v = np.load(self.files[i])
        return torch.from_numpy(v[:FEATURES]), torch.tensor(v[FEATURES])


class Regression(Workload):
    """An MLP regressing a scalar from 16 features stored as .npy files."""

    name = "fake-regression"
    description = "MLP on .npy vectors (engine tests)"
    source = "tests"
    references = {"baseline": Knobs(batch_size=4), "recommended": Knobs(batch_size=16)}
    space = str(Path(__file__).with_name("tests-space.yaml"))  # the engine tests' own space
    learning_rate = 1e-3

    def build_model(self, scale: str) -> nn.Module:
        width = 32 if scale == "tiny" else 256
        return nn.Sequential(nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, 1))

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        return NpyFiles(data_dir)

    def prepare_default_data(self, cache_dir: Path, scale: str) -> Path:
        def write(tmp: Path) -> None:
            rng = np.random.default_rng(0)
            for i in range(N_FILES):
                np.save(tmp / f"{i:04d}.npy", rng.normal(size=FEATURES + 1).astype(np.float32))
        return write_once(Path(cache_dir) / "fake-regression-v1", write)

    def training_step(self, model: nn.Module, batch) -> torch.Tensor:
        x, y = batch  # (B, 16), (B,)
        return nn.functional.mse_loss(model(x).squeeze(-1), y)

    def sample_shape(self, scale: str) -> dict[str, list[int]]:
        return {"x": [FEATURES], "y": []}


class _Noisy:
    """The random part of ``SplitRegression``: features plus N(0, NOISE^2) noise drawn per
    sample (one decoded sample ``(x, y)``, or a batch of them on any device)."""

    NOISE = 0.1

    def __call__(self, sample):
        x, y = sample
        return x + self.NOISE * torch.randn(x.shape, device=x.device), y


class _SlowSamples(NpyFiles):
    """``NpyFiles`` whose every read takes ``delay_s`` and, with ``marker``, first writes that
    file (a test waits for it: the cache fill has begun)."""

    def __init__(self, data_dir: Path, delay_s: float, marker: str | None,
                 fail_at: int | None = None):
        super().__init__(data_dir, fail_at)
        self.delay_s, self.marker = delay_s, marker

    def __getitem__(self, i: int):
        import time
        if self.marker:
            Path(self.marker).touch()
        time.sleep(self.delay_s)
        return super().__getitem__(i)


class _Augmented(Dataset):
    """``dataset``'s items through ``augment`` (the loader path of a split workload)."""

    def __init__(self, dataset: Dataset, augment):
        self.dataset, self.augment = dataset, augment

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.augment(self.dataset[i])


class SplitRegression(Regression):
    """``Regression`` with a split sample path (``tuner.data``): decoded = the .npy vectors,
    random = per-sample noise on the features. Its own dataset is the two composed, so every
    data path draws samples from one distribution. Environment: ``TUNER_TEST_FILL_DELAY_S``
    (seconds per decoded sample, default 0) and ``TUNER_TEST_FILL_MARKER`` (a file touched
    when decoding starts) slow the fill down for the interruption tests."""

    name = "fake-split"

    def sample_path(self, data_dir: Path, scale: str):
        import os

        from tuner.data import SamplePath
        decoded = _SlowSamples(data_dir, float(os.environ.get("TUNER_TEST_FILL_DELAY_S", 0)),
                               os.environ.get("TUNER_TEST_FILL_MARKER"), self.fail_at)
        return SamplePath(decoded=decoded, augment=_Noisy(), augment_batch=_Noisy())

    fail_at: int | None = None

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        return _Augmented(NpyFiles(data_dir), _Noisy())


class BrokenSplit(SplitRegression):
    """``SplitRegression`` whose fourth sample fails to decode during the cache fill."""

    name = "fake-broken-split"
    fail_at = 3

    def build_dataset(self, data_dir: Path, scale: str) -> Dataset:
        return NpyFiles(data_dir)  # the loader path: the check reads sample 0 only


class FakeOOM(Regression):
    """Raises torch.OutOfMemoryError when batch_size > OOM_ABOVE (a device that holds 16)."""

    name = "fake-oom"
    OOM_ABOVE = 16

    def training_step(self, model, batch):
        if batch[0].shape[0] > self.OOM_ABOVE:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {batch[0].shape[0]} MiB (fake)")
        return super().training_step(model, batch)


class BrokenData(Regression):
    """A sample that fails to decode inside a DataLoader worker."""

    name = "fake-broken"

    def build_dataset(self, data_dir, scale):
        return NpyFiles(data_dir, fail_at=3)


class SlowCeiling(Regression):
    """Slow only on a batch it has seen before: the compute-only ceiling cycles 4 resident
    batches, so its ceiling comes out below the pipeline it bounds (a disturbed measurement,
    injected). Its test measures 1-s windows: the 0.3-s sleep keeps steps under half a window,
    and a busy machine would have to slow the pipeline's own step (loading .npy files in the
    main process, a few ms) by more than that to hide it."""
    name = "fake-slow-ceiling"
    SLEEP_S = 0.3

    def training_step(self, model, batch):
        import time
        seen = self.__dict__.setdefault("_seen", set())
        if id(batch[0]) in seen:
            time.sleep(self.SLEEP_S)
        seen.add(id(batch[0]))
        return super().training_step(model, batch)


class Paced(Regression):
    """Steps paced by the clock (the time-budget and early-stopping tests): each micro-batch
    takes ``STEP_S`` whatever its size, so samples/sec is proportional to batch_size (batch 4
    is 5x slower than batch 20); a batch of ``LONG_FROM`` or more spends ``LONG_FIRST_STEP_S``
    in its trial's first step, as a long compile does. References: baseline 20 (fast) and
    recommended 4 (5x slower; a reference is never pruned)."""

    name = "fake-paced"
    references = {"baseline": Knobs(batch_size=20), "recommended": Knobs(batch_size=4)}
    STEP_S = 0.05
    LONG_FROM = 32
    LONG_FIRST_STEP_S = 15.0

    def training_step(self, model, batch):
        import time
        if batch[0].device.type == "meta":  # the run's FLOP count (tuner.trial.flops): no time
            return super().training_step(model, batch)
        if not getattr(model, "paced_first_step_done", False):  # a new model per trial
            model.paced_first_step_done = True
            if batch[0].shape[0] >= self.LONG_FROM:
                time.sleep(self.LONG_FIRST_STEP_S)
        time.sleep(self.STEP_S)
        return super().training_step(model, batch)


class ClockedPaced(Paced):
    """``Paced`` on a ``StepClock``: each micro-batch moves ``clock`` by ``STEP_S`` (and the
    long first step by ``LONG_FIRST_STEP_S``) instead of sleeping, so its rates, warm-up caps
    and deadlines are exact however busy the machine is."""

    name = "fake-clocked-paced"

    def __init__(self, clock: StepClock):
        self.clock = clock

    def training_step(self, model, batch):
        if batch[0].device.type == "meta":
            return Regression.training_step(self, model, batch)
        if not getattr(model, "paced_first_step_done", False):
            model.paced_first_step_done = True
            if batch[0].shape[0] >= self.LONG_FROM:
                self.clock.now += self.LONG_FIRST_STEP_S
        self.clock.now += self.STEP_S
        return Regression.training_step(self, model, batch)


class PacedLong(Paced):
    """``Paced`` whose every trial spends 600 s in its first step: a compile longer than the
    budget test's budget (twice the start-up measured just before it, at least 20 s), so the
    deadline finds its trial inside that step however long the trial process took to start
    (with a 15-s step, a trial that started in 5 s ended its step at a 20-s deadline)."""

    name = "fake-paced-long"
    LONG_FROM = 0
    LONG_FIRST_STEP_S = 600.0


class SteepPaced(Paced):
    """``Paced`` whose batches under 20 also take longer per step: each step of a trial starts
    ``STEP_S`` x max(1, 20 / batch) after the one before (the sleep takes up what the step
    itself cost), so samples/sec goes as batch_size squared, batch 5 16x slower than batch 20
    and batch 4 25x, however busy the machine is while a step costs less than its period (a
    sleep per step instead lets a loaded machine's per-step cost narrow a 16x gap to ~6x and
    widen the window-to-window noise, and with it the early-stopping margin, past it).
    ``STEP_S`` is 0.2 s, four times ``Paced``'s: beside another suite (load 8-14 on 2 cores)
    a step of batch 20 cost more than a 0.05-s period, its windows scattered and the margin
    passed the 16x gap in 3 of 14 runs; a step costs far less than 0.2 s at any such load."""

    name = "fake-steep-paced"
    STEP_S = 0.2

    def training_step(self, model, batch):
        import time
        if batch[0].device.type == "meta":
            return Regression.training_step(self, model, batch)
        period = self.STEP_S * max(1.0, 20 / batch[0].shape[0])
        last = getattr(model, "paced_step_at", None)  # a new model per trial
        time.sleep(period if last is None else max(0.0, last + period - time.perf_counter()))
        model.paced_step_at = time.perf_counter()
        return Regression.training_step(self, model, batch)


class RankOOM(Regression):
    """Rank 1 of a data-parallel trial raises torch.OutOfMemoryError when batch_size > 16
    (rank 0 and one-rank trials never do): the baseline (32) fails there, the recommended (8)
    runs."""

    name = "fake-rank-oom"
    references = {"baseline": Knobs(batch_size=32), "recommended": Knobs(batch_size=8)}

    def training_step(self, model, batch):
        import torch.distributed as dist
        if (batch[0].shape[0] > 16 and dist.is_available() and dist.is_initialized()
                and dist.get_rank() == 1):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64 MiB (fake, "
                                         "rank 1)")
        return super().training_step(model, batch)


regression = Regression()
rank_oom = RankOOM()
paced = Paced()
steep_paced = SteepPaced()
paced_long = PacedLong()
split = SplitRegression()
broken_split = BrokenSplit()
oom = FakeOOM()
broken = BrokenData()
slow_ceiling = SlowCeiling()
trainable = make_trainable(regression)
