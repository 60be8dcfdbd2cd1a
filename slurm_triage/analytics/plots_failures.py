"""The report's accounting figures: why attempts ended, the state mix, failures over time
and r_f by cause. Same conventions as plots.py (a Figure per function, `gid` on every
data artist, units on every axis, the population in every title, percentages with one
decimal, r_f per 1000 node-days with two)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from slurm_triage.analytics.plots import DOMAIN_COLOURS, margins, rf_text

STATE_COLOURS = {
    "COMPLETED": "#bdc3c7",
    "FAILED": "#e67e22",
    "NODE_FAIL": "#c0392b",
    "REQUEUED": "#8e44ad",
    "PREEMPTED": "#2980b9",
    "CANCELLED": "#16a085",
    "TIMEOUT": "#f1c40f",
    "OUT_OF_MEMORY": "#27ae60",
    "OTHER": "#7f8c8d",
}


def _bar_labels(ax: plt.Axes, values: np.ndarray, text: list[str]) -> None:
    for y, (value, label) in enumerate(zip(values, text, strict=True)):
        ax.annotate(
            label, (value, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7
        )


def taxonomy_figure(table: pl.DataFrame, attempts: int) -> Figure:
    """Share of ended attempts and of GPU-hours per cause (completed left out), by domain."""
    rows = table.filter(pl.col("cause") != "completed").sort("gpu_hours")
    labels = rows["cause"].cast(pl.String).to_list()
    colours = [DOMAIN_COLOURS.get(d, "grey") for d in rows["domain"].cast(pl.String)]
    height = 0.32 * max(len(labels), 4) + 1.6
    fig, axes = plt.subplots(1, 2, figsize=(10, height), sharey=True)
    for ax, column, label in (
        (axes[0], "count_share", "share of ended attempts (%)"),
        (axes[1], "gpu_hours_share", "share of GPU-hours (%)"),
    ):
        values = (rows[column] * 100).to_numpy()
        ax.barh(labels, values, color=colours, gid=f"taxonomy:{column}")
        _bar_labels(ax, values, [f"{v:.1f}%" for v in values])
        ax.set_xlabel(label)
        ax.set_xlim(0, max(values.max() if values.size else 1.0, 1e-9) * 1.2)
        ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=colour, label=domain) for domain, colour in DOMAIN_COLOURS.items()]
    axes[1].legend(handles=handles, fontsize=8, loc="lower right", title="domain")
    fig.suptitle(f"Why attempts ended: all {attempts:,} ended attempts, by count and GPU-hours")
    margins(fig, left=0.15, right=0.98, wspace=0.06, bottom=0.55 / height, top=1 - 0.5 / height)
    return fig


def states_figure(mix: pl.DataFrame, gpu_hours: float) -> Figure:
    """How attempts ended, by share of GPU-hours (the paper's view: a few large jobs hold
    most of the time), with the share of attempts next to each bar."""
    rows = mix.filter(pl.col("count") > 0).sort("gpu_hours")
    labels = rows["state"].cast(pl.String).to_list()
    values = (rows["gpu_hours_share"] * 100).to_numpy()
    counts = (rows["count_share"] * 100).to_numpy()
    height = 0.34 * max(len(labels), 4) + 1.6
    fig, ax = plt.subplots(figsize=(8, height))
    colours = [STATE_COLOURS.get(s, "grey") for s in labels]
    ax.barh(labels, values, color=colours, gid="states:gpu_hours_share")
    text = [f"{v:.1f}% ({c:.1f}% of attempts)" for v, c in zip(values, counts, strict=True)]
    _bar_labels(ax, values, text)
    ax.set_xlim(0, max(values.max() if values.size else 1.0, 1e-9) * 1.45)
    ax.set(
        xlabel="share of GPU-hours (%)",
        title=f"Job-state mix by GPU-hours: all ended attempts ({gpu_hours:,.0f} GPU-hours)",
    )
    ax.grid(True, axis="x", alpha=0.3)
    margins(fig, left=0.2, bottom=0.55 / height, top=1 - 0.5 / height)
    return fig


def rf_by_cause_figure(table: pl.DataFrame, rf: float, min_gpus: int) -> Figure:
    """r_f of the large attempts split by the cause of each failure, per 1000 node-days,
    with exact 95% intervals; the parts add up to the whole r_f."""
    rows = table.sort("rf")
    labels = rows["cause"].cast(pl.String).to_list()
    height = 0.34 * max(len(labels), 4) + 1.6
    fig, ax = plt.subplots(figsize=(8, height))
    values = rows["rf"].to_numpy() * 1000
    low = values - rows["rf_low"].to_numpy() * 1000
    high = rows["rf_high"].to_numpy() * 1000 - values
    colours = [DOMAIN_COLOURS.get(d, "grey") for d in rows["domain"].cast(pl.String)]
    ax.barh(labels, values, color=colours, gid="rf_by_cause")
    if rows.height:
        ax.errorbar(values, np.arange(rows.height), xerr=[low, high], fmt="none", color="black")
        _bar_labels(ax, values + high, [f"{v:.2f}" for v in values])
    else:
        ax.text(0.5, 0.5, "no failures", ha="center", transform=ax.transAxes, color="grey")
    whole = rf_text(rf) if math.isfinite(rf) else "n/a"
    ax.set(
        xlabel="failures per 1000 node-days (95% exact interval)",
        title=f"Failure rate by cause: jobs > {min_gpus} GPUs (r_f {whole})",
    )
    ax.grid(True, axis="x", alpha=0.3)
    margins(fig, left=0.2, bottom=0.55 / height, top=1 - 0.5 / height)
    return fig


def failures_figure(table: pl.DataFrame, rf: float, min_gpus: int) -> Figure:
    """Failures per period and r_f per period, both of the jobs > min_gpus GPUs; periods
    the data only partly covers are hatched and their r_f drawn hollow."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    every = table["every"][0] if table.height else "1d"
    unit = "day" if every == "1d" else "week"
    width = 0.8 if every == "1d" else 5.6
    whole = table.filter(~pl.col("partial")) if table.height else table
    part = table.filter(pl.col("partial")) if table.height else table
    top.bar(
        whole["period"].to_list(),
        whole["large_failures"],
        width=width,
        color="#c0392b",
        gid="failures",
    )
    if part.height:
        top.bar(
            part["period"].to_list(),
            part["large_failures"],
            width=width,
            color="#f5b7b1",
            hatch="//",
            label=f"partial {unit} (data covers part of it)",
            gid="failures_partial",
        )
        top.legend(fontsize=8, loc="upper right")
    top.set(
        ylabel=f"failures per {unit}",
        title=f"Failures over time: jobs > {min_gpus} GPUs (NODE_FAIL, attributions, node events)",
    )
    _rf_panel(bottom, table, rf, min_gpus)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    fig.autofmt_xdate()
    margins(fig, bottom=0.13, top=0.94, hspace=0.12)
    return fig


