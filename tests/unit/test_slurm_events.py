"""Node events (`sacctmgr -P show event`): the parser on the output of both Slurm
generations, the door operation of each backend, and the FakeDoor keeping events as
slurmdbd does.

No dev cluster here, so the outputs below are written from SchedMD's source at the tags
slurm-22-05-8-1 and slurm-25-11-7-1 (the integration test in tests/integration/test_door.py
reads a real one):
- src/sacctmgr/event_functions.c: without Format= the fields are
  Cluster,NodeName,Start,End,State,Reason,User (node and cluster events alike); State is
  node_state_string_compact(state), NULL for a cluster event; User is "%s(%u)" of the
  reason uid, printed through `char tmp[20]` in 22.05 (cut at 19 characters) and an
  xstrdup_printf in 25.11 (whole); no reason uid prints an empty field.
- src/sacctmgr/common.c: Start is named TimeStart and End TimeEnd in the header.
- src/common/print_fields.c: -P joins with `|` and no trailing one, -p ends each line
  with `|`; a NULL string prints empty; a time of 0 prints `Unknown` (open event).
"""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from slurm_triage.slurm import SlurmCommandError, SlurmOutputError
from slurm_triage.slurm.cli_backend import CliDoor
from slurm_triage.slurm.events import (
    EVENT_FIELDS,
    parse_sacctmgr_events,
    sacctmgr_event_argv,
)
from slurm_triage.slurm.model import NodeEvent, NodeEventLog
from slurm_triage.slurm.pyslurm_backend import PyslurmDoor
from slurm_triage.slurm.runner import Runner
from slurm_triage.testing import FakeDoor, node_info, node_infos

# `sacctmgr -P show event all_time` on 22.05: one cluster event (a TRES change), a node
# that stopped answering (slurmctld sets DOWN* "Not responding" with no uid), our own
# drain of a GPU node whose reason holds a `|`, an admin's drain with a long user name
# (cut at 19 characters) that is still open, and a node draining with a job on it.
EVENTS_22_05 = """\
Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User
triage||2026-11-20T09:58:12|Unknown|||
triage|node2|2026-11-21T23:04:10|2026-11-21T23:09:40|DOWN*|Not responding|
triage|node3|2026-11-21T23:05:00|2026-11-22T08:00:00|DRAIN|triage: gpu_memory job=42: XID 48 | DBE|slurm(64030)
triage|node1|2026-11-22T10:00:00|Unknown|DRAIN|rack 7 maintenance|averyveryverylongad
triage|node4|2026-11-22T11:00:00|2026-11-22T11:30:00|DRNG|Kill task failed|root(0)
"""  # noqa: E501
# The same events on 25.11: only the user name of the admin's drain differs (not cut).
EVENTS_25_11 = EVENTS_22_05.replace("averyveryverylongad", "averyveryverylongadmin(5001)")


def _events(text: str) -> NodeEventLog:
    return parse_sacctmgr_events(text)


@pytest.mark.parametrize("text", [EVENTS_22_05, EVENTS_25_11])
def test_default_format_of_both_generations(text: str) -> None:
    """Every node event is read with its times, state, reason and user; the cluster event
    is counted apart; a `|` in a reason stays in the reason; `Unknown` is an open event."""
    log = _events(text)
    assert log.cluster_events == 1 and log.unparsable == 0
    assert [e.node for e in log.events] == ["node2", "node3", "node1", "node4"]
    down, ours, admin, draining = log.events
    assert down == NodeEvent(
        "node2",
        datetime(2026, 11, 21, 23, 4, 10),
        datetime(2026, 11, 21, 23, 9, 40),
        "DOWN*",
        "Not responding",
        "",
        "triage",
    )
    assert ours.reason == "triage: gpu_memory job=42: XID 48 | DBE"
    assert ours.user == "slurm(64030)"
    assert admin.end is None and admin.user.startswith("averyveryverylongad")
    assert draining.state == "DRNG" and draining.user == "root(0)"


