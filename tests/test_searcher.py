"""The searcher's pieces without Ray: memory constraints against a run's limits, failures that
imply others, the sampler choice, the fallback when the sampler proposes only known points,
and warm start under another memory limit."""

from __future__ import annotations

import datetime as dt
import time

import optuna
import pytest

from tuner import leaderboard
from tuner.errors import TunerError
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.probe import ComputeCurve
from tuner.ray_runtime import hardware_key_task as _hardware_key_task
from tuner.search_policy import with_compute_curve
from tuner.searcher import OOM_VIOLATION, KnownInfeasible, MemoryLimits, make_sampler, make_searcher
from tuner.settings import SAMPLERS, RunOptions

REGRESSION = "tests.fake_workloads:regression"
GB = 1000**3 / 2**20  # MB in a GB, as parse_memory reads "12GB"
H100 = {"gpu_memory_mb": 80 * 1024.0, "host_memory_mb": 64 * 1024.0}


# ----------------------------------------------------------------------- memory constraint

def test_a_measured_trial_counts_the_share_of_memory_it_used():
    limits = MemoryLimits(max_memory="0.5")
    device = {**H100, "status": "ok", "peak_device_memory_mb": 30 * 1024.0,
              "peak_host_memory_mb": 3 * 1024.0}
    # 30 of the 40 GB allowed: -0.25 (the host, 3 of 64 GB, binds less).
    assert limits.constraint(device) == pytest.approx(30 / 40 - 1)
    # Without a limit the whole device is the room; on CPU the machine's RAM.
    assert MemoryLimits().constraint(device) == pytest.approx(30 / 80 - 1)
    cpu = {"status": "ok", "host_memory_mb": 24_000.0, "peak_host_memory_mb": 6_000.0}
    assert MemoryLimits().constraint(cpu) == pytest.approx(-0.75)
    assert MemoryLimits(max_host_memory_mb=8_000.0).constraint(cpu) == pytest.approx(-0.25)
    # Nothing recorded (a result without memory figures): feasible, 0.
    assert MemoryLimits().constraint({"status": "ok"}) == 0.0


def test_over_limit_and_oom_are_violations_under_the_same_limits():
    limits = MemoryLimits(max_memory="12GB")
    over = {**H100, "status": "over_limit", "memory_exceeded": "device",
            "max_memory_mb": 12 * GB, "peak_device_memory_mb": 15 * GB}
    assert limits.constraint(over) == pytest.approx(15 / 12 - 1)
    oom = {**H100, "status": "oom", "memory_exceeded": "device", "max_memory_mb": 12 * GB}
    assert limits.constraint(oom) == OOM_VIOLATION
    # Under a tighter limit an old OOM still holds; under a looser one it says nothing, and a
    # trial stopped over 12 GB at 15 GB would have fit in 24 GB without a measurement.
    assert MemoryLimits(max_memory="8GB").constraint(oom) == OOM_VIOLATION
    assert MemoryLimits(max_memory="24GB").constraint(oom) is None
    assert MemoryLimits(max_memory="24GB").constraint(over) is None
    # An OOM without a limit ran out of the whole device: it holds under any limit.
    full = {**H100, "status": "oom", "memory_exceeded": "device", "max_memory_mb": None}
    assert MemoryLimits(max_memory="12GB").constraint(full) == OOM_VIOLATION
    assert MemoryLimits().constraint(full) == OOM_VIOLATION
    # A measured trial that used 15 GB does not fit under 12 GB.
    used = {**H100, "status": "ok", "peak_device_memory_mb": 15 * GB}
    assert limits.constraint(used) > 0


# ------------------------------------------------------------------ failures imply others

def test_a_device_oom_implies_larger_batches_whatever_the_data_loader_knobs():
    known = KnownInfeasible()
    known.add({"batch_size": 64, "num_workers": 4, "amp": "off", "pin_memory": True}, "device")
    assert known.implies({"batch_size": 64, "num_workers": 0, "amp": "off", "pin_memory": False})
    assert known.implies({"batch_size": 128, "num_workers": 8, "amp": "off", "pin_memory": True})
    assert not known.implies({"batch_size": 32, "num_workers": 4, "amp": "off", "pin_memory": True})
    # Other compute knobs use other memory: no inference.
    assert not known.implies({"batch_size": 128, "num_workers": 4, "amp": "bf16",
                              "pin_memory": True})


