"""Numbers users can trust: memory limits and out-of-memory trials (the memory probe bounds the
batch, host memory is limited per trial; the searcher's side without Ray:
tests/test_limits_searcher.py), a fixed global batch, the per-phase breakdown, the
time-to-train objective, re-measurement of the best and the compute-only ceiling, and the
profile/validate/report commands on a real run."""

from __future__ import annotations

import html.parser
import math
import os
from pathlib import Path

import pytest

from tests.conftest import tuner_in_process
from tuner import leaderboard, noise
from tuner.driver import run
from tuner.errors import TunerError
from tuner.followups import CAN_WIN_FRACTION
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.plan import REMEASURE_ROUNDS
from tuner.settings import RunOptions, TrialSettings, parse_memory
from tuner.trial.harness import PHASES, run_trial
from tuner.winner import best as answer_of

OOM = "tests.fake_workloads:oom"
REGRESSION = "tests.fake_workloads:regression"
OOM_ABOVE = 16  # tests.fake_workloads.FakeOOM.OOM_ABOVE
SHORT = dict(device="cpu", windows=2, window_s=0.2, warmup_steps=1, confirm=0, ceiling=False,
             early_stop=False)  # these tests count rows and statuses (pruning: test_budget.py)
"""Short measurements and the search phase only (one row per trial)."""


