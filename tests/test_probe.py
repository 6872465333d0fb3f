"""The memory probe: its search (power of two, then binary to within 25 %) and the fast path
that runs every short trial in one process on one resident batch."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from tests.fake_workloads import FakeOOM, NpyFiles
from tuner.knobs import Knobs
from tuner.probe import (
    KNEE_TOLERANCE,
    PROBE_WINDOW_S,
    TIMED_STEPS,
    ProbeResult,
    compute_curve,
    fit_step_time,
    knee_batch,
    probe_batch_limit,
    probe_in_process,
    probe_knobs,
)
from tuner.settings import TrialSettings
from tuner.space import Choices, IntRange, Space

SETTINGS = TrialSettings(scale="tiny", device="cpu", data_dir="unused")


def space(low: int = 1, high: int = 64) -> Space:
    return Space("probe-test", {"batch_size": IntRange(low, high, log=True)}, {"num_workers": 0})


def fake_run(limit: int, calls: list):
    def run(knobs: Knobs, settings: TrialSettings) -> dict:
        calls.append((knobs, settings))
        status = "ok" if knobs.batch_size <= limit else "oom"
        return {"status": status, "peak_device_memory_mb": float(knobs.batch_size)}
    return run


def test_the_search_doubles_then_bisects_to_within_a_quarter():
    calls = []
    found = probe_batch_limit(space(), Knobs(batch_size=4), SETTINGS, fake_run(40, calls))
    sizes = [k.batch_size for k, _ in calls]
    assert sizes[:7] == [1, 2, 4, 8, 16, 32, 64]           # doubling until 64 fails
    assert found.max_batch <= 40 < found.first_failure
    assert found.first_failure <= 1.25 * found.max_batch   # bisected to within 25 %
    assert found.probes == sorted(found.probes)


def test_every_probe_is_short_low_memory_and_on_one_resident_batch():
    """One warm-up step and TIMED_STEPS windows of about a step, no workers, no compile, the
    lowest-memory AMP the space searches, and the compute-only mode with one batch on the
    device."""
    calls = []
    amp_space = Space("probe-test", {"batch_size": IntRange(1, 8, log=True),
                                     "amp": Choices(["off", "bf16"])},
                      {"num_workers": 0})
    probe_batch_limit(amp_space, Knobs(batch_size=4, num_workers=4, compile="default"),
                      replace(SETTINGS, windows=5, breakdown_steps=3), fake_run(8, calls))
    for knobs, settings in calls:
        assert ((knobs.num_workers, knobs.compile, knobs.amp, knobs.grad_accum)
                == (0, "off", "bf16", 1))
        assert settings.compute_only and settings.resident_batches == 1
        assert (settings.warmup_steps, settings.windows, settings.breakdown_steps) == (1, 3, 0)
        assert settings.window_s == PROBE_WINDOW_S and settings.max_steady_probes == 0


def test_the_probe_reads_its_batches_through_the_device_path_where_the_space_has_it():
    """The probe's resident batch comes from the decoded samples (the device path) where the
    space searches that path, from the loader where it does not."""
    paths = Space("probe-test", {"batch_size": IntRange(1, 8, log=True),
                                 "data_path": Choices(["loader", "cache", "device"])},
                  {"num_workers": 0})
    knobs = probe_knobs(paths, Knobs(batch_size=4, num_workers=4, pin_memory=True))
    assert (knobs.data_path, knobs.num_workers, knobs.pin_memory) == ("device", 0, False)
    loader = Space("probe-test", {"batch_size": IntRange(1, 8, log=True)}, {"num_workers": 0})
    assert probe_knobs(loader, Knobs(batch_size=4)).data_path == "loader"


def test_probes_of_one_process_decode_each_sample_once(regression_data, monkeypatch):
    """Compute-only trials on the device path (the probe's) read their one resident batch from
    the decoded samples: a probe at batch 8 after one at batch 4 decodes only samples 4..7, and
    every probe measures its step."""
    import tuner.trial.steppers as steppers
    from tests.fake_workloads import SplitRegression
    from tuner.trial.harness import run_trial
    monkeypatch.setattr(steppers, "_PREFIX", {})
    monkeypatch.setattr(steppers, "_KEPT", {})
    read = []
    workload = SplitRegression()
    path = workload.sample_path(regression_data, "tiny")
    original = type(path.decoded).__getitem__
    monkeypatch.setattr(type(path.decoded), "__getitem__",
                        lambda self, i: read.append(i) or original(self, i))
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             warmup_steps=1, windows=TIMED_STEPS, window_s=PROBE_WINDOW_S,
                             breakdown_steps=0, max_steady_probes=0, compute_only=True,
                             resident_batches=1)
    for bs in (4, 8):
        result = run_trial(workload, Knobs(batch_size=bs, data_path="device"), settings)
        assert result["status"] == "ok" and result["step_time_ms_p50"] > 0, result["error"]
    assert sorted(read) == list(range(8))


def timed_run(alpha_ms: float, beta_ms: float, limit: int):
    """A probe trial whose step takes alpha + beta * batch ms up to ``limit``, oom above."""
    def run(knobs: Knobs, settings: TrialSettings) -> dict:
        bs = knobs.batch_size
        if bs > limit:
            return {"status": "oom", "peak_device_memory_mb": None}
        ms = alpha_ms + beta_ms * bs
        return {"status": "ok", "peak_device_memory_mb": float(bs), "step_time_ms_p50": ms,
                "samples_per_sec": 1000.0 * bs / ms, "windows": settings.windows}
    return run


def test_the_probe_times_its_steps_and_the_fit_finds_the_knee_and_the_limit():
    """An H200-shaped curve (45 ms flat to the 100s, 0.12 ms/sample above): the probe keeps
    each fitting size's step time, the fit recovers alpha and beta, the knee is the smallest
    batch within KNEE_TOLERANCE of the largest's rate, and the limit is the largest's
    measured rate, whose result is kept for the machine-compute row."""
    sizes = space(4, 1024)
    found = probe_batch_limit(sizes, Knobs(batch_size=8), SETTINGS, timed_run(45.0, 0.12, 700))
    assert [b for b, _ in found.step_ms] == sorted(b for b, s, _ in found.probes if s == "ok")
    assert found.limit_result["samples_per_sec"] == pytest.approx(
        1000 * found.max_batch / (45 + 0.12 * found.max_batch))
    curve = compute_curve(found, list(range(4, found.max_batch + 1)))
    assert curve.alpha_ms == pytest.approx(45.0, rel=1e-6)
    assert curve.beta_ms == pytest.approx(0.12, rel=1e-6)
    assert curve.max_batch == found.max_batch
    rate = curve.samples_per_sec
    assert rate(curve.knee_batch) >= (1 - KNEE_TOLERANCE) * rate(curve.max_batch)
    assert rate(curve.knee_batch - 1) < (1 - KNEE_TOLERANCE) * rate(curve.max_batch)
    assert curve.limit_samples_per_sec == found.limit_result["samples_per_sec"]


def test_the_fit_is_robust_to_flat_and_noisy_curves():
    """A flat step time (overhead only) fits beta 0 and names the knee at 0.95 x the largest
    batch (the rate grows with the batch); a negative intercept from noise refits through the
    origin (every batch equally fast: the knee is the smallest allowed); one point is its own
    mean."""
    alpha, beta = fit_step_time([(8, 45.0), (64, 46.0), (256, 44.0)])
    assert beta == 0.0 and 44.0 < alpha < 46.0
    assert knee_batch(alpha, beta, 256, [8, 64, 128, 243, 244, 256]) == 244  # 0.95 x 256
    alpha, beta = fit_step_time([(8, 0.7), (64, 6.4), (256, 26.0)])
    assert alpha == 0.0 and beta == pytest.approx(0.1, rel=0.05)
    assert knee_batch(alpha, beta, 256, [8, 64, 256]) == 8
    assert fit_step_time([(32, 10.0)]) == (10.0, 0.0)


def test_no_curve_without_two_timed_sizes_or_a_limit():
    """A probe that timed one size, or none at its bound, gives no curve: the search then
    starts from the references alone."""
    one = ProbeResult(8, 16, [(8, "ok", 1.0), (16, "oom", None)], step_ms=[(8, 5.0)],
                      limit_result={"samples_per_sec": 1600.0})
    assert compute_curve(one, [4, 8]) is None
    no_limit = ProbeResult(16, None, [], step_ms=[(8, 5.0), (16, 6.0)], limit_result=None)
    assert compute_curve(no_limit, [8, 16]) is None


def test_a_probe_that_fails_for_another_reason_stops_the_probe():
    def broken(knobs, settings):
        return {"status": "error", "error": "ValueError: bad"}
    with pytest.raises(RuntimeError, match="memory probe at batch_size 1 failed: ValueError: bad"):
        probe_batch_limit(space(), Knobs(batch_size=4), SETTINGS, broken)


def test_a_probe_stopped_by_the_time_budget_keeps_what_fit_by_then():
    """A probe trial past the run's deadline ends ``timeout``: the probe stops there with the
    largest batch that fit so far (a lower bound), not with a RuntimeError; one stopped before
    any batch fit bounds nothing, and the run says the budget was too small."""
    def run(knobs, settings):
        status = "timeout" if knobs.batch_size >= 16 else "ok"
        return {"status": status, "peak_device_memory_mb": float(knobs.batch_size)}
    found = probe_batch_limit(space(), Knobs(batch_size=4), SETTINGS, run)
    assert found.timed_out and found.max_batch == 8 and found.first_failure is None
    assert [status for _, status, _ in found.probes] == ["ok"] * 4 + ["timeout"]
    nothing = probe_batch_limit(space(), Knobs(batch_size=4), SETTINGS,
                                lambda knobs, settings: {"status": "timeout"})
    assert nothing.timed_out and nothing.max_batch is None
    bisected = probe_batch_limit(space(), Knobs(batch_size=4), SETTINGS, fake_run(40, []))
    assert not bisected.timed_out


def test_a_run_whose_budget_ends_in_the_probe_before_any_batch_says_so(monkeypatch):
    from types import SimpleNamespace

    import tuner.driver as driver
    from tuner.errors import TunerError
    from tuner.probe import ProbeResult
    monkeypatch.setattr("ray.remote", lambda **kw: lambda f: SimpleNamespace(
        options=lambda **o: SimpleNamespace(remote=lambda *a: None)))
    found = [ProbeResult(None, None, [(1, "timeout", None)], timed_out=True)]
    monkeypatch.setattr("ray.get", lambda ref: found[0])
    plan = SimpleNamespace(references=[("baseline", Knobs(batch_size=4))], samples=64,
                           device_space=space(), device="cpu", max_host_memory_mb=None,
                           workload=None, settings=SETTINGS, time_budget_s=20.0)
    with pytest.raises(TunerError, match=r"the time budget \(20 s\) ran out during the probe "
                                         r"before a batch size was measured"):
        driver._probe(plan, lambda kind, data: None)
    # Some batches fit before it ran out: the deadline has passed all the same, nothing can
    # run after it, and the run says so rather than 'no trial succeeded'.
    found[0] = ProbeResult(8, None, [(8, "ok", 1.0), (16, "timeout", None)], timed_out=True)
    with pytest.raises(TunerError, match=r"ran out during the probe \(batch_size 8 was the "
                                         r"largest that fit by then\)"):
        driver._probe(plan, lambda kind, data: None)


class CountingOOM(FakeOOM):
    """FakeOOM whose dataset counts the samples read in this process."""
    name = "fake-oom-counting"
    reads: list[int] = []

    def build_dataset(self, data_dir, scale):
        reads = self.reads

        class Counting(NpyFiles):
            def __getitem__(self, i):
                reads.append(os.getpid())
                return super().__getitem__(i)
        return Counting(data_dir)


def test_the_in_process_probe_finds_the_bound_reading_one_batch_per_probe(regression_data):
    """Every short trial runs in this process (the fast path on CUDA), each reads exactly one
    batch from the dataset, and an out-of-memory trial does not spoil the next one."""
    workload = CountingOOM()
    CountingOOM.reads.clear()
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data))
    found = probe_in_process(workload, space(1, 64), Knobs(batch_size=4), settings)
    assert found.max_batch == FakeOOM.OOM_ABOVE
    assert FakeOOM.OOM_ABOVE < found.first_failure <= 1.25 * FakeOOM.OOM_ABOVE
    statuses = dict((bs, status) for bs, status, _ in found.probes)
    assert all(status == ("ok" if bs <= FakeOOM.OOM_ABOVE else "oom")
               for bs, status in statuses.items())
    assert set(CountingOOM.reads) == {os.getpid()}
    assert len(CountingOOM.reads) == sum(bs for bs in statuses)   # one batch per probe


# ------------------------------------------------------------ the input pipeline's rates

def input_space() -> Space:
    return Space("input-test", {"batch_size": IntRange(4, 256, log=True),
                                "data_path": Choices(("loader", "cache", "device")),
                                "num_workers": IntRange(0, 4)}, {})


def rate_run(rates: dict, calls: list):
    """A trial runner whose loader-only rate is ``rates[(data_path, num_workers)]`` (None: the
    trial fails, 'timeout': the run's deadline)."""
    def run(knobs: Knobs, settings: TrialSettings) -> dict:
        calls.append((knobs, settings))
        rate = rates[(knobs.data_path, knobs.num_workers)]
        if rate == "timeout":
            return {"status": "timeout", "samples_per_sec": 0.0}
        if rate is None:
            return {"status": "error", "error": "boom", "samples_per_sec": 0.0}
        return {"status": "ok", "samples_per_sec": rate}
    return run


def test_input_rates_are_measured_cheapest_path_first_until_one_feeds_the_knee():
    """The device path (no workers) first, then the cache with none and with the most workers
    the space allows, each a short loader-only trial over the samples the probes decoded; the
    loader path is not measured once the cache with 4 workers feeds 1.25 x the knee's rate."""
    from tuner.probe import FEED_MARGIN, INPUT_WINDOW_S, measure_input
    calls: list = []
    rates = {("device", 0): 90.0, ("cache", 0): 60.0, ("cache", 4): 130.0,
             ("loader", 0): 10.0, ("loader", 4): 40.0}
    knobs = probe_knobs(input_space(), Knobs(batch_size=4))
    found = measure_input(input_space(), knobs, SETTINGS, rate_run(rates, calls),
                          batch_size=96, samples=128, target_samples_per_sec=100.0)
    assert [(r.data_path, r.num_workers, r.samples_per_sec) for r in found] == [
        ("device", 0, 90.0), ("cache", 0, 60.0), ("cache", 4, 130.0)]
    assert 130.0 >= FEED_MARGIN * 100.0 > 90.0
    assert [k.batch_size for k, _ in calls] == [96, 64, 16]   # 128 samples: 2 batches a worker
    assert calls[2][0].persistent_workers and calls[2][0].prefetch_factor == 2
    assert all(s.loader_only and not s.compute_only and s.windows == 1 and s.warmup_steps == 1
               and s.window_s == INPUT_WINDOW_S and s.sample_limit == 128
               for _, s in calls)


def test_a_failed_input_trial_is_recorded_and_the_deadline_ends_the_measurement():
    from tuner.probe import measure_input
    calls: list = []
    rates = {("device", 0): None, ("cache", 0): "timeout"}
    knobs = probe_knobs(input_space(), Knobs(batch_size=4))
    found = measure_input(input_space(), knobs, SETTINGS, rate_run(rates, calls),
                          batch_size=32, samples=64, target_samples_per_sec=100.0)
    assert [(r.data_path, r.samples_per_sec, r.error) for r in found] == [
        ("device", None, "boom")]
    assert len(calls) == 2
    # one configuration alone leaves nothing to choose: nothing is measured
    assert measure_input(space(), Knobs(batch_size=4), SETTINGS, rate_run({}, calls),
                         batch_size=32, samples=64, target_samples_per_sec=100.0) == []


def test_feeding_is_the_cheapest_rate_with_room_to_spare_else_the_fastest():
    from tuner.probe import InputRate, feeding
    slow = InputRate("device", 0, 32, 100.0)
    cache = InputRate("cache", 2, 16, 300.0)
    loader = InputRate("loader", 2, 16, 200.0)
    failed = InputRate("loader", 0, 32, None, "boom")
    assert feeding([slow, cache, loader], 200.0) == cache            # 300 >= 1.25 x 200
    assert feeding([slow, cache, loader], 400.0) == cache            # none feeds: the fastest
    assert feeding([slow, cache, loader], 400.0, strict=True) is None
    assert feeding([failed], 10.0) is None and feeding([], 10.0) is None


def test_the_in_process_probe_times_each_data_path_alone_on_the_samples_it_decoded(
        regression_data):
    """After the probes, the same process times the device path at the knee, then the other
    paths (no worker, one worker) until one feeds the knee; every input trial reads the first
    samples only (a prefix of the largest probed batch), so nothing fills a whole cache."""
    from tests.fake_workloads import SplitRegression
    from tuner.trial.steppers import batch_source
    split = Space("probe-test", {"batch_size": IntRange(1, 32, log=True),
                                 "data_path": Choices(("loader", "cache", "device")),
                                 "num_workers": IntRange(0, 1)}, {})
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data))
    found = probe_in_process(SplitRegression(), split, Knobs(batch_size=4), settings)
    assert found.max_batch == 32
    rates = found.input_rates
    assert rates and (rates[0].data_path, rates[0].num_workers) == ("device", 0)
    assert all(r.samples_per_sec and r.samples_per_sec > 0 for r in rates)
    assert [r.data_path for r in rates] == sorted(
        (r.data_path for r in rates), key=("device", "cache", "loader").index)
    for path in ("loader", "cache"):
        batches, fill_s, _ = batch_source(
            SplitRegression(), Knobs(batch_size=4, data_path=path), regression_data, "tiny",
            torch.device("cpu"), lambda: None, only=12)
        assert len(batches.dataset) == 12 and fill_s is None   # of the 64 samples
