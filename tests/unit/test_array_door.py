"""One task of a job array, or one component of a het job, failed: what slurm-triage does
to it reaches that task alone, or the het job as Slurm requires it whole.

slurmctld reads a bare number as the whole array when it is the array's id (job_mgr.c
job_requeue2, update_job_str, job_str_signal, 22.05 and 25.11), and one task always has
the array's id as its own SLURM_JOB_ID: the last to start keeps the array's record
(job_array_post_sched). FakeDoor acts on a job spec as slurmctld does, so a door that sent
the bare number would requeue, cancel or update every sibling here."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from slurm_triage import actuator
from slurm_triage.actuator import Applied
from slurm_triage.cli.main import build_parser
from slurm_triage.policies import Decision, Verdict
from slurm_triage.slurm import JobState
from slurm_triage.slurm.cli_backend import CliDoor
from slurm_triage.slurm.pyslurm_backend import PyslurmDoor
from slurm_triage.slurm.runner import Runner
from slurm_triage.testing import Call, FakeDoor, job_info, node_infos
from tests.conftest import FIXTURES

SLURM = FIXTURES / "slurm"
ARRAY = 100  # `sbatch --array=0-1`: task 0 started first as job 101, task 1 kept job 100
SIBLING = 101
REASON = "triage: gpu_unavailable job=100: XID 79"


def _array_door(version: str = "22.05.8") -> FakeDoor:
    """A running two-task array; task 1 (job 100, the array's own number) has failed."""
    failed = job_info(ARRAY, nodes=("node1",), num_nodes=1, array_job_id=ARRAY, array_task_id=1)
    sibling = job_info(SIBLING, nodes=("node2",), num_nodes=1, array_job_id=ARRAY, array_task_id=0)
    door = FakeDoor([failed, sibling], node_infos(4), version=version)
    door.accounting[SIBLING] = replace(sibling, source="sacct")  # a started run's record
    door.end_job(ARRAY, "FAILED", exit_code=1)  # COMPLETING, as EpilogSlurmctld sees it
    return door


def _carry_out(door: FakeDoor, job_id: int, decision: Decision, **kw: Any) -> Applied:
    args: dict[str, Any] = {
        "cause": "gpu_unavailable",
        "blamed": ("node1",),
        "restart": 0,
        "drain_reason": REASON,
        "dry_run": False,
    }
    return actuator.carry_out(door, job_id, decision, **(args | kw))


def _untouched(door: FakeDoor, job_id: int) -> None:
    job = door.jobs[job_id]
    assert (job.state, job.restart_count, job.excluded_nodes, job.admin_comment) == (
        JobState.RUNNING,
        0,
        (),
        "",
    )


def test_requeue_of_the_task_holding_the_arrays_number_leaves_its_sibling_running() -> None:
    """The XID case: task 1 (job 100 = the array's id) is requeued, excluded, commented;
    task 0 runs on, its accounting record unchanged."""
    door = _array_door()
    decision = Decision(Verdict.REQUEUE, exclude=("node1",), drain=("node1",), begin_delay_s=30)
    applied = _carry_out(door, ARRAY, decision)
    assert applied == Applied(requeued=True, excluded=("node1",), drained=("node1",))
    failed = door.jobs[ARRAY]
    assert (failed.state, failed.restart_count, failed.excluded_nodes) == (
        JobState.PENDING,
        1,
        ("node1",),
    )
    assert failed.admin_comment.startswith('{"triage"')
    assert door.accounting[ARRAY].admin_comment.startswith("triage: cause=gpu_unavailable")
    _untouched(door, SIBLING)
    assert door.accounting[SIBLING].admin_comment == ""


def test_cancel_after_an_expedited_held_requeue_cancels_that_task_only() -> None:
    """Slurm requeued the failed task held (25.11 --requeue=expedite, no Epilog failed) and
    our verdict is not a requeue: that task is cancelled, the array's other task runs on."""
    door = _array_door("25.11.7")
    door.finish_expedited_requeue(ARRAY, epilog_failed=False)
    applied = _carry_out(
        door,
        ARRAY,
        Decision(Verdict.RECORD_ONLY),
        cause="user_code",
        blamed=(),
        already_requeued=True,
        held_by_slurm=True,
    )
    assert door.calls_to("cancel") == [Call("cancel", (ARRAY,))]
    assert door.jobs[ARRAY].state is JobState.CANCELLED and not applied.errors
    _untouched(door, SIBLING)


def test_cancel_of_a_task_whose_number_is_its_own_reaches_it_on_22_05() -> None:
    """22.05's scancel of a task's own number (not the array's) signals nothing and exits 0
    (job_str_signal before 23.02.6): the task is cancelled as `A_T`."""
    door = _array_door("22.05.8")
    door.cancel(SIBLING)
    assert door.jobs[SIBLING].state is JobState.CANCELLED
    assert door.jobs[ARRAY].state is JobState.COMPLETING  # untouched


def test_hold_and_release_reach_one_pending_task() -> None:
    """Both tasks wait (requeued); holding and releasing the one with the array's number
    leaves the other as it was."""
    door = _array_door()
    door.requeue(ARRAY)
    door.jobs[SIBLING] = replace(door.jobs[SIBLING], state=JobState.PENDING, state_reason="None")
    door.hold(ARRAY)
    assert door.jobs[ARRAY].state_reason == "JobHeldAdmin"
    assert door.jobs[SIBLING].state_reason == "None"
    door.jobs[SIBLING] = replace(door.jobs[SIBLING], state_reason="JobHeldAdmin")
    door.release(ARRAY)
    assert (door.jobs[ARRAY].state_reason, door.jobs[SIBLING].state_reason) == (
        "None",
        "JobHeldAdmin",
    )


def test_a_het_component_fault_requeues_the_het_job_through_its_leader() -> None:
    """Slurm refuses `scontrol requeue <component>` ("Job not heterogeneous job leader") and
    requeues a het job whole by its leader; the exclusion goes to every component (each may
    land on the node in the next run), each keeping its own."""
    leader = job_info(200, nodes=("node1",), het_job_id=200, het_job_offset=0)
    leader = replace(leader, excluded_nodes=("node3",))
    part = job_info(201, nodes=("node2",), het_job_id=200, het_job_offset=1)
    door = FakeDoor([leader, part], node_infos(4))
    door.end_job(201, "FAILED", exit_code=1)
    decision = Decision(Verdict.REQUEUE, exclude=("node2",))
    applied = _carry_out(door, 201, decision, blamed=("node2",))
    assert applied.requeued and not applied.errors, applied.errors
    assert [door.jobs[j].restart_count for j in (200, 201)] == [1, 1]
    assert (door.jobs[200].excluded_nodes, door.jobs[201].excluded_nodes) == (
        ("node3", "node2"),
        ("node2",),
    )


# -- the command-line door's argv -------------------------------------------------------------


def _fake_slurm(
    bin_dir: Path, version: str, show: str, record: Path, *also: str
) -> tuple[CliDoor, Path]:
    """Slurm clients that log their argv, print `record` for `show` (and the commands
    `also` names), and accept the rest."""
    log = bin_dir / "argv.log"
    for command in ("scontrol", "scancel", "sacctmgr", "sacct"):
        script = bin_dir / command
        shown = "|".join(shlex.quote(c.removeprefix(command + " ")) for c in (show, *also))
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{command} $*" >> {shlex.quote(str(log))}\n'
            'case "$*" in\n'
            f'  "--version") echo "slurm {version}" ;;\n'
            f"  {shown}) cat {shlex.quote(str(record))};;\n"
            "esac\n"
        )
        script.chmod(0o755)
    return CliDoor(Runner(timeout_s=5, attempts=1), bin_dir=str(bin_dir)), log