def test_a_host_oom_implies_only_the_same_data_loader_knobs():
    known = KnownInfeasible()
    known.add({"batch_size": 32, "num_workers": 4, "prefetch_factor": 8}, "host")
    assert known.implies({"batch_size": 48, "num_workers": 4, "prefetch_factor": 8})
    assert not known.implies({"batch_size": 48, "num_workers": 2, "prefetch_factor": 8})
    assert not known.implies({"batch_size": 48, "num_workers": 4, "prefetch_factor": 2})
    # Unknown memory (an older row): as host, every knob counts.
    known.add({"batch_size": 16, "amp": "off"}, None)
    assert known.implies({"batch_size": 16, "amp": "off"})
    assert not known.implies({"batch_size": 16, "amp": "bf16"})


def test_random_draws_stay_below_the_smallest_failing_batch():
    known = KnownInfeasible()
    assert not known.risky({"batch_size": 1024, "amp": "off"})
    known.add({"batch_size": 64, "amp": "off"}, "device")
    assert known.risky({"batch_size": 64, "amp": "bf16"})       # not implied, but as large
    assert not known.risky({"batch_size": 48, "amp": "bf16"})
    assert known.risky({"batch_size": 96, "amp": "off"})        # implied


# ------------------------------------------------------------------------------ samplers

def test_the_gp_is_the_default_sampler_and_each_choice_builds_its_own():
    assert RunOptions(workload="ddpm").sampler == "gp"
    assert isinstance(make_sampler("gp", 0, 2, 12), optuna.samplers.GPSampler)
    assert isinstance(make_sampler("tpe", 0, 2, 12), optuna.samplers.TPESampler)
    assert isinstance(make_sampler("random", 0, 2, 12), optuna.samplers.RandomSampler)
    from tuner.cli import main
    (option,) = [p for p in main.commands["run"].params if p.name == "sampler"]
    assert tuple(option.type.choices) == SAMPLERS


def test_an_unknown_sampler_is_a_user_error(tmp_path, tuner_cache):
    with pytest.raises(TunerError, match="--sampler 'cmaes': accepted values are gp, tpe, random"):
        make_plan(RunOptions(workload=REGRESSION, sampler="cmaes", device="cpu",
                        results=str(tmp_path)))
    with pytest.raises(TunerError, match="accepted values are gp, tpe, random"):
        make_sampler("cmaes", 0, 2, 12)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_when_the_space_is_exhausted_trials_measure_the_best_again(tmp_path, tuner_cache,
                                                                   sampler):
    """A five-point space: every point is measured once before any is measured twice (a
    proposal of a measured point is answered, the trial goes to an unmeasured one), and once
    all are, each trial measures the best one again (not an error, not a random known one)."""
    space = tmp_path / "five-points.yaml"
    space.write_text("knobs:\n  batch_size: {choices: [4, 8, 12, 16, 24]}\n  num_workers: 0\n")
    plan = make_plan(RunOptions(workload=REGRESSION, space_file=str(space), trials=10, device="cpu",
                           results=str(tmp_path / "results"), probe="off", sampler=sampler))
    searcher = make_searcher(plan.search_spec())
    speed = {4: 100.0, 8: 300.0, 12: 250.0, 16: 200.0, 24: 150.0}
    sizes = []
    for i in range(10):
        searcher.suggest(f"t{i}")
        bs = searcher.params(f"t{i}")["batch_size"]
        sizes.append(bs)
        searcher.on_trial_complete(f"t{i}", {"status": "ok", "samples_per_sec": speed[bs]})
    assert sizes[:2] == [4, 16]                          # the references
    assert sorted(sizes[:5]) == [4, 8, 12, 16, 24]
    assert sizes[5:] == [8] * 5
    assert searcher.answered > 0


# ---------------------------------------------------------------- warm start under limits

