"""A pure parser of `scontrol show reservation` (text form), Slurm 22.05 to 25.11.

The text form is read on every release (not `scontrol --json`, which 22.05 lacks): one
parser, one layout. slurm_sprint_reservation_info (src/api/reservation_info.c) prints each
reservation as lines in a fixed order, the first at column 0, the others indented three
spaces, and a blank line after it:

    ReservationName=N StartTime=T EndTime=T Duration=D
       Nodes=L NodeCnt=n CoreCnt=n Features=F PartitionName=P Flags=A,B
       [  NodeName=N CoreIDs=C ...]                       (core reservations only)
       TRES=...
       AllowedPartitions=... QOS=...                      (25.11 on)
       Users=U Groups=G Accounts=A Licenses=L State=S BurstBuffer=B[ Watts=W]
       MaxStartDelay=M
       Comment=...                                        (23.02 on, when set: free text)

`scontrol show reservation` with none prints "No reservations in the system". Times follow
SLURM_TIME_FORMAT; the door runs scontrol with `standard` (ISO local time). Values are read
from their own line only, so a Comment or a name holding `Users=root` sets nothing else.
"""

from __future__ import annotations

import re
from datetime import datetime

from slurm_triage import hostlist
from slurm_triage.slurm.errors import SlurmOutputError
from slurm_triage.slurm.model import ReservationInfo

MAX_OUTPUT_BYTES = 16 * 1024 * 1024
NO_RESERVATIONS = "No reservations in the system"

# The name is whatever the admin gave (spaces even): everything up to the last StartTime=.
_FIRST = re.compile(
    r"ReservationName=(?P<name>.*) StartTime=(?P<start>\S+) EndTime=(?P<end>\S+) "
    r"Duration=\S+\s*\Z"
)
_NODES = re.compile(r"Nodes=(?P<nodes>\S*) NodeCnt=\d+ CoreCnt=\d+ .* Flags=(?P<flags>\S*)\s*\Z")
_USERS = re.compile(r"Users=(?P<users>\S*) Groups=\S* Accounts=")


# reservation_flags_string (src/common/slurm_protocol_defs.c) over slurm.h's RESERVE_FLAG_*
# bits, both of slurm-25-11-7-1: (bit, the name Flags= shows), in scontrol's order. The pyslurm
# door gets the bits (pyslurm's version is the running Slurm's). Bits scontrol does not print
# (GRES_REQ, which slurmctld sets for a TRES naming a gres; TRES_PER_NODE; SKIP;
# SCHED_FAILED; DUR_PLUS/DUR_MINUS and NO_FLEX ... of update requests) are left out, so both
# doors give the same names.
_FLAG_BITS = (
    (0, "MAINT"), (1, "NO_MAINT"), (25, "FLEX"), (14, "OVERLAP"), (6, "IGNORE_JOBS"),
    (35, "HOURLY"), (36, "NO_HOURLY"), (2, "DAILY"), (3, "NO_DAILY"), (21, "WEEKDAY"),
    (23, "WEEKEND"), (4, "WEEKLY"), (5, "NO_WEEKLY"), (15, "SPEC_NODES"), (19, "ALL_NODES"),
    (8, "ANY_NODES"), (9, "NO_ANY_NODES"), (10, "STATIC"), (11, "NO_STATIC"),
    (12, "PART_NODES"), (13, "NO_PART_NODES"), (17, "TIME_FLOAT"), (18, "REPLACE"),
    (30, "REPLACE_DOWN"), (20, "PURGE_COMP"), (29, "NO_HOLD_JOBS_AFTER_END"), (32, "MAGNETIC"),
    (33, "NO_MAGNETIC"), (39, "USER_DELETE"), (40, "NO_USER_DELETE"), (42, "FORCE_START"),
)  # fmt: skip


def flag_names(bits: int) -> frozenset[str]:
    """The names `scontrol show reservation` prints in Flags= for a reservation's
    RESERVE_FLAG_* bits (MAINT, IGNORE_JOBS, SPEC_NODES, TIME_FLOAT, ...); bits it does not
    print are passed over, so an unknown bit never hides the known ones."""
    return frozenset(name for bit, name in _FLAG_BITS if bits >> bit & 1)


def parse_scontrol_reservations(text: str) -> tuple[ReservationInfo, ...]:
    """Every reservation of `scontrol show reservation`; SlurmOutputError for anything
    that is not Slurm's layout (a record without its Nodes= or Users= line)."""
    if len(text) > MAX_OUTPUT_BYTES:
        raise SlurmOutputError("scontrol show reservation: output too large")
    if text.strip() == NO_RESERVATIONS:
        return ()
    found: list[ReservationInfo] = []
    for record in _records(text):
        found.append(_reservation(record))
    return tuple(found)


def _records(text: str) -> list[list[str]]:
    records: list[list[str]] = []
    for line in text.split("\n"):
        if line.startswith("ReservationName="):
            records.append([line])
        elif line.startswith("   ") and records:
            records[-1].append(line[3:])
        elif line.strip() and not records:
            raise SlurmOutputError(
                "scontrol show reservation: output does not start with ReservationName="
            )
        elif line.strip() and records:
            records[-1][-1] += "\n" + line  # a value holding a newline (a Comment)
    return records


def _reservation(lines: list[str]) -> ReservationInfo:
    first = _FIRST.match(lines[0])
    nodes = _NODES.match(lines[1]) if len(lines) > 1 else None
    users = _USERS.match(_users_line(lines[2:]))
    if not (first and nodes and users):
        raise SlurmOutputError(f"scontrol show reservation: unexpected record {lines[0][:80]!r}")
    return ReservationInfo(
        name=first["name"],
        nodes=_hosts(nodes["nodes"]),
        start_time=_epoch(first["start"]),
        end_time=_epoch(first["end"]),
        flags=frozenset(f for f in nodes["flags"].split(",") if f and f != "(null)"),
        users=tuple(u for u in users["users"].split(",") if u and u != "(null)"),
    )


def _users_line(lines: list[str]) -> str:
    """Slurm's Users= line, found in Slurm's order: core lines, TRES=, 25.11's
    AllowedPartitions=, then Users=; free text (Comment=) only ever comes after it."""
    rest = [line for line in lines if not line.startswith("  NodeName=")]
    if rest[:1] and rest[0].startswith("TRES="):
        rest = rest[1:]
        if rest[:1] and rest[0].startswith("AllowedPartitions="):
            rest = rest[1:]
        if rest[:1] and rest[0].startswith("Users="):
            return rest[0]
    return ""


def _hosts(text: str) -> tuple[str, ...]:
    if text in ("", "(null)"):
        return ()
    try:
        return tuple(hostlist.expand(text))
    except hostlist.HostlistError as exc:
        raise SlurmOutputError(f"scontrol show reservation: {exc}") from None


def _epoch(text: str) -> int | None:
    """ISO local time (SLURM_TIME_FORMAT=standard) as epoch seconds; Unknown/None: None."""
    if text in ("Unknown", "None", "N/A", "(null)"):
        return None
    try:
        return int(datetime.fromisoformat(text).timestamp())
    except ValueError:
        raise SlurmOutputError(
            f"scontrol show reservation: unreadable time {text[:40]!r}"
        ) from None
