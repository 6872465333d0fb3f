"""The Parquet leaderboard: schema, atomic appends, ranking and the best row."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tuner import leaderboard, winner
from tuner.knobs import Knobs

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

# Frozen on purpose: renaming, dropping or adding a column is a schema change (bump
# SCHEMA_VERSION, keep old files readable) and must show up here.
COLUMNS = [
    "run_id", "trial_id", "workload", "scale", "status", "memory_exceeded", "reference",
    "is_baseline",
    "samples_per_sec", "samples_per_sec_iqr", "samples_per_sec_cv", "tokens_per_sec",
    "step_time_ms_p50", "step_time_ms_p95", "windows", "windows_planned", "measured_s",
    "skipped_steps", "warmup_s", "first_step_s",
    "steady_state", "steady_probes",
    "peak_device_memory_mb", "peak_host_memory_mb", "final_loss",
    "phase", "ceiling", "objective", "time_to_train_s", "train_steps", "setup_s", "cache_fill_s",
    "breakdown_step_ms",
    "data_wait_ms", "data_wait_pct", "h2d_ms", "h2d_pct", "forward_ms", "forward_pct",
    "backward_ms", "backward_pct", "optimizer_ms", "optimizer_pct",
    "model_flops_per_sample", "achieved_tflops", "mfu_pct", "mfu_impossible",
    "load_avg_1m", "cpu_steal_pct", "other_cpu_pct", "cpu_s_per_sample", "gpu_other_processes",
    "other_runs",
    "compile_s", "recompiles", "compile_fallback",
    "gpu_util_pct", "gpu_power_w", "max_memory_mb", "max_host_memory_mb", "global_batch_size",
    "accelerator_type", "world_size", "backend", "rank_samples_per_sec", "slowest_rank",
    "slowest_rank_data_wait_s",
    "batch_size", "grad_accum", "data_path", "num_workers", "prefetch_factor", "pin_memory",
    "persistent_workers", "non_blocking", "amp", "channels_last", "compile", "cudnn_benchmark",
    "tf32", "fused_optimizer", "ddp_bucket_cap_mb", "gradient_as_bucket_view", "static_graph",
    "clamped", "trial_cpus", "trial_gpus", "torch_threads", "omp_num_threads",
    "device", "hardware_key", "gpu_name",
    "gpu_memory_mb",
    "cuda_version", "cpu_model", "cpu_count", "host_memory_mb", "node_id", "node_ip", "error",
    "traceback", "started_at", "finished_at", "priced_s", "tuner_version", "torch_version",
    "ray_version", "optuna_version", "schema_version",
]


def test_schema_columns_are_pinned():
    assert leaderboard.SCHEMA.names == COLUMNS
    assert leaderboard.SCHEMA_VERSION == 10


def test_schema_has_every_knob_as_a_column():
    assert set(Knobs.names()) <= set(leaderboard.SCHEMA.names)


def row(trial: int, *, run: str = "run-a", status: str = "ok", sps: float | None = 100.0,
        reference: str | None = None, knobs: Knobs | None = None, **extra) -> dict:
    """A row as the search's LeaderboardWriter builds it (result + knobs + ids)."""
    knobs = knobs or Knobs(batch_size=8 * (trial + 1))
    r = {
        "run_id": run, "trial_id": f"{run}-{trial}", "workload": "fake-regression",
        "scale": "tiny", "status": status, "reference": reference,
        "is_baseline": reference == "baseline", "samples_per_sec": sps,
        "samples_per_sec_iqr": 1.0, "samples_per_sec_cv": 0.01, "step_time_ms_p50": 2.5,
        "step_time_ms_p95": 3.0, "windows": 2.0, "measured_s": 0.4, "warmup_s": 0.1,
        "first_step_s": 0.05, "peak_host_memory_mb": 700.0, "device": "cpu",
        "hardware_key": "cpu:test:2cpu", "cpu_count": 2, "node_id": "node-1",
        "error": None if status == "ok" else f"{status} happened",
        "started_at": T0 + dt.timedelta(seconds=10 * trial),
        "finished_at": T0 + dt.timedelta(seconds=10 * trial + 5),
        "tuner_version": "0.1.0", "torch_version": "2", "ray_version": "2", "optuna_version": "4",
        "ignored_key": "not a column", **knobs.to_dict(),
    }
    r.update(extra)
    return r