def _rows(run_id: str, hardware_key: str) -> list[dict]:
    """An earlier run under --max-memory 12GB on an 80 GB card: batch 32 used 9 GB, batch 64
    ran out of its 12 GB."""
    now = dt.datetime.now(dt.timezone.utc)
    common = {**H100, "run_id": run_id, "workload": "fake-regression", "scale": "tiny",
              "device": "cpu", "hardware_key": hardware_key, "phase": "search",
              "max_memory_mb": 12 * GB, "started_at": now, "finished_at": now}
    return [{**common, **Knobs(batch_size=32).to_dict(), "trial_id": "t0", "status": "ok",
             "samples_per_sec": 300.0, "peak_device_memory_mb": 9 * GB},
            {**common, **Knobs(batch_size=64).to_dict(), "trial_id": "t1", "status": "oom",
             "memory_exceeded": "device"}]


@pytest.fixture
def run_under_12gb(tmp_path, tuner_cache):
    leaderboard.append(tmp_path, _rows("earlier", _hardware_key_task("cpu")))
    return tmp_path


def _warm(results, max_memory: str):
    plan = make_plan(RunOptions(workload=REGRESSION, results=str(results), device="cpu", trials=10,
                           probe="off", warm_start=True, max_memory=max_memory))
    plan = plan.with_hardware_key(_hardware_key_task("cpu"))
    return make_searcher(plan.search_spec())


def test_warm_start_keeps_failures_that_hold_under_this_run_s_limit(run_under_12gb):
    searcher = _warm(run_under_12gb, "12GB")
    by_batch = {t.params["batch_size"]: t for t in searcher.study.trials}
    assert sorted(by_batch) == [32, 64]
    assert by_batch[64].constraints == {"memory": OOM_VIOLATION}
    assert by_batch[32].constraints["memory"] == pytest.approx(9 / 12 - 1)
    assert searcher.infeasible.implies({"batch_size": 64, "num_workers": 0})


def test_warm_start_drops_failures_a_looser_limit_would_not_have_had(run_under_12gb):
    searcher = _warm(run_under_12gb, "24GB")
    by_batch = {t.params["batch_size"]: t for t in searcher.study.trials}
    assert sorted(by_batch) == [32]                      # the 12 GB OOM says nothing here
    assert by_batch[32].constraints["memory"] == pytest.approx(9 / 24 - 1)
    assert not searcher.infeasible.implies({"batch_size": 64, "num_workers": 0})


def test_warm_start_under_a_tighter_limit_marks_what_no_longer_fits(run_under_12gb):
    searcher = _warm(run_under_12gb, "8GB")
    by_batch = {t.params["batch_size"]: t for t in searcher.study.trials}
    assert by_batch[32].constraints["memory"] == pytest.approx(9 / 8 - 1)   # > 0: infeasible
    assert by_batch[32].value == 0.0
    assert by_batch[64].constraints == {"memory": OOM_VIOLATION}


# ----------------------------------------------------------- one experiment for the whole run

class _Search:
    """A stand-in for the search's searcher: ``configs`` in order, then FINISHED."""

    def __init__(self, configs):
        self.configs, self.completed = list(configs), []

    def suggest(self, trial_id):
        from ray.tune.search import Searcher
        return self.configs.pop(0) if self.configs else Searcher.FINISHED

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed.append(trial_id)


def test_staged_runs_the_search_then_each_batch_once_the_trials_before_it_are_recorded():
    from ray.tune.search import Searcher

    from tuner.staging import Staged
    recorded: set[str] = set()
    planned = []

    def batches():
        planned.append(sorted(recorded))       # planned from the rows recorded so far
        yield [{"batch_size": 1, "phase": "remeasure"}, {"batch_size": 2, "phase": "remeasure"}]
        planned.append(sorted(recorded))
        yield [{"batch_size": 3, "phase": "ceiling"}]

    gen = batches()
    search = _Search([{"batch_size": 8}, {"batch_size": 16}, {"batch_size": 32}])
    staged = Staged(lambda: next(gen, None), recorded.__contains__, search=search,
                    search_trials=2)
    assert staged.suggest("a") == {"batch_size": 8}
    assert staged.suggest("b") == {"batch_size": 16}
    assert staged.suggest("c") is None     # the search's 2 trials given: wait for their rows
    staged.on_trial_complete("a")
    recorded.add("a")
    assert staged.suggest("c") is None and planned == []
    staged.on_trial_complete("b")
    recorded.add("b")
    assert staged.suggest("c") == {"batch_size": 1, "phase": "remeasure"}
    assert planned == [["a", "b"]] and search.completed == ["a", "b"]
    assert staged.suggest("d") == {"batch_size": 2, "phase": "remeasure"}  # the batch goes on
    assert staged.suggest("e") is None     # the next batch waits for c and d
    recorded.update({"c", "d"})
    assert staged.suggest("e") == {"batch_size": 3, "phase": "ceiling"}
    assert planned[-1] == ["a", "b", "c", "d"]
    recorded.add("e")
    assert staged.suggest("f") == Searcher.FINISHED
    assert staged.suggest("g") == Searcher.FINISHED and staged.error is None


