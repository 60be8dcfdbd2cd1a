"""Render an Analysis: an HTML page with PNG plots, a JSON summary, a terminal summary.

The HTML is one self-contained file next to its PNGs (relative links), so the output
folder can be copied or served as is.
"""

from __future__ import annotations

import html
import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from slurm_triage.analytics import analysis as analysis_module
from slurm_triage.analytics import model
from slurm_triage.analytics.analysis import Analysis, ReportOptions, Summary
from slurm_triage.analytics.ingest import Accounting

TITLE = "slurm-triage reliability report"


@dataclass(frozen=True)
class ReportFiles:
    """What write_report produced."""

    html: Path
    summary_json: Path
    plots: tuple[Path, ...]


def write_report(analysis: Analysis, out_dir: Path) -> ReportFiles:
    """Write index.html, summary.json and the PNG plots into out_dir (created if needed)."""
    return write_pages(analysis, out_dir, render_plots(analysis, out_dir))


def build_report(
    accounting: Accounting,
    options: ReportOptions,
    attributions: pl.LazyFrame | None,
    out_dir: Path,
) -> tuple[Analysis, ReportFiles]:
    """Analyse and write the report, drawing the plots (matplotlib, holding the GIL) while
    a worker thread computes the job runs (polars, releasing it): on two cores the two
    overlap instead of queueing."""
    done = analysis_module.ended_attempts(accounting, attributions)
    summary = analysis_module.summarise(accounting, done, options)
    with ThreadPoolExecutor(max_workers=1) as pool:
        tables = pool.submit(analysis_module.run_tables, done, options)
        plots = render_plots(summary, out_dir)
        result = analysis_module.complete(summary, tables.result())
    return result, write_pages(result, out_dir, plots)


def render_plots(summary: Summary, out_dir: Path) -> tuple[Path, ...]:
    """The four PNG plots; they need only the Summary part of an analysis."""
    from slurm_triage.analytics import plots

    out_dir.mkdir(parents=True, exist_ok=True)
    opts = summary.options
    note = (
        f"restart u0 = {opts.assume.restart_min:g} min, checkpoint write w = "
        f"{opts.ckpt_write_s:g} s, queue q = {opts.queue_min:g} min per interruption"
    )
    return (
        plots.mttf_plot(summary.mttf, summary.model_rf, opts.gpus_per_node, out_dir / "mttf.png"),
        plots.ettr_plot(
            summary.ettr_curves,
            summary.ettr_simulated,
            summary.model_rf,
            opts.gpus_per_node,
            note,
            out_dir / "ettr.png",
        ),
        plots.taxonomy_plot(summary.taxonomy, out_dir / "taxonomy.png"),
        plots.failures_plot(
            summary.over_time, summary.rf.rate, opts.min_gpus, out_dir / "failures.png"
        ),
    )


def write_pages(analysis: Analysis, out_dir: Path, plots: tuple[Path, ...]) -> ReportFiles:
    """summary.json and index.html next to the already drawn plots."""
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary(analysis), indent=2, default=str) + "\n")
    html_path = out_dir / "index.html"
    html_path.write_text(render_html(analysis))
    return ReportFiles(html_path, summary_path, plots)


def summary(analysis: Analysis) -> dict[str, Any]:
    """The headline numbers as plain JSON-able values."""
    rf = analysis.rf
    share = analysis.failure_share
    projections = {
        str(g): model.mttf_hours(model.nodes_for_gpus(g, analysis.options.gpus_per_node), rf_)
        for g in (1024, 16_384, 131_072)
        for rf_ in (analysis.model_rf,)
    }
    return {
        "source": analysis.source,
        "rows": analysis.rows,
        "bad_lines": analysis.bad_lines,
        "ended_attempts": analysis.ended_rows,
        "job_runs": analysis.job_runs,
        "first_submit": analysis.first_submit,
        "last_end": analysis.last_end,
        "gpu_hours": analysis.gpu_hours,
        "rf_per_node_day": _finite(rf.rate),
        "rf_low": _finite(rf.low),
        "rf_high": _finite(rf.high),
        "rf_failures": rf.events,
        "rf_node_days": rf.exposure,
        "rf_min_gpus": analysis.options.min_gpus,
        "model_rf_per_node_day": analysis.model_rf,
        "model_rf_source": analysis.model_rf_source,
        "failure_attempts": share.attempts,
        "failure_count_share": _finite(share.count_share),
        "failure_gpu_hours_share": _finite(share.gpu_hours_share),
        "mttf_projection_hours": projections,
        "state_mix": _records(analysis.state_mix),
        "goodput_loss": _records(analysis.goodput),
    }


def _finite(value: float) -> float | None:
    return value if isinstance(value, int | float) and math.isfinite(value) else None


def _records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (_finite(v) if isinstance(v, float) else v) for k, v in row.items()}
        for row in frame.with_columns(pl.col(pl.Enum).cast(pl.String)).iter_rows(named=True)
    ]


def _pct(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.2f}%"


def _per_1000(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value * 1000:.2f}"


