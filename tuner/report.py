"""A report of one workload's leaderboard: four PNG figures and one self-contained HTML page.

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

import base64
import html
import io
import logging
import warnings
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import optuna
from matplotlib import ticker
from matplotlib.figure import Figure

import tuner.leaderboard as leaderboard
import tuner.noise as noise
import tuner.winner as winner
from tuner.ceilings import attainable_summary, machine_summary
from tuner.errors import TunerError
from tuner.knobs import Knobs, knob_text
from tuner.scaling import scaling, scaling_table
from tuner.status import FAILED, MEASURED, Phase, Status, phase_of
from tuner.windows import window_iqr

FIGURES = ("throughput_vs_batch", "knob_importance", "throughput_vs_memory", "best_vs_references")
"""Figure names, in page order; each is written as ``<name>.png``."""
STATUS_ORDER = (Status.OK, Status.PRUNED, *FAILED)
"""Statuses in the order the report lists them: measured first."""
MIN_TRIALS_FOR_IMPORTANCE = 3
"""Fewer successful trials than this: the importance figure says 'not enough trials'."""
TOP_ROWS = 10

_DPI = 110
_FIGSIZE_IN = (7.5, 4.6)
_FAILED_STYLE = dict(linestyle="none", marker="x", color="tab:red", markersize=8, mew=2,
                     clip_on=False)
_FAILED_Y_AXES = 0.03  # failed trials sit 3% above the x axis (axes fraction, not data)


def write_report(results: str | Path, workload: str, out_dir: str | Path, *,
                 hardware: str | None = None, scale: str | None = None,
                 max_memory_mb: float | None = None) -> list[Path]:
    """Write the four PNG figures and ``report.html`` for one workload on one machine.

    Args:
        results: results directory (the leaderboard is ``<results>/leaderboard/``).
        workload: workload name, as recorded in the leaderboard's ``workload`` column.
        out_dir: directory for the files; created if missing, existing files are overwritten.
        hardware: hardware key to report on; None: the only key in the leaderboard.
        scale: only the rows of this model scale ('tiny', 'full'); None: all.
        max_memory_mb: peak-memory limit in MiB, a dashed line on the memory figure (None: none).

    Returns:
        Paths written: ``<out_dir>/<figure>.png`` for each of FIGURES, then
        ``<out_dir>/report.html`` (one page, figures embedded, no external references).

    Raises:
        TunerError: no rows for ``workload`` (on ``hardware``) in ``results``; or rows from
            several hardware keys and ``hardware`` is None (the message lists the keys); or
            ``out_dir`` cannot be written (``check_out_dir``, before any figure is drawn).
        ValueError: ``max_memory_mb`` is not > 0.
    """
    if max_memory_mb is not None and not max_memory_mb > 0:
        raise ValueError(f"max_memory_mb={max_memory_mb!r}: expected a number of MiB > 0")
    table, hardware = leaderboard.select(results, workload, hardware, scale=scale)
    rows = report_order(leaderboard.ranked(table))
    trials = training_trials(rows)
    top = winner.best(table)
    out = check_out_dir(out_dir)
    importances, importance_note = knob_importances(trials)
    figures = {
        "throughput_vs_batch": plot_throughput_vs_batch(trials),
        "knob_importance": plot_knob_importance(importances, importance_note),
        "throughput_vs_memory": plot_throughput_vs_memory(trials, max_memory_mb),
        "best_vs_references": plot_best_vs_references(top),
    }
    paths, pngs = [], {}
    for name, fig in figures.items():
        pngs[name] = _png_bytes(fig)
        path = out / f"{name}.png"
        path.write_bytes(pngs[name])
        paths.append(path)
    page = render_html(workload=workload, hardware=hardware, rows=rows, trials=trials, top=top,
                       pngs=pngs, importances=importances, importance_note=importance_note)
    html_path = out / "report.html"
    html_path.write_text(page, encoding="utf-8")
    return paths + [html_path]


def check_out_dir(out_dir: str | Path) -> Path:
    """Create ``out_dir`` (with its parents) when missing and make sure a file can be written
    in it, by creating and removing a hidden file (permission bits say nothing to root or
    about a read-only mount). Returns it as a Path. Raises TunerError naming ``--out`` and
    why (a file in the way, no permission, a read-only filesystem), in one line."""
    import os
    import tempfile
    out = Path(out_dir)
    reason = None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        in_the_way = next((p for p in (out, *out.parents) if p.exists()), None)
        reason = (f"{in_the_way} is a file, not a directory"
                  if in_the_way is not None and not in_the_way.is_dir()
                  else f"{exc.strerror or type(exc).__name__}: {exc.filename or out}")
    else:
        try:
            fd, probe = tempfile.mkstemp(prefix=".tuner-write-probe-", dir=out)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            reason = f"{exc.strerror or type(exc).__name__}: cannot create a file in {out}"
    if reason:
        raise TunerError(f"--out {out_dir}: cannot write the report there ({reason}); expected "
                         "a directory that exists or can be created and is writable") from None
    return out


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


def _png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()


# --- HTML ------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figure img { max-width: 100%; }
figcaption { font-size: 0.85em; color: #555; }
.meta { color: #555; }
tr.disturbed td { color: #888; }
tr.disturbed td.num { text-decoration: line-through; }
.marker { color: #b00; font-weight: bold; }
"""

