"""The report's HTML page: sections with their figures and tables.

Tables show human column headers and one number format per kind of quantity, the same in
every table: counts with thousands separators, hours and node-days with one decimal,
shares as percentages with one decimal, ETTR with three decimals, r_f per 1000 node-days
with two. Every text that came from the input (reasons, sources) is HTML-escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

import polars as pl

TITLE = "slurm-triage reliability report"


def _count(v: Any) -> str:
    return f"{int(v):,}"


def _hours(v: Any) -> str:
    return f"{v:,.1f}"


def _share(v: Any) -> str:
    return f"{100 * v:.1f}%"


def _ettr(v: Any) -> str:
    return f"{v:.3f}"


def _rf(v: Any) -> str:
    return f"{1000 * v:.2f}"


def _minutes(v: Any) -> str:
    return f"{v:,.1f}"


def _text(v: Any) -> str:
    return str(v)


# column -> (header, format); a column missing here is shown as named, as text.
COLUMNS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "state": ("State", _text),
    "cause": ("Cause", _text),
    "domain": ("Domain", _text),
    "failure_source": ("Source", _text),
    "bucket": ("Job size (GPUs)", _text),
    "reason": ("Node event reason", _text),
    "hint": ("Cause taken", _text),
    "count": ("Attempts", _count),
    "attempts": ("Attempts", _count),
    "failures": ("Failures", _count),
    "large_failures": ("Failures of the r_f population", _count),
    "runs": ("Job runs", _count),
    "long_runs": ("Runs of a day or more", _count),
    "job_raw": ("Job", _text),
    "gpus": ("GPUs", _count),
    "gpu_hours": ("GPU-hours", _hours),
    "lost_gpu_hours": ("GPU-hours lost", _hours),
    "gpu_wall_hours": ("GPU-hours", _hours),
    "run_hours": ("Run hours", _hours),
    "node_days": ("Node-days", _hours),
    "queue_hours": ("Queue hours", _hours),
    "productive_hours": ("Productive hours", _hours),
    "unproductive_hours": ("Unproductive hours", _hours),
    "mean_gpus": ("Mean GPUs", _hours),
    "mttf_hours": ("MTTF (h)", _hours),
    "mttf_low_hours": ("MTTF, 95% low (h)", _hours),
    "mttf_high_hours": ("MTTF, 95% high (h)", _hours),
    "model_mttf_hours": ("Model MTTF (h)", _hours),
    "count_share": ("Share of attempts", _share),
    "gpu_hours_share": ("Share of GPU-hours", _share),
    "share_of_gpu_hours": ("Share of all GPU-hours", _share),
    "weighted_ettr": ("ETTR, GPU-time weighted", _ettr),
    "long_median_ettr": ("Median ETTR, runs of a day or more", _ettr),
    "ettr": ("ETTR", _ettr),
    "closed_form": ("ETTR, closed form", _ettr),
    "ckpt_interval_min": ("Checkpoint interval (min)", _minutes),
    "young_daly_min": ("Young/Daly interval (min)", _minutes),
    "rf": ("r_f per 1000 node-days", _rf),
    "rf_low": ("95% low", _rf),
    "rf_high": ("95% high", _rf),
    "reason_text": ("Reason", _text),
}


def cell(column: str, value: Any) -> str:
    """One table cell as text: '-' for no value, '∞' for an infinite one."""
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "∞" if value > 0 else "-"
    return COLUMNS.get(column, (column, _text))[1](value)


def table(frame: pl.DataFrame, columns: list[str] | None = None) -> str:
    """An HTML table of `columns` (all, by default) with human headers."""
    frame = frame.select(columns) if columns else frame
    head = "".join(f"<th>{html.escape(COLUMNS.get(c, (c, _text))[0])}</th>" for c in frame.columns)
    body = []
    for row in frame.iter_rows(named=True):
        cells = "".join(f"<td>{html.escape(cell(k, v))}</td>" for k, v in row.items())
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f2f2f2}
td:first-child{text-align:left}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}.note{color:#555;font-size:0.9em}"""


def page(summary_text: str, source: str, sections: list[str]) -> str:
    """The whole page: title, the terminal summary, then the sections."""
    header = (
        f"<h1>{TITLE}</h1><p class=note>generated {datetime.now():%Y-%m-%d %H:%M}; "
        f"input {html.escape(source)}</p><pre>{html.escape(summary_text)}</pre>"
    )
    body = "\n".join([header, *sections])
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{TITLE}</title>"
        f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n"
    )


def figure(name: str, alt: str) -> str:
    return f'<img src="{html.escape(name)}" alt="{html.escape(alt)}">'


def note(text: str) -> str:
    return f"<p class=note>{html.escape(text)}</p>"
