"""Expedited requeue on the real Slurm 25.11 (`sbatch --requeue=expedite`): the node Epilog
fails exactly where the decision would drain, Slurm restarts the job at once, and the
decision relabels the drain, holds what must not run and ends what must not wait."""

from __future__ import annotations

import json

import pytest

from slurm_triage.slurm import JobState
from tests.integration.slurmtest import decision_for, sbatch, wait_for
from tests.integration.test_decisions import RESUMES, _inject, _running, door, started

pytestmark = pytest.mark.integration
__all__ = ["door"]  # the fixture, shared with test_decisions


@pytest.fixture(autouse=True)
def _needs_expedite(devcluster) -> None:  # type: ignore[no-untyped-def]
    if devcluster.slurm == "22.05":
        pytest.skip("--requeue=expedite needs Slurm 25.11")


def test_a_node_fault_restarts_the_job_at_once_elsewhere(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """XID 79 on one node: its Epilog fails, Slurm restarts the job on the others without
    waiting (no cred_expire), and the decision puts our reason on Slurm's 'Epilog error'."""
    job_id = sbatch(
        devcluster,
        "--requeue=expedite",
        "-N2",
        "--wrap",
        RESUMES + started(devcluster) + "sleep 3; exit 1",
    )
    bad = _running(door, devcluster, job_id).nodes[-1]
    _inject(devcluster, bad, "xid=79", gpu=3)
    done = wait_for(
        lambda: (j := door.job(job_id)).state is JobState.COMPLETED and j, 60, "restarted job done"
    )
    assert bad not in done.nodes and done.restart_count == 1
    decision = decision_for(devcluster, job_id)
    assert (decision.cause, decision.blamed, decision.action) == (
        "gpu_unavailable",
        (bad,),
        "requeue",
    )
    node = wait_for(
        lambda: (n := door.node(bad)).reason.startswith("triage:") and n, 30, "our drain reason"
    )
    assert node.drained and f"job={job_id}" in node.reason
    # Slurm restarted it once; the decision did not requeue it a second time.
    assert decision_for(devcluster, job_id, restart=1).cause == "completed"


def test_a_failed_required_node_holds_the_job_slurm_requeued(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """`-w node1,node2` and XID 79 on node2: Slurm requeues the job, which could only wait
    for the drained node2; the decision holds it and says why in AdminComment."""
    job_id = sbatch(
        devcluster,
        "--requeue=expedite",
        "-N2",
        "-w",
        "node1,node2",
        "--wrap",
        RESUMES + started(devcluster) + "sleep 3; exit 1",
    )
    _running(door, devcluster, job_id)
    _inject(devcluster, "node2", "xid=79", gpu=3)
    decision = decision_for(devcluster, job_id)
    assert (decision.action, decision.excluded, decision.drained) == ("hold", (), ("node2",))
    job = wait_for(
        lambda: (j := door.job(job_id)).state_reason == "JobHeldAdmin" and j, 30, "job held"
    )
    # Pending (scontrol shows EXPEDITING until it starts), and never excluded from node2.
    assert job.state in (JobState.PENDING, JobState.EXPEDITING)
    assert "node2" not in job.excluded_nodes
    summary = json.loads(job.admin_comment)["triage"]
    assert (summary["action"], summary["required"]) == ("hold", ["node2"])


def test_a_user_bug_is_ended_not_left_held(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """No Epilog failed, so Slurm requeues the job held; a user bug is not requeued, so the
    decision cancels it rather than leave it in the queue for ever."""
    script = "python3 -c \"cfg={}; print('step 1', flush=True); cfg['lr']\""
    job_id = sbatch(devcluster, "--requeue=expedite", "-N1", "--wrap", script)
    decision = decision_for(devcluster, job_id)
    assert (decision.cause, decision.action) == ("user_code", "record_only")
    job = wait_for(
        lambda: (j := door.job(job_id)).state is JobState.CANCELLED and j, 30, "job cancelled"
    )
    assert job.restart_count <= 1 and not any(door.node(n).drained for n in job.nodes)