_CAPTIONS = {
    "throughput_vs_batch": "Samples/sec against batch size, one colour per num_workers; the line "
                           "joins the fastest trial at each batch size; red x: failed trials.",
    "knob_importance": "",  # the importance note
    "throughput_vs_memory": "Samples/sec against peak memory; red x: failed trials; dashed "
                            "line: the memory limit (when given).",
    "best_vs_references": "The best trial against the baseline and recommended configurations "
                          "measured in the same run, with the best's speed-up over each and its "
                          "95 % interval ('tie': the interval contains 1, equal within the "
                          "noise).",
}


def render_html(
    *,
    workload: str,
    hardware: str | None,
    rows: list[dict],
    trials: list[dict],
    top: winner.Answer | None,
    pngs: dict[str, bytes],
    importances: dict[str, float] | None,
    importance_note: str,
) -> str:
    """The report page: every figure inlined as a data URI, no external files, scripts or
    styles. ``rows`` are ranked (``report_order``; the top-10 table), ``trials`` the training
    trials among them (``training_trials``; the counts, where a disturbed row counts as
    'disturbed', not under its status); ``pngs`` maps figure name to PNG bytes."""
    e = html.escape
    counts = Counter("disturbed" if disturbed(r) else r["status"] for r in trials)
    statuses = ([s for s in STATUS_ORDER if counts[s]]
                + sorted(set(counts) - set(STATUS_ORDER) - {"disturbed"})
                + (["disturbed"] if counts["disturbed"] else []))
    runs = sorted({r["run_id"] for r in trials if r["run_id"]})
    scales = sorted({r["scale"] for r in trials if r["scale"]})
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>tuner report: {e(workload)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>tuner report: {e(workload)}</h1>",
        f'<p class="meta">hardware: <code>{e(hardware or "unrecorded")}</code> · '
        f"{len(trials)} trials in {len(runs)} run(s) · scale: {e(', '.join(scales) or '?')} · "
        f"generated {generated}</p>",
        "<h2>Trials by status</h2>",
        _table(["status", "trials"], [[e(s), _td(str(counts[s]))] for s in statuses]),
        *([_disturbed_note(trials)] if counts["disturbed"] else []),
        "<h2>Best configuration</h2>",
        _best_section(top),
        *_world_sizes(trials),
        "<h2>Figures</h2>",
    ]
    for name in FIGURES:
        if name not in pngs:
            continue
        caption = importance_note if name == "knob_importance" else _CAPTIONS[name]
        data = base64.b64encode(pngs[name]).decode("ascii")
        parts.append(f'<figure><img src="data:image/png;base64,{data}" '
                     f'alt="{e(name.replace("_", " "))}"><figcaption>{e(caption)}'
                     "</figcaption></figure>")
    if importances:
        parts.append("<h3>Knob importance</h3>")
        parts.append(_table(["knob", "importance"],
                            [[e(k), _td(f"{v:.3f}")] for k, v in importances.items()]))
    parts.append(f"<h2>Top {min(TOP_ROWS, len(rows))} trials</h2>")
    parts.append(_top_table(rows[:TOP_ROWS]))
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def _world_sizes(trials: list[dict]) -> list[str]:
    """The world sizes' table (``tuner.scaling``), where a trial had more than one rank."""
    header, cells = scaling_table(scaling(trials))
    return ["<h2>World sizes</h2>", _table(header, [[html.escape(c) for c in row]
                                                   for row in cells])] if cells else []


def _disturbed_note(trials: list[dict]) -> str:
    """One paragraph naming the disturbed trials (``disturbed``) and why, the first five."""
    why = [(r["trial_id"], reason) for r in trials if (reason := disturbed(r))]
    shown = "; ".join(f"trial {trial}: {reason}" for trial, reason in why[:5])
    more = f" and {len(why) - 5} more" if len(why) > 5 else ""
    return (f"<p>disturbed: measured, but with a figure that cannot be true, so never a result "
            f"(set aside; not in the figures): {html.escape(shown + more)}.</p>")


