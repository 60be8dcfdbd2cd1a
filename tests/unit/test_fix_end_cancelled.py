"""A run Slurm ended as CANCELLED (scancel: its user, an admin) is never requeued, whatever
the cause that outranks the cancel; and a cancel stays a cancel when accounting is slow."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.clock import Clock
from slurm_triage.config import Config, DecisionConfig, PathsConfig, PolicyConfig, SlurmConfig
from slurm_triage.journal import Journal
from slurm_triage.policies import PolicyInput, Verdict, default_chain
from slurm_triage.prolog_epilog.decide import decide
from slurm_triage.prolog_epilog.ended_run import EndState, final_state
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm import JobState, SlurmTimeout
from slurm_triage.taxonomy import Cause, info
from slurm_triage.testing import FakeDoor, job_info, node_infos
from tests.unit.test_policies import job as policy_job

JOB = 7
USER = 4242


def given(
    end_state: JobState, by_uid: int | None = None, cause: Cause = Cause.GPU_UNAVAILABLE
) -> PolicyInput:
    """node2's root-backed XID 79 outranks how Slurm ended the run."""
    return PolicyInput(
        cause=cause,
        domain=info(cause).domain,
        blamed=("node2",),
        root_backed=True,
        job=policy_job(job_id=JOB),
        history=(),
        now=1000.0,
        end_state=end_state,
        cancelled_by_uid=by_uid,
    )


@pytest.mark.parametrize(
    ("by_uid", "who"), [(4242, "uid 4242"), (0, "uid 0"), (None, "an unknown uid")]
)
def test_a_cancelled_run_with_a_hardware_cause_is_not_requeued_but_drains(
    by_uid: int | None, who: str
) -> None:
    """CANCELLED by the user, by root, or by a uid accounting did not give: the XID's
    blame and drain stand, the job stays ended, and the reason says who cancelled it."""
    d = default_chain(PolicyConfig())(given(JobState.CANCELLED, by_uid))
    assert (d.verdict, d.exclude, d.drain) == (Verdict.RECORD_ONLY, (), ("node2",))
    assert f"cancelled by {who}: not requeued (gpu_unavailable recorded)" in d.reasons


def test_a_cancelled_run_whose_budget_is_spent_is_not_held_either() -> None:
    """A hold (budget spent) would leave the cancelled job pending for a person: no hold."""
    spent = given(JobState.CANCELLED, 4242)
    spent = replace(spent, job=replace(spent.job, restart_count=100))
    assert default_chain(PolicyConfig())(spent).verdict is Verdict.RECORD_ONLY


@pytest.mark.parametrize("state", [JobState.NODE_FAIL, JobState.PREEMPTED, JobState.FAILED])
def test_slurms_own_ends_are_not_read_as_cancels(state: JobState) -> None:
    """A node failure, a preemption (Slurm's own kills) or a failure is requeued as before."""
    d = default_chain(PolicyConfig())(given(state))
    assert (d.verdict, d.exclude) == (Verdict.REQUEUE, ("node2",))


def test_a_site_that_requeues_cancels_keeps_its_word() -> None:
    """`requeue_causes` listing `cancelled`: a cancel is no bar to a requeue."""
    config = PolicyConfig(requeue_causes=("cancelled", "gpu_unavailable"))
    d = default_chain(config)(given(JobState.CANCELLED, 4242))
    assert d.verdict is Verdict.REQUEUE


def decision_config(tmp_path: Path) -> Config:
    """EpilogSlurmctld's config on a fake cluster: a world-writable evidence directory, a
    fresh journal, no wait for the nodes, no Slurm commands."""
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    os.chmod(evidence, 0o1777)
    return Config(
        paths=PathsConfig(evidence_dir=str(evidence), state_dir=str(tmp_path / "state")),
        decision=DecisionConfig(journal=str(tmp_path / "journal.sqlite"), wait_for_nodes_s=0),
        policy=PolicyConfig(),
        slurm=SlurmConfig(bin_dir=str(tmp_path / "no-slurm-here")),
    )


def scancelled_end() -> JobEnd:
    """The end of job JOB on node1 and node2 that scancel's SIGTERM brought about."""
    return JobEnd(
        job_id=JOB,
        restart=0,
        nodes=("node1", "node2"),
        uid=USER,
        exit_code=0,
        exit_signal=15,
        ended_at=time.time(),
    )


