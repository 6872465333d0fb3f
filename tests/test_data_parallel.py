"""Data-parallel trials (``--world-size``): Ray Train runs each trial as DDP over 2 ranks with
the gloo backend on this machine's CPUs (one process per rank)."""

from __future__ import annotations

import os
import time

import pytest

RANK_OOM = "tests.fake_workloads:rank_oom"


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory, regression_data, ray_session):
    """``run --world-size 1,2`` of the fake regression, through the CLI in this process: a
    search at each size; at 2 ranks the baseline (batch 32) fails on rank 1 with a fake OOM and
    the recommended (batch 8) runs. Returns (every row, the printed output, seconds the run
    took)."""
    import tuner.leaderboard as leaderboard
    from tests.conftest import tuner_in_process
    root = tmp_path_factory.mktemp("ddp")
    results = root / "results"
    started = time.monotonic()
    done = tuner_in_process(
        "run", "--workload", RANK_OOM, "--data", str(regression_data), "--trials", "2",
        "--world-size", "1,2", "--results", str(results), "--device", "cpu", "--windows", "2",
        "--window-s", "0.5", "--warmup-steps", "2", "--confirm", "0", "--no-ceiling",
        "--no-early-stop", "--gpu-hour-cost", "2", env={"TUNER_CACHE": str(root / "cache")})
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    return leaderboard.read(str(results)).to_pylist(), done.stdout, seconds


def _by_reference(rows: list[dict]) -> dict:
    return {row["reference"]: row for row in rows}


def _two_rank(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["world_size"] == 2]


@pytest.mark.slow
def test_a_two_rank_trial_records_its_world_size_and_a_global_rate(two_rank_run):
    rows, _, _ = two_rank_run
    ok = _by_reference(_two_rank(rows))["recommended"]
    assert ok["status"] == "ok", ok["error"]
    assert ok["world_size"] == 2 and ok["backend"] == "gloo"
    # the ranks step together on equal micro-batches: the global rate is twice rank 0's
    assert ok["samples_per_sec"] == pytest.approx(2 * ok["rank_samples_per_sec"], rel=1e-9)
    assert ok["slowest_rank"] in (0, 1) and ok["slowest_rank_data_wait_s"] >= 0
    assert ok["trial_cpus"] == 2.0 and ok["torch_threads"] == 1  # 1 CPU per rank, no workers


@pytest.mark.slow
def test_a_fake_oom_on_one_rank_ends_the_trial_oom_and_the_run_goes_on(two_rank_run):
    all_rows, _, seconds = two_rank_run
    rows = _two_rank(all_rows)
    assert len(rows) == 2  # one row per trial, written by the driver
    failed = _by_reference(rows)["baseline"]
    assert failed["status"] == "oom", failed["error"]
    assert failed["error"].startswith("rank 1: ") and "out of memory" in failed["error"]
    assert failed["world_size"] == 2
    assert _by_reference(rows)["recommended"]["status"] == "ok"
    print(f"2-rank run with one rank's OOM: {seconds:.0f} s")


def test_more_ranks_than_cpus_is_refused_in_one_line(tmp_path, regression_data):
    from tuner.errors import TunerError
    from tuner.option_checks import make_plan
    from tuner.settings import RunOptions
    n = (os.cpu_count() or 1) + 1
    with pytest.raises(TunerError, match=rf"--world-size {n}: this machine has \d+ CPUs"):
        make_plan(RunOptions(workload=RANK_OOM, device="cpu", data=str(regression_data),
                             results=str(tmp_path / "r"), world_size=n))


def test_the_ddp_knobs_are_sampled_only_at_world_size_above_one(tmp_path, regression_data):
    from tuner.knobs import DDP_KNOBS
    from tuner.option_checks import make_plan
    from tuner.settings import RunOptions
    common = dict(workload=RANK_OOM, device="cpu", data=str(regression_data),
                  results=str(tmp_path / "r"))
    one = make_plan(RunOptions(**common)).device_space
    two = make_plan(RunOptions(**common, world_size=2)).device_space
    assert not set(DDP_KNOBS) & set(one.domains)
    assert set(DDP_KNOBS) <= set(two.domains)
    # 2 ranks on this machine's CPUs: world size x (num_workers + 1) <= CPUs
    workers = two.domains.get("num_workers")
    high = workers.high if workers is not None else two.constants["num_workers"]
    assert 2 * (high + 1) <= max(os.cpu_count() or 1, 2)


# ------------------------------------------------------------------ without Ray: the rules

