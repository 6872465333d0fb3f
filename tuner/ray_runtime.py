"""Ray in the driver: start or connect, the resources a trial asks for, and facts about the
cluster (its device, CPUs per node, accelerator types, the hardware key of its workers)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import subprocess
import sys
import time
from typing import Iterator

from tuner.errors import RayNodeWarning, TunerError
from tuner.settings import DEVICES, trial_cpus

# Quiet Ray: our own progress lines replace its tables. With verbose=0 Ray's new output
# engine still prints its configuration table and every trial error; these settings and
# log_to_driver=False bring one OK and one failed trial from 56 console lines to 2.
_RAY_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
            "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1", "RAY_DEDUP_LOGS": "0",
            "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1000",
            # Ctrl-C raises KeyboardInterrupt in the driver (RunInterrupted): finished trials
            # are already in the leaderboard and --resume continues from them.
            "TUNE_DISABLE_SIGINT_HANDLER": "1"}


class TrialResources:
    """Per-trial resource request (picklable; Ray Tune may checkpoint it): CPUs =
    num_workers + 1 capped at ``max_cpus`` (``settings.trial_cpus``), or with ``whole_node``
    ``max_cpus`` for every trial; ``gpus_per_trial`` GPUs; and a sliver of
    ``accelerator_type:<T>`` to pin the trial to nodes of that type (Ray gives each GPU node
    the resource ``accelerator_type:<T>`` = 1).

    ``whole_node`` is for trials that run one at a time on one node: every trial asks for the
    same resources, so Ray Tune reuses one trial process for all of them; a request that
    followed ``num_workers`` would start a new process at each change of shape (5.7-6.1 s on a
    2-core machine). Such a trial has the node to itself: its training
    process runs on every CPU its DataLoader workers leave (``tuner.trial.harness.run_tune_trial``,
    ``training_threads``)."""

    def __init__(self, gpus_per_trial: int, max_cpus: int, accelerator_type: str | None = None,
                 whole_node: bool = False):
        self.gpus_per_trial = gpus_per_trial
        self.max_cpus = max_cpus
        self.accelerator_type = accelerator_type
        self.whole_node = whole_node

    def __call__(self, config: dict) -> dict:
        cpus = (self.max_cpus if self.whole_node
                else trial_cpus(int(config.get("num_workers", 0)), self.max_cpus))
        request = {"cpu": cpus, "gpu": self.gpus_per_trial}
        if self.accelerator_type is not None:
            request[f"accelerator_type:{self.accelerator_type}"] = 0.001
        return request


NODE_LOSS_TEXTS = ("rpc_code: 14", "Socket closed", "NodeDiedError", "has been marked dead",
                   "ActorUnavailableError", "is unavailable", "node died", "Node died")
"""What Ray says when the process at the other end went away with its node."""


NODE_DEATH_WAIT_S = 60.0
"""How long a failure that reads as a lost node (``NODE_LOSS_TEXTS``) waits for Ray to mark a
node dead: Ray's GCS declares a node dead only after missing its heartbeats for a while."""


def dead_nodes(known_dead: frozenset[str] = frozenset()) -> dict[str, str | None]:
    """Id -> address of the connected cluster's nodes that Ray has marked dead, less
    ``known_dead``."""
    import ray
    return {n["NodeID"]: n.get("NodeManagerAddress") for n in ray.nodes()
            if not n.get("Alive") and n["NodeID"] not in known_dead}


ACTOR_DEATH_TEXTS = ("ActorDiedError", "died unexpectedly", "worker process has died",
                     "A worker health check failed")
"""What Ray says when a process it ran died: a crash, or the first sign of its node's loss."""


def node_lost_error(error_text: str | None, node_id: str | None = None, *,
                    known_dead: frozenset[str] = frozenset(), wait_s: float = 0.0,
                    death_may_be_loss: bool = False) -> str | None:
    """The error of a ``node_lost`` row ('lost with Ray node <id> (<address>), which went
    away mid-trial'), or None when the failure was no node's loss. The node is the trial's
    (``node_id``, from its last report) when it is dead; else a dead node named in Ray's
    error text; else, for one of Ray's lost-connection errors (``NODE_LOSS_TEXTS``), a dead
    node of the cluster. Nodes in ``known_dead`` (dead before the run) do not count. A
    lost-connection error with no such node dead yet waits up to ``wait_s`` for Ray to mark
    one dead; with ``death_may_be_loss``, so does a process's death (``ACTOR_DEATH_TEXTS``)
    naming a node (a crash on a live node then waits it all). Call with Ray initialised."""
    import re

    text = error_text or ""
    candidates = [n for n in [node_id, *re.findall(r"[0-9a-f]{56}", text)] if n]
    looks_lost = any(pattern in text for pattern in NODE_LOSS_TEXTS) or (
        death_may_be_loss and bool(candidates)
        and any(pattern in text for pattern in ACTOR_DEATH_TEXTS))
    deadline = time.monotonic() + wait_s
    while True:
        dead = dead_nodes(known_dead)
        node = next((n for n in candidates if n in dead), None)
        if node is None and dead and any(pattern in text for pattern in NODE_LOSS_TEXTS):
            node = list(dead)[-1]
        if node is not None:
            where = f" ({dead[node]})" if dead[node] else ""
            return f"lost with Ray node {node}{where}, which went away mid-trial"
        if not looks_lost or time.monotonic() >= deadline:
            return None
        time.sleep(1.0)


