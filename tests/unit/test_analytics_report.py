"""The report renders: HTML linking its PNG figures, a JSON summary and a terminal summary,
for a realistic synthetic cluster and for a tiny one with no large jobs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from slurm_triage.analytics import analysis, ingest, report
from slurm_triage.analytics.synth import SynthSpec, write_accounting
from tests.unit.test_analytics_ingest import RECORDED_WITH_HEADER

PLOTS = (
    "mttf.png",
    "failures.png",
    "rf_by_cause.png",
    "ettr_interval.png",
    "taxonomy.png",
    "states.png",
    "ettr.png",
)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> analysis.Analysis:
    path = tmp_path_factory.mktemp("synth") / "sacct.txt"
    write_accounting(SynthSpec(jobs=30_000, rf_per_node_day=6.5e-3, seed=5), path)
    options = analysis.ReportOptions(simulate_runs=50)
    return analysis.analyse(ingest.read_sacct_file(path), options)


def test_report_writes_html_plots_and_summary(synthetic: analysis.Analysis, tmp_path: Path) -> None:
    """index.html links each PNG; each PNG is a real image of readable size."""
    files = report.write_report(synthetic, tmp_path / "out")
    html = files.html.read_text()
    assert [p.name for p in files.plots] == list(PLOTS)
    for name in PLOTS:
        assert f'src="{name}"' in html
        width, height = _png_size(tmp_path / "out" / name)
        assert width >= 700 and height >= 280
    summary = json.loads(files.summary_json.read_text())
    assert summary["rf_failures"] > 0
    assert summary["rf_low"] <= summary["rf_per_node_day"] <= summary["rf_high"]


def test_summary_states_rf_per_1000_node_days_and_projections(
    synthetic: analysis.Analysis,
) -> None:
    """The terminal summary gives r_f with its interval and MTTF up to 131,072 GPUs."""
    text = report.summary_text(synthetic)
    assert "per 1000 node-days" in text
    assert "95% CI" in text
    assert "131,072 GPUs" in text
    assert "goodput lost to failures" in text


def test_html_tables_cover_every_metric(synthetic: analysis.Analysis) -> None:
    """State mix, taxonomy, MTTF by size, job runs and goodput all appear in the page."""
    html = report.render_html(synthetic)
    for needle in ("NODE_FAIL", "infiniband", "1025-4096", "ETTR, GPU-time weighted", "preemption"):
        assert needle in html


def test_simulated_points_follow_the_closed_form_where_it_is_valid(
    synthetic: analysis.Analysis,
) -> None:
    """The report's Monte Carlo markers agree with the curves at 1024 GPUs."""
    table = synthetic.ettr_simulated.filter(synthetic.ettr_simulated["gpus"] == 1024)
    assert table.height == 4
    for row in table.iter_rows(named=True):
        assert row["ettr"] == pytest.approx(row["closed_form"], rel=0.05)


def test_tiny_cluster_without_large_jobs_still_renders(tmp_path: Path) -> None:
    """Real recorded output with no job over 128 GPUs: no r_f, the paper's rate for the
    model curves, and every figure drawn."""
    source = tmp_path / "sacct.txt"
    source.write_text(RECORDED_WITH_HEADER)
    result = analysis.analyse(ingest.read_sacct_file(source))
    assert result.rf.events == 0
    assert result.model_rf == analysis.PAPER_RF
    files = report.write_report(result, tmp_path / "out")
    assert all(p.stat().st_size > 5000 for p in files.plots)
    assert "n/a per 1000 node-days" in report.summary_text(result)