def short_options(results: Path, workload: str, trials: int, **changes) -> RunOptions:
    return RunOptions(**{"workload": workload, "trials": trials, "results": str(results),
                         **SHORT, **changes})


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """$TUNER_CACHE at a temporary directory for the whole module (before Ray starts, so its
    workers see it too)."""
    with pytest.MonkeyPatch.context() as mp:
        cache = tmp_path_factory.mktemp("limits-cache")
        mp.setenv("TUNER_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="module")
def ray_local(module_cache, ray_session):
    """One local Ray for the module's runs (conftest's ray_session), after $TUNER_CACHE is set."""


@pytest.fixture(scope="module")
def no_workers_space(tmp_path_factory) -> str:
    """The test space without DataLoader workers: trials start no worker processes (fast on
    a loaded 2-core machine); the batch range is the same."""
    path = tmp_path_factory.mktemp("spaces") / "no-workers.yaml"
    path.write_text("knobs:\n  batch_size: {low: 4, high: 64, log: true}\n  num_workers: 0\n")
    return str(path)


# ----------------------------------------------------------------------- runs through Ray

@pytest.mark.slow
def test_oom_rows_have_no_throughput_and_never_win(tmp_path, ray_local, no_workers_space):
    """The references (batch 4 and 16) fit; the GP's start-up trial (seed 0), the third, is
    batch 17, which does not: three trials hold both kinds of row (a trial costs seconds of
    set-up and windows on a loaded machine)."""
    summary = run(short_options(tmp_path / "results", OOM, trials=3, probe="off",
                                space_file=no_workers_space))
    rows = leaderboard.read(summary.results_dir).to_pylist()
    assert len(rows) == 3
    oom = [r for r in rows if r["status"] == "oom"]
    assert oom, [(r["batch_size"], r["status"]) for r in rows]
    for r in oom:
        assert r["batch_size"] > OOM_ABOVE
        assert r["memory_exceeded"] == "host"              # the CPU device's memory
        assert r["samples_per_sec"] is None and r["step_time_ms_p50"] is None
        assert "OutOfMemoryError" in r["error"]
    top = answer_of(rows).row
    assert top["status"] == "ok" and top["batch_size"] <= OOM_ABOVE


@pytest.mark.slow
def test_memory_probe_bounds_the_searched_batch(tmp_path, ray_local):
    """The space file stops at batch 8; the probe searches up to the dataset's 64 samples and
    the search is bounded by what fits (16 on this fake device), not by the file. Three
    trials: the references and one searched trial, which the bound holds."""
    space = tmp_path / "small-high.yaml"
    space.write_text("knobs:\n  batch_size: {low: 4, high: 8, log: true}\n  num_workers: 0\n")
    events = []
    summary = run(short_options(tmp_path / "results", OOM, trials=3, probe="on",
                                space_file=str(space)),
                  on_event=lambda kind, data: events.append((kind, data)))
    plan = next(data["plan"] for kind, data in events if kind == "start")
    assert plan.device_space.domains["batch_size"].high == OOM_ABOVE   # 16 > the file's 8
    probes = [data["result"] for kind, data in events if kind == "probe"]
    assert len(probes) == 1
    result = probes[0]
    assert result.max_batch == OOM_ABOVE
    assert result.first_failure is not None and result.first_failure > OOM_ABOVE
    statuses = {bs: status for bs, status, _ in result.probes}
    assert statuses[OOM_ABOVE] == "ok"
    assert all(status == ("ok" if bs <= OOM_ABOVE else "oom") for bs, status in statuses.items())
    # the probe's timed steps at its bound are the run's machine-compute ceiling row
    limit = [r for r in summary.rows if r["phase"] == "ceiling"]
    assert [(r["ceiling"], r["batch_size"], r["status"]) for r in limit] == [
        ("machine-compute", OOM_ABOVE, "ok")]
    assert len([r for r in summary.rows if r["phase"] == "search"]) == 3
    searched = [r for r in summary.rows if r["reference"] is None and r["phase"] == "search"]
    assert searched
    for r in searched:
        assert r["batch_size"] <= OOM_ABOVE
        assert r["status"] == "ok", r["error"]


@pytest.mark.slow
def test_an_injected_ceiling_below_the_pipeline_is_measured_again_and_flagged(tmp_path, ray_local,
                                                                              no_workers_space):
    """One search trial (the baseline: the winner, nothing to re-measure beside it), then its
    ceilings, the compute-only one measured again."""
    events = []
    summary = run(short_options(tmp_path / "results", "tests.fake_workloads:slow_ceiling",
                                trials=1, confirm=1, ceiling=True, space_file=no_workers_space,
                                window_s=1.0),
                  on_event=lambda kind, data: events.append((kind, data)))
    ceilings = [r for r in summary.rows if r["phase"] == "ceiling" and r["ceiling"] == "compute"]
    assert len(ceilings) == 2 and all(r["status"] == "ok" for r in ceilings)
    compute = [d for k, d in events if k == "phase" and d["phase"] == "ceiling"
               and d.get("ceiling", "compute") == "compute"]
    assert [d.get("again", False) for d in compute] == [False, True]
    top = answer_of(summary.rows)
    assert top.ceilings.compute_disturbed and top.ceilings.pipeline_efficiency is None
    assert top.ceilings.compute_samples_per_sec < top.samples_per_sec


@pytest.mark.slow
def test_fixed_global_batch_holds_in_every_row(tmp_path, ray_local, no_workers_space):
    """The references and one searched trial (its micro-batch the sampler's), each row
    accumulating to the global batch."""
    summary = run(short_options(tmp_path / "results", REGRESSION, trials=3, global_batch_size=32,
                                space_file=no_workers_space))
    rows = leaderboard.read(summary.results_dir).to_pylist()
    assert len(rows) == 3
    for r in rows:
        assert r["status"] == "ok", r["error"]
        assert r["batch_size"] * r["grad_accum"] == 32
        assert r["global_batch_size"] == 32
    # The references keep their micro-batch and accumulate up to the global batch.
    refs = {r["reference"]: r for r in rows if r["reference"]}
    assert (refs["baseline"]["batch_size"], refs["baseline"]["grad_accum"]) == (4, 8)
    assert (refs["recommended"]["batch_size"], refs["recommended"]["grad_accum"]) == (16, 2)


@pytest.fixture(scope="module")
def followup_run(tmp_path_factory, ray_local, no_workers_space):
    """A regression run with its follow-up phases: 3 search trials (the references and one
    searched), the 2 best re-measured beside the references, the winner's compute-only
    ceiling."""
    results = tmp_path_factory.mktemp("followups") / "results"
    options = short_options(results, REGRESSION, trials=3, confirm=2, ceiling=True,
                            space_file=no_workers_space)
    return run(options)


@pytest.mark.slow
def test_the_search_and_its_follow_ups_run_in_one_trial_process(followup_run):
    """An experiment per phase started a new trial process for each (torch and the workload
    imported again: 6-7 s on 2 CPU cores). The whole run is one Ray Tune experiment, and its
    search, re-measurement and ceiling trials all ran in one process, reused."""
    from ray.tune import ExperimentAnalysis
    experiments = [p for p in (Path(followup_run.results_dir) / "ray").iterdir() if p.is_dir()]
    assert len(experiments) == 1
    trials = ExperimentAnalysis(str(experiments[0])).trials
    assert len(trials) == len(followup_run.rows)
    assert {t.config["phase"] for t in trials} == {"search", "remeasure", "ceiling"}
    assert len({t.last_result["pid"] for t in trials}) == 1


@pytest.mark.slow
def test_remeasure_and_ceiling_phases(followup_run):
    rows = leaderboard.read(followup_run.results_dir).to_pylist()
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    search = [r for r in rows if r["phase"] == "search"]
    remeasured = [r for r in rows if r["phase"] == "remeasure"]
    ceilings = [r for r in rows if r["phase"] == "ceiling"]
    labels = [r["ceiling"] for r in ceilings]
    core = [r for r in ceilings if r["ceiling"].startswith("core-")]   # CPU: one core each
    assert len(search) == 3 and sorted(set(labels) - {"core-compute", "core-loader"}) == [
        "compute", "loader", "machine-compute", "machine-loader"]
    assert labels.count("compute") in (1, 2)
    assert len(labels) == labels.count("compute") + 3 + len(core) and len(core) <= 2
    assert all(r["torch_threads"] == 1 and (r["ceiling"] == "core-compute" or r["num_workers"] == 0)
               for r in core)
    assert len(rows) == len(search) + len(remeasured) + len(ceilings)
    # The per-phase breakdown is timed in the search only: the follow-ups repeat its configurations
    assert all(r["breakdown_step_ms"] is not None for r in search)
    assert all(r["breakdown_step_ms"] is None for r in remeasured + ceilings)
    # The two fastest distinct configurations of the search that can still win (at least half
    # the best's rate), and beside them the references, measured again in interleaved rounds
    # (A B C, A B C, A B C) of the windows that make twice the search's in all.
    best_sps = max(r["samples_per_sec"] for r in search)
    top2: list[Knobs] = []
    for r in sorted(search, key=lambda r: -r["samples_per_sec"]):
        if (Knobs.from_dict(r, strict=False) not in top2
                and r["samples_per_sec"] >= CAN_WIN_FRACTION * best_sps):
            top2.append(Knobs.from_dict(r, strict=False))
    top2 = top2[:2]
    references = {
        r["reference"]: Knobs.from_dict(r, strict=False) for r in search if r["reference"]
    }
    assert sorted(references) == ["baseline", "recommended"]
    expected = list(dict.fromkeys([*top2, *references.values()]))
    assert len(expected) >= 2
    assert len(remeasured) == REMEASURE_ROUNDS * len(expected)
    order = [
        Knobs.from_dict(r, strict=False) for r in sorted(remeasured, key=lambda r: r["started_at"])
    ]
    assert order == order[:len(expected)] * REMEASURE_ROUNDS      # the same order each round
    assert set(order) == set(expected)
    assert all(r["windows"] * REMEASURE_ROUNDS >= 2 * SHORT["windows"] for r in remeasured)
    for name, knobs in references.items():                 # named in both phases
        again = [r for r in remeasured if Knobs.from_dict(r, strict=False) == knobs]
        assert len(again) == REMEASURE_ROUNDS and {r["reference"] for r in again} == {name}
    # The winner is chosen among the re-measurements (the geometric mean of its rounds, a
    # round's disturbed window left out: tuner.noise.undisturbed, which a loaded machine
    # triggers); its speed-ups are against the references measured beside it, round by round,
    # with a 95 % interval.
    top = answer_of(rows)
    assert top.phase == "remeasure" and top.rounds == REMEASURE_ROUNDS
    rounds = [r for r in noise.undisturbed(rows) if r["phase"] == "remeasure"]
    winner_rows = [r for r in rounds if Knobs.from_dict(r, strict=False) == top.knobs]
    assert top.samples_per_sec == pytest.approx(
        math.prod(r["samples_per_sec"] for r in winner_rows) ** (1 / REMEASURE_ROUNDS))
    baseline_again = [r["samples_per_sec"] for r in rounds if r["reference"] == "baseline"]
    if not top.baseline.is_best:
        assert top.baseline.samples_per_sec == pytest.approx(
            math.prod(baseline_again) ** (1 / REMEASURE_ROUNDS))
        sp = top.baseline.speedup
        assert sp.ratio == pytest.approx(top.samples_per_sec / top.baseline.samples_per_sec)
        assert sp.pairs == REMEASURE_ROUNDS
        assert sp.low <= sp.ratio <= sp.high
    # The ceilings: the winner's knobs with batches already in memory (measured again if it
    # came out below the winner), and its DataLoader alone.
    winner, bounds = top.knobs, top.ceilings
    compute = [r for r in ceilings if r["ceiling"] == "compute"]
    assert all(Knobs.from_dict(r, strict=False) == winner for r in compute)
    assert bounds.compute_samples_per_sec == max(r["samples_per_sec"] for r in compute)
    if not bounds.compute_disturbed:
        assert bounds.pipeline_efficiency == pytest.approx(
            top.samples_per_sec / bounds.compute_samples_per_sec)
        assert 0 < bounds.pipeline_efficiency <= 1
    (loader,) = [r for r in ceilings if r["ceiling"] == "loader"]
    assert Knobs.from_dict(loader, strict=False) == winner and loader["final_loss"] is None
    assert bounds.loader_samples_per_sec == loader["samples_per_sec"]
    assert loader["achieved_tflops"] is None                # no model ran
    # This machine's limits: every CPU a worker; the largest batch the search allows.
    (m_loader,) = [r for r in ceilings if r["ceiling"] == "machine-loader"]
    (m_compute,) = [r for r in ceilings if r["ceiling"] == "machine-compute"]
    assert m_loader["num_workers"] == (os.cpu_count() or 1) and m_loader["persistent_workers"]
    assert m_compute["batch_size"] == 64                    # the space's high = the dataset
    compute = max(m_compute["samples_per_sec"], bounds.compute_samples_per_sec)  # best measured
    inputs = max(m_loader["samples_per_sec"], loader["samples_per_sec"])
    attainable = min(inputs, compute)
    if len({r["ceiling"] for r in core}) == 2:   # on CPU the two share the cores
        rate = {r["ceiling"]: r["samples_per_sec"] for r in core}
        # the input pipeline's core-seconds a sample are the CPU seconds its one-core ceiling
        # used (tuner.ceilings.input_core_seconds): on a loaded machine fewer than its wall
        # seconds, which also count the waits for a core
        (one_core_loader,) = [r for r in core if r["ceiling"] == "core-loader"]
        loader_core_s = one_core_loader["cpu_s_per_sample"] or 1 / rate["core-loader"]
        attainable = min(attainable, top.attainable.cores / (1 / rate["core-compute"]
                                                             + loader_core_s))
        assert top.attainable.model == "shared cores"
    assert top.attainable.samples_per_sec == pytest.approx(attainable)
    assert top.attainable.bound_by in ("compute", "input pipeline", "shared cores")
    if top.samples_per_sec <= attainable:
        assert top.attainable.share == pytest.approx(top.samples_per_sec / attainable)
    else:
        assert top.attainable.share is None


# ------------------------------------------------------------------- one trial, in process

def test_host_memory_limit_on_a_real_workload(tmp_path):
    from tuner.workloads.ddpm import workload as ddpm
    data = ddpm.prepare_default_data(tmp_path / "cache" / "data", "tiny")
    knobs = Knobs(batch_size=8, num_workers=1)

    def settings(limit_mb: float) -> TrialSettings:
        return TrialSettings(scale="tiny", device="cpu", data_dir=str(data), warmup_steps=1,
                             windows=1, window_s=0.05, breakdown_steps=0,
                             max_host_memory_mb=limit_mb)

    over = run_trial(ddpm, knobs, settings(50))
    assert over["status"] == "over_limit", over["error"]
    assert over["memory_exceeded"] == "host"
    assert "50 MB" in over["error"]
    assert over["peak_host_memory_mb"] > 50

    ok = run_trial(ddpm, knobs, settings(100_000))
    assert ok["status"] == "ok", ok["error"]
    assert 0 < ok["peak_host_memory_mb"] < 100_000
    assert ok["samples_per_sec"] > 0


def test_breakdown_phases_add_up_and_match_the_step_time(regression_data, monkeypatch):
    """On a clock only the forward pass moves (0.05 s a step, ``ClockedPaced``), the phases
    add up to the step, the forward pass holds all of it, and the breakdown's step equals the
    windows' step exactly, however busy the machine is."""
    from tests.fake_workloads import ClockedPaced, StepClock
    from tuner.trial import harness, measure, steppers
    clock = StepClock()
    monkeypatch.setattr(harness, "time", clock)
    monkeypatch.setattr(measure, "time", clock)
    monkeypatch.setattr(steppers, "time", clock)
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             warmup_steps=1, windows=3, window_s=0.2, breakdown_steps=5)
    row = run_trial(ClockedPaced(clock), Knobs(batch_size=8), settings)
    assert row["status"] == "ok", row["error"]
    ms = [row[f"{p}_ms"] for p in PHASES]
    assert [p for p in PHASES] == ["data_wait", "h2d", "forward", "backward", "optimizer"]
    assert all(v >= 0 for v in ms)
    assert sum(ms) == pytest.approx(row["breakdown_step_ms"], rel=1e-6)
    assert sum(row[f"{p}_pct"] for p in PHASES) == pytest.approx(100, rel=1e-6)
    assert row["forward_ms"] == pytest.approx(50)   # the clock moves in the forward pass
    assert row["breakdown_step_ms"] == pytest.approx(row["step_time_ms_p50"]) == pytest.approx(50)


