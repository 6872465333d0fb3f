"""The leaderboard behind a URI (pyarrow filesystems), tested with file:// URIs: round trip,
readers during writes, concurrent writers, and the object-store path (one upload, no rename)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tuner import leaderboard
from tuner.errors import TunerError


def _row(trial_id: str, *, workload: str = "ddpm", sps: float = 10.0) -> dict:
    return {"run_id": "run-1", "trial_id": trial_id, "workload": workload, "scale": "tiny",
            "status": "ok", "samples_per_sec": sps, "hardware_key": "cpu-test", "batch_size": 8}


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_leaderboard_dir_of_a_uri_is_a_uri():
    assert leaderboard.leaderboard_dir("s3://bucket/runs/") == "s3://bucket/runs/leaderboard"
    assert (leaderboard.leaderboard_dir("s3://bucket/runs?region=eu-west-1")
            == "s3://bucket/runs/leaderboard?region=eu-west-1")
    assert leaderboard.leaderboard_dir("tuner-results") == Path("tuner-results/leaderboard")
    assert leaderboard.is_uri("file:///tmp/x") and not leaderboard.is_uri(Path("/tmp/x"))


def test_round_trip_through_a_file_uri(tmp_path):
    uri = tmp_path.as_uri()  # file:///...
    assert leaderboard.read(uri).num_rows == 0  # nothing written yet
    written = leaderboard.append(uri, [_row("a", sps=5.0), _row("b", sps=9.0)])
    leaderboard.append(uri, [_row("c", workload="chargpt")])
    assert isinstance(written, str) and written.startswith(f"{uri}/leaderboard/part-")

    table = leaderboard.read(uri)
    assert sorted(table.column("trial_id").to_pylist()) == ["a", "b", "c"]
    assert table.schema == leaderboard.SCHEMA
    ddpm = leaderboard.read(uri, workload="ddpm", hardware_key="cpu-test")
    assert [r["trial_id"] for r in leaderboard.ranked(ddpm)] == ["b", "a"]
    # the same files as a local path: one leaderboard, two spellings
    assert leaderboard.read(tmp_path).num_rows == 3
    assert not [n for n in _files(tmp_path / "leaderboard") if n.startswith(".tmp-")]


def test_uri_reader_ignores_tmp_files(tmp_path):
    uri = tmp_path.as_uri()
    leaderboard.append(uri, [_row("a")])
    (tmp_path / "leaderboard" / ".tmp-part-crashed.parquet").write_bytes(b"PAR1 half a file")
    assert leaderboard.read(uri).column("trial_id").to_pylist() == ["a"]


class _ObjectStore:
    """A local pyarrow filesystem that calls itself s3 and records which methods are used."""

    type_name = "s3"

    def __init__(self, fs):
        self._fs = fs
        self.calls: list[str] = []

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self._fs, name)


def test_object_store_path_uploads_the_final_name_once(tmp_path, monkeypatch):
    """On s3/gcs/abfs the file is uploaded under its final name: no .tmp- name, no move (which
    is copy + delete there)."""
    uri = tmp_path.as_uri()
    (tmp_path / "leaderboard").mkdir()  # an object store needs no directories
    real = leaderboard._filesystem
    stores: list[_ObjectStore] = []

    def as_object_store(directory):
        fs, root = real(directory)
        stores.append(_ObjectStore(fs))
        return stores[-1], root

    monkeypatch.setattr(leaderboard, "_filesystem", as_object_store)
    written = leaderboard.append(uri, [_row("a"), _row("b")])
    monkeypatch.undo()
    assert stores[0].calls == ["open_output_stream"]
    assert written == f"{uri}/leaderboard/{_files(tmp_path / 'leaderboard')[0]}"
    assert sorted(leaderboard.read(uri).column("trial_id").to_pylist()) == ["a", "b"]


def test_unknown_scheme_is_a_user_error(tmp_path):
    with pytest.raises(TunerError, match=r"results nosuchfs://bucket/x: pyarrow cannot open"):
        leaderboard.read("nosuchfs://bucket/x")
    with pytest.raises(TunerError, match="pyarrow cannot open"):
        leaderboard.append("nosuchfs://bucket/x", [_row("a")])


def test_reader_never_sees_a_partial_file_while_another_thread_appends(tmp_path):
    uri = tmp_path.as_uri()
    files, rows_per_file = 50, 3
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(files):
                leaderboard.append(uri, [_row(f"{i}-{j}") for j in range(rows_per_file)])
        except BaseException as exc:  # noqa: BLE001 -- reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    counts = []
    try:
        while not done.is_set():
            table = leaderboard.read(uri)  # raises on a truncated Parquet file
            assert table.num_rows % rows_per_file == 0  # whole files only
            assert None not in table.column("trial_id").to_pylist()
            counts.append(table.num_rows)
    finally:
        thread.join()
    assert not errors, errors
    assert counts == sorted(counts)  # rows only ever appear
    assert leaderboard.read(uri).num_rows == files * rows_per_file


@pytest.mark.parametrize("spelling", ["uri", "path"])
def test_two_concurrent_writers_lose_nothing(tmp_path, spelling):
    results = tmp_path.as_uri() if spelling == "uri" else str(tmp_path)
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            start.wait()
            for i in range(20):
                leaderboard.append(results, [_row(f"{name}-{i}")])
        except BaseException as exc:  # noqa: BLE001 -- reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("w1", "w2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ids = leaderboard.read(results).column("trial_id").to_pylist()
    assert len(ids) == 40 and len(set(ids)) == 40
    assert len(_files(tmp_path / "leaderboard")) == 40  # no .tmp- file left behind


def test_crash_mid_write_through_a_uri_leaves_no_partial_file(tmp_path, monkeypatch):
    uri = tmp_path.as_uri()
    leaderboard.append(uri, [_row("a")])
    before = _files(tmp_path / "leaderboard")

    def crash(table, where, *args, **kwargs):
        with open(where, "wb") as f:  # a local path: file:// maps onto the local filesystem
            f.write(b"PAR1 half a parquet file")
        raise OSError("disk full")

    monkeypatch.setattr(leaderboard.pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        leaderboard.append(uri, [_row("b")])
    monkeypatch.undo()
    assert _files(tmp_path / "leaderboard") == before
    assert leaderboard.read(uri).column("trial_id").to_pylist() == ["a"]


def test_check_results_fails_fast_on_a_uri_pyarrow_cannot_open(tmp_path):
    leaderboard.check_results(tmp_path.as_uri())
    leaderboard.check_results(str(tmp_path / "local"))
    leaderboard.check_results("s3://bucket/runs?region=eu-west-1")  # parsed, not contacted
    with pytest.raises(TunerError, match="results nosuchfs://x: pyarrow cannot open"):
        leaderboard.check_results("nosuchfs://x")
