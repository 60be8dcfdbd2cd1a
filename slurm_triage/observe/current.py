"""The metrics of this host now: the journal's (a controller) and the node ledgers' (a node).

What `slurm-triage metrics` prints and `metrics serve` answers: the same families the
textfiles hold, read afresh from the recorded facts at each call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from slurm_triage.config import Config
from slurm_triage.observe.controller import controller_families, read_facts
from slurm_triage.observe.exposition import Family
from slurm_triage.observe.node_ledger import node_families, read_ledgers


@dataclass(frozen=True)
class Current:
    families: tuple[Family, ...]
    # What was not there to read (said on stderr by the CLI, never in the exposition).
    notes: tuple[str, ...] = ()


def current(config: Config, *, controller: bool = True, nodes: bool = True) -> Current:
    """Read the journal (when present) and every node ledger under `<state_dir>/metrics`.
    Raises JournalError when the journal exists but cannot be read."""
    families: list[Family] = []
    notes: list[str] = []
    if controller:
        journal_path = Path(config.decision.journal)
        if journal_path.exists():
            from slurm_triage.journal import Journal

            journal = Journal(journal_path, config.decision.journal_busy_timeout_s)
            try:
                families += controller_families(read_facts(journal, config, time.time()))
            finally:
                journal.close()
        else:
            notes.append(f"no journal at {journal_path}: no decision metrics on this host")
    if nodes:
        ledgers = read_ledgers(config.paths.state_dir)
        if ledgers:
            families += node_families(ledgers)
        else:
            notes.append(
                f"no node ledger under {Path(config.paths.state_dir) / 'metrics'}: no node "
                "metrics on this host (set metrics.node_textfile)"
            )
    return Current(tuple(families), tuple(notes))
