"""Bad input, as a user types it: ``python -m tuner <argv>``, one table row per mistake. Every
row: the exit code, one line on stderr naming the bad value, no traceback, and an existing
results directory (one valid leaderboard row) byte-for-byte unchanged afterwards.

Every row fails while the run is being planned, before Ray starts (a row that started Ray would
write ``<results>/ray`` and fail the unchanged-results check). The ``SUBPROCESS_ROWS``, one of
each way a mistake reaches the user, run as real processes, concurrently (they are
import-bound: ~6 s of imports for ``run``, 0.2-3 s for the other commands and for flags click
rejects); the others go through the same click entry point in this process after them
(``_invoke_row``: no interpreter start and no imports per row).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT
from tests.test_leaderboard import row as leaderboard_row
from tuner import leaderboard
from tuner.errors import TunerError

CHEAP = "cheapwl:workload"
"""A workload written into the fixture directory (``CHEAP_WORKLOAD``) that imports nothing
beyond tuner and torch: the built-ins and tests.fake_workloads import torchvision (2 s a row)."""

RUN = ["run", "--workload", CHEAP, "--device", "cpu"]

LONG_NAME = "r" * 300

LB = ["leaderboard", "--results", "{results}", "--workload"]
"""A read command resolves a workload import path with the same code as ``run`` (and in a
third of its time: it does not import Ray Tune), so the workload's variants go through it."""

