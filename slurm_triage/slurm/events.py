"""Slurm's node events (`sacctmgr -P show event`): the command the door runs, and a pure
parser of what sacctmgr prints, for the door and for a saved file alike.

The output format, read from SchedMD's source (src/sacctmgr/event_functions.c,
src/sacctmgr/common.c and src/common/print_fields.c at slurm-22-05-8-1 and
slurm-25-11-7-1, the same on both):
- `-P` separates fields with `|` and prints no trailing one (`-p` does); the header line
  holds the field names, which are not always the words of `Format=`: Start prints as
  `TimeStart`, End as `TimeEnd`.
- Without `Format=` the fields are `Cluster,NodeName,Start,End,State,Reason,User`; Reason
  is free text (an admin's, or ours) and may hold `|`, so a row with more fields than the
  header has its extra pieces glued back into Reason. The door asks for Reason last.
- Times are local, `%Y-%m-%dT%H:%M:%S` unless SLURM_TIME_FORMAT says otherwise (the door
  sets it to `standard`); an event still open prints End as `Unknown`.
- State is node_state_string_compact: `DOWN*`, `DRAIN`, `DRNG`, `FAIL`, ...; a cluster
  event (no node) prints no NodeName and no State.
- User is `name(uid)` of who set the state; 22.05 prints it through a 20-byte buffer, so
  it is cut at 19 characters there; empty when Slurm set no uid.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from slurm_triage import hostlist
from slurm_triage.slurm.errors import SlurmOutputError
from slurm_triage.slurm.model import NodeEvent, NodeEventLog

# What the door asks for: the fields we read, Reason last so a `|` in it shifts nothing.
EVENT_FIELDS = ("NodeName", "TimeStart", "TimeEnd", "State", "User", "Reason")
# sacctmgr's own choice without Format= (node events and cluster events alike).
DEFAULT_FIELDS = ("Cluster", "NodeName", "TimeStart", "TimeEnd", "State", "Reason", "User")
REQUIRED_FIELDS = ("NodeName", "TimeStart", "State")
# Format= words a hand-written header may use for the same fields.
_ALIASES = {"Start": "TimeStart", "End": "TimeEnd", "Node": "NodeName"}
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
MAX_TEXT_CHARS = 500


def sacctmgr_event_argv(since: datetime, until: datetime | None) -> list[str]:
    """The node events that overlap [since, until] (until None: now), Reason last."""
    argv = ["sacctmgr", "-P", "show", "event", "Events=Node"]
    argv.append(f"Start={since.strftime(TIME_FORMAT)}")
    if until is not None:
        argv.append(f"End={until.strftime(TIME_FORMAT)}")
    return [*argv, f"Format={','.join(EVENT_FIELDS)}"]


def parse_sacctmgr_events(text: str) -> NodeEventLog:
    """Node events from `sacctmgr -P|-p show event` output, with or without its header
    (without one: the door's order or sacctmgr's default, told apart by where the first
    time is). SlurmOutputError when a header lacks NodeName, TimeStart or State; lines that
    are not event rows are counted, not fatal."""
    lines = [line.rstrip("\r") for line in text.split("\n")]
    rows = [line for line in lines if line.strip()]
    if not rows:
        return NodeEventLog(())
    names, trailing = _header(rows[0])
    if names is not None:
        rows = rows[1:]
    else:
        names = _sniff(rows)
    if names is None:
        return NodeEventLog((), unparsable=len(rows))
    events: list[NodeEvent] = []
    bad = cluster = 0
    for row in rows:
        fields = _fields(row, names, trailing)
        if fields is not None and _is_cluster_event(fields):
            cluster += 1
            continue
        parsed = None if fields is None else _event(fields)
        if parsed is None:
            bad += 1
        else:
            events.extend(parsed)
    return NodeEventLog(tuple(events), unparsable=bad, cluster_events=cluster)


def _header(line: str) -> tuple[tuple[str, ...] | None, bool]:
    """The column names of a header line (and whether rows end in `|`, as with -p)."""
    fields = line.split("|")
    trailing = len(fields) > 1 and fields[-1] == ""
    if trailing:
        fields = fields[:-1]
    names = tuple(_ALIASES.get(f.strip(), f.strip()) for f in fields)
    if "NodeName" not in names and "TimeStart" not in names:
        return None, False
    missing = [f for f in REQUIRED_FIELDS if f not in names]
    if missing:
        raise SlurmOutputError(f"sacctmgr show event: header lacks {', '.join(missing)}")
    return names, trailing


def _sniff(rows: list[str]) -> tuple[str, ...] | None:
    """Headerless output: the door's order has a time second, sacctmgr's default third."""
    for row in rows:
        fields = row.split("|")
        if len(fields) >= len(EVENT_FIELDS) and _time(fields[1]) is not None:
            return EVENT_FIELDS
        if len(fields) >= len(DEFAULT_FIELDS) and _time(fields[2]) is not None:
            return DEFAULT_FIELDS
    return None


def _fields(row: str, names: tuple[str, ...], trailing: bool) -> dict[str, str] | None:
    pieces = row.split("|")
    if trailing:
        if pieces[-1] != "":
            return None
        pieces = pieces[:-1]
    extra = len(pieces) - len(names)
    if extra < 0 or (extra > 0 and "Reason" not in names):
        return None
    if extra:
        at = names.index("Reason")
        glued = "|".join(pieces[at : at + extra + 1])
        pieces = [*pieces[:at], glued, *pieces[at + extra + 1 :]]
    return dict(zip(names, pieces, strict=True))


def _is_cluster_event(fields: dict[str, str]) -> bool:
    return not fields["NodeName"].strip() and _time(fields["TimeStart"]) is not None


def _event(fields: dict[str, str]) -> list[NodeEvent] | None:
    """The events of one row (a hostlist gives one per node); None when it is not a row."""
    start = _time(fields["TimeStart"])
    node_text = fields["NodeName"].strip()
    if start is None or not node_text:
        return None
    end_text = fields.get("TimeEnd", "").strip()
    end = None if end_text in ("", "Unknown", "None") else _time(end_text)
    if end is None and end_text not in ("", "Unknown", "None"):
        return None
    try:
        nodes = hostlist.expand(node_text)
    except hostlist.HostlistError:
        return None
    state = fields["State"].strip()
    reason, user = _clean(fields.get("Reason", "")), _clean(fields.get("User", ""))
    cluster = _clean(fields.get("Cluster", ""))
    return [NodeEvent(n, start, end, state, reason, user, cluster) for n in nodes]


def _time(text: str) -> datetime | None:
    text = text.strip()
    if len(text) != 19 or text[10] != "T":
        return None
    try:
        return datetime.strptime(text, TIME_FORMAT)
    except ValueError:
        return None


def _clean(text: str) -> str:
    """Free text made safe to print: control characters (a terminal escape in a reason)
    become '?', and it is cut at MAX_TEXT_CHARS."""
    return "".join(c if c.isprintable() else "?" for c in text.strip()[:MAX_TEXT_CHARS])


def iter_overlapping(
    events: tuple[NodeEvent, ...], since: datetime, until: datetime | None
) -> Iterator[NodeEvent]:
    """The events that overlap [since, until], as slurmdbd selects them for sacctmgr's
    Start=/End= (as_mysql_cluster.c: time_start < end && (time_end >= start || open))."""
    for event in events:
        if until is not None and event.start >= until:
            continue
        if event.end is not None and event.end < since:
            continue
        yield event
