"""The process-wide state of a trial (``apply.trial_state``) is put back after it, also after a
failure, and ``failures.classify`` names how a failed trial ended."""

from __future__ import annotations

import pytest
import torch

from tests.fake_workloads import Regression, oom
from tuner.knobs import Knobs
from tuner.status import Status
from tuner.trial import apply
from tuner.trial.apply import trial_state
from tuner.trial.failures import classify
from tuner.trial.measure import LimitExceeded
from tuner.trial.validate import train_loop


@pytest.fixture
def saved_state():
    """torch threads and cuDNN/TF32 flags as they were before the test, put back after it."""
    threads = torch.get_num_threads()
    legacy = (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(),
              torch.backends.cudnn.allow_tf32)
    new = {s: o.fp32_precision for s in apply.FP32_PRECISION_SETTINGS
           if (o := apply._fp32_precision_owner(s)) is not None}
    yield
    torch.set_num_threads(threads)
    torch.backends.cudnn.benchmark = legacy[0]
    torch.set_float32_matmul_precision(legacy[1])
    torch.backends.cudnn.allow_tf32 = legacy[2]
    for setting, value in new.items():
        apply._fp32_precision_owner(setting).fp32_precision = value


def test_flags_are_set_inside_and_restored_after_a_trial_that_raises(saved_state):
    """On a CUDA device the knobs set the flags (nothing here needs a GPU: no memory limit)."""
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    knobs = Knobs(batch_size=8, cudnn_benchmark=True, tf32=True)
    with pytest.raises(RuntimeError, match="trial failed"):
        with trial_state(knobs, torch.device("cuda")) as state:
            assert torch.backends.cudnn.benchmark is True
            assert torch.backends.cuda.matmul.allow_tf32 is True
            assert state.limit_mb is None
            raise RuntimeError("trial failed")
    assert torch.backends.cudnn.benchmark is False
    assert torch.backends.cuda.matmul.allow_tf32 is False


@pytest.mark.parametrize("tf32", [False, True])
def test_tf32_switches_matmuls_and_convolutions_keep_torchs_default(saved_state, tf32):
    """A configuration without TF32 (every reference) runs as an untouched script does: cuDNN
    convolutions in TF32 (torch's default), matmuls in full fp32."""
    torch.backends.cuda.matmul.allow_tf32 = not tf32
    torch.backends.cudnn.allow_tf32 = False                      # left so by an earlier trial
    with trial_state(Knobs(batch_size=8, tf32=tf32), torch.device("cuda")):
        assert torch.backends.cuda.matmul.allow_tf32 is tf32
        assert torch.backends.cudnn.allow_tf32 is True
    assert torch.backends.cuda.matmul.allow_tf32 is (not tf32)
    assert torch.backends.cudnn.allow_tf32 is False


NEW_PRECISION_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")


def fp32_precision() -> dict[str, str]:
    return {s: o.fp32_precision for s in apply.FP32_PRECISION_SETTINGS
            if (o := apply._fp32_precision_owner(s)) is not None}


@pytest.mark.skipif(not NEW_PRECISION_API, reason="torch < 2.9 has no fp32_precision settings")
@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("tf32", [False, True])
def test_a_script_using_torchs_new_precision_api_keeps_its_settings(regression_data, saved_state,
                                                                    device, tf32):
    """A workload that sets TF32 the way torch 2.9's notes say (``fp32_precision``), which
    makes torch refuse the legacy reads (``allow_tf32`` raises; ``read_precision_flags``
    reads either API), trains, and finds its settings as it left them after the
    trial; inside a CUDA trial every reader agrees, Lightning's included."""
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="mix of the legacy and new"):
        torch.backends.cudnn.allow_tf32                           # what torch does
    before = fp32_precision()
    with trial_state(Knobs(batch_size=8, tf32=tf32), torch.device(device)):
        if device == "cuda":
            assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")
            assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")
            assert torch.backends.cudnn.allow_tf32 is True        # torch's default
            assert torch.backends.cudnn.conv.fp32_precision == "tf32"
        v = train_loop(Regression(), Knobs(batch_size=8), scale="tiny", device="cpu",
                       data_dir=regression_data, steps=2, warmup_steps=1)
        assert v.steps == 2
    assert fp32_precision() == before


@pytest.mark.skipif(not NEW_PRECISION_API, reason="torch < 2.9 has no fp32_precision settings")
def test_legacy_precision_and_what_its_setter_changes_elsewhere_are_put_back(saved_state):
    """``set_float32_matmul_precision("medium")`` (the user's) also sets CPU matmuls to bf16
    (``mkldnn.matmul``); a trial setting matmuls to full fp32 puts both back after it."""
    torch.set_float32_matmul_precision("medium")
    before = fp32_precision()
    assert before["mkldnn.matmul"] == "bf16"
    with trial_state(Knobs(batch_size=8, tf32=False), torch.device("cuda")):
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.get_float32_matmul_precision() == "medium"
    assert fp32_precision() == before