@contextlib.contextmanager
def ray_messages_to(log_path: str) -> Iterator[None]:
    """For the block, the messages Ray's GCS sends the driver about its nodes (a raylet that
    died, with the last lines of its log; a node marked dead) go to ``log_path``, each
    appended with its time, and the first of them to the console as one warning
    (``RayNodeWarning``) naming the file. Ray prints them whole otherwise (20+ lines each)."""
    import warnings

    from ray._private import worker
    original = getattr(worker, "print_to_stdstream", None)
    if original is None:  # another Ray: leave its printing alone
        yield
        return
    told = []

    def print_to_stdstream(data, ignore_prefix: bool):
        if data.get("pid") != "raylet":
            return original(data, ignore_prefix)
        lines = [ln for ln in data.get("lines", []) if ln.strip()]
        try:
            os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
            with open(log_path, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} (raylet)\n")
                f.writelines(ln.rstrip("\n") + "\n" for ln in lines)
        except OSError:
            return original(data, ignore_prefix)  # no log file: the console keeps it
        if not told:
            told.append(True)
            first = lines[0].split(". ")[0].strip() if lines else "a message"
            warnings.warn(f"Ray reported: {first[:100]} (Ray's messages: {log_path})",
                          RayNodeWarning, stacklevel=2)

    worker.print_to_stdstream = print_to_stdstream
    try:
        yield
    finally:
        worker.print_to_stdstream = original


def accelerator_types() -> list[str]:
    """Accelerator types of the connected cluster's live nodes (Ray's ``accelerator_type:<T>``
    resources), sorted."""
    import ray
    types = {key.split(":", 1)[1] for node in ray.nodes() if node.get("Alive")
             for key in node["Resources"] if key.startswith("accelerator_type:")}
    return sorted(types)


def hardware_key_task(device: str) -> str:
    import torch

    from tuner.hardware import fingerprint
    return fingerprint(torch.device(device))["hardware_key"]


def hardware_key(plan) -> str:
    """Hardware key of the machines the trials run on (on a cluster: a GPU worker's)."""
    if plan.options.address is None:
        return hardware_key_task(plan.device)
    import ray
    resources = ({f"accelerator_type:{plan.accelerator_type}": 0.001}
                 if plan.accelerator_type else {})
    task = ray.remote(hardware_key_task).options(
        num_cpus=1, num_gpus=1 if plan.device == "cuda" else 0, resources=resources)
    key = ray.get(task.remote(plan.device))
    return f"{key}@{plan.accelerator_type}" if plan.accelerator_type else key


def cluster_resources(device: str) -> tuple[str, int, int]:
    """(device, GPUs, CPUs of the smallest node that runs trials) of the connected cluster."""
    import ray
    if device not in DEVICES:
        raise TunerError(f"--device {device!r}: accepted values are {', '.join(DEVICES)}")
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    gpus = int(sum(n.get("GPU", 0) for n in nodes))
    if device == "cuda" and gpus == 0:
        raise TunerError("--device cuda: the Ray cluster has no GPU resources")
    device = device if device != "auto" else ("cuda" if gpus else "cpu")
    workers = [n for n in nodes if n.get("GPU", 0) > 0] if device == "cuda" else nodes
    cpus = int(min((n.get("CPU", 1) for n in workers), default=1)) or 1
    return device, (gpus if device == "cuda" else 0), cpus


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not after Ray's minutes of retries, when nothing listens at a
    HOST:PORT or ray://HOST:PORT address ('auto' is left to Ray, which fails fast)."""
    import socket
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise TunerError(f"--address {address}: cannot reach a Ray cluster there "
                         f"({exc.strerror or exc}); check the address, or start one with "
                         "`ray start --head`") from None


CONNECT_TIMEOUT_S = 10.0
"""Seconds ``--address`` waits for a Ray cluster to answer before the run stops (Ray itself
retries a port where something else listens for over ten minutes, printing its C++ warnings).
A cluster's GCS answers in well under a second; the rest is room for a slow link."""