def _rf_panel(ax: plt.Axes, table: pl.DataFrame, rf: float, min_gpus: int) -> None:
    periods = table["period"].to_list()
    rate = table["rf"].to_numpy() * 1000
    low, high = table["rf_low"].to_numpy() * 1000, table["rf_high"].to_numpy() * 1000
    ax.fill_between(
        periods, low, high, color="#1f3b73", alpha=0.15, step="mid", label="95% exact interval"
    )
    ax.step(periods, rate, where="mid", color="#1f3b73", label="r_f per period", gid="rf")
    partial = table["partial"].to_numpy() if table.height else np.array([], dtype=bool)
    if partial.any():
        ax.scatter(
            [p for p, flag in zip(periods, partial, strict=True) if flag],
            rate[partial],
            facecolors="white",
            edgecolors="#1f3b73",
            zorder=3,
            label="partial period",
            gid="rf_partial",
        )
    if math.isfinite(rf):
        ax.axhline(rf * 1000, color="black", ls="--", lw=1, label="whole period", gid="rf_whole")
    top_rate = np.nanmax(rate) if np.isfinite(rate).any() else 1.0
    ax.set_ylim(0, max(top_rate, rf * 1000 if math.isfinite(rf) else 0) * 1.6 + 1e-9)
    ax.set(ylabel="r_f (failures per 1000 node-days)", xlabel="end of job (date)")
    if not np.isfinite(rate).any():
        ax.text(
            0.5,
            0.5,
            f"no jobs > {min_gpus} GPUs in this period",
            ha="center",
            transform=ax.transAxes,
            color="grey",
        )
    ax.legend(fontsize=8, loc="upper right")
