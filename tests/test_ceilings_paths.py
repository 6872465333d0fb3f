"""The ceilings per data path and the CPU's shared-cores model (``tuner.ceilings``,
``tuner.followups.ceilings_batch``): planned from synthetic rows, read back into the answer's
attainable rate, its lever text and its JSON; no Ray."""

from __future__ import annotations

import json
import re

import pytest

import tuner.costs as costs
import tuner.followups as followups
from tests.test_followups import BASE, fake_plan, make_row
from tests.test_leaderboard import row
from tuner import winner
from tuner.ceilings import Attainable, attainable, attainable_summary, lever_text
from tuner.knobs import Knobs
from tuner.settings import TrialSettings
from tuner.space import Choices, Space
from tuner.trial.harness import run_trial

LOADER = Knobs(batch_size=32, num_workers=2, prefetch_factor=2)
CACHE = Knobs(batch_size=32, num_workers=1, prefetch_factor=2, data_path="cache")
DEVICE = Knobs(batch_size=64, data_path="device")


def path_rows() -> list[dict]:
    """A search over the three data paths: the cache path wins (300), then the device path
    (250), then the loader path (200); a slower loader-path row that does not count."""
    return [make_row(0, BASE, reference="baseline", sps=100.0),
            make_row(1, LOADER, sps=200.0), make_row(2, CACHE, sps=300.0),
            make_row(3, DEVICE, sps=250.0), make_row(4, Knobs(batch_size=8), sps=50.0)]


def planned(plan, rows) -> list[tuple[str, Knobs, dict]]:
    batch, _ = followups.ceilings_batch(plan, rows)
    return [(name, knobs, change) for name, (knobs, _), change
            in zip(batch.event["ceilings"], batch.configs, batch.per_trial)]


# ------------------------------------------------------------------------ the plan


def test_each_data_path_the_search_tried_gets_its_input_ceilings_most_important_first():
    got = planned(fake_plan(), path_rows())
    assert [name for name, _, _ in got] == [
        "compute", "loader", "machine-loader", "machine-compute",
        "path-loader (data_path=device)",
        "machine-loader (data_path=loader)", "path-loader (data_path=loader)",
        "core-compute", "core-loader", "core-loader (data_path=device)",
        "core-loader (data_path=loader)"]
    knobs = {name: k for name, k, _ in got}
    assert knobs["compute"] == CACHE and knobs["loader"] == CACHE         # the winner's own
    assert knobs["machine-loader"] == CACHE.replace(num_workers=2, persistent_workers=True,
                                                    prefetch_factor=4)
    assert knobs["path-loader (data_path=device)"] == DEVICE              # its best, no workers
    assert knobs["path-loader (data_path=loader)"] == LOADER              # 200, not the 50
    assert knobs["machine-loader (data_path=loader)"].num_workers == 2     # the plan's node_cpus
    assert knobs["machine-loader (data_path=loader)"].data_path == "loader"
    # One core each: no workers for the input pipeline, cpus 1 for both.
    assert knobs["core-loader"] == CACHE.replace(num_workers=0, prefetch_factor=None)
    assert knobs["core-loader (data_path=loader)"].num_workers == 0
    assert [change.get("cpus") for _, _, change in got] == [None] * 7 + [1] * 4
    assert [change["ceiling"] for _, _, change in got][4:7] == [
        "path-loader", "machine-loader", "path-loader"]


def test_on_cuda_no_one_core_ceiling_and_no_workers_for_the_device_path():
    rows = [make_row(0, BASE, reference="baseline", sps=100.0), make_row(1, DEVICE, sps=900.0),
            make_row(2, LOADER, sps=200.0)]
    got = planned(fake_plan(device="cuda"), rows)
    assert [name for name, _, _ in got] == [
        "compute", "loader", "machine-compute", "machine-loader (data_path=loader)",
        "path-loader (data_path=loader)"]
    assert got[2][1].amp == "bf16" and got[2][1].data_path == "device"


