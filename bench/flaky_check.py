"""Benchmark: do the timing-dependent tests pass every time on a loaded machine?

Runs the tests marked ``timing`` (``tests/timing.py``) ``--runs`` times, each run beside a
second pytest process that loads the machine (by default the rest of the suite, restarted
whenever it ends), and prints per test how many runs it passed, with the load average seen.
Exit code 0 when every test passed every run, 1 otherwise.

Usage:
  python bench/flaky_check.py                       # 20 runs of `pytest -m timing`
  python bench/flaky_check.py --runs 5 -k harness   # a subset
  python bench/flaky_check.py --beside none         # no load beside (a quiet baseline)
Options: --runs N (20), -k EXPR (narrows the timing tests), --beside CMD|none (the load; default
the non-timing, non-GPU tests), --out FILE.md (the table, also printed).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BESIDE = f"{sys.executable} -m pytest -q -p no:cacheprovider -m 'not timing and not gpu'"


def _outcomes(junit: Path) -> dict[str, tuple[bool, float, str]]:
    """test id -> (passed, seconds, the failure's first line) from one pytest junit-xml file
    (skips count as passed)."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname', '').rpartition('.')[2]}.py::{case.get('name')}"
        failures = [child for child in case if child.tag in ("failure", "error")]
        message = (failures[0].get("message") or "").splitlines()[0][:200] if failures else ""
        out[test] = (not failures, float(case.get("time", 0.0)), message)
    return out


class Beside:
    """The load: ``cmd`` in its own process group, started again whenever it ends."""

    def __init__(self, cmd: str | None):
        self.cmd, self.proc, self.starts = cmd, None, 0

    def keep_running(self) -> None:
        if self.cmd and (self.proc is None or self.proc.poll() is not None):
            env = {**os.environ, "TUNER_CACHE": tempfile.mkdtemp(prefix="flaky-beside-")}
            self.proc = subprocess.Popen(shlex.split(self.cmd), cwd=ROOT, start_new_session=True,
                                         env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            self.starts += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)    # the group this script started
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            # A suite whose test runs tuner in-process takes SIGTERM as that run's Ctrl-C and
            # goes on with its next test: what is left of the group gets SIGKILL.
            deadline = time.monotonic() + 30
            while _group_alive(self.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            if _group_alive(self.proc.pid):
                os.killpg(self.proc.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("-k", dest="keyword", default=None)
    parser.add_argument("--beside", default=DEFAULT_BESIDE)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    beside = Beside(None if args.beside == "none" else args.beside)
    # SIGTERM ends this script through the ``finally`` below, as Ctrl-C does: the second suite
    # and the timing run in progress (each its own process group) are stopped with it.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    results: dict[str, list[tuple[bool, float, str]]] = {}
    loads = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(1, args.runs + 1):
                beside.keep_running()
                junit = Path(tmp) / f"run-{run}.xml"
                cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "-o", "addopts=", "-m", "timing", f"--junitxml={junit}"]  # one process
                if args.keyword:
                    cmd += ["-k", args.keyword]
                started = time.perf_counter()
                timing = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                          start_new_session=True)
                try:
                    timing.wait()
                finally:
                    if timing.poll() is None:
                        os.killpg(timing.pid, signal.SIGKILL)   # the group this script started
                        timing.wait()
                loads.append(os.getloadavg()[0])
                for test, outcome in _outcomes(junit).items():
                    results.setdefault(test, []).append(outcome)
                failed = [f"{t} ({o[-1][2]})" for t, o in results.items() if not o[-1][0]]
                print(f"run {run}/{args.runs}: {time.perf_counter() - started:.0f} s, "
                      f"load {loads[-1]:.1f}, failed: {', '.join(failed) or 'none'}", flush=True)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C or SIGTERM: the table of the runs done
        print(f"stopped after {len(loads)} of {args.runs} runs", flush=True)
    finally:
        beside.stop()
    if not loads:
        return 1
    lines = [f"{len(loads)} runs of `pytest -m timing`"
             f"{f' -k {args.keyword}' if args.keyword else ''} beside "
             f"{'nothing' if beside.cmd is None else repr(beside.cmd)} "
             f"(started {beside.starts} times); load average (1 min) "
             f"{min(loads):.1f}-{max(loads):.1f}, median {statistics.median(loads):.1f}", "",
             "| test | passed | median s |", "| --- | --- | --- |"]
    for test, outcomes in sorted(results.items()):
        passed = sum(ok for ok, _, _ in outcomes)
        lines.append(f"| {test} | {passed}/{len(outcomes)} | "
                     f"{statistics.median(s for _, s, _ in outcomes):.1f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if all(all(ok for ok, _, _ in o) and len(o) == args.runs
                    for o in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
