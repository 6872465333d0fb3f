"""A trial's result columns that its loop does not measure (``tuner.trial.harness``): the
machine and versions it ran on, its rate in the workload's other units with the FLOPs, MFU and
torch.compile's cost, and the columns of a trial that failed or that the time budget stopped.
"""

from __future__ import annotations

import re
import traceback

import torch

from tuner.hardware import fingerprint, node_id, node_ip
from tuner.knobs import Knobs
from tuner.settings import VERSION, TrialSettings
from tuner.status import Status
from tuner.trial.failures import classify
from tuner.trial.flops import precision_of, utilisation

WINDOW_REPORT_KEYS = ("window", "window_samples_per_sec", "window_settling", "windows_dropped",
                      "windows_long")
"""Keys of a window's report (early stopping reads them) that are no leaderboard column."""


def failure_columns(exc: Exception, device: torch.device) -> dict:
    """The result columns of a failed trial (call inside the ``except``): status, one-line
    error, traceback and, for oom and over_limit, which memory ran out."""
    status, memory, error = classify(exc, device)
    out = dict(status=status, error=error, traceback=traceback.format_exc(limit=20),
               samples_per_sec=0.0, time_to_train_s=None)
    if memory is not None:
        out["memory_exceeded"] = memory
    return out


def timeout_columns(sofar: dict, where: str, settings: TrialSettings) -> dict:
    """The result columns of a trial stopped by the time budget during ``where``: set-up,
    compile (``first_step_s``) and warm-up times and the windows it finished, as measured so
    far (``windows`` of ``windows_planned``: a measurement over fewer windows,
    ``tuner.status.budget_stopped``); no throughput when no window finished."""
    done = int(sofar.get("windows") or 0)
    out = {"samples_per_sec": None, "windows": 0, "time_to_train_s": None, **sofar,
           "windows_planned": settings.windows}
    out.update(status=Status.TIMEOUT, error=f"stopped by the time budget during {where}, "
               f"after {done} of {settings.windows} windows")
    for key in WINDOW_REPORT_KEYS:
        out.pop(key, None)
    return out


def compile_s(knobs: Knobs, result: dict) -> float | None:
    """torch.compile's cost, s: the first step's time beyond a steady step (``first_step_s`` -
    ``step_time_ms_p50``), where dynamo traces and Inductor compiles (``reduce-overhead`` also
    records its CUDA graphs there; cuDNN autotuning of the first shapes lands there too).
    Part of ``warmup_s``, never of the measured windows. None with compile off or before a
    step time is known."""
    first, step_ms = result.get("first_step_s"), result.get("step_time_ms_p50")
    if knobs.compile == "off" or first is None or step_ms is None:
        return None
    return max(0.0, first - step_ms / 1000)


RECOMPILE_LIMIT_BREAK = "Dynamo recompile limit exceeded"
"""The graph break torch._dynamo (torch >= 2.6) records in ``counters["unimplemented"]`` when a
frame hits ``recompile_limit`` (or ``accumulated_recompile_limit``): it runs that frame
eagerly from then on."""


def compile_columns(knobs: Knobs) -> dict:
    """``recompiles`` and ``compile_fallback`` of a trial, from torch._dynamo's records since
    ``tuner.trial.apply.reset_compile_counts`` (call before the compiler reset at the trial's
    end). ``recompiles``: compilations of a frame dynamo had compiled before, whose guards
    failed (a new input shape or dtype, a changed global), the one refused at the limit
    included (None where torch's records lack the reason). ``compile_fallback``: some frame hit
    the recompile limit and ran eagerly. Both None with compile off."""
    if knobs.compile == "off":
        return {"recompiles": None, "compile_fallback": None}
    from torch._dynamo import utils
    metrics = utils.get_compilation_metrics()
    recompiles = (sum(m.recompile_reason is not None for m in metrics)
                  if all(hasattr(m, "recompile_reason") for m in metrics) else None)
    return {"recompiles": recompiles, "compile_fallback": _limit_hit() is not None}


def _limit_hit() -> str | None:
    """The name of the torch._dynamo limit a frame hit since the counters were zeroed
    ('recompile_limit', 'accumulated_recompile_limit'); None when none was."""
    from torch._dynamo import utils
    for key in utils.counters["unimplemented"]:
        if key.startswith(RECOMPILE_LIMIT_BREAK):
            found = re.search(r"Limit type: (\w+)", key)
            return found.group(1) if found else "recompile_limit"
    return None


def fallback_columns(result: dict) -> dict:
    """The columns that make a measured trial whose ``compile_fallback`` is true an ``error``
    row: its rate is partly eager's, never a compiled rate to rank. Empty for any other
    result (a trial that failed already keeps its own status and error)."""
    if not result.get("compile_fallback") or result.get("status") not in (Status.OK,
                                                                           Status.TIMEOUT):
        return {}
    import torch._dynamo.config as dynamo_config
    limit = _limit_hit() or "recompile_limit"
    count = "" if result.get("recompiles") is None else f" after {result['recompiles']} recompiles"
    return dict(status=Status.ERROR, samples_per_sec=0.0, time_to_train_s=None,
                error=f"torch.compile hit torch._dynamo.config.{limit} "
                      f"({getattr(dynamo_config, limit, '?')}){count}: a frame ran eagerly from "
                      "then on, so the rate is no compiled one (TORCH_LOGS=recompiles names the "
                      "guards that failed)")


def rate_columns(units: dict[str, int], settings: TrialSettings, knobs: Knobs,
                 result: dict) -> dict:
    """From a measured ``result``: throughput in the workload's other units
    (``tokens_per_sec``), the model's FLOP per sample (counted once per run), achieved TFLOP/s
    and, on a card whose peak is known (or given with --peak-tflops), MFU for the knobs'
    precision; ``compile_s``. A loader-only trial ran no model: no FLOPs, nothing compiled."""
    samples_per_sec = result["samples_per_sec"]
    flops = None if settings.loader_only else settings.model_flops_per_sample
    out = {f"{unit}_per_sec": samples_per_sec * per_sample for unit, per_sample in units.items()}
    out.update(utilisation(flops, samples_per_sec, result.get("gpu_name"),
                           precision_of(knobs.amp, knobs.tf32), settings.peak_tflops,
                           settings.conv_flops_share),
               model_flops_per_sample=flops,
               compile_s=None if settings.loader_only else compile_s(knobs, result))
    return out


def environment_columns(device: torch.device, accelerator_type: str | None) -> dict:
    """Hardware and versions; the hardware key names the accelerator type when Ray gave one."""
    info = fingerprint(device)
    # torch.__version__ is a TorchVersion: a plain str keeps torch out of every process
    # that unpickles the result (a data-parallel trial's result queue imports it in 3 s)
    info.update(node_id=node_id(), node_ip=node_ip(), tuner_version=VERSION,
                torch_version=str(torch.__version__))
    if accelerator_type is not None:
        info["accelerator_type"] = accelerator_type
        info["hardware_key"] = f"{info['hardware_key']}@{accelerator_type}"
    return info