def test_compute_only_removes_the_data_wait(regression_data):
    from tests.fake_workloads import regression
    knobs = Knobs(batch_size=32)                # 32 .npy reads per step without compute_only

    def measure(compute_only: bool) -> dict:
        settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                                 warmup_steps=1, windows=2, window_s=0.2, breakdown_steps=20,
                                 compute_only=compute_only)
        row = run_trial(regression, knobs, settings)
        assert row["status"] == "ok", row["error"]
        assert row["samples_per_sec"] > 0
        return row

    loading, ceiling = measure(False), measure(True)
    assert ceiling["data_wait_ms"] < loading["data_wait_ms"]
    assert ceiling["h2d_ms"] >= 0


def test_time_to_train_needs_train_steps(tmp_path, module_cache):
    with pytest.raises(TunerError, match="--train-steps"):
        make_plan(RunOptions(workload=REGRESSION, objective="time-to-train", device="cpu",
                        results=str(tmp_path / "results")))
    with pytest.raises(TunerError, match="--objective 'fastest'"):
        make_plan(RunOptions(workload=REGRESSION, objective="fastest", device="cpu",
                        results=str(tmp_path / "results")))
    plan = make_plan(RunOptions(workload=REGRESSION, objective="time-to-train", train_steps=1000,
                           device="cpu", results=str(tmp_path / "results")))
    assert (plan.metric, plan.mode) == ("time_to_train_s", "min")
    assert plan.settings.train_steps == 1000


