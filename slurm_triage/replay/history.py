"""A site's history as job ends to replay: sacct attempts, Slurm's node events and our
decisions journal, joined into attributed ends in time order.

The attempts and their causes are the reliability report's (analytics.analysis: the
journal, then AdminComment, then the state; a node event on one of an attempt's nodes
makes it a node failure). Which nodes an end blames, and whether root's evidence backs
it, comes from the first that says: the journal's own row (what the decider saw, so its
cause too); the node event that explained the attempt (Slurm's own record: root); a
NODE_FAIL on a single node. Otherwise the end blames nobody. Jobs of one attempt that
completed need no decision and are left out; every other attempt is kept, completed ones
too (a replay that holds a job earlier must know what its later attempts cost).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from slurm_triage import hostlist
from slurm_triage.analytics import analysis
from slurm_triage.analytics.fetch import journal_attributions
from slurm_triage.analytics.ingest import Accounting
from slurm_triage.analytics.node_events import NodeEvents
from slurm_triage.analytics.sacct_layout import IngestError
from slurm_triage.journal.reader import JournalReader, RecordedCause
from slurm_triage.journal.store import JournalError
from slurm_triage.taxonomy import DRAIN_PREFIX, Cause

# A node list longer than this (a hostile or broken file) is not expanded.
MAX_NODES_PER_ROW = 100_000


@dataclass(frozen=True)
class HistoryEnd:
    """One ended attempt of history, attributed."""

    job_id: int
    attempt: int  # 1-based position in the job's requeue chain
    last: bool  # history has no later attempt of this job
    at: float  # end, epoch seconds
    state: str
    cause: Cause
    blamed: tuple[str, ...]
    root_backed: bool
    nodes: tuple[str, ...]  # the attempt's nodes, where accounting kept its NodeList
    nnodes: int
    gpus: int
    elapsed_s: int
    failure: bool  # the paper's failure (analytics: NODE_FAIL, node cause or node event)

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.elapsed_s / 3600.0


@dataclass(frozen=True)
class HealthDrain:
    """A drain our health checks made, from Slurm's node events (`triage: <check> ...`)."""

    at: float
    node: str
    check: str


@dataclass(frozen=True)
class History:
    ends: tuple[HistoryEnd, ...]
    source: str
    job_runs: int
    attempts: int
    nodes: tuple[str, ...]  # every node history names
    health_drains: tuple[HealthDrain, ...]
    journal_rows: int
    unexpanded_node_lists: int

    @property
    def requeues(self) -> int:
        return sum(1 for e in self.ends if not e.last)


@dataclass(frozen=True)
class _Blame:
    cause: Cause
    blamed: tuple[str, ...]
    root_backed: bool


def build(
    accounting: Accounting, events: NodeEvents | None = None, journal: Path | None = None
) -> History:
    """History from parsed accounting, node events and the journal (all but the first
    optional); IngestError (exit 2) when the journal cannot be read."""
    blames = _journal_blames(journal) if journal is not None else {}
    attributions = journal_attributions(journal).lazy() if journal is not None else None
    attempts = analysis.ended_attempts(accounting, attributions, events)
    frame = _chains(attempts.done, attempts.joined)
    ends: list[HistoryEnd] = []
    names: set[str] = set()
    unexpanded = 0
    for row in frame.iter_rows(named=True):
        nodes, broken = _nodes(row["nodelist"])
        unexpanded += int(broken)
        blame = blames.get((row["job_raw"], row["attempt"] - 1)) or _blame(row)
        names.update(nodes)
        names.update(blame.blamed)
        ends.append(
            HistoryEnd(
                job_id=int(row["job_raw"]),
                attempt=int(row["attempt"]),
                last=bool(row["last"]),
                at=row["end"].timestamp(),
                state=str(row["state"]),
                cause=blame.cause,
                blamed=blame.blamed,
                root_backed=blame.root_backed,
                nodes=nodes or blame.blamed,
                nnodes=int(row["nnodes"] or 0),
                gpus=int(row["gpus"] or 0),
                elapsed_s=int(row["elapsed_s"] or 0),
                failure=str(row["failure_source"]) != "none",
            )
        )
    ends.sort(key=lambda e: (e.at, e.job_id, e.attempt))
    drains = _health_drains(events)
    names.update(d.node for d in drains)
    done = attempts.done
    return History(
        ends=tuple(ends),
        source=accounting.source,
        job_runs=int(done["job_raw"].n_unique()) if done.height else 0,
        attempts=done.height,
        nodes=tuple(sorted(names)),
        health_drains=drains,
        journal_rows=len(blames),
        unexpanded_node_lists=unexpanded,
    )