# (id, argv, exit code, fragment of the one stderr line[, stderr lines when not 1: why]).
# In argv and fragment, {tmp} is the directory of the fixture files (also the cwd and on
# PYTHONPATH) and {results} a results directory holding one leaderboard row.
ROWS = [
    # --- the workload: a name, an import path, or a file path (tuner/workload.py)
    ("unknown-workload", ["run", "--workload", "nosuch", "--device", "cpu",
                          "--results", "{results}"], 2, "unknown workload 'nosuch'; known: "),
    ("module-raises-at-import", ["run", "--workload", "badmods.boom:workload", "--device",
                                 "cpu", "--results", "{results}"],
     2, "importing it raised ZeroDivisionError: division by zero at {tmp}/badmods/boom.py:3"),
    ("module-syntax-error", ["run", "--workload", "badmods.syn:workload", "--device", "cpu",
                             "--results", "{results}"],
     2, "importing it raised SyntaxError: invalid syntax at {tmp}/badmods/syn.py:2"),
    ("file-raises-at-import", ["run", "--workload", "{tmp}/badmods/boom.py:workload",
                               "--device", "cpu", "--results", "{results}"],
     2, "importing it raised ZeroDivisionError: division by zero at {tmp}/badmods/boom.py:3"),
    ("import-path-missing-module", [*LB, "nosuchmod:workload"],
     2, "cannot import module 'nosuchmod'"),
    ("import-path-missing-attribute", [*LB, "cheapwl:nope"],
     2, "module 'cheapwl' has no attribute 'nope'"),
    ("module-missing-dependency", [*LB, "badmods.dep:workload"],
     2, "cannot import module 'badmods.dep' (No module named 'nosuchdep_h5') at "
        "{tmp}/badmods/dep.py:2"),
    ("package-init-raises", [*LB, "badpkg.mod:workload"],
     2, "importing it raised RuntimeError: broken package at {tmp}/badpkg/__init__.py:1"),
    ("module-helper-raises", [*LB, "badmods.deep:workload"],
     2, "importing it raised KeyError: 'k' at {tmp}/badmods/deep.py:2"),
    ("module-exits-at-import", [*LB, "badmods.script:workload"],
     2, "importing it called sys.exit(2) at {tmp}/badmods/script.py:4",
     # argparse prints its usage and its own error line before exiting; tuner's is the third.
     3),
    ("not-a-workload", [*LB, "badmods.ok:value"],
     2, "workload 'badmods.ok:value' is a int, not a tuner.workload.Workload"),
    ("relative-file-syntax-error", [*LB, "badmods/syn.py:workload"],
     2, "SyntaxError: invalid syntax at {tmp}/badmods/syn.py:2"),
    ("file-missing", [*LB, "nosuch.py:workload"], 2, "no such file nosuch.py"),
    ("file-missing-attribute", [*LB, "badmods/ok.py:nope"],
     2, "module 'ok' has no attribute 'nope'"),
    ("file-without-attribute", ["validate", "--workload", "badmods/boom.py",
                                "--results", "{results}"],
     2, "a file needs the object's name after it, e.g. 'badmods/boom.py:workload'"),
    ("file-name-not-identifier", [*LB, "my-workload.py:workload"],
     2, "rename the file, e.g. to my_workload.py"),
    ("file-name-taken", [*LB, "clash/yaml.py:workload"],
     2, "the module name 'yaml' of {tmp}/clash/yaml.py is already taken by "),
    # --- the search space (tuner/space.py)
    ("space-binary", [*RUN, "--space", "binary.yaml", "--results", "{results}"],
     2, "search space binary.yaml: a binary file, not YAML text (byte 0x89 at offset 0"),
    ("space-malformed", [*RUN, "--space", "malformed.yaml", "--results", "{results}"],
     2, "search space malformed.yaml: malformed YAML at line 3, column 1: expected ',' or '}'"),
    ("space-unknown-knob", [*RUN, "--space", "typo.yaml", "--results", "{results}"],
     2, "unknown knob 'num_worker' under 'knobs:'; did you mean 'num_workers'?"),
    ("space-low-above-high", [*RUN, "--space", "impossible.yaml", "--results", "{results}"],
     2, "knob batch_size: impossible range low=64 > high=8"),
    # --- the results location (tuner/leaderboard.py check_results)
    ("results-parent-is-a-file", [*RUN, "--results", "{tmp}/afile/results"],
     2, "(Not a directory: {tmp}/afile is a file, not a directory)"),
    ("results-name-too-long", [*RUN, "--results", "{tmp}/" + LONG_NAME],
     2, "(File name too long: the name rrrrrrrrrrrrrrrrrrrrrrrr…rrrrrrrr is 300 bytes"),
    ("results-not-writable", [*RUN, "--results", "/sys/tuner-results"],
     2, "(Permission denied: cannot create a file in /sys)"),
    ("results-is-a-file", [*RUN, "--results", "afile"], 2, "Directory 'afile' is a file"),
    ("results-bad-uri", [*RUN, "--results", "nosuchfs://x"],
     2, "results nosuchfs://x: pyarrow cannot open this URI"),
    # --- data, limits, flags (already handled in tuner/plan.py, tuner/settings.py, click)
    ("data-missing", [*RUN, "--data", "nosuch-data", "--results", "{results}"],
     2, "--data nosuch-data: no such directory"),
    ("data-empty", [*RUN, "--data", "emptydir", "--results", "{results}"],
     2, "--data emptydir: the directory is empty"),
    ("max-memory-text", [*RUN, "--max-memory", "lots", "--results", "{results}"],
     2, "--max-memory: memory limit 'lots': give a fraction"),
    ("max-host-memory-above-ram", [*RUN, "--max-host-memory", "99999TB", "--results",
                                   "{results}"],
     2, "--max-host-memory 99999TB: more than this machine's RAM, "),
    ("remeasure-without-warm-start", [*RUN, "--remeasure", "--results", "{results}"],
     2, "--remeasure does nothing without --warm-start"),
    ("device-tpu", ["run", "--workload", CHEAP, "--device", "tpu", "--results", "{results}"],
     2, "Invalid value for '--device': 'tpu' is not one of"),
    ("sampler-bogus", [*RUN, "--sampler", "bogus", "--results", "{results}"],
     2, "Invalid value for '--sampler': 'bogus' is not one of 'gp', 'tpe', 'random'"),
    ("trials-0", [*RUN, "--trials", "0", "--results", "{results}"],
     2, "Invalid value for '--trials': 0 is not in the range x>=1"),
    ("objective-bogus", [*RUN, "--objective", "fast", "--results", "{results}"],
     2, "Invalid value for '--objective': 'fast'"),
    # --- read commands
    ("best-no-rows", ["best", "--workload", "ddpm", "--results", "{results}"],
     2, "no leaderboard rows for workload 'ddpm'"),
    ("leaderboard-no-rows", ["leaderboard", "--workload", "ddpm", "--results", "{results}"],
     2, "no leaderboard rows for workload 'ddpm'"),
    ("leaderboard-format", ["leaderboard", "--workload", "fake-regression", "--format", "xml",
                            "--results", "{results}"],
     2, "Invalid value for '--format': 'xml'"),
    ("profile-data-undecodable", ["profile", "--workload", "ddpm", "--device", "cpu", "--data",
                                  "images", "--results", "{results}"],
     2, "error: image {tmp}/images/Abnormal/bad.png cannot be decoded: cannot identify image"),
    ("validate-data-undecodable", ["validate", "--workload", "datawl:workload", "--data",
                                   "baddata", "--results", "{results}"],
     2, "error: sample {tmp}/baddata/0.txt cannot be decoded: not a number"),
    ("report-out-under-a-file", ["report", "--workload", "fake-regression", "--results",
                                 "{results}", "--out", "afile/report"],
     2, "--out afile/report: cannot write the report there (afile is a file, not a "
        "directory)"),
    ("report-out-not-writable", ["report", "--workload", "fake-regression", "--results",
                                 "{results}", "--out", "/sys/tuner-report"],
     2, "--out /sys/tuner-report: cannot write the report there ("),
    ("profile-knobs-bad-json", ["profile", "--workload", CHEAP, "--device", "cpu", "--knobs",
                                "{bad", "--results", "{results}"],
     2, "--knobs '{bad': Expecting property name"),
    # --- check-cluster (tuner/cluster.py)
    ("cluster-missing", ["check-cluster", "nosuch-cluster.yaml"],
     2, "nosuch-cluster.yaml: no such file (expected a Ray cluster YAML file)"),
    ("cluster-binary", ["check-cluster", "binary.yaml"],
     2, "binary.yaml: a binary file (byte 0x89 at offset 0 is not UTF-8)"),
    ("cluster-malformed", ["check-cluster", "cluster-malformed.yaml"],
     2, "cluster-malformed.yaml: line 4, column 1: malformed YAML"),
    ("cluster-typo", ["check-cluster", "cluster-typo.yaml"],
     2, "cluster-typo.yaml: max_worker: unknown key; did you mean 'max_workers'?"),
]

