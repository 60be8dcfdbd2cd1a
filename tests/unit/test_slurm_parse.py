"""Parsers of real Slurm 22.05 output recorded from the dev cluster (tests/fixtures/slurm)."""

from __future__ import annotations

import json

import pytest

from slurm_triage.slurm.errors import SlurmOutputError
from slurm_triage.slurm.model import JobState
from slurm_triage.slurm.parse import (
    SACCT_FIELDS,
    parse_exit_code,
    parse_key_values,
    parse_sacct_job,
    parse_scontrol_job,
    parse_sinfo_json,
    parse_time_limit_min,
    parse_version,
)
from tests.conftest import FIXTURES

SLURM = FIXTURES / "slurm"


def test_scontrol_job_fields() -> None:
    """A running job recorded from scontrol parses to the right state, nodes and limits."""
    job = parse_scontrol_job((SLURM / "scontrol_show_job_running.txt").read_text(), 2)
    assert job.state is JobState.RUNNING
    assert job.nodes == ("node1", "node2")
    assert job.excluded_nodes == ("node3",)
    assert job.restart_count == 0
    assert job.requeue and job.batch
    assert (job.user, job.uid, job.partition, job.num_nodes) == ("root", 0, "gpu", 2)
    assert job.time_limit_min == 1 * 1440 + 2 * 60 + 4
    assert json.loads(job.admin_comment)["triage"]["cause"] == "gpu_unavailable"


def test_scontrol_job_required_nodes() -> None:
    """A job submitted with -w node1,node2 shows ReqNodeList=node[1-2]: expanded; none is ()."""
    job = parse_scontrol_job((SLURM / "scontrol_show_job_required_nodes.txt").read_text(), 3)
    assert job.required_nodes == ("node1", "node2")
    assert job.excluded_nodes == ()
    assert (job.user, job.nodes) == ("alice", ("node1", "node2"))
    running = parse_scontrol_job((SLURM / "scontrol_show_job_running.txt").read_text(), 2)
    assert running.required_nodes == ()


def test_user_text_cannot_spoof_fields() -> None:
    """A job name or comment containing 'JobState=...' or 'ExcNodeList=...' changes nothing."""
    job = parse_scontrol_job((SLURM / "scontrol_show_job_running.txt").read_text(), 2)
    assert job.state is JobState.RUNNING  # the job name says JobState=COMPLETED
    assert job.restart_count == 0  # ... and Restarts=9
    assert job.excluded_nodes == ("node3",)  # the comment says ExcNodeList=node9
    assert job.comment == "x ExcNodeList=node9 AdminComment=evil"
    assert "evil" not in job.admin_comment


def test_key_values_first_occurrence_wins() -> None:
    """A key repeated later in the record does not override the first one."""
    fields = parse_key_values("JobId=1 JobName=a B=2\n   JobState=RUNNING\n   JobState=FAILED")
    assert fields["JobName"] == "a B=2"
    assert fields["JobState"] == "RUNNING"
    assert "B" not in fields


def test_scontrol_wrong_job_is_error() -> None:
    """Output for another job id is not silently taken for the asked one."""
    with pytest.raises(SlurmOutputError):
        parse_scontrol_job((SLURM / "scontrol_show_job_running.txt").read_text(), 3)


def test_sacct_failed_job() -> None:
    """A failed job's exit code comes from sacct's ExitCode column."""
    job = parse_sacct_job((SLURM / "sacct_failed_exit5.txt").read_text(), 3)
    assert (job.state, job.exit_code, job.exit_signal) == (JobState.FAILED, 5, 0)
    assert job.nodes == ("node1",) and job.restart_count == 0 and job.source == "sacct"


def test_sacct_requeued_job_counts_restarts() -> None:
    """Each REQUEUED row of `sacct -D` is one restart; the last row is the current state."""
    job = parse_sacct_job((SLURM / "sacct_requeued_then_cancelled.txt").read_text(), 2)
    assert job.state is JobState.CANCELLED
    assert job.restart_count == 1
    assert job.nodes == ()  # "None assigned"
    assert json.loads(job.admin_comment)["triage"]["n"] == 1


def test_sinfo_json_nodes_and_filter() -> None:
    """sinfo --json (22.05) gives base state plus flags, filtered to the asked names."""
    text = (SLURM / "sinfo.json").read_text()
    nodes = parse_sinfo_json(text)
    assert [n.name for n in nodes] == ["node1", "node2", "node3"]
    assert parse_sinfo_json(text, ["node3"])[0].name == "node3"
    assert parse_sinfo_json(text, ["nodeX"]) == ()


def test_sinfo_json_drained_node_and_newer_format() -> None:
    """A drained idle node is IDLE + DRAIN in 22.05's form and in 23.02's list form."""
    old = {
        "nodes": [
            {
                "name": "n1",
                "state": "idle",
                "state_flags": ["DRAIN"],
                "reason": "triage: x",
                "reason_set_by_user": "root",
                "reason_changed_at": 5,
            }
        ]
    }
    new = {
        "nodes": [
            {
                "name": "n1",
                "state": ["IDLE", "DRAIN"],
                "reason": "triage: x",
                "reason_changed_at": {"set": True, "number": 5},
            }
        ]
    }
    for doc in (old, new):
        (node,) = parse_sinfo_json(json.dumps(doc))
        assert node.state == "IDLE" and node.drained and node.reason == "triage: x"
        assert node.reason_time == 5 and node.label == "IDLE+DRAIN"


@pytest.mark.parametrize("text", ["", "not json", "{}", '{"nodes": [{"state": "idle"}]}'])
def test_sinfo_garbage_is_our_error(text: str) -> None:
    """Garbage from sinfo raises SlurmOutputError, nothing else."""
    with pytest.raises(SlurmOutputError):
        parse_sinfo_json(text)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("UNLIMITED", None),
        ("30", 30),
        ("30:30", 31),
        ("1:00:00", 60),
        ("2-0", 2880),
        ("2-1:30", 2970),
        ("2-01:30:05", 2971),
        ("00:05:00", 5),
    ],
)
def test_time_limits(text: str, minutes: int | None) -> None:
    """Every Slurm time-limit format converts to minutes (seconds round up)."""
    assert parse_time_limit_min(text) == minutes


def test_exit_code_and_version() -> None:
    """ExitCode 'code:signal' and the version line parse; garbage raises."""
    assert parse_exit_code("0:9") == (0, 9)
    assert parse_version("slurm-wlm 22.05.8\n") == "22.05.8"
    with pytest.raises(SlurmOutputError):
        parse_exit_code("x")
    with pytest.raises(SlurmOutputError):
        parse_time_limit_min("soon")


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("CANCELLED by 0", JobState.CANCELLED),
        ("NF", JobState.NODE_FAIL),
        ("out_of_memory", JobState.OUT_OF_MEMORY),
        ("WEIRD", JobState.UNKNOWN),
    ],
)
def test_job_state_spellings(text: str, state: JobState) -> None:
    """Slurm's state spellings map onto the closed enum, with UNKNOWN for the rest."""
    assert JobState.parse(text) is state


def test_no_user_text_is_asked_of_sacct() -> None:
    """sacct prints free text raw: with the job's Comment asked for, `--comment $'x\\n3<US>
    NODE_FAIL<US>...'` printed a forged row after the real one, and a FAILED job read as
    NODE_FAIL on node2 (a root-sourced state in the decision). No field the job's user sets
    is asked for, so every printed line is Slurm's own."""
    user_text = {"Comment", "JobName", "WorkDir", "Constraints", "Reservation", "WCKey"}
    assert not user_text & set(SACCT_FIELDS)