def test_staged_without_a_search_and_a_failing_plan_ends_the_experiment_keeping_the_error(
        tmp_path):
    import pickle

    from ray.tune.search import Searcher

    from tuner.staging import Staged

    def broken():
        raise ValueError("planning failed")
    staged = Staged(broken, lambda trial_id: True)
    assert staged.suggest("a") == Searcher.FINISHED
    assert isinstance(staged.error, ValueError)
    # Ray Tune's checkpoint of it: its state, without the driver's callables.
    staged.save(str(tmp_path / "searcher.pkl"))
    restored = Staged(lambda: [{"batch_size": 1}], lambda trial_id: True)
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert restored.suggest("b") == Searcher.FINISHED and str(restored.error) == "planning failed"
    # Ray Tune pickles it with the tune config: the driver's live callables stay behind.
    copy = pickle.loads(pickle.dumps(Staged(lambda: iter(()), set().__contains__)))
    assert copy._next_batch is None


def test_staged_gives_each_trial_the_settings_read_when_it_is_suggested():
    """Every configuration, searched or follow-up, carries the trial settings changes the
    driver reads from the rows recorded at the moment it is suggested (the steady-state
    tolerance of the machine's noise so far), merged into its own ``tuner`` entries."""
    from tuner.staging import Staged
    tolerance = [0.10]
    search = _Search([{"batch_size": 8}, {"batch_size": 16}])
    staged = Staged(lambda: [{"batch_size": 1, "phase": "remeasure",
                              "tuner": {"breakdown_steps": 0}}],
                    lambda trial_id: True, search=search, search_trials=2,
                    settings=lambda: {"steady_tolerance": tolerance[0]})
    assert staged.suggest("a") == {"batch_size": 8, "tuner": {"steady_tolerance": 0.10}}
    tolerance[0] = 0.24                              # the references' rows showed the noise
    assert staged.suggest("b") == {"batch_size": 16, "tuner": {"steady_tolerance": 0.24}}
    staged.on_trial_complete("a")
    staged.on_trial_complete("b")
    assert staged.suggest("c") == {"batch_size": 1, "phase": "remeasure",
                                   "tuner": {"breakdown_steps": 0, "steady_tolerance": 0.24}}
    assert search.completed == ["a", "b"]


def test_staged_starts_no_follow_up_past_the_runs_deadline(monkeypatch):
    """Follow-ups are queued as a batch sized to the time left when it was planned; trials
    that ran long leave the rest of the batch past the deadline: none of it is started (each
    would measure nothing before it is stopped, and cost its start and stop). The searcher's
    clock stands still (a fixed ``time`` in tuner.staging), so in time and past it are exact."""
    from types import SimpleNamespace

    from ray.tune.search import Searcher

    from tuner import staging
    from tuner.staging import Staged
    time = SimpleNamespace(time=lambda: 1.8e9)
    monkeypatch.setattr(staging, "time", time)
    deadline = [time.time() + 60]
    batch = [{"batch_size": 1, "phase": "remeasure"}, {"batch_size": 2, "phase": "remeasure"}]
    staged = Staged(lambda: list(batch), lambda trial_id: True, deadline_unix_s=deadline[0])
    assert staged.suggest("a") == batch[0]                   # in time
    staged._deadline_unix_s = time.time() - 1                # the first one ran long
    assert staged.suggest("b") == Searcher.FINISHED
    assert staged.suggest("c") == Searcher.FINISHED          # and nothing after it
    unbounded = Staged(lambda: list(batch), lambda trial_id: True)
    assert [unbounded.suggest(t) for t in "ab"] == batch


