"""contrib/grafana-dashboard.json: a well-formed Grafana dashboard (the classic JSON model)
whose queries use only series and labels that slurm-triage emits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from slurm_triage.observe.controller import CONTROLLER_SPECS
from slurm_triage.observe.exposition import Kind
from slurm_triage.observe.node_ledger import NODE_SPECS

DASHBOARD = Path(__file__).resolve().parents[2] / "contrib" / "grafana-dashboard.json"
PANEL_TYPES = {"row", "timeseries", "stat", "bargauge", "table", "gauge", "text"}
GRID_WIDTH = 24
# PromQL words that may stand before `(` or in `by (...)` without being a series.
_SELECTOR = re.compile(r"\b(slurm_triage_[a-z_]+)\s*(\{[^}]*\})?")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


def _emitted() -> dict[str, set[str]]:
    """Each sample name slurm-triage can emit, and the labels it carries."""
    names: dict[str, set[str]] = {}
    for spec in (*CONTROLLER_SPECS, *NODE_SPECS):
        for name in spec.sample_names():
            labels = set(spec.labels)
            if spec.kind is Kind.HISTOGRAM and name.endswith("_bucket"):
                labels.add("le")
            names[name] = labels
    return names


def _panels() -> list[dict[str, Any]]:
    return list(json.loads(DASHBOARD.read_text())["panels"])


def test_dashboard_has_the_structure_grafana_imports() -> None:
    """Title, uid, an integer schemaVersion, a Prometheus datasource variable; every panel
    an id, a known type, a title and a gridPos inside the 24-column grid; every non-row
    panel queries through the variable with lettered refIds."""
    dash = json.loads(DASHBOARD.read_text())
    assert isinstance(dash["title"], str) and dash["title"]
    assert isinstance(dash["uid"], str) and len(dash["uid"]) <= 40
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    (variable,) = dash["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    for panel in dash["panels"]:
        assert panel["type"] in PANEL_TYPES, panel["type"]
        assert panel["title"]
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("x", "y", "w", "h"))
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= GRID_WIDTH and grid["h"] > 0
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        targets = panel["targets"]
        assert targets and [t["refId"] for t in targets] == [
            chr(65 + i) for i in range(len(targets))
        ]
        assert all(t["expr"].strip() for t in targets)


def test_panels_do_not_overlap() -> None:
    """No two panels share a cell of the grid."""
    taken: dict[tuple[int, int], str] = {}
    for panel in _panels():
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_queries_use_only_series_and_labels_we_emit() -> None:
    """Every `slurm_triage_*` name in a query is a sample the code emits (counters as
    `_total`, histograms as `_bucket`); every label matched or grouped by is one of its
    labels (`le` for buckets)."""
    emitted = _emitted()
    used: set[str] = set()
    for panel in _panels():
        for target in panel.get("targets", []):
            expr = target["expr"]
            selectors = _SELECTOR.findall(expr)
            assert selectors, f"{panel['title']}: no slurm-triage series in {expr!r}"
            labels_here: set[str] = set()
            for name, matchers in selectors:
                assert name in emitted, f"{panel['title']}: {name} is not emitted"
                used.add(name)
                labels_here |= emitted[name]
                for label in _MATCHER.findall(matchers):
                    assert label in emitted[name], f"{panel['title']}: {name} has no {label}"
            for group in _GROUPING.findall(expr):
                for label in filter(None, (g.strip() for g in group.split(","))):
                    assert label in labels_here, f"{panel['title']}: no label {label}"
    # Each family worth a panel is on the dashboard.
    for family in ("slurm_triage_decisions_total", "slurm_triage_lost_gpu_seconds_total"):
        assert family in used
    assert "slurm_triage_requeue_latency_seconds_bucket" in used
    assert "slurm_triage_health_check_status" in used


def test_the_grouping_check_catches_a_wrong_label() -> None:
    """The checks above can fail: a query grouping by a label the series lacks is caught."""
    emitted = _emitted()
    expr = "sum by (job_id) (increase(slurm_triage_decisions_total[1h]))"
    (selector,) = _SELECTOR.findall(expr)
    (group,) = _GROUPING.findall(expr)
    assert group not in emitted[selector[0]]
    assert "slurm_triage_decisions" not in emitted  # the family name is not a sample name