def test_the_22_05_user_is_cut_and_the_25_11_one_is_whole() -> None:
    """22.05 prints "name(uid)" through a 20-byte buffer; 25.11 prints it whole."""
    assert _events(EVENTS_22_05).events[2].user == "averyveryverylongad"
    assert _events(EVENTS_25_11).events[2].user == "averyveryverylongadmin(5001)"


def test_no_header_and_trailing_delimiter_read_the_same() -> None:
    """-n (no header: sacctmgr's default order) and -p (a `|` ending every line) give the
    same events as -P with its header."""
    expected = _events(EVENTS_22_05)
    no_header = EVENTS_22_05.split("\n", 1)[1]
    trailing = "".join(f"{line}|\n" for line in EVENTS_22_05.splitlines())
    assert _events(no_header) == expected
    assert _events(trailing) == expected


def test_the_doors_format_with_and_without_header() -> None:
    """The door's Format= (Reason last) reads with its header and without one."""
    body = (
        "node2|2026-11-21T23:04:10|Unknown|DOWN*||Not responding\n"
        "node[5-6]|2026-11-21T23:04:10|Unknown|FAIL|root(0)|a|b\n"
    )
    with_header = _events("|".join(EVENT_FIELDS) + "\n" + body)
    assert with_header == _events(body)
    assert [(e.node, e.reason) for e in with_header.events] == [
        ("node2", "Not responding"),
        ("node5", "a|b"),
        ("node6", "a|b"),
    ]


@pytest.mark.parametrize(
    ("state", "out"),
    [
        ("DOWN", True),
        ("DOWN*", True),
        ("DRAIN", True),
        ("DRAIN@", True),
        ("DRNG", True),
        ("FAIL", True),
        ("FAILG*", True),
        ("INVAL", True),
        ("IDLE", False),
        ("ALLOC", False),
        ("MAINT", False),
        ("BOOT^", False),
        ("POWERED_DN", False),
        ("", False),
    ],
)
def test_which_states_take_a_node_out_of_service(state: str, out: bool) -> None:
    """Down, drained, failing and invalid nodes are out of service; maintenance
    reservations, reboots and power saving are not."""
    event = NodeEvent("n1", datetime(2026, 1, 1), None, state, "", "")
    assert event.takes_node_out() is out


def test_bad_lines_are_counted_and_text_is_made_safe() -> None:
    """Lines that are not events are counted; a terminal escape in a reason is defused."""
    text = (
        EVENTS_22_05
        + "triage|node9|yesterday|Unknown|DOWN|x|\n"
        + "a continuation line of a reason with a newline\n"
        + "triage|node8|2026-11-23T00:00:00|Unknown|DOWN|\x1b[31mred|\n"
    )
    log = _events(text)
    assert log.unparsable == 2
    assert log.events[-1].reason == "?[31mred"


def test_a_header_without_the_needed_columns_is_an_output_error() -> None:
    """A header lacking NodeName or State cannot be read as node events."""
    with pytest.raises(SlurmOutputError, match="lacks State"):
        _events("Cluster|NodeName|TimeStart|TimeEnd\nc|n1|2026-01-01T00:00:00|Unknown\n")


def test_empty_output_has_no_events() -> None:
    assert _events("") == NodeEventLog(())


