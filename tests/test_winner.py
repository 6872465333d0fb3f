"""The winner's rule (``tuner.winner``): which configuration wins, its speed-ups over the
references, its ceilings and the machine's attainable rate; the answer as a frozen value and
as the document ``best --format json|yaml`` prints; the old ``tuner.leaderboard`` names."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import warnings

import pytest
import yaml

from tests.test_leaderboard import T0, row, table_of
from tuner import leaderboard, winner
from tuner.ceilings import MachineCompute, Verdict
from tuner.errors import TunerDeprecationWarning
from tuner.knobs import Knobs


def test_best_compares_only_rows_of_the_latest_runs_scale():
    """A later full-scale run is answered from its own rows, not by an older tiny-scale row
    that trained a smaller model faster."""
    rows = [row(0, run="tiny-run", sps=400.0), row(0, run="full-run", sps=90.0, scale="full",
                                                     knobs=Knobs(batch_size=64))]
    rows[1]["finished_at"] = T0 + dt.timedelta(days=1)
    top = winner.best(rows)
    assert top.row["run_id"] == "full-run" and top.row["scale"] == "full"


def test_best_answers_for_one_card_of_a_run_over_two():
    """A run over two accelerator types measures each configuration on each: the answer is
    one card's, never a pairing of one card's rounds with the other's."""
    a100 = [row(i, sps=s, knobs=Knobs(batch_size=8 * (i % 2 + 1)), hardware_key="A100",
                accelerator_type="A100") for i, s in enumerate((200.0, 180.0))]
    v100 = [{**row(i + 2, sps=s, knobs=Knobs(batch_size=8 * (i % 2 + 1)), hardware_key="V100",
                   accelerator_type="V100")} for i, s in enumerate((90.0, 100.0))]
    top = winner.best(a100 + v100)
    assert top.row["hardware_key"] == "V100" and top.samples_per_sec == 100.0


def test_best_is_fastest_ok_row_with_speedups_from_its_own_run():
    rows = [
        row(0, run="run-a", sps=100.0, reference="baseline"),
        row(1, run="run-a", sps=200.0, reference="recommended"),
        row(2, run="run-a", sps=400.0),
        row(3, run="run-a", status="oom", sps=0.0),
        # A later run on the same hardware: faster references, slower best.
        row(0, run="run-b", sps=300.0, reference="baseline"),
        row(1, run="run-b", sps=350.0, reference="recommended"),
        row(2, run="run-b", sps=380.0),
    ]
    top = winner.best(table_of(rows))
    assert top.row["trial_id"] == "run-a-2" and top.samples_per_sec == 400.0
    assert top.baseline.samples_per_sec == 100.0
    assert top.recommended.samples_per_sec == 200.0
    assert top.baseline.ratio == pytest.approx(4.0)
    assert top.reference("recommended").ratio == pytest.approx(2.0)


def test_best_without_a_successful_reference_has_no_speedup():
    rows = [row(0, sps=0.0, status="oom", reference="baseline"), row(1, sps=250.0)]
    top = winner.best(table_of(rows))
    assert top.row["trial_id"] == "run-a-1"
    for ref in (top.baseline, top.recommended):
        assert ref.samples_per_sec is None and ref.ratio is None and ref.speedup is None
        assert not ref.is_best and ref.tie is None


def test_best_is_none_when_nothing_succeeded():
    assert winner.best(table_of([row(0, status="oom", sps=0.0)])) is None
    assert winner.best(table_of([row(0, status="timeout", sps=None, windows=0)])) is None
    assert winner.best(leaderboard.SCHEMA.empty_table()) is None


def stopped(trial: int, windows: int, planned: int = 5, **kwargs) -> dict:
    """A row the time budget stopped after ``windows`` of ``planned`` windows."""
    return row(trial, status="timeout", windows=windows, windows_planned=planned,
               error=f"stopped by the time budget during window {windows + 1}, after "
                     f"{windows} of {planned} windows", **kwargs)


def test_a_measurement_the_budget_stopped_after_a_window_is_the_answer():
    """chargpt on an H200, 60-s budget: its baseline measured 4 of 5 windows at 2,210
    samples/sec before the budget stopped it, and the run said 'no trial succeeded'."""
    rows = [stopped(0, 4, sps=2210.4, reference="baseline")]
    top = winner.best(table_of(rows))
    assert top is not None and top.samples_per_sec == pytest.approx(2210.4)
    assert top.budget_stopped and top.baseline.is_best
    assert winner.budget_stopped_text(top) == (
        "best: 2,210.4 samples/sec (baseline; 4 of 5 windows, the time budget stopped the 5th)")


