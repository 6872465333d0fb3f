"""The Parquet leaderboard: one row per trial under ``<results>/leaderboard/``.

``results`` is a local directory or a URI that pyarrow's filesystems understand
(``s3://bucket/path``, ``gs://...``, ``file:///abs/path``, ``hdfs://...``). Each write is a new
file with a unique name, so two runs (or two drivers) never overwrite each other, and a reader
never sees a half-written file:

* local path: written as ``.tmp-*`` (readers ignore names starting with ``.``), fsync'ed, then
  ``os.replace``'d into place; a rename within one directory is atomic.
* URI on a filesystem with an atomic rename (``file://``: a local rename; ``hdfs://``): written
  as ``.tmp-*``, then ``fs.move``'d into place.
* URI on an object store (``s3://``, ``gs://``, ``abfs://``): ``fs.move`` is copy + delete there,
  not atomic, so the file is serialised in memory and uploaded under its final name in one
  upload; an object becomes visible only once its upload completes, whole.

Readable by pyarrow, pandas and DuckDB as a dataset.
"""

from __future__ import annotations

import os
import re
import stat
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import tuner.noise as noise
from tuner._deprecated import Replacement, moved
from tuner.errors import DamagedLeaderboardWarning, TunerError
from tuner.knobs import KNOB_INFO
from tuner.settings import OLD_SCALES, scale_word
from tuner.status import MEASURED, Phase, Status, phase_of

SCHEMA_VERSION = 10
"""10: ``cpu_s_per_sample`` (CPU seconds the trial's process and its DataLoader workers spent per
sample while it measured: beside the wall seconds per sample, whether an input pipeline
computes or waits; null in earlier files).
9: ``priced_s`` (the seconds the planner priced a trial at when it decided to run it,
``tuner.costs.TrialCost.trial_s``, Ray's overhead around a trial left out; its wall time is
``finished_at`` - ``started_at``; null for a trial run outside the planner's pricing, the memory
probe's, and in earlier files), ``recompiles`` (torch._dynamo's recompilations in a compiled
trial) and ``compile_fallback`` (a frame hit dynamo's recompile limit and ran eagerly: the row
is an ``error``, never a compiled rate; both null with compile off and in earlier files).
8: ``omp_num_threads`` (the training process's ``OMP_NUM_THREADS``; null where unset, and in
files of earlier versions) and ``windows_planned`` (the windows a trial was to measure; a
``timeout`` row with fewer ``windows`` is a measurement the time budget cut short; null in
earlier files). 7: ``world_size``, ``backend``, ``rank_samples_per_sec``, ``slowest_rank``,
``slowest_rank_data_wait_s`` (data-parallel trials; files of earlier versions read with world
size null, meaning 1) and the DDP knobs. 2: ``memory_exceeded`` (which memory an oom /
over_limit trial ran out of). 4: ``compile_s`` (torch.compile's time, kept out of throughput)
and ``other_runs`` (other tuner runs active on
the machine when the trial was recorded). 5: ``skipped_steps`` (optimizer steps the fp16
GradScaler skipped inside the windows, not counted as measured). 6: ``other_cpu_pct`` (the share
of the machine's CPU time processes other than the trial's own used while it measured). 3:
``model_flops_per_sample``, ``achieved_tflops``, ``mfu_pct``, ``mfu_impossible``, and
``ceiling`` (which ceiling a ceiling-phase row measured), ``load_avg_1m``, ``cpu_steal_pct``,
``gpu_other_processes`` (the machine's load while a trial measured). Files of earlier versions
read with the newer columns null (their ceiling rows are compute-only ceilings)."""

OLDER_FILES_READ_AS = (("phase", Phase.SEARCH.value), ("data_path", "loader"),
                       ("world_size", 1), ("gradient_as_bucket_view", False),
                       ("static_graph", False))
"""Columns null in rows written before they existed, and what such a row means: a search
row, the loader path, one rank without DDP's settings. ``read`` and ``normalise_row`` fill
them alike, and read a deprecated scale word (``tuner.settings.OLD_SCALES``: 'seed') as the
scale it names ('full')."""