def cancelled_job(door: FakeDoor) -> None:
    """scancel by the user on 24.05+: slurmctld shows CANCELLED under COMPLETING."""
    door.jobs[JOB] = replace(door.jobs[JOB], state=JobState.RUNNING, start_time=time.time() - 60)
    door.end_job(
        JOB, "CANCELLED", signal=15, state_text=f"CANCELLED by {USER}", shows_base_state=True
    )


def test_a_cancel_is_kept_when_accounting_does_not_answer() -> None:
    """sacct times out: the controller's CANCELLED stands, with no uid (it was FAILED)."""
    door = FakeDoor([job_info(JOB)], node_infos(4))
    cancelled_job(door)
    door.fail("accounted_job", SlurmTimeout("sacct: timed out"), times=None)
    now = [0.0]
    clock = Clock(
        time=time.time, monotonic=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)
    )
    assert final_state(door, door.jobs[JOB], 5.0, clock) == EndState(JobState.CANCELLED)


def test_a_cancel_still_takes_its_uid_from_accounting() -> None:
    """Accounting answers: who cancelled is read from it."""
    door = FakeDoor([job_info(JOB)], node_infos(4))
    cancelled_job(door)
    assert final_state(door, door.jobs[JOB], 5.0, Clock()) == EndState(JobState.CANCELLED, USER)


@pytest.mark.skipif(os.geteuid() != 0, reason="the job's output is chowned")
def test_a_cancel_after_watchdog_lines_with_sacct_timing_out_is_not_requeued(
    tmp_path: Path,
) -> None:
    """16 NCCL watchdog lines, then scancel's banner, and sacct times out: the job was
    cancelled (recorded only), not an NCCL timeout requeued."""
    config = decision_config(tmp_path)
    glog = time.strftime("E%m%d %H:%M:%S.123456", time.localtime(time.time() - 60))
    banner = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    lines = [
        f"[rank{r}]:[{glog} 3456 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=401, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
        for r in range(16)
    ]
    lines += [
        f"slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT {banner} DUE to SIGNAL Terminated ***",
        f"slurmstepd: error: *** STEP 7.0 ON node1 CANCELLED AT {banner} DUE to SIGNAL "
        "Terminated ***",
    ]
    output = tmp_path / "slurm-7.out"
    output.write_text("\n".join(lines) + "\n")
    os.chown(output, USER, USER)
    door = FakeDoor([job_info(JOB, std_out=str(output), batch_host="node1")], node_infos(6))
    cancelled_job(door)
    door.fail("accounted_job", SlurmTimeout("sacct: timed out"), times=None)
    outcome = decide(config, scancelled_end(), door, Journal(config.decision.journal), {})
    assert outcome.attribution is not None and outcome.decision is not None
    assert outcome.attribution.cause is Cause.CANCELLED
    assert outcome.decision.verdict is Verdict.RECORD_ONLY
    assert "requeue" not in door.methods()


@pytest.mark.skipif(os.geteuid() != 0, reason="the job's output is chowned")
def test_a_user_cancel_with_a_root_xid_drains_the_node_and_leaves_the_job_ended(
    tmp_path: Path,
) -> None:
    """scancel by the user, and node2's Epilog found XID 79: the decision (decide(), which
    hands the end state to the policies) drains node2 and does not requeue the job."""
    from slurm_triage.evidence import (
        EvidenceRecord,
        KernelEvent,
        KernelEventKind,
        Source,
        record_to_json,
        store,
    )

    config = decision_config(tmp_path)
    evidence = Path(config.paths.evidence_dir)
    xid = KernelEvent(
        node="node2",
        time=time.time() - 200,
        source=Source.ROOT,
        event=KernelEventKind.XID,
        xid=79,
        detail="NVRM: Xid (PCI:0000:ab:00): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus.",
    )
    record = EvidenceRecord(str(JOB), "node2", "epilog", Source.ROOT, (xid,))
    store.write_root_record(str(evidence), JOB, "node2", record_to_json(record))
    door = FakeDoor([job_info(JOB, nodes=("node1", "node2"), num_nodes=2)], node_infos(6))
    door.jobs[JOB] = replace(door.jobs[JOB], state=JobState.RUNNING, start_time=time.time() - 60)
    door.end_job(JOB, "CANCELLED", signal=15, state_text=f"CANCELLED by {USER}")
    outcome = decide(config, scancelled_end(), door, Journal(config.decision.journal), {})
    assert outcome.attribution is not None and outcome.decision is not None
    assert outcome.attribution.cause is Cause.GPU_UNAVAILABLE
    assert outcome.decision.verdict is Verdict.RECORD_ONLY
    assert outcome.applied is not None and outcome.applied.drained == ("node2",)
    assert "requeue" not in door.methods()