_AGENT_REAPER = r"""
import signal, sys, time
import psutil
driver = psutil.Process(int(sys.argv[1]))
names = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
found, deadline = [], time.monotonic() + 120
try:
    while len(found) < len(names) and time.monotonic() < deadline:
        time.sleep(0.5)
        found = [p for p in driver.children(recursive=True)
                  if p.cmdline()[:1] and p.cmdline()[0].startswith(names)]
except psutil.Error:
    pass
sys.stdin.read()
for p in found:
    try:
        p.send_signal(signal.SIGKILL)
    except psutil.Error:
        pass
"""
"""Ends the ``DashboardAgent`` and ``RuntimeEnvAgent`` processes of the local Ray a driver
started once the driver is gone, however it went (``kill -9`` included). Ray's GCS and raylet
die with the driver (the kernel's parent-death signal), but those two, finding the raylet gone,
first try to report that to the dead GCS and wait out its 60 s timeout (Ray 2.60,
``process_watcher.py``): measured, they outlived a killed driver by 62 s. The reaper finds them
among the driver's descendants (psutil checks a PID is still the process it found), then waits
for end-of-file on its stdin, a pipe only the driver writes to, and kills them: those two
processes, nothing else."""

_reaper: "subprocess.Popen[bytes] | None" = None
"""The reaper of the local Ray this process started last (None: none started)."""


def _start_reaper() -> None:
    """Start the reaper (``_AGENT_REAPER``) for the local Ray just started, ending the previous
    one (that Ray was shut down). Started with ``start_new_session``, so a terminal's Ctrl-C
    does not reach it."""
    global _reaper
    _stop_reaper()
    _reaper = subprocess.Popen([sys.executable, "-c", _AGENT_REAPER, str(os.getpid())],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)


def _stop_reaper() -> None:
    """Close the reaper's pipe: it ends Ray's two processes still alive and exits."""
    global _reaper
    if _reaper is not None:
        _reaper.stdin.close()
        _reaper = None

_GCS_PROBE = ("import sys\nfrom ray._raylet import GcsClient\nprint(flush=True)\n"
              "GcsClient(address=sys.argv[1])\n")
"""Connects Ray's own GCS client (what ``ray.init`` and ``ray health-check`` use) to the
address in argv[1]; an empty line first says Ray is imported. Exit code 0: a Ray cluster
answered."""

PROBE_IMPORT_S = 120.0
"""Seconds the probe may take to import Ray before it connects (a loaded machine)."""


def _check_ray_answers(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail within ``timeout_s`` of trying when no Ray cluster answers at a HOST:PORT address
    (an HTTP server, another service). The probe runs in a child process, killed at the
    deadline, so Ray's C++ warnings and its retries stay off the console; its clock starts
    once it has imported Ray. The address is the one ``ray.init`` connects to (Ray turns
    127.0.0.1 into this machine's outward IP).

    Raises:
        TunerError: nothing answered as a Ray cluster within ``timeout_s`` seconds."""
    import select

    from ray._private.services import canonicalize_bootstrap_address
    if address == "auto" or address.startswith("ray://"):
        return  # Ray finds 'auto' itself, and fails fast; ray:// needs the Ray Client
    target = canonicalize_bootstrap_address(address)
    env = {**os.environ, "RAY_py_gcs_connect_timeout_s": str(math.ceil(timeout_s))}
    shown = address if target == address else f"{address} (Ray connects to {target})"
    with subprocess.Popen([sys.executable, "-c", _GCS_PROBE, target], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as probe:
        try:
            select.select([probe.stdout], [], [], PROBE_IMPORT_S)
            answered = probe.wait(timeout=timeout_s) == 0
        except subprocess.TimeoutExpired:
            answered = False
        finally:
            probe.kill()  # the probe this call started; a no-op once it has exited
    if not answered:
        raise TunerError(f"--address {shown}: no Ray cluster answered there within "
                         f"{timeout_s:.0f} s (another service listens on that port?); give the "
                         "address `ray start --head` printed (host:6379 by default)")


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Ray for the block: a local instance (``address`` None) or a connection to a cluster,
    shut down at the end only when this block started it (a test's or an outer block's Ray
    is left running)."""
    started = ray_init(address)
    try:
        yield
    finally:
        if started:
            import ray
            ray.shutdown()
            _stop_reaper()


def ray_init(address: str | None) -> bool:
    """Start (or connect to) Ray. Returns True when this call started it (and must stop it)."""
    import ray
    if address is not None:  # a cluster asked for is checked even where Ray already runs here
        _check_reachable(address)
        _check_ray_answers(address)
    if ray.is_initialized():
        return False
    for key, value in _RAY_ENV.items():
        os.environ.setdefault(key, value)
    # Ray 2.60 logs a WARNING at every start that token authentication is on. The protection
    # stays on; only its notice is kept off the user's console (--verbose shows it).
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.DEBUG if os.environ.get("TUNER_VERBOSE") else logging.ERROR)
    # Workers must import the same modules as the driver (a user's workload by import path).
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    cwd = os.getcwd()
    pythonpath = os.pathsep.join(dict.fromkeys([cwd, *paths]))
    runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}}
    if address is None:
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 log_to_driver=False, logging_level=logging.WARNING, configure_logging=True,
                 runtime_env=runtime_env)
        _start_reaper()
    else:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                     runtime_env=runtime_env)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise TunerError(
                f"--address {address}: cannot connect to a Ray cluster ({exc})"
            ) from None
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    logging.getLogger("ray.train").setLevel(logging.CRITICAL)
    return True
