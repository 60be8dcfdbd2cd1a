"""Fetch the report's inputs: accounting and node events from Slurm through the door
(`report --since`), and attributions from our journal.

The Slurm calls are bounded like every Slurm call (own process group, killed at the
deadline), but with a generous deadline, since a year of accounting takes slurmdbd a while
to stream. The journal is read through journal.reader (read-only: a report never blocks
the deciders).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import polars as pl

from slurm_triage.analytics.attribution_join import ATTRIBUTION_SCHEMA
from slurm_triage.analytics.node_events import NodeEvents, from_log
from slurm_triage.analytics.sacct_layout import SACCT_FIELDS, IngestError
from slurm_triage.config import SlurmConfig
from slurm_triage.journal.reader import JournalReader
from slurm_triage.journal.store import JournalError
from slurm_triage.taxonomy import Cause, Domain, info

SACCT_TIMEOUT_MIN_S = 300.0
# sacct prints each record's restart count (Restarts) from Slurm 24.11 on; older releases
# refuse the field.
RESTARTS_FROM = (24, 11)


def fetch_sacct(config: SlurmConfig, since: datetime, until: datetime | None) -> str:
    """Accounting of the period in the columns `ingest` reads (SACCT_FIELDS), through the
    Slurm door; SlurmError (exit 3) when sacct is missing, fails or times out."""
    from slurm_triage.slurm import open_door

    door = open_door(config, timeout_s=max(config.timeout_s, SACCT_TIMEOUT_MIN_S))
    return door.accounting_text(since, until, SACCT_FIELDS)


def fetch_report_sacct(
    config: SlurmConfig, since: datetime, until: datetime | None
) -> tuple[str, tuple[str, ...]]:
    """The report's accounting of the period and its columns: SACCT_FIELDS, plus Restarts
    where sacct has it, which numbers each attempt as our decisions do even when earlier
    attempts ended before `since` (attribution_join). SlurmError (exit 3) as fetch_sacct."""
    from slurm_triage.slurm import SlurmError, open_door

    door = open_door(config, timeout_s=max(config.timeout_s, SACCT_TIMEOUT_MIN_S))
    try:
        version = door.slurm_version()
    except SlurmError:
        version = ""  # unknown: ask only for what every release has
    fields = report_fields(version)
    return door.accounting_text(since, until, fields), fields


def report_fields(version: str) -> tuple[str, ...]:
    """SACCT_FIELDS, with Restarts before AdminComment (free text stays last) on 24.11+."""
    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if len(numbers) < 2 or numbers < RESTARTS_FROM:
        return SACCT_FIELDS
    return (*SACCT_FIELDS[:-1], "Restarts", SACCT_FIELDS[-1])


def fetch_node_events(config: SlurmConfig, since: datetime, until: datetime | None) -> NodeEvents:
    """Node events of the period through the Slurm door (`sacctmgr show event`);
    SlurmError (exit 3) when it fails."""
    from slurm_triage.slurm import SlurmError, open_door

    door = open_door(config, timeout_s=max(config.timeout_s, SACCT_TIMEOUT_MIN_S))
    try:
        log = door.node_events(since, until)
    except SlurmError as exc:
        # The same class (exit 3), with the way out: events are optional for a report.
        raise type(exc)(f"{exc} (report --no-events reports without node events)") from None
    return from_log(log, f"node events since {since:%Y-%m-%d %H:%M} ({door.name} door)")


def journal_attributions(path: Path) -> pl.DataFrame:
    """The journal's decisions as (job_raw, attempt, cause) for ingest.attribute. A node
    fault that only the job's own evidence claimed counts as `unknown`: a user's records
    must never make a node look like hardware in the statistics. The journal keys a
    decision by (job id, restart count before that end): attempt n+1."""
    try:
        with JournalReader(path) as journal:
            kept = [
                (row.job_id, row.restart + 1, _confirmed(row.cause, row.evidence_json))
                for row in journal.recorded_causes()
            ]
    except JournalError as exc:
        raise IngestError(f"cannot read the journal: {exc}") from None
    return pl.DataFrame(kept, schema=ATTRIBUTION_SCHEMA, orient="row")


def _confirmed(cause: str, evidence: str | None) -> str:
    """`cause`, or `unknown` for a node fault with no fact that root (or Slurm) collected."""
    try:
        row = info(Cause(cause))
    except ValueError:
        return cause
    if not row.blames_nodes or row.domain not in (Domain.HARDWARE, Domain.INFRASTRUCTURE):
        return cause
    try:
        facts = json.loads(evidence) if evidence else []
    except ValueError:
        facts = []
    confirmed = any(isinstance(f, dict) and f.get("source") == "root" for f in facts)
    return cause if confirmed else Cause.UNKNOWN.value
