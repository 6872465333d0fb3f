"""The Parquet leaderboard: one row per trial under ``<results>/leaderboard/``.

Each write is a new file, written under a temporary name (``.tmp-*``, which readers ignore)
and renamed into place, so a crash never leaves a half-written file where a reader looks and
two runs never overwrite each other. Readable by pyarrow, pandas and DuckDB as a dataset.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from tuner.knobs import Knobs

SCHEMA_VERSION = 1

_KNOB_TYPES = {"batch_size": pa.int32(), "grad_accum": pa.int32(), "num_workers": pa.int32(),
               "prefetch_factor": pa.int32(), "amp": pa.string(), "compile": pa.string()}

SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("trial_id", pa.string()),
        ("workload", pa.string()),
        ("scale", pa.string()),
        ("status", pa.string()),            # ok | oom | over_limit | pruned | error
        ("reference", pa.string()),         # baseline | recommended | null (searched)
        ("is_baseline", pa.bool_()),
        ("samples_per_sec", pa.float64()),  # median over windows; null unless measured
        ("samples_per_sec_iqr", pa.float64()),
        ("samples_per_sec_cv", pa.float64()),
        ("tokens_per_sec", pa.float64()),
        ("step_time_ms_p50", pa.float64()),
        ("step_time_ms_p95", pa.float64()),
        ("windows", pa.int32()),
        ("measured_s", pa.float64()),
        ("warmup_s", pa.float64()),
        ("first_step_s", pa.float64()),
        ("peak_device_memory_mb", pa.float64()),
        ("peak_host_memory_mb", pa.float64()),
        ("final_loss", pa.float64()),
    ]
    + [(name, _KNOB_TYPES.get(name, pa.bool_())) for name in Knobs.names()]
    + [
        ("clamped", pa.string()),
        ("trial_cpus", pa.float64()),
        ("trial_gpus", pa.float64()),
        ("device", pa.string()),
        ("hardware_key", pa.string()),
        ("gpu_name", pa.string()),
        ("gpu_memory_mb", pa.float64()),
        ("cuda_version", pa.string()),
        ("cpu_model", pa.string()),
        ("cpu_count", pa.int32()),
        ("host_memory_mb", pa.float64()),
        ("node_id", pa.string()),
        ("node_ip", pa.string()),
        ("error", pa.string()),
        ("traceback", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("tuner_version", pa.string()),
        ("torch_version", pa.string()),
        ("ray_version", pa.string()),
        ("optuna_version", pa.string()),
        ("schema_version", pa.int32()),
    ]
)

MEASURED_COLUMNS = ("samples_per_sec", "samples_per_sec_iqr", "samples_per_sec_cv",
                    "tokens_per_sec", "step_time_ms_p50", "step_time_ms_p95", "windows",
                    "measured_s")
"""Columns that only mean something for a measured trial: null for oom/error rows (a failed
trial is never recorded as a throughput of zero)."""


def leaderboard_dir(results: str | Path) -> Path:
    return Path(results) / "leaderboard"


def normalise_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the schema's columns, null out measurements of unmeasured trials."""
    out = {name: row.get(name) for name in SCHEMA.names}
    out["schema_version"] = SCHEMA_VERSION
    if out["status"] not in ("ok", "pruned"):
        for name in MEASURED_COLUMNS:
            out[name] = None
    if out.get("windows") is not None:
        out["windows"] = int(out["windows"])
    return out


def append(results: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``rows`` as one new Parquet file, atomically. Returns its path."""
    table = pa.Table.from_pylist([normalise_row(r) for r in rows], schema=SCHEMA)
    directory = leaderboard_dir(results)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"part-{uuid.uuid4().hex}.parquet"
    tmp = directory / f".tmp-{name}"
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb+") as f:  # data on disk before the rename makes it visible
            os.fsync(f.fileno())
        os.replace(tmp, directory / name)
    finally:
        tmp.unlink(missing_ok=True)
    return directory / name


def read(results: str | Path, *, workload: str | None = None,
         hardware_key: str | None = None) -> pa.Table:
    """All rows (optionally one workload / hardware key), in the current schema; columns
    added by later schema versions read as null in older files. Empty table if none."""
    directory = leaderboard_dir(results)
    if not directory.is_dir():
        return SCHEMA.empty_table()
    dataset = pads.dataset(str(directory), format="parquet", schema=SCHEMA,
                           exclude_invalid_files=False)
    expr = None
    if workload is not None:
        expr = pads.field("workload") == workload
    if hardware_key is not None:
        cond = pads.field("hardware_key") == hardware_key
        expr = cond if expr is None else expr & cond
    return dataset.to_table(filter=expr)


def ranked(table: pa.Table) -> list[dict]:
    """Rows as dicts: measured rows by samples/sec (fastest first), then failed rows."""
    rows = table.to_pylist()
    measured = [r for r in rows if r["status"] == "ok" and r["samples_per_sec"] is not None]
    others = [r for r in rows if r not in measured]
    measured.sort(key=lambda r: -r["samples_per_sec"])
    others.sort(key=lambda r: (r["finished_at"] is None, r["finished_at"]))
    return measured + others


def best(table: pa.Table) -> dict | None:
    """The fastest ``ok`` row, with the references measured in the same run beside it.

    Returns None when no trial succeeded. Keys added: ``speedup_vs_baseline`` and
    ``speedup_vs_recommended`` (ratios of samples/sec in the best row's run; None where that
    reference failed or was not run), ``baseline_samples_per_sec``,
    ``recommended_samples_per_sec``.
    """
    rows = ranked(table)
    if not rows or rows[0]["status"] != "ok":
        return None
    top = dict(rows[0])
    same_run = [r for r in rows if r["run_id"] == top["run_id"]]
    for ref in ("baseline", "recommended"):
        match = [r for r in same_run if r["reference"] == ref]
        sps = match[0]["samples_per_sec"] if match and match[0]["status"] == "ok" else None
        top[f"{ref}_samples_per_sec"] = sps
        top[f"speedup_vs_{ref}"] = (top["samples_per_sec"] / sps) if sps else None
    return top
