"""The memory probe: its search (power of two, then binary to within 25 %) and the fast path
that runs every short trial in one process on one resident batch."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from tests.fake_workloads import FakeOOM, NpyFiles
from tuner.knobs import Knobs
from tuner.probe import probe_batch_limit, probe_in_process
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
    """Two steps, no windows worth measuring, no workers, no compile, the lowest-memory AMP
    the space searches, and the compute-only mode with one batch on the device."""
    calls = []
    amp_space = Space("probe-test", {"batch_size": IntRange(1, 8, log=True),
                                     "amp": Choices(["off", "bf16"])},
                      {"num_workers": 0})
    probe_batch_limit(amp_space, Knobs(batch_size=4, num_workers=4, compile="default"),
                      replace(SETTINGS, windows=5, breakdown_steps=3), fake_run(8, calls))
    for knobs, settings in calls:
        assert (knobs.num_workers, knobs.compile, knobs.amp, knobs.grad_accum) == (0, "off", "bf16", 1)
        assert settings.compute_only and settings.resident_batches == 1
        assert (settings.warmup_steps, settings.windows, settings.breakdown_steps) == (2, 1, 0)


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
