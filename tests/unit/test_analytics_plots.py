"""The report's figures, checked on what they draw (issue 18, item 6): each data artist is
found by its gid and its data compared with the tables and the model."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from matplotlib.figure import Figure

from slurm_triage.analytics import analysis, ingest, model, node_events, plots, plots_failures
from slurm_triage.analytics.synth import SynthSpec, write_accounting

OPTIONS = analysis.ReportOptions(simulate_runs=40, ckpt_write_s=60.0)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> analysis.Analysis:
    """30k jobs in plain form with node events, starting on a Wednesday (2025-01-01), so
    the first and last weeks are partial."""
    folder = tmp_path_factory.mktemp("plots")
    sacct, events = folder / "sacct.txt", folder / "events.txt"
    spec = SynthSpec(jobs=30_000, rf_per_node_day=6.5e-3, seed=3, form="plain", days=200)
    write_accounting(spec, sacct, events_out=events)
    accounting = ingest.read_sacct_file(sacct)
    return analysis.analyse(accounting, OPTIONS, None, node_events.read_events_file(events))


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def _artists(fig: Figure, gid: str) -> list:  # type: ignore[type-arg]
    return [a for a in fig.findobj() if a.get_gid() == gid]


def _bars(fig: Figure, gid: str) -> dict[str, float]:
    """Bar lengths of a horizontal bar chart by their tick labels."""
    ax = fig.axes[0] if len(fig.axes) == 1 else next(a for a in fig.axes if _in(a, gid))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    widths = [p.get_width() for p in ax.patches if p.get_gid() == gid]
    return dict(zip(labels, widths, strict=True))


def _in(ax: plt.Axes, gid: str) -> bool:
    return any(p.get_gid() == gid for p in ax.patches)


def test_rf_by_cause_bars_are_the_table_and_add_up_to_rf(result: analysis.Analysis) -> None:
    """Failures per 1000 node-days by cause of the large jobs: one bar per cause, the
    bars sum to r_f, the title names the population."""
    fig = plots_failures.rf_by_cause_figure(result.rf_by_cause, result.rf.rate, 128)
    bars = _bars(fig, "rf_by_cause")
    table = {r["cause"]: r["rf"] * 1000 for r in result.rf_by_cause.iter_rows(named=True)}
    assert bars == pytest.approx(table)
    assert sum(bars.values()) == pytest.approx(result.rf.rate * 1000)
    assert "node_failure" in bars  # the REQUEUED failures the node events explained
    assert "jobs > 128 GPUs" in fig.axes[0].get_title()


def test_state_mix_by_gpu_hours(result: analysis.Analysis) -> None:
    """One bar per state that occurred, its share of GPU-hours in percent, summing to 100."""
    fig = plots_failures.states_figure(result.state_mix, result.gpu_hours)
    bars = _bars(fig, "states:gpu_hours_share")
    mix = result.state_mix.filter(pl.col("count") > 0)
    expected = dict(zip(mix["state"].cast(pl.String), mix["gpu_hours_share"] * 100, strict=True))
    assert bars == pytest.approx(expected)
    assert sum(bars.values()) == pytest.approx(100.0)
    assert "all ended attempts" in fig.axes[0].get_title()


def test_ettr_by_interval_marks_young_daly(result: analysis.Analysis) -> None:
    """With a write time each size's curve has Young/Daly's optimum marked at
    sqrt(2 w / (N r_f)), on the curve and within 0.5% of its highest point."""
    fig = plots.ettr_interval_figure(
        result.ettr_intervals, result.ettr_optimum, result.model_rf, 60.0, "note"
    )
    sizes = analysis.interval_view_gpus(result.model_rf, OPTIONS)
    assert len(sizes) == 3 and sizes[-1] == 4 * sizes[1] == 16 * sizes[0]
    for gpus in sizes:
        (marker,) = _artists(fig, f"optimum:{gpus}")
        x, y = marker.get_offsets()[0]
        nodes = gpus / 8
        assert x == pytest.approx(math.sqrt(2 * (60 / 86400) / (nodes * result.model_rf)) * 1440)
        (line,) = _artists(fig, f"closed_form:{gpus}")
        curve = np.asarray(line.get_ydata(), dtype=float)
        assert y == pytest.approx(float(np.nanmax(curve)), rel=5e-3)


def test_ettr_by_interval_without_write_time_marks_nothing(result: analysis.Analysis) -> None:
    """w = 0: no optimum exists; the figure says so instead of marking one."""
    fig = plots.ettr_interval_figure(
        result.ettr_intervals, result.ettr_intervals.clear(), result.model_rf, 0.0, "note"
    )
    assert not [a for a in fig.findobj() if str(a.get_gid()).startswith("optimum")]
    assert any("no optimum" in t.get_text() for t in fig.axes[0].texts)


def test_closed_form_is_not_drawn_where_invalid_or_negative(result: analysis.Analysis) -> None:
    """ETTR by size: every drawn closed-form value is positive and in the valid regime;
    beyond it the line has a gap (no flat line at 0); measured job-run ETTR per size
    bucket is on the figure at the buckets' mean GPUs."""
    rf = 6.5e-3
    curves = analysis.ettr_curves(rf, OPTIONS)
    fig = plots.ettr_figure(curves, result.ettr_simulated, result.ettr_by_size, rf, 8, "note")
    for interval in analysis.ETTR_INTERVALS_MIN:
        (line,) = _artists(fig, f"closed_form:{interval:g}")
        x = np.asarray(line.get_xdata(), dtype=float)
        y = np.asarray(line.get_ydata(), dtype=float)
        drawn = ~np.isnan(y)
        assert (y[drawn] > 0).all()
        mttf_days = 1 / (np.maximum(x[drawn] / 8, 1.0) * rf)
        assert (mttf_days >= model.VALID_MIN_MTTF_DAYS).all()
        assert np.isnan(y).any()  # 131,072 GPUs is far outside
    (measured,) = _artists(fig, "measured")
    shown = result.ettr_by_size.filter(pl.col("weighted_ettr").is_not_null())
    points = measured.get_offsets()
    assert np.allclose(points[:, 0], shown["mean_gpus"].to_numpy())
    assert np.allclose(points[:, 1], shown["weighted_ettr"].to_numpy())


