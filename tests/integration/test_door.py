"""The Slurm door against the real local Slurm (Debian's slurmctld, slurmd, slurmdbd)."""

from __future__ import annotations

import dataclasses
import json
import pwd
import time

import pytest

from slurm_triage.devcluster.config_files import JOB_USER
from slurm_triage.slurm import (
    InvalidJobState,
    JobNotFound,
    JobState,
    NodeNotFound,
    NotRequeueable,
    SlurmDoor,
    open_door,
)
from tests.integration.slurmtest import env, sbatch, scancel, wait_for

pytestmark = pytest.mark.integration


# Where each door says its facts came from: (slurmctld, accounting).
SOURCES = {"cli": ("scontrol", "sacct"), "pyslurm": ("pyslurm", "pyslurm-db")}


@pytest.fixture
def door(devcluster) -> SlurmDoor:  # type: ignore[no-untyped-def]
    """The door of the cluster's backend (`make test-integration BACKEND=pyslurm` forces
    pyslurm; auto takes it where it is importable)."""
    return open_door(env=env(devcluster), timeout_s=15, backend=devcluster.backend)


def _state(door: SlurmDoor, job_id: int) -> JobState:
    return door.job(job_id).state


def test_reads_running_job_fields(door: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """A running job reads back with its state, nodes, requeue flag, user's exclusions and limit."""
    job_id = sbatch(
        devcluster,
        "--requeue",
        "-N1",
        "--exclude=node3",
        "-t",
        "30",
        "-J",
        "name JobState=COMPLETED",
        "--wrap",
        "sleep 60",
    )
    try:
        job = wait_for(
            lambda: (j := door.job(job_id)).state is JobState.RUNNING and j, 30, "job running"
        )
        assert job.nodes and job.nodes[0] in ("node1", "node2")
        assert job.excluded_nodes == ("node3",)
        assert job.requeue and job.batch
        assert job.user == JOB_USER and job.uid == pwd.getpwnam(JOB_USER).pw_uid
        assert job.time_limit_min == 30
        assert job.restart_count == 0
        assert job.source == SOURCES[door.name][0]
    finally:
        scancel(devcluster, job_id)


def test_requeue_failed_job_runs_again(door: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """A failed --requeue job is requeued: Restarts goes to 1 and it runs a second time."""
    # A user bug (KeyError), so slurm-triage's own decision leaves the job FAILED for us.
    user_bug = (
        'echo "run $SLURM_RESTART_COUNT"; echo "Traceback (most recent call last):" >&2; '
        "echo '  File \"train.py\", line 3, in <module>' >&2; echo \"KeyError: 'lr'\" >&2; "
        "exit 3"
    )
    job_id = sbatch(devcluster, "--requeue", "-N1", "--wrap", user_bug)
    failed = wait_for(
        lambda: (j := door.job(job_id)).state is JobState.FAILED and j, 30, "job failed"
    )
    assert (failed.exit_code, failed.exit_signal) == (3, 0)
    door.requeue(job_id)
    requeued = door.job(job_id)
    assert requeued.restart_count == 1
    assert requeued.state in (JobState.PENDING, JobState.COMPLETING, JobState.REQUEUED)
    wait_for(
        lambda: door.job(job_id).state is JobState.FAILED and door.job(job_id).restart_count == 1,
        60,
        "second run to fail",
    )


def test_requeue_refused_for_no_requeue_job(door: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """A --no-requeue job cannot be requeued, and the door says so with its own error."""
    job_id = sbatch(devcluster, "--no-requeue", "-N1", "--wrap", "exit 1")
    wait_for(lambda: _state(door, job_id) is JobState.FAILED, 30, "job failed")
    with pytest.raises(NotRequeueable):
        door.requeue(job_id)


def test_exclusion_moves_requeued_job_to_another_node(door: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """Requeue, then exclude the node it ran on: it runs elsewhere, and the user's own
    --exclude is kept alongside ours."""
    job_id = sbatch(devcluster, "--requeue", "-N1", "--exclude=node3", "--wrap", "sleep 120")
    try:
        first = wait_for(
            lambda: (j := door.job(job_id)).state is JobState.RUNNING and j, 30, "first run"
        )
        bad_node = first.nodes[0]
        door.requeue(job_id)
        excluded = door.set_excluded_nodes(job_id, [bad_node])
        assert set(excluded) == {"node3", bad_node}
        assert set(door.job(job_id).excluded_nodes) == {"node3", bad_node}
        second = wait_for(
            lambda: (j := door.job(job_id)).state is JobState.RUNNING and j, 60, "second run"
        )
        (good_node,) = {"node1", "node2"} - {bad_node}
        assert second.nodes == (good_node,)
        assert second.restart_count == 1
    finally:
        scancel(devcluster, job_id)


def test_drain_and_resume_node(door: SlurmDoor) -> None:
    """A node drained with our reason shows DRAIN and the reason; resume clears both."""
    door.drain("node3", "triage: gpu.lost GPU3 00000000:3B:00.0")
    try:
        node = door.node("node3")
        assert node.drained
        assert node.reason == "triage: gpu.lost GPU3 00000000:3B:00.0"
    finally:
        door.resume("node3")
    node = door.node("node3")
    assert not node.drained
    assert node.reason == ""


def test_node_events_show_our_drain_until_the_resume(door: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """Issue 18: a drain is a node event in accounting (DRAIN, our reason with its `|`,
    open) until the resume closes it; sacctmgr's own default format, as a user would save
    it with `sacctmgr -P show event`, parses to the same event."""
    import subprocess
    from datetime import datetime, timedelta

    from slurm_triage.slurm.events import parse_sacctmgr_events

    since = datetime.now().replace(microsecond=0) - timedelta(seconds=5)
    reason = "triage: gpu_memory job=0: XID 48 | DBE"

    def ours(open_only: bool):  # type: ignore[no-untyped-def]
        found = [
            e
            for e in door.node_events(since).events
            if e.node == "node3" and e.reason == reason and (e.end is None) is open_only
        ]
        return found[0] if found else None

    # slurmdbd keys node events by (node, start second): a drain in the same second as the
    # resume that closed node3's last event (test_drain_and_resume_node's) is merged into
    # that event and keeps its reason. Real drains are seconds apart; wait out the second.
    time.sleep(1.1)
    door.drain("node3", reason)
    try:
        event = wait_for(lambda: ours(True), 30, "an open DRAIN event of node3")
        assert event.base_state == "DRAIN" and event.takes_node_out()
        assert event.start >= since
        saved = subprocess.run(
            ["sacctmgr", "-P", "show", "event", "Events=Node", f"Start={since:%Y-%m-%dT%H:%M:%S}"],
            env=env(devcluster),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert saved.startswith("Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User")
        assert dataclasses.replace(event, cluster="") in [
            dataclasses.replace(e, cluster="") for e in parse_sacctmgr_events(saved).events
        ]
    finally:
        door.resume("node3")
    closed = wait_for(lambda: ours(False), 30, "node3's DRAIN event closed")
    assert closed.end is not None and closed.end >= closed.start


def test_admin_comment_round_trip_through_controller_and_accounting(
    door: SlurmDoor, devcluster
) -> None:  # type: ignore[no-untyped-def]
    """AdminComment written by the door reads back from slurmctld and from sacct."""
    summary = json.dumps(
        {
            "triage": {
                "cause": "gpu_unavailable",
                "nodes": ["node2"],
                "action": "requeue_exclude",
                "n": 1,
            }
        },
        separators=(",", ":"),
    )
    job_id = sbatch(devcluster, "-N1", "--wrap", "sleep 2")
    wait_for(lambda: _state(door, job_id) is JobState.RUNNING, 30, "job running")
    door.set_admin_comment(job_id, summary)
    assert json.loads(door.job(job_id).admin_comment) == json.loads(summary)
    wait_for(lambda: _state(door, job_id) is JobState.COMPLETED, 30, "job completed")
    # Slurm refuses to change a finished job's AdminComment (sacctmgr would mangle quotes).
    with pytest.raises(InvalidJobState):
        door.set_admin_comment(job_id, "{}")
    wait_for(
        lambda: json.loads(door.accounted_job(job_id).admin_comment or "{}") == json.loads(summary),
        30,
        "AdminComment in accounting",
    )
    assert door.accounted_job(job_id).source == SOURCES[door.name][1]


def test_unknown_job_and_node_are_clear_errors(door: SlurmDoor) -> None:
    """Asking for a job or node that does not exist raises the door's own error classes."""
    with pytest.raises(JobNotFound):
        door.job(999_999)
    with pytest.raises(NodeNotFound):
        door.node("node99")


def test_cli_door_reads_nodes_and_array_tasks(devcluster) -> None:  # type: ignore[no-untyped-def]
    """The command-line door (whatever the default backend) reads nodes in the form of the
    running Slurm (sinfo --json on 22.05, scontrol --json from 23.02), and finds an array task
    in accounting by its raw id (sacct prints JobID 13_1 for it)."""
    door = open_door(env=env(devcluster), timeout_s=15, backend="cli")
    assert [n.name for n in door.nodes()] == ["node1", "node2", "node3"]
    assert [n.name for n in door.nodes(["node3", "node1"])] == ["node3", "node1"]
    assert all(n.partitions == ("gpu",) for n in door.nodes())
    with pytest.raises(NodeNotFound, match="node99"):
        door.nodes(["node1", "node99"])
    array_id = sbatch(devcluster, "-a", "0-1", "--wrap", "true")
    wait_for(
        lambda: _accounted_state(door, array_id) is JobState.COMPLETED, 60, "array task accounted"
    )
    task = door.accounted_job(array_id)
    assert (task.job_id, task.restart_count, task.source) == (array_id, 0, "sacct")


def _accounted_state(door: SlurmDoor, job_id: int) -> JobState | None:
    try:
        return door.accounted_job(job_id).state
    except JobNotFound:
        return None
