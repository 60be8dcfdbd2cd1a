"""Slurm door fixes read from SchedMD's source (slurm-22-05-8-1, slurm-25-11-7-1) and
pyslurm 25.11.2: reservation flags pyslurm cannot name, 22.05's `sinfo --json` reporting a
failed load with exit status 0, SLURM_TIME_FORMAT on every command, `BatchFeatures=` without
`BatchHost=`, and resized jobs in sacct."""

from __future__ import annotations

import enum
import json
import shlex
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from slurm_triage.slurm.cli_backend import CliDoor
from slurm_triage.slurm.errors import (
    JobNotFound,
    SlurmOutputError,
    SlurmUnavailable,
)
from slurm_triage.slurm.events import EVENT_FIELDS
from slurm_triage.slurm.model import JobState, ReservationInfo
from slurm_triage.slurm.parse import (
    SACCT_DELIMITER,
    parse_sacct_job,
    parse_scontrol_job,
    parse_scontrol_job_json,
    parse_scontrol_nodes_json,
    parse_sinfo_json,
)
from slurm_triage.slurm.pyslurm_backend import PyslurmDoor
from slurm_triage.slurm.runner import Runner
from tests.conftest import FIXTURES

SLURM = FIXTURES / "slurm"

# -- S1: pyslurm reservation flags ------------------------------------------------------------


class ReservationFlags(enum.Flag):
    """pyslurm 25.11's ReservationFlags (core/reservation.pyx): an enum.Flag, strict as every
    Flag of Python 3.11+, with these members only (slurm.h's RESERVE_FLAG_* bits)."""

    MAINTENANCE = 1 << 0
    IGNORE_RUNNING_JOBS = 1 << 6
    ANY_NODES = 1 << 8
    STATIC_NODES = 1 << 10
    PARTITION_NODES_ONLY = 1 << 12
    OVERLAP = 1 << 14
    SPECIFIC_NODES = 1 << 15
    ALL_NODES = 1 << 19
    PURGE = 1 << 20
    FLEX = 1 << 25
    NO_JOB_HOLD_AFTER_END = 1 << 29
    MAGNETIC = 1 << 32
    SKIP = 1 << 34
    USER_DELETION = 1 << 39
    SCHED_FAILED = 1 << 41


# slurm.h (25.11) bits pyslurm has no member for.
TIME_FLOAT, REPLACE, GRES_REQ = 1 << 17, 1 << 18, 1 << 37


class PyslurmReservation:
    """pyslurm.Reservation as Reservations.load() gives it: `flags` is
    `ReservationFlags(self.info.flags)`, the C field having no other reader."""

    def __init__(self, name: str, bits: int, reoccurrence: str = "NO") -> None:
        self.name, self._bits, self.reoccurrence = name, bits, reoccurrence
        self.nodes, self.start_time, self.end_time, self.users = "node3", 100, 200, ["root"]

    @property
    def flags(self) -> ReservationFlags:
        return ReservationFlags(self._bits)


def _pyslurm_door(reservations: list[Any], cli: Any = None) -> PyslurmDoor:
    ps = SimpleNamespace(
        Reservations=SimpleNamespace(load=lambda: {r.name: r for r in reservations})
    )
    return PyslurmDoor(ps, cli=cli, timeout_s=5, attempts=1)