def test_a_stopped_measurement_competes_with_full_ones_and_none_without_a_window():
    rows = [row(0, sps=100.0, reference="baseline"), stopped(1, 2, planned=3, sps=150.0),
            stopped(2, 0, sps=None), row(3, status="oom", sps=0.0)]
    top = winner.best(table_of(rows))
    assert top.row["trial_id"] == "run-a-1" and top.baseline.ratio == pytest.approx(1.5)
    assert winner.budget_stopped_text(top) == (
        "best: 150.0 samples/sec (searched; 2 of 3 windows, the time budget stopped the 3rd)")
    full = winner.best(table_of([rows[0], stopped(1, 2, planned=3, sps=90.0)]))
    assert not full.budget_stopped and winner.budget_stopped_text(full) is None
    assert full.baseline.is_best
    # a timeout before its first window measured nothing: no answer from it
    assert winner.best(table_of([stopped(0, 0, sps=None)])) is None
    # a row of a file written before windows_planned existed
    old = winner.best(table_of([stopped(0, 1, sps=50.0, reference="baseline")
                                | {"windows_planned": None}]))
    assert winner.budget_stopped_text(old) == (
        "best: 50.0 samples/sec (baseline; 1 window, the time budget stopped the next)")


def test_a_ceiling_below_the_winner_is_disturbed_never_an_efficiency_over_100():
    win = {**row(0), "phase": "remeasure", "samples_per_sec": 100.0, "batch_size": 32}
    ceiling = {**row(1), "phase": "ceiling", "samples_per_sec": 80.0, "batch_size": 32}
    top = winner.best([win, ceiling])
    assert top.ceilings.compute_disturbed and top.ceilings.pipeline_efficiency is None
    assert top.ceilings.compute_samples_per_sec == 80.0 and top.ceiling_far_below
    again = {**ceiling, "trial_id": "t-again", "samples_per_sec": 125.0}   # measured again
    top = winner.best([win, ceiling, again])
    assert not top.ceilings.compute_disturbed and top.ceilings.pipeline_efficiency == 0.8
    assert top.ceilings.compute_measurements == 2 and not top.ceiling_far_below


def test_a_loader_only_ceiling_below_the_winner_is_flagged():
    win = {**row(0), "phase": "remeasure", "samples_per_sec": 100.0, "batch_size": 32}
    loader = {**row(1), "phase": "ceiling", "ceiling": "loader", "samples_per_sec": 80.0,
              "batch_size": 32}
    top = winner.best([win, loader])
    assert top.ceilings.loader_samples_per_sec == 80.0 and top.ceilings.loader_disturbed
    loader["samples_per_sec"] = 400.0
    assert not winner.best([win, loader]).ceilings.loader_disturbed


def test_attainable_is_the_machines_lower_limit_and_names_it():
    win = {**row(0), "phase": "remeasure", "samples_per_sec": 100.0, "batch_size": 32}
    limits = [{**row(1), "phase": "ceiling", "ceiling": "machine-compute",
               "samples_per_sec": 400.0, "batch_size": 256},
              {**row(2), "phase": "ceiling", "ceiling": "machine-loader",
               "samples_per_sec": 125.0, "batch_size": 32, "num_workers": 16}]
    top = winner.best([win, *limits])
    assert top.attainable == winner.Attainable(
        125.0, "input pipeline", 0.8, compute_samples_per_sec=400.0,
        input_by_path={"loader": 125.0}, data_path="loader", input_samples_per_sec=125.0)
    assert top.ceilings.compute_samples_per_sec is None     # machine rows are not its ceiling
    faster = {**win, "samples_per_sec": 130.0}               # above the limit: not a bound
    top = winner.best([faster, *limits])
    assert top.attainable.samples_per_sec == 125.0 and top.attainable.share is None


