"""The journal read-only, as the analytics and the replay read it (journal.reader)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_triage.analytics.sacct_layout import IngestError
from slurm_triage.journal import Journal, JournalError
from slurm_triage.journal.reader import JournalReader, RecordedCause


def _journal(path: Path) -> None:
    journal = Journal(path)
    journal.claim(7, 0, "test")
    journal.record(
        7,
        0,
        {"cause": "gpu_unavailable", "blamed": ["node3"], "root_backed": True, "evidence": []},
    )
    journal.claim(7, 1, "test")
    journal.record(7, 1, {"cause": "user_code"})
    journal.claim(8, 0, "test")  # claimed, never recorded: no cause
    journal.claim(9, 0, "test")
    journal.record(9, 0, {"cause": ""})
    journal.close()


def test_recorded_causes_are_the_decisions_that_named_one(tmp_path: Path) -> None:
    """Each decision with a cause, its JSON columns as the decider wrote them; a claim that
    was never recorded, or an empty cause, is not one."""
    path = tmp_path / "journal.sqlite"
    _journal(path)
    with JournalReader(path) as journal:
        rows = list(journal.recorded_causes())
    assert rows == [
        RecordedCause(7, 0, "gpu_unavailable", True, '["node3"]', "[]"),
        RecordedCause(7, 1, "user_code", False, None, None),
    ]


def test_the_reader_writes_nothing(tmp_path: Path) -> None:
    """A report never creates or migrates the journal: a missing file is an error (exit 4)
    and stays missing; an older schema is read as it is, not migrated."""
    missing = tmp_path / "absent.sqlite"
    with pytest.raises(JournalError, match="absent.sqlite") as raised:
        JournalReader(missing)
    assert raised.value.exit_code == 4
    assert not missing.exists()
    path = tmp_path / "journal.sqlite"
    _journal(path)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=1")
    with JournalReader(path) as journal:
        assert len(list(journal.recorded_causes())) == 2
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1


def test_a_file_that_is_not_a_journal_is_one_error(tmp_path: Path) -> None:
    """Not SQLite, or SQLite without our tables: JournalError naming the file, and the
    analytics turn it into their one-line input error (exit 2)."""
    from slurm_triage.analytics.fetch import journal_attributions

    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database\n" * 100)
    with JournalReader(junk) as journal, pytest.raises(JournalError, match="junk.sqlite"):
        list(journal.recorded_causes())
    with pytest.raises(IngestError, match="cannot read the journal: .*junk.sqlite"):
        journal_attributions(junk)