# ------------------------------------------------------- the machine first, then screening

CURVE = ComputeCurve(alpha_ms=5.0, beta_ms=0.1, points=((4, 5.4), (16, 6.6), (64, 11.4)),
                     max_batch=64, knee_batch=48, limit_samples_per_sec=5614.0)
"""A compute curve of the regression workload's space (batch 4..64): knee 48, limit at 64."""


def test_the_machine_s_points_follow_the_references_and_proposals_are_screened(tmp_path,
                                                                                 tuner_cache):
    """With a compute curve, the plan re-centres the batch range (its low end at a quarter of
    the knee), and the search measures the references, then the structured point at the knee
    and the doubling answer (the recommended's batch 16 doubled while within the probe's 64);
    the references in full, the structured points and every proposal (drawn from the new
    range) as one-window screening trials. A reference below the range runs as written and
    is recorded at the low end."""
    plan = make_plan(RunOptions(workload=REGRESSION, trials=8, device="cpu", probe="off",
                                results=str(tmp_path / "results")))
    plan = with_compute_curve(plan, CURVE, Knobs(batch_size=4))
    assert plan.device_space.domains["batch_size"].low == 12
    assert [(name, k.batch_size) for name, k in plan.anchors] == [("machine", 48),
                                                                  ("doubling", 64)]
    searcher = make_searcher(plan.search_spec())
    configs = [searcher.suggest(f"t{i}") for i in range(6)]
    assert [c["reference"] for c in configs[:2]] == ["baseline", "recommended"]
    assert configs[0]["batch_size"] == 4 and searcher.params("t0")["batch_size"] == 12
    assert [(c.get("anchor"), c["batch_size"]) for c in configs[2:4]] == [("machine", 48),
                                                                        ("doubling", 64)]
    assert all("tuner" not in c for c in configs[:2])            # the references in full
    assert all(c["tuner"] == {"windows": 1, "max_steady_probes": 0, "window_s": 1.0}
               for c in configs[2:])                            # half the run's 2-s window
    assert all(c.get("anchor") is None for c in configs[4:])
    assert all(12 <= c["batch_size"] <= 64 for c in configs[4:])


def test_each_compute_switch_gets_a_structured_point_beside_the_machine_s(tmp_path,
                                                                         tuner_cache):
    """In a space that searches on/off compute knobs (ddpm's on CPU: channels_last and the
    fused optimizer; the CUDA-only ones are fixed off there), the machine point is followed
    by the machine point with each switch turned on (the probe timed the model without
    them), then the doubling answer."""
    plan = make_plan(RunOptions(workload="tests.landscapes:launch_bound", trials=8,
                                device="cpu", probe="off", results=str(tmp_path / "results")))
    curve = ComputeCurve(alpha_ms=180.0, beta_ms=0.5, points=((4, 182.0), (192, 276.0)),
                         max_batch=192, knee_batch=96, limit_samples_per_sec=695.0)
    plan = with_compute_curve(plan, curve, Knobs(batch_size=4))
    names = [name for name, _ in plan.anchors]
    assert names == ["machine", "machine+channels_last", "machine+fused_optimizer", "doubling"]
    machine = dict(plan.anchors)["machine"]
    assert not machine.channels_last and not machine.fused_optimizer
    assert dict(plan.anchors)["machine+channels_last"] == machine.replace(channels_last=True)
    assert dict(plan.anchors)["machine+fused_optimizer"] == machine.replace(
        fused_optimizer=True)
    assert len(plan.anchor_params) == 4  # each a point of the space the search samples


