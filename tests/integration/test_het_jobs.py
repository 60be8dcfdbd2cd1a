"""A heterogeneous job on the real Slurm (22.05 and 25.11): a fault on a component's node is
decided once, at the leader's end, over every component's nodes.

slurmctld ends every component together and runs EpilogSlurmctld once per component, each
with its own job id and nodes (job_mgr.c job_complete, job_common_env_vars); only the
leader's run has SLURM_HET_JOB_NODELIST, every component's nodes. A het job is requeued
whole, by its leader only ("Job not heterogeneous job leader")."""

from __future__ import annotations

import os
import re

import pytest

from slurm_triage.slurm import JobState
from tests.integration.slurmtest import decision_for, journal, sbatch, scontrol, wait_for
from tests.integration.test_decisions import RESUMES, _inject, door, started

pytestmark = pytest.mark.integration
__all__ = ["door"]  # the fixture, shared with test_decisions


def _components(layout, leader: int) -> dict[int, int]:  # type: ignore[no-untyped-def]
    """Offset -> job id of each component (`scontrol show job L` prints every component,
    each as `JobId=N HetJobId=L HetJobOffset=O`)."""
    text = scontrol(layout, "show", "job", str(leader))
    found = re.findall(rf"^JobId=(\d+) HetJobId={leader} HetJobOffset=(\d+) ", text, re.M)
    return {int(offset): int(job) for job, offset in found}


def test_an_xid_on_a_components_node_is_decided_once_by_the_leader(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """`sbatch -N1 : -N1` as the job user; XID 79 on component 1's node, and the batch script
    (the leader's) fails. One decision, the leader's, blames that node from its Epilog's
    record; the het job is requeued whole with the node excluded from each component, and
    completes elsewhere. The component's own EpilogSlurmctld decides nothing."""
    leader = sbatch(
        devcluster,
        "--requeue",
        "-N1",
        "--exclusive",
        ":",
        "-N1",
        "--exclusive",
        "--wrap",
        RESUMES + started(devcluster) + "sleep 3; exit 1",
    )
    markers = devcluster.jobs_dir / "markers"
    wait_for(lambda: os.path.exists(markers / f"started-{leader}-0"), 60, f"het job {leader}")
    parts = wait_for(lambda: len(c := _components(devcluster, leader)) == 2 and c, 30, "parts")
    component = parts[1]
    bad = door.job(component).nodes[0]
    (first,) = door.job(leader).nodes
    assert bad != first
    _inject(devcluster, bad, "xid=79", gpu=2)

    decision = decision_for(devcluster, leader)
    assert (decision.cause, decision.blamed, decision.action) == (
        "gpu_unavailable",
        (bad,),
        "requeue",
    ), decision
    # (Its outcome may also hold the accounted AdminComment's sacctmgr "didn't affect
    # anything": slurmdbd had not the run's end yet. The comment on slurmctld's record is set.)
    assert bad in decision.drained and "requeue" not in (decision.outcome or "")
    assert set(decision.nodes) == {first, bad}  # every component's, from the leader's run
    for part in (leader, component):
        job = door.job(part)
        assert job.restart_count == 1 and bad in job.excluded_nodes, (part, job)
    # slurmctld holds a requeued batch job back for its requeue delay (the credential's
    # lifetime: job_mgr.c _requeue_delay), and starts a het job from backfill only.
    done = wait_for(
        lambda: (j := door.job(leader)).state is JobState.COMPLETED and j,
        240,
        "requeued het job completed",
    )
    assert bad not in done.nodes and bad not in door.job(component).nodes
    assert not [r for r in journal(devcluster).decisions(job_id=component)]