def test_the_machines_compute_limit_is_the_best_compute_only_rate_measured():
    """On CPU the largest batch is not the fastest: the machine's compute limit is at least the
    winner's own compute-only ceiling (a real ddpm run: 26.2 at batch 256, 39.0 at 37)."""
    win = {**row(0), "phase": "remeasure", "samples_per_sec": 36.0, "batch_size": 37}
    rows = [win, {**row(1), "phase": "ceiling", "ceiling": "compute", "samples_per_sec": 39.0,
                  "batch_size": 37},
            {**row(2), "phase": "ceiling", "ceiling": "machine-compute", "samples_per_sec": 26.2,
             "batch_size": 256},
            {**row(3), "phase": "ceiling", "ceiling": "machine-loader", "samples_per_sec": 1057.3,
             "batch_size": 37, "num_workers": 2}]
    top = winner.best(rows)
    assert top.attainable.samples_per_sec == 39.0 and top.attainable.bound_by == "compute"
    assert top.attainable.share == pytest.approx(36.0 / 39.0)


# ------------------------------------------------------------------ the answer as a value


def _bounded_run() -> list[dict]:
    """A run with a baseline, the winner (batch 32 at 100 samples/sec), a disturbed trial (MFU
    180 %), the winner's compute-only and loader-only ceilings and the machine's two limits."""
    win = Knobs(batch_size=32)
    return [row(0, reference="baseline", sps=50.0, knobs=Knobs(batch_size=8)),
            row(1, sps=100.0, knobs=win),
            row(2, sps=900.0, knobs=Knobs(batch_size=64), mfu_pct=180.0, mfu_impossible=True),
            row(3, sps=160.0, knobs=win, phase="ceiling", ceiling="compute"),
            row(4, sps=120.0, knobs=win, phase="ceiling", ceiling="loader"),
            row(5, sps=400.0, knobs=Knobs(batch_size=256), phase="ceiling",
                ceiling="machine-compute"),
            {**row(6, sps=125.0, knobs=win, phase="ceiling", ceiling="machine-loader"),
             "num_workers": 2}]


def test_the_answer_holds_ceilings_attainable_rate_and_what_binds():
    top = winner.best(_bounded_run())
    assert top.row["trial_id"] == "run-a-1" and top.samples_per_sec == 100.0
    assert top.ceilings == winner.Ceilings(
        compute_samples_per_sec=160.0, compute_measurements=1, compute_disturbed=False,
        pipeline_efficiency=0.625, loader_samples_per_sec=120.0, loader_disturbed=False,
        machine_compute=MachineCompute(400.0, "run-a-5", 256, 1, "off",
                                       "batches on the device", Verdict("bound", 0.25, None)))
    assert top.attainable == winner.Attainable(
        125.0, "input pipeline", 0.8, compute_samples_per_sec=400.0,
        input_by_path={"loader": 125.0}, data_path="loader", input_samples_per_sec=125.0,
        cores=None)
    assert top.attainable.model == "min" and top.attainable.lever is None
    assert top.disturbed == (winner.Disturbed("run-a-2",
                                              "MFU 180 % is above 100 % of the card's peak"),)
    assert top.baseline.ratio == pytest.approx(2.0) and top.recommended.ratio is None


def test_the_machine_compute_limit_is_judged_against_the_winner_and_in_the_json():
    """The run's machine-compute row is this machine's compute limit: the winner's share of it
    (never above 100 %) and the times the winner's rate it is, beside the same-knobs
    compute-only ceiling; a row the winner beat is 'at it' within the noise, else 'not a
    bound' (where no compute-only rate of the run is faster: the winner's own ceiling, 160,
    would be the machine's limit then)."""
    top = winner.best(_bounded_run())
    limit = top.ceilings.machine_compute
    assert (limit.batch_size, limit.amp, limit.verdict.share, limit.verdict.headroom) == (
        256, "off", 0.25, 4.0)
    doc = json.loads(json.dumps(top.to_dict()))
    assert doc["ceilings"]["machine_compute"]["samples_per_sec"] == 400.0
    assert doc["ceilings"]["machine_compute"]["verdict"] == {
        "judgement": "bound", "share": 0.25, "below": None}
    assert doc["ceilings"]["compute_samples_per_sec"] == 160.0
    for sps, judgement, below in ((97.0, "at it", 0.03), (80.0, "not a bound", 0.2)):
        rows = [r if r.get("ceiling") != "machine-compute" else {**r, "samples_per_sec": sps}
                for r in _bounded_run() if r.get("ceiling") != "compute"]
        judged = winner.best(rows).ceilings.machine_compute.verdict
        assert (judged.judgement, judged.share) == (judgement, None)
        assert judged.below == pytest.approx(below) and judged.headroom is None


