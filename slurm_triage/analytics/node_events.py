"""Slurm's node events joined with the attempts they explain (issue 18).

When Slurm requeues a job because a node failed, accounting may record the attempt as
REQUEUED, not NODE_FAIL; preemptions and admins' requeues are REQUEUED too, so the state
alone cannot say which requeues were failures. slurmdbd's node events can: an attempt that
ended REQUEUED, NODE_FAIL or FAILED while one of its nodes went down or was drained is a
node failure. The window is TAXONOMY.md's rule 5: the event started from 10 minutes before
the attempt ended to 5 minutes after. The event's reason is the cause hint: our own drain
reason names the cause (`triage: gpu_memory job=...`) or the health check
(`triage: gpu.row_remap ...`); any other reason is Slurm's `node_failure`.

Events come from a saved `sacctmgr -P show event` file (`report --events FILE`) or from
the Slurm door (`report --since`); both are parsed by slurm.events.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import polars as pl

from slurm_triage import hostlist
from slurm_triage.analytics import causes
from slurm_triage.analytics.ingest import NODE_EVENT_STATES
from slurm_triage.analytics.sacct_layout import IngestError
from slurm_triage.slurm.errors import SlurmOutputError
from slurm_triage.slurm.events import parse_sacctmgr_events
from slurm_triage.slurm.model import NodeEventLog
from slurm_triage.taxonomy import DRAIN_PREFIX, Cause

WINDOW_BEFORE = timedelta(minutes=10)
WINDOW_AFTER = timedelta(minutes=5)
MAX_EVENTS_BYTES = 512 * 1024 * 1024

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "node": pl.String(),
    "start": pl.Datetime("ms"),
    "state": pl.String(),
    "reason": pl.String(),
}
JOINED_SCHEMA: dict[str, pl.DataType] = {
    "row": pl.UInt32(),
    "node": pl.String(),
    "event_state": pl.String(),
    "reason": pl.String(),
    "hint": pl.String(),
}


@dataclass(frozen=True)
class NodeEvents:
    """The node events a report joins: those that took a node out of service (frame,
    EVENT_SCHEMA), where they came from, and what else the input held."""

    frame: pl.DataFrame
    source: str
    read: int  # node events read
    unparsable: int
    cluster_events: int

    @property
    def out_of_service(self) -> int:
        return self.frame.height


def from_log(log: NodeEventLog, source: str) -> NodeEvents:
    """The events of one read (the door's or a file's), down and drained ones kept."""
    kept = [(e.node, e.start, e.state, e.reason) for e in log.events if e.takes_node_out()]
    frame = pl.DataFrame(kept, schema=EVENT_SCHEMA, orient="row")
    return NodeEvents(frame, source, len(log.events), log.unparsable, log.cluster_events)


def read_events_file(path: Path) -> NodeEvents:
    """A saved `sacctmgr -P show event` (default or our format, header or not); one-line
    IngestError when it is missing, too big, or holds no node event at all."""
    try:
        if path.stat().st_size > MAX_EVENTS_BYTES:
            raise IngestError(f"{path}: over {MAX_EVENTS_BYTES >> 20} MiB, not a node event list")
        text = path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        raise IngestError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IngestError(f"{path}: is a directory, not a node event list") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        log = parse_sacctmgr_events(text)
    except SlurmOutputError as exc:
        raise IngestError(f"{path}: {exc}") from None
    if not log.events and log.unparsable:
        raise IngestError(
            f"{path}: no node event rows (is it `sacctmgr -P show event` output, with times "
            "in the default form: SLURM_TIME_FORMAT unset?)"
        )
    return from_log(log, str(path))


def hint_cause(reason: str) -> str:
    """The cause a node event's reason points to: ours names it, a health check's drain is
    `health_check`, anything else (Not responding, Kill task failed, ...) `node_failure`."""
    if reason.startswith(DRAIN_PREFIX):
        word = reason[len(DRAIN_PREFIX) :].split(" ", 1)[0]
        if word in causes.FAILURE_CAUSES:
            return word
        if "." in word:
            return Cause.HEALTH_CHECK.value
    return Cause.NODE_FAILURE.value


def join(done: pl.DataFrame, events: NodeEvents | None) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """`done` with the attempts a node event explains made failures (source node_event,
    cause from the hint; a NODE_FAIL keeps its source and takes the hint's cause), the
    joined events per attempt row (JOINED_SCHEMA), and how many attempts' NodeList
    hostlist could not read (those are joined to no event). Without events: unchanged."""
    empty = pl.DataFrame(schema=JOINED_SCHEMA)
    if events is None or events.frame.height == 0 or "nodelist" not in done.columns:
        return done, empty, 0
    joined, unreadable = _matches(done, events.frame)
    if joined.height == 0:
        return done, empty, unreadable
    rows = joined["row"]
    hinted = joined["hint"].cast(causes.CAUSE_DTYPE)
    node_fail = done["state"].gather(rows) == "NODE_FAIL"
    source = pl.Series(
        ["node_fail" if nf else "node_event" for nf in node_fail], dtype=causes.SOURCE_DTYPE
    )
    updated = done.with_columns(
        done["cause"].scatter(rows, hinted),
        done["failure_source"].scatter(rows, source),
    )
    return updated.with_columns(causes.domain_expr("cause").alias("domain")), joined, unreadable


def _matches(done: pl.DataFrame, events: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Per candidate attempt, its nearest event in the window on one of its nodes, and how
    many candidates had a NodeList that hostlist refuses (ingest drops the malformed ones;
    this catches what its pattern lets through, such as a range too large to hold)."""
    candidates = (
        done.with_row_index("row")
        .filter(
            pl.col("state").is_in(NODE_EVENT_STATES)
            & pl.col("cause").is_in(causes.SYMPTOM_CAUSES)
            & pl.col("nodelist").is_not_null()
            & pl.col("end").is_not_null()
        )
        .select(
            "row",
            "end",
            "nodelist",
            (pl.col("end") - WINDOW_BEFORE).alias("_low"),
            (pl.col("end") + WINDOW_AFTER).alias("_high"),
        )
    )
    pairs = candidates.join_where(
        events, pl.col("start") >= pl.col("_low"), pl.col("start") <= pl.col("_high")
    )
    if pairs.height == 0:
        return pl.DataFrame(schema=JOINED_SCHEMA), 0
    # A one-node list is the node's name: compared in polars; bracketed lists in Python,
    # without expanding them (hostlist.contains).
    plain = pairs["nodelist"] == pairs["node"]
    listed = pairs["nodelist"].str.contains(r"[\[,]")
    mask: list[bool] = []
    unreadable: set[int] = set()
    for row, p, ls, nl, n in zip(
        pairs["row"], plain, listed, pairs["nodelist"], pairs["node"], strict=True
    ):
        try:
            mask.append(bool(p) or (bool(ls) and hostlist.contains(nl, n)))
        except hostlist.HostlistError:
            mask.append(False)
            unreadable.add(row)
    on_node = pairs.filter(pl.Series(mask, dtype=pl.Boolean))
    nearest = (
        on_node.with_columns((pl.col("start") - pl.col("end")).abs().alias("_gap"))
        .sort("row", "_gap", "node")
        .unique("row", keep="first", maintain_order=True)
    )
    hints = [hint_cause(r or "") for r in nearest["reason"]]
    joined = nearest.select(
        pl.col("row").cast(pl.UInt32),
        "node",
        pl.col("state").alias("event_state"),
        "reason",
        pl.Series("hint", hints, dtype=pl.String),
    )
    return joined, len(unreadable)


def unattributed_requeues(done: pl.DataFrame) -> tuple[int, float]:
    """REQUEUED attempts that no source explains (no attribution, no node event), and
    the GPU-hours they hold: node failures Slurm requeued, preemptions and admins'
    requeues look the same in accounting alone."""
    rows = done.filter(
        (pl.col("state") == "REQUEUED")
        & (pl.col("failure_source") == "none")
        & (pl.col("cause") == "unknown")
    )
    hours = rows.select((pl.col("gpus") * pl.col("elapsed_s")).sum() / 3600.0).item()
    return rows.height, float(hours or 0.0)
