"""Diagnosis of one measured configuration: the per-phase breakdown table (laid out like the
DDPM report's) and the bottleneck named in one sentence."""

from __future__ import annotations

from rich.table import Table

from tuner.settings import PHASES

_LABELS = {"data_wait": "Data loading (wait)", "h2d": "Host→device copy", "forward": "Forward pass",
           "backward": "Backward pass", "optimizer": "Optimizer step"}


def classify(phase: str, device: str) -> str:
    if phase == "data_wait":
        return "Input pipeline"
    if phase == "h2d":
        return "Memory transfer"
    return "GPU compute" if device == "cuda" else "CPU compute"


def breakdown_table(row: dict) -> Table:
    """Phases sorted by time: ms per optimizer step, share, classification."""
    t = Table(title="Per-step breakdown (synchronised segment)", title_justify="left")
    for col in ("Component", "Time per step", "Percentage", "Classification"):
        t.add_column(col, justify="right" if col in ("Time per step", "Percentage") else "left")
    for phase in sorted(PHASES, key=lambda p: -(row.get(f"{p}_ms") or 0)):
        t.add_row(_LABELS[phase], f"{row[f'{phase}_ms']:.2f} ms", f"{row[f'{phase}_pct']:.1f}%",
                  classify(phase, row.get("device") or "cpu"))
    t.add_row("[bold]Total per step[/]", f"[bold]{row['breakdown_step_ms']:.2f} ms[/]", "100%", "")
    return t


def bottleneck(row: dict) -> str:
    """One sentence naming what limits the configuration and what to try."""
    data, h2d = row["data_wait_pct"], row["h2d_pct"]
    device = row.get("device") or "cpu"
    compute = {p: row[f"{p}_pct"] for p in ("forward", "backward", "optimizer")}
    if data >= 30:
        return (f"Bottleneck: the input pipeline — {data:.0f}% of each step waits for the next "
                f"batch; more DataLoader workers or prefetching, persistent workers, or cheaper "
                f"decoding/augmentation in __getitem__ will help more than compute settings.")
    if h2d >= 20:
        return (f"Bottleneck: host→device copies take {h2d:.0f}% of each step; pin_memory with "
                f"non_blocking copies, or fewer/smaller tensors per batch, will help most.")
    top = max(compute, key=compute.get)
    total = sum(compute.values())
    where = "GPU" if device == "cuda" else "CPU"
    hint = ("a larger batch, AMP, channels_last or torch.compile are the levers"
            if device == "cuda" else "on CPU, model size and threads are the levers")
    return (f"Bottleneck: {where} compute — {total:.0f}% of each step is forward, backward and "
            f"optimizer (largest: {_LABELS[top].lower()}, {compute[top]:.0f}%), while data "
            f"loading waits {data:.0f}%; the input pipeline is not the limit, {hint}.")
