"""The report's model figures (MTTF and ETTR), drawn with matplotlib's Agg backend.

Each `*_figure` function takes computed tables and returns the Figure (tests read what it
drew: every data artist carries a `gid`); `save` writes it as PNG. Every axis names its
unit; r_f is shown per 1000 node-days, the paper's unit, with two decimals; each title
names the one population the figure shows. plots_failures draws the accounting figures.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

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


def rf_text(rf: float) -> str:
    """r_f as every figure and table prints it: per 1000 node-days, two decimals."""
    return f"{rf * 1000:.2f} per 1000 node-days"


def margins(fig: Figure, **given: float) -> None:
    """Fixed margins (the defaults, with the figure's own changes) instead of tight_layout,
    which lays out twice."""
    fig.subplots_adjust(**{"left": 0.09, "right": 0.97, "top": 0.9, "bottom": 0.11, **given})


def save(fig: Figure, path: Path) -> Path:
    """Write the figure as PNG and free it; fast compression, since these files are
    written once."""
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})
    plt.close(fig)
    return path


def model_mttf_curve(gpus: np.ndarray, rf: float, gpus_per_node: int) -> np.ndarray:
    """MTTF in hours of jobs of `gpus` GPUs; a job smaller than a node still dies with it."""
    nodes = np.maximum(gpus / gpus_per_node, 1.0)
    return model.HOURS_PER_DAY / (nodes * rf)


def mttf_figure(table: pl.DataFrame, rf: float, gpus_per_node: int) -> Figure:
    """Measured MTTF per size bucket (95% intervals) next to the r_f model and its
    projection to PROJECT_TO_GPUS GPUs, on log-log axes; the paper's points for reference."""
    fig, ax = plt.subplots(figsize=(8, 5.2))
    _measured_points(ax, table)
    for gpus, hours in PAPER_MEASURED:
        ax.scatter([gpus], [hours], marker="x", color="grey", gid="paper")
    ax.scatter([], [], marker="x", color="grey", label="Kokolis et al. 2024, RSC-1 (reference)")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="job size (GPUs)",
        ylabel="MTTF (hours)",
        title="Mean time to failure by job size: this cluster's GPU jobs",
    )
    if math.isfinite(rf) and rf > 0:
        largest = float(table["mean_gpus"].fill_nan(None).max() or 1.0)  # type: ignore[arg-type]
        _model_lines(ax, rf, gpus_per_node, largest)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    margins(fig)
    return fig


def _measured_points(ax: plt.Axes, table: pl.DataFrame) -> None:
    """Buckets with failures as points with error bars; without, as lower bounds. A bucket
    whose failures ran 0 s (ended at once) has no MTTF to draw."""
    seen = table.filter((pl.col("failures") > 0) & (pl.col("run_hours") > 0))
    if seen.height:
        y = seen["mttf_hours"].to_numpy()
        low = y - seen["mttf_low_hours"].to_numpy()
        high = np.minimum(seen["mttf_high_hours"].to_numpy(), y * 1e3) - y
        ax.errorbar(
            seen["mean_gpus"],
            y,
            yerr=[low, high],
            fmt="o",
            color="#1f3b73",
            capsize=4,
            label="measured (95% exact Poisson interval)",
            gid="measured",
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
            gid="lower_bound",
        )