def test_time_to_train_prediction(regression_data):
    from tests.fake_workloads import regression
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             warmup_steps=2, windows=2, window_s=0.2, train_steps=1000,
                             max_steady_probes=0)   # no window dropped: the next test's case
    reports = []
    row = run_trial(regression, Knobs(batch_size=8), settings, report=reports.append)
    assert row["status"] == "ok", row["error"]
    expected = row["setup_s"] + row["warmup_s"] + (1000 - 2) * row["step_time_ms_p50"] / 1000
    assert row["time_to_train_s"] == pytest.approx(expected, rel=1e-9)
    assert row["time_to_train_s"] > row["setup_s"] + row["warmup_s"] > 0
    # Ray Tune needs the objective in every intermediate result too.
    assert all(r["time_to_train_s"] is not None for r in reports)
    # Without train_steps there is no prediction.
    plain = run_trial(regression, Knobs(batch_size=8), TrialSettings(
        scale="tiny", device="cpu", data_dir=str(regression_data), warmup_steps=1, windows=1,
        window_s=0.05, breakdown_steps=0))
    assert plain.get("time_to_train_s") is None


def test_time_to_train_counts_the_steps_of_a_dropped_window_once(regression_data, step_clock):
    """A window dropped as warm-up is in ``warmup_s`` with its steps: the prediction does not
    run those steps again at steady state. On the step clock (steps of 30 ms, then 5 ms), so
    the drop and its steps are exact however busy the machine is."""
    from tests.test_harness import _ClockedTransient
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             warmup_steps=1, windows=3, window_s=0.2, breakdown_steps=0,
                             steady_tolerance=0.0, max_steady_probes=1, max_warmup_s=5.0,
                             train_steps=1000)
    reports = []
    row = run_trial(_ClockedTransient(step_clock), Knobs(batch_size=8), settings,
                    report=reports.append)
    assert row["status"] == "ok", row["error"]
    assert row["steady_probes"] == 1                   # one window dropped (tolerance 0)
    # The dropped window's steps, from its report: its seconds are warmup_s beyond the step.
    dropped_s = row["warmup_s"] - row["first_step_s"]
    dropped_steps = round(reports[0]["window_samples_per_sec"] * dropped_s / 8)
    assert dropped_steps >= 1
    expected = (row["setup_s"] + row["warmup_s"]
                + (1000 - 1 - dropped_steps) * row["step_time_ms_p50"] / 1000)
    assert row["time_to_train_s"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("text, expected", [
    ("0.9", (0.9, None)),
    ("1", (1.0, None)),
    ("12GB", (None, 12 * 1000**3 / 2**20)),
    ("12GiB", (None, 12 * 1024.0)),
    ("12 gib", (None, 12 * 1024.0)),
    ("24g", (None, 24 * 1024.0)),
    ("500MB", (None, 500 * 1000**2 / 2**20)),
    ("512MiB", (None, 512.0)),
    ("1.5TB", (None, 1.5 * 1000**4 / 2**20)),
])
def test_parse_memory(text, expected):
    fraction, mb = parse_memory(text)
    assert (fraction is None) == (expected[0] is None) and (mb is None) == (expected[1] is None)
    if fraction is not None:
        assert fraction == pytest.approx(expected[0])
    else:
        assert mb == pytest.approx(expected[1])


@pytest.mark.parametrize("text", ["abc", "", "0", "1.5", "-1GB", "0GB", "12XB", "12 GB extra",
                                  "GB", "1e9", "0.9.1"])
def test_parse_memory_rejects(text):
    with pytest.raises(ValueError, match="fraction in \\(0, 1\\]") as info:
        parse_memory(text)
    assert repr(text) in str(info.value)


# ----------------------------------------------------------- commands on a run's results

class _Html(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs).get("src", ""))