def test_pyslurm_reservations_with_bits_pyslurm_cannot_name_are_all_read() -> None:
    """slurmctld sets GRES_REQ on any reservation whose TRES names a gres (reservation.c
    create_resv), and TIME_FLOAT or REPLACE when asked; pyslurm's strict flag refuses those
    values, yet every reservation is read, with the flags scontrol would print."""
    ours = 1 << 0 | 1 << 6 | 1 << 15  # Flags=MAINT,IGNORE_JOBS + Nodes= (SPEC_NODES)
    with pytest.raises(ValueError, match="invalid value"):
        ReservationFlags(GRES_REQ | 1 << 0 | 1 << 15)  # what pyslurm's property does
    door = _pyslurm_door(
        [
            PyslurmReservation("triage_burnin_node3", ours),
            PyslurmReservation("gpu-maint", GRES_REQ | 1 << 0 | 1 << 15),
            PyslurmReservation("floating", TIME_FLOAT | REPLACE, reoccurrence="DAILY"),
        ]
    )
    assert {r.name: r.flags for r in door.reservations()} == {
        "floating": {"TIME_FLOAT", "REPLACE", "DAILY"},
        "gpu-maint": {"MAINT", "SPEC_NODES"},
        "triage_burnin_node3": {"MAINT", "IGNORE_JOBS", "SPEC_NODES"},
    }
    assert [r.maintenance for r in door.reservations()] == [False, True, True]


def test_pyslurm_reservation_flags_that_cannot_be_read_come_from_scontrol() -> None:
    """Flags refused without their value (a pyslurm of another shape) are no reason to
    drop a reservation or read it without flags: the command-line door reads them all."""

    class Refusing(PyslurmReservation):
        @property
        def flags(self) -> ReservationFlags:
            raise ValueError("flags unknown")

    told = ReservationInfo(
        name="gpu-maint",
        nodes=("node3",),
        start_time=100,
        end_time=200,
        flags=frozenset({"MAINT", "SPEC_NODES"}),
        users=("root",),
    )
    cli = SimpleNamespace(reservations=lambda: (told,))
    assert _pyslurm_door([Refusing("gpu-maint", 0)], cli=cli).reservations() == (told,)


# -- S2: an "errors" list in a JSON document --------------------------------------------------


def _sinfo_2205_load_failed() -> str:
    """22.05's `sinfo --json` when slurm_load_node fails: the recorded document's meta,
    `{"error": slurm_strerror(rc), "errno": rc}` with rc SLURM_ERROR (-1) in "errors"
    (plugins/openapi/v0.0.38/nodes.c _op_handler_nodes) and no nodes; exit status 0
    (src/sinfo/data.c dump_data returns SLURM_SUCCESS)."""
    document = json.loads((SLURM / "22.05" / "sinfo.json").read_text())
    document["errors"] = [{"error": "Unspecified error", "errno": -1}]
    document["nodes"] = []
    return json.dumps(document, indent=2)


def test_22_05_sinfo_load_failure_is_unavailable_and_retried(tmp_path: Path) -> None:
    """A failed load printed with exit status 0 is SlurmUnavailable with Slurm's words,
    retried within the budget as scontrol's exit status 1 is on 25.11: never an empty
    cluster, never NodeNotFound."""
    log = tmp_path / "calls.log"
    document = tmp_path / "sinfo.json"
    document.write_text(_sinfo_2205_load_failed())
    _script(tmp_path / "scontrol", log, 'echo "slurm 22.05.8"')
    _script(tmp_path / "sinfo", log, f"cat {shlex.quote(str(document))}")
    runner = Runner(timeout_s=5, attempts=3, retry_wait_s=0.01, sleep=lambda s: None)
    door = CliDoor(runner, bin_dir=str(tmp_path))
    with pytest.raises(SlurmUnavailable, match=r"sinfo --json: Unspecified error \(errno -1\)"):
        door.nodes()
    with pytest.raises(SlurmUnavailable):
        door.node("node3")
    sinfo_calls = [line for line in log.read_text().splitlines() if line.startswith("sinfo")]
    assert len(sinfo_calls) == 6  # three attempts each


