"""The figures of a workload's report (``tuner.report``), and which rows they show.

Figures (``<out>/<name>.png``, and embedded as base64 data URIs in ``<out>/report.html``):

* ``throughput_vs_batch``: samples/sec against batch size (log2 axis), one series per
  num_workers; failed trials as red crosses along the bottom, so the infeasible region shows.
* ``knob_importance``: which knobs explain the fastest trials (Optuna's PED-ANOVA evaluator on a
  study rebuilt from the successful rows; needs no scikit-learn).
* ``throughput_vs_memory``: samples/sec against peak memory (device memory when measured, host
  memory otherwise), with the memory limit as a dashed line when one is given.
* ``best_vs_references``: the best trial against the baseline and recommended references of its
  run, with the best's speed-up over each and its 95 % interval ('tie' where the interval
  contains 1: ``tuner.noise.Speedup``).

A row whose figures cannot be true (``tuner.noise.impossible``: a disturbed measurement) is left
out of the figures and the importances, counted as 'disturbed', and listed in the trial table
under a 'disturbed: <reason>' marker, never as a result.

Figures use matplotlib's object-oriented ``Figure`` API (no pyplot, no global backend state).
"""

from __future__ import annotations

import io
import logging
import warnings
from typing import Iterable

import optuna
from matplotlib import ticker
from matplotlib.figure import Figure

import tuner.noise as noise
import tuner.winner as winner
from tuner.knobs import Knobs, knob_text
from tuner.status import FAILED, MEASURED, Phase, Status, phase_of

FIGURES = ("throughput_vs_batch", "knob_importance", "throughput_vs_memory", "best_vs_references")
"""Figure names, in page order; each is written as ``<name>.png``."""
MIN_TRIALS_FOR_IMPORTANCE = 3
"""Fewer successful trials than this: the importance figure says 'not enough trials'."""

_DPI = 110
_FIGSIZE_IN = (7.5, 4.6)
_FAILED_STYLE = dict(linestyle="none", marker="x", color="tab:red", markersize=8, mew=2,
                     clip_on=False)
_FAILED_Y_AXES = 0.03  # failed trials sit 3% above the x axis (axes fraction, not data)



def training_trials(rows: Iterable[dict]) -> list[dict]:
    """The rows that measured a training configuration: compute-only ``ceiling`` rows (phase
    column, where the leaderboard has one) are left out of the figures and the counts."""
    return [r for r in rows if phase_of(r) != Phase.CEILING]


def disturbed(row: dict) -> str | None:
    """Why a measured row's figures cannot be true (``tuner.noise.impossible``), or None (also
    for a failed row, which has no figure)."""
    return noise.impossible(row) if row["status"] in MEASURED else None


def report_order(rows: list[dict]) -> list[dict]:
    """``rows`` (ranked: ``leaderboard.ranked``) in the order the trial table lists them:
    successful training measurements, then ceiling rows, then disturbed rows (``disturbed``),
    then the rest (failed, pruned, timed out), each group in its given order."""
    def group(r: dict) -> int:
        if disturbed(r):
            return 2
        if r["status"] == Status.OK and r["samples_per_sec"] is not None:
            return 1 if phase_of(r) == Phase.CEILING else 0
        return 3
    return sorted(rows, key=group)


def _believable_ok(rows: Iterable[dict]) -> list[dict]:
    """The ``ok`` rows with a samples/sec and no impossible figure (``disturbed``)."""
    return [r for r in rows if r["status"] == Status.OK and r.get("samples_per_sec") is not None
            and not disturbed(r)]


# --- Knob importance -------------------------------------------------------------------------


def knob_importances(rows: Iterable[dict]) -> tuple[dict[str, float] | None, str]:
    """Importance of each varying knob for samples/sec, from the ``ok`` rows (disturbed rows,
    whose figures cannot be true, left out).

    The rows become an in-memory Optuna study over the values present (integer ranges, log
    for batch_size; categories otherwise; a null knob absent from its trial; one-valued knobs
    left out), evaluated with PedAnovaImportanceEvaluator (no scikit-learn needed).

    Returns:
        (importances normalised to sum 1, most important first; a one-line note on the data),
        or (None, the reason) with fewer than MIN_TRIALS_FOR_IMPORTANCE ok rows or no varying
        knob.
    """
    ok = _believable_ok(rows)
    if len(ok) < MIN_TRIALS_FOR_IMPORTANCE:
        return None, (f"not enough trials: {len(ok)} successful "
                      f"(at least {MIN_TRIALS_FOR_IMPORTANCE} needed)")
    distributions = _distributions(ok)
    if not distributions:
        return None, f"not enough trials: no knob varies across the {len(ok)} successful trials"
    trials = []
    for r in ok:
        params = {k: r[k] for k in distributions if r.get(k) is not None}
        trials.append(optuna.trial.create_trial(
            params=params, distributions={k: distributions[k] for k in params},
            value=float(r["samples_per_sec"])))
    # Aim for ~5 trials in the top quantile (PED-ANOVA's own advice), 10% at most trials counts.
    quantile = min(0.5, max(0.1, 5 / len(ok)))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
    optuna_logger = logging.getLogger("optuna")
    level = optuna_logger.level
    optuna_logger.setLevel(logging.WARNING)  # create_study logs 'A new study created' at INFO
    try:
        study = optuna.create_study(direction="maximize")
        study.add_trials(trials)
        with warnings.catch_warnings():
            # Small-sample warnings ('regimes with fewer than 2 trials', 'equal importances'):
            # the figure states how many trials it rests on instead.
            warnings.simplefilter("ignore")
            importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
    finally:
        optuna_logger.setLevel(level)
    note = (f"PED-ANOVA over {len(ok)} successful trials: which knobs set the top "
            f"{quantile:.0%} apart")
    return dict(importances), note


