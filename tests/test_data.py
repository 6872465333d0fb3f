"""tuner.data: the decoded-sample cache, its dataset and the device-resident batches; the plan's
choice of the data paths that fit; a cache fill's failures and interruptions."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tests.fake_workloads import N_FILES, NpyFiles, SplitRegression, _Noisy
from tuner.data import (
    CachedDataset,
    DecodedCache,
    DeviceBatches,
    SamplePath,
    cache_bytes,
    sample_bytes,
)
from tuner.errors import DataError
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.settings import RunOptions, TrialSettings
from tuner.trial.harness import run_trial

SPLIT = "tests.fake_workloads:split"


class _Images(Dataset):
    """n decoded 'images': uint8 (3, 4, 4) filled with the index, and the index as a label;
    from ``odd_from`` on (3, 5, 5)."""

    def __init__(self, n: int, odd_from: int | None = None):
        self.n, self.odd_from = n, odd_from

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        side = 5 if self.odd_from is not None and i >= self.odd_from else 4
        return torch.full((3, side, side), i % 256, dtype=torch.uint8), torch.tensor(i)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_fill_holds_every_decoded_sample_once_in_shared_memory(workers):
    cache = DecodedCache.fill(_Images(37), workers=workers, batch=8)
    assert len(cache) == 37 and cache.fill_s > 0
    images, labels = cache.tensors
    assert images.shape == (37, 3, 4, 4) and images.dtype == torch.uint8
    assert images.is_shared() and labels.is_shared()      # workers read it without a copy
    assert torch.equal(labels, torch.arange(37))
    assert all(int(images[i, 0, 0, 0]) == i for i in range(37))
    assert cache.nbytes == 37 * sample_bytes(_Images(1)[0]) == 37 * (48 + 8)


class _Repeated(_Images):
    """Several samples per decoded one (patches of a volume): item i is item i % distinct."""
    distinct = 5

    def __getitem__(self, i: int):
        return super().__getitem__(i % self.distinct)


def test_a_dataset_of_repeated_samples_is_cached_once_and_still_gives_its_epoch():
    cache = DecodedCache.fill(_Repeated(20))
    assert len(cache) == 20 and len(cache.tensors[0]) == 5       # stored once each
    assert int(cache[13][1]) == 3
    path = SamplePath(decoded=_Repeated(20), augment=lambda s: s, augment_batch=lambda b: b)
    assert cache_bytes(path) == 5 * (48 + 8)
    batches = DeviceBatches(cache, batch_size=4, augment=lambda b: b)
    labels = sorted(int(i) for _, batch_labels in batches for i in batch_labels)
    assert labels == sorted(list(range(5)) * 4)                 # 20 samples an epoch


def test_cache_bytes_counts_every_sample_before_any_fill():
    path = SamplePath(decoded=_Images(10), augment=lambda s: s, augment_batch=lambda b: b)
    assert cache_bytes(path) == 10 * (3 * 4 * 4 + 8)


def test_samples_of_another_shape_are_refused_naming_where():
    with pytest.raises(ValueError, match=r"decoded samples 8\.\.15 differ in shape"):
        DecodedCache.fill(_Images(20, odd_from=8), batch=8)   # from the first of a batch
    with pytest.raises(ValueError, match=r"differ in shape or dtype \(\[3, 4, 4\] torch.uint8, "
                                         r"\[3, 5, 5\] torch.uint8\)"):
        DecodedCache.fill(_Images(20, odd_from=9), batch=8)   # within a batch
    with pytest.raises(ValueError, match="empty"):
        DecodedCache.fill(_Images(0))


@pytest.mark.parametrize("workers", [0, 1])
def test_a_file_that_fails_to_decode_during_a_fill_is_named(regression_data, workers):
    with pytest.raises(DataError, match=r"sample file .*0003\.npy cannot be decoded"):
        DecodedCache.fill(NpyFiles(regression_data, fail_at=3), workers=workers)


def test_the_cached_dataset_applies_the_random_part_per_item():
    cache = DecodedCache.fill(_Images(6))
    data = CachedDataset(cache, lambda s: (s[0].float() + 0.5, s[1]))
    image, label = data[4]
    assert len(data) == 6 and label == 4 and image.dtype == torch.float32
    assert torch.all(image == 4.5)
    loader = DataLoader(data, batch_size=3, shuffle=True, num_workers=1)
    assert sorted(int(i) for _, labels in loader for i in labels) == list(range(6))


def test_device_batches_shuffle_each_epoch_drop_the_last_and_augment_whole_batches():
    torch.manual_seed(0)
    calls = []

    def augment(batch):
        calls.append(batch[0].shape)
        return batch

    batches = DeviceBatches(DecodedCache.fill(_Images(23)), batch_size=5, augment=augment)
    assert len(batches) == 4                                  # 23 // 5: the last 3 dropped
    epochs = [[int(i) for _, labels in batches for i in labels] for _ in range(3)]
    for seen in epochs:
        assert len(seen) == 20 and len(set(seen)) == 20       # each sample at most once
    assert epochs[0] != epochs[1] != epochs[2]                # a new permutation each epoch
    assert calls == [(5, 3, 4, 4)] * 12
    with pytest.raises(ValueError, match="batch_size 24: accepted 1..23"):
        DeviceBatches(DecodedCache.fill(_Images(23)), batch_size=24, augment=augment)


def test_the_random_part_is_drawn_per_sample_on_every_path(regression_data):
    """The split fake's noise: per sample in a device batch, and the three paths' samples
    share one distribution (mean of the noise ~0, its spread NOISE)."""
    torch.manual_seed(0)
    path = SplitRegression().sample_path(regression_data, "tiny")
    cache = DecodedCache.fill(path.decoded)
    clean = cache.tensors[0]
    (noisy, _), = list(DeviceBatches(cache, batch_size=N_FILES, augment=path.augment_batch))
    device_noise = torch.stack([noisy[i] - clean[_index(clean, noisy[i])] for i in range(N_FILES)])
    cached = CachedDataset(cache, path.augment)
    cache_noise = torch.stack([cached[i][0] - clean[i] for i in range(N_FILES)])
    loader = SplitRegression().build_dataset(regression_data, "tiny")
    loader_noise = torch.stack([loader[i][0] - clean[i] for i in range(N_FILES)])
    for noise in (device_noise, cache_noise, loader_noise):
        assert abs(noise.mean()) < 0.02                       # 1,024 draws of sd 0.1: se 0.003
        assert noise.std() == pytest.approx(_Noisy.NOISE, rel=0.1)
    assert device_noise.std(dim=1).min() > 0.05               # every sample got its own draw
    assert not torch.allclose(device_noise[0], device_noise[1])


def _index(clean: torch.Tensor, noisy_row: torch.Tensor) -> int:
    """The clean sample nearest a noisy one (the device path shuffles)."""
    return int(torch.argmin(((clean - noisy_row) ** 2).sum(dim=1)))


@pytest.mark.parametrize("path,workers", [("loader", 0), ("cache", 1), ("device", 0)])
def test_every_data_path_trains_and_a_fill_is_timed(regression_data, path, workers):
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=2, window_s=0.1, warmup_steps=1, breakdown_steps=0)
    row = run_trial(SplitRegression(), Knobs(batch_size=8, data_path=path,
                                             num_workers=workers), settings, cpus=2)
    assert row["status"] == "ok", row["error"]
    assert row["data_path"] == path and row["samples_per_sec"] > 0
    if path == "loader":
        assert row["cache_fill_s"] is None
    else:
        assert 0 < row["cache_fill_s"] <= row["setup_s"]


def test_the_time_to_train_objective_counts_the_fill(regression_data, monkeypatch):
    """A fill of 64 samples at 20 ms each (1.28 s of decoding, spread over the trial's CPUs as
    fill workers) is in the predicted wall time of a 200-step job: a short job may rightly keep
    the loader path."""
    monkeypatch.setenv("TUNER_TEST_FILL_DELAY_S", "0.02")
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=2, window_s=0.1, warmup_steps=1, breakdown_steps=0,
                             train_steps=200,
                             max_steady_probes=0)  # warm-up is the one step: 199 left
    row = run_trial(SplitRegression(), Knobs(batch_size=8, data_path="cache"), settings)
    assert row["status"] == "ok", row["error"]
    assert row["cache_fill_s"] >= 64 * 0.02 / max(2, torch.get_num_threads())
    assert row["setup_s"] >= row["cache_fill_s"]  # the fill is in the set-up, which is counted:
    expected = row["setup_s"] + row["warmup_s"] + 199 * row["step_time_ms_p50"] / 1000
    assert row["time_to_train_s"] == pytest.approx(expected, rel=1e-9)


def test_a_reused_trial_process_keeps_its_cache_and_a_fresh_job_still_pays_the_fill(
        regression_data, monkeypatch):
    """With ``keep_cache`` (a run whose trial processes are reused), the cache one trial filled
    serves the next trial of the same workload and data in the process: its set-up has no
    decoding pass (64 samples at 20 ms), its ``cache_fill_s`` is the fill's, and its time to
    train still counts the fill, as a fresh job pays it. A loader trial between them leaves a
    small cache in place (its host memory leaves the cache's bytes out) and drops one over
    ``KEEP_ACROSS_RAM_SHARE`` of the RAM; without ``keep_cache`` every trial fills its own."""
    import tuner.trial.steppers as steppers
    monkeypatch.setattr(steppers, "_KEPT", {})
    monkeypatch.setenv("TUNER_TEST_FILL_DELAY_S", "0.02")
    fill_min_s = 64 * 0.02 / max(2, torch.get_num_threads())
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=1, window_s=0.1, warmup_steps=1, breakdown_steps=0,
                             train_steps=100, max_steady_probes=0, keep_cache=True)

    def trial(path: str, keep: bool = True) -> dict:
        row = run_trial(SplitRegression(), Knobs(batch_size=8, data_path=path),
                        TrialSettings(**{**settings.__dict__, "keep_cache": keep}))
        assert row["status"] == "ok", row["error"]
        return row
    first, second = trial("cache"), trial("device")
    assert first["setup_s"] >= first["cache_fill_s"] >= fill_min_s
    assert second["cache_fill_s"] == first["cache_fill_s"]
    assert second["setup_s"] < fill_min_s                     # no decoding pass
    assert second["time_to_train_s"] == pytest.approx(
        second["setup_s"] + second["cache_fill_s"] + second["warmup_s"]
        + 99 * second["step_time_ms_p50"] / 1000, rel=1e-9)
    held = sum(cache.nbytes for cache in steppers._KEPT.values())
    assert held > 0
    assert steppers.held_cache_bytes(Knobs(batch_size=8), keep=True) == held
    assert steppers.held_cache_bytes(Knobs(batch_size=8, data_path="cache"), keep=True) == 0
    assert steppers.held_cache_bytes(Knobs(batch_size=8), keep=False) == 0
    trial("loader")
    assert trial("cache")["cache_fill_s"] == first["cache_fill_s"]  # kept through the loader trial
    monkeypatch.setattr(steppers, "KEEP_ACROSS_RAM_SHARE", held / 2**50)  # below the cache's
    assert steppers.held_cache_bytes(Knobs(batch_size=8), keep=True) == 0
    trial("loader")
    refilled = trial("cache")                                  # dropped by the loader trial
    assert refilled["cache_fill_s"] != first["cache_fill_s"]
    assert refilled["setup_s"] >= fill_min_s
    assert trial("cache", keep=False)["setup_s"] >= fill_min_s


def test_host_memory_leaves_out_the_bytes_held_for_another_trial(monkeypatch):
    """``HostMemorySampler.held_bytes`` come off every sample and the peak (at least 0 left): a
    kept cache a 'loader' trial does not read is not its memory. The process's memory is
    fixed here (1 GiB, no child): a real one moves as other tests' workers come and go."""
    from types import SimpleNamespace

    import tuner.trial.measure as measure
    monkeypatch.setattr(measure, "_pss_or_rss", lambda process: 2**30)

    def sampler(held: int) -> measure.HostMemorySampler:
        out = measure.HostMemorySampler(held_bytes=held)
        out._proc = SimpleNamespace(children=lambda recursive: [])
        return out
    assert sampler(0).sample() == 2**30
    held = sampler(2**28)
    assert held.sample() == 2**30 - 2**28 and held.peak_bytes == 2**30 - 2**28
    assert sampler(2**31).sample() == 0


def test_a_workload_without_a_split_fails_a_cache_trial_in_one_line(regression_data):
    from tests.fake_workloads import Regression
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=1, window_s=0.1, warmup_steps=1)
    row = run_trial(Regression(), Knobs(batch_size=8, data_path="cache"), settings)
    assert row["status"] == "error"
    assert "does not split its sample path (Workload.sample_path)" in row["error"]