def test_data_parser_errors_are_raised_in_slurms_words() -> None:
    """23.02+'s data_parser entries (OPENAPI_ERROR in parsers.c: description, error_number,
    error, source) are read too; Slurm's words map as a client's stderr does."""
    nodes = json.loads((SLURM / "25.11" / "scontrol_show_nodes.json").read_text())
    nodes["errors"] = [
        {
            "description": "slurm_load_node error",
            "error_number": 1001,
            "error": "Unable to contact slurm controller (connect failure)",
            "source": "scontrol",
        }
    ]
    with pytest.raises(SlurmUnavailable, match="connect failure"):
        parse_scontrol_nodes_json(json.dumps(nodes))
    job = json.loads((SLURM / "25.11" / "scontrol_json_show_job_running_forged.json").read_text())
    job["errors"] = [{"error": "Invalid job id specified", "error_number": 2017}]
    with pytest.raises(JobNotFound, match="Invalid job id"):
        parse_scontrol_job_json(json.dumps(job), 3)
    nodes["errors"] = [{"source": "x"}]  # no words at all: not Slurm's document
    with pytest.raises(SlurmOutputError):
        parse_scontrol_nodes_json(json.dumps(nodes))
    assert parse_sinfo_json((SLURM / "22.05" / "sinfo.json").read_text())  # "errors": []


# -- S3: SLURM_TIME_FORMAT --------------------------------------------------------------------


def _script(path: Path, log: Path, body: str) -> None:
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$(basename "$0") ${{SLURM_TIME_FORMAT-unset}} $*" >> {shlex.quote(str(log))}\n'
        f"{body}\n"
    )
    path.chmod(0o755)


def _pattern(argv: str) -> str:
    """A sh `case` pattern: the words quoted, a trailing * matching the rest."""
    words = argv.removesuffix("*")
    return (shlex.quote(words) if words else "") + ("*" if argv.endswith("*") else "")


@pytest.mark.parametrize("env", [None, {"PATH": "/usr/bin:/bin", "SLURM_TIME_FORMAT": "%d.%m"}])
def test_every_command_of_the_cli_door_gets_standard_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None
) -> None:
    """SLURM_TIME_FORMAT=relative in an admin's profile (or a strftime format in the door's
    environment) would make sacct, scontrol and sacctmgr print times no parser reads
    (parse_time.c slurm_make_time_str): every command the door runs gets `standard`."""
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    log, v22 = tmp_path / "calls.log", SLURM / "22.05"
    answers = {
        "scontrol": {
            "--version": 'echo "slurm 22.05.8"',
            "show job 2": f"cat {v22 / 'scontrol_show_job_running.txt'}",
            "show reservation": f"cat {v22 / 'scontrol_show_reservation.txt'}",
        },
        "sinfo": {"--json": f"cat {v22 / 'sinfo.json'}"},
        "sacct": {"-j 14 *": f"cat {v22 / 'sacct_requeued_then_cancelled.txt'}"},
        "sacctmgr": {"-P show event *": f"echo {shlex.quote('|'.join(EVENT_FIELDS))}"},
        "sbatch": {"*": "echo 42"},
        "scancel": {},
    }
    for command, cases in answers.items():
        lines = [f"  {_pattern(a)}) {b} ;;" for a, b in cases.items()]
        _script(tmp_path / command, log, 'case "$*" in\n' + "\n".join(lines) + "\nesac")
    door = CliDoor(Runner(timeout_s=5, attempts=1, env=env), bin_dir=str(tmp_path))
    assert door.job(2).state is JobState.RUNNING
    assert door.accounted_job(14).restart_count == 1
    assert door.nodes()
    door.accounting_text(datetime(2026, 1, 1), None, ("JobIDRaw", "Submit", "End"))
    door.node_events(datetime(2026, 1, 1))
    assert door.reservations()
    door.requeue(2)
    door.set_admin_comment(2, "triage")
    door.drain("node3", "triage: test")
    door.cancel(2)
    door.submit_burn_in("node3", "r", ["true"], job_name="burn", output="/tmp/o", time_limit_min=5)
    calls = [line.split(" ", 2)[:2] for line in log.read_text().splitlines()]
    assert {c for c, _ in calls} == set(answers)
    assert {fmt for _, fmt in calls} == {"standard"}


