"""Node events joined with attempts (issue 18, item 1): which attempts an event explains
(state, window, node), which cause it names, and how each failure is counted once under
its source."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from slurm_triage.analytics import analysis, ingest, metrics, node_events
from slurm_triage.analytics.ingest import IngestError
from slurm_triage.slurm.model import NodeEvent, NodeEventLog

END = datetime(2026, 3, 1, 12, 0, 0)
FMT = "%Y-%m-%dT%H:%M:%S"


def _row(job: int, state: str, nodes: str = "node[1-32]", comment: str = "") -> str:
    start = END - timedelta(hours=2)
    return (
        f"{job}|{job}|{state}|0:0|{start:{FMT}}|{start:{FMT}}|{END:{FMT}}|7200|32|"
        f"billing=256,gres/gpu=256,node=32|{nodes}|p|u|{comment}"
    )


def _event(node: str, offset_s: float, state: str = "DOWN*", reason: str = "Not responding"):  # type: ignore[no-untyped-def]
    return NodeEvent(node, END + timedelta(seconds=offset_s), None, state, reason, "")


def _analyse(rows: list[str], events: list[NodeEvent]) -> analysis.Attempts:
    accounting = ingest.read_sacct_text("\n".join(rows) + "\n")
    log = node_events.from_log(NodeEventLog(tuple(events)), "test")
    return analysis.ended_attempts(accounting, None, log)


def _sources(attempts: analysis.Attempts) -> list[str]:
    return attempts.done.sort("job_raw")["failure_source"].cast(pl.String).to_list()


@pytest.mark.parametrize(
    ("offset_s", "joined"),
    [(-600, True), (-601, False), (300, True), (301, False), (0, True)],
)
def test_the_window_is_ten_minutes_before_to_five_after_the_end(
    offset_s: float, joined: bool
) -> None:
    """TAXONOMY.md rule 5: an event from 10 minutes before the attempt's end to 5 after."""
    attempts = _analyse([_row(1, "REQUEUED")], [_event("node7", offset_s)])
    assert _sources(attempts) == (["node_event"] if joined else ["none"])


def test_only_events_on_the_attempts_own_nodes_count() -> None:
    """node33 is not in node[1-32]; node1 of a one-node job is compared as a name."""
    attempts = _analyse(
        [_row(1, "REQUEUED"), _row(2, "FAILED", nodes="node1"), _row(3, "FAILED", "node10")],
        [_event("node33", 0), _event("node1", 0)],
    )
    assert _sources(attempts) == ["node_event", "node_event", "none"]


def test_states_and_causes_an_event_can_explain() -> None:
    """REQUEUED, FAILED (no attribution, or a cascade like nccl_timeout) and NODE_FAIL are
    explained; a preemption, a completion or a user's own error are not."""
    user = '{"triage":{"cause":"user_code","n":1}}'
    cascade = '{"triage":{"cause":"nccl_timeout","n":1}}'
    rows = [
        _row(1, "REQUEUED"),
        _row(2, "FAILED", comment=cascade),
        _row(3, "NODE_FAIL"),
        _row(4, "PREEMPTED"),
        _row(5, "COMPLETED"),
        _row(6, "FAILED", comment=user),
    ]
    attempts = _analyse(rows, [_event("node5", 10)])
    assert _sources(attempts) == [
        "node_event",
        "node_event",
        "node_fail",
        "none",
        "none",
        "none",
    ]
    assert attempts.joined.height == 3


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        ("triage: gpu_memory job=1: XID 48", "gpu_memory"),
        ("triage: gpu.row_remap 2 rows pending", "health_check"),
        ("triage: user_code job=1: KeyError", "node_failure"),
        ("Not responding", "node_failure"),
        ("Kill task failed", "node_failure"),
    ],
)
def test_the_events_reason_is_the_cause_hint(reason: str, cause: str) -> None:
    """Our drain names the cause (a failure cause only; a user cause never blames a node),
    a health check's drain is health_check, anything else Slurm's node_failure."""
    attempts = _analyse([_row(1, "REQUEUED")], [_event("node3", 30, "DRAIN", reason)])
    assert attempts.done["cause"].cast(pl.String).to_list() == [cause]
    assert attempts.done["domain"].cast(pl.String).to_list() == [
        "infrastructure" if cause == "health_check" else "hardware"
    ]


