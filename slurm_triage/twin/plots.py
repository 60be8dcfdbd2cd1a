"""The twin's figures (matplotlib, Agg): ETTR by job size per policy set, and nodes out of
service over time per policy set. Every data artist carries a `gid` for tests."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from slurm_triage.twin.measure import BUCKET_LABELS, TwinResult  # noqa: E402

COLOURS = ("#7f8c8d", "#2980b9", "#c0392b", "#27ae60", "#8e44ad", "#e67e22")


def ettr_figure(results: tuple[TwinResult, ...]) -> Figure:
    """Grouped bars: GPU-time weighted ETTR per size bucket, one bar per policy set."""
    labels = [b for b in BUCKET_LABELS if any(b in r.ettr_by_bucket() for r in results)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.arange(len(labels))
    width = 0.8 / max(len(results), 1)
    for k, result in enumerate(results):
        values = result.ettr_by_bucket()
        heights = [values.get(b) or 0.0 for b in labels]
        ax.bar(
            x + (k - (len(results) - 1) / 2) * width,
            heights,
            width,
            label=result.policy,
            color=COLOURS[k % len(COLOURS)],
            gid=f"ettr-{result.policy}",
        )
    ax.set_xticks(x, labels)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel("ETTR, GPU-time weighted")
    ax.set_ylim(0, 1.05)
    ax.set_title("ETTR by job size and policy set (cluster twin)")
    ax.legend(loc="lower left")
    ax.grid(axis="y", alpha=0.3)
    return fig


def repair_figure(results: tuple[TwinResult, ...]) -> Figure:
    """Nodes out of service (drained, or down and rebooting) over time, per policy set."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for k, result in enumerate(results):
        if not result.series:
            continue
        days = [p[0] / 24.0 for p in result.series]
        out = [p[1] + p[2] for p in result.series]
        ax.plot(
            days,
            out,
            label=result.policy,
            color=COLOURS[k % len(COLOURS)],
            gid=f"out-{result.policy}",
        )
    ax.set_xlabel("day")
    ax.set_ylabel("nodes out of service")
    ax.set_title("Nodes drained, in repair or rebooting (cluster twin)")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    return fig