# -- S4: BatchFeatures without BatchHost ------------------------------------------------------


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_batch_features_are_read_with_and_without_a_batch_host(version: str) -> None:
    """Line 14 (22.05 job_info.c, 25.11 info_job.c): "BatchFeatures=%s", then
    " BatchHost=%s" only while batch_host is set; a pending `sbatch --batch=` job, or one
    requeued (batch_requeue_fini frees batch_host), prints BatchFeatures alone."""
    text = (SLURM / version / "scontrol_show_job_pending_user_text.txt").read_text()
    job_id = int(text.split()[0].removeprefix("JobId="))
    assert "   NodeList=\n" in text
    alone = text.replace("   NodeList=\n", "   NodeList=\n   BatchFeatures=a100&ib\n")
    job = parse_scontrol_job(alone, job_id)
    assert (job.state, job.batch_host) == (JobState.PENDING, "")
    both = alone.replace("BatchFeatures=a100&ib", "BatchFeatures=a100&ib BatchHost=node3")
    assert parse_scontrol_job(both, job_id).batch_host == "node3"


# -- S5: resized jobs in sacct ----------------------------------------------------------------


def _sacct_rows(flags: str, *rows: tuple[str, str, str]) -> str:
    """`sacct -D -X -n -P --delimiter=US -o SACCT_FIELDS` rows of job 21 (state, nodes,
    node count); Flags as slurmdb_job_flags_str spells them on each release."""
    return "".join(
        SACCT_DELIMITER.join(
            ["21", "21", state, "0:0", nodes, "root", "0", "gpu", count, "01:00:00", flags, ""]
        )
        + "\n"
        for state, nodes, count in rows
    )


@pytest.mark.parametrize(
    "flags", ["SchedMain,StartRecieved", "SchedMain,StartReceived"], ids=["22.05", "25.11"]
)
def test_a_resize_is_no_restart(flags: str) -> None:
    """A running job that changes size gets a RESIZING row and a new record for the same
    run (job_pre_resize_acctg, job_post_resize_acctg); a requeue's row (REQUEUED, NODE_FAIL,
    or on 25.11 the state a completing job ended in) is one restart each."""
    resized = _sacct_rows(flags, ("RESIZING", "node[2-3]", "2"), ("COMPLETED", "node2", "1"))
    job = parse_sacct_job(resized, 21)
    assert (job.state, job.nodes, job.restart_count) == (JobState.COMPLETED, ("node2",), 0)
    requeued = _sacct_rows(
        flags,
        ("RESIZING", "node[2-3]", "2"),
        ("REQUEUED", "node2", "1"),
        ("FAILED", "node1", "1"),
        ("RESIZING", "node[1,4]", "2"),
        ("RUNNING", "node4", "1"),
    )
    assert parse_sacct_job(requeued, 21).restart_count == 2


# -- S6: cancelling an ended or unknown job ---------------------------------------------------


def test_every_door_cancels_an_ended_or_unknown_job_without_error() -> None:
    """scancel exits 0 for a job that already ended or that slurmctld no longer knows when it
    sends SIGKILL (scancel.c, 22.05 and 25.11): the pyslurm door and the FakeDoor do the same
    (they raised JobNotFound and InvalidJobState)."""
    from slurm_triage.testing import FakeDoor, job_info

    fake = FakeDoor([replace(job_info(7), state=JobState.FAILED)])
    fake.cancel(7)
    fake.cancel(999)
    assert fake.jobs[7].state is JobState.FAILED

    def unknown(job_id: int) -> None:
        raise RuntimeError(f"Failed to load job {job_id}: Invalid job id specified")

    ps = SimpleNamespace(Job=SimpleNamespace(load=unknown))
    PyslurmDoor(ps, cli=None, timeout_s=5, attempts=1).cancel(999)
