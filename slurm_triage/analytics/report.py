"""Render an Analysis: an HTML page with PNG figures, a JSON summary, a terminal summary.

The HTML is one self-contained file next to its PNGs (relative links), so the output
folder can be copied or served as is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from slurm_triage.analytics import analysis as analysis_module
from slurm_triage.analytics import html_page as page
from slurm_triage.analytics import model
from slurm_triage.analytics.analysis import Analysis, ReportOptions, Summary
from slurm_triage.analytics.ingest import Accounting
from slurm_triage.analytics.node_events import NodeEvents

# The figures, in the order the page shows them; ETTR_FIGURE needs the job runs.
SUMMARY_FIGURES = (
    "mttf.png",
    "failures.png",
    "rf_by_cause.png",
    "ettr_interval.png",
    "taxonomy.png",
    "states.png",
)
ETTR_FIGURE = "ettr.png"
RF_COLUMNS = ["rf", "rf_low", "rf_high"]
SOURCE_WORDS = {
    "node_fail": "NODE_FAIL rows",
    "attribution": "our attributions",
    "node_event": "joined node events",
}
Phase = Callable[[str], AbstractContextManager[None]]


def _no_phase(name: str) -> AbstractContextManager[None]:
    return nullcontext()


@dataclass(frozen=True)
class ReportFiles:
    """What write_report produced."""

    html: Path
    summary_json: Path
    plots: tuple[Path, ...]


def write_report(analysis: Analysis, out_dir: Path) -> ReportFiles:
    """Write index.html, summary.json and the PNG figures into out_dir (created if needed)."""
    plots = (*render_plots(analysis, out_dir), render_ettr_plot(analysis, out_dir))
    return write_pages(analysis, out_dir, plots)


def build_report(
    accounting: Accounting,
    options: ReportOptions,
    attributions: pl.LazyFrame | None,
    out_dir: Path,
    events: NodeEvents | None = None,
    phase: Phase = _no_phase,
) -> tuple[Analysis, ReportFiles]:
    """Analyse and write the report, drawing the figures (matplotlib, holding the GIL)
    while a worker thread computes the job runs (polars, releasing it): on two cores the
    two overlap instead of queueing. `phase` names each step as it runs."""
    with phase("joining attributions and node events"):
        attempts = analysis_module.ended_attempts(
            accounting, attributions, events, analysis_module.node_gpus(options)
        )
    with phase("computing failure rates and the ETTR model"):
        summary = analysis_module.summarise(accounting, attempts, options)
    with ThreadPoolExecutor(max_workers=1) as pool:
        tables = pool.submit(analysis_module.run_tables, attempts, options)
        with phase(f"drawing {len(SUMMARY_FIGURES)} figures"):
            plots = render_plots(summary, out_dir)
        with phase("measuring ETTR of the job runs"):
            result = analysis_module.complete(summary, tables.result())
    with phase("drawing the ETTR figure and writing the page"):
        files = write_pages(result, out_dir, (*plots, render_ettr_plot(result, out_dir)))
    return result, files


def _model_note(opts: ReportOptions) -> str:
    return (
        f"restart u0 = {opts.assume.restart_min:g} min, checkpoint write w = "
        f"{opts.ckpt_write_s:g} s, queue q = {opts.queue_min:g} min per interruption"
    )


def render_plots(summary: Summary, out_dir: Path) -> tuple[Path, ...]:
    """The figures that need only the Summary part of an analysis."""
    from slurm_triage.analytics import plots, plots_failures

    out_dir.mkdir(parents=True, exist_ok=True)
    opts = summary.options
    figures = (
        plots.mttf_figure(summary.mttf, summary.model_rf, opts.gpus_per_node),
        plots_failures.failures_figure(summary.over_time, summary.rf.rate, opts.min_gpus),
        plots_failures.rf_by_cause_figure(summary.rf_by_cause, summary.rf.rate, opts.min_gpus),
        plots.ettr_interval_figure(
            summary.ettr_intervals,
            summary.ettr_optimum,
            summary.model_rf,
            opts.ckpt_write_s,
            _model_note(opts),
        ),
        plots_failures.taxonomy_figure(summary.taxonomy, summary.ended_rows),
        plots_failures.states_figure(summary.state_mix, summary.gpu_hours),
    )
    return tuple(
        plots.save(fig, out_dir / name) for fig, name in zip(figures, SUMMARY_FIGURES, strict=True)
    )


def render_ettr_plot(analysis: Analysis, out_dir: Path) -> Path:
    """The ETTR-by-size figure: the model, simulated means, and the measured job runs."""
    from slurm_triage.analytics import plots

    out_dir.mkdir(parents=True, exist_ok=True)
    opts = analysis.options
    fig = plots.ettr_figure(
        analysis.ettr_curves,
        analysis.ettr_simulated,
        analysis.ettr_by_size,
        analysis.model_rf,
        opts.gpus_per_node,
        _model_note(opts),
    )
    return plots.save(fig, out_dir / ETTR_FIGURE)


def write_pages(analysis: Analysis, out_dir: Path, plots: tuple[Path, ...]) -> ReportFiles:
    """summary.json and index.html next to the already drawn figures."""
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary(analysis), indent=2, default=str) + "\n")
    html_path = out_dir / "index.html"
    html_path.write_text(render_html(analysis))
    return ReportFiles(html_path, summary_path, plots)


def summary(analysis: Analysis) -> dict[str, Any]:
    """The headline numbers as plain JSON-able values."""
    rf = analysis.rf
    share = analysis.failure_share
    events = analysis.events
    projections = {
        str(g): model.mttf_hours(
            model.nodes_for_gpus(g, analysis.options.gpus_per_node), analysis.model_rf
        )
        for g in (1024, 16_384, 131_072)
    }
    return {
        "source": analysis.source,
        "rows": analysis.rows,
        "bad_lines": analysis.bad_lines,
        "steps": analysis.steps,
        "columns": analysis.columns,
        "ended_attempts": analysis.ended_rows,
        "gpu_rows": analysis.gpu_rows,
        "gpus_from_nodes": analysis.options.gpus_from_nodes,
        "job_runs": analysis.job_runs,
        "runs_in_progress": analysis.runs_in_progress,
        "unnumbered_runs": analysis.unnumbered_runs,
        "first_submit": analysis.first_submit,
        "last_end": analysis.last_end,
        "gpu_hours": analysis.gpu_hours,
        "rf_per_node_day": _finite(rf.rate),
        "rf_low": _finite(rf.low),
        "rf_high": _finite(rf.high),
        "rf_failures": rf.events,
        "rf_node_days": rf.exposure,
        "rf_min_gpus": analysis.options.min_gpus,
        "failure_sources": {
            row["failure_source"]: {
                "failures": row["failures"],
                "rf_failures": row["large_failures"],
            }
            for row in _records(analysis.failure_sources)
        },
        "node_events": {
            "source": events.source,
            "read": events.read,
            "out_of_service": events.out_of_service,
            "unparsable": events.unparsable,
            "explained_failures": events.explained_failures,
            "hinted_node_fails": events.hinted_node_fails,
            "unreadable_node_lists": events.unreadable_node_lists,
        },
        "unattributed_requeued": events.unattributed_requeued,
        "unattributed_requeued_gpu_hours": events.unattributed_requeued_gpu_hours,
        "model_rf_per_node_day": analysis.model_rf,
        "model_rf_source": analysis.model_rf_source,
        "failure_attempts": share.attempts,
        "failure_count_share": _finite(share.count_share),
        "failure_gpu_hours_share": _finite(share.gpu_hours_share),
        "rf_by_cause": _records(analysis.rf_by_cause.drop("node_days")),
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
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def _per_1000(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value * 1000:.2f}"


def _num(value: float) -> str:
    """Thousands separators for big numbers, three significant digits for small ones."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _date(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "n/a"


