"""The outcome journal (SQLite, WAL): decisions, their evidence, and per-node history."""

from slurm_triage.journal.records import DecisionRow, DecisionTotal, NodeEvent
from slurm_triage.journal.store import Journal, JournalError

__all__ = ["DecisionRow", "DecisionTotal", "Journal", "JournalError", "NodeEvent"]