def _model_lines(ax: plt.Axes, rf: float, gpus_per_node: int, largest: float) -> None:
    fit = np.logspace(0, math.log10(max(largest, 2.0)), 100)
    ahead = np.logspace(math.log10(max(largest, 2.0)), math.log10(PROJECT_TO_GPUS), 50)
    label = f"model 1/(N_nodes r_f), r_f = {rf_text(rf)}"
    curve = model_mttf_curve(fit, rf, gpus_per_node)
    ax.plot(fit, curve, color="#c0392b", label=label, gid="model")
    ax.plot(
        ahead,
        model_mttf_curve(ahead, rf, gpus_per_node),
        "--",
        color="#c0392b",
        label="projection",
        gid="projection",
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


def drawable(values: pl.Series, valid: pl.Series) -> np.ndarray:
    """Closed-form values where the form holds (valid regime, not negative); NaN elsewhere,
    so matplotlib leaves a gap rather than a flat line at 0 that reads as "ETTR = 0"."""
    y = values.cast(pl.Float64).fill_null(np.nan).to_numpy()
    ok = valid.cast(pl.Boolean).fill_null(False).to_numpy().astype(bool)
    return np.where(ok & (y > 0), y, np.nan)


def ettr_figure(
    curves: pl.DataFrame,
    simulated: pl.DataFrame,
    measured: pl.DataFrame,
    rf: float,
    gpus_per_node: int,
    note: str,
) -> Figure:
    """Closed-form E[ETTR] against job size for several checkpoint intervals (drawn only
    where it is valid), Monte Carlo means, and this cluster's measured ETTR per size bucket
    (GPU-time weighted over its job runs, queue time included)."""
    fig, ax = plt.subplots(figsize=(8, 5.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    intervals = curves["ckpt_interval_min"].unique().sort().to_list()
    for colour, interval in zip(colours, intervals, strict=False):
        part = curves.filter(pl.col("ckpt_interval_min") == interval)
        ax.plot(
            part["gpus"],
            drawable(part["ettr"], part["valid"]),
            color=colour,
            label=f"closed form, checkpoint every {interval:g} min",
            gid=f"closed_form:{interval:g}",
        )
        sim = simulated.filter(pl.col("ckpt_interval_min") == interval)
        if sim.height:
            ax.scatter(
                sim["gpus"], sim["ettr"], color=colour, marker="s", s=22, zorder=3, gid="simulated"
            )
    if simulated.height:
        ax.scatter([], [], color="black", marker="s", s=22, label="Monte Carlo mean")
    shown = measured.filter(pl.col("weighted_ettr").is_not_null() & (pl.col("mean_gpus") > 0))
    if shown.height:
        ax.scatter(
            shown["mean_gpus"],
            shown["weighted_ettr"],
            marker="D",
            color="black",
            facecolors="none",
            s=40,
            zorder=4,
            label="measured on this cluster's job runs (GPU-time weighted)",
            gid="measured",
        )
    gpus = curves["gpus"].to_numpy()
    gpus_min, gpus_max = float(gpus.min()), float(gpus.max())
    edge = max(gpus_per_node / (model.VALID_MIN_MTTF_DAYS * rf), gpus_min)
    if edge < gpus_max:
        ax.axvspan(
            edge,
            gpus_max,
            color="grey",
            alpha=0.15,
            label="MTTF < 0.1 day: closed form not valid (not drawn)",
        )
    ax.set(
        xscale="log",
        ylim=(0, 1.02),
        xlabel="job size (GPUs)",
        ylabel="ETTR (productive / wallclock)",
        title=f"Expected ETTR of a job run by size, r_f = {rf_text(rf)}\n{note}",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    margins(fig, top=0.87)
    return fig


def ettr_interval_figure(
    curves: pl.DataFrame, optimum: pl.DataFrame, rf: float, write_s: float, note: str
) -> Figure:
    """E[ETTR] against the checkpoint interval at a few job sizes, with Young/Daly's
    optimum marked on each curve; with no write time (`write_s` 0) there is no optimum to
    mark, and the figure says so."""
    fig, ax = plt.subplots(figsize=(8, 5.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for colour, gpus in zip(colours, curves["gpus"].unique().sort().to_list(), strict=False):
        part = curves.filter(pl.col("gpus") == gpus)
        ax.plot(
            part["ckpt_interval_min"],
            drawable(part["ettr"], part["valid"]),
            color=colour,
            label=f"{gpus:,} GPUs",
            gid=f"closed_form:{gpus}",
        )
        best = optimum.filter(pl.col("gpus") == gpus)
        if best.height and best["valid"][0] and best["ettr"][0] > 0:
            x, y = float(best["young_daly_min"][0]), float(best["ettr"][0])
            ax.scatter([x], [y], color=colour, marker="*", s=120, zorder=3, gid=f"optimum:{gpus}")
            ax.annotate(
                f"{x:.3g} min", (x, y), xytext=(4, 6), textcoords="offset points", fontsize=8
            )
    if optimum.height:
        ax.scatter([], [], color="black", marker="*", s=80, label="Young/Daly sqrt(2w / N r_f)")
    else:
        why = "no checkpoint write time given (--ckpt-write-s)" if write_s <= 0 else "no size"
        ax.text(
            0.5,
            0.06,
            f"{why}: no optimum to mark",
            ha="center",
            transform=ax.transAxes,
            color="grey",
        )
    ax.set(
        xscale="log",
        ylim=(0, 1.02),
        xlabel="checkpoint interval (minutes)",
        ylabel="ETTR (productive / wallclock)",
        title=f"Expected ETTR by checkpoint interval, r_f = {rf_text(rf)}\n{note}",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower center")
    margins(fig, top=0.87)
    return fig
