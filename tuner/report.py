"""A report of one workload's leaderboard: four PNG figures (``tuner.report_figures``) and one
self-contained HTML page, the figures embedded as base64 data URIs in ``<out>/report.html``.

A row whose figures cannot be true (``tuner.noise.impossible``: a disturbed measurement) is left
out of the figures and the importances, counted as 'disturbed', and listed in the trial table
under a 'disturbed: <reason>' marker, never as a result.
"""

from __future__ import annotations

import base64
import html
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tuner.leaderboard as leaderboard
import tuner.winner as winner
from tuner.ceilings import attainable_summary, machine_summary
from tuner.errors import TunerError
from tuner.knobs import Knobs, knob_text
from tuner.report_figures import (
    FIGURES,
    disturbed,
    knob_importances,
    plot_best_vs_references,
    plot_knob_importance,
    plot_throughput_vs_batch,
    plot_throughput_vs_memory,
    png_bytes,
    report_order,
    training_trials,
)
from tuner.scaling import scaling, scaling_table
from tuner.status import FAILED, MEASURED, Phase, Status, phase_of
from tuner.windows import window_iqr

STATUS_ORDER = (Status.OK, Status.PRUNED, *FAILED)
"""Statuses in the order the report lists them: measured first."""
TOP_ROWS = 10


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
        pngs[name] = png_bytes(fig)
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
