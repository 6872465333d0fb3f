"""Diagnosis of one measured configuration: the per-phase breakdown table (laid out like the
DDPM report's) and the bottleneck named in one sentence."""

from __future__ import annotations

from rich.table import Table

from tuner.settings import PHASES

_LABELS = {"data_wait": "Data loading (wait)", "h2d": "Host→device copy", "forward": "Forward pass",
           "backward": "Backward pass", "optimizer": "Optimizer step"}


LAUNCH_BOUND_BELOW_PCT = 60.0
"""A CUDA step whose GPU is busy less than this share of the time, while neither the input
pipeline nor host→device copies explain the idle time, is launch-bound: the CPU issues kernels
slower than the GPU runs them. (Source: the ddpm U-Net on an H100, docs/benchmarks.md: NVML read
20 % utilisation and a step took 70 ms at both bs=8 and bs=32, which a synchronised breakdown
alone reads as "99 % GPU compute".) 60 %: below it the GPU idles over 40 % of the step, more
than any compute-side lever can recover."""


def kind(row: dict) -> str:
    """What bounds the step: 'input' (data wait >= 30 % of it), 'transfer' (host→device copies
    >= 20 %), 'launch' (CUDA, the GPU busy < ``LAUNCH_BOUND_BELOW_PCT`` by NVML with neither
    of those), 'compute' otherwise, or 'compute?' on CUDA when NVML gave no utilisation."""
    if row["data_wait_pct"] >= 30:
        return "input"
    if row["h2d_pct"] >= 20:
        return "transfer"
    if (row.get("device") or "cpu") != "cuda":
        return "compute"
    busy = row.get("gpu_util_pct")
    if busy is None:
        return "compute?"
    return "launch" if busy < LAUNCH_BOUND_BELOW_PCT else "compute"


def classify(phase: str, device: str, bound: str = "compute") -> str:
    """The classification column of one phase; forward, backward and optimizer of a
    launch-bound CUDA step are CPU-side kernel launches, not GPU compute."""
    if phase == "data_wait":
        return "Input pipeline"
    if phase == "h2d":
        return "Memory transfer"
    if device != "cuda":
        return "CPU compute"
    return "Kernel launch (GPU idle)" if bound == "launch" else "GPU compute"


def breakdown_table(row: dict) -> Table:
    """Phases sorted by time: ms per optimizer step, share, classification."""
    t = Table(title="Per-step breakdown (synchronised segment)", title_justify="left")
    for col in ("Component", "Time per step", "Percentage", "Classification"):
        t.add_column(col, justify="right" if col in ("Time per step", "Percentage") else "left")
    bound = kind(row)
    for phase in sorted(PHASES, key=lambda p: -(row.get(f"{p}_ms") or 0)):
        t.add_row(_LABELS[phase], f"{row[f'{phase}_ms']:.2f} ms", f"{row[f'{phase}_pct']:.1f}%",
                  classify(phase, row.get("device") or "cpu", bound))
    t.add_row("[bold]Total per step[/]", f"[bold]{row['breakdown_step_ms']:.2f} ms[/]", "100%", "")
    return t


def bottleneck(row: dict) -> str:
    """One sentence naming what limits the configuration (``kind``) and its levers, first the
    ones that act on that limit."""
    data, h2d = row["data_wait_pct"], row["h2d_pct"]
    bound = kind(row)
    if bound == "input":
        return (f"Bottleneck: the input pipeline — {data:.0f}% of each step waits for the next "
                f"batch; more DataLoader workers or prefetching, persistent workers, or cheaper "
                f"decoding/augmentation in __getitem__ will help more than compute settings.")
    if bound == "transfer":
        return (f"Bottleneck: host→device copies take {h2d:.0f}% of each step; pin_memory with "
                f"non_blocking copies, or fewer/smaller tensors per batch, will help most.")
    if bound == "launch":
        return (f"Bottleneck: kernel launches — the GPU is busy only {row['gpu_util_pct']:.0f}% "
                f"of the time (NVML) while data loading waits {data:.0f}% and copies take "
                f"{h2d:.0f}%: the CPU issues kernels slower than the GPU runs them "
                f"(launch-bound). A larger batch (more work per kernel), CUDA graphs "
                f"(torch.compile mode='reduce-overhead') and a fused optimizer are the levers; "
                f"AMP and channels_last speed up kernels the GPU is not waiting on.")
    compute = {p: row[f"{p}_pct"] for p in ("forward", "backward", "optimizer")}
    top = max(compute, key=compute.get)
    total = sum(compute.values())
    where = "GPU" if (row.get("device") or "cpu") == "cuda" else "CPU"
    hint = ("a larger batch, AMP, channels_last or torch.compile are the levers"
            if where == "GPU" else "on CPU, model size and threads are the levers")
    if bound == "compute?":
        hint += ("; NVML gave no GPU utilisation, so a launch-bound step (GPU idle between "
                 "small kernels) cannot be ruled out")
    busy = f" (GPU busy {row['gpu_util_pct']:.0f}%)" if row.get("gpu_util_pct") is not None else ""
    return (f"Bottleneck: {where} compute{busy} — {total:.0f}% of each step is forward, "
            f"backward and optimizer (largest: {_LABELS[top].lower()}, {compute[top]:.0f}%), "
            f"while data loading waits {data:.0f}%; the input pipeline is not the limit, {hint}.")
