"""The journal read-only, for reports: the analytics and the replay read the decisions here.

A report may run while deciders write: the file is opened read-only (SQLite's `mode=ro`), so
it is never created, migrated or locked for writing, and WAL lets the readers and the one
writer go on together. Rows come one at a time: a year's journal is read without holding it
all in memory.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from slurm_triage.journal.store import JournalError


@dataclass(frozen=True)
class RecordedCause:
    """A decided job end's cause, as the decider recorded it. The JSON columns stay text
    (`blamed_json`, `evidence_json`, None when empty): a report parses only those it needs,
    and says itself what a malformed one means."""

    job_id: int
    restart: int  # the restart count of the run that ended
    cause: str  # never empty; not checked against the taxonomy (an older or newer id)
    root_backed: bool
    blamed_json: str | None
    evidence_json: str | None


_CAUSES_QUERY = (
    "SELECT job_id, restart, cause, root_backed, blamed, evidence FROM decisions "
    "WHERE cause IS NOT NULL AND cause != ''"
)


class JournalReader:
    """A read-only handle on an existing journal file; JournalError (exit 4) when it cannot
    be opened or read (missing, not a journal, unreadable)."""

    def __init__(self, path: str | os.PathLike[str], busy_timeout_s: float = 10.0) -> None:
        self.path = Path(path)
        try:
            self._db = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=busy_timeout_s,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def recorded_causes(self) -> Iterator[RecordedCause]:
        """Every decision that named a cause, in the journal's order, one row at a time."""
        try:
            for job_id, restart, cause, root, blamed, evidence in self._db.execute(_CAUSES_QUERY):
                yield RecordedCause(
                    job_id=int(job_id),
                    restart=int(restart),
                    cause=str(cause),
                    root_backed=bool(root),
                    blamed_json=blamed or None,
                    evidence_json=evidence or None,
                )
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from None