def _chains(done: pl.DataFrame, joined: pl.DataFrame) -> pl.DataFrame:
    """The attempts with their number in the chain and whether they are its last, the
    explaining node event's node joined; single completed attempts dropped."""
    job = pl.col("job_raw")
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    first = pl.when(job != job.shift(1).fill_null(-1)).then(index).forward_fill()
    framed = done.with_row_index("row").with_columns(
        (index - first + 1).cast(pl.Int32).alias("attempt"),
        (job != job.shift(-1)).fill_null(True).alias("last"),
    )
    keep = ~(pl.col("last") & (pl.col("attempt") == 1) & (pl.col("state") == "COMPLETED"))
    events = joined.select(pl.col("row"), pl.col("node").alias("event_node"))
    return (
        framed.filter(keep & pl.col("end").is_not_null())
        .join(events, on="row", how="left")
        .select(
            "job_raw",
            "attempt",
            "last",
            "end",
            pl.col("state").cast(pl.String),
            pl.col("cause").cast(pl.String),
            "nodelist",
            "event_node",
            "nnodes",
            "gpus",
            "elapsed_s",
            pl.col("failure_source").cast(pl.String),
        )
    )


def _blame(row: dict[str, object]) -> _Blame:
    """The blame of an attempt the journal does not cover."""
    cause = Cause(str(row["cause"]))
    if row["event_node"]:
        return _Blame(cause, (str(row["event_node"]),), True)
    nodelist = str(row["nodelist"] or "")
    if row["state"] == "NODE_FAIL" and nodelist and not any(c in nodelist for c in "[,"):
        return _Blame(cause, (nodelist,), True)
    return _Blame(cause, (), False)


def _nodes(nodelist: object) -> tuple[tuple[str, ...], bool]:
    """The expanded node list, and whether it could not be expanded."""
    if not nodelist or nodelist in ("None", "None assigned"):
        return (), False
    try:
        nodes = hostlist.expand(str(nodelist))
    except hostlist.HostlistError:
        return (), True
    if len(nodes) > MAX_NODES_PER_ROW:
        return (), True
    return tuple(nodes), False


def _journal_blames(path: Path) -> dict[tuple[int, int], _Blame]:
    """(job, restart) -> the cause, blamed nodes and root backing the decider recorded."""
    try:
        with JournalReader(path) as journal:
            return {
                (row.job_id, row.restart): blame
                for row in journal.recorded_causes()
                if (blame := _recorded_blame(row)) is not None
            }
    except JournalError as exc:
        raise IngestError(f"cannot read the journal: {exc}") from None


def _recorded_blame(row: RecordedCause) -> _Blame | None:
    """A journal row's blame; None for a cause or a blamed list this code cannot read."""
    try:
        parsed = Cause(row.cause)
        nodes = json.loads(row.blamed_json) if row.blamed_json else []
    except ValueError:
        return None
    kept = tuple(str(n) for n in nodes if isinstance(n, str)) if isinstance(nodes, list) else ()
    return _Blame(parsed, kept, row.root_backed)


def _health_drains(events: NodeEvents | None) -> tuple[HealthDrain, ...]:
    """Our health checks' drains in Slurm's node events: `triage: <check.name> ...`."""
    if events is None or events.frame.height == 0:
        return ()
    out = []
    for node, start, _state, reason in events.frame.iter_rows():
        text = str(reason or "")
        if not text.startswith(DRAIN_PREFIX):
            continue
        word = text[len(DRAIN_PREFIX) :].split(" ", 1)[0]
        if "." in word and start is not None:
            out.append(HealthDrain(start.timestamp(), str(node), word))
    return tuple(sorted(out, key=lambda d: (d.at, d.node)))
