"""The door's repair operations (issue 16): what the command-line door runs, how it reads
reservations and the new node fields, and how Slurm's refusals map to error classes.

The reservation fixtures follow slurm_sprint_reservation_info (src/api/reservation_info.c)
of slurm-22-05-8-1 (a Watts= field, no AllowedPartitions line) and slurm-25-11-7-1
(AllowedPartitions=/QOS= line, optional Comment= line last), with core-reservation lines
("  NodeName=N CoreIDs=C") and a Comment that imitates a Users= line.
"""

from __future__ import annotations

import enum
import json
import shlex
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurm_triage.slurm import parse
from slurm_triage.slurm.cli_backend import CliDoor, parse_sbatch_parsable
from slurm_triage.slurm.errors import (
    NodeNotFound,
    ReservationNotFound,
    SlurmCommandError,
    SlurmOutputError,
)
from slurm_triage.slurm.model import NodeFlag
from slurm_triage.slurm.pyslurm_backend import PyslurmDoor, _node, _reservation
from slurm_triage.slurm.reservations import parse_scontrol_reservations
from slurm_triage.slurm.runner import Runner
from tests.conftest import FIXTURES

SLURM = FIXTURES / "slurm"


def _epoch(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


# -- reservations, text form ------------------------------------------------------------------


def test_22_05_reservations_are_read_from_their_own_lines() -> None:
    """22.05's layout: name (spaces and all), window as local ISO time, expanded nodes,
    Slurm's flags and the users."""
    found = parse_scontrol_reservations(
        (SLURM / "22.05" / "scontrol_show_reservation.txt").read_text()
    )
    burn_in, weekly = found
    assert burn_in.name == "triage_burnin_node2"
    assert burn_in.nodes == ("node2",)
    assert burn_in.flags == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"}
    assert burn_in.users == ("slurmtriage",)
    assert (burn_in.start_time, burn_in.end_time) == (
        _epoch("2026-11-22T10:00:00"),
        _epoch("2026-11-22T12:00:00"),
    )
    assert burn_in.maintenance and burn_in.active(_epoch("2026-11-22T11:00:00"))
    assert not burn_in.active(_epoch("2026-11-22T12:00:01"))
    assert weekly.name == "weekly maint"
    assert weekly.nodes == ("node1", "node3", "node4")
    assert weekly.users == ("root", "alice")


def test_25_11_reservations_skip_core_lines_and_ignore_a_forged_users_line() -> None:
    """25.11 adds AllowedPartitions=; core lines come before TRES=; a Comment holding a
    newline and `   Users=root` does not change the users read from Slurm's own line."""
    burn_in, cores = parse_scontrol_reservations(
        (SLURM / "25.11" / "scontrol_show_reservation.txt").read_text()
    )
    assert burn_in.users == ("slurmtriage",)
    assert cores.nodes == ("node3", "node4")
    assert cores.users == ("bob",)
    assert cores.flags == {"SPEC_NODES"}


def test_no_reservations_is_an_empty_tuple() -> None:
    text = (SLURM / "25.11" / "scontrol_show_reservation_none.txt").read_text()
    assert parse_scontrol_reservations(text) == ()


@pytest.mark.parametrize(
    "text",
    [
        "Reservation list:\n",
        "ReservationName=x StartTime=2026-11-22T10:00:00 EndTime=2026-11-22T12:00:00 "
        "Duration=02:00:00\n   TRES=cpu=8\n",
        "ReservationName=x StartTime=yesterday EndTime=2026-11-22T12:00:00 Duration=1\n"
        "   Nodes=n1 NodeCnt=1 CoreCnt=1 Features=(null) PartitionName=(null) Flags=MAINT\n"
        "   TRES=cpu=1\n   Users=a Groups=(null) Accounts=(null) Licenses=(null) State=A\n",
    ],
)
def test_output_not_in_slurms_layout_is_refused(text: str) -> None:
    with pytest.raises(SlurmOutputError):
        parse_scontrol_reservations(text)


# -- the new node fields ---------------------------------------------------------------------


def test_node_fields_from_22_05_sinfo_and_25_11_scontrol_json() -> None:
    """weight, features (22.05: a CSV string; 25.11: a list) and boot_time (22.05: an int;
    25.11: {set, infinite, number}) from the recorded documents."""
    old = parse.parse_sinfo_json((SLURM / "22.05" / "sinfo.json").read_text())[0]
    new = parse.parse_scontrol_nodes_json(
        (SLURM / "25.11" / "scontrol_show_nodes.json").read_text()
    )[0]
    assert (old.weight, old.features, old.active_features, old.boot_time) == (
        1,
        (),
        (),
        1795400143,
    )
    assert (new.weight, new.features, new.boot_time) == (1, (), 1795400144)


def test_node_features_and_reboot_flags_in_both_json_shapes() -> None:
    """A rebooting suspect node as each generation prints it."""
    v22 = json.loads((SLURM / "22.05" / "sinfo.json").read_text())
    v22["nodes"] = [v22["nodes"][0]]
    v22["nodes"][0].update(
        state="idle",
        state_flags=["DRAIN", "REBOOT_REQUESTED"],
        features="gpu,triage_suspect",
        active_features="gpu,triage_suspect",
        weight=1000,
    )
    v25 = json.loads((SLURM / "25.11" / "scontrol_show_nodes.json").read_text())
    v25["nodes"] = [v25["nodes"][0]]
    v25["nodes"][0].update(
        state=["DOWN", "DRAIN", "REBOOT_ISSUED"],
        features=["gpu", "triage_suspect"],
        active_features=["gpu"],
        weight=1000,
    )
    old = parse.parse_sinfo_json(json.dumps(v22))[0]
    new = parse.parse_scontrol_nodes_json(json.dumps(v25))[0]
    assert old.features == old.active_features == ("gpu", "triage_suspect")
    assert NodeFlag.REBOOT_REQUESTED in old.flags and old.reboot_pending and old.drained
    assert new.active_features == ("gpu",) and new.weight == 1000
    assert new.reboot_pending and new.state == "DOWN"


# -- the command-line door's argv ---------------------------------------------------------------


def _door(tmp_path: Path, answers: dict[str, tuple[int, str, str]]) -> tuple[CliDoor, Path]:
    """scontrol and sbatch that log each argv (one argument a line, a record a blank line)
    and answer (rc, stdout, stderr) for the first words they are given."""
    log = tmp_path / "argv.log"
    for command in ("scontrol", "sbatch"):
        cases = ['  "--version") echo "slurm 25.11.7"; exit 0 ;;']
        for prefix, (rc, out, err) in answers.items():
            if prefix.startswith(command + " "):
                pattern = shlex.quote(prefix.removeprefix(command + " ")) + "*"
                cases.append(
                    f"  {pattern}) printf %s {shlex.quote(out)}; "
                    f"printf %s {shlex.quote(err)} >&2; exit {rc} ;;"
                )
        script = tmp_path / command
        script.write_text(
            "#!/bin/sh\n"
            f"printf '%s\\n' {command} \"$@\" '' >> {shlex.quote(str(log))}\n"
            'case "$*" in\n' + "\n".join(cases) + "\n  *) exit 0 ;;\nesac\n"
        )
        script.chmod(0o755)
    return CliDoor(Runner(timeout_s=5, attempts=1), bin_dir=str(tmp_path)), log


def _argvs(log: Path) -> list[list[str]]:
    records = log.read_text().split("\n\n")
    return [r.split("\n") for r in records if r.strip()]


def test_reboot_argv_keeps_the_reason_one_argument(tmp_path: Path) -> None:
    """Drained first with the reason, then rebooted with neither ASAP (a RESUME next state
    on 22.05) nor nextstate= (DRAIN cleared at boot): the node stays drained through it.
    Reason= comes first (scontrol reads options only among the three words after
    `reboot`), the reason one line, the node last."""
    door, log = _door(tmp_path, {})
    door.reboot("node2", "triage: repairing reboot xid79\nnode3 ALL")
    reason = "triage: repairing reboot xid79 node3 ALL"
    assert _argvs(log) == [
        ["scontrol", "update", "NodeName=node2", "State=DRAIN", f"Reason={reason}"],
        ["scontrol", "reboot", f"Reason={reason}", "node2"],
    ]


@pytest.mark.parametrize("node", ["ALL", "all", "node[1-4]", "node1,node2", "", "-h"])
def test_reboot_of_anything_but_one_node_is_refused_before_scontrol(
    tmp_path: Path, node: str
) -> None:
    """`ALL` would reboot every node; a hostlist several."""
    door, log = _door(tmp_path, {})
    with pytest.raises(SlurmCommandError):
        door.reboot(node, "triage: x")
    assert not log.exists()


def test_reservation_create_delete_and_burn_in_argv(tmp_path: Path) -> None:
    door, log = _door(
        tmp_path, {"sbatch --parsable": (0, "4242;cluster\n", ""), "scontrol create": (0, "", "")}
    )
    door.create_reservation("triage_burnin_node2", "node2", 3601, ["slurmtriage"])
    job_id = door.submit_burn_in(
        "node2",
        "triage_burnin_node2",
        ["slurm-triage", "burn-in", "--json"],
        job_name="triage-burnin-node2",
        output="/var/log/triage/burnin-%j.out",
        time_limit_min=30,
    )
    door.delete_reservation("triage_burnin_node2")
    assert job_id == 4242
    create, submit, delete = _argvs(log)
    assert create == [
        "scontrol",
        "create",
        "reservation",
        "ReservationName=triage_burnin_node2",
        "Nodes=node2",
        "StartTime=now",
        "Duration=61",
        "Users=slurmtriage",
        "Flags=MAINT,IGNORE_JOBS",
    ]
    assert submit == [
        "sbatch",
        "--parsable",
        "--reservation=triage_burnin_node2",
        "--nodelist=node2",
        "--nodes=1",
        "--exclusive",
        "--no-requeue",
        "--job-name=triage-burnin-node2",
        "--output=/var/log/triage/burnin-%j.out",
        "--time=30",
        "--wrap=slurm-triage burn-in --json",
    ]
    assert delete == ["scontrol", "delete", "ReservationName=triage_burnin_node2"]


def test_weight_and_features_argv(tmp_path: Path) -> None:
    door, log = _door(tmp_path, {})
    door.set_node_weight("node2", 1000)
    door.set_node_features("node2", ["gpu", "triage_suspect"], ["triage_suspect"])
    door.set_node_features("node2", [], [])
    assert _argvs(log) == [
        ["scontrol", "update", "NodeName=node2", "Weight=1000"],
        [
            "scontrol",
            "update",
            "NodeName=node2",
            "AvailableFeatures=gpu,triage_suspect",
            "ActiveFeatures=triage_suspect",
        ],
        ["scontrol", "update", "NodeName=node2", "AvailableFeatures=", "ActiveFeatures="],
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda d: d.set_node_features("n1", ["a,b"], []), "invalid node feature"),
        (lambda d: d.set_node_features("n1", ["a"], ["b"]), "not among the available"),
        (lambda d: d.set_node_weight("n1", -1), "invalid node weight"),
        (lambda d: d.create_reservation("r", "n1", 60, ["bob,root"]), "invalid user name"),
        (lambda d: d.create_reservation("r x", "n1", 60, ["bob"]), "reservation name"),
        (lambda d: d.create_reservation("r", "n1", 0, ["bob"]), "invalid duration"),
        (
            lambda d: d.submit_burn_in(
                "n1", "r", ["x"], job_name="j", output="/tmp/a\nb", time_limit_min=5
            ),
            "output path",
        ),
        (
            lambda d: d.submit_burn_in(
                "n1", "r", "x", job_name="j", output="/tmp/a", time_limit_min=5
            ),
            "list of words",
        ),
    ],
)
def test_bad_values_are_refused_before_any_command(tmp_path: Path, call, message: str) -> None:  # type: ignore[no-untyped-def]
    door, log = _door(tmp_path, {})
    with pytest.raises(SlurmCommandError, match=message):
        call(door)
    assert not log.exists()