def _sys_refuses_files() -> bool:
    """/sys is read-only even for root (the results-not-writable row needs that)."""
    import tempfile
    try:
        fd, probe = tempfile.mkstemp(dir="/sys")
    except OSError:
        return os.path.isdir("/sys")
    os.close(fd)
    os.unlink(probe)
    return False


NEEDS_READ_ONLY_SYS = {"results-not-writable", "report-out-not-writable"}

IDS = [r[0] for r in ROWS]
assert len(IDS) == len(set(IDS))
BY_ID = {r[0]: r for r in ROWS}


WORKLOAD_CLASS = '''
from pathlib import Path
from torch import nn
from tuner.knobs import Knobs
from tuner.workload import Workload


class {cls}(Workload):
    name = "{name}"
    description = "a workload written by tests/test_bad_inputs.py"
    source = "tests/test_bad_inputs.py"
    references = {{"baseline": Knobs(batch_size=4)}}
    space = "ddpm"

    def build_model(self, scale):
        return nn.Linear(2, 1)

    def build_dataset(self, data_dir, scale):
        return [0]

    def prepare_default_data(self, cache_dir, scale):
        return Path(cache_dir)

    def training_step(self, model, batch):
        raise NotImplementedError

    def sample_shape(self, scale):
        return {{"x": [2]}}


workload = {cls}()
'''

CHEAP_WORKLOAD = WORKLOAD_CLASS.format(cls="CheapWorkload", name="cheap")

DATA_WORKLOAD = '''
from pathlib import Path
from cheapwl import CheapWorkload
from tuner.errors import DataError


class Numbers:
    """One number per .txt file; a file that holds no number fails to decode."""

    def __init__(self, data_dir):
        self.files = sorted(Path(data_dir).glob("*.txt"))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        text = self.files[i].read_text().strip()
        if not text.isdigit():
            raise DataError(f"sample {self.files[i]} cannot be decoded: not a number")
        return int(text)


class DataWorkload(CheapWorkload):
    name = "fake-regression"  # the workload of the results fixture's leaderboard row

    def build_dataset(self, data_dir, scale):
        return Numbers(data_dir)


workload = DataWorkload()
'''
"""A cheap workload reading files, named as the fixture's row so that ``validate`` finds it."""