_KNOB_ARROW_TYPES = {"int": pa.int32(), "bool": pa.bool_(), "choice": pa.string()}
"""Arrow type of a knob column, by ``KnobInfo.kind``."""

SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("trial_id", pa.string()),
        ("workload", pa.string()),
        ("scale", pa.string()),
        ("status", pa.string()),            # ok | oom | over_limit | pruned | error
        ("memory_exceeded", pa.string()),   # device | host: what ran out (oom / over_limit)
        ("reference", pa.string()),         # baseline | recommended | null (searched)
        ("is_baseline", pa.bool_()),
        ("samples_per_sec", pa.float64()),  # median over windows; null unless measured
        ("samples_per_sec_iqr", pa.float64()),
        ("samples_per_sec_cv", pa.float64()),
        ("tokens_per_sec", pa.float64()),
        ("step_time_ms_p50", pa.float64()),
        ("step_time_ms_p95", pa.float64()),
        ("windows", pa.int32()),
        ("windows_planned", pa.int32()),    # windows the trial was to measure (timeout: fewer ran)
        ("measured_s", pa.float64()),
        ("skipped_steps", pa.int32()),      # fp16 GradScaler skips in the windows, not measured
        ("warmup_s", pa.float64()),
        ("first_step_s", pa.float64()),
        ("steady_state", pa.bool_()),       # the windows (or probes) agreed within the tolerance
        ("steady_probes", pa.int32()),      # windows dropped as warm-up (probes, with 1 window)
        # Every *_mb column holds MiB (2**20 bytes), as torch's allocator statistics do; a
        # --max-memory of 12GB means 12 * 10**9 bytes, i.e. 11,444 MiB.
        ("peak_device_memory_mb", pa.float64()),   # MiB: peak reserved + CUDA context
        ("peak_host_memory_mb", pa.float64()),     # MiB: peak PSS of the process + workers
        ("final_loss", pa.float64()),
        ("phase", pa.string()),             # search | remeasure | ceiling
        ("ceiling", pa.string()),           # compute | loader | machine-* | path-loader | core-*
        ("objective", pa.string()),         # samples_per_sec | time_to_train
        ("time_to_train_s", pa.float64()),  # predicted wall time of train_steps steps
        ("train_steps", pa.int64()),
        ("setup_s", pa.float64()),
        ("cache_fill_s", pa.float64()),     # decoding every sample once (data_path cache|device)
        ("breakdown_step_ms", pa.float64()),
    ]
    + [(f"{phase}_{unit}", pa.float64()) for phase in
       ("data_wait", "h2d", "forward", "backward", "optimizer") for unit in ("ms", "pct")]
    + [
        ("model_flops_per_sample", pa.float64()),  # FLOP, forward + backward (tuner.trial.flops)
        ("achieved_tflops", pa.float64()),  # model_flops_per_sample x samples_per_sec / 1e12
        # achieved / the card's dense peak (tuner.trial.flops.blended_peak_tflops;
        # null: CPU, unknown card)
        ("mfu_pct", pa.float64()),
        ("mfu_impossible", pa.bool_()),     # mfu_pct > 100: a disturbed measurement or a wrong peak
        ("load_avg_1m", pa.float64()),      # the machine's 1-min load average while measuring
        ("cpu_steal_pct", pa.float64()),    # CPU time the hypervisor stole while measuring, %
        ("other_cpu_pct", pa.float64()),    # machine CPU time used by other processes, %
        ("cpu_s_per_sample", pa.float64()),  # s: CPU of the trial + its workers per sample
        ("gpu_other_processes", pa.int32()),  # other processes on the trial's GPU (NVML)
        ("other_runs", pa.int32()),         # other tuner runs active on the machine (tuner.runlock)
        ("compile_s", pa.float64()),        # s: the first step beyond a steady one, with compile on
        ("recompiles", pa.int32()),         # torch._dynamo recompilations (null: compile off)
        ("compile_fallback", pa.bool_()),   # a frame hit dynamo's recompile limit: ran eagerly
        ("gpu_util_pct", pa.float64()),
        ("gpu_power_w", pa.float64()),
        ("max_memory_mb", pa.float64()),        # MiB: the device limit in force
        ("max_host_memory_mb", pa.float64()),   # MiB: the host limit in force
        ("global_batch_size", pa.int64()),
        ("accelerator_type", pa.string()),  # Ray accelerator type a trial was pinned to
        ("world_size", pa.int32()),         # ranks of a data-parallel trial (null: 1)
        ("backend", pa.string()),           # gloo | nccl (data-parallel trials)
        ("rank_samples_per_sec", pa.float64()),  # rank 0's own; samples_per_sec is global
        ("slowest_rank", pa.int32()),       # the rank that waited longest for data
        ("slowest_rank_data_wait_s", pa.float64()),  # s: its wait, over the whole trial
    ]
    + [(name, _KNOB_ARROW_TYPES[info.kind]) for name, info in KNOB_INFO.items()]
    + [
        ("clamped", pa.string()),
        ("trial_cpus", pa.float64()),
        ("trial_gpus", pa.float64()),
        ("torch_threads", pa.int32()),      # intra-op threads of the training process
        ("omp_num_threads", pa.int32()),    # its OMP_NUM_THREADS (null: unset)
        ("device", pa.string()),
        ("hardware_key", pa.string()),
        ("gpu_name", pa.string()),
        ("gpu_memory_mb", pa.float64()),        # MiB: the card's total
        ("cuda_version", pa.string()),
        ("cpu_model", pa.string()),
        ("cpu_count", pa.int32()),
        ("host_memory_mb", pa.float64()),       # MiB: the machine's RAM
        ("node_id", pa.string()),
        ("node_ip", pa.string()),
        ("error", pa.string()),
        ("traceback", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("priced_s", pa.float64()),         # s: the planner's price of the trial (tuner.costs)
        ("tuner_version", pa.string()),
        ("torch_version", pa.string()),
        ("ray_version", pa.string()),
        ("optuna_version", pa.string()),
        ("schema_version", pa.int32()),
    ]
)

