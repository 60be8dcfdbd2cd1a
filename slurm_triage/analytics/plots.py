"""The report's PNG figures, drawn with matplotlib's Agg backend (no display needed).

Each function takes computed tables, writes one PNG and returns its path. Every axis is
labelled with its unit; r_f is shown per 1000 node-days, the paper's unit.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from slurm_triage.analytics import model  # noqa: E402

DPI = 100
PROJECT_TO_GPUS = 131_072
DOMAIN_COLOURS = {
    "hardware": "#c0392b",
    "infrastructure": "#e67e22",
    "scheduler": "#2980b9",
    "user": "#27ae60",
    "unknown": "#7f8c8d",
    "none": "#bdc3c7",
}
# Kokolis et al. 2024, RSC-1, measured: 8-GPU jobs 47.7 days, 1024-GPU jobs 7.9 h.
PAPER_MEASURED = ((8, 47.7 * 24), (1024, 7.9))


def _save(fig: plt.Figure, path: Path, **margins: float) -> Path:
    # Fixed margins instead of tight_layout (which lays out twice); fast PNG compression,
    # since these files are written once and read by a browser.
    fig.subplots_adjust(**{"left": 0.09, "right": 0.97, "top": 0.9, "bottom": 0.11, **margins})
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})
    plt.close(fig)
    return path


def model_mttf_curve(gpus: np.ndarray, rf: float, gpus_per_node: int) -> np.ndarray:
    """MTTF in hours of jobs of `gpus` GPUs; a job smaller than a node still dies with it."""
    nodes = np.maximum(gpus / gpus_per_node, 1.0)
    return model.HOURS_PER_DAY / (nodes * rf)


def mttf_plot(table: pl.DataFrame, rf: float, gpus_per_node: int, path: Path) -> Path:
    """Measured MTTF per size bucket (95% intervals) next to the r_f model and its
    projection to PROJECT_TO_GPUS GPUs, on log-log axes."""
    fig, ax = plt.subplots(figsize=(8, 5.2))
    _measured_points(ax, table)
    for gpus, hours in PAPER_MEASURED:
        ax.scatter([gpus], [hours], marker="x", color="grey")
    ax.scatter([], [], marker="x", color="grey", label="Kokolis et al. 2024, RSC-1 measured")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="job size (GPUs)",
        ylabel="MTTF (hours)",
        title="Mean time to failure by job size",
    )
    if math.isfinite(rf) and rf > 0:
        largest = float(table["mean_gpus"].fill_nan(None).max() or 1.0)  # type: ignore[arg-type]
        _model_lines(ax, rf, gpus_per_node, largest)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def _measured_points(ax: plt.Axes, table: pl.DataFrame) -> None:
    """Buckets with failures as points with error bars; without, as lower bounds."""
    seen = table.filter(pl.col("failures") > 0)
    if seen.height:
        y = seen["mttf_hours"].to_numpy()
        low = y - seen["mttf_low_hours"].to_numpy()
        high = np.minimum(seen["mttf_high_hours"].to_numpy(), y * 1e3) - y
        label = "measured (95% exact Poisson interval)"
        ax.errorbar(
            seen["mean_gpus"], y, yerr=[low, high], fmt="o", color="#1f3b73", capsize=4, label=label
        )
    unseen = table.filter(pl.col("failures") == 0)
    if unseen.height:
        ax.scatter(
            unseen["mean_gpus"],
            unseen["mttf_low_hours"],
            marker="^",
            color="#1f3b73",
            facecolors="none",
            label="no failure seen: lower bound",
        )


def _model_lines(ax: plt.Axes, rf: float, gpus_per_node: int, largest: float) -> None:
    fit = np.logspace(0, math.log10(max(largest, 2.0)), 100)
    ahead = np.logspace(math.log10(max(largest, 2.0)), math.log10(PROJECT_TO_GPUS), 50)
    label = f"model 1/(N_nodes r_f), r_f = {rf * 1000:.3g} per 1000 node-days"
    ax.plot(fit, model_mttf_curve(fit, rf, gpus_per_node), color="#c0392b", label=label)
    ax.plot(
        ahead, model_mttf_curve(ahead, rf, gpus_per_node), "--", color="#c0392b", label="projection"
    )
    for gpus, ha in ((16_384, "left"), (PROJECT_TO_GPUS, "right")):
        hours = float(model_mttf_curve(np.array([gpus]), rf, gpus_per_node)[0])
        ax.scatter([gpus], [hours], color="#c0392b", zorder=3)
        # Left of the last point the line is higher, so text at the point's height is clear.
        offset = (8, 6) if ha == "left" else (-10, -3)
        ax.annotate(
            f"{gpus:,} GPUs: {hours:.3g} h",
            (gpus, hours),
            fontsize=8,
            xytext=offset,
            textcoords="offset points",
            ha=ha,
            va="bottom" if ha == "left" else "center",
        )
    # Room under the projection's last point for its label (log axes are set by now).
    lowest = float(model_mttf_curve(np.array([PROJECT_TO_GPUS]), rf, gpus_per_node)[0])
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, lowest / 3), high)


def ettr_plot(
    curves: pl.DataFrame,
    simulated: pl.DataFrame,
    rf: float,
    gpus_per_node: int,
    note: str,
    path: Path,
) -> Path:
    """Closed-form E[ETTR] against job size for several checkpoint intervals, simulated
    means as markers, and the sizes where the closed form is outside its valid regime.
    `note` names the other model inputs (restart, write, queue) under the title."""
    fig, ax = plt.subplots(figsize=(8, 5.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    intervals = curves["ckpt_interval_min"].unique().sort().to_list()
    for colour, interval in zip(colours, intervals, strict=False):
        part = curves.filter(pl.col("ckpt_interval_min") == interval)
        ax.plot(
            part["gpus"],
            part["ettr"].clip(0, 1),
            color=colour,
            label=f"closed form, checkpoint every {interval:g} min",
        )
        sim = simulated.filter(pl.col("ckpt_interval_min") == interval)
        if sim.height:
            ax.scatter(sim["gpus"], sim["ettr"], color=colour, marker="s", s=22, zorder=3)
    if simulated.height:
        ax.scatter([], [], color="black", marker="s", s=22, label="Monte Carlo mean")
    gpus = curves["gpus"].to_numpy()
    gpus_min, gpus_max = float(gpus.min()), float(gpus.max())
    edge = max(gpus_per_node / (model.VALID_MIN_MTTF_DAYS * rf), gpus_min)
    if edge < gpus_max:
        ax.axvspan(
            edge, gpus_max, color="grey", alpha=0.15, label="MTTF < 0.1 day: closed form not valid"
        )
    ax.set(
        xscale="log",
        ylim=(0, 1.02),
        xlabel="job size (GPUs)",
        ylabel="expected ETTR (productive / wallclock)",
        title=f"Expected ETTR at r_f = {rf * 1000:.3g} per 1000 node-days\n{note}",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return _save(fig, path, top=0.87)


def taxonomy_plot(table: pl.DataFrame, path: Path) -> Path:
    """Share of ended attempts and of GPU-hours per cause (completed left out), by domain."""
    rows = table.filter(pl.col("cause") != "completed").sort("gpu_hours")
    causes = rows["cause"].cast(pl.String).to_list()
    colours = [DOMAIN_COLOURS.get(d, "grey") for d in rows["domain"].cast(pl.String)]
    height = 0.32 * max(len(causes), 4) + 1.6
    fig, axes = plt.subplots(1, 2, figsize=(10, height), sharey=True)
    for ax, column, label in (
        (axes[0], "count_share", "share of ended jobs (%)"),
        (axes[1], "gpu_hours_share", "share of GPU-hours (%)"),
    ):
        values = (rows[column] * 100).to_numpy()
        ax.barh(causes, values, color=colours)
        for y, value in enumerate(values):
            ax.annotate(
                f"{value:.2g}",
                (value, y),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
        ax.set_xlabel(label)
        ax.set_xlim(0, max(values.max() if values.size else 1.0, 1e-9) * 1.2)
        ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=colour, label=domain) for domain, colour in DOMAIN_COLOURS.items()]
    axes[1].legend(handles=handles, fontsize=8, loc="lower right", title="domain")
    fig.suptitle("Why jobs ended: taxonomy by count and by GPU-hours")
    margins = {"bottom": 0.55 / height, "top": 1 - 0.5 / height}
    return _save(fig, path, left=0.15, right=0.98, wspace=0.06, **margins)


def failures_plot(table: pl.DataFrame, rf: float, min_gpus: int, path: Path) -> Path:
    """Failures per period (all sizes) and r_f of the large-job population over time."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    every = table["every"][0] if table.height else "1d"
    width = 0.8 if every == "1d" else 5.6
    periods = table["period"].to_list()
    top.bar(periods, table["failures"], width=width, color="#c0392b")
    top.set(
        ylabel=f"failures per {'day' if every == '1d' else 'week'}",
        title="Failures over time (NODE_FAIL or hardware/infrastructure attribution)",
    )
    rate = table["rf"].to_numpy() * 1000
    low, high = table["rf_low"].to_numpy() * 1000, table["rf_high"].to_numpy() * 1000
    bottom.fill_between(
        periods, low, high, color="#1f3b73", alpha=0.15, step="mid", label="95% exact interval"
    )
    bottom.step(periods, rate, where="mid", color="#1f3b73", label=f"r_f, jobs > {min_gpus} GPUs")
    if math.isfinite(rf):
        bottom.axhline(rf * 1000, color="black", ls="--", lw=1, label="whole period")
    top_rate = np.nanmax(rate) if np.isfinite(rate).any() else 1.0
    bottom.set_ylim(0, max(top_rate, rf * 1000 if math.isfinite(rf) else 0) * 1.6 + 1e-9)
    bottom.set(ylabel="r_f (failures per 1000 node-days)", xlabel="end of job (date)")
    if not np.isfinite(rate).any():
        bottom.text(
            0.5,
            0.5,
            f"no jobs > {min_gpus} GPUs in this period",
            ha="center",
            transform=bottom.transAxes,
            color="grey",
        )
    bottom.legend(fontsize=8, loc="upper right")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    fig.autofmt_xdate()
    return _save(fig, path, bottom=0.13, top=0.94, hspace=0.12)