def test_slurms_refusals_map_to_error_classes(tmp_path: Path) -> None:
    """slurm_perror's words (slurm_errno.c): an unknown reservation to delete or to submit
    into is ReservationNotFound; an unknown node NodeNotFound; one in use a refusal."""
    door, _ = _door(
        tmp_path,
        {
            "scontrol delete ReservationName=gone": (
                1,
                "",
                "delete_reservation ReservationName=gone: Requested reservation is invalid\n",
            ),
            "scontrol delete ReservationName=busy": (
                1,
                "",
                "delete_reservation ReservationName=busy: Requested reservation is in use\n",
            ),
            "sbatch --parsable": (
                1,
                "",
                "sbatch: error: Batch job submission failed: Requested reservation is invalid\n",
            ),
            "scontrol create": (
                1,
                "",
                "Error creating the reservation: Invalid node name specified\n",
            ),
        },
    )
    with pytest.raises(ReservationNotFound):
        door.delete_reservation("gone")
    with pytest.raises(SlurmCommandError, match="in use") as busy:
        door.delete_reservation("busy")
    assert not isinstance(busy.value, ReservationNotFound)
    with pytest.raises(ReservationNotFound):
        door.submit_burn_in("n1", "gone", ["x"], job_name="j", output="/o", time_limit_min=5)
    with pytest.raises(NodeNotFound):
        door.create_reservation("r", "nodeX", 60, ["bob"])