MEASURED_COLUMNS = ("samples_per_sec", "samples_per_sec_iqr", "samples_per_sec_cv",
                    "tokens_per_sec", "step_time_ms_p50", "step_time_ms_p95", "windows",
                    "measured_s", "skipped_steps", "time_to_train_s", "achieved_tflops",
                    "mfu_pct", "mfu_impossible")
"""Columns that only mean something for a measured trial: null for oom/error rows (a failed
trial is never recorded as a throughput of zero)."""


_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")

_OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
"""pyarrow filesystem type names where ``move`` is copy + delete and an object appears whole when
its upload completes: written under the final name directly."""

_HIDDEN_PREFIXES = [".", "_"]
"""Readers skip files whose names start with these: ``.tmp-*`` files being written."""


def is_uri(results: str | Path) -> bool:
    """True for ``scheme://...`` (``s3://``, ``file://``...); False for a local path."""
    return isinstance(results, str) and _URI.match(results) is not None


def leaderboard_dir(results: str | Path) -> Path | str:
    """``<results>/leaderboard``: a Path for a local ``results``, a URI string for a URI."""
    if is_uri(results):
        base, sep, query = results.partition("?")  # s3://bucket/x?region=... keeps its query
        return f"{base.rstrip('/')}/leaderboard{sep}{query}"
    return Path(results) / "leaderboard"


def check_results(results: str | Path) -> None:
    """Fail fast, before any trial runs (and before Ray starts), on a ``results`` location
    the run could not write to.

    * URI: pyarrow must be able to open it (access rights are left to the first write).
    * Local path: the directory (and its ``leaderboard/``) must exist as directories or be
      creatable: no existing ancestor is a file, no name is longer than the filesystem allows,
      and the nearest existing directory accepts a new file (probed by creating and removing
      a hidden temporary file, since permission bits say nothing to root or about a read-only
      mount). Leaves nothing behind; files already there are not touched.

    Raises:
        TunerError: naming ``results`` and the reason, in one line.
    """
    if is_uri(results):
        _filesystem(str(leaderboard_dir(results)))
        return
    problem = _local_results_problem(Path(results))
    if problem:
        raise TunerError(f"--results {_show(results)}: cannot write the results there "
                         f"({problem}); expected a directory that exists or can be created and "
                         "is writable, or a URI such as s3://bucket/path")