def test_cli_door_names_an_array_task_a_t_on_25_11(tmp_path: Path) -> None:
    """Job 6 is task 1 of array 6: every operation names `6_1`; the job is read once."""
    record = SLURM / "25.11" / "scontrol_json_show_job_array_task_failed.json"
    door, log = _fake_slurm(tmp_path, "25.11.7", "scontrol --json show job 6", record)
    door.requeue(6)
    door.hold(6)
    door.release(6)
    door.set_excluded_nodes(6, ["node1"], merge=False)
    door.set_begin_time(6, 30)
    door.set_admin_comment(6, "x")
    door.set_accounted_admin_comment(6, "triage: cause=x")
    door.cancel(6)
    assert log.read_text().splitlines() == [
        "scontrol --version",
        "scontrol --json show job 6",
        "scontrol requeue 6_1",
        "scontrol hold 6_1",
        "scontrol release 6_1",
        "scontrol update JobId=6_1 ExcNodeList=node1",
        "scontrol update JobId=6_1 StartTime=now+30",
        "scontrol update JobId=6_1 AdminComment=x",
        "sacctmgr -i modify job where JobID=6_1 set AdminComment=triage: cause=x",
        "scancel 6_1",
    ]


def test_cli_door_requeues_a_het_component_by_its_leader_on_22_05(tmp_path: Path) -> None:
    """Job 8 is component 1 of het job 7: requeue, cancel and the begin time name the leader
    (the whole het job); an exclusion reaches every component (`7+0`, `7+1`, read from
    `scontrol show job 7`), each keeping its own (7 excludes node1, 8 node3)."""
    record = SLURM / "22.05" / "scontrol_show_job_het.txt"
    door, log = _fake_slurm(
        tmp_path, "22.05.8", "scontrol show job 8", record, "scontrol show job 7"
    )
    door.requeue(8, hold=True)
    assert door.set_excluded_nodes(8, ["node2"]) == ("node3", "node2")
    door.set_begin_time(8, 30)
    door.set_admin_comment(8, "x")
    door.cancel(8)
    assert log.read_text().splitlines()[2:] == [
        "scontrol requeuehold 7",
        "scontrol show job 7",
        "scontrol update JobId=7+0 ExcNodeList=node[1-2]",
        "scontrol update JobId=7+1 ExcNodeList=node[2-3]",
        "scontrol update JobId=7 StartTime=now+30",
        "scontrol update JobId=7+1 AdminComment=x",
        "scancel 7",
    ]


