"""The run's searcher without Ray, driven by hand: out-of-memory trials reach the sampler as
infeasible, so it learns where configurations stop fitting, and a space with fewer points than
trials still gives every trial an Optuna trial. (A file of its own beside tests/test_limits.py,
whose runs go through Ray: the suite's workers take whole files, and the GP's fitting is one of
the suite's longest tests.)"""

from __future__ import annotations

import pytest

from tuner.option_checks import make_plan
from tuner.searcher import make_searcher
from tuner.settings import RunOptions

OOM = "tests.fake_workloads:oom"
REGRESSION = "tests.fake_workloads:regression"
OOM_ABOVE = 16  # tests.fake_workloads.FakeOOM.OOM_ABOVE


def simulate(seed: int, trials: int, oom_as_failure: bool = False,
             sampler: str = "gp") -> tuple[list[dict], object]:
    """Drive the run's searcher by hand on the OOM workload: batch sizes above 16 run out of
    memory, below it samples/sec grows with the batch (the optimum sits on the boundary, as
    on a real device). Returns the configurations of the trials in order and the searcher.
    ``oom_as_failure``: report out-of-memory as a failed trial instead (what a plain
    OptunaSearch sees when the trial raises), for comparison."""
    import tempfile
    with tempfile.TemporaryDirectory() as results:
        plan = make_plan(RunOptions(workload=OOM, trials=trials, results=results, probe="off",
                               device="cpu", seed=seed, sampler=sampler))
        searcher = make_searcher(plan.search_spec())
        configs = []
        for i in range(trials):
            searcher.suggest(f"t{i}")
            config = dict(searcher.params(f"t{i}"))
            configs.append(config)
            if config["batch_size"] > OOM_ABOVE:
                if oom_as_failure:
                    searcher.on_trial_complete(f"t{i}", None, error=True)
                else:
                    searcher.on_trial_complete(f"t{i}", {"status": "oom", "memory_exceeded": "host",
                                                         "samples_per_sec": 0.0})
            else:
                searcher.on_trial_complete(
                    f"t{i}", {"status": "ok", "samples_per_sec": 100.0 * config["batch_size"]})
        return configs, searcher


@pytest.mark.parametrize("sampler", ["gp", "tpe"])
def test_searcher_learns_the_infeasible_region_without_ray(tuner_cache, one_torch_thread,
                                                           sampler):
    """Out-of-memory trials reach the sampler as infeasible (constraint violated), not as
    failures: in every seed the second half of the trials runs fewer configurations that do not
    fit than the first; no trial runs a configuration that an earlier failure implies cannot
    fit (same knobs, batch at least as large); the study's best is a batch that fits. A
    searcher that sees OOM as a failure (invisible to the sampler) keeps spending trials there.
    One torch thread: Optuna's GPSampler fits tiny matrices, where a second thread only adds
    synchronisation (measured on a busy 2-core machine: 2.3x the CPU time and 1.5x the wall
    time of one, the same proposals). The GP learns after 3 start-up trials (``make_sampler``)
    and is slow to fit (about 3 CPU seconds a trial at 40 trials, growing with the trials): 16,
    the fewest at which both seeds' halves show it (at 12 to 15 trials seed 1's halves hold one
    each; its first 16 are those of a run of 20); TPE starts up for 10 and is fast: 40."""
    import optuna
    trials = {"gp": 16, "tpe": 40}[sampler]
    half = trials // 2
    second_infeasible = second_if_failed = 0
    for seed in (0, 1):
        configs, searcher = simulate(seed, trials, sampler=sampler)
        over = [c["batch_size"] > OOM_ABOVE for c in configs]
        assert sum(over[half:]) < sum(over[:half]), (seed, [c["batch_size"] for c in configs])
        second_infeasible += sum(over[half:])
        for i, config in enumerate(configs):
            others = {k: v for k, v in config.items() if k != "batch_size"}
            implied = [c for c, failed in zip(configs[:i], over[:i]) if failed
                       and c["batch_size"] <= config["batch_size"]
                       and {k: v for k, v in c.items() if k != "batch_size"} == others]
            assert not implied, (i, config, implied)
        study = searcher.study
        infeasible = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE
                      and t.params["batch_size"] > OOM_ABOVE]
        assert infeasible and all(t.constraints["memory"] > 0 for t in infeasible)
        best = study.best_trial                       # Optuna skips infeasible trials here
        assert best.params["batch_size"] <= OOM_ABOVE
        assert best.constraints["memory"] <= 0
        assert best.value == 100.0 * best.params["batch_size"]
        failed_configs, _ = simulate(seed, trials, oom_as_failure=True, sampler=sampler)
        second_if_failed += sum(c["batch_size"] > OOM_ABOVE for c in failed_configs[half:])
    # In the second half the constrained search runs far fewer configurations that do not fit
    # than one that sees OOM as a failure.
    assert second_infeasible < 0.5 * second_if_failed, (second_infeasible, second_if_failed)


def test_searcher_survives_a_space_with_fewer_points_than_trials(tmp_path, tuner_cache):
    """Every configuration of a two-point space is measured after the references; the searcher
    must still give each further trial an Optuna trial to report to (Ray Tune calls
    on_trial_result / on_trial_complete for every trial it suggested), not crash the run."""
    space = tmp_path / "two-points.yaml"
    space.write_text("knobs:\n  batch_size: {choices: [4, 16]}\n  num_workers: 0\n")
    plan = make_plan(RunOptions(workload=REGRESSION, space_file=str(space), trials=4,
                           results=str(tmp_path / "results"), device="cpu", probe="off"))
    searcher = make_searcher(plan.search_spec())
    for i in range(4):
        config = searcher.suggest(f"t{i}")
        assert config is not None and config["batch_size"] in (4, 16)
        result = {"status": "ok", "samples_per_sec": 10.0 * config["batch_size"]}
        searcher.on_trial_result(f"t{i}", {**result, "training_iteration": 1})  # a window
        # (a KeyError in either call crashes Tuner.fit: the run dies with a traceback)
        searcher.on_trial_complete(f"t{i}", result)
    assert searcher.study.best_trial.params["batch_size"] == 16