def summary_text(analysis: Analysis, files: ReportFiles | None = None) -> str:
    """A short terminal summary of the headline numbers."""
    rf, share, opts = analysis.rf, analysis.failure_share, analysis.options
    mix = {r["state"]: r for r in _records(analysis.state_mix)}
    lines = [
        f"{analysis.source}: {analysis.rows:,} sacct rows, {analysis.ended_rows:,} ended "
        f"attempts in {analysis.job_runs:,} job runs, {_num(analysis.gpu_hours)} GPU-hours"
        + (f" ({analysis.bad_lines:,} unparsable lines skipped)" if analysis.bad_lines else ""),
        f"period: {_date(analysis.first_submit)} to {_date(analysis.last_end)}",
        "states (jobs / GPU-hours): "
        + ", ".join(
            f"{s} {_pct(r['count_share'])}/{_pct(r['gpu_hours_share'])}"
            for s, r in mix.items()
            if r["count"]
        ),
        f"failures (NODE_FAIL or hardware/infrastructure attribution): {share.attempts:,}, "
        f"{_pct(share.count_share)} of jobs, {_pct(share.gpu_hours_share)} of GPU-hours",
        f"r_f (jobs > {opts.min_gpus} GPUs): {_per_1000(rf.rate)} per 1000 node-days, "
        f"95% CI [{_per_1000(rf.low)}, {_per_1000(rf.high)}] "
        f"({rf.events:,} failures in {rf.exposure:,.0f} node-days)",
    ]
    for gpus in (1024, 16_384, 131_072):
        nodes = model.nodes_for_gpus(gpus, opts.gpus_per_node)
        lines.append(
            f"  MTTF at {gpus:>7,} GPUs: {model.mttf_hours(nodes, analysis.model_rf):8.3g} h"
            f"  (r_f {analysis.model_rf_source})"
        )
    for row in analysis.goodput.iter_rows(named=True):
        lines.append(
            f"goodput lost to {row['reason']}: {_num(row['lost_gpu_hours'])} GPU-hours "
            f"({_pct(row['share_of_gpu_hours'])})"
        )
    if files is not None:
        lines.append(f"report: {files.html}")
    return "\n".join(lines)


def _num(value: float) -> str:
    """Thousands separators for big numbers, three significant digits for small ones."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _date(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "n/a"


def _table(frame: pl.DataFrame, percent: tuple[str, ...] = ()) -> str:
    """An HTML table; float columns rounded, share columns as percentages."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    body = []
    for row in frame.iter_rows(named=True):
        cells = "".join(f"<td>{html.escape(_cell(k, v, percent))}</td>" for k, v in row.items())
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _cell(key: str, value: Any, percent: tuple[str, ...]) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if key in percent:
            return _pct(value)
        if not math.isfinite(value):
            return "∞" if value > 0 else "n/a"
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f2f2f2}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}.note{color:#555;font-size:0.9em}"""


def render_html(analysis: Analysis) -> str:
    """The report page."""
    text = html.escape(summary_text(analysis))
    opts = analysis.options
    shares = ("count_share", "gpu_hours_share", "share_of_gpu_hours")
    sections = [
        f"<h1>{TITLE}</h1><p class=note>generated {_date(datetime.now())}; "
        f"input {html.escape(analysis.source)}</p><pre>{text}</pre>",
        "<h2>Failure rate and MTTF</h2>"
        f"<p class=note>r_f counts attempts on more than {opts.min_gpus} GPUs that ended "
        "NODE_FAIL, or ended otherwise than COMPLETED with an attribution blaming a node for a "
        "hardware or infrastructure reason, per node-day of those attempts (Kokolis et al. "
        "2024). Intervals are exact Poisson (Garwood). Model curves use r_f "
        f"{html.escape(analysis.model_rf_source)}.</p>",
        '<img src="mttf.png" alt="MTTF by job size">',
        _table(analysis.mttf),
        '<img src="failures.png" alt="failures over time">',
        "<h2>Expected ETTR</h2><p class=note>Closed form (1 - N r_f (u0 + dt/2)) / "
        f"(1 + w/dt) / (1 + N r_f q) with u0 = {opts.assume.restart_min:g} min, "
        f"w = {opts.ckpt_write_s:g} s, q = {opts.queue_min:g} min; markers: Monte Carlo "
        f"means of {opts.simulate_runs} runs.</p>",
        '<img src="ettr.png" alt="ETTR by job size">',
        _table(analysis.ettr_simulated),
        "<h2>Why jobs ended</h2>",
        '<img src="taxonomy.png" alt="taxonomy">',
        _table(analysis.domains, shares),
        _table(analysis.taxonomy, shares),
        "<h2>State mix</h2>",
        _table(analysis.state_mix, shares),
        "<h2>Job runs: achieved ETTR</h2><p class=note>A job run is a requeue chain of one "
        "job id. Unproductive time assumes a checkpoint every "
        f"{opts.assume.ckpt_interval_min:g} min (half of it lost per interruption) and "
        f"{opts.assume.restart_min:g} min per restart.</p>",
        _table(analysis.ettr_by_size),
        _table(analysis.largest_runs),
        "<h2>Goodput lost</h2>",
        _table(analysis.goodput, shares),
    ]
    body = "\n".join(sections)
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{TITLE}</title>"
        f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n"
    )
