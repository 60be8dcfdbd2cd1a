"""Array tasks and het job components as every form of Slurm's output names them, and the
name the door gives Slurm for each: `A_T`, `L+O`, or the job's number (recorded output of
22.05 and 25.11; the forms are job_info.c/info_job.c's line 1, data_parser's
array_job_id/array_task_id/het_job_id/het_job_offset and slurmdb_get_job_id_str)."""

from __future__ import annotations

import json

import pytest

from slurm_triage.slurm.errors import SlurmCommandError, SlurmOutputError
from slurm_triage.slurm.parse import (
    SACCT_DELIMITER,
    parse_sacct_job,
    parse_scontrol_job,
    parse_scontrol_job_json,
)
from slurm_triage.testing import job_info
from tests.conftest import FIXTURES

SLURM = FIXTURES / "slurm"


@pytest.mark.parametrize(
    ("version", "job_id", "ids", "record", "whole"),
    [
        # The last task to start keeps the array's record, and so its number (6, 13).
        ("22.05", 6, (6, 2, None, None), "6_2", "6_2"),
        ("22.05", 10, (6, 1, None, None), "6_1", "6_1"),
        ("22.05", 9, (6, 0, None, None), "6_0", "6_0"),
        ("25.11", 13, (13, 2, None, None), "13_2", "13_2"),
        ("25.11", 14, (13, 0, None, None), "13_0", "13_0"),
    ],
)
def test_each_task_of_a_recorded_array_is_named_by_its_index(
    version: str, job_id: int, ids: tuple[int | None, ...], record: str, whole: str
) -> None:
    """`scontrol show job A` prints every task; each is read with its array and index, and
    named `A_T`, the task whose number is the array's as much as the others."""
    text = (SLURM / version / "scontrol_show_job_array.txt").read_text()
    job = parse_scontrol_job(text, job_id)
    assert (job.array_job_id, job.array_task_id, job.het_job_id, job.het_job_offset) == ids
    assert (job.record_spec, job.whole_job_spec) == (record, whole)


@pytest.mark.parametrize(("version", "leader"), [("22.05", 7), ("25.11", 16)])
def test_a_het_job_is_named_by_its_leader_for_whole_job_operations(
    version: str, leader: int
) -> None:
    """A component's record is `L+O`; what is requeued, held or cancelled is the leader."""
    text = (SLURM / version / "scontrol_show_job_het.txt").read_text()
    first, second = parse_scontrol_job(text, leader), parse_scontrol_job(text, leader + 1)
    assert (first.het_job_id, first.het_job_offset, first.array_job_id) == (leader, 0, None)
    assert (second.het_job_id, second.het_job_offset) == (leader, 1)
    assert (first.record_spec, first.whole_job_spec) == (f"{leader}+0", str(leader))
    assert (second.record_spec, second.whole_job_spec) == (f"{leader}+1", str(leader))


def test_a_plain_job_is_named_by_its_number() -> None:
    text = (SLURM / "25.11" / "scontrol_show_job_running.txt").read_text()
    job = parse_scontrol_job(text, 5)
    assert (job.array_job_id, job.array_task_id, job.het_job_id) == (None, None, None)
    assert (job.record_spec, job.whole_job_spec) == ("5", "5")


def test_a_job_name_cannot_pose_as_an_array_task() -> None:
    """JobName is user text printed after the ids on line 1: a plain job named like an
    array task stays a plain job, named by its number."""
    text = (SLURM / "25.11" / "scontrol_show_job_running.txt").read_text()
    forged = text.replace(
        "JobId=5 JobName=capalloc", "JobId=5 JobName=x ArrayJobId=4 ArrayTaskId=0"
    )
    assert forged != text
    job = parse_scontrol_job(forged, 5)
    assert (job.array_job_id, job.record_spec) == (None, "5")