def test_the_machine_point_takes_the_cheapest_input_pipeline_that_feeds_the_knee(tmp_path,
                                                                                 tuner_cache):
    """Where the probe measured the input pipeline, the machine point's data path and workers
    are those of the cheapest rate that feeds the knee's compute rate with room to spare (the
    device path too slow here: the cache with every worker), and the machine line gives the
    rates; where none feeds, the fastest measured."""
    from tuner.driver import machine_text
    from tuner.probe import InputRate
    plan = make_plan(RunOptions(workload="tests.landscapes:launch_bound", trials=8,
                                device="cpu", probe="off", results=str(tmp_path / "results")))
    curve = ComputeCurve(alpha_ms=180.0, beta_ms=0.5, points=((4, 182.0), (192, 276.0)),
                         max_batch=192, knee_batch=96, limit_samples_per_sec=695.0)
    knee_rate = curve.samples_per_sec(96)                           # 421 samples/sec
    workers = plan.device_space.domains["num_workers"].high
    rates = [InputRate("device", 0, 96, 0.5 * knee_rate), InputRate("cache", 0, 48, 300.0),
             InputRate("cache", workers, 24, 2 * knee_rate)]
    fed = with_compute_curve(plan, curve, Knobs(batch_size=4), rates)
    machine = dict(fed.anchors)["machine"]
    assert (machine.batch_size, machine.data_path, machine.num_workers) == (96, "cache", workers)
    assert machine.persistent_workers
    assert dict(fed.anchors)["machine+channels_last"] == machine.replace(channels_last=True)
    assert (f"input pipeline alone: data=device {0.5 * knee_rate:,.1f} · data=cache nw=0 300.0,"
            f" nw={workers} {2 * knee_rate:,.1f} samples/sec") in machine_text(fed)
    starved = with_compute_curve(plan, curve, Knobs(batch_size=4), rates[:2])
    assert dict(starved.anchors)["machine"].data_path == "cache"     # 300 > 210: the fastest
    assert dict(starved.anchors)["machine"].num_workers == 0
    unmeasured = with_compute_curve(plan, curve, Knobs(batch_size=4))
    assert dict(unmeasured.anchors)["machine"].data_path == "device"  # by order alone


def test_a_run_with_a_time_budget_still_screens_its_proposals(tmp_path, tuner_cache):
    """Under a time budget every trial carries its deadline in its settings, and a proposal
    keeps its screening settings beside it (one window, no steady-state probes): the deadline
    must not replace them, or every searched trial measures the full windows."""
    plan = make_plan(RunOptions(workload=REGRESSION, device="cpu", probe="off",
                                time_budget_s=600, results=str(tmp_path / "results")))
    plan = with_compute_curve(plan, CURVE, Knobs(batch_size=4)).with_deadline(
        time.monotonic() + 600)
    searcher = make_searcher(plan.search_spec())
    configs = [searcher.suggest(f"t{i}") for i in range(6)]
    deadline = plan.settings.deadline_unix_s
    assert all(c["tuner"] == {"deadline_unix_s": deadline} for c in configs[:2])
    assert all(c["tuner"] == {"windows": 1, "max_steady_probes": 0, "window_s": 1.0,
                              "deadline_unix_s": deadline} for c in configs[2:])


def test_without_finalists_or_a_curve_nothing_is_screened_or_anchored(tmp_path, tuner_cache):
    """--confirm 0 leaves no re-measurement to promote to: every trial measures the full
    windows; without a compute curve (no probe) the search starts from the references alone
    over the space's own range."""
    results = str(tmp_path / "results")
    plan = make_plan(RunOptions(workload=REGRESSION, trials=8, device="cpu", probe="off",
                                results=results, confirm=0))
    assert plan.screen_windows == 0 and with_compute_curve(plan, None, None) is plan
    searcher = make_searcher(plan.search_spec())
    configs = [searcher.suggest(f"t{i}") for i in range(4)]
    assert all("tuner" not in c for c in configs)
    assert plan.anchors == () and plan.device_space.domains["batch_size"].low == 4


def test_an_anchor_already_measured_is_not_measured_again(tmp_path, tuner_cache):
    """An anchor equal to a configuration the study holds (a resumed run's row) is skipped."""
    plan = make_plan(RunOptions(workload=REGRESSION, trials=8, device="cpu", probe="off",
                                results=str(tmp_path / "results")))
    plan = with_compute_curve(plan, CURVE, Knobs(batch_size=4))
    searcher = make_searcher(plan.search_spec())
    machine = plan.anchor_params[0][1]
    searcher.measured[tuple(sorted(machine.items()))] = (500.0, -0.5)
    configs = [searcher.suggest(f"t{i}") for i in range(3)]
    assert [c.get("anchor") for c in configs] == [None, None, "doubling"]