def _distributions(ok: list[dict]) -> dict[str, optuna.distributions.BaseDistribution]:
    out: dict[str, optuna.distributions.BaseDistribution] = {}
    for name in Knobs.names():
        values = {r[name] for r in ok if r.get(name) is not None}
        if len(values) < 2:
            continue
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            low, high = min(values), max(values)
            out[name] = optuna.distributions.IntDistribution(
                low, high, log=name == "batch_size" and low >= 1)
        else:
            out[name] = optuna.distributions.CategoricalDistribution(sorted(values))
    return out


# --- Figures (each returns a matplotlib Figure; nothing is drawn into global state) ----------


def plot_throughput_vs_batch(rows: list[dict]) -> Figure:
    """Samples/sec against batch size (log2 axis), one colour per num_workers: dots are trials,
    the line joins the fastest trial at each batch size. Failed trials: red x at the bottom.
    Disturbed rows (``disturbed``) are left out."""
    fig, ax = _figure("Throughput against batch size")
    ok = [r for r in _believable_ok(rows) if r["batch_size"] is not None]
    failed = [r for r in rows if r["status"] in FAILED and r["batch_size"] is not None]
    pruned = [r for r in rows if r["status"] == Status.PRUNED and r["samples_per_sec"] is not None
              and r["batch_size"] is not None and not disturbed(r)]
    if not ok and not failed:
        return _message(fig, ax, "no trial with a batch size recorded")
    for workers in sorted({r["num_workers"] for r in ok}, key=lambda w: (w is None, w)):
        series = [r for r in ok if r["num_workers"] == workers]
        fastest: dict[int, float] = {}
        for r in series:
            fastest[r["batch_size"]] = max(fastest.get(r["batch_size"], 0.0), r["samples_per_sec"])
        xs = sorted(fastest)
        line, = ax.plot(xs, [fastest[x] for x in xs], marker="o", linewidth=1.6,
                        label=f"num_workers={workers}")
        ax.plot([r["batch_size"] for r in series], [r["samples_per_sec"] for r in series],
                linestyle="none", marker="o", alpha=0.35, color=line.get_color())
    if pruned:
        ax.plot([r["batch_size"] for r in pruned], [r["samples_per_sec"] for r in pruned],
                linestyle="none", marker="o", markerfacecolor="none", color="grey",
                label="pruned (partial measurement)")
    if failed:
        ax.plot([r["batch_size"] for r in failed], [_FAILED_Y_AXES] * len(failed),
                transform=ax.get_xaxis_transform(), label="failed (oom / over limit / error)",
                **_FAILED_STYLE)
    for r in ok:
        if r["reference"]:
            ax.annotate(r["reference"], (r["batch_size"], r["samples_per_sec"]),
                        xytext=(6, -12), textcoords="offset points", fontsize="x-small",
                        color="dimgrey")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(ticker.LogLocator(base=2))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch size (samples per micro-batch, log2 scale)")
    ax.set_ylabel("samples/sec")
    ax.legend(loc="best", fontsize="small")
    return fig


def plot_knob_importance(importances: dict[str, float] | None, note: str) -> Figure:
    """Horizontal bars, most important knob on top; a figure that says why when ``importances``
    is None ('not enough trials ...')."""
    fig, ax = _figure("Knob importance for samples/sec", grid="x")
    if importances is None:
        return _message(fig, ax, note)
    names = list(importances)[::-1]  # barh draws bottom-up: most important on top
    values = [importances[n] for n in names]
    bars = ax.barh(names, values, color="tab:blue")
    ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], padding=3, fontsize="small")
    ax.set_xlim(0, max(values + [0.0]) * 1.15 or 1.0)
    ax.set_xlabel("importance (normalised, sums to 1)")
    ax.text(0.99, 0.02, note, transform=ax.transAxes, ha="right", va="bottom",
            fontsize="x-small", color="dimgrey")
    return fig