def test_the_answer_is_frozen_and_its_row_read_only():
    top = winner.best(_bounded_run())
    with pytest.raises(dataclasses.FrozenInstanceError):
        top.baseline = top.recommended
    with pytest.raises(dataclasses.FrozenInstanceError):
        top.ceilings.compute_samples_per_sec = 1.0
    with pytest.raises(TypeError):
        top.row["samples_per_sec"] = 1.0
    with pytest.raises(ValueError, match="reference 'fastest': accepted: baseline, recommended"):
        top.reference("fastest")


def test_to_dict_is_the_whole_answer_in_plain_values():
    top = winner.best(_bounded_run())
    doc = top.to_dict()
    assert json.loads(json.dumps(doc)) == doc                  # plain JSON values, no default=
    assert doc["ceilings"] == dataclasses.asdict(top.ceilings)
    assert doc["attainable"] == {**dataclasses.asdict(top.attainable), "lever": None}
    assert (doc["attainable"]["samples_per_sec"], doc["attainable"]["bound_by"],
            doc["attainable"]["share"]) == (125.0, "input pipeline", 0.8)
    assert doc["attainable"]["input_by_path"] == {"loader": 125.0}
    assert doc["disturbed"] == [{"trial_id": "run-a-2",
                                 "reason": "MFU 180 % is above 100 % of the card's peak"}]
    sp = top.baseline.speedup
    assert doc["baseline_samples_per_sec"] == 50.0 and doc["speedup_vs_baseline"] == sp.ratio
    assert doc["speedup_ci_vs_baseline"] == ([sp.low, sp.high] if sp.low is not None else None)
    assert doc["tie_vs_baseline"] is sp.tie and doc["baseline_is_best"] is False
    assert doc["speedup_pairs_vs_baseline"] == 1
    assert doc["recommended_samples_per_sec"] is None and doc["speedup_vs_recommended"] is None
    assert doc["knobs"] == top.knobs.to_dict() and doc["rounds"] == 1
    assert doc["phase"] == "search" and doc["objective"] == "samples_per_sec"
    assert doc["chosen_over_faster"] is None
    # Every field of the answer is in the document (the row's columns are the leaderboard's).
    fields = {f.name for f in dataclasses.fields(winner.Answer)} - {"row"}
    named = {"baseline", "recommended", "tied_faster", "disturbed", "ceilings", "attainable",
             "compile"}
    assert fields == named
    assert {"ceilings", "attainable", "disturbed", "chosen_over_faster", "compile"} <= set(doc)
    assert doc["compile"] is None                     # measured eager only
    assert all(any(key.startswith(f"{ref}_") or key.endswith(f"_vs_{ref}") for key in doc)
               for ref in ("baseline", "recommended"))


def test_a_tie_set_aside_is_in_the_document_with_its_interval():
    base, busy = Knobs(batch_size=8), Knobs(batch_size=16, num_workers=2)
    rows = [row(2 * i + k, sps=sps, knobs=knobs, phase="remeasure",
                reference="baseline" if knobs == base else None)
            for i, (a, b) in enumerate(((99.0, 101.0), (100.0, 97.0), (98.0, 102.0)))
            for k, (knobs, sps) in enumerate(((base, a), (busy, b)))]
    top = winner.best(rows)
    assert top.baseline.is_best and top.tied_faster is not None
    faster = top.to_dict()["chosen_over_faster"]
    assert (
        faster["knobs"]["num_workers"] == 2 and faster["speedup"] == top.tied_faster.speedup.ratio
    )
    assert faster["speedup_ci"] == [top.tied_faster.speedup.low, top.tied_faster.speedup.high]
    assert top.to_dict()["speedup_vs_baseline"] == 1.0


def test_best_json_and_yaml_print_the_whole_answer_and_agree(tmp_path):
    from tests.conftest import tuner_in_process
    leaderboard.append(tmp_path, _bounded_run())
    out = {fmt: tuner_in_process("best", "-w", "fake-regression", "--results", str(tmp_path),
                                 "--format", fmt) for fmt in ("json", "yaml")}
    assert all(proc.returncode == 0 for proc in out.values()), out
    doc = json.loads(out["json"].stdout)
    assert yaml.safe_load(out["yaml"].stdout) == doc
    assert doc["ceilings"]["compute_samples_per_sec"] == 160.0
    assert doc["ceilings"]["pipeline_efficiency"] == 0.625
    assert doc["ceilings"]["loader_samples_per_sec"] == 120.0
    assert (doc["attainable"]["samples_per_sec"], doc["attainable"]["bound_by"],
            doc["attainable"]["share"], doc["attainable"]["data_path"]) == (
                125.0, "input pipeline", 0.8, "loader")
    assert doc["workload"] == "fake-regression" and doc["hardware_key"] == "cpu:test:2cpu"
    # the best trial of each world size (tuner.scaling): one rank here, no price given
    (size,) = doc.pop("world_sizes")
    assert (size["world_size"], size["efficiency"], size["cost_per_million_samples"]) == (
        1, 1.0, None)
    assert doc == winner.best(leaderboard.read(tmp_path)).to_dict()


