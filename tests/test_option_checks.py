"""Options checked against the machine and against each other, in process (no Ray): memory
limits above what the machine has are refused with its figure, options that do nothing in the
given combination say so in one line (``Plan.notes``) or are refused, ``profile --knobs`` drops
knobs that no longer apply, and an error raised in a DataLoader worker reaches the user as one
line naming the file. The subprocess rows for the same mistakes are in tests/test_bad_inputs.py.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import psutil
import pytest
import torch

from tests.test_leaderboard import row as leaderboard_row
from tuner import leaderboard
from tuner.errors import TunerError
from tuner.knobs import Knobs
from tuner.option_checks import check_limits, make_plan
from tuner.settings import RunOptions

REGRESSION = "tests.fake_workloads:regression"


def options(**kwargs) -> RunOptions:
    return RunOptions(workload=REGRESSION, device="cpu", **kwargs)


# ------------------------------------------------------------------------- memory limits

def test_host_memory_above_this_machines_ram_is_refused_with_its_figure():
    total_mib = psutil.virtual_memory().total / 2**20
    too_much = f"{total_mib * 1.01:.0f}MiB"
    with pytest.raises(TunerError, match=rf"--max-host-memory {too_much}: more than this "
                                         rf"machine's RAM, .* GiB \({total_mib:,.0f} MiB\)"):
        check_limits(options(max_host_memory=too_much), "cpu")
    assert check_limits(options(max_host_memory=f"{total_mib * 0.5:.0f}MiB"), "cpu") == []
    assert check_limits(options(max_host_memory="1"), "cpu") == []  # a fraction always fits


def test_device_memory_above_the_smallest_gpu_is_refused(monkeypatch):
    cards = [SimpleNamespace(name="Big", total_memory=80 * 2**30),
             SimpleNamespace(name="Small", total_memory=24 * 2**30)]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(cards))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: cards[i])
    with pytest.raises(TunerError, match=r"--max-memory 40GiB: more than the memory of this "
                                         r"machine's GPU \(Small\), 24.0 GiB \(24,576 MiB\)"):
        check_limits(options(max_memory="40GiB"), "cuda")
    assert check_limits(options(max_memory="20GiB"), "cuda") == []
    # On a cluster the nodes' cards are not known here: the limit is resolved per node.
    assert check_limits(options(max_memory="40GiB", address="127.0.0.1:1"), "cuda") == []


def test_device_memory_limit_on_the_cpu_device_is_a_note():
    notes = check_limits(options(max_memory="99999TB"), "cpu")
    assert notes == ["--max-memory 99999TB does nothing on the CPU device (it limits GPU "
                     "memory); host memory is --max-host-memory"]


# --------------------------------------------------------------------- warm start, remeasure

def test_remeasure_without_warm_start_is_refused():
    with pytest.raises(TunerError, match="--remeasure does nothing without --warm-start"):
        options(remeasure=True)
    assert options(remeasure=True, warm_start=True).remeasure


def test_warm_start_without_earlier_rows_is_a_note_and_the_plan_goes_on(tmp_path):
    from tuner.hardware import fingerprint
    results = tmp_path / "results"
    plan = make_plan(options(results=str(results), warm_start=True, max_memory="0.5"))
    key = fingerprint(torch.device("cpu"))["hardware_key"]
    assert plan.notes[-1].startswith("data_path: only the loader path is tuned: workload "
                                     "'fake-regression' does not split its samples")
    assert plan.notes[:-1] == (
        "--max-memory 0.5 does nothing on the CPU device (it limits GPU memory); host memory "
        "is --max-host-memory",
        f"--warm-start: no earlier rows of fake-regression at tiny scale on {key} in {results}; "
        "the search starts from scratch")
    # Rows of another machine, or another scale, do not seed the search either.
    leaderboard.append(results, [leaderboard_row(0, hardware_key="cpu:elsewhere:2cpu"),
                                 leaderboard_row(1, hardware_key=key, scale="full")])
    assert len(make_plan(options(results=str(results), warm_start=True)).notes) == 2
    leaderboard.append(results, [leaderboard_row(2, hardware_key=key)])
    assert len(make_plan(options(results=str(results), warm_start=True)).notes) == 1


# --------------------------------------------------------------------------- profile --knobs

def test_knobs_that_no_longer_apply_are_dropped_and_named():
    baseline = Knobs(batch_size=8, num_workers=4, persistent_workers=True)
    knobs, dropped = baseline.updated({"num_workers": 0})
    assert knobs == Knobs(batch_size=8)
    assert dropped == ["prefetch_factor=2", "persistent_workers=true"]
    knobs, dropped = baseline.updated({"num_workers": 0, "persistent_workers": False})
    assert dropped == ["prefetch_factor=2"]
    assert baseline.updated({"batch_size": 16}) == (baseline.replace(batch_size=16), [])
    with pytest.raises(ValueError, match="prefetch_factor=3 needs num_workers > 0"):
        baseline.updated({"num_workers": 0, "prefetch_factor": 3})   # the user asked for both


def test_profile_knobs_json_must_be_an_object_of_known_knobs():
    from tuner.checks import knobs_over as _knobs_over
    baseline = Knobs(batch_size=8, num_workers=2)
    assert _knobs_over(baseline, '{"num_workers": 0}') == (Knobs(batch_size=8),
                                                           ["prefetch_factor=2"])
    with pytest.raises(TunerError, match=r"--knobs '\[1\]': expected a JSON object of knobs"):
        _knobs_over(baseline, "[1]")
    with pytest.raises(TunerError, match=r"unknown knob\(s\) num_worker"):
        _knobs_over(baseline, '{"num_worker": 0}')


# ----------------------------------------------------------------- a DataLoader worker fails

def test_validate_names_the_file_a_dataloader_worker_could_not_decode(tmp_path):
    """``fake-broken`` passes ``check_data`` (sample 0 reads) and fails on sample 3 inside a
    DataLoader worker; torch raises it again with the worker's traceback in its message."""
    from click.testing import CliRunner

    from tuner.cli import main
    leaderboard.append(tmp_path, [leaderboard_row(0, workload="fake-broken",
                                                  knobs=Knobs(batch_size=4, num_workers=2))])
    result = CliRunner().invoke(main, ["validate", "--workload", "tests.fake_workloads:broken",
                                       "--results", str(tmp_path), "--steps", "30"])
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert re.fullmatch(r"error: sample file \S+/0003\.npy cannot be decoded "
                        r"\(in DataLoader worker process [01]\)", lines[0]), lines[0]