def test_a_record_of_pending_tasks_has_no_task_and_no_single_name() -> None:
    """Tasks not started yet share the array's record (`ArrayTaskId=1-3%2`): it names no
    one task, and the door refuses to act on it rather than on the whole array."""
    text = (SLURM / "25.11" / "scontrol_show_job_array_task.txt").read_text()
    pending = text.replace(
        "JobId=15 ArrayJobId=13 ArrayTaskId=1 ", "JobId=13 ArrayJobId=13 ArrayTaskId=1-3%2 "
    )
    job = parse_scontrol_job(pending, 13)
    assert (job.array_job_id, job.array_task_id) == (13, None)
    with pytest.raises(SlurmCommandError, match="pending tasks of array 13"):
        job.record_spec  # noqa: B018
    with pytest.raises(SlurmCommandError, match="pending tasks of array 13"):
        job.whole_job_spec  # noqa: B018


def test_scontrol_json_reads_the_array_ids_of_each_record() -> None:
    """data_parser's UINT32_NO_VAL shapes: array_job_id 0 and het_job_id 0 for neither,
    array_task_id unset for a record of pending tasks."""
    text = (SLURM / "25.11" / "scontrol_json_show_job_array_task_failed.json").read_text()
    failed, sibling = parse_scontrol_job_json(text, 6), parse_scontrol_job_json(text, 7)
    assert (failed.array_job_id, failed.array_task_id, failed.record_spec) == (6, 1, "6_1")
    assert (sibling.array_job_id, sibling.array_task_id, sibling.record_spec) == (6, 0, "6_0")
    plain = (SLURM / "25.11" / "scontrol_json_show_job_completing_failed_exit3.json").read_text()
    job = parse_scontrol_job_json(plain, 6)
    assert (job.array_job_id, job.array_task_id, job.het_job_id, job.record_spec) == (
        None,
        None,
        None,
        "6",
    )
    document = json.loads(text)
    document["jobs"][0]["array_task_id"] = {"set": False, "infinite": False, "number": 0}
    document["jobs"][0]["array_task_string"] = "1-3"
    pending = parse_scontrol_job_json(json.dumps(document), 6)
    assert (pending.array_job_id, pending.array_task_id) == (6, None)
    document["jobs"][0].update(
        array_job_id={"set": True, "infinite": False, "number": 0},
        het_job_id={"set": True, "infinite": False, "number": 5},
        het_job_offset={"set": True, "infinite": False, "number": 1},
    )
    component = parse_scontrol_job_json(json.dumps(document), 6)
    assert (component.record_spec, component.whole_job_spec) == ("5+1", "5")


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_sacct_job_ids_give_the_array_task_and_het_component(version: str) -> None:
    """Accounting prints JobID `A_T` / `L+O` beside JobIDRaw: a job slurmctld forgot is
    named the same way."""
    arrays = (SLURM / version / "sacct_array.txt").read_text()
    hets = (SLURM / version / "sacct_het.txt").read_text()
    for text in (arrays, hets):
        for line in text.splitlines():
            shown, raw = line.split(SACCT_DELIMITER)[:2]
            job = parse_sacct_job(text, int(raw))
            assert job.record_spec == shown
            assert job.whole_job_spec == shown.split("+")[0]  # a het job's leader, else itself


def test_sacct_pending_tasks_and_odd_job_ids() -> None:
    """`A_[2-3]` is the array's pending tasks (no single name); a JobID of no known form is
    refused with one line."""
    row = (SLURM / "25.11" / "sacct_array_task.txt").read_text()
    pending = row.replace("13_0", "13_[2-3]", 1)
    job = parse_sacct_job(pending, 14)
    assert (job.array_job_id, job.array_task_id) == (13, None)
    with pytest.raises(SlurmOutputError, match="unparsable JobID"):
        parse_sacct_job(row.replace("13_0", "13.batch", 1), 14)


def test_fake_jobs_are_plain_by_default() -> None:
    job = job_info(7)
    assert (job.record_spec, job.whole_job_spec) == ("7", "7")
