"""Slurm 25.11's expedited requeue (`sbatch --requeue=expedite`): Slurm restarts a failed
job at once when an Epilog failed (ours does on a node fault) and requeues it held when none
did. The decision then labels, records and settles the held job; it never requeues twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.clock import Clock
from slurm_triage.config import Config
from slurm_triage.evidence import RootException
from slurm_triage.prolog_epilog import decide as decide_module
from slurm_triage.prolog_epilog import ended_run
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm import JobState
from slurm_triage.taxonomy import Cause
from slurm_triage.testing import FakeDoor, job_info
from tests.unit.test_decide import JOB, NODES, USER, Cluster, comment, nccl_timeout, xid79

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root records need root")


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    c = Cluster(tmp_path)
    c.door.jobs[JOB] = replace(c.door.jobs[JOB], expedited_requeue=True)
    return c


def _settle(cluster: Cluster, *, epilog_failed_on: tuple[str, ...] = (), exit_code: int = 1):
    """The run failed; the Epilogs ran (ours failed where named) and Slurm settled the
    expedited requeue before the detached decision looked."""
    cluster.door.end_job(JOB, "FAILED", exit_code=exit_code)
    for node in epilog_failed_on:
        cluster.door.fail_epilog(node)
    cluster.door.finish_expedited_requeue(JOB, epilog_failed=bool(epilog_failed_on))
    # EpilogSlurmctld's environment names the run that ended (before Slurm requeued it).
    return cluster.decide(restart=0, exit_code=exit_code)


@needs_root
def test_a_node_fault_restarted_by_slurm_is_labelled_and_recorded_not_requeued(
    cluster: Cluster,
) -> None:
    cluster.root_record("node1")
    cluster.root_record("node2", xid79("node2"))
    _settle(cluster, epilog_failed_on=("node2",))
    door = cluster.door
    # Slurm restarted it (it may be running already): nothing to requeue, nothing to
    # exclude (the drained node keeps it away), so no step error either.
    assert not {"requeue", "release", "cancel", "set_excluded_nodes"} & set(door.methods())
    assert door.node("node2").reason.startswith("triage: gpu_unavailable job=7: ")
    assert comment(door)["cause"] == "gpu_unavailable"
    row = cluster.row(0)
    assert (row.state, row.cause, row.action, row.drained, row.outcome) == (
        "REQUEUED",
        "gpu_unavailable",
        "requeue",
        ("node2",),
        "ok",
    )


@needs_root
def test_a_restart_that_already_finished_is_not_requeued_again(cluster: Cluster) -> None:
    """The detached decision came late: Slurm's restart has already run and completed. It is
    still the ended run's decision (restart 0), Slurm's requeue, never a second requeue."""
    cluster.root_record("node2", xid79("node2"))
    cluster.door.end_job(JOB, "FAILED", exit_code=1)
    cluster.door.fail_epilog("node2")
    cluster.door.finish_expedited_requeue(JOB, epilog_failed=True)
    cluster.start_run()
    cluster.door.end_job(JOB, "COMPLETED", exit_code=0)
    cluster.door.jobs[JOB] = replace(cluster.door.jobs[JOB], state=JobState.COMPLETED)
    cluster.decide(restart=0, exit_code=1, exit_signal=0)
    door = cluster.door
    assert not {"requeue", "release", "cancel", "set_excluded_nodes"} & set(door.methods())
    row = cluster.row(0)
    assert (row.state, row.cause, row.action) == ("REQUEUED", "gpu_unavailable", "requeue")


@needs_root
def test_a_held_requeue_we_would_requeue_is_released(cluster: Cluster) -> None:
    """A NCCL timeout with no culprit: no Epilog failed, Slurm held the job; we release it."""
    cluster.user_record("node1", *nccl_timeout("node1"))
    _settle(cluster)
    door = cluster.door
    assert "requeue" not in door.methods() and "cancel" not in door.methods()
    assert door.methods().count("release") == 1
    assert door.jobs[JOB].state is JobState.PENDING
    assert cluster.row(0).cause == Cause.NCCL_TIMEOUT.value


@needs_root
def test_a_held_requeue_of_a_user_bug_is_ended_not_left_held(cluster: Cluster) -> None:
    cluster.user_record(
        "node1",
        RootException(node="node1", exc_type="KeyError", message="'lr'", time=time.time()),
    )
    _settle(cluster)
    door = cluster.door
    assert door.methods().count("cancel") == 1 and "release" not in door.methods()
    assert door.jobs[JOB].state is JobState.CANCELLED
    assert cluster.row(0).cause == Cause.USER_CODE.value


def test_only_a_failed_expedited_run_still_completing_is_detached() -> None:
    door = FakeDoor([job_info(JOB, nodes=NODES)], ())

    def expedited_failure(exit_code: int, expedite: bool = True) -> bool:
        door.jobs[JOB] = replace(door.jobs[JOB], expedited_requeue=expedite)
        door.end_job(JOB, "FAILED" if exit_code else "COMPLETED", exit_code=exit_code)
        ending = JobEnd(
            job_id=JOB,
            restart=0,
            nodes=NODES,
            uid=USER,
            exit_code=exit_code,
            exit_signal=0,
            ended_at=time.time(),
        )
        return ended_run.expedited_failure(door.job(JOB), ending)

    assert expedited_failure(3) is True
    assert expedited_failure(0) is False  # Slurm completes a clean exit as usual
    assert expedited_failure(3, expedite=False) is False


DETACHING = """
import os, sys, time
from slurm_triage.prolog_epilog.detach import detach
go, done = sys.argv[1], sys.argv[2]
if detach():
    print("hook returns")
    sys.exit(0)
