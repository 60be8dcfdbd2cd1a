"""The twin's answer: the terminal summary, JSON, and the HTML page with its PNG figures."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from slurm_triage.twin.measure import BUCKET_LABELS, TwinResult
from slurm_triage.twin.run import Comparison
from slurm_triage.twin.validate import Validation


def _ettr(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def headline(c: Comparison) -> str:
    s = c.scenario
    work = (
        f"{c.jobs:,} jobs ({c.workload_source})"
        if not s.fixed_sizes_gpus
        else f"job streams of {', '.join(str(g) for g in s.fixed_sizes_gpus)} GPUs"
    )
    return (
        f"cluster twin: {s.nodes:,} nodes x {s.gpus_per_node} GPUs, {s.days:g} days "
        f"({s.warmup_days:g} warm-up), r_f {s.rf_per_node_day * 1000:.2f} per 1000 "
        f"node-days, {c.lemons} lemon nodes at {s.lemon_factor:g}x; {work}, "
        f"{c.fault_events:,} fault events; seed {s.seed}"
    )


def _rows(results: tuple[TwinResult, ...]) -> list[tuple[str, list[str]]]:
    def fig(r: TwinResult, *keys: str) -> Any:
        value: Any = r.figures
        for key in keys:
            value = value[key]
        return value

    def each(render: Any) -> list[str]:
        return [render(r) for r in results]

    return [
        ("goodput (productive / GPU capacity)", each(lambda r: _pct(fig(r, "goodput")))),
        ("GPU utilisation", each(lambda r: _pct(fig(r, "utilisation")))),
        (
            "512+ GPU attempts ended by a fault",
            each(lambda r: _pct(fig(r, "large_jobs", "attempt_failure_rate"))),
        ),
        (
            "512+ GPU runs that saw a fault",
            each(lambda r: _pct(fig(r, "large_jobs", "run_failure_rate"))),
        ),
        ("attempts ended by a fault", each(lambda r: f"{fig(r, 'job_failures'):,}")),
        (
            "requeues (Slurm / ours)",
            each(lambda r: f"{fig(r, 'requeues', 'slurm'):,} / {fig(r, 'requeues', 'ours'):,}"),
        ),
        ("jobs held", each(lambda r: f"{fig(r, 'holds'):,}")),
        ("resubmitted by users", each(lambda r: f"{fig(r, 'resubmissions'):,}")),
        (
            "preemptions (GPU-h lost)",
            each(lambda r: f"{fig(r, 'preemptions'):,} ({fig(r, 'preempted_gpu_h_lost'):,.0f})"),
        ),
        ("drains", each(lambda r: f"{sum(fig(r, 'drains').values()):,}")),
        ("false drains", each(lambda r: f"{fig(r, 'false_drains'):,}")),
        (
            "lemons drained (fixed)",
            each(lambda r: f"{fig(r, 'lemons', 'drained')} ({fig(r, 'lemons', 'fixed')})"),
        ),
        ("breaker trips", each(lambda r: f"{fig(r, 'breaker_trips'):,}")),
        ("mean nodes out of service", each(lambda r: f"{_mean_out(r):.1f}")),
        ("seconds", each(lambda r: f"{r.seconds:.1f}")),
    ]


def _mean_out(r: TwinResult) -> float:
    return sum(p[1] + p[2] for p in r.series) / len(r.series) if r.series else 0.0


def summary(c: Comparison) -> str:
    """The terminal answer: ETTR by size per policy set, then the other figures."""
    names = [r.policy for r in c.results]
    width = max(16, *(len(n) + 2 for n in names))
    lines = [headline(c), ""]
    lines.append("ETTR by job size (GPU-time weighted, from first start; runs in brackets):")
    lines.append(f"  {'GPUs':<12}" + "".join(f"{n:>{width + 8}}" for n in names))
    for label in BUCKET_LABELS:
        cells = []
        for r in c.results:
            b = next((b for b in r.figures["buckets"] if b["bucket"] == label), None)
            cells.append("-" if b is None else f"{_ettr(b['ettr'])} ({b['runs']:,})")
        if any(cell != "-" for cell in cells):
            lines.append(f"  {label:<12}" + "".join(f"{cell:>{width + 8}}" for cell in cells))
    lines.append("")
    label_width = max(len(label) for label, _ in _rows(c.results)) + 2
    lines.append(f"  {'':<{label_width}}" + "".join(f"{n:>{width}}" for n in names))
    for label, cells in _rows(c.results):
        lines.append(f"  {label:<{label_width}}" + "".join(f"{cell:>{width}}" for cell in cells))
    lines.append("")
    lines += [f"  {r.policy}: {r.description}" for r in c.results]
    lines.append(f"total {c.seconds:.1f} s")
    return "\n".join(lines)


def validation_summary(v: Validation) -> str:
    s = v.scenario
    lines = [
        f"twin vs model: uniform nodes, no policy, r_f {s.rf_per_node_day * 1000:.2f} per 1000 "
        f"node-days, u0 {s.restart_min:g} min, checkpoint every {s.ckpt_interval_min:g} min, "
        f"write {s.ckpt_write_s:g} s; {s.nodes:,} nodes, {s.days:g} days",
        f"  {'GPUs':>6} {'failures':>8} {'MTTF model':>10} {'twin (95%)':>22} "
        f"{'closed form':>11} {'Monte Carlo':>11} {'twin':>7} {'gap CF':>7} {'gap MC':>7}",
    ]
    for r in v.rows:
        valid = "" if r.closed_form_valid else "*"
        interval = f"{r.mttf_twin_h:.2f} ({r.mttf_low_h:.2f}-{r.mttf_high_h:.2f})"
        lines.append(
            f"  {r.gpus:>6} {r.failures:>8} {r.mttf_model_h:>9.2f}h {interval:>22} "
            f"{r.ettr_closed_form:>10.4f}{valid:1} {r.ettr_monte_carlo:>11.4f} "
            f"{r.ettr_twin:>7.4f} {100 * r.gap_closed_form:>6.2f}% {100 * r.gap_monte_carlo:>6.2f}%"
        )
    if not all(r.closed_form_valid for r in v.rows):
        lines.append("  * outside the closed form's valid regime (MTTF < 0.1 day)")
    verdict = "within" if v.passed() else "NOT within"
    lines.append(
        f"  {verdict} 2% (closed form where valid, Monte Carlo everywhere); {v.seconds:.1f} s"
    )
    return "\n".join(lines)


def write_json(c: Comparison, validation: Validation | None) -> str:
    data = c.to_dict()
    if validation is not None:
        data["validation"] = validation.to_dict()
    return json.dumps(data, indent=2, default=str)


def write_html(c: Comparison, validation: Validation | None, out: Path) -> Path:
    """index.html, ettr.png, repair.png and summary.json under `out`."""
    from slurm_triage.analytics import html_page
    from slurm_triage.analytics.plots import save
    from slurm_triage.twin import plots

    out.mkdir(parents=True, exist_ok=True)
    save(plots.ettr_figure(c.results), out / "ettr.png")
    save(plots.repair_figure(c.results), out / "repair.png")
    (out / "summary.json").write_text(write_json(c, validation))
    text = summary(c) + ("\n\n" + validation_summary(validation) if validation else "")
    sections = [
        "<h2>Cluster twin</h2>",
        html_page.note(headline(c)),
        html_page.figure("ettr.png", "ETTR by job size and policy set"),
        _table(c),
        html_page.figure("repair.png", "nodes out of service over time"),
        html_page.note(
            "Policy sets: "
            + "; ".join(f"{r.policy}: {r.description}" for r in c.results)
            + ". Model and assumptions: docs/twin.md."
        ),
    ]
    page = html_page.page(text, "slurm-triage twin", sections)
    path = out / "index.html"
    path.write_text(page)
    return path


def _table(c: Comparison) -> str:
    head = "".join(f"<th>{html.escape(r.policy)}</th>" for r in c.results)
    rows = [
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells)
        + "</tr>"
        for label, cells in _rows(c.results)
    ]
    return f"<table><tr><th></th>{head}</tr>{''.join(rows)}</table>"