def test_failures_over_time_is_one_population_with_partial_weeks_marked(
    result: analysis.Analysis,
) -> None:
    """Both panels are the jobs > 128 GPUs; the first and last weeks, which the data only
    partly covers, are drawn apart (hatched, hollow r_f marker)."""
    table = result.over_time
    assert table["every"][0] == "1w"
    assert table["partial"][0] and table["partial"][-1]
    assert not table["partial"][1:-1].any()
    fig = plots_failures.failures_figure(table, result.rf.rate, 128)
    whole = _artists(fig, "failures")
    partial = _artists(fig, "failures_partial")
    full_weeks = table.filter(~pl.col("partial"))["large_failures"].to_list()
    assert [p.get_height() for p in whole] == full_weeks
    assert len(partial) == 2 and all(p.get_hatch() == "//" for p in partial)
    (hollow,) = _artists(fig, "rf_partial")
    assert len(hollow.get_offsets()) == 2
    assert "jobs > 128 GPUs" in fig.axes[0].get_title()


def test_every_figure_title_names_its_population(result: analysis.Analysis, tmp_path: Path) -> None:
    """The report's figures all state whom they show."""
    from slurm_triage.analytics import report

    files = report.write_report(result, tmp_path)
    assert {p.name for p in files.plots} == {*report.SUMMARY_FIGURES, report.ETTR_FIGURE}
    titles = [
        plots.mttf_figure(result.mttf, result.model_rf, 8).axes[0].get_title(),
        plots_failures.taxonomy_figure(result.taxonomy, result.ended_rows)._suptitle.get_text(),  # type: ignore[union-attr]
    ]
    assert "GPU jobs" in titles[0]
    assert f"all {result.ended_rows:,} ended attempts" in titles[1]


def test_html_uses_human_headers_and_one_format_per_quantity(result: analysis.Analysis) -> None:
    """No raw column names in the page; shares are percentages with one decimal."""
    from slurm_triage.analytics import report

    page = report.render_html(result)
    for raw in ("count_share", "gpu_hours_share", "weighted_ettr", "mttf_low_hours", "rf_low"):
        assert f"<th>{raw}</th>" not in page
    for header in ("Share of GPU-hours", "r_f per 1000 node-days", "Source", "GPU-hours"):
        assert f"<th>{header}</th>" in page
    completed = result.state_mix.filter(pl.col("state") == "COMPLETED")["count_share"][0]
    assert f"<td>{100 * completed:.1f}%</td>" in page