def test_append_read_round_trip_with_schema(tmp_path):
    knobs = Knobs(batch_size=32, num_workers=2, persistent_workers=True, amp="bf16")
    path = leaderboard.append(tmp_path, [row(0, knobs=knobs, reference="baseline")])
    assert path.parent == tmp_path / "leaderboard" and path.suffix == ".parquet"
    table = leaderboard.read(tmp_path)
    assert table.schema.equals(leaderboard.SCHEMA)
    assert table.num_rows == 1
    got = table.to_pylist()[0]
    assert {k: got[k] for k in Knobs.names()} == knobs.to_dict()
    assert got["samples_per_sec"] == 100.0 and got["windows"] == 2
    assert got["is_baseline"] is True and got["reference"] == "baseline"
    assert got["started_at"] == T0 and got["started_at"].tzinfo is not None
    assert got["schema_version"] == leaderboard.SCHEMA_VERSION
    assert "ignored_key" not in got
    types = dict(zip(table.schema.names, table.schema.types))
    assert types["batch_size"] == pa.int32() and types["prefetch_factor"] == pa.int32()
    assert types["amp"] == pa.string() and types["compile"] == pa.string()
    assert types["pin_memory"] == pa.bool_() and types["persistent_workers"] == pa.bool_()
    assert types["samples_per_sec"] == pa.float64() and types["windows"] == pa.int32()
    assert types["started_at"] == pa.timestamp("us", tz="UTC")
    # Readable as a plain Parquet file too (DuckDB, pandas).
    assert pq.read_table(path).num_rows == 1


@pytest.mark.parametrize("status", ["oom", "error", "over_limit"])
def test_failed_rows_have_null_measurements(tmp_path, status):
    leaderboard.append(tmp_path, [row(0, status=status, sps=0.0)])
    got = leaderboard.read(tmp_path).to_pylist()[0]
    assert got["status"] == status
    for name in leaderboard.MEASURED_COLUMNS:
        assert got[name] is None, name
    assert got["error"] == f"{status} happened"
    assert got["batch_size"] == 8                         # the configuration is kept


def test_two_appends_are_two_files_both_read(tmp_path):
    first = leaderboard.append(tmp_path, [row(0), row(1)])
    second = leaderboard.append(tmp_path, [row(2)])
    assert first != second
    files = sorted(p.name for p in (tmp_path / "leaderboard").iterdir())
    assert files == sorted([first.name, second.name])
    assert sorted(leaderboard.read(tmp_path).column("trial_id").to_pylist()) == [
        "run-a-0", "run-a-1", "run-a-2"]


def test_read_filters_by_workload_and_hardware(tmp_path):
    leaderboard.append(tmp_path, [row(0), row(1, workload="other"),
                                  row(2, hardware_key="cuda:H100:80GiB")])
    assert leaderboard.read(tmp_path, workload="other").column("trial_id").to_pylist() == [
        "run-a-1"]
    assert leaderboard.read(tmp_path, workload="fake-regression",
                            hardware_key="cpu:test:2cpu").column("trial_id").to_pylist() == [
        "run-a-0"]