def _fake_sacctmgr(tmp_path: Path, output: str, rc: int = 0, stderr: str = "") -> Path:
    """A sacctmgr that logs its argv and SLURM_TIME_FORMAT, then prints `output`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "out.txt").write_text(output)
    script = bin_dir / "sacctmgr"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$SLURM_TIME_FORMAT $*" >> {shlex.quote(str(tmp_path / "argv.log"))}\n'
        f"cat {shlex.quote(str(tmp_path / 'out.txt'))}\n"
        f"echo {shlex.quote(stderr)} >&2\n"
        f"exit {rc}\n"
    )
    script.chmod(0o755)
    return bin_dir


def _cli(bin_dir: Path) -> CliDoor:
    env = {"PATH": "/usr/bin:/bin", "SLURM_TIME_FORMAT": "relative"}
    return CliDoor(Runner(timeout_s=5, attempts=1, env=env), bin_dir=str(bin_dir))


def test_cli_door_runs_sacctmgr_with_reason_last_and_iso_times(tmp_path: Path) -> None:
    """The door asks for node events of the period, Reason last, with SLURM_TIME_FORMAT
    forced to `standard` whatever the caller's environment says."""
    output = "|".join(EVENT_FIELDS) + "\nnode2|2026-11-21T23:04:10|Unknown|DOWN*||Not responding\n"
    door = _cli(_fake_sacctmgr(tmp_path, output))
    log = door.node_events(datetime(2026, 11, 1), datetime(2026, 12, 1, 6, 30))
    assert [(e.node, e.state, e.end) for e in log.events] == [("node2", "DOWN*", None)]
    call = (tmp_path / "argv.log").read_text().split()
    assert call == [
        "standard",
        "-P",
        "show",
        "event",
        "Events=Node",
        "Start=2026-11-01T00:00:00",
        "End=2026-12-01T06:30:00",
        "Format=NodeName,TimeStart,TimeEnd,State,User,Reason",
    ]
    assert sacctmgr_event_argv(datetime(2026, 11, 1), None)[-2] == "Start=2026-11-01T00:00:00"


def test_cli_door_refuses_output_that_is_not_what_it_asked_for(tmp_path: Path) -> None:
    """Another header (a site wrapper, another format) is an output error, not a guess."""
    door = _cli(_fake_sacctmgr(tmp_path, "Cluster|NodeName|TimeStart\n"))
    with pytest.raises(SlurmOutputError, match="expected the header"):
        door.node_events(datetime(2026, 11, 1))


def test_cli_door_sacctmgr_failure_is_a_slurm_error(tmp_path: Path) -> None:
    """sacctmgr failing (slurmdbd down, PrivateData=events) is a SlurmError naming it."""
    bin_dir = _fake_sacctmgr(tmp_path, "", rc=1, stderr=" Error with request: Access denied")
    with pytest.raises(SlurmCommandError, match="sacctmgr"):
        _cli(bin_dir).node_events(datetime(2026, 11, 1))


def test_pyslurm_door_reads_events_through_the_command_line() -> None:
    """pyslurm 25.11's only events reader keys them by start time (simultaneous downs
    would be lost), so the pyslurm door asks its command-line door."""
    since = datetime(2026, 11, 1)
    event = NodeEvent("node2", datetime(2026, 11, 2), None, "DOWN*", "Not responding", "")
    cli = FakeDoor(nodes=node_infos(2), events=[event])
    pyslurm: Any = object()  # never touched: no pyslurm call is made for events
    door = PyslurmDoor(pyslurm, cli=cli, timeout_s=5)
    assert door.node_events(since).events == (event,)
    assert cli.methods() == ["node_events"]


def test_fake_door_keeps_node_events_as_slurmdbd_does() -> None:
    """A drain opens an event (DRNG on a busy node), the same drain again changes nothing,
    a new reason closes it and opens another, a resume closes the open one; node_events
    selects what overlaps the period."""
    times = iter(datetime(2026, 1, 1, h) for h in range(1, 10))
    door = FakeDoor(
        nodes=[node_info("node1"), node_info("node2", state="ALLOCATED")],
        clock=lambda: next(times),
    )
    door.drain("node1", "triage: gpu_memory job=1: xid 48")
    door.drain("node1", "triage: gpu_memory job=1: xid 48")
    door.drain("node2", "triage: infiniband job=2: port down")
    door.drain_as_admin("node1", "swap the GPU")
    door.resume("node1")
    assert [(e.node, e.state, e.start.hour, e.end and e.end.hour) for e in door.events] == [
        ("node1", "DRAIN", 1, 3),
        ("node2", "DRNG", 2, None),
        ("node1", "DRAIN", 3, 4),
    ]
    assert door.events[2].user == "admin(1000)"
    late = door.node_events(datetime(2026, 1, 1, 3, 30))
    assert [e.node for e in late.events] == ["node2", "node1"]
    assert door.node_events(datetime(2026, 1, 1), datetime(2026, 1, 1, 1, 30)).events == (
        door.events[0],
    )