@pytest.mark.parametrize(("text", "job_id"), [("17\n", 17), ("18;mycluster\n", 18)])
def test_sbatch_parsable(text: str, job_id: int) -> None:
    assert parse_sbatch_parsable(text) == job_id


def test_sbatch_without_a_job_id_is_an_output_error() -> None:
    with pytest.raises(SlurmOutputError):
        parse_sbatch_parsable("Submitted batch job 17\n")


def test_reservations_are_read_with_standard_times(tmp_path: Path) -> None:
    """The caller's SLURM_TIME_FORMAT would change the times scontrol prints."""
    script = tmp_path / "scontrol"
    fixture = SLURM / "22.05" / "scontrol_show_reservation.txt"
    script.write_text(
        '#!/bin/sh\n[ "$SLURM_TIME_FORMAT" = standard ] || exit 3\n'
        f"cat {shlex.quote(str(fixture))}\n"
    )
    script.chmod(0o755)
    runner = Runner(
        timeout_s=5, attempts=1, env={"SLURM_TIME_FORMAT": "relative", "PATH": "/usr/bin:/bin"}
    )
    names = [r.name for r in CliDoor(runner, bin_dir=str(tmp_path)).reservations()]
    assert names == ["triage_burnin_node2", "weekly maint"]


# -- pyslurm ------------------------------------------------------------------------------