def test_a_resumed_run_measures_only_the_kinds_and_paths_its_rows_lack():
    done = [make_row(10 + i, knobs, phase="ceiling", ceiling=kind) for i, (kind, knobs) in
            enumerate((("compute", CACHE), ("loader", CACHE), ("machine-loader", LOADER)))]
    names = [name for name, _, _ in planned(fake_plan(), path_rows() + done)]
    assert "machine-loader" in names                       # the cache path's: not measured
    assert "machine-loader (data_path=loader)" not in names
    assert names[:2] == ["machine-loader", "machine-compute"]


def test_the_time_left_leaves_out_the_least_important_and_says_so():
    rows = path_rows()
    every = followups.planned_ceilings(fake_plan(), rows, CACHE)
    prices = [costs.trial_cost_s(rows, k, 3, 1.0) for _, k, _ in every]
    left = sum(prices[:4]) + 0.5 * prices[4]                 # the winner's and machine limits
    batch, event = followups.ceilings_batch(fake_plan(left=left), rows)
    kept = event["ceilings"]
    assert kept[:4] == ["compute", "loader", "machine-loader", "machine-compute"]
    assert "path-loader (data_path=device)" in event["left_out"]          # the first not held
    assert event["left_out"][-1] == "core-loader (data_path=loader)"
    assert len(kept) + len(event["left_out"]) == len(every) and len(batch.configs) == len(kept)


@pytest.mark.parametrize("global_batch, winner_knobs, expected", [
    (32, Knobs(batch_size=8, grad_accum=4), (32, 1)),      # the global batch kept: 32 x 1
    (48, Knobs(batch_size=8, grad_accum=6), (16, 3)),      # 32 and 64 do not divide 48
    (None, Knobs(batch_size=8, grad_accum=4), (64, 4)),    # no global batch: the largest
])
def test_the_machines_compute_limit_keeps_the_runs_global_batch(global_batch, winner_knobs,
                                                                expected):
    space = Space("test", {"batch_size": Choices((8, 16, 32, 64))}, {})
    if global_batch is not None:
        space = space.with_global_batch(global_batch)
    knobs = followups.machine_compute_knobs(fake_plan(space=space), winner_knobs)
    assert (knobs.batch_size, knobs.grad_accum) == expected
    if global_batch is not None:
        assert knobs.batch_size * knobs.grad_accum == global_batch


# --------------------------------------------------------------- the attainable rate


def ceiling(n: int, kind: str, knobs: Knobs, sps: float, **extra) -> dict:
    return row(n, knobs=knobs, sps=sps, phase="ceiling", ceiling=kind, **extra)


def lever_run(device: str = "cuda") -> list[dict]:
    """The winner on the cache path (1,900 samples/sec); the loader path's input limit 212,
    the cache path's 2,140; the compute limit 4,851."""
    return [row(0, knobs=LOADER, sps=200.0, reference="baseline", device=device),
            row(1, knobs=CACHE, sps=1900.0, device=device),
            ceiling(2, "compute", CACHE, 4851.0, device=device),
            ceiling(3, "loader", CACHE, 2100.0, device=device),
            ceiling(4, "machine-loader", CACHE.replace(num_workers=16), 2140.0, device=device),
            ceiling(5, "machine-compute", CACHE.replace(batch_size=256), 4000.0, device=device),
            ceiling(6, "machine-loader", LOADER.replace(num_workers=16), 212.0, device=device),
            ceiling(7, "path-loader", LOADER, 190.0, device=device)]