def _best_section(top: winner.Answer | None) -> str:
    """The best's samples/sec, its speed-up over each reference in the tool's words
    (``noise.Speedup.text``: 'tie within the noise (speed-up 1.15, 95 % CI [0.97, 1.36])', never
    '1.15x'), the attainable rate (``tuner.ceilings``), a faster tie set aside, and its knobs."""
    e = html.escape
    if top is None:
        return "<p>No successful trial.</p>"
    row = top.row
    lines = [f"<p><strong>{_fmt_num(top.samples_per_sec, 1)} samples/sec</strong> "
             f"(run <code>{e(str(row['run_id']))}</code>, trial "
             f"<code>{e(str(row['trial_id']))}</code>)</p>"]
    speed_rows = []
    for ref in (top.baseline, top.recommended):
        sps, sp = ref.samples_per_sec, ref.speedup
        verdict = ("the best itself" if ref.is_best and sps is not None
                   else sp.text() if sp is not None else "")
        if sp is not None and sp.pairs > 1:
            verdict += f"; {sp.pairs} interleaved rounds"
        speed_rows.append([e(ref.name), _td(_fmt_num(sps, 1) or "failed or not run"), e(verdict)])
    lines.append(_table(["reference", "samples/sec", "best against it"], speed_rows))
    if (bound := attainable_summary(top.attainable)) is not None:
        lines.append(f"<p>{e(bound)}.</p>")
    if (limit := machine_summary(top)) is not None:
        lines.append(f"<p>{e(limit)}.</p>")
    if top.tied_faster:
        faster, sp = top.tied_faster.row, top.tied_faster.speedup
        lines.append(f"<p>Fastest measured, <code>{e(knob_text(faster))}</code> at "
                     f"{_fmt_num(faster['samples_per_sec'], 1)} samples/sec, against the best "
                     f"shown: {e(sp.text())}; the simpler configuration is chosen (no compile, "
                     "then fewer workers, then closer to the baseline).</p>")
    knob_rows = [[e(name), e(_fmt_value(row.get(name)))] for name in Knobs.names()]
    if row.get("clamped"):
        knob_rows.append([e("clamped"), e(str(row["clamped"]))])
    lines.append(_table(["knob", "value"], knob_rows))
    return "\n".join(lines)


def phase_label(row: dict) -> str:
    """What a row measured, as the CLI's leaderboard table names it: 'search', 'remeasure', or
    'ceiling: <kind>' (``tuner.ceilings``; rows before the ``ceiling`` column are compute)."""
    phase = phase_of(row)
    if phase == Phase.CEILING:
        return f"ceiling: {row.get('ceiling') or 'compute'}"
    return str(phase)


def _top_table(rows: list[dict]) -> str:
    """One line per row, in the given order: its status, or for a row whose figures cannot be
    true a 'disturbed: <reason>' marker (its figures struck through); its phase
    (``phase_label``: a ceiling never reads as a configuration); samples/sec, step time (ms)
    and peak memory (MiB). A note under the table says what a ceiling row is, where one is
    listed."""
    e = html.escape
    body, classes = [], []
    for i, r in enumerate(rows, 1):
        detail = knob_text(r)
        if r["status"] not in MEASURED and r.get("error"):
            detail += f" — {r['error']}"
        why = disturbed(r)
        status = (f'<span class="marker">{e(f"disturbed: {why}")}</span> '
                  f"({e(r['status'])}, not a result)" if why else e(r["status"]))
        classes.append("disturbed" if why else None)
        body.append([_td(str(i)), status, e(phase_label(r)), e(r["reference"] or ""),
                     _td(_fmt_num(r["samples_per_sec"], 1)),
                     _td(_fmt_num(window_iqr(r), 1)),
                     _td(_fmt_num(r["step_time_ms_p50"], 1)),
                     _td(_fmt_num(r["peak_device_memory_mb"], 0)),
                     _td(_fmt_num(r["peak_host_memory_mb"], 0)), e(detail)])
    table = _table(["#", "status", "phase", "ref", "samples/sec", "±IQR", "step ms p50",
                    "peak dev MiB", "peak host MiB", "knobs / error"], body, classes)
    if any(phase_of(r) == Phase.CEILING for r in rows):
        table += ("\n<p>phase 'ceiling: …' rows are bounds, not configurations to train with: "
                  "compute (batches already on the device), loader (the input pipeline alone, no "
                  "model), machine-compute and machine-loader (largest batch, fastest precision; "
                  "every CPU a loader worker), path-loader (another data path's best), core-* "
                  "(one core each, the shared-cores model on CPU).</p>")
    return table


def _table(header: list[str], rows: list[list[str]],
           row_classes: list[str | None] | None = None) -> str:
    """Cells are already-escaped HTML; a cell made by ``_td`` keeps its own <td>.
    ``row_classes``: a CSS class per row (None: none)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    classes = row_classes or [None] * len(rows)
    body = "".join((f'<tr class="{html.escape(cls)}">' if cls else "<tr>")
                   + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row)
                   + "</tr>" for row, cls in zip(rows, classes))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(text: str) -> str:
    return f'<td class="num">{html.escape(text)}</td>'


def _fmt_num(v: float | None, digits: int) -> str:
    return "" if v is None else f"{v:,.{digits}f}"


def _fmt_value(v: Any) -> str:
    return "—" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