def test_events_that_do_not_take_a_node_out_are_ignored() -> None:
    """A maintenance reservation or a power-save event on the node says nothing."""
    events = [_event("node3", 0, "MAINT", "planned"), _event("node4", 0, "POWERED_DN", "")]
    assert _sources(_analyse([_row(1, "REQUEUED")], events)) == ["none"]


def test_the_nearest_event_gives_the_hint() -> None:
    """Two events on the job's nodes: the one nearest the end names the cause."""
    events = [
        _event("node2", -500, "DRAIN", "Kill task failed"),
        _event("node9", 20, "DRAIN", "triage: infiniband job=1: port down"),
    ]
    attempts = _analyse([_row(1, "REQUEUED")], events)
    assert attempts.done["cause"].cast(pl.String).to_list() == ["infiniband"]
    assert attempts.joined["node"].to_list() == ["node9"]


def test_each_failure_counts_once_under_its_source() -> None:
    """NODE_FAIL rows, our attributions and joined events are separate counts that add up
    to the failures r_f counts; a NODE_FAIL joined with an event stays a NODE_FAIL."""
    hardware = '{"triage":{"cause":"pcie","n":1}}'
    rows = [
        _row(1, "NODE_FAIL"),
        _row(2, "FAILED", comment=hardware),
        _row(3, "REQUEUED"),
        _row(4, "REQUEUED", nodes="node[100-131]"),
    ]
    attempts = _analyse(rows, [_event("node1", 5)])
    table = metrics.cube(attempts.done)
    sources = {
        row["failure_source"]: row["failures"]
        for row in metrics.failure_sources(table).iter_rows(named=True)
    }
    assert sources == {"node_fail": 1, "attribution": 1, "node_event": 1}
    assert metrics.failure_rate(table).events == 3
    count, hours = node_events.unattributed_requeues(attempts.done)
    assert (count, hours) == (1, 512.0)


def test_without_events_or_nodelist_nothing_is_joined(tmp_path: Path) -> None:
    """No events: the attempts are as attributed; a file without NodeList cannot join."""
    rows = [_row(1, "REQUEUED")]
    accounting = ingest.read_sacct_text("\n".join(rows) + "\n")
    plain = analysis.ended_attempts(accounting, None, None)
    assert _sources(plain) == ["none"] and plain.joined.height == 0
    headed = "JobIDRaw|State|Submit|End|ElapsedRaw|NNodes\n" + (
        f"1|REQUEUED|{END:{FMT}}|{END:{FMT}}|7200|32\n"
    )
    no_nodes = ingest.read_sacct_text(headed)
    log = node_events.from_log(NodeEventLog((_event("node1", 0),)), "test")
    assert _sources(analysis.ended_attempts(no_nodes, None, log)) == ["none"]


def test_reading_an_events_file(tmp_path: Path) -> None:
    """A saved sacctmgr file reads with its counts; a missing file, a wrong header or a
    file with no event row is a one-line IngestError naming it."""
    good = tmp_path / "events.txt"
    good.write_text(
        "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n"
        "c||2026-01-01T00:00:00|Unknown|||\n"
        "c|node1|2026-01-01T00:00:00|Unknown|DOWN*|Not responding|\n"
        "c|node2|2026-01-01T00:00:00|Unknown|MAINT||root(0)\n"
    )
    events = node_events.read_events_file(good)
    assert (events.read, events.out_of_service, events.cluster_events) == (2, 1, 1)
    bad = tmp_path / "bad.txt"
    for content, message in (
        ("NodeName|TimeStart\nn1|2026-01-01T00:00:00\n", "lacks State"),
        ("hello\nworld\n", "no node event rows"),
    ):
        bad.write_text(content)
        with pytest.raises(IngestError, match=message) as raised:
            node_events.read_events_file(bad)
        assert str(bad) in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(IngestError, match="no such file"):
        node_events.read_events_file(tmp_path / "absent")


def test_node_lists_are_read_only_when_asked() -> None:
    """A report without node events reads no NodeList (it costs a string per failed row);
    one with them keeps NodeList on REQUEUED, NODE_FAIL and FAILED rows only."""
    text = "\n".join([_row(1, "REQUEUED"), _row(2, "COMPLETED"), _row(3, "FAILED")]) + "\n"
    kept = ingest.read_sacct_text(text).attempts["nodelist"].to_list()
    assert kept == ["node[1-32]", None, "node[1-32]"]
    assert "nodelist" not in ingest.read_sacct_text(text, node_lists=False).attempts.columns