def test_cli_door_excludes_a_node_from_every_het_component_on_25_11(tmp_path: Path) -> None:
    """Job 10 is component 1 of het job 9 (`--exclude=node3 : --exclude=node1`): node2 is
    excluded from both, each keeping its own, read from `scontrol --json show job 9`."""
    record = SLURM / "25.11" / "scontrol_json_show_job_het.json"
    door, log = _fake_slurm(
        tmp_path, "25.11.7", "scontrol --json show job 10", record, "scontrol --json show job 9"
    )
    assert door.set_excluded_nodes(10, ["node2"]) == ("node1", "node2")
    assert log.read_text().splitlines()[1:] == [
        "scontrol --json show job 10",
        "scontrol --json show job 9",
        "scontrol update JobId=9+0 ExcNodeList=node[2-3]",
        "scontrol update JobId=9+1 ExcNodeList=node[1-2]",
    ]


# -- the pyslurm door -------------------------------------------------------------------------


class _PyslurmJob:
    """pyslurm 25.11's Job as the door uses it: load() reads slurmctld's record; the
    instance methods act by number (slurm_requeue, slurm_update_job, slurm_kill_job)."""

    records: dict[int, SimpleNamespace] = {}
    acted: list[tuple[str, int]] = []

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id

    @classmethod
    def load(cls, job_id: int) -> SimpleNamespace:
        return cls.records[job_id]

    def requeue(self, hold: bool = False) -> None:
        self.acted.append(("requeue", self.job_id))

    def hold(self) -> None:
        self.acted.append(("hold", self.job_id))

    def cancel(self) -> None:
        self.acted.append(("cancel", self.job_id))


def _raw(job_id: int, **ids: Any) -> SimpleNamespace:
    """A running job's record as pyslurm 25.11 shows it: u32 0 reads as None (task 0, the
    het leader's offset)."""
    fields: dict[str, Any] = {
        "id": job_id,
        "state": "RUNNING",
        "state_reason": "None",
        "exit_code": 0,
        "exit_code_signal": 0,
        "allocated_nodes": "node1",
        "excluded_nodes": None,
        "required_nodes": None,
        "requeue_count": 0,
        "is_requeueable": False,
        "is_batch_job": True,
        "user_name": "alice",
        "user_id": 4242,
        "partition": "gpu",
        "num_nodes": 1,
        "time_limit": 60,
        "admin_comment": None,
        "comment": None,
        "standard_output": "/tmp/o",
        "standard_error": None,
        "batch_host": "node1",
        "start_time": 1000,
        "array_id": None,
        "array_task_id": None,
        "array_tasks_waiting": None,
        "heterogeneous_id": None,
        "heterogeneous_offset": None,
    }
    return SimpleNamespace(**(fields | ids))