def test_the_device_path_takes_no_dataloader_knobs():
    with pytest.raises(ValueError, match="data_path=device takes no DataLoader"):
        Knobs(batch_size=8, data_path="device", num_workers=2)
    knobs, dropped = Knobs(batch_size=8, num_workers=2, prefetch_factor=4).updated(
        {"data_path": "device"})
    assert knobs.num_workers == 0 and knobs.prefetch_factor is None
    assert dropped == ["num_workers=2", "prefetch_factor=4"]


# --------------------------------------------------------------------------- the plan

@pytest.fixture
def paths_space(tmp_path) -> str:
    path = tmp_path / "paths.yaml"
    path.write_text("knobs:\n  batch_size: {low: 4, high: 32, log: true}\n"
                    "  data_path: {choices: [loader, cache, device]}\n"
                    "  num_workers: {low: 0, high: 2}\n")
    return str(path)


def _plan(tmp_path, regression_data, space, workload=SPLIT, **options):
    return make_plan(RunOptions(workload=workload, data=str(regression_data), device="cpu",
                                space_file=space, results=str(tmp_path / "r"), **options))


def test_a_split_workload_searches_every_data_path(tmp_path, regression_data, paths_space):
    plan = _plan(tmp_path, regression_data, paths_space)
    assert plan.device_space.domains["data_path"].values == ("loader", "cache", "device")
    assert not [n for n in plan.notes if "data_path" in n]