def memory_column(rows: list[dict]) -> str:
    """'peak_device_memory_mb' when any row recorded it, else 'peak_host_memory_mb'."""
    if any(r.get("peak_device_memory_mb") is not None for r in rows):
        return "peak_device_memory_mb"
    return "peak_host_memory_mb"


def plot_throughput_vs_memory(rows: list[dict], max_memory_mb: float | None = None) -> Figure:
    """Samples/sec against peak memory (MiB) of each successful trial; the fastest starred;
    failed trials with a recorded peak as red x at the bottom; ``max_memory_mb`` as a vertical
    dashed line. Disturbed rows (``disturbed``) are left out: one is never starred fastest."""
    fig, ax = _figure("Throughput against peak memory")
    column = memory_column(rows)
    ok = [r for r in _believable_ok(rows) if r[column] is not None]
    failed = [r for r in rows if r["status"] in FAILED and r[column] is not None]
    if not ok and not failed:
        return _message(fig, ax, "no trial with a peak memory recorded")
    if ok:
        ax.plot([r[column] for r in ok], [r["samples_per_sec"] for r in ok], linestyle="none",
                marker="o", alpha=0.7, label="trial")
        best = max(ok, key=lambda r: r["samples_per_sec"])
        ax.plot([best[column]], [best["samples_per_sec"]], linestyle="none", marker="*",
                markersize=16, color="gold", markeredgecolor="black", label="fastest")
    if failed:
        ax.plot([r[column] for r in failed], [_FAILED_Y_AXES] * len(failed),
                transform=ax.get_xaxis_transform(), label="failed (oom / over limit / error)",
                **_FAILED_STYLE)
    if max_memory_mb is not None:
        ax.axvline(max_memory_mb, linestyle="--", color="tab:red", linewidth=1.5,
                   label=f"limit {max_memory_mb:,.0f} MiB")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    where = "device" if column == "peak_device_memory_mb" else "host (process + workers)"
    ax.set_xlabel(f"peak {where} memory (MiB)")
    ax.set_ylabel("samples/sec")
    ax.legend(loc="best", fontsize="small")
    return fig


def speedup_label(sp: noise.Speedup) -> str:
    """Two lines for a reference's bar: the best's verdict against it ('best: tie within the
    noise', 'best: 1.16x faster', 'best: 1.25x slower': ``Speedup.short``), then the point
    estimate with its 95 % interval, or 'one measurement each, no interval'."""
    ci = (f"95 % CI [{sp.low:.2f}, {sp.high:.2f}]" if sp.low is not None
          else "one measurement each, no interval")
    verdict = "tie within the noise" if sp.tie else sp.short()
    return f"best: {verdict}\nspeed-up {sp.ratio:.2f}, {ci}"


def plot_best_vs_references(top: winner.Answer | None) -> Figure:
    """Bars: samples/sec of the best trial and of the baseline and recommended references of
    its run (``tuner.winner.best``), each reference bar annotated with the best's speed-up over
    it and its interval (``speedup_label``: 'tie' where the interval contains 1), or 'the best
    itself' where the reference won."""
    fig, ax = _figure("Best configuration against the references", grid="y")
    if top is None:
        return _message(fig, ax, "no successful trial")
    refs = (top.baseline, top.recommended)
    values = [top.samples_per_sec, *(ref.samples_per_sec for ref in refs)]
    bars = ax.bar(["best", *(ref.name for ref in refs)], [v or 0.0 for v in values],
                  color=["tab:green", "tab:grey", "tab:grey"])
    texts = [f"{values[0]:,.1f}"]
    for ref in refs:
        value = ref.samples_per_sec
        if value is None:
            texts.append("failed or not run")
        elif ref.is_best:
            texts.append(f"{value:,.1f}\nthe best itself")
        elif ref.speedup is None:
            texts.append(f"{value:,.1f}")
        else:
            texts.append(f"{value:,.1f}\n{speedup_label(ref.speedup)}")
    ax.bar_label(bars, labels=texts, padding=3, fontsize="x-small")
    ax.set_ylim(0, max(v or 0.0 for v in values) * 1.35 or 1.0)
    ax.set_ylabel("samples/sec")
    ax.text(0.01, 0.98, f"best: {knob_text(top.row)}", transform=ax.transAxes, ha="left",
            va="top", fontsize="x-small", color="dimgrey", wrap=True)
    return fig


def _figure(title: str, grid: str = "both"):
    fig = Figure(figsize=_FIGSIZE_IN, layout="constrained")
    ax = fig.subplots()
    ax.set_title(title)
    ax.grid(True, axis=grid, alpha=0.3)
    return fig, ax


def _message(fig: Figure, ax, text: str) -> Figure:
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize="large",
            color="dimgrey", wrap=True)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes, at the report's resolution."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()