def test_world_sizes_parse_a_count_or_a_list_and_refuse_anything_else():
    from tuner.errors import TunerError
    from tuner.scaling import world_sizes
    assert world_sizes(2) == (2,) and world_sizes([1, 2, 1]) == (1, 2)  # as tune() takes them
    for bad in ([1, True], [1.5], [], None):
        with pytest.raises(TunerError, match="--world-size .*: accepted: a rank count >= 1"):
            world_sizes(bad)
    assert world_sizes("2") == (2,)
    assert world_sizes("1,2,4") == (1, 2, 4)
    assert world_sizes("2,2,1") == (2, 1)  # each size once, in the order given
    for bad in ("0", "two", "1,,2", "-1"):
        with pytest.raises(TunerError, match=rf"--world-size {bad}: accepted"):
            world_sizes(bad)


def _row(world_size: int, rate: float, trial: str, **extra) -> dict:
    return {"status": "ok", "phase": "search", "world_size": world_size,
            "samples_per_sec": rate, "trial_id": trial, "run_id": f"r{world_size}", **extra}


def test_scaling_efficiency_and_cost_per_world_size():
    from tuner.scaling import scaling, scaling_lines
    rows = [_row(None, 100.0, "a"), _row(1, 90.0, "b"), _row(2, 180.0, "c"),
            _row(2, 150.0, "d"), _row(4, 500.0, "e", phase="ceiling"), _row(4, 340.0, "f"),
            {**_row(4, 999.0, "g"), "status": "oom"}]
    one, two, four = scaling(rows, gpu_hour_cost=3.6)
    assert (one.world_size, one.trial_id, one.efficiency) == (1, "a", 1.0)  # null world size: 1
    assert (two.trial_id, two.rank_samples_per_sec) == ("c", 90.0)
    assert two.efficiency == pytest.approx(0.9)
    assert four.trial_id == "f" and four.efficiency == pytest.approx(0.85)  # no ceiling, no oom
    # 3.6 per GPU-hour, 2 GPUs, 180 samples/sec: 7.2 per 648,000 samples
    assert two.cost_per_million_samples == pytest.approx(7.2 / 0.648)
    lines = scaling_lines((one, two, four))
    assert lines[1] == ("world size 2: 180.0 samples/sec (90.0 per rank), scaling efficiency "
                        "90 %, 11.1 per million samples")


@pytest.mark.parametrize("cost, text", [(0.2761918, "0.276"), (0.28, "0.280"),
                                        (0.0041234, "0.00412"), (27.61, "27.6"), (99.96, "100"),
                                        (1234.5, "1,234")])
def test_a_cost_is_printed_to_three_significant_figures(cost, text):
    from tuner.scaling import cost_text
    assert cost_text(cost) == text


def test_an_efficiency_measured_above_one_is_shown_as_100_percent():
    from tuner.scaling import scaling, scaling_lines
    sizes = scaling([_row(1, 100.0, "a"), _row(2, 204.0, "b")])
    assert sizes[1].efficiency == 1.0 and sizes[1].efficiency_measured_above_one
    assert "scaling efficiency 100 % (measured above: within the noise)" in scaling_lines(sizes)[1]
    assert scaling_lines(scaling([_row(1, 100.0, "a")])) == []  # one rank: nothing to say
    alone = scaling_lines(scaling([_row(2, 100.0, "a")]))
    assert alone[-1].startswith("scaling efficiency needs a single-rank trial")


