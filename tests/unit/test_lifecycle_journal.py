"""The journal's lifecycle table (migration 3): steps appended and read back per node, the
newest per node, and an existing journal of schema 2 migrated in place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from slurm_triage.journal import Journal
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.journal.store import MIGRATIONS


def _event(node: str, at: float, state: str, action: str, **more: object) -> LifecycleEvent:
    return LifecycleEvent(node, at, state, action, True, f"{state} -> {action}", **more)  # type: ignore[arg-type]


def test_steps_are_read_back_in_order_per_node(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    journal.add_lifecycle_events(
        [
            _event("node2", 10.0, "drained", "reboot", subject="gpu_unavailable", cycle=1),
            _event("node1", 11.0, "healthy", "mark_suspect", detail={"weight": 1}),
            _event("node2", 20.0, "repairing", "start_burn_in", job_id=55, cycle=1),
        ]
    )
    steps = journal.lifecycle_events(node="node2")
    assert [(s.action, s.job_id, s.cycle) for s in steps] == [
        ("reboot", None, 1),
        ("start_burn_in", 55, 1),
    ]
    assert journal.lifecycle_events(since=15.0)[0].action == "start_burn_in"
    latest = journal.latest_lifecycle()
    assert {n: e.action for n, e in latest.items()} == {
        "node1": "mark_suspect",
        "node2": "start_burn_in",
    }
    assert dict(latest["node1"].detail) == {"weight": 1}
    assert latest["node2"].to_dict()["subject"] == ""


def test_a_schema_2_journal_is_migrated(tmp_path: Path) -> None:
    """A journal written by the release before issue 16 gains the table and keeps its rows."""
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    for statement in "".join(MIGRATIONS[:2]).split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("INSERT INTO notifications (at, kind, outcome) VALUES (1, 'drain', 'sent')")
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    journal = Journal(path)
    assert journal.schema_version == len(MIGRATIONS)
    assert journal.notification_totals() == {("drain", "sent"): 1}
    journal.add_lifecycle_events([_event("node3", 1.0, "drained", "none")])
    assert journal.latest_lifecycle()["node3"].state == "drained"
