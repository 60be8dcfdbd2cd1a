"""A job array on the real Slurm (22.05 and 25.11): one task's infrastructure fault
requeues that task alone.

One task of every array runs under the array's own id (the last to start keeps the array's
record: job_mgr.c job_array_post_sched), and slurmctld reads that number alone as every
task of the array (job_requeue2, update_job_str, job_str_signal). The door names a task
`A_T`, so its sibling runs on."""

from __future__ import annotations

import os
import re

import pytest

from slurm_triage.slurm import JobState
from tests.integration.slurmtest import decision_for, sbatch, scontrol, wait_for
from tests.integration.test_decisions import RESUMES, _inject, door, started

pytestmark = pytest.mark.integration
__all__ = ["door"]  # the fixture, shared with test_decisions

# Only the task whose own id is the array's fails (after the test injected its fault);
# the other sleeps on. A requeued run exits 0 (RESUMES).
SCRIPT = 'if [ "$SLURM_JOB_ID" = "$SLURM_ARRAY_JOB_ID" ]; then sleep 3; exit 1; fi; sleep 300'


def _sibling(layout, array: int) -> int | None:  # type: ignore[no-untyped-def]
    """The id of the array's other task once it has one (`scontrol show job A` prints
    every task of array A, each as `JobId=N ArrayJobId=A ArrayTaskId=T`)."""
    text = scontrol(layout, "show", "job", str(array))
    found = re.findall(rf"^JobId=(\d+) ArrayJobId={array} ArrayTaskId=\d+ ", text, re.M)
    others = [int(n) for n in found if int(n) != array]
    return others[0] if others else None


def test_an_xid_in_one_array_task_requeues_that_task_alone(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """`sbatch --array=0-1` as the job user, one task per node: XID 79 on the node of the
    task that has the array's id, and that task fails. It is requeued with the node
    excluded and completes elsewhere; its sibling keeps running, never restarted, with no
    exclusion and no AdminComment of ours."""
    array = sbatch(
        devcluster,
        "--requeue",
        "--array=0-1",
        "-N1",
        "--exclusive",
        "--wrap",
        RESUMES + started(devcluster) + SCRIPT,
    )
    markers = devcluster.jobs_dir / "markers"
    wait_for(lambda: os.path.exists(markers / f"started-{array}-0"), 60, f"task {array} started")
    sibling = wait_for(lambda: _sibling(devcluster, array), 60, f"array {array}'s other task")
    wait_for(lambda: os.path.exists(markers / f"started-{sibling}-0"), 60, "sibling started")
    before = door.job(sibling)
    assert (before.array_job_id, before.state) == (array, JobState.RUNNING)
    bad = door.job(array).nodes[0]
    assert bad not in before.nodes
    _inject(devcluster, bad, "xid=79", gpu=3)

    decision = decision_for(devcluster, array)
    assert (decision.cause, decision.blamed, decision.action) == (
        "gpu_unavailable",
        (bad,),
        "requeue",
    )
    failed = door.job(array)
    assert failed.restart_count == 1 and bad in failed.excluded_nodes
    done = wait_for(
        lambda: (j := door.job(array)).state is JobState.COMPLETED and j,
        90,
        "requeued task completed",
    )
    assert bad not in done.nodes

    after = door.job(sibling)
    assert (after.state, after.restart_count, after.start_time) == (
        JobState.RUNNING,
        0,
        before.start_time,
    )
    assert after.excluded_nodes == before.excluded_nodes
    assert after.admin_comment == before.admin_comment
    assert not os.path.exists(markers / f"started-{sibling}-1")