def test_attainable_is_the_compute_limit_against_the_best_input_limit_over_the_paths():
    top = winner.best(lever_run())
    a = top.attainable
    assert top.ceilings.data_path == "cache" and top.ceilings.loader_samples_per_sec == 2100.0
    assert a.input_by_path == {"cache": 2140.0, "loader": 212.0}
    assert (a.samples_per_sec, a.bound_by, a.data_path, a.model) == (
        2140.0, "input pipeline", "cache", "min")
    assert a.compute_samples_per_sec == 4851.0                # the winner's own counts too
    assert a.share == pytest.approx(1900.0 / 2140.0)
    assert a.lever == ("cache", 212.0, 2140.0)
    assert lever_text(a) == ("input pipeline: 212 → 2,140 samples/sec with the decoded cache "
                             "(10.1x)")
    assert "bound by input pipeline: min(compute-only 4,851.0, input pipeline 2,140.0 with the " \
           "decoded cache)" in attainable_summary(a)


def test_no_lever_when_the_loader_path_gives_the_best_input_or_was_not_measured():
    rows = [r for r in lever_run() if r["trial_id"] not in ("run-a-6", "run-a-7")]
    assert winner.best(rows).attainable.lever is None        # the loader path's limit unknown
    inputs = {"loader": 500.0, "cache": 400.0}
    a = attainable(300.0, 1000.0, inputs)
    assert a.data_path == "loader" and a.lever is None and lever_text(a) is None
    # a lift within the noise (1,012 -> 1,030: 1.02x) is not claimed; 1.2x is
    a = attainable(300.0, 5000.0, {"loader": 1012.0, "cache": 1030.0})
    assert a.data_path == "cache" and a.lever is None and lever_text(a) is None
    a = attainable(300.0, 5000.0, {"loader": 1012.0, "cache": 1214.4})
    assert lever_text(a) == ("input pipeline: 1,012 → 1,214 samples/sec with the decoded "
                             "cache (1.2x)")


def test_a_path_without_its_machine_limit_is_no_input_limit():
    """The winner's own loader-only rate alone is a lower figure than its path's limit: the
    path counts once its machine-loader is measured ('device': its loader-only rate is it)."""
    rows = [r for r in lever_run() if r["trial_id"] not in ("run-a-4",)]
    assert winner.best(rows).attainable.input_by_path == {"loader": 212.0}
    device = [row(0, knobs=DEVICE, sps=800.0), ceiling(1, "loader", DEVICE, 1500.0),
              ceiling(2, "machine-compute", DEVICE, 3000.0)]
    a = winner.best(device).attainable
    assert a.input_by_path == {"device": 1500.0} and a.samples_per_sec == 1500.0


def cpu_run(core_loader: dict[str, float], core_compute: float | None = 240.0) -> list[dict]:
    """A CPU case on 2 cores: best 230, compute-only 464, loader-only 485 (every
    core), one core each: the compute ``core_compute``, the input pipeline ``core_loader``."""
    rows = [row(0, knobs=LOADER, sps=230.0, trial_cpus=2.0),
            ceiling(1, "compute", LOADER, 464.0, trial_cpus=2.0),
            ceiling(2, "machine-loader", LOADER, 485.0, trial_cpus=2.0),
            ceiling(3, "machine-compute", LOADER.replace(batch_size=64), 400.0, trial_cpus=2.0)]
    if core_compute is not None:
        rows.append(ceiling(4, "core-compute", LOADER, core_compute, trial_cpus=2.0))
    rows += [ceiling(5 + i, "core-loader", Knobs(batch_size=32, data_path=path), rate,
                     trial_cpus=2.0) for i, (path, rate) in enumerate(core_loader.items())]
    return rows


def test_on_cpu_the_compute_and_the_input_pipeline_share_the_cores():
    a = winner.best(cpu_run({"loader": 250.0})).attainable
    shared = 2 / (1 / 240.0 + 1 / 250.0)                   # 244.9, not min(464, 485)
    assert a.model == "shared cores" and a.bound_by == "shared cores" and a.cores == 2
    assert a.samples_per_sec == pytest.approx(shared)
    assert a.compute_core_s_per_sample == pytest.approx(1 / 240.0)
    assert a.input_core_s_per_sample == {"loader": pytest.approx(1 / 250.0)}
    assert a.share == pytest.approx(230.0 / shared)
    text = attainable_summary(a)
    assert "on CPU the input pipeline and the model share the 2 cores: 2 / (4.17 + 4.00 " \
           "core-ms per sample), at most min(compute-only 464.0" in text