def test_a_workload_without_a_split_is_tuned_on_the_loader_path_and_told_why(
        tmp_path, regression_data, paths_space):
    plan = _plan(tmp_path, regression_data, paths_space, workload="tests.fake_workloads:regression")
    assert "data_path" not in plan.device_space.domains
    assert plan.device_space.constants["data_path"] == "loader"
    (note,) = [n for n in plan.notes if "data_path" in n]
    assert "only the loader path is tuned" in note and "Workload.sample_path" in note
    # said once whatever the space: the workload's own space has no data_path
    plan = _plan(tmp_path, regression_data, None, workload="tests.fake_workloads:regression")
    assert [n for n in plan.notes if "data_path" in n] == [note]


def test_a_cache_over_the_host_memory_limit_is_not_sampled_and_the_bytes_are_said(
        tmp_path, regression_data, paths_space, monkeypatch):
    """Decoded samples of 3 MiB under --max-host-memory 5MB (4.77 MiB, half of it for a
    cache): neither the host cache nor, on the CPU device (the same memory), the resident
    copy fits; only the loader path is left."""
    import tuner.data
    monkeypatch.setattr(tuner.data, "cache_bytes", lambda path: 3 * 2**20)
    plan = _plan(tmp_path, regression_data, paths_space, max_host_memory="5MB")
    assert "data_path" not in plan.device_space.domains
    assert plan.device_space.constants["data_path"] == "loader"
    notes = [n for n in plan.notes if "data_path=" in n]
    assert [n.split(" is not")[0] for n in notes] == ["data_path=cache", "data_path=device"]
    assert all("need 3.0 MiB" in n and "the 2.4 MiB a trial may use" in n for n in notes), notes