FILES: dict[str, bytes | str] = {
    "cheapwl.py": CHEAP_WORKLOAD,
    "badmods/__init__.py": "",
    "badmods/boom.py": "x = 1\ny = 2\nz = 1 / 0\n",
    "badmods/syn.py": "x = 1\ny = = 2\n",
    "badmods/dep.py": "x = 1\nimport nosuchdep_h5\n",
    "badmods/deep.py": "def helper():\n    return {}['k']\n\n\nhelper()\n",
    "badmods/script.py": ("import argparse\nparser = argparse.ArgumentParser()\n"
                          "parser.add_argument('--lr', required=True)\n"
                          "args = parser.parse_args()\n"),
    "badmods/ok.py": "value = 1\n",
    "badpkg/__init__.py": "raise RuntimeError('broken package')\n",
    "badpkg/mod.py": "workload = None\n",
    "my-workload.py": "workload = None\n",
    "clash/yaml.py": "workload = None\n",
    "afile": "not a directory\n",
    "datawl.py": DATA_WORKLOAD,
    "baddata/0.txt": "not a number\n",
    "images/Abnormal/bad.png": b"\x89PNG\r\n\x1a\n this is not an image",
    "binary.yaml": b"\x89PNG\r\n\x1a\n\x00\xff",
    "malformed.yaml": "knobs:\n  batch_size: {low: 4, high: 64\n",
    "typo.yaml": "knobs:\n  batch_size: 8\n  num_worker: 2\n",
    "topkey.yaml": "knob:\n  batch_size: 8\n",
    "impossible.yaml": "knobs:\n  batch_size: {low: 64, high: 8}\n",
    "emptydir/": "",
    "cluster-malformed.yaml": "cluster_name: x\nmax_workers: 2\nprovider: {type: aws, region: "
                              "us-west-2\n",
    "cluster-typo.yaml": "cluster_name: x\nmax_worker: 2\nprovider: {type: aws, region: "
                         "us-west-2}\n",
}


def _write_files(root: Path) -> None:
    for name, content in FILES.items():
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path (directories included as '')."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "" for p in sorted(root.rglob("*"))}


def _fill(text: str, tmp: Path, results: Path) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{results}", str(results))


def _run_row(row_id: str, tmp: Path, results: Path, env: dict) -> dict:
    argv = [_fill(a, tmp, results) for a in BY_ID[row_id][1]]
    before = _snapshot(results)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tuner", *argv], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=300)
    return {"proc": proc, "seconds": time.perf_counter() - started, "before": before,
            "after": _snapshot(results), "exception": None}


SUBPROCESS_ROWS = ("unknown-workload", "module-helper-raises", "module-exits-at-import",
                   "device-tpu", "cluster-typo")
"""Rows run as real processes, what a user's shell sees: a TunerError while planning a run, an
exception raised deep in the user's own module (no traceback of it reaches the terminal), a
module that exits at import after writing to the process's stderr itself (argparse: two lines
before tuner's), a flag click rejects, and a command that imports neither torch nor Ray. (An
image decoder that writes to fd 2 by itself: tests/test_cli.py's corrupt-png process.)"""

PYTHON_DEFAULT_WARNING_FILTERS = [
    ("default", None, DeprecationWarning, "__main__", 0),
    ("ignore", None, DeprecationWarning, None, 0),
    ("ignore", None, PendingDeprecationWarning, None, 0),
    ("ignore", None, ImportWarning, None, 0),
    ("ignore", None, ResourceWarning, None, 0),
]
"""``warnings.filters`` of a fresh ``python`` (no -W): what a user's process prints."""


def _under(module, root: str) -> bool:
    """Whether ``module`` (a package: any of its directories) was imported from under ``root``."""
    spec = module.__dict__.get("__spec__")
    places = [getattr(spec, "origin", None), *(getattr(spec, "submodule_search_locations", None)
                                               or [])]
    return any(isinstance(place, str) and place.startswith(root) for place in places)