_PROBE_PREFIX = ".tuner-write-probe-"
"""Hidden (readers skip names starting with '.'), created and removed by ``check_results``."""


def _local_results_problem(results: Path) -> str | None:
    """Why ``results`` (a local path) cannot hold a leaderboard, or None when it can: the
    reason as ``strerror: what``. Creates nothing that outlives the call."""
    import errno
    import tempfile
    target = Path(os.path.abspath(results))
    # Walk down from the root to the first name that does not exist yet: everything above it
    # must be a directory; it and the names below it will be created.
    node, missing = Path(target.anchor), []
    for i, name in enumerate(target.parts[1:]):
        here = node / name
        try:
            st = os.stat(here)
        except FileNotFoundError:
            missing = list(target.parts[1 + i:])
            break
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return _name_too_long(name, node)
            return f"{exc.strerror or type(exc).__name__}: {_show(here)}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{os.strerror(errno.ENOTDIR)}: {_show(here)} is a file, not a directory"
        node = here
    leaderboard = target / "leaderboard"
    if not missing and leaderboard.exists() and not leaderboard.is_dir():
        return f"{os.strerror(errno.ENOTDIR)}: {_show(leaderboard)} is a file, not a directory"
    for name in missing:
        if len(os.fsencode(name)) > _pathconf(node, "PC_NAME_MAX", 255):
            return _name_too_long(name, node)
    # The longest path tuner itself writes: <results>/leaderboard/.tmp-part-<32 hex>.parquet
    longest = len(os.fsencode(str(leaderboard / f".tmp-part-{'0' * 32}.parquet")))
    path_max = _pathconf(node, "PC_PATH_MAX", 4096)
    if longest >= path_max:
        return (f"{os.strerror(errno.ENAMETOOLONG)}: the path is "
                f"{len(os.fsencode(str(target)))} bytes long, too long for the files under it "
                f"(paths end at {path_max} bytes)")
    # Permission bits say nothing for root or a read-only mount: create a file and remove it.
    probe_dirs = [leaderboard] if not missing and leaderboard.is_dir() else []
    for directory in [*probe_dirs, node]:
        try:
            fd, probe = tempfile.mkstemp(prefix=_PROBE_PREFIX, dir=directory)
        except OSError as exc:
            return (f"{exc.strerror or type(exc).__name__}: cannot create a file in "
                    f"{_show(directory)}")
        os.close(fd)
        os.unlink(probe)
    return None


