"""The outcome journal (SQLite, WAL): decisions, their evidence, and per-node history."""

from slurm_triage.journal.store import (
    DecisionRow,
    Journal,
    JournalError,
    NodeEvent,
)

__all__ = ["DecisionRow", "Journal", "JournalError", "NodeEvent"]