def test_a_dataset_over_the_device_memory_limit_is_not_made_resident(
        tmp_path, regression_data, paths_space, monkeypatch):
    """On a CUDA device the resident copy is counted against the device memory a trial may
    use (--max-memory), the host cache against the host's."""
    import dataclasses

    import tuner.data
    import tuner.search_policy
    plan = _plan(tmp_path, regression_data, paths_space)
    monkeypatch.setattr(tuner.data, "cache_bytes", lambda path: 3 * 2**30)
    monkeypatch.setattr(tuner.search_policy, "_device_memory_mb", lambda max_memory: 2 * 1024.0)
    monkeypatch.setattr(tuner.search_policy, "_machine_ram_mb", lambda: 64 * 1024.0)
    on_gpu = tuner.search_policy._data_paths(dataclasses.replace(plan, device="cuda"))
    assert on_gpu.device_space.domains["data_path"].values == ("loader", "cache")
    (note,) = [n for n in on_gpu.notes if "data_path=" in n]
    assert note.startswith("data_path=device is not searched: the decoded samples need "
                           "3.0 GiB of device memory, more than the 2.0 GiB")


# --------------------------------------------------------------------------- a run

@pytest.mark.slow
def test_a_cache_fill_interrupted_by_sigterm_leaves_no_row_and_the_resume_fills_again(
        tmp_path, regression_data):
    """Three trials: the two references (the loader path, as written), then a searched one
    on the cache path, whose slow fill SIGTERM stops: the run exits 130 with the references'
    rows, none for the trial it stopped; the resume runs that trial whole, fill included."""
    from tests.fault_runs import finish, rows_of, start, wait_for
    space = tmp_path / "cache.yaml"
    space.write_text("knobs:\n  batch_size: {choices: [4, 16]}\n  num_workers: 0\n"
                     "  data_path: cache\n")
    marker = tmp_path / "filling"
    results = tmp_path / "results"
    env = {**os.environ, "TUNER_CACHE": str(tmp_path / "cache"),
           "TUNER_TEST_FILL_DELAY_S": "0.2", "TUNER_TEST_FILL_MARKER": str(marker)}
    args = ["run", "--workload", SPLIT, "--data", str(regression_data), "--space", str(space),
            "--trials", "3", "--results", str(results), "--device", "cpu", "--windows", "2",
            "--window-s", "0.2", "--warmup-steps", "1", "--confirm", "0", "--no-ceiling",
            "--no-early-stop"]
    proc = start(args, env)
    try:
        wait_for(marker.exists, 240, "the cache fill", proc, every_s=0.2)
        os.kill(proc.pid, signal.SIGTERM)
    finally:
        out, err = finish(proc)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    before = rows_of(results)
    assert sorted(r["reference"] for r in before) == ["baseline", "recommended"]
    assert all(r["data_path"] == "loader" for r in before)       # nothing of the stopped fill
    run_id = before[0]["run_id"]
    env["TUNER_TEST_FILL_DELAY_S"] = "0"
    resumed = start([*args, "--resume", run_id], env)
    out, err = finish(resumed)
    assert resumed.returncode == 0, err[-3000:]
    (cached,) = [r for r in rows_of(results) if r["data_path"] == "cache"]
    assert cached["status"] == "ok" and cached["run_id"] == run_id
    assert 0 < cached["cache_fill_s"] <= cached["setup_s"]


@pytest.mark.slow
def test_a_file_that_fails_to_decode_in_a_cache_fill_is_named_in_the_trials_row(
        tmp_path, regression_data):
    from tuner.api import tune
    space = tmp_path / "cache.yaml"
    space.write_text("knobs:\n  batch_size: {choices: [4, 16]}\n  num_workers: 0\n"
                     "  data_path: cache\n")
    result = tune("tests.fake_workloads:broken_split", trials=3, device="cpu",
                  data=str(regression_data), space=str(space), results=str(tmp_path / "r"),
                  progress=False, confirm=0, ceiling=False, windows=1, window_s=0.1)
    (row,) = [r for r in result.rows if r["data_path"] == "cache"]   # the searched trial
    assert row["status"] == "error" and "0003.npy cannot be decoded" in row["error"]
