"""A damaged leaderboard directory: unreadable files are skipped and named once, good rows kept."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_leaderboard import row
from tuner import leaderboard
from tuner.leaderboard import DamagedLeaderboardWarning


def _write_three(results: str | Path) -> list[Path]:
    """Three one-row parts; returns their local paths, in trial order."""
    written = [leaderboard.append(results, [row(i)]) for i in range(3)]
    return [Path(p.removeprefix("file://")) if isinstance(p, str) else p for p in written]


def _damage(directory: Path, part: Path) -> dict[str, bytes]:
    """Truncate ``part`` to half its bytes, add a stray text file and an empty part. Returns
    the bytes of every file in the directory afterwards."""
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])
    (directory / "notes.txt").write_text("moved the old runs to s3\n")
    (directory / "part-empty.parquet").write_bytes(b"")
    return _snapshot(directory)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _read(results, **filters) -> tuple[pa.Table, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # an earlier test's unclosed file or process, collected during the read, is not the
        # reader's warning (CI once counted one such in a test_faults_ray block)
        warnings.simplefilter("ignore", ResourceWarning)
        table = leaderboard.read(results, **filters)
    return table, caught


def _damaged(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DamagedLeaderboardWarning)]


@pytest.mark.parametrize("spelling", ["path", "uri"])
def test_damaged_parts_are_skipped_named_once_and_left_on_disk(tmp_path, spelling):
    results = tmp_path.as_uri() if spelling == "uri" else tmp_path
    directory = tmp_path / "leaderboard"
    parts = _write_three(results)
    before = _damage(directory, parts[1])

    table, caught = _read(results)

    assert sorted(table.column("trial_id").to_pylist()) == ["run-a-0", "run-a-2"]
    assert table.schema.equals(leaderboard.SCHEMA)
    assert table.column("phase").to_pylist() == ["search", "search"]  # post-processing kept
    messages = _damaged(caught)
    assert len(messages) == 1 and len(caught) == 1, [str(w.message) for w in caught]
    message = messages[0]
    assert "\n" not in message
    where = f"{tmp_path.as_uri()}/leaderboard" if spelling == "uri" else str(directory)
    aside = f"{tmp_path.as_uri()}/damaged/" if spelling == "uri" else f"{tmp_path / 'damaged'}/"
    names = ", ".join(sorted(["notes.txt", parts[1].name, "part-empty.parquet"]))
    assert message == (f"skipped 3 unreadable files in {where}: {names} (move them out of the "
                       f"leaderboard directory, e.g. into {aside}, to silence this)")
    assert _snapshot(directory) == before  # nothing moved, deleted or rewritten


def test_warning_is_raised_through_pytest_warns(tmp_path):
    parts = _write_three(tmp_path)
    _damage(tmp_path / "leaderboard", parts[0])
    with pytest.warns(DamagedLeaderboardWarning, match=r"^skipped 3 unreadable files in "):
        table = leaderboard.read(tmp_path)
    assert table.num_rows == 2
    assert issubclass(DamagedLeaderboardWarning, UserWarning)


def test_clean_leaderboard_warns_nothing(tmp_path):
    _write_three(tmp_path)
    table, caught = _read(tmp_path)
    assert table.num_rows == 3 and caught == []
    table, caught = _read(tmp_path.as_uri(), workload="fake-regression")
    assert table.num_rows == 3 and caught == []


def test_filters_still_apply_with_damage_present(tmp_path):
    leaderboard.append(tmp_path, [row(0)])
    leaderboard.append(tmp_path, [row(1, workload="other")])
    leaderboard.append(tmp_path, [row(2, hardware_key="cuda:H100:80GiB")])
    (tmp_path / "leaderboard" / "notes.txt").write_text("not parquet")

    table, caught = _read(tmp_path, workload="other")
    assert table.column("trial_id").to_pylist() == ["run-a-1"] and len(_damaged(caught)) == 1
    table, caught = _read(tmp_path, workload="fake-regression", hardware_key="cpu:test:2cpu")
    assert table.column("trial_id").to_pylist() == ["run-a-0"] and len(_damaged(caught)) == 1
    table, caught = _read(tmp_path, hardware_key="cuda:H100:80GiB")
    assert table.column("trial_id").to_pylist() == ["run-a-2"] and len(_damaged(caught)) == 1
    table, caught = _read(tmp_path, workload="nothing")
    assert table.num_rows == 0 and len(_damaged(caught)) == 1


@pytest.mark.parametrize("spelling", ["path", "uri"])
def test_partial_tmp_file_is_ignored_silently(tmp_path, spelling):
    results = tmp_path.as_uri() if spelling == "uri" else tmp_path
    _write_three(results)
    directory = tmp_path / "leaderboard"
    (directory / ".tmp-part-deadbeef.parquet").write_bytes(b"PAR1 half a file")
    (directory / "_tmp-part-feed.parquet").write_bytes(b"")
    table, caught = _read(results)
    assert table.num_rows == 3 and caught == []
    # next to real damage, the .tmp- file is still not named
    (directory / "notes.txt").write_text("x")
    table, caught = _read(results)
    assert table.num_rows == 3
    assert [m.split(": ", 1)[1].split(" (")[0] for m in _damaged(caught)] == ["notes.txt"]


def test_singular_and_many_files_are_summarised(tmp_path):
    leaderboard.append(tmp_path, [row(0)])
    directory = tmp_path / "leaderboard"
    (directory / "notes.txt").write_text("x")
    _, caught = _read(tmp_path)
    assert _damaged(caught)[0].startswith(f"skipped 1 unreadable file in {directory}: notes.txt (")
    for i in range(7):
        (directory / f"part-bad{i}.parquet").write_bytes(b"garbage")
    table, caught = _read(tmp_path)
    assert table.num_rows == 1
    [message] = _damaged(caught)
    assert message.startswith(f"skipped 8 unreadable files in {directory}: notes.txt, "
                              "part-bad0.parquet, part-bad1.parquet, part-bad2.parquet, "
                              "part-bad3.parquet and 3 more (")


def test_part_in_a_subdirectory_is_named_relative_to_the_leaderboard(tmp_path):
    leaderboard.append(tmp_path, [row(0)])
    sub = tmp_path / "leaderboard" / "old"
    sub.mkdir()
    (sub / "part-x.parquet").write_bytes(b"PAR1")
    table, caught = _read(tmp_path)
    assert table.num_rows == 1
    assert ": old/part-x.parquet (" in _damaged(caught)[0]


def test_part_with_a_good_footer_but_an_incompatible_column_is_skipped(tmp_path):
    """A footer that reads is not enough: a part whose column cannot be cast to the schema is
    found by reading the parts one by one."""
    _write_three(tmp_path)
    bad = pa.table({"trial_id": ["x"], "windows": ["not a number"], "phase": ["search"]})
    pq.write_table(bad, tmp_path / "leaderboard" / "part-wrongtype.parquet")
    table, caught = _read(tmp_path)
    assert sorted(table.column("trial_id").to_pylist()) == ["run-a-0", "run-a-1", "run-a-2"]
    [message] = _damaged(caught)
    assert ": part-wrongtype.parquet (" in message


@pytest.mark.parametrize("when", ["before its footer is read", "after its footer is read"])
def test_part_moved_away_while_reading_is_neither_read_nor_named(tmp_path, monkeypatch, when):
    """Another process moves a good part aside while the slow path runs: no crash, and only the
    really damaged file is named."""
    parts = _write_three(tmp_path)
    directory = tmp_path / "leaderboard"
    (directory / "notes.txt").write_text("x")  # sends read down the slow path
    moving, aside = parts[1], tmp_path / "elsewhere"
    aside.mkdir()

    def move_away() -> None:
        if moving.exists():
            os.replace(moving, aside / moving.name)

    if when == "before its footer is read":  # listed, then gone when its footer is opened
        real_metadata = pq.read_metadata

        def read_metadata(source, *args, **kwargs):
            move_away()
            return real_metadata(source, *args, **kwargs)

        monkeypatch.setattr(pq, "read_metadata", read_metadata)
    else:  # its footer checked, then gone when the good parts are read
        real_dataset = leaderboard._dataset

        def dataset(source, filesystem):
            if isinstance(source, list) and len(source) > 1:
                move_away()
            return real_dataset(source, filesystem)

        monkeypatch.setattr(leaderboard, "_dataset", dataset)
    table, caught = _read(tmp_path)
    monkeypatch.undo()
    assert not moving.exists() and (aside / moving.name).exists()
    assert sorted(table.column("trial_id").to_pylist()) == ["run-a-0", "run-a-2"]
    [message] = _damaged(caught)
    assert ": notes.txt (" in message and moving.name not in message


@pytest.mark.parametrize("command", ["leaderboard", "best"])
def test_read_commands_show_the_good_rows_and_one_warning_line(tmp_path, command):
    """What a user sees: exit 0, the good rows, and one line on stderr naming what was
    skipped and where to move it (no Python warning header, no traceback)."""
    import subprocess
    import sys
    results = tmp_path / "results"
    parts = _write_three(results)
    _damage(results / "leaderboard", parts[0])
    proc = subprocess.run([sys.executable, "-m", "tuner", command, "--workload",
                           row(0)["workload"], "--results", str(results), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning: skipped 3 unreadable files"), lines
    assert "notes.txt" in lines[0] and "damaged" in lines[0]
    assert "Traceback" not in proc.stderr and "UserWarning" not in proc.stderr
    assert proc.stdout.strip()