def test_older_files_without_newer_columns_read_as_null(tmp_path):
    """A file written before a column existed still reads; the column is null there."""
    leaderboard.append(tmp_path, [row(0)])
    old_schema = pa.schema([f for f in leaderboard.SCHEMA
                            if f.name not in ("clamped", "phase", "windows_planned",
                                              "priced_s", "recompiles", "compile_fallback")])
    old = pa.Table.from_pylist([leaderboard.normalise_row(row(1))], schema=old_schema)
    pq.write_table(old, tmp_path / "leaderboard" / "part-old.parquet")
    rows = {r["trial_id"]: r for r in leaderboard.read(tmp_path).to_pylist()}
    assert set(rows) == {"run-a-0", "run-a-1"}
    # a row from before the phase column is a search row (normalised once, on read)
    assert rows["run-a-1"]["phase"] == "search" and rows["run-a-1"]["clamped"] is None
    assert rows["run-a-1"]["windows_planned"] is None and rows["run-a-1"]["priced_s"] is None
    assert rows["run-a-1"]["recompiles"] is None and rows["run-a-1"]["compile_fallback"] is None
    assert rows["run-a-1"]["samples_per_sec"] == 100.0


def test_read_without_leaderboard_is_empty(tmp_path):
    table = leaderboard.read(tmp_path / "nothing-here")
    assert table.num_rows == 0 and table.schema.equals(leaderboard.SCHEMA)


def test_crash_mid_write_leaves_earlier_rows_and_no_partial_file(tmp_path, monkeypatch):
    leaderboard.append(tmp_path, [row(0)])
    before = sorted(os.listdir(tmp_path / "leaderboard"))

    def crash(table, where, *args, **kwargs):
        with open(where, "wb") as f:
            f.write(b"PAR1 half a parquet file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        leaderboard.append(tmp_path, [row(1)])
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "leaderboard")) == before     # nothing left behind
    assert leaderboard.read(tmp_path).column("trial_id").to_pylist() == ["run-a-0"]


def test_stray_temporary_file_is_ignored(tmp_path):
    leaderboard.append(tmp_path, [row(0)])
    (tmp_path / "leaderboard" / ".tmp-part-deadbeef.parquet").write_bytes(b"PAR1 partial")
    assert leaderboard.read(tmp_path).column("trial_id").to_pylist() == ["run-a-0"]


def table_of(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([leaderboard.normalise_row(r) for r in rows],
                                schema=leaderboard.SCHEMA)


def test_ranked_orders_ok_by_speed_then_failures():
    rows = [row(0, sps=50.0), row(1, status="oom", sps=0.0), row(2, sps=300.0),
            row(3, status="error", sps=0.0), row(4, sps=120.0)]
    ranked = leaderboard.ranked(table_of(rows))
    assert [r["trial_id"] for r in ranked] == [
        "run-a-2", "run-a-4", "run-a-0", "run-a-1", "run-a-3"]


def test_ranked_puts_ceilings_then_disturbed_rows_after_the_measured_ones():
    """A row with an impossible figure (MFU 180 %, a negative step time) is no result: it
    ranks after every measurement and ceiling, however fast it read."""
    rows = [row(0, sps=50.0), row(1, sps=900.0, mfu_pct=180.0, mfu_impossible=True),
            row(2, sps=300.0, phase="ceiling", ceiling="compute"),
            row(3, sps=120.0, step_time_ms_p50=-3.0), row(4, status="oom", sps=None)]
    assert [r["trial_id"] for r in leaderboard.ranked(table_of(rows))] == [
        "run-a-0", "run-a-2", "run-a-1", "run-a-3", "run-a-4"]


def test_read_commands_take_one_scale_on_request(tmp_path):
    """After a quick tiny run, the full run's answer is still there with --scale full."""
    rows = [row(0, run="full-run", sps=90.0, scale="full", knobs=Knobs(batch_size=64)),
            {**row(0, run="tiny-run", sps=400.0), "finished_at": T0 + dt.timedelta(days=1)}]
    leaderboard.append(tmp_path, rows)
    table, _ = leaderboard.select(tmp_path, "fake-regression", scale="full")
    assert winner.best(table).row["run_id"] == "full-run"
    assert winner.best(leaderboard.select(tmp_path, "fake-regression")[0]).row["scale"] == "tiny"
    from tuner.errors import TunerError
    with pytest.raises(TunerError, match="--scale huge: no rows .* scales with rows: full, tiny"):
        leaderboard.select(tmp_path, "fake-regression", scale="huge")
    from click.testing import CliRunner

    from tuner.cli import main
    out = CliRunner().invoke(main, ["best", "-w", "fake-regression", "--results", str(tmp_path),
                                    "--scale", "full"])
    assert out.exit_code == 0 and '"batch_size": 64' in out.output, out.output


def _written_before_the_rename(results, rows: list[dict]) -> None:
    """``rows`` as a Parquet part written by tuner 0.2, whose scale word was 'seed': straight
    to the file, past ``normalise_row``."""
    directory = leaderboard.leaderboard_dir(results)
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{**leaderboard.normalise_row(r), "scale": r["scale"]} for r in rows]
    pq.write_table(pa.Table.from_pylist(rows, schema=leaderboard.SCHEMA),
                   directory / "part-written-by-0.2.parquet")