def summary_text(analysis: Analysis, files: ReportFiles | None = None) -> str:
    """A short terminal summary of the headline numbers."""
    rf, share, opts = analysis.rf, analysis.failure_share, analysis.options
    mix = {r["state"]: r for r in _records(analysis.state_mix)}
    skipped = [
        f"{analysis.steps:,} step rows" if analysis.steps else "",
        f"{analysis.bad_lines:,} unparsable lines" if analysis.bad_lines else "",
    ]
    skipped_text = " and ".join(s for s in skipped if s)
    lines = [
        f"{analysis.source}: {analysis.rows:,} job rows, {analysis.ended_rows:,} ended "
        f"attempts in {analysis.job_runs:,} job runs, {_num(analysis.gpu_hours)} GPU-hours"
        + (f" ({skipped_text} skipped)" if skipped_text else ""),
        f"columns: {analysis.columns}" if analysis.columns else "",
        _gpus_line(analysis),
        f"{analysis.runs_in_progress:,} job runs still pending or running left out of the "
        "job runs (their ended attempts still count)"
        if analysis.runs_in_progress
        else "",
        _unnumbered_line(analysis),
        f"period: {_date(analysis.first_submit)} to {_date(analysis.last_end)}",
        "states (jobs / GPU-hours): "
        + ", ".join(
            f"{s} {_pct(r['count_share'])}/{_pct(r['gpu_hours_share'])}"
            for s, r in mix.items()
            if r["count"]
        ),
        f"failures (NODE_FAIL, hardware/infrastructure attribution or node event): "
        f"{share.attempts:,}, {_pct(share.count_share)} of jobs, "
        f"{_pct(share.gpu_hours_share)} of GPU-hours",
        _sources_line(analysis),
        *_events_lines(analysis),
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
    return "\n".join(line for line in lines if line)


def _gpus_line(analysis: Analysis) -> str:
    """The warning when accounting gave no GPU count: every job then counts 0 GPUs, so no
    failure of a GPU job shows, or what the counts were taken from instead."""
    opts = analysis.options
    if opts.gpus_from_nodes:
        return (
            f"GPUs: a row without a gres/gpu count is taken as NNodes x {opts.gpus_per_node} "
            f"(--gpus-from-nodes; {analysis.gpu_rows:,} rows had a count)"
        )
    if analysis.gpu_rows:
        return ""
    return (
        "WARNING: no row has a GPU count (AllocTRES without gres/gpu), so every job counts "
        "0 GPUs and no failure of a GPU job shows: Slurm tracks GPUs in accounting only "
        "with AccountingStorageTRES=gres/gpu in slurm.conf (from then on); on a cluster of "
        "whole GPU nodes, --gpus-from-nodes counts NNodes x --gpus-per-node"
    )


def _unnumbered_line(analysis: Analysis) -> str:
    if not analysis.unnumbered_runs:
        return ""
    return (
        f"{analysis.unnumbered_runs:,} job runs began before the window: without Slurm's "
        "Restarts (24.11 on) their attempts cannot be numbered, so decisions about an "
        "attempt by number (journal, AdminComment n) are not joined to them"
    )


def _sources_line(analysis: Analysis) -> str:
    rows = {r["failure_source"]: r for r in _records(analysis.failure_sources)}
    parts = [
        f"{words} {rows[key]['failures']:,}/{rows[key]['large_failures']:,}"
        for key, words in SOURCE_WORDS.items()
        if key in rows
    ]
    return f"failures by source (all sizes/jobs > {analysis.options.min_gpus} GPUs): " + ", ".join(
        parts
    )


def _events_lines(analysis: Analysis) -> list[str]:
    events = analysis.events
    count, hours = events.unattributed_requeued, events.unattributed_requeued_gpu_hours
    if events.source is None:
        return [
            f"REQUEUED attempts unattributed: {count:,} ({_num(hours)} GPU-hours). Without "
            "node events, accounting cannot tell a node failure that Slurm requeued from a "
            "preemption or an admin's requeue, so none of them counts as a failure: give "
            "--events FILE (sacctmgr -P show event) or use --since."
        ]
    lines = [
        f"node events ({events.source}): {events.read:,} read, {events.out_of_service:,} "
        f"took a node out of service; they explain {events.explained_failures:,} "
        f"REQUEUED/FAILED attempts as node failures and name the cause of "
        f"{events.hinted_node_fails:,} NODE_FAIL ones"
        + (f" ({events.unparsable:,} unparsable lines skipped)" if events.unparsable else "")
        + (
            f"; {events.unreadable_node_lists:,} attempts' NodeList unreadable, not joined"
            if events.unreadable_node_lists
            else ""
        ),
        f"REQUEUED attempts with no attribution and no node event: {count:,} "
        f"({_num(hours)} GPU-hours), not counted as failures",
    ]
    return lines


def render_html(analysis: Analysis) -> str:
    """The report page."""
    opts = analysis.options
    events = analysis.events
    reasons = events.reasons.rename({"reason": "reason_text"})
    sections = [
        "<h2>Failure rate and MTTF</h2>",
        page.note(
            f"r_f counts attempts on more than {opts.min_gpus} GPUs that ended NODE_FAIL, or "
            "otherwise than COMPLETED with an attribution blaming a node for a hardware or "
            "infrastructure reason, or REQUEUED/FAILED while a node event (down, drained) "
            "began on one of their nodes from 10 minutes before their end to 5 after; per "
            "node-day of those attempts (Kokolis et al. 2024). Intervals are exact Poisson "
            f"(Garwood). Model curves use r_f {analysis.model_rf_source}."
        ),
        page.table(analysis.failure_sources),
        page.figure("rf_by_cause.png", "r_f by cause"),
        page.table(analysis.rf_by_cause, ["cause", "domain", "failures", *RF_COLUMNS]),
        page.figure("mttf.png", "MTTF by job size"),
        page.table(analysis.mttf),
        page.figure("failures.png", "failures over time"),
        "<h2>Node events</h2>",
        page.note(
            f"From {events.source}: {events.read:,} node events, {events.out_of_service:,} of "
            "them took a node out of service. The most frequent reasons among those joined:"
            if events.source
            else "No node events were given (report --events FILE, or --since): REQUEUED "
            f"attempts stay unattributed: {events.unattributed_requeued:,}, "
            f"{events.unattributed_requeued_gpu_hours:,.1f} GPU-hours."
        ),
        page.table(reasons, ["reason_text", "hint", "attempts"]) if reasons.height else "",
        "<h2>Expected ETTR</h2>",
        page.note(
            "Closed form (1 - N r_f (u0 + dt/2)) / (1 + w/dt) / (1 + N r_f q) with "
            f"u0 = {opts.assume.restart_min:g} min, w = {opts.ckpt_write_s:g} s, "
            f"q = {opts.queue_min:g} min, drawn only where valid (MTTF >= 0.1 day) and "
            f"positive; markers: Monte Carlo means of {opts.simulate_runs} runs, and the "
            "ETTR measured on this cluster's job runs."
        ),
        page.figure(ETTR_FIGURE, "ETTR by job size"),
        page.table(analysis.ettr_simulated),
        page.figure("ettr_interval.png", "ETTR by checkpoint interval"),
        page.table(analysis.ettr_optimum) if analysis.ettr_optimum.height else "",
        "<h2>Why jobs ended</h2>",
        page.figure("taxonomy.png", "taxonomy"),
        page.table(analysis.domains),
        page.table(analysis.taxonomy),
        "<h2>State mix</h2>",
        page.figure("states.png", "state mix by GPU-hours"),
        page.table(analysis.state_mix),
        "<h2>Job runs: achieved ETTR</h2>",
        page.note(
            "A job run is a requeue chain of one job id. Queue time of an attempt runs from "
            "max(Submit, the previous attempt's End) to its start. Unproductive time assumes "
            f"a checkpoint every {opts.assume.ckpt_interval_min:g} min (half of it lost per "
            f"interruption) and {opts.assume.restart_min:g} min per restart."
        ),
        page.table(analysis.ettr_by_size),
        page.table(analysis.largest_runs),
        "<h2>Goodput lost</h2>",
        page.table(analysis.goodput),
    ]
    return page.page(summary_text(analysis), analysis.source, [s for s in sections if s])