def _pathconf(path: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(path, name) or default
    except (OSError, ValueError, AttributeError):  # not known on this platform / filesystem
        return default


def _name_too_long(name: str, parent: Path) -> str:
    import errno
    return (f"{os.strerror(errno.ENAMETOOLONG)}: the name {_show(name)} is "
            f"{len(os.fsencode(name))} bytes, the limit in {_show(parent)} is "
            f"{_pathconf(parent, 'PC_NAME_MAX', 255)}")


_SHOWN_NAME = 40
"""A path component longer than this is abbreviated in error lines."""


def _show(path: str | Path) -> str:
    """``path`` for an error line, each overlong name abbreviated (``aaaa…aaaa``)."""
    parts = str(path).split(os.sep)
    return os.sep.join(p if len(p) <= _SHOWN_NAME else f"{p[:24]}…{p[-8:]}" for p in parts)


def normalise_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the schema's columns, null out measurements of unmeasured trials."""
    out = {name: row.get(name) for name in SCHEMA.names}
    out["schema_version"] = SCHEMA_VERSION
    for name, value in OLDER_FILES_READ_AS:  # as read() says of older files
        if out[name] is None:
            out[name] = value
    out["scale"] = OLD_SCALES.get(out["scale"], out["scale"])
    if out["status"] not in MEASURED:
        for name in MEASURED_COLUMNS:
            out[name] = None
    for name in ("windows", "skipped_steps"):
        if out.get(name) is not None:
            out[name] = int(out[name])
    return out


def append(results: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path | str:
    """Write ``rows`` as one new Parquet file, atomically. Returns its path (its URI when
    ``results`` is a URI).

    Raises:
        TunerError: ``results`` is a URI pyarrow cannot open.
    """
    return _write(results, [normalise_row(r) for r in rows])


def write_row(results: str | Path, row: Mapping[str, Any]) -> dict[str, Any]:
    """Normalise one trial's row (``normalise_row``), write it as its own file (``append``)
    and return it as written: the recorder keeps that copy, so a row is normalised once."""
    normalised = normalise_row(row)
    _write(results, [normalised])
    return normalised


def _write(results: str | Path, rows: list[dict[str, Any]]) -> Path | str:
    """Write rows already normalised as one new Parquet file, atomically (see ``append``)."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    directory = leaderboard_dir(results)
    name = f"part-{uuid.uuid4().hex}.parquet"
    if isinstance(directory, str):
        return _append_uri(directory, name, table)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".tmp-{name}"
    try:
        pq.write_table(table, tmp)
        _fsync(tmp)  # data on disk before the rename makes it visible
        os.replace(tmp, directory / name)
    finally:
        tmp.unlink(missing_ok=True)
    return directory / name


def _append_uri(directory: str, name: str, table: pa.Table) -> str:
    fs, root = _filesystem(directory)
    base, sep, query = directory.partition("?")
    final = f"{root}/{name}"
    if fs.type_name in _OBJECT_STORES:
        buffer = pa.BufferOutputStream()  # serialise first: only whole files get uploaded
        pq.write_table(table, buffer)
        with fs.open_output_stream(final) as out:
            out.write(buffer.getvalue())
        return f"{base}/{name}{sep}{query}"
    fs.create_dir(root, recursive=True)
    tmp = f"{root}/.tmp-{name}"
    try:
        pq.write_table(table, tmp, filesystem=fs)
        if fs.type_name == "local":
            _fsync(tmp)
        fs.move(tmp, final)
    finally:
        if fs.get_file_info(tmp).type != pafs.FileType.NotFound:
            fs.delete_file(tmp)
    return f"{base}/{name}{sep}{query}"


def _fsync(path: str | Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for ``uri`` (a leaderboard directory) and the path within it.
    Raises TunerError naming the results URI."""
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, OSError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        results = uri.partition("?")[0].removesuffix("/leaderboard")
        raise TunerError(f"results {results}: pyarrow cannot open this URI ({first_line}); "
                         "expected a local directory or a URI such as s3://bucket/path, "
                         "gs://bucket/path or file:///abs/path") from None
    return fs, path.rstrip("/")


def read(results: str | Path, *, workload: str | None = None,
         hardware_key: str | None = None) -> pa.Table:
    """All rows (optionally one workload / hardware key), in the current schema; columns
    added by later schema versions read as null in older files. Empty table if none.

    A file in the directory that is not a readable Parquet part (a stray ``notes.txt``, a
    truncated ``part-*.parquet``) is skipped: every good row is still returned, and one
    ``DamagedLeaderboardWarning`` names the skipped files. A part moved away while this reads
    is simply not there.

    Raises:
        TunerError: ``results`` is a URI pyarrow cannot open.
    """
    directory = leaderboard_dir(results)
    if isinstance(directory, str):
        fs, root = _filesystem(directory)
        if fs.get_file_info(root).type != pafs.FileType.Directory:
            return SCHEMA.empty_table()
        source, filesystem = root, fs
    else:
        if not directory.is_dir():
            return SCHEMA.empty_table()
        source, filesystem = str(directory), None
    expr = None
    if workload is not None:
        expr = pads.field("workload") == workload
    if hardware_key is not None:
        cond = pads.field("hardware_key") == hardware_key
        expr = cond if expr is None else expr & cond
    try:  # the fast path: one dataset over the directory, no file opened twice
        table = _dataset(source, filesystem).to_table(filter=expr)
    except (pa.ArrowException, OSError):  # a part that is not readable Parquet, or gone
        table = _read_skipping_damaged(source, filesystem, directory, expr)
    for column, value in OLDER_FILES_READ_AS:
        table = table.set_column(table.schema.get_field_index(column), column,
                                 pc.fill_null(table.column(column), value))
    scale = table.column("scale")
    for old, new in OLD_SCALES.items():  # rows written before the scale had its new word
        scale = pc.if_else(pc.equal(scale, old), new, scale)
    return table.set_column(table.schema.get_field_index("scale"), "scale", scale)


_NAMED_DAMAGED = 5
"""At most this many skipped files are named in the warning; the rest are counted."""


def _dataset(source: str | list[str], filesystem: pafs.FileSystem | None) -> pads.Dataset:
    """The leaderboard as a dataset: a directory (listed, no file opened yet) or a list of
    files."""
    return pads.dataset(source, filesystem=filesystem, format="parquet", schema=SCHEMA,
                        exclude_invalid_files=False, ignore_prefixes=_HIDDEN_PREFIXES)


def _read_skipping_damaged(source: str, filesystem: pafs.FileSystem | None,
                           directory: Path | str, expr: pads.Expression | None) -> pa.Table:
    """``read``'s slow path, taken only when reading the whole directory failed: list it
    again, check each part's footer, read the parts that pass, and warn once naming those
    that do not. A part that vanished meanwhile (moved aside by another process) is neither
    read nor named."""
    listed = _dataset(source, filesystem)  # listed afresh: parts moved away since are gone
    fs, bad, good = listed.filesystem, [], []
    for path in listed.files:
        try:
            with fs.open_input_file(path) as f:
                pq.read_metadata(f)
            good.append(path)
        except (pa.ArrowException, OSError):
            bad.append(path)
    try:
        table = _dataset(good, fs).to_table(filter=expr)
    except (pa.ArrowException, OSError):
        # A footer that reads over data that does not (or a column of another type, or a part
        # that vanished since): read the parts one by one.
        tables = []
        for path in good:
            try:
                tables.append(_dataset([path], fs).to_table(filter=expr))
            except (pa.ArrowException, OSError):
                bad.append(path)
        table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    bad = [path for path in bad if fs.get_file_info(path).type != pafs.FileType.NotFound]
    if bad:
        warnings.warn(_damaged_message(source, directory, bad), DamagedLeaderboardWarning,
                      stacklevel=3)
    return table


def _damaged_message(source: str, directory: Path | str, bad: list[str]) -> str:
    """One line: the skipped files, relative to the leaderboard directory, and where to move
    them."""
    base = source.rstrip("/") + "/"
    names = sorted(path[len(base):] if path.startswith(base) else path for path in bad)
    shown = ", ".join(names[:_NAMED_DAMAGED])
    if len(names) > _NAMED_DAMAGED:
        shown += f" and {len(names) - _NAMED_DAMAGED} more"
    if isinstance(directory, str):
        where = directory.partition("?")[0]
        aside = f"{where.removesuffix('/leaderboard')}/damaged/"
    else:
        where, aside = str(directory), f"{directory.parent / 'damaged'}{os.sep}"
    files = "file" if len(names) == 1 else "files"
    return (f"skipped {len(names)} unreadable {files} in {where}: {shown} (move them out of "
            f"the leaderboard directory, e.g. into {aside}, to silence this)")


def hardware_keys(table: pa.Table) -> list[str]:
    """The hardware keys with rows in ``table``, sorted."""
    return sorted(set(table.column("hardware_key").to_pylist()) - {None})


def select(results: str | Path, workload: str, hardware: str | None = None, *,
           scale: str | None = None,
           this_machine: Callable[[list[str]], str | None] | None = None) -> tuple[pa.Table, str]:
    """The rows every read command shows: one workload's, on one hardware key, of one model
    scale when ``scale`` is given (else all: ``tuner.winner.best`` answers from the latest
    run's). The key is ``hardware``, else the only one with rows, else the one
    ``this_machine(keys)`` picks.

    Returns:
        (rows of that workload and key, the key).

    Raises:
        TunerError: no rows for the workload (at ``scale``: the message lists the scales that
            have rows); ``hardware`` has no rows (the message lists the keys that have);
            several keys and none chosen.
    """
    table = read(results, workload=workload)
    if scale is not None:
        scale = scale_word(scale, stacklevel=3)      # the deprecated 'seed' reads 'full'
    if scale is not None and table.num_rows:
        present = sorted(set(table.column("scale").to_pylist()) - {None})
        table = table.filter(pc.field("scale") == scale)
        if table.num_rows == 0:
            raise TunerError(f"--scale {scale}: no rows of workload {workload!r} at that scale "
                             f"in {results}; scales with rows: {', '.join(present)}")
    if table.num_rows == 0:
        present = sorted({w for w in read(results).column("workload").to_pylist() if w})
        # here: the leaderboard stays torch-free to import
        from tuner.workload_loader import available
        if workload not in present and workload not in available():
            raise TunerError(f"unknown workload {workload!r}: no rows for it in {results}/"
                             f"leaderboard; workloads with rows here: "
                             f"{', '.join(present) or 'none'}; built-ins: "
                             f"{', '.join(sorted(available()))}")
        raise TunerError(f"no leaderboard rows for workload {workload!r} in {results}/leaderboard "
                         f"(run `python -m tuner run --workload {workload} --results {results}`)")
    keys = hardware_keys(table)
    if hardware is None:
        hardware = keys[0] if len(keys) == 1 else (this_machine(keys) if this_machine else None)
        if hardware is None:
            raise TunerError(f"rows for workload {workload!r} in {results} come from several "
                             f"machines; choose one with --hardware: {', '.join(keys)}")
    if hardware not in keys:
        raise TunerError(f"--hardware {hardware!r}: no rows for it; hardware keys in {results}: "
                         f"{', '.join(keys)}")
    return table.filter(pc.field("hardware_key") == hardware), hardware


def ranked(table: pa.Table) -> list[dict]:
    """Rows as dicts: measured rows by samples/sec (fastest first), then ceiling rows (not
    reachable in training: no data loading, or no model), then rows with a figure that cannot
    be true (``tuner.noise.impossible``: disturbed, never a result), then failed rows."""
    rows = table.to_pylist()
    measured = [r for r in rows if r["status"] == Status.OK and r["samples_per_sec"] is not None]
    ceilings = [r for r in measured if phase_of(r) == Phase.CEILING]
    disturbed = [r for r in measured if r not in ceilings and noise.impossible(r)]
    measured = [r for r in measured if r not in ceilings and r not in disturbed]
    others = [r for r in rows if r not in measured and r not in ceilings and r not in disturbed]
    measured.sort(key=lambda r: -r["samples_per_sec"])
    others.sort(key=lambda r: (r["finished_at"] is None, r["finished_at"]))
    return measured + ceilings + disturbed + others


# ---------------------------------------------------------------------------------------------
# Old import paths of the winner's rule, which lives in ``tuner.winner``: kept for one release.

__getattr__ = moved(__name__, {
    "best_row": Replacement("tuner._best_row", "use tuner.winner.best(rows), which returns a "
                            "tuner.winner.Answer"),
    "best": Replacement("tuner._best_row", "use tuner.winner.best(table), which returns a "
                        "tuner.winner.Answer"),
    "speedup_vs": Replacement("tuner._best_row", "use tuner.winner.best(rows).baseline.speedup "
                              "(or .recommended.speedup)"),
    "ceiling_far_below": Replacement("tuner._best_row",
                                     "use tuner.winner.best(rows).ceiling_far_below"),
    "CEILING_NOISE": Replacement("tuner.ceilings", "use tuner.ceilings.CEILING_NOISE"),
    "RATE_COLUMNS": Replacement("tuner.winner", "use tuner.winner.RATE_COLUMNS"),
})