def test_pyslurm_door_cancels_an_array_task_through_scancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pyslurm's cancel sends the bare number (the whole array for the array's own id): an
    array task is cancelled through the command-line door; its requeue stays pyslurm's
    (slurm_requeue by number requeues the one record); pyslurm's task 0 is task 0."""
    monkeypatch.setattr(_PyslurmJob, "acted", [])
    monkeypatch.setattr(
        _PyslurmJob,
        "records",
        {
            13: _raw(13, array_id=13, array_task_id=2),
            14: _raw(14, array_id=13),  # task 0: pyslurm reads the u32 0 as None
            16: _raw(16, heterogeneous_id=16),
            17: _raw(17, heterogeneous_id=16, heterogeneous_offset=1),
        },
    )
    cli = FakeDoor(
        [
            job_info(13, array_job_id=13, array_task_id=2),
            job_info(14, array_job_id=13, array_task_id=0),
            job_info(16, het_job_id=16, het_job_offset=0),
            job_info(17, het_job_id=16, het_job_offset=1),
        ]
    )
    config = SimpleNamespace(load=lambda: SimpleNamespace(slurmctld_parameters={}))
    ps = SimpleNamespace(Job=_PyslurmJob, slurmctld=SimpleNamespace(Config=config))
    door = PyslurmDoor(ps, cli=cli, timeout_s=5, attempts=1)
    assert door.job(14).record_spec == "13_0"
    door.cancel(14)
    door.requeue(13)
    door.requeue(17)
    door.hold(17)
    door.cancel(17)
    assert _PyslurmJob.acted == [("requeue", 13), ("requeue", 16), ("cancel", 16)]
    assert cli.mutations() == [Call("cancel", (14,)), Call("hold", (17,))]
    assert cli.jobs[14].state is JobState.CANCELLED
    assert cli.jobs[13].state is JobState.RUNNING


class _PyslurmArrayLoad(_PyslurmJob):
    """pyslurm 25.11's Job.load(n) for the number an array task shares with its array:
    slurm_load_job answers every task's record and pyslurm takes the first, a sibling's
    (records_first), or fails looking the number up among their steps (KeyError: 13, seen
    on the 25.11 dev cluster)."""

    @classmethod
    def load(cls, job_id: int) -> SimpleNamespace:
        if job_id == 13:
            raise KeyError(13)
        if job_id == 15:
            return cls.records[16]  # the array's first record: another task
        return cls.records[job_id]


def test_pyslurm_door_reads_a_job_pyslurm_cannot_load_alone_through_scontrol() -> None:
    """The array's own number fails in pyslurm or comes back as a sibling: read through the
    command-line door, the task itself, named A_T."""
    records = {16: _raw(16, array_id=15, array_task_id=0)}
    cli = FakeDoor(
        [
            job_info(13, array_job_id=13, array_task_id=1),
            job_info(15, array_job_id=15, array_task_id=1),
            job_info(16, array_job_id=15, array_task_id=0),
        ]
    )
    config = SimpleNamespace(load=lambda: SimpleNamespace(slurmctld_parameters={}))
    job = type("Job", (_PyslurmArrayLoad,), {"records": records, "acted": []})
    ps = SimpleNamespace(Job=job, slurmctld=SimpleNamespace(Config=config))
    door = PyslurmDoor(ps, cli=cli, timeout_s=5, attempts=1)
    assert (door.job(13).job_id, door.job(13).record_spec) == (13, "13_1")
    assert (door.job(15).job_id, door.job(15).record_spec) == (15, "15_1")


def test_an_array_task_given_as_a_t_is_refused_with_a_hint() -> None:
    """`slurm-triage slurm requeue 100_1`: the door takes a task's own job id (A alone is
    the whole array), and says so in one line."""
    parser = build_parser()
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["slurm", "requeue", "100_1"])
    assert exited.value.code == 2
    slurm = next(
        a
        for a in parser._subparsers._group_actions
        if isinstance(a, argparse._SubParsersAction)  # type: ignore[union-attr]
    ).choices["slurm"]
    requeue = next(
        a
        for a in slurm._subparsers._group_actions
        if isinstance(a, argparse._SubParsersAction)  # type: ignore[union-attr]
    ).choices["requeue"]
    job_id = next(a for a in requeue._actions if a.dest == "job_id")
    with pytest.raises(argparse.ArgumentTypeError, match=r"own job id: squeue -o %A"):
        job_id.type("100_1")  # type: ignore[misc,operator]


def test_an_accounting_row_does_not_rename_a_job_slurmctld_named(tmp_path: Path) -> None:
    """While job 6 (task 1 of array 6) ends, slurmdbd may answer a row of it without its
    array task (seen on 22.05): the door keeps slurmctld's `6_1` and never requeues the
    bare `6`, which is every task of the array."""
    from slurm_triage.slurm.door import KnownJobs

    named = job_info(6, array_job_id=6, array_task_id=1)
    known = KnownJobs(lambda job_id: named)
    known.remember(named)
    known.remember(replace(job_info(6), source="sacct"))
    assert known(6).record_spec == "6_1"
    fresh = KnownJobs(lambda job_id: named)
    fresh.remember(replace(job_info(6), source="sacct"))
    fresh.remember(named)  # slurmctld's record always replaces accounting's
    assert fresh(6).record_spec == "6_1"