class _ReservationFlags(enum.Flag):
    """Members of pyslurm 25.11's ReservationFlags (core/reservation.pyx), slurm.h's bits."""

    MAINTENANCE = 1 << 0  # RESERVE_FLAG_MAINT
    IGNORE_RUNNING_JOBS = 1 << 6  # RESERVE_FLAG_IGN_JOBS
    SPECIFIC_NODES = 1 << 15  # RESERVE_FLAG_SPEC_NODES


def test_pyslurm_reservation_and_node_fields() -> None:
    """pyslurm 25.11's Reservation (flags as ReservationFlags members) and Node
    (available_features, active_features, weight, boot_time) read as the CLI reads them."""
    raw = SimpleNamespace(
        name="triage_burnin_node2",
        nodes="node[2-3]",
        start_time=100,
        end_time=200,
        users=["slurmtriage"],
        flags=_ReservationFlags.MAINTENANCE
        | _ReservationFlags.IGNORE_RUNNING_JOBS
        | _ReservationFlags.SPECIFIC_NODES,
    )
    resv = _reservation(raw)
    assert resv.flags == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"}
    assert resv.nodes == ("node2", "node3")
    node = _node(
        SimpleNamespace(
            name="node2",
            state="DOWN+DRAIN+REBOOT_ISSUED",
            reason="triage: x : reboot issued",
            reason_user="slurm",
            reason_time=5,
            partitions=["gpu"],
            comment=None,
            weight=1000,
            available_features=["gpu", "triage_suspect"],
            active_features=["gpu"],
            boot_time=1795400144,
        )
    )
    assert node.reboot_pending and node.weight == 1000
    assert (node.features, node.active_features, node.boot_time) == (
        ("gpu", "triage_suspect"),
        ("gpu",),
        1795400144,
    )


class _RecordingCli:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return lambda *args, **kwargs: self.calls.append((name, args))


def test_pyslurm_door_sends_what_pyslurm_cannot_do_to_the_command_line() -> None:
    """No reboot call in pyslurm 25.11; weight 0 and empty feature lists would be read as
    "no change" (u32 zero_is_noval, "" as NULL)."""
    modified: list[dict[str, object]] = []

    class Node:
        def __init__(self, name: str | None = None, **change: object) -> None:
            self.change = change

        def modify(self, changes: Node) -> None:
            modified.append(changes.change)

    cli = _RecordingCli()
    door = PyslurmDoor(SimpleNamespace(Node=Node), cli=cli, timeout_s=5)  # type: ignore[arg-type]
    door.reboot("node2", "triage: r")
    door.set_node_weight("node2", 0)
    door.set_node_weight("node2", 1000)
    door.set_node_features("node2", ["gpu"], [])
    door.set_node_features("node2", ["gpu", "triage_suspect"], ["triage_suspect"])
    assert [name for name, _ in cli.calls] == ["reboot", "set_node_weight", "set_node_features"]
    assert modified == [
        {"weight": 1000},
        {"available_features": ["gpu", "triage_suspect"], "active_features": ["triage_suspect"]},
    ]


def test_pyslurm_unknown_reservation_is_reservation_not_found() -> None:
    """pyslurm's RPCError carries slurm_strerror's words."""

    class Reservation:
        def __init__(self, name: str) -> None:
            self.name = name

        def delete(self) -> None:
            raise RuntimeError("Requested reservation is invalid")

    door = PyslurmDoor(
        SimpleNamespace(Reservation=Reservation),
        cli=_RecordingCli(),  # type: ignore[arg-type]
        timeout_s=5,
    )
    with pytest.raises(ReservationNotFound):
        door.delete_reservation("gone")