def test_screening_defaults_plan_three_times_the_trials(tmp_path, tuner_cache):
    """Screened trials cost about a third of full ones: a run without --trials plans three
    times the trials (36 on CPU), one that screens nothing (--confirm 0) the 12 of before."""
    results = str(tmp_path / "results")
    screened = make_plan(RunOptions(workload=REGRESSION, device="cpu", probe="off",
                                    results=results))
    full = make_plan(RunOptions(workload=REGRESSION, device="cpu", probe="off",
                                results=results, confirm=0))
    assert (screened.trials, screened.screen_windows) == (36, 1)
    assert (full.trials, full.screen_windows) == (12, 0)


def test_a_screening_trial_is_not_stopped_after_its_only_window():
    """Early stopping judges a trial against its own planned windows: a screening trial of one
    window has measured all it will after it (stopping it would only turn its row 'pruned'
    and keep it from the finalists), a full trial as slow is stopped there."""
    from types import SimpleNamespace

    from ray.tune.schedulers import TrialScheduler

    from tuner.pruning import EarlyStopping

    def window(i: int, rate: float) -> dict:
        return {"status": "running", "window": i, "window_samples_per_sec": rate,
                "samples_per_sec": rate}

    rule = EarlyStopping("samples_per_sec", "max", windows=3)
    ref = SimpleNamespace(trial_id="ref", config={"phase": "search", "reference": "baseline"})
    for i, rate in enumerate((400.0, 404.0, 398.0)):
        rule.on_trial_result(None, ref, window(i, rate))
    screened = SimpleNamespace(trial_id="s", config={"phase": "search", "reference": None,
                                                     "tuner": {"windows": 1}})
    full = SimpleNamespace(trial_id="f", config={"phase": "search", "reference": None})
    assert rule.on_trial_result(None, screened, window(0, 80.0)) == TrialScheduler.CONTINUE
    assert rule.on_trial_result(None, full, window(0, 80.0)) == TrialScheduler.STOP


def test_the_machine_line_names_the_knee_the_limit_and_the_points_or_why_there_are_none(
        tmp_path, tuner_cache):
    from tuner.driver import machine_text
    results = str(tmp_path / "results")
    plan = make_plan(RunOptions(workload=REGRESSION, trials=8, device="cpu", probe="off",
                                results=results))
    assert "not measured before the search (the memory probe is off: --probe off)" in (
        machine_text(plan))
    auto = make_plan(RunOptions(workload=REGRESSION, trials=8, device="cpu", results=results))
    assert "on the CPU device it runs with --max-host-memory or --probe on" in machine_text(auto)
    text = machine_text(with_compute_curve(plan, CURVE, Knobs(batch_size=4)))
    assert "5,614.0 samples/sec compute-only at batch_size 64" in text
    assert "step 5.0 ms + 100.0 us/sample · knee batch_size 48" in text
    assert "searched batch_size [12, 64] log" in text
    assert "machine: bs=48" in text and "doubling: bs=64" in text


def test_the_probe_s_limit_row_is_printed_as_the_machine_limit_not_as_a_search_trial(
        tmp_path, tuner_cache):
    from rich.console import Console

    from tuner.progress import Progress
    plan = make_plan(RunOptions(workload=REGRESSION, trials=3, device="cpu", probe="off",
                                results=str(tmp_path / "results")))
    console = Console(record=True, width=300)
    progress = Progress(console)
    progress.on_event("start", {"plan": plan, "concurrency": 1})
    row = {**Knobs(batch_size=64).to_dict(), "status": "ok", "samples_per_sec": 5614.0,
           "reference": None, "phase": "ceiling", "ceiling": "machine-compute", "error": None}
    progress.on_event("trial", {"row": row, "index": 1, "total": 3})
    progress.on_event("trial", {"row": {**row, "phase": "search", "ceiling": None,
                                        "samples_per_sec": 100.0}, "index": 2, "total": 3})
    progress.close()
    text = console.export_text()
    assert "[machine-compute] ok" in text and "(the memory probe's timed steps)" in text
    assert "[search 1/3] ok" in text
