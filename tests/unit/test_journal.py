"""The journal: SQLite WAL, versioned migrations, one decision per job end under races."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest

from slurm_triage.journal import Journal, JournalError, NodeEvent
from slurm_triage.journal.store import MIGRATIONS


def test_new_journal_is_migrated_and_in_wal_mode(tmp_path: Path) -> None:
    """A new journal gets every migration and WAL journaling."""
    journal = Journal(tmp_path / "j.sqlite")
    assert journal.schema_version == len(MIGRATIONS)
    mode = sqlite3.connect(tmp_path / "j.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A journal written by a newer slurm-triage is an error, not silently misread."""
    Journal(tmp_path / "j.sqlite").close()
    sqlite3.connect(tmp_path / "j.sqlite").execute("PRAGMA user_version=99")
    with pytest.raises(JournalError, match="newer"):
        Journal(tmp_path / "j.sqlite")


def test_unwritable_location_is_a_clear_error(tmp_path: Path) -> None:
    """A journal path that cannot be created raises JournalError naming it."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(JournalError, match="file"):
        Journal(blocker / "j.sqlite")


def _claim(path: str, start: float, results: multiprocessing.Queue) -> None:
    journal = Journal(path)
    while time.time() < start:
        pass
    results.put(journal.claim(42, 3, f"p{multiprocessing.current_process().pid}"))


def test_racing_deciders_claim_exactly_once(tmp_path: Path) -> None:
    """Eight processes claiming the same job end at the same instant: exactly one wins."""
    path = str(tmp_path / "j.sqlite")
    Journal(path).close()
    results: multiprocessing.Queue = multiprocessing.Queue()
    start = time.time() + 0.5
    procs = [multiprocessing.Process(target=_claim, args=(path, start, results)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    wins = [results.get(timeout=5) for _ in procs]
    assert wins.count(True) == 1
    assert Journal(path).claim(42, 4, "next run") is True  # the next job end is new


def test_record_and_query_by_job_and_node(tmp_path: Path) -> None:
    """A recorded decision is found by job and by any node it ran on or blamed."""
    journal = Journal(tmp_path / "j.sqlite")
    assert journal.claim(5, 0, "me")
    journal.record(
        5,
        0,
        {
            "cause": "gpu_unavailable",
            "action": "requeue",
            "nodes": ["node1", "node2"],
            "blamed": ["node2"],
            "reasons": ["why"],
            "applied": 1,
            "outcome": "ok",
            "evidence": [{"kind": "x"}],
        },
        [NodeEvent("node2", 5, time.time(), "blamed", "gpu_unavailable", 79, True)],
    )
    (row,) = journal.decisions(job_id=5)
    assert row.blamed == ("node2",) and row.reasons == ("why",) and row.applied
    assert journal.decisions(node="node1") == (row,)
    assert journal.decisions(node="node9") == ()
    (event,) = journal.node_events(0, "node2")
    assert (event.xid, event.multi_node) == (79, True)


def test_claimed_but_undecided_rows_are_not_history(tmp_path: Path) -> None:
    """A claim whose decider died before recording does not show as a decision."""
    journal = Journal(tmp_path / "j.sqlite")
    journal.claim(9, 0, "crashed")
    assert journal.decisions(job_id=9) == ()


def _as_user(uid: int, path: str, results) -> None:  # type: ignore[no-untyped-def]
    os.setgid(uid)
    os.setuid(uid)
    try:
        results.put(Journal(path).claim(7, 1, "slurm user"))
    except JournalError as exc:
        results.put(str(exc))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to open as root and as another user")
def test_root_reading_the_journal_leaves_it_writable_for_slurm_user() -> None:
    """SlurmUser (here nobody) owns the journal's directory and decides; root opens the
    journal in between (an admin's `history`). Root's -wal/-shm/journal files go to the
    directory's owner, so the next decision as SlurmUser can still write."""
    nobody = 65534
    # Not tmp_path: its parents are root's, mode 0700, out of nobody's reach.
    state = Path(tempfile.mkdtemp(prefix="triage-journal-", dir="/tmp"))
    os.chown(state, nobody, nobody)
    root_handle = Journal(state / "journal.sqlite")  # root creates it and stays open
    assert root_handle.claim(7, 0, "root")
    owners = {p.name: p.stat().st_uid for p in state.iterdir()}
    assert owners and set(owners.values()) == {nobody}, owners
    results: multiprocessing.Queue = multiprocessing.Queue()
    child = multiprocessing.Process(
        target=_as_user, args=(nobody, str(state / "journal.sqlite"), results)
    )
    child.start()
    child.join(30)
    try:
        assert results.get(timeout=5) is True
    finally:
        shutil.rmtree(state)


def test_a_job_id_slurm_gave_out_again_is_another_job(tmp_path: Path) -> None:
    """Job 42 was decided long ago; Slurm then gives id 42 to a new job (MaxJobId wrapped, or
    slurmctld lost its state). Its run started after the old claim, so it is claimed as a new
    generation: decided, with an empty history. Racing deciders of the new run, and a caller
    that cannot say when the run started, still find the claim taken."""
    journal = Journal(tmp_path / "j.sqlite")
    assert journal.claim(42, 0, "old")
    journal.record(42, 0, {"cause": "gpu_unavailable", "action": "requeue"})
    assert journal.claim(42, 1, "old")
    journal.record(42, 1, {"cause": "nccl_timeout", "action": "requeue"})
    assert [r.restart for r in journal.decisions(job_id=42)] == [1, 0]
    day_ago = time.time() - 86400
    with sqlite3.connect(tmp_path / "j.sqlite") as db:  # the old job's claims, a day old
        db.execute("UPDATE decisions SET claimed_at = ? WHERE job_id = 42", (day_ago,))
    assert not journal.claim(42, 0, "same run again")  # no start time: cannot tell
    assert not journal.claim(42, 0, "racing", run_started=day_ago - 60)
    started = time.time() - 60  # the new job's run started after the old claims
    assert journal.claim(42, 0, "new", run_started=started)
    assert journal.decisions(job_id=42) == ()  # the old job's decisions are not its history
    journal.record(42, 0, {"cause": "user_code", "action": "record_only"})
    (row,) = journal.decisions(job_id=42)
    assert (row.restart, row.cause) == (0, "user_code")
    assert not journal.claim(42, 0, "racing", run_started=started)
    assert journal.claim(42, 1, "new, requeued", run_started=started + 60)
    assert len(journal.decisions(job_id=42, limit=10)) == 1  # restart 1 not decided yet


def test_a_schema_3_journal_keeps_its_decisions(tmp_path: Path) -> None:
    """Migration 4 rebuilds the decisions table with the generation key: rows survive."""
    path = tmp_path / "j.sqlite"
    with sqlite3.connect(path) as db:
        for number in range(3):
            for statement in MIGRATIONS[number].split(";"):
                if statement.strip():
                    db.execute(statement)
        db.execute(
            "INSERT INTO decisions (job_id, restart, claimed_at, decided_at, owner, cause) "
            "VALUES (7, 0, 1.0, 2.0, 'x', 'gpu_memory')"
        )
        db.execute("PRAGMA user_version=3")
    journal = Journal(path)
    assert journal.schema_version == len(MIGRATIONS)
    (row,) = journal.decisions(job_id=7)
    assert row.cause == "gpu_memory"
    assert not journal.claim(7, 0, "the same run", run_started=0.5)
    assert journal.claim(7, 0, "a new job 7", run_started=3.0)