# ------------------------------------------------------- old tuner.leaderboard names


def _moved(name: str):
    """``tuner.leaderboard.<name>``, asserting its one deprecation warning names both versions
    and the new home and points at the caller's line."""
    with pytest.warns(TunerDeprecationWarning,
                      match=rf"tuner\.leaderboard\.{name} was deprecated in tuner 0\.3\.0 and will "
                            r"be removed in tuner 0\.4\.0; use tuner\.winner\.") as caught:
        value = getattr(leaderboard, name)
    assert len(caught) == 1 and caught[0].filename == __file__
    return value


def test_leaderboard_best_row_still_answers_as_the_flat_dict_with_a_warning():
    rows = _bounded_run()
    top, answer = _moved("best_row")(rows), winner.best(rows)
    assert top["trial_id"] == "run-a-1" and top["samples_per_sec"] == 100.0
    assert top["speedup_vs_baseline"] == answer.baseline.ratio
    assert top["speedup_vs_baseline_pairs"] == 1 and top["baseline_is_best"] is False
    assert top["ceiling_samples_per_sec"] == 160.0 and top["pipeline_efficiency"] == 0.625
    assert top["loader_ceiling_samples_per_sec"] == 120.0
    assert (top["attainable_samples_per_sec"], top["attainable_bound_by"],
            top["attainable_share"]) == (125.0, "input pipeline", 0.8)
    assert top["disturbed"] == [("run-a-2", "MFU 180 % is above 100 % of the card's peak")]
    assert top["tied_faster"] is None
    with pytest.warns(TunerDeprecationWarning, match="tuner.winner.best"):
        from tuner.leaderboard import best_row
    assert best_row([]) is None


def test_leaderboard_best_still_reads_a_table_with_a_warning():
    top = _moved("best")(table_of(_bounded_run()))
    assert top["trial_id"] == "run-a-1" and top["attainable_bound_by"] == "input pipeline"


def test_leaderboard_speedup_vs_still_rebuilds_the_speedup_with_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TunerDeprecationWarning)
        top = leaderboard.best_row(_bounded_run())
    sp = _moved("speedup_vs")(top, "baseline")
    assert sp == winner.best(_bounded_run()).baseline.speedup
    assert _moved("speedup_vs")(top, "recommended") is None


def test_leaderboard_ceiling_far_below_still_reads_the_flat_dict_with_a_warning():
    win = {**row(0), "phase": "remeasure", "samples_per_sec": 100.0, "batch_size": 32}
    ceiling = {**row(1), "phase": "ceiling", "samples_per_sec": 80.0, "batch_size": 32}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TunerDeprecationWarning)
        far, near = (leaderboard.best_row([win, {**ceiling, "samples_per_sec": sps}])
                     for sps in (80.0, 97.0))
    assert _moved("ceiling_far_below")(far) is True
    assert _moved("ceiling_far_below")(near) is False


def test_leaderboard_ceiling_noise_still_reads_with_a_warning():
    from tuner.ceilings import CEILING_NOISE
    with pytest.warns(DeprecationWarning, match=r"tuner\.leaderboard\.CEILING_NOISE was "
                                                r"deprecated.*use tuner\.ceilings\.") as caught:
        assert leaderboard.CEILING_NOISE == CEILING_NOISE == 0.05
    assert len(caught) == 1 and caught[0].filename == __file__


def test_winner_ceiling_noise_moved_to_the_ceilings_and_still_reads_with_a_warning():
    from tuner.ceilings import CEILING_NOISE
    with pytest.warns(DeprecationWarning, match="tuner.winner.CEILING_NOISE was deprecated "
                                                ".*use tuner.ceilings.CEILING_NOISE"):
        assert winner.CEILING_NOISE == CEILING_NOISE


def test_leaderboard_rate_columns_still_read_with_a_warning():
    assert _moved("RATE_COLUMNS") == winner.RATE_COLUMNS


def test_an_unknown_leaderboard_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        leaderboard.no_such_name