def test_rows_written_with_the_old_scale_word_read_as_full(tmp_path):
    """Rows of a 'seed' run read as 'full': by ``read``, by ``--scale full`` and by the old
    ``--scale seed`` (one note on stderr), and ``best`` answers from them."""
    from click.testing import CliRunner

    from tuner.cli import main
    _written_before_the_rename(tmp_path, [
        row(0, run="old-run", sps=90.0, scale="seed", knobs=Knobs(batch_size=64)),
        row(1, run="old-run", sps=80.0, scale="seed"), row(2, run="no-scale", scale=None)])
    leaderboard.append(tmp_path, [row(0, run="tiny-run", sps=400.0)])
    scales = leaderboard.read(tmp_path).column("scale").to_pylist()
    assert sorted(map(str, scales)) == ["None", "full", "full", "tiny"]   # a null stays null
    table, _ = leaderboard.select(tmp_path, "fake-regression", scale="full")
    assert winner.best(table).row["run_id"] == "old-run"
    assert winner.best(table).row["scale"] == "full"
    for word, note in (("full", False), ("seed", True)):
        out = CliRunner().invoke(main, ["best", "-w", "fake-regression", "--results",
                                        str(tmp_path), "--scale", word, "--format", "json"])
        assert out.exit_code == 0 and '"batch_size": 64' in out.stdout, out.output
        assert ("--scale seed was deprecated in tuner 0.3.0 and will be removed in tuner "
                "0.4.0; use --scale full" in out.stderr) is note, out.stderr
        assert out.stderr.count("\n") == int(note)


def test_a_run_written_with_the_old_scale_word_resumes_as_full(tmp_path):
    from tuner.option_checks import _resumed_run
    from tuner.settings import RunOptions
    _written_before_the_rename(tmp_path, [row(i, run="old-run", scale="seed") for i in range(3)])
    options = RunOptions(workload="fake-regression", results=str(tmp_path), resume="latest")
    run_id, rows = _resumed_run(options, "fake-regression", "full", "cpu")
    assert run_id == "old-run" and len(rows) == 3
    assert {r["scale"] for r in rows} == {"full"}


def test_normalise_row_writes_the_old_scale_word_as_full():
    assert leaderboard.normalise_row(row(0, scale="seed"))["scale"] == "full"
    assert leaderboard.normalise_row(row(0, scale="tiny"))["scale"] == "tiny"


def test_write_row_normalises_once_and_returns_the_row_as_written(tmp_path):
    raw = {**row(0), "status": "oom", "not_a_column": 1}          # a failed trial's raw result
    written = leaderboard.write_row(tmp_path, raw)
    assert "not_a_column" not in written and written["samples_per_sec"] is None
    assert written["schema_version"] == leaderboard.SCHEMA_VERSION
    (stored,) = leaderboard.read(tmp_path).to_pylist()
    assert stored == written