def test_the_printed_ddp_code_trains_in_a_process_group():
    """The lines `best --format python` prints for a 2-rank row run as written, here in a
    one-process gloo group (what torchrun would set up, with a world of one)."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import TensorDataset

    from tuner.codegen import python_text
    from tuner.knobs import Knobs
    knobs = Knobs(batch_size=4, ddp_bucket_cap_mb=50, gradient_as_bucket_view=True)
    text = python_text(knobs, "cpu", world_size=2)
    assert "torchrun --nproc-per-node 2" in text and "num_workers=2, use_gpu=False" in text
    assert ("DistributedDataParallel(model, bucket_cap_mb=50, gradient_as_bucket_view=True, "
            "static_graph=False)") in text
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531", RANK="0", WORLD_SIZE="1")
    try:
        namespace = {"dataset": TensorDataset(torch.randn(16, 3), torch.randn(16, 1)),
                     "model": torch.nn.Linear(3, 1), "loss_fn": torch.nn.functional.mse_loss,
                     "lr": 0.1}
        exec(compile(text, "best.py", "exec"), namespace)
        assert isinstance(namespace["model"], torch.nn.parallel.DistributedDataParallel)
        assert dist.get_backend() == "gloo"
        assert namespace["optimizer"].state  # it stepped
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
            os.environ.pop(key, None)


@pytest.mark.slow
def test_a_world_size_list_records_both_sizes_and_their_scaling_efficiency(two_rank_run):
    """``run --world-size 1,2``: a search at each size, rows of both sizes in the leaderboard,
    and at the end the two-rank line with its scaling efficiency and cost."""
    import re
    rows, out, _ = two_rank_run
    assert sorted(r["world_size"] for r in rows) == [1, 1, 2, 2]
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 3, [(r["status"], r["error"]) for r in rows]   # all but the rank-1 OOM
    best = {n: max(r["samples_per_sec"] for r in ok if r["world_size"] == n) for n in (1, 2)}
    line = re.search(r"world size 2: ([0-9.,]+) samples/sec \(([0-9.,]+) per rank\), scaling "
                     r"efficiency (\d+) %(?: \([^)]*\))?, ([0-9.]+) per million samples",
                     " ".join(out.split()))
    assert line, out[-2000:]
    assert float(line[1].replace(",", "")) == pytest.approx(best[2], abs=0.06)
    efficiency = min(1.0, best[2] / (2 * best[1]))
    assert int(line[3]) == round(100 * efficiency)
    # three significant figures: within half a unit of the third (0.5 %) of what the rows give
    assert float(line[4]) == pytest.approx(2 * 2 / (best[2] * 3600) * 1e6, rel=0.006)


def _two_rank_row(tmp_path) -> None:
    import datetime as dt

    import tuner.leaderboard as leaderboard
    from tuner.knobs import Knobs
    from tuner.settings import VERSION
    now = dt.datetime.now(dt.timezone.utc)
    leaderboard.write_row(str(tmp_path / "results"), {
        "run_id": "r", "trial_id": "t2", "workload": "fake-regression", "scale": "tiny",
        "status": "ok", "phase": "search", "samples_per_sec": 100.0, "world_size": 2,
        **Knobs(batch_size=8).to_dict(), "device": "cpu", "hardware_key": "cpu:x:2cpu",
        "started_at": now, "finished_at": now, "tuner_version": VERSION, "trial_cpus": 2.0,
        "torch_threads": 1})


def test_validate_checks_a_two_rank_trial_with_a_plain_ddp_loop(tmp_path, regression_data):
    """Two local processes in a gloo group train the printed lines (a DistributedSampler per
    rank, the model in DDP) the same steps; the global figure is held to the trial's."""
    from tests.conftest import tuner_in_process
    _two_rank_row(tmp_path)
    proc = tuner_in_process("validate", "--workload", "tests.fake_workloads:regression",
                            "--results", str(tmp_path / "results"), "--data",
                            str(regression_data), "--steps", "12")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "predicted (trial median, 2 ranks) │ 100.0" in out
    # rank 0's 12 steps over its half of the 64 samples, 4 batches of 8: 3 epochs (1.5 alone)
    assert "measured (12 steps, 3.0 epochs" in out
    ratio = float(out.split("measured ÷ predicted")[1].split()[1])
    assert ratio > 0


def test_validate_refuses_another_world_size_in_one_line(tmp_path):
    from tests.conftest import tuner_in_process
    _two_rank_row(tmp_path)
    proc = tuner_in_process("validate", "--workload", "tests.fake_workloads:regression",
                            "--results", str(tmp_path / "results"), "--world-size", "4")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and lines == [
        "error: --world-size 4: trial t2 trained on 2 rank(s); accepted: 2"], proc.stderr


def test_a_multi_rank_run_measures_no_ceiling_and_says_so(tmp_path, regression_data):
    from tuner.option_checks import make_plan
    from tuner.settings import RunOptions
    plan = make_plan(RunOptions(workload=RANK_OOM, device="cpu", data=str(regression_data),
                                results=str(tmp_path / "r"), world_size=2))
    assert plan.options.ceiling is False and plan.settings.world_size == 2
    assert plan.notes[0] == ("--world-size 2: the ceilings (compute-only, loader-only, the "
                             "machine's) are measured in one-rank runs only")
    one = make_plan(RunOptions(workload=RANK_OOM, device="cpu", data=str(regression_data),
                               results=str(tmp_path / "r")))
    assert one.options.ceiling is True


def test_each_rank_asks_for_its_share_of_the_node(tmp_path, regression_data):
    """The ranks of a node share its CPUs: on a 16-CPU node with 8 GPUs, 2 ranks ask for 8
    CPUs each (their workers and training threads), not 1."""
    from tuner.option_checks import make_plan
    from tuner.plan import Resources
    from tuner.settings import RunOptions
    from tuner.trial.distributed import _rank_cpus
    resources = Resources(device="cuda", gpus=8, node_cpus=16)
    plan = make_plan(RunOptions(workload=RANK_OOM, device="cpu", data=str(regression_data),
                                results=str(tmp_path / "r"), world_size=2),
                     resources=resources)
    assert plan.settings.rank_cpus == 8 and _rank_cpus(plan.settings) == 8