def test_cpu_flags_changed_by_the_trial_are_restored(saved_state):
    torch.backends.cudnn.benchmark = True
    with pytest.raises(ValueError):
        with trial_state(Knobs(batch_size=8), torch.device("cpu")):
            torch.backends.cudnn.benchmark = False                 # e.g. by the workload
            raise ValueError("boom")
    assert torch.backends.cudnn.benchmark is True


def test_threads_are_set_on_cpu_and_restored_after_a_trial_that_raises(saved_state):
    torch.set_num_threads(3)
    with pytest.raises(ValueError):
        with trial_state(Knobs(batch_size=8), torch.device("cpu"), threads=1) as state:
            assert torch.get_num_threads() == 1
            assert state.threads == 1
            raise ValueError("boom")
    assert torch.get_num_threads() == 3


def test_threads_are_left_alone_without_a_count_or_off_cpu(saved_state):
    torch.set_num_threads(3)
    with trial_state(Knobs(batch_size=8), torch.device("cpu")) as state:
        assert torch.get_num_threads() == 3 and state.threads == 3
    with trial_state(Knobs(batch_size=8), torch.device("cuda"), threads=1) as state:
        assert torch.get_num_threads() == 3 and state.threads == 3
    assert torch.get_num_threads() == 3


@pytest.mark.parametrize("mode, resets", [("off", 0), ("default", 1)])
def test_compiler_caches_are_reset_only_after_compiling(monkeypatch, mode, resets):
    calls = []
    monkeypatch.setattr(torch.compiler, "reset", lambda: calls.append(1))
    with pytest.raises(ValueError):
        with trial_state(Knobs(batch_size=8, compile=mode), torch.device("cpu")):
            raise ValueError("boom")
    assert len(calls) == resets


def test_memory_is_freed_on_exit(monkeypatch):
    freed = []
    monkeypatch.setattr(apply, "free_device_memory", lambda: freed.append("device"))
    monkeypatch.setattr(apply, "release_host_memory", lambda: freed.append("host"))
    with pytest.raises(ValueError):
        with trial_state(Knobs(batch_size=8), torch.device("cpu")):
            raise ValueError("boom")
    assert freed == ["device", "host"]


@pytest.mark.parametrize("exc, device, expected", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "cuda",
     (Status.OOM, "device", "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")),
    (torch.OutOfMemoryError("out of memory (fake)"), "cpu",
     (Status.OOM, "host", "OutOfMemoryError: out of memory (fake)")),
    (MemoryError("no room"), "cuda", (Status.OOM, "host", "MemoryError: no room")),
    (LimitExceeded("peak host memory 900 MB is over the limit of 800 MB", "host"), "cpu",
     (Status.OVER_LIMIT, "host",
      "LimitExceeded: peak host memory 900 MB is over the limit of 800 MB")),
    (LimitExceeded("peak device memory over", "device"), "cuda",
     (Status.OVER_LIMIT, "device", "LimitExceeded: peak device memory over")),
    (RuntimeError("DataLoader worker (pid 1) is killed by signal: Killed."), "cpu",
     (Status.ERROR, None,
      "DataLoader worker failure: RuntimeError: DataLoader worker (pid 1) is killed by signal: "
      "Killed.")),
    (ValueError("mat1 and mat2 shapes cannot be multiplied"), "cpu",
     (Status.ERROR, None, "ValueError: mat1 and mat2 shapes cannot be multiplied")),
])
def test_classify(exc, device, expected):
    status, memory, error = classify(exc, torch.device(device))
    assert (status, memory, error) == expected
    assert isinstance(status, Status)


class ThreadsSeen(Regression):
    """Records torch's thread count at each training step."""

    name = "fake-threads-seen"

    def __init__(self):
        self.seen: list[int] = []

    def training_step(self, model, batch):
        self.seen.append(torch.get_num_threads())
        return super().training_step(model, batch)


def test_train_loop_runs_with_the_threads_asked_and_restores_them(regression_data, saved_state):
    workload = ThreadsSeen()
    torch.set_num_threads(3)
    v = train_loop(workload, Knobs(batch_size=16), scale="tiny", device="cpu",
                   data_dir=regression_data, steps=5, warmup_steps=2, threads=1)
    assert v.steps == 5 and v.samples_per_sec > 0
    assert workload.seen and set(workload.seen) == {1}
    assert torch.get_num_threads() == 3


def test_train_loop_leaves_threads_alone_by_default(regression_data, saved_state):
    workload = ThreadsSeen()
    torch.set_num_threads(3)
    train_loop(workload, Knobs(batch_size=16), scale="tiny", device="cpu",
               data_dir=regression_data, steps=3, warmup_steps=1)
    assert set(workload.seen) == {3}
    assert torch.get_num_threads() == 3


def test_train_loop_restores_threads_after_it_raises(regression_data, saved_state):
    torch.set_num_threads(3)
    with pytest.raises(torch.OutOfMemoryError):                    # fake: batch over 16
        train_loop(oom, Knobs(batch_size=32), scale="tiny", device="cpu",
                   data_dir=regression_data, steps=3, threads=1)
    assert torch.get_num_threads() == 3