def _invoke_row(row_id: str, tmp: Path, results: Path, cache: Path) -> dict:
    """A row through ``tuner.cli.main`` in this process, as ``_run_row`` runs it: cwd ``tmp``,
    ``tmp`` importable, Python's default warning filters. A warning the process would print is
    one more stderr line here too (its text, as Python prints it). The fixture's modules (some
    raise at import) are forgotten afterwards, so every row imports them afresh, and sys.path
    is restored (a file path workload puts its directory on it)."""
    from click.testing import CliRunner

    from tuner.cli import main
    argv = [_fill(a, tmp, results) for a in BY_ID[row_id][1]]
    before = _snapshot(results)
    started = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as caught:
        mp.chdir(tmp)
        mp.setattr(sys, "path", [str(REPO_ROOT), str(tmp), *sys.path])
        warnings.resetwarnings()
        for action, _, category, module, _ in reversed(PYTHON_DEFAULT_WARNING_FILTERS):
            warnings.filterwarnings(action, category=category, module=module or "")
        result = CliRunner(env={"TUNER_CACHE": str(cache), "CUDA_VISIBLE_DEVICES": "",
                                "COLUMNS": "200"}).invoke(main, argv)
    seconds = time.perf_counter() - started
    for name, module in list(sys.modules.items()):
        if isinstance(module, ModuleType) and _under(module, str(tmp)):
            del sys.modules[name]
    importlib.invalidate_caches()
    printed = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                      for w in caught)
    proc = subprocess.CompletedProcess(["tuner", *argv], result.exit_code, result.stdout,
                                       result.stderr + printed)
    return {"proc": proc, "seconds": seconds, "before": before, "after": _snapshot(results),
            "exception": result.exception}


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, dict]:
    """Runs the selected rows: the SUBPROCESS_ROWS two at a time, then the others in this
    process. Row id -> process (or its in-process equivalent), duration, results snapshots,
    the exception the in-process run ended with."""
    tmp = tmp_path_factory.mktemp("bad-inputs")
    _write_files(tmp)
    env = {**os.environ, "TUNER_CACHE": str(tmp_path_factory.mktemp("cache")),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(tmp)]),
           "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "200"}
    selected = [item.callspec.params["row_id"] for item in request.session.items
                if item.originalname == "test_bad_input" and hasattr(item, "callspec")]
    if not _sys_refuses_files():
        selected = [row_id for row_id in selected if row_id not in NEEDS_READ_ONLY_SYS]
    rows: dict[str, Path] = {}
    for row_id in selected:
        results = tmp_path_factory.mktemp(f"results-{row_id}")
        leaderboard.append(results, [leaderboard_row(0)])
        rows[row_id] = results
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {row_id: pool.submit(_run_row, row_id, tmp, results, env)
                   for row_id, results in rows.items() if row_id in SUBPROCESS_ROWS}
        out = {row_id: f.result() for row_id, f in futures.items()}
    # after the processes, so that this process's imports do not slow them
    out.update({row_id: _invoke_row(row_id, tmp, results, Path(env["TUNER_CACHE"]))
                for row_id, results in rows.items() if row_id not in SUBPROCESS_ROWS})
    for o in out.values():
        o["tmp"] = tmp
    return out


@pytest.mark.parametrize("row_id", IDS)
def test_bad_input(row_id, outcomes):
    _, _, code, fragment, *lines = BY_ID[row_id]
    lines_expected = lines[0] if lines else 1
    if row_id not in outcomes:
        pytest.skip("/sys accepts new files here: no read-only directory to point at")
    o = outcomes[row_id]
    proc = o["proc"]
    stderr = proc.stderr
    assert proc.returncode == code, (proc.stdout[-2000:], stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    # in this process: an exception other than click's exit would have been a traceback
    assert o["exception"] is None or isinstance(o["exception"], SystemExit), o["exception"]
    fragment = fragment.replace("{tmp}", str(o["tmp"]))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == lines_expected, stderr
    assert lines[-1].startswith("error: "), lines
    assert fragment in lines[-1], lines[-1]
    assert any(name.startswith("leaderboard/part-") for name in o["before"])
    # nothing written: a row that had started Ray would have written <results>/ray (its run
    # state); how long a row takes is the machine's load (37 s at load 8), not a fact of it
    assert o["after"] == o["before"], "the existing results directory changed"


# ------------------------------------------------------------------ check_results in process

def test_check_results_reports_a_directory_it_cannot_write(tmp_path, monkeypatch):
    """Root writes through permission bits, so read-only is simulated where the probe
    creates its file."""
    import errno
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(TunerError, match=rf"--results {tmp_path}/new: .*\(Read-only file "
                                         rf"system: cannot create a file in {tmp_path}\)"):
        leaderboard.check_results(tmp_path / "new")


def test_check_results_names_the_file_in_the_way(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(TunerError, match=rf"Not a directory: {tmp_path}/f is a file"):
        leaderboard.check_results(str(tmp_path / "f" / "a" / "b"))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "leaderboard").write_text("x")
    with pytest.raises(TunerError, match=rf"{tmp_path}/r/leaderboard is a file"):
        leaderboard.check_results(str(tmp_path / "r"))
    with pytest.raises(TunerError, match="Not a directory: /proc/version is a file"):
        leaderboard.check_results("/proc/version/x")


def test_check_results_accepts_new_and_existing_directories_and_leaves_them_alone(tmp_path):
    leaderboard.check_results(str(tmp_path / "a" / "b"))
    assert not (tmp_path / "a").exists()
    leaderboard.append(tmp_path / "r", [leaderboard_row(0)])
    before = _snapshot(tmp_path)
    leaderboard.check_results(str(tmp_path / "r"))
    leaderboard.check_results(tmp_path / "r")
    assert _snapshot(tmp_path) == before


def test_check_results_rejects_a_path_too_long_for_the_filesystem(tmp_path):
    deep = tmp_path.joinpath(*["d" * 200] * 25)
    with pytest.raises(TunerError, match="File name too long: the path is"):
        leaderboard.check_results(deep)


# --------------------------------------------------------------- a workload given as a file

WORKLOAD_FILE = WORKLOAD_CLASS.format(cls="FileWorkload", name="from-a-file")


def test_a_file_path_workload_is_imported_by_its_stem_from_its_directory(tmp_path, monkeypatch):
    """``path/to/mod.py:attr`` puts the directory on sys.path (which ray_init hands to the
    workers as PYTHONPATH) and imports ``mod``, so a pickled workload resolves in a worker."""
    from tuner.workload import Workload
    from tuner.workload_loader import resolve
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "filewl_h5", raising=False)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "filewl_h5.py").write_text(WORKLOAD_FILE)
    monkeypatch.chdir(tmp_path)
    try:
        w = resolve("elsewhere/filewl_h5.py:workload")
        assert isinstance(w, Workload) and w.name == "from-a-file"
        assert str(tmp_path / "elsewhere") in sys.path
        assert type(w).__module__ == "filewl_h5"
        assert resolve(f"{tmp_path}/elsewhere/filewl_h5.py:workload") is w
    finally:
        sys.modules.pop("filewl_h5", None)


