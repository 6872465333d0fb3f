"""The synthetic landscapes of ``tests/landscapes.py``: their model's optimum is what their
steps measure (on the step clock where the training process does all the work, with real
sleeps where DataLoader workers do), their memory limit ends a trial ``oom``, and one run of
the tuner on one of them answers within what the landscape allows. The search-quality target
(>= 0.9 of the optimum within a 120-s budget, every landscape and seed) is read by
``bench/landscapes.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tests.landscapes as landscapes
from tests.conftest import run_landscape
from tests.landscapes import LANDSCAPES, Landscape
from tuner import leaderboard, winner
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.space import Choices, IntRange, load_space
from tuner.status import Phase, Status, phase_of
from tuner.trial.harness import run_trial

NAMES = list(LANDSCAPES)


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("landscape-data")
    return {name: w.prepare_default_data(root, "tiny") for name, w in LANDSCAPES.items()}


@pytest.fixture
def slept_clock(step_clock, monkeypatch, one_torch_thread):
    """The step clock (``tests.conftest.step_clock``) as the landscapes' ``time`` too: their
    sleeps move it instead of waiting, so a trial without DataLoader workers measures its
    model exactly and at once. One torch thread: the cache fills in this process."""
    step_clock.sleep = lambda seconds: setattr(step_clock, "now",
                                               step_clock.now + max(0.0, seconds))
    monkeypatch.setattr(landscapes, "time", step_clock)
    monkeypatch.setattr(landscapes, "_clock", {"pid": None, "due": 0.0})
    monkeypatch.setattr(landscapes, "_host_s", 0.0)
    return step_clock


def _settings(data_dir: Path, windows: int = 2, window_s: float = 1.0) -> TrialSettings:
    return TrialSettings(scale="tiny", device="cpu", data_dir=str(data_dir), warmup_steps=2,
                         windows=windows, window_s=window_s, breakdown_steps=0)


def test_each_landscape_has_the_optimum_its_docstring_gives():
    """The figures the classes' docstrings and the bench's reading rest on; the references
    and the doubling answer lie below the 0.9 target, so each landscape tests the search."""
    expected = {"launch-bound": (625.0, 192), "decode-bound": (760.0, 224),
                "memory-capped": (418.3, 64), "io-bound": (740.7, 128)}
    for name, w in LANDSCAPES.items():
        best = w.optimum()
        rate, max_batch = expected[name]
        assert (round(best.samples_per_sec, 1), w.max_batch()) == (rate, max_batch), name
        assert w.samples_per_sec(best.knobs) == best.samples_per_sec
        assert w.samples_per_sec(best.knobs.replace(batch_size=w.max_batch() + 1)) is None
        for knobs in (*w.references.values(), w.doubling_answer().knobs):
            assert w.samples_per_sec(knobs.clamp("cpu")[0]) < 0.9 * best.samples_per_sec, name


@pytest.mark.parametrize("name", NAMES)
def test_the_optimum_lies_in_the_searched_space(name, data_dirs):
    """Every knob of the optimum is a value of ddpm's space as a CPU run of the landscape
    searches it (2 CPUs, batch capped at the dataset; where decoding waits, workers up to the
    space's own bound, past the cores: ``tuner.search_policy``)."""
    w = LANDSCAPES[name]
    workers = landscapes.MAX_WORKERS if w.shape.decode_waits else landscapes.HOST_CORES
    space = load_space(w.space_name).for_device("cpu", max_workers=workers,
                                                max_batch=w.check_data(data_dirs[name], "tiny"))
    knobs = w.optimum().knobs.to_dict()
    for knob, domain in space.domains.items():
        if knob in ("prefetch_factor", "persistent_workers") and knobs["num_workers"] == 0:
            continue
        if isinstance(domain, IntRange):
            assert domain.low <= knobs[knob] <= domain.high, (knob, knobs[knob], domain)
        else:
            assert isinstance(domain, Choices) and domain.contains(knobs[knob]), (knob, domain)


def _no_worker_cases(w: Landscape) -> list[Knobs]:
    """Configurations whose host work all runs in the training process: the best one, one
    with a quarter of its batch, and the loader path (decoding and augmenting per sample)."""
    best = max((Knobs(batch_size=b, data_path=path, fused_optimizer=fused, channels_last=cl)
                for b in range(4, min(w.max_batch(), landscapes.MAX_BATCH) + 1)
                for path in w.data_paths()
                for fused in (False, True) for cl in (False, True)),
               key=w.samples_per_sec)
    return [best, best.replace(batch_size=best.batch_size // 4),
            best.replace(data_path="loader")]


@pytest.mark.parametrize("name", NAMES)
def test_steps_without_workers_measure_the_model(name, data_dirs, slept_clock):
    """On the step clock the harness measures each no-worker configuration at its modelled
    samples/sec, and the best of them is within 3 % of the landscape's optimum (whose
    configuration may use workers) except where decoding waits: there only workers overlap
    the waits, and the best without them is under a fifth of the optimum."""
    w = LANDSCAPES[name]
    cases = _no_worker_cases(w)
    for knobs in cases:
        result = run_trial(w, knobs, _settings(data_dirs[name]))
        assert result["status"] == Status.OK, result["error"]
        assert result["samples_per_sec"] == pytest.approx(w.samples_per_sec(knobs), rel=1e-6)
    share = w.samples_per_sec(cases[0]) / w.optimum().samples_per_sec
    assert share < 0.2 if w.shape.decode_waits else share >= 0.97


@pytest.mark.parametrize("name", NAMES)
def test_a_batch_over_the_memory_limit_is_oom(name, data_dirs, slept_clock):
    w = LANDSCAPES[name]
    result = run_trial(w, Knobs(batch_size=w.max_batch() + 1), _settings(data_dirs[name]))
    assert result["status"] == Status.OOM
    assert "out of memory (modelled)" in result["error"]


@pytest.mark.parametrize("name", NAMES)
def test_the_optimum_measures_its_model_with_real_sleeps(name, data_dirs, one_torch_thread):
    """The optimum's configuration (DataLoader workers where it has them) in real time: the
    workers' sleeps overlap the training step's as the model says. Bounds for a loaded
    machine: a step late by more than its own length reads slower, and the harness's pause
    between windows overlaps a step (faster by at most that pause per window)."""
    w = LANDSCAPES[name]
    best = w.optimum()
    result = run_trial(w, best.knobs, _settings(data_dirs[name], window_s=1.5), cpus=2)
    assert result["status"] == Status.OK, result["error"]
    assert 0.9 <= result["samples_per_sec"] / best.samples_per_sec <= 1.06


@pytest.mark.slow
def test_a_run_answers_within_what_the_landscape_allows(tmp_path):
    """`python -m tuner run` on the memory-capped landscape, seed 0, the references and one
    searched trial: its answer is at least the recommended's modelled rate (less 10 % for a
    loaded machine) and never above the optimum (plus the harness's overlap, 5 %); every
    search trial over the memory limit, and only those, ended oom. Trials, not a time budget:
    a loaded machine then slows the run but does not change what it measures."""
    w = landscapes.memory_capped
    proc, results = run_landscape(tmp_path, "memory_capped")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = leaderboard.read(results, workload=w.name).to_pylist()
    search = [r for r in rows if phase_of(r) == Phase.SEARCH]
    assert len(search) == 3
    for row in search:
        assert (row["status"] == Status.OOM) == (row["batch_size"] > w.max_batch()), row
    answer = winner.best(rows)
    recommended = w.samples_per_sec(w.references["recommended"].clamp("cpu")[0])
    assert 0.9 * recommended <= answer.samples_per_sec <= 1.05 * w.optimum().samples_per_sec


def test_the_oom_is_torch_s(data_dirs):
    """The memory limit raises what a CUDA allocator raises (``tuner.trial.failures.is_oom``)."""
    with pytest.raises(torch.OutOfMemoryError):
        landscapes.memory_capped.check_memory(landscapes.memory_capped.max_batch() + 1)
    landscapes.memory_capped.check_memory(landscapes.memory_capped.max_batch())


def test_a_landscape_is_probed_as_a_gpu_is(tmp_path, tuner_cache):
    """A landscape declares a device memory of its own (``Workload.device_memory_bound``), so a
    CPU run probes it under ``--probe auto`` as a CUDA run probes the card; a workload without
    one is not probed on the CPU device, and ``--probe off`` wins over the declaration."""
    from tuner.option_checks import make_plan
    from tuner.settings import RunOptions
    results = str(tmp_path / "results")

    def plan(workload: str, probe: str = "auto"):
        return make_plan(RunOptions(workload=workload, device="cpu", trials=4, probe=probe,
                                    results=results))
    assert plan("tests.landscapes:memory_capped").should_probe
    assert not plan("tests.landscapes:memory_capped", probe="off").should_probe
    assert not plan("tests.fake_workloads:regression").should_probe