def test_the_shared_cores_bound_is_never_above_the_lower_limit():
    a = winner.best(cpu_run({"loader": 5000.0}, core_compute=5000.0)).attainable
    assert a.model == "shared cores" and (a.samples_per_sec, a.bound_by) == (464.0, "compute")


def test_without_every_paths_one_core_rate_the_bound_is_the_minimum():
    assert winner.best(cpu_run({}, core_compute=240.0)).attainable.model == "min"
    a = winner.best(cpu_run({"loader": 250.0}, core_compute=None)).attainable
    assert (a.model, a.samples_per_sec, a.bound_by) == ("min", 464.0, "compute")
    on_gpu = [{**r, "device": "cuda"} for r in cpu_run({"loader": 250.0})]
    assert winner.best(on_gpu).attainable.model == "min"     # the compute is on the card


def test_the_device_paths_augmentation_on_cpu_adds_its_core_seconds():
    """On the CPU device the 'device' path augments in the training process: its one-core
    input rate adds to the compute's, and the best bound over the paths is the answer."""
    inputs = {"loader": 485.0, "device": 2000.0}
    a = attainable(230.0, 464.0, inputs, cores=2, compute_core_s=1 / 240.0,
                   input_core_s={"loader": 1 / 250.0, "device": 1 / 1000.0})
    assert a.data_path == "device" and a.bound_by == "shared cores"
    assert a.samples_per_sec == pytest.approx(2 / (1 / 240.0 + 1 / 1000.0))
    assert a.lever == ("device", 485.0, 2000.0)
    assert lever_text(a).endswith("with the dataset resident on the device (4.1x)")


def test_the_answer_serialises_the_paths_and_the_lever():
    doc = winner.best(lever_run()).to_dict()
    assert json.loads(json.dumps(doc)) == doc
    a = doc["attainable"]
    assert a["input_by_path"] == {"cache": 2140.0, "loader": 212.0}
    assert (a["data_path"], a["input_samples_per_sec"], a["model"]) == ("cache", 2140.0, "min")
    assert a["lever"] == "input pipeline: 212 → 2,140 samples/sec with the decoded cache (10.1x)"
    assert doc["ceilings"]["data_path"] == "cache"
    cpu = winner.best(cpu_run({"loader": 250.0})).to_dict()["attainable"]
    assert cpu["model"] == "shared cores" and cpu["cores"] == 2
    assert cpu["input_core_s_per_sample"] == {"loader": pytest.approx(0.004)}
    assert Attainable(None, None, None).lever is None


def test_a_one_core_ceiling_trains_on_one_thread(regression_data):
    """``TrialSettings.cpus`` 1 (the per-trial change the core ceilings carry) runs the
    training process on one torch thread, whatever the trial was given."""
    from tests.fake_workloads import regression
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data), windows=1,
                             window_s=0.05, warmup_steps=1, compute_only=True, cpus=1,
                             ceiling="core-compute", max_steady_probes=0, breakdown_steps=0)
    result = run_trial(regression, Knobs(batch_size=16), settings, cpus=2)
    assert result["status"] == "ok", result.get("error")
    assert result["torch_threads"] == 1 and result["ceiling"] == "core-compute"


# ------------------------------------------------------------------------ the summary


def summary_of(rows: list[dict]) -> str:
    from types import SimpleNamespace

    from rich.console import Console

    from tuner.summary import print_best
    console = Console(record=True, width=400)
    print_best(console, rows, SimpleNamespace(workload="fake-regression", scale="tiny",
                                              results_dir="res"))
    return " ".join(console.export_text().replace("│", " ").split())