# ------------------------------------------------------------------ space messages in process

@pytest.mark.parametrize("text, expected", [
    ("knob:\n  batch_size: 8\n", "unknown key(s) knob; did you mean 'knobs'? accepted: "),
    ("knobs:\n  batch_size: {low: 4, hihg: 8}\n",
     "unknown key 'hihg' in a range; did you mean 'high'?"),
    ("knobs:\n  batch_size: 8\n  amp: bf16\n  ampp: fp16\n", "did you mean 'amp'?"),
    ("knobs:\n  batch_size: 8\n  a: b: c\n", "malformed YAML at line 3, column 7: mapping values"),
    ("knobs:\n\tbatch_size: 4\n", "malformed YAML at line 2, column 1: found character '\\t'"),
    ("knobs:\n  batch_size: 8\x00\n", "line 2, column 16: character 0x0000 is not allowed"),
    ("knobs:\n  batch_size: {choices: [8], 1: 2, x: 3}\n", "cannot be combined with [1, 'x']"),
])
def test_space_messages_point_at_the_mistake(text, expected):
    from tuner.errors import SpaceError
    from tuner.space import parse_space
    with pytest.raises(SpaceError) as info:
        parse_space(text, "s.yaml")
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_space_file_in_another_encoding(tmp_path):
    from tuner.errors import SpaceError
    from tuner.space import load_space
    (tmp_path / "latin1.yaml").write_bytes("# caf\xe9\nknobs:\n  batch_size: 8\n".encode("latin-1"))
    with pytest.raises(SpaceError, match=r"not UTF-8 text \(byte 0xe9 at offset 5, line 1"):
        load_space(tmp_path / "latin1.yaml", is_file=True)
    (tmp_path / "utf16.yaml").write_bytes("knobs:\n  batch_size: 8\n".encode("utf-16"))
    assert load_space(tmp_path / "utf16.yaml", is_file=True).constants == {"batch_size": 8}


def test_a_read_command_names_an_unknown_workload_not_no_rows(tmp_path):
    """`leaderboard --workload nosuch` said "no rows"; a workload with neither rows nor a
    definition is unknown, and the line lists what there is."""
    import pytest as _pytest

    from tests.test_leaderboard import row
    from tuner import leaderboard
    from tuner.errors import TunerError
    leaderboard.append(tmp_path, [row(0)])
    with _pytest.raises(TunerError, match=r"unknown workload 'nosuch'.*workloads with rows here: "
                                          + row(0)["workload"] + r".*built-ins: .*ddpm"):
        leaderboard.select(tmp_path, "nosuch")
    with _pytest.raises(TunerError, match="no leaderboard rows for workload 'ddpm'"):
        leaderboard.select(tmp_path, "ddpm")                # known, just not run here