def test_a_world_size_list_runs_each_size_in_turn_and_prints_their_scaling(monkeypatch):
    """`run --world-size 1,2 --time-budget 100`: a run per size, in order, 50 s each, then a
    line per world size with its efficiency and cost."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    import tuner.cli as cli
    runs = []

    def one_run(options, launched):
        runs.append((options.world_size, options.time_budget_s, launched))
        rate = {1: 100.0, 2: 180.0}[options.world_size]
        return SimpleNamespace(rows=[_row(options.world_size, rate, f"t{options.world_size}")])

    monkeypatch.setattr(cli, "_run_one", one_run)
    out = CliRunner().invoke(cli.main, ["run", "-w", "ddpm", "--world-size", "1,2",
                                        "--time-budget", "100", "--gpu-hour-cost", "3.6"])
    assert out.exit_code == 0, out.output
    assert runs == [(1, 50.0, True), (2, 50.0, False)]
    assert "world size 2: 180.0 samples/sec (90.0 per rank), scaling efficiency 90 %, 11.1 per " \
           "million samples" in " ".join(out.output.split())


def test_the_cli_world_size_parser_moved_to_the_library_and_still_reads_with_a_warning():
    import tuner.cli as cli
    import tuner.scaling as scaling
    with pytest.warns(DeprecationWarning, match="tuner.cli.world_sizes was deprecated .*"
                                                "use tuner.scaling.world_sizes"):
        assert cli.world_sizes is scaling.world_sizes


def test_tune_with_a_world_size_list_runs_each_size_in_turn_and_returns_their_scaling(
        monkeypatch, tmp_path, regression_data):
    """``tuner.tune(..., world_size=[1, 2], time_budget_s=100)``: a plan and a run per size, in
    order, 50 s each, and a ``ScalingResult`` with each size's run and the scaling efficiency
    (the driver's run faked: each size's best at 100 and 180 samples/sec)."""
    import contextlib
    from types import SimpleNamespace

    import tuner
    import tuner.api as api
    from tuner.driver import RunSummary
    from tuner.errors import TunerError
    planned_sizes = []

    @contextlib.contextmanager
    def planned(options):
        planned_sizes.append((options.world_size, options.time_budget_s))
        yield SimpleNamespace(options=options, notes=[])

    def run(plan, on_event=None):
        n = plan.options.world_size
        return RunSummary(f"r{n}", "fake-regression", "cpu", "tiny",
                          [_row(n, {1: 100.0, 2: 180.0}[n], f"t{n}")], 1.0, str(tmp_path))

    monkeypatch.setattr(api, "planned", planned)
    monkeypatch.setattr(api, "run", run)
    found = tuner.tune(RANK_OOM, device="cpu", data=str(regression_data), results=str(tmp_path),
                       time_budget_s=100, progress=False, world_size=[1, 2], gpu_hour_cost=3.6)
    assert planned_sizes == [(1, 50.0), (2, 50.0)]
    assert isinstance(found, api.ScalingResult) and list(found.runs) == [1, 2]
    assert found.runs[2].run_id == "r2" and found.runs[1].rows[0]["samples_per_sec"] == 100.0
    two = found.world_sizes[1]
    assert (two.world_size, two.efficiency) == (2, pytest.approx(0.9))
    assert found.lines()[1] == ("world size 2: 180.0 samples/sec (90.0 per rank), scaling "
                                "efficiency 90 %, 11.1 per million samples")
    with pytest.raises(TunerError, match=r"--world-size 0,2: accepted"):
        tuner.tune(RANK_OOM, device="cpu", progress=False, world_size=[0, 2])


def test_the_report_has_a_world_size_table_only_for_multi_rank_trials():
    from tuner.report import _world_sizes
    one = [_row(1, 100.0, "a")]
    assert _world_sizes(one) == []
    heading, table = _world_sizes([*one, _row(2, 180.0, "b")])
    assert heading == "<h2>World sizes</h2>"
    assert "<td>2</td><td>180.0</td><td>90.0</td><td>90 %</td><td>—</td><td>b</td>" in table


def test_each_multi_rank_row_has_its_scaling_efficiency():
    from tuner.scaling import row_efficiency
    rows = [_row(1, 100.0, "a"), _row(2, 180.0, "b"), _row(2, 150.0, "c"),
            {**_row(2, None, "d"), "status": "oom"}]
    assert row_efficiency(rows) == [None, pytest.approx(0.9), pytest.approx(0.75), None]
    assert row_efficiency(rows[1:]) == [None, None, None]  # no one-rank figure to compare with