def test_the_summary_names_the_lever_and_how_much_it_lifted_the_input_limit():
    out = summary_of(lever_run())
    assert "attainable here 2,140.0 89% of it bound by input pipeline: min(compute-only " \
           "4,851.0, input pipeline 2,140.0 with the decoded cache)" in out
    assert "input pipeline: 212 → 2,140 samples/sec with the decoded cache (10.1x)" in out
    assert "same knobs, its data path alone (data_path=cache), no model" in out


def test_the_summary_says_the_cpu_bound_is_the_shared_cores_model():
    out = summary_of(cpu_run({"loader": 250.0}))
    assert "attainable here 244.9 94% of it bound by shared cores: on CPU the input pipeline " \
           "and the model share the 2 cores" in out
    assert "input pipeline: " not in out                      # no lever: one data path


def test_the_ceiling_phase_names_each_data_paths_ceiling():
    from tuner.progress import _phase_text
    text = _phase_text({"phase": "ceiling", "ceilings": ["machine-loader (data_path=cache)",
                                                         "core-compute"],
                        "left_out": ["core-loader (data_path=device)"]})
    assert text == ("measuring this machine's input limit (loader only, every CPU a worker) "
                    "(data_path=cache); measuring the winner's compute on one core; left out, "
                    "the time left cannot hold it: core-loader (data_path=device)")


def test_the_html_report_gives_the_attainable_rate_and_the_lever():
    from tuner.report import _best_section
    page = _best_section(winner.best(lever_run()))
    assert ("<p>2,140.0 samples/sec attainable here, 89 % of it reached; bound by input "
            "pipeline: min(compute-only 4,851.0, input pipeline 2,140.0 with the decoded cache); "
            "input pipeline: 212 → 2,140 samples/sec with the decoded cache (10.1x).</p>") in page


def test_a_trial_cannot_be_given_fewer_than_one_cpu():
    with pytest.raises(ValueError, match=r"cpus 0: must be >= 1"):
        TrialSettings(scale="tiny", device="cpu", data_dir=".", cpus=0)


# ------------------------------------------------------------------ the machine's compute limit

H200_WINNER = Knobs(batch_size=104, num_workers=8, prefetch_factor=2, data_path="cache",
                    amp="bf16")


def machine_run(machine_sps: float = 5304.0) -> list[dict]:
    """Shaped like a 220-s ddpm run on one H200: the answer (bs=104, data=cache) at 2,208
    samples/sec is 94 % of its same-knobs compute-only ceiling (2,357.6), while the machine's
    compute limit (bs=652, bf16, batches on the device) reads ``machine_sps``."""
    return [row(0, knobs=Knobs(batch_size=32, num_workers=4), sps=710.0, reference="baseline",
                device="cuda"),
            row(1, knobs=H200_WINNER, sps=2208.0, device="cuda"),
            ceiling(2, "compute", H200_WINNER, 2357.6, device="cuda"),
            ceiling(3, "machine-compute", H200_WINNER.replace(batch_size=652), machine_sps,
                    device="cuda")]


def test_the_summary_gives_the_machine_compute_limit_beside_the_same_knobs_ceiling():
    """'94 % of it' of the same-knobs ceiling cannot hide the 2.4x left: the table has a row
    for this machine's compute limit with the best's share and the batch and precision, and a
    line under it says so."""
    out = summary_of(machine_run())
    assert "compute-only ceiling 2,357.6 94% of it same knobs, batches on the device" in out
    assert ("machine's compute limit 5,304.0 42% of it bs=652 amp=bf16, batches on the device "
            "(largest batch, fastest precision): 2.40x the best") in out
    assert ("this machine's compute limit: 5,304.0 samples/sec at bs=652 amp=bf16 (batches on "
            "the device), 42 % of it reached (2.40x the best); the same knobs' compute-only "
            "ceiling 94 % reached") in out