def test_validate_refuses_a_dataset_smaller_than_one_batch(tmp_path):
    """An empty epoch (drop_last, fewer samples than the batch) made the plain loop spin
    forever; it is a DataError naming the counts."""
    import numpy as np

    from tests.fake_workloads import regression
    from tuner.errors import DataError
    from tuner.trial.validate import train_loop
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", np.zeros(17, dtype=np.float32))
    with pytest.raises(DataError, match=rf"data {tmp_path}: its 3 samples make no batch of "
                                        r"batch_size 8"):
        train_loop(regression, Knobs(batch_size=8), scale="tiny", device="cpu",
                   data_dir=tmp_path, steps=2)


@pytest.mark.parametrize("trial_cpus", [1.0, 2.0], ids=["in-process fill", "fill workers"])
def test_validate_names_the_file_that_fails_to_decode_during_a_cache_fill(tmp_path, trial_cpus):
    """The cache path decodes every sample once before the first step (``tuner.data``): a file
    that fails there is named in one line, exit 2, as on the loader path."""
    from click.testing import CliRunner

    from tuner.cli import main
    leaderboard.append(tmp_path, [leaderboard_row(
        0, workload="fake-broken-split", knobs=Knobs(batch_size=4, data_path="cache"),
        trial_cpus=trial_cpus)])
    result = CliRunner().invoke(main, ["validate", "--workload",
                                       "tests.fake_workloads:broken_split", "--results",
                                       str(tmp_path), "--steps", "30"])
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert re.match(r"error: sample file \S+/0003\.npy cannot be decoded", lines[0]), lines[0]