while not os.path.exists(go):
    time.sleep(0.01)
open(done, "w").close()
os._exit(0)
"""


def test_the_hook_ends_and_its_pipes_close_while_the_decision_goes_on(tmp_path: Path) -> None:
    """Slurm waits for the hook's exit and for EOF on its stdout/stderr: both come while the
    detached process still waits for its go."""
    go, done = tmp_path / "go", tmp_path / "done"
    hook = subprocess.run(
        [sys.executable, "-c", DETACHING, str(go), str(done)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert hook.returncode == 0 and hook.stdout == "hook returns\n"
    assert not done.exists()
    go.touch()
    deadline = time.monotonic() + 30
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done.exists()


@needs_root
def test_an_operators_requeuehold_is_not_released_or_cancelled(cluster: Cluster) -> None:
    """`scontrol requeuehold` of a running expedited job: Slurm counts the requeue and sets
    the reason Slurm's own expedited hold has before EpilogSlurmctld runs, with the run's
    0:0 (job_mgr.c _job_requeue_op). The hold is the operator's: never released or ended."""
    door = cluster.door
    door.jobs[JOB] = replace(
        door.jobs[JOB],
        state=JobState.COMPLETING,
        base_state=JobState.PENDING,
        state_reason=ended_run.SLURM_HELD_REQUEUE_REASON,
        restart_count=1,
        exit_code=0,
    )
    cluster.decide(restart=1, exit_code=0)
    assert not {"release", "cancel", "requeue"} & set(door.methods())
    assert door.methods().count("job") <= 2  # no wait in the hook: nothing changes in it


@needs_root
def test_an_expedited_jobs_clean_end_is_decided_in_the_hook_without_waiting(
    cluster: Cluster,
) -> None:
    """Slurm settles nothing while the hook runs: a clean end of an expedited job is read
    at once (it polled slurmctld 20 times a second for 15 s)."""
    cluster.end("COMPLETED", exit_code=0)
    assert cluster.door.methods().count("job") <= 2
    assert cluster.row(0).state == "COMPLETED"


def test_an_expedited_failure_slurm_never_settles_is_left_to_slurm(tmp_path: Path) -> None:
    """Epilogs slower than the settle bound: the job is still FAILED|COMPLETING, and Slurm
    will restart or hold it once they end. The decision never requeues it itself; its
    polls back off."""
    door = FakeDoor([job_info(JOB, nodes=NODES, expedited_requeue=True)], ())
    door.jobs[JOB] = replace(door.jobs[JOB], state=JobState.RUNNING, start_time=time.time())
    door.end_job(JOB, "FAILED", exit_code=1)
    now = [0.0]
    clock = Clock(monotonic=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    end = JobEnd(job_id=JOB, restart=0, nodes=NODES, uid=USER, exit_code=1, ended_at=time.time())
    run = ended_run.read_ended_run(Config(), end, door, door.job(JOB), clock, 0.0)
    assert (run.requeued_by_slurm, run.held_by_slurm, run.restarted_by_slurm) == (
        True,
        False,
        True,
    )
    assert run.end.restart == 0 and now[0] >= ended_run.EXPEDITED_SETTLE_S
    assert door.methods().count("job") < ended_run.EXPEDITED_SETTLE_S / 2 + 10


@needs_root
def test_the_evidence_budget_starts_once_slurm_has_settled(cluster: Cluster) -> None:
    """Slurm settled 40 s after the hook (KillWait, slow Epilogs): the wrapper's records are
    still read (the budget is the decision's, not the wait's), so the NCCL timeout is read
    and the held job released, not decided `unknown` on no evidence."""
    cluster.user_record("node1", *nccl_timeout("node1"))
    cluster.door.end_job(JOB, "FAILED", exit_code=1)
    # The store's reads check their deadline against the real monotonic clock: this clock
    # starts 40 s behind it and catches up as the decision waits, so when Slurm settles the
    # two agree, as if those 40 s had passed.
    waited = [0.0]

    def sleep(seconds: float) -> None:
        waited[0] += seconds
        if waited[0] >= 40 and cluster.door.jobs[JOB].state is JobState.COMPLETING:
            cluster.door.finish_expedited_requeue(JOB, epilog_failed=False)

    clock = Clock(monotonic=lambda: time.monotonic() - 40 + waited[0], sleep=sleep)
    ending = JobEnd(job_id=JOB, restart=0, nodes=NODES, uid=USER, exit_code=1, ended_at=time.time())
    out = decide_module.decide(
        cluster.config, ending, cluster.door, cluster.journal, {}, clock=clock
    )
    assert out.attribution is not None and out.attribution.cause is Cause.NCCL_TIMEOUT
    assert cluster.door.methods().count("release") == 1


@needs_root
def test_a_hook_that_cannot_fork_leaves_the_expedited_failure_to_slurm(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fork (EAGAIN in a mass failure): the decision runs in the hook, where Slurm cannot
    settle the job, so it does not wait for it, and requeues nothing itself."""

    def no_fork() -> bool:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(decide_module, "detach", no_fork)
    cluster.door.end_job(JOB, "FAILED", exit_code=1)
    env = {
        "SLURM_JOB_ID": str(JOB),
        "SLURM_JOB_UID": str(USER),
        "SLURM_JOB_EXIT_CODE2": "1:0",
        "SLURM_JOB_NODELIST": "node[1-2]",
    }
    slept: list[float] = []
    clock = Clock(sleep=slept.append)
    assert decide_module.decide_from_env(cluster.config, env, cluster.door, clock=clock) is None
    assert sum(slept) < 10 and "requeue" not in cluster.door.methods()
    assert cluster.row(0).state == "REQUEUED"