@pytest.mark.parametrize("compute_sps, kind", [(6300.0, "machine-compute"),
                                               (7200.0, "compute")])
def test_the_machine_limit_is_the_fastest_compute_only_rate_the_run_measured(compute_sps, kind):
    """One H200, a 200-s ddpm run: the best (bs=652, batches on the device) 6,277.5 and the
    probe's limit at the largest batch 6,353.0; a compute-only ceiling of the best's own
    knobs that ran faster (with channels_last, which the probe did not use) is the machine's
    limit, named with its knobs, never a limit below it."""
    best = Knobs(batch_size=652, num_workers=0, data_path="device", amp="bf16",
                 channels_last=True)
    rows = [row(0, knobs=Knobs(batch_size=8, num_workers=4), sps=149.0, reference="baseline",
                device="cuda"),
            row(1, knobs=best, sps=6277.5, device="cuda"),
            ceiling(2, "compute", best, compute_sps, device="cuda"),
            ceiling(3, "machine-compute", best.replace(channels_last=False), 6353.0,
                    device="cuda")]
    out = summary_of(rows)
    if kind == "machine-compute":
        assert ("machine's compute limit 6,353.0 99% of it bs=652 amp=bf16, batches on the "
                "device (largest batch, fastest precision): 1.01x the best") in out
    else:
        assert ("machine's compute limit 7,200.0 87% of it bs=652 amp=bf16 cl, batches on the "
                "device (the fastest compute-only rate measured): 1.15x the best") in out
    limit = winner.best(rows).ceilings.machine_compute
    assert limit.kind == kind and limit.samples_per_sec == max(compute_sps, 6353.0)


@pytest.mark.parametrize("machine_sps, cell, words", [
    (2150.0, "at it", "3 % below the best, within the noise"),
    (1500.0, "not a bound", "the best ran faster, so this is no limit"),
])
def test_a_machine_limit_the_best_beat_is_never_a_share_above_100(machine_sps, cell, words):
    rows = [r for r in machine_run(machine_sps) if r.get("ceiling") != "compute"]
    out = summary_of(rows)
    assert f"machine's compute limit {machine_sps:,.1f} {cell} bs=652 amp=bf16" in out
    assert words in out
    assert "this machine's compute limit:" not in out        # no line: nothing left above it
    assert not any(int(pct) > 100 for pct in re.findall(r"(\d+)% of it", out))


def test_without_the_probe_s_limit_no_compute_ceiling_is_called_the_machine_s():
    """A run that did not measure the machine's limit (no 'machine-compute' row) shows the
    same-knobs ceiling alone: the winner's own is not the machine's."""
    rows = [r for r in machine_run() if r.get("ceiling") != "machine-compute"]
    assert winner.best(rows).ceilings.machine_compute is None
    assert "machine's compute limit" not in summary_of(rows)


def test_the_html_report_and_best_json_carry_the_machine_compute_limit(tmp_path):
    from click.testing import CliRunner

    import tuner.cli as cli
    import tuner.leaderboard as leaderboard
    from tuner.report import _best_section
    page = _best_section(winner.best(machine_run()))
    assert ("<p>this machine&#x27;s compute limit: 5,304.0 samples/sec at bs=652 amp=bf16 "
            "(batches on the device), 42 % of it reached (2.40x the best)") in page
    leaderboard.append(tmp_path, machine_run())
    out = CliRunner().invoke(cli.main, ["best", "--workload", "fake-regression", "--results",
                                        str(tmp_path), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    limit = doc["ceilings"]["machine_compute"]
    assert (limit["samples_per_sec"], limit["batch_size"], limit["amp"], limit["data_path"]) == (
        5304.0, 652, "bf16", "batches on the device")
    assert limit["verdict"]["judgement"] == "bound"
    assert limit["verdict"]["share"] == pytest.approx(2208.0 / 5304.0)
    assert doc["ceilings"]["pipeline_efficiency"] == pytest.approx(2208.0 / 2357.6)