@pytest.mark.slow
def test_profile_validate_report_and_a_bad_limit_on_the_command_line(followup_run, tmp_path):
    """The three commands through ``tuner.cli.main`` in this process (CliRunner): this process
    has imported torch and the workload already, where a ``python -m tuner`` each would again."""
    from click.testing import CliRunner

    from tuner.cli import main
    results = followup_run.results_dir
    out = tmp_path / "report"

    commands = {
        "profile": ["profile", "--workload", REGRESSION, "--results", results, "--device", "cpu",
                    "--steps", "5"],
        "validate": ["validate", "--workload", REGRESSION, "--results", results],
        "report": ["report", "--workload", "fake-regression", "--results", results,
                   "--out", str(out)],
    }
    procs = {name: tuner_in_process(*args) for name, args in commands.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, name

    profile = procs["profile"].stdout
    winner = answer_of(leaderboard.read(results)).row
    assert f"trial {winner['trial_id']}" in profile              # the best trial's knobs
    assert "Per-step breakdown" in profile
    assert "Bottleneck" in profile

    validate = procs["validate"].stdout
    assert f"validating trial {winner['trial_id']}" in validate
    assert "measured ÷ predicted" in validate
    ratio = float(validate.split("measured ÷ predicted")[1].split()[1])
    assert ratio > 0

    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 4
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.html").read_text(encoding="utf-8")
    parser = _Html()
    parser.feed(page)
    parser.close()
    assert "html" in parser.tags and "table" in parser.tags
    assert len(parser.images) == 4
    assert all(src.startswith("data:image/png;base64,") for src in parser.images)
    assert "fake-regression" in page

    # A bad limit is a user error: exit code 2, one line naming the value, before Ray starts.
    before = sorted(p.name for p in Path(results, "leaderboard").iterdir())
    bad = CliRunner(env={"COLUMNS": "200"}).invoke(main, [
        "run", "--workload", REGRESSION, "--device", "cpu", "--results", results,
        "--max-memory", "abc"])
    assert bad.exit_code == 2, (bad.stdout, bad.stderr, bad.exception)
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--max-memory" in lines[0] and "'abc'" in lines[0], bad.stderr
    assert sorted(p.name for p in Path(results, "leaderboard").iterdir()) == before
