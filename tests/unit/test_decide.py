"""The once-per-job decision end to end: evidence files as the epilog and the wrapper write
them, a real journal, a real Config, and FakeDoor in place of slurmctld."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.clock import Clock
from slurm_triage.config import Config, DecisionConfig, PathsConfig, PolicyConfig, SlurmConfig
from slurm_triage.evidence import (
    CheckStatus,
    EvidenceRecord,
    Fact,
    HealthCheck,
    KernelEvent,
    KernelEventKind,
    LogHit,
    ProcessExit,
    RootException,
    Source,
    record_to_json,
    store,
)
from slurm_triage.hostlist import HostlistError
from slurm_triage.journal import DecisionRow, Journal, NodeEvent
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.prolog_epilog.decide import Outcome, decide, decide_from_env
from slurm_triage.prolog_epilog.ended_run import EndState
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm import JobState, SlurmUnavailable
from slurm_triage.taxonomy import Cause
from slurm_triage.testing import Call, FakeDoor, job_info, node_info, node_infos

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root records need root")

USER = 4242  # the job's user; its records and directory are chowned to it
JOB = 7
NODES = ("node1", "node2")


class Cluster:
    """One job on a fake cluster: its evidence directory, journal and door."""

    def __init__(self, tmp_path: Path, **policy: object) -> None:
        evidence = tmp_path / "evidence"
        evidence.mkdir()
        os.chmod(evidence, 0o1777)  # as installed: shared, sticky
        self.config = Config(
            paths=PathsConfig(evidence_dir=str(evidence), state_dir=str(tmp_path / "state")),
            decision=DecisionConfig(journal=str(tmp_path / "journal.sqlite"), wait_for_nodes_s=0),
            policy=PolicyConfig(**policy),  # type: ignore[arg-type]
            slurm=SlurmConfig(bin_dir=str(tmp_path / "no-slurm-here")),
        )
        self.evidence = evidence
        self.journal = Journal(self.config.decision.journal)
        self.door = FakeDoor([job_info(JOB, nodes=NODES)], node_infos(4))
        self.start_run()

    def start_run(self) -> None:
        """The job (again) runs on its nodes since a moment ago."""
        job = self.door.jobs[JOB]
        self.door.jobs[JOB] = replace(job, state=JobState.RUNNING, start_time=time.time() - 2)

    def root_record(self, node: str, *facts: Fact) -> None:
        """What the node's epilog writes: `_root/<job>/<node>.json`, owned by root."""
        record = EvidenceRecord(str(JOB), node, "epilog", Source.ROOT, facts)
        store.write_root_record(str(self.evidence), JOB, node, record_to_json(record))

    def user_record(self, node: str, *facts: Fact, claim: Source = Source.USER) -> None:
        """What the wrapper writes as the job's user: `<job>/<node>.<step>.json`."""
        job_dir = self.evidence / str(JOB)
        job_dir.mkdir(exist_ok=True)
        os.chown(job_dir, USER, USER)
        path = job_dir / f"{node}.0.json"
        path.write_bytes(record_to_json(EvidenceRecord(str(JOB), node, "0", claim, facts)))
        os.chown(path, USER, USER)

    def end(self, state: str = "FAILED", exit_code: int = 1, restart: int = 0) -> Outcome:
        """The run ends and the decision runs, as EpilogSlurmctld would."""
        self.door.end_job(JOB, state, exit_code=exit_code)
        return self.decide(restart=restart, exit_code=exit_code)

    def decide(self, *, restart: int = 0, exit_code: int = 1, exit_signal: int = 0) -> Outcome:
        """The decision for the run that just ended, as Slurm left it in the door."""
        ending = JobEnd(
            job_id=JOB,
            restart=restart,
            nodes=NODES,
            uid=USER,
            exit_code=exit_code,
            exit_signal=exit_signal,
            ended_at=time.time(),
        )
        return decide(self.config, ending, self.door, self.journal, {})

    def row(self, restart: int = 0) -> DecisionRow:
        (row,) = [r for r in self.journal.decisions(job_id=JOB) if r.restart == restart]
        return row

    def events(self, node: str) -> list[str]:
        return [e.kind for e in self.journal.node_events(0, node)]


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def xid79(node: str, source: Source = Source.ROOT) -> KernelEvent:
    return KernelEvent(
        node=node,
        time=time.time() - 1,
        source=source,
        event=KernelEventKind.XID,
        xid=79,
        detail="GPU has fallen off the bus",
    )


def nccl_timeout(node: str = "node1") -> tuple[Fact, ...]:
    now = time.time()
    return (
        LogHit(
            node=node,
            time=now - 1,
            source=Source.USER,
            signature="torch.nccl_watchdog_timeout",
            cause=Cause.NCCL_TIMEOUT,
            excerpt="Watchdog caught collective operation timeout",
        ),
        ProcessExit(node=node, time=now, source=Source.USER, exit_code=1),
    )


def comment(door: FakeDoor) -> dict[str, object]:
    (call,) = door.calls_to("set_admin_comment")
    summary: dict[str, object] = json.loads(call.args[1])["triage"]
    return summary


# -- blame tiers --------------------------------------------------------------------------


def test_root_backed_xid79_requeues_excluding_and_drains_the_node(cluster: Cluster) -> None:
    """Root's XID 79 on node2: requeue, exclude node2, drain it with our prefix, summarise."""
    cluster.root_record("node1")
    cluster.root_record("node2", xid79("node2"))
    out = cluster.end()
    door = cluster.door
    assert [c.method for c in door.mutations()] == [
        "requeue",
        "set_excluded_nodes",
        "drain",
        "set_admin_comment",
        "set_accounted_admin_comment",
    ]
    assert door.calls_to("requeue") == [Call("requeue", (JOB,), {"hold": False})]
    assert door.jobs[JOB].excluded_nodes == ("node2",)
    assert door.node("node2").reason.startswith("triage: gpu_unavailable job=7: ")
    assert comment(door) == {
        "cause": "gpu_unavailable",
        "nodes": ["node2"],
        "action": "requeue",
        "n": 1,
        "excluded": ["node2"],
    }
    row = cluster.row()
    assert (row.cause, row.action, row.root_backed, row.blamed) == (
        "gpu_unavailable",
        "requeue",
        True,
        ("node2",),
    )
    assert (row.excluded, row.drained, row.outcome, row.applied) == (
        ("node2",),
        ("node2",),
        "ok",
        True,
    )
    assert cluster.events("node2") == ["blamed", "excluded", "drained"]
    assert cluster.events("node1") == []
    assert out.applied is not None and out.applied.drained == ("node2",)


def test_a_node_whose_clock_runs_ahead_still_has_its_xid_counted(cluster: Cluster) -> None:
    """node2's clock is 6 minutes ahead of the controller's: its Epilog stamped the XID 79 it
    found within the job's window by its own clock, past the controller's window (+5 min).
    The decision counts root's records as their Epilog windowed them, so node2 is blamed,
    excluded and drained as its Epilog asked; a user's claim stamped as late still is not."""
    skewed = replace(xid79("node2"), time=time.time() + 360)
    cluster.root_record("node2", skewed)
    outcome = cluster.end()
    assert outcome.attribution.nodes == ("node2",), outcome.attribution.reason
    assert outcome.decision.drain == ("node2",)


def test_a_users_claim_past_the_window_is_still_dropped(cluster: Cluster) -> None:
    late = replace(xid79("node2", Source.USER), time=time.time() + 360)
    cluster.user_record("node2", late)
    assert cluster.end().attribution.nodes == ()


@pytest.mark.parametrize("claim", [Source.USER, Source.ROOT], ids=["user", "forged_root"])
def test_users_xid_claim_requeues_excluding_but_never_drains(
    cluster: Cluster, claim: Source
) -> None:
    """The job's own record naming XID 79 (even one claiming to be root's) excludes node2
    for this job's requeue but drains nothing and counts nothing against node2."""
    cluster.user_record("node2", xid79("node2", claim), claim=claim)
    cluster.end()
    door = cluster.door
    assert [c.method for c in door.mutations()] == [
        "requeue",
        "set_excluded_nodes",
        "set_admin_comment",
        "set_accounted_admin_comment",
    ]
    assert not door.node("node2").drained
    row = cluster.row()
    assert (row.cause, row.blamed, row.root_backed, row.drained) == (
        "gpu_unavailable",
        ("node2",),
        False,
        (),
    )
    assert row.excluded == ("node2",)
    assert "not draining node2: only the job's own evidence" in row.reasons
    assert cluster.events("node2") == ["excluded"]  # excluded by a job, never blamed


def test_exclusion_is_merged_with_the_users_own_exclude(cluster: Cluster) -> None:
    """The user's --exclude=node4 stays when node2 is excluded; the journal has both."""
    cluster.door.jobs[JOB] = replace(cluster.door.jobs[JOB], excluded_nodes=("node4",))
    cluster.root_record("node2", xid79("node2"))
    cluster.end()
    assert cluster.door.jobs[JOB].excluded_nodes == ("node4", "node2")
    assert cluster.row().excluded == ("node4", "node2")
    assert comment(cluster.door)["excluded"] == ["node2"]


def test_a_failed_required_node_holds_the_job_and_is_still_drained(cluster: Cluster) -> None:
    """Submitted with -w node1,node2, root's XID 79 on node2: excluding node2 would leave the
    job pending for ever (BadConstraints), so it is requeued held, excluding nothing; the
    AdminComment names node2 and the cause; node2 is drained all the same."""
    door = cluster.door
    door.jobs[JOB] = replace(door.jobs[JOB], required_nodes=NODES)
    cluster.root_record("node1")
    cluster.root_record("node2", xid79("node2"))
    out = cluster.end()
    assert [c.method for c in door.mutations()] == [
        "requeue",
        "drain",
        "set_admin_comment",
        "set_accounted_admin_comment",
    ]
    assert door.calls_to("requeue") == [Call("requeue", (JOB,), {"hold": True})]
    job = door.jobs[JOB]
    assert (job.excluded_nodes, job.state_reason) == ((), "JobHeldAdmin")
    assert door.node("node2").drained
    assert door.node("node2").reason.startswith("triage: gpu_unavailable job=7: ")
    summary = comment(door)
    assert (summary["cause"], summary["action"], summary["required"]) == (
        "gpu_unavailable",
        "hold",
        ["node2"],
    )
    assert "node2" in str(summary["why"]) and "gpu_unavailable" in str(summary["why"])
    row = cluster.row()
    assert (row.action, row.excluded, row.drained) == ("hold", (), ("node2",))
    assert any(r.startswith("required node node2 failed (gpu_unavailable)") for r in row.reasons)
    assert out.applied is not None and out.applied.held


# -- admin drains ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["before", "at_start"])
def test_a_node_an_admin_drained_is_never_redrained_resumed_or_relabelled(
    tmp_path: Path, how: str
) -> None:
    """node2 drained by an admin for another reason: root's XID 79 still excludes it, but
    its drain, reason and comment stay the admin's."""
    cluster = Cluster(tmp_path)
    admin = "fan replacement, ticket 4711"
    if how == "before":
        cluster.door.drain_as_admin("node2", admin)
    else:
        cluster.door = FakeDoor(
            [cluster.door.jobs[JOB]],
            [node_info("node1"), node_info("node2", flags=frozenset({"DRAIN"}), reason=admin)]
            + node_infos(4)[2:],
        )
    cluster.root_record("node2", xid79("node2"))
    out = cluster.end()
    door = cluster.door
    assert door.admin_drains_touched == []
    assert not {"drain", "resume", "set_node_comment"} & set(door.methods())
    assert door.node("node2").reason == admin and door.node("node2").drained
    assert out.applied is not None and out.applied.skipped_drains == ("node2",)
    assert door.jobs[JOB].excluded_nodes == ("node2",)
    row = cluster.row()
    assert row.drained == () and row.outcome == "ok"
    assert "drained" not in cluster.events("node2")


# -- the exit code comes from the ending ---------------------------------------------------


@pytest.mark.parametrize(
    ("exit_code2", "state", "cause", "mutations"),
    [
        ("0:0", "COMPLETED", "completed", []),
        # Requeued: its REQUEUED record in accounting takes the summary as well.
        (
            "1:0",
            "FAILED",
            "unknown",
            ["requeue", "set_admin_comment", "set_accounted_admin_comment"],
        ),
        # Left ended: slurmctld refuses the summary (COMPLETING), accounting takes it.
        ("0:11", "FAILED", "segfault", ["set_admin_comment", "set_accounted_admin_comment"]),
    ],
)
def test_exit_code_and_signal_are_read_from_the_ending(
    cluster: Cluster, exit_code2: str, state: str, cause: str, mutations: list[str]
) -> None:
    """SLURM_JOB_EXIT_CODE2 (code:signal) is the ending's exit: it decides between success,
    an unexplained failure (requeued once) and a crash (left ended), and is journalled."""
    code, _, signal = exit_code2.partition(":")
    cluster.door.end_job(JOB, state, exit_code=int(code), signal=int(signal))
    env = {
        "SLURM_JOB_ID": str(JOB),
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_JOB_UID": str(USER),
        "SLURM_JOB_EXIT_CODE2": exit_code2,
        "SLURM_JOB_RESTART_COUNT": "0",
    }
    cluster.journal.close()
    out = decide_from_env(cluster.config, env, door=cluster.door)
    assert out is not None and out.attribution is not None
    assert out.attribution.cause.value == cause
    assert [c.method for c in cluster.door.mutations()] == mutations
    cluster.journal = Journal(cluster.config.decision.journal)
    row = cluster.row()
    assert row.cause == cause and row.state == state
    with closing(sqlite3.connect(cluster.config.decision.journal)) as db:
        stored = db.execute(
            "SELECT exit_code, exit_signal, nodes FROM decisions WHERE job_id = ?", (JOB,)
        ).fetchone()
    assert stored == (int(code), int(signal), '["node1", "node2"]')


def test_ending_without_an_exit_code_takes_the_controllers(cluster: Cluster) -> None:
    """A first node's Epilog has no SLURM_JOB_EXIT_CODE2: a job that crashed with SIGSEGV is
    still a segfault (left ended), not an unexplained failure that is requeued."""
    cluster.door.end_job(JOB, "FAILED", signal=11)
    env = {"SLURM_JOB_ID": str(JOB), "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_UID": str(USER)}
    cluster.journal.close()
    out = decide_from_env(cluster.config, env, door=cluster.door)
    assert out is not None and out.attribution is not None
    assert out.attribution.cause is Cause.SEGFAULT
    assert "requeue" not in cluster.door.methods()


def test_a_failed_ending_is_never_recorded_as_completed(cluster: Cluster) -> None:
    """The ending says 1:0 while the controller still shows 0:0 with no reason: the state is
    read from accounting (FAILED), not assumed COMPLETED (which also skips waiting for the
    nodes' root records)."""
    cluster.door.end_job(JOB, "FAILED", exit_code=1)
    cluster.door.jobs[JOB] = replace(cluster.door.jobs[JOB], exit_code=0, state_reason="None")
    cluster.decide(restart=0, exit_code=1, exit_signal=0)
    assert cluster.row().state == "FAILED"


def test_ending_from_env_splits_code_and_signal() -> None:
    """Slurm's `code:signal` and the hostlist become the JobEnd's fields."""
    ending = JobEnd.from_env(
        {
            "SLURM_JOB_ID": "12",
            "SLURM_JOB_NODELIST": "gpu[01-03]",
            "SLURM_JOB_UID": "1000",
            "SLURM_JOB_EXIT_CODE2": "137:9",
            "SLURM_JOB_RESTART_COUNT": "2",
        },
        now=5.0,
    )
    assert (ending.job_id, ending.restart, ending.uid) == (12, 2, 1000)
    assert (ending.exit_code, ending.exit_signal, ending.nodes) == (
        137,
        9,
        ("gpu01", "gpu02", "gpu03"),
    )


# -- requeue budgets from the journal -------------------------------------------------------


def _second_run(cluster: Cluster, *facts: Fact) -> Outcome:
    cluster.start_run()
    cluster.user_record("node1", *facts)
    return cluster.end(restart=1)


def test_second_nccl_timeout_is_requeued_after_backoff(cluster: Cluster) -> None:
    """The journal's first NCCL timeout makes the second one wait backoff_base_s."""
    cluster.user_record("node1", *nccl_timeout())
    cluster.end()
    assert "set_begin_time" not in cluster.door.methods()
    assert cluster.row(0).action == "requeue"
    cluster.door.calls.clear()
    _second_run(cluster, *nccl_timeout())
    assert [c.method for c in cluster.door.mutations()] == [
        "requeue",
        "set_begin_time",
        "set_admin_comment",
        "set_accounted_admin_comment",
    ]
    assert cluster.door.calls_to("set_begin_time") == [Call("set_begin_time", (JOB, 60.0))]
    row = cluster.row(1)
    assert row.action == "requeue" and "1 earlier requeue(s) for nccl_timeout: start in 60s" in (
        row.reasons
    )
    assert comment(cluster.door)["n"] == 2


def test_node_failure_budget_holds_the_second_nccl_timeout(tmp_path: Path) -> None:
    """With max_node_failure_requeues = 1 the second NCCL timeout is requeued held."""
    cluster = Cluster(tmp_path, max_node_failure_requeues=1)
    cluster.user_record("node1", *nccl_timeout())
    cluster.end()
    cluster.door.calls.clear()
    out = _second_run(cluster, *nccl_timeout())
    assert cluster.door.calls_to("requeue") == [Call("requeue", (JOB,), {"hold": True})]
    assert out.applied is not None and (out.applied.held, out.applied.requeued) == (True, False)
    assert cluster.door.jobs[JOB].state_reason == "JobHeldAdmin"
    row = cluster.row(1)
    assert row.action == "hold"
    assert "node_failure requeue budget spent (1 of 1): held" in row.reasons
    assert comment(cluster.door)["action"] == "hold"


def test_budget_is_per_family_a_hardware_requeue_spends_the_nccl_one(tmp_path: Path) -> None:
    """XID 79 and an NCCL timeout are one family (node failure): one budget between them."""
    cluster = Cluster(tmp_path, max_node_failure_requeues=1)
    cluster.root_record("node2", xid79("node2"))
    cluster.end()
    assert cluster.row(0).action == "requeue"
    os.unlink(cluster.evidence / "_root" / str(JOB) / "node2.json")
    _second_run(cluster, *nccl_timeout())
    assert cluster.row(1).cause == "nccl_timeout" and cluster.row(1).action == "hold"


def test_an_unknown_failure_is_requeued_once_then_held(tmp_path: Path) -> None:
    """Unknown has its own family budget of one, untouched by an earlier NCCL timeout."""
    cluster = Cluster(tmp_path, max_node_failure_requeues=1)
    cluster.user_record("node1", *nccl_timeout())
    cluster.end()
    os.unlink(cluster.evidence / str(JOB) / "node1.0.json")
    cluster.start_run()
    cluster.end(restart=1)
    assert (cluster.row(1).cause, cluster.row(1).action) == ("unknown", "requeue")
    cluster.start_run()
    cluster.end(restart=2)
    assert (cluster.row(2).cause, cluster.row(2).action) == ("unknown", "hold")
    assert "unknown requeue budget spent (1 of 1): held" in cluster.row(2).reasons


def test_slurms_own_restart_count_spends_the_total_budget(tmp_path: Path) -> None:
    """A job Slurm (or an admin) requeued max_requeues times is held, our journal empty."""
    cluster = Cluster(tmp_path, max_requeues=3)
    cluster.door.jobs[JOB] = replace(cluster.door.jobs[JOB], restart_count=3)
    cluster.user_record("node1", *nccl_timeout())
    cluster.end(restart=3)
    assert cluster.door.calls_to("requeue") == [Call("requeue", (JOB,), {"hold": True})]
    assert "requeue budget spent (3 of 3): held" in cluster.row(3).reasons


# -- failures and dry runs ----------------------------------------------------------------


def test_a_lemon_back_from_repair_starts_its_history_again(cluster: Cluster) -> None:
    """node1 was a lemon (4 blamed jobs 3 days ago), then burned in and returned yesterday.
    node2's XID 79 ends this job: only node2 is drained; node1's old failures, from before
    its repair, do not drain it again as a lemon (as reconcile reads it, docs/repair.md)."""
    old = time.time() - 3 * 86400
    cluster.journal.add_node_events(
        [NodeEvent("node1", 100 + i, old, "blamed", "gpu_memory", 48, False) for i in range(4)]
    )
    returned = LifecycleEvent(
        "node1", time.time() - 86400, "burn_in", "return_to_service", True, ""
    )
    cluster.root_record("node2", xid79("node2"))
    assert set(cluster.end().decision.drain) == {"node1", "node2"}  # not back yet: a lemon
    cluster.journal.add_lifecycle_events([returned])
    cluster.start_run()
    again = cluster.end(restart=1)
    assert again.decision.drain == ("node2",), again.decision.reasons
    assert not any("lemon" in r for r in again.decision.reasons)


def test_another_nodes_own_fault_is_drained_with_its_own_reason(cluster: Cluster) -> None:
    """node1's XID 79 ends the job; node2's post-job row remap check failed too, so its
    Epilog failed and Slurm drained it `Epilog error`. The decision relabels node2 with its
    own cause (the lifecycle would otherwise read an admin's drain and never repair it) and
    blames, excludes and counts node1 only."""
    cluster.root_record("node1", xid79("node1"))
    remap = HealthCheck(
        node="node2",
        time=time.time() - 1,
        source=Source.ROOT,
        check="gpu.row_remap",
        status=CheckStatus.FAIL,
        reason="GPU 3: row remapping pending",
        cause=Cause.GPU_MEMORY,
    )
    cluster.root_record("node2", remap)
    cluster.door.fail_epilog("node2")
    outcome = cluster.end()
    assert outcome.attribution.nodes == ("node1",)
    assert outcome.decision.exclude == ("node1",)
    assert set(outcome.decision.drain) == {"node1", "node2"}
    reason = cluster.door.node("node2").reason
    assert reason.startswith("triage: gpu_memory job=7: its own root evidence"), reason
    assert cluster.door.node("node1").reason.startswith("triage: gpu_unavailable job=7")
    assert cluster.events("node2") == ["drained"]  # drained, not blamed for the job


def test_no_exclusion_after_a_failed_requeue(cluster: Cluster) -> None:
    """A refused requeue: no ExcNodeList update, no begin time; the drain and the summary
    still happen and the journal row carries the error."""
    cluster.door.fail(
        "requeue", SlurmUnavailable("scontrol requeue 7: Unable to contact slurm controller")
    )
    cluster.root_record("node2", xid79("node2"))
    out = cluster.end()
    door = cluster.door
    assert [c.method for c in door.mutations()] == [
        "requeue", "drain", "set_admin_comment", "set_accounted_admin_comment"
    ]  # fmt: skip
    assert door.jobs[JOB].excluded_nodes == () and door.jobs[JOB].restart_count == 0
    assert comment(door)["n"] == 1  # the attempt decided on, requeued or not
    assert out.applied is not None and out.applied.excluded == ()
    row = cluster.row()
    assert row.excluded == () and row.drained == ("node2",) and not row.applied
    assert row.outcome == "requeue: scontrol requeue 7: Unable to contact slurm controller"
    assert cluster.events("node2") == ["blamed", "drained"]


def test_dry_run_decides_and_records_without_changing_slurm(tmp_path: Path) -> None:
    """policy.act = false: the decision is journalled (outcome dry_run), Slurm only read."""
    cluster = Cluster(tmp_path, act=False)
    cluster.root_record("node2", xid79("node2"))
    out = cluster.end()
    assert cluster.door.mutations() == []
    assert set(cluster.door.methods()) <= {"job", "accounted_job", "nodes"}
    assert not cluster.door.node("node2").drained
    assert out.decision is not None and out.decision.exclude == ("node2",)
    row = cluster.row()
    assert (row.action, row.outcome, row.applied) == ("requeue", "dry_run", False)
    assert row.excluded == () and row.drained == ()
    # What would have been excluded and drained still counts in the node's history.
    assert cluster.events("node2") == ["blamed", "excluded", "drained"]
    assert any(r.startswith("drain node2: root-collected") for r in row.reasons)


def test_a_second_decider_for_the_same_job_end_does_nothing(cluster: Cluster) -> None:
    """The journal's claim admits one decision per (job, restart): a rerun reads, acts not."""
    cluster.root_record("node2", xid79("node2"))
    assert cluster.end().decided
    cluster.door.calls.clear()
    again = cluster.decide(restart=0, exit_code=1, exit_signal=0)
    assert not again.decided and cluster.door.mutations() == []


def test_a_job_id_slurm_gave_out_again_is_decided_as_a_new_job(cluster: Cluster) -> None:
    """Job 7 ended and was decided a day ago; Slurm gives id 7 to a new job (MaxJobId
    wrapped, or slurmctld lost its state), whose run started after that claim. Its end is
    decided, with no history: not `decision_already_taken`, and no backoff from the old
    job's requeue."""
    cluster.root_record("node2", xid79("node2"))
    assert cluster.end().decided
    with closing(sqlite3.connect(cluster.config.decision.journal)) as db, db:
        db.execute("UPDATE decisions SET claimed_at = claimed_at - 86400")
    cluster.start_run()
    again = cluster.end()
    assert again.decided
    assert again.decision is not None and again.decision.begin_delay_s == 0
    (row,) = cluster.journal.decisions(job_id=JOB)
    assert row.restart == 0


def test_a_job_slurm_requeued_itself_is_not_requeued_twice(cluster: Cluster) -> None:
    """Slurm already requeued the job (its prolog failed): only exclusion and summary remain,
    journalled under the run that ended."""
    cluster.root_record("node2", xid79("node2"))
    cluster.door.jobs[JOB] = replace(
        cluster.door.jobs[JOB], state=JobState.PENDING, restart_count=1, start_time=None
    )
    cluster.decide(restart=1, exit_code=1, exit_signal=0)
    assert "requeue" not in cluster.door.methods()
    assert [c.method for c in cluster.door.mutations()] == [
        "set_excluded_nodes",
        "drain",
        "set_admin_comment",
        "set_accounted_admin_comment",
    ]
    assert cluster.row(0).state == "REQUEUED" and cluster.row(0).excluded == ("node2",)


# -- where the facts come from ------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "exit_code", "expected"), [("FAILED", 1, "FAILED"), ("NODE_FAIL", 0, "NODE_FAIL")]
)
def test_end_state_falls_back_to_the_controllers_reason_without_accounting(
    cluster: Cluster, state: str, exit_code: int, expected: str
) -> None:
    """slurmdbd down: the COMPLETING job's reason (NonZeroExitCode, NodeDown) gives the state."""
    cluster.door.fail(
        "accounted_job", SlurmUnavailable("sacct: slurmdbd: Connection refused"), times=None
    )
    cluster.end(state, exit_code=exit_code)
    assert cluster.door.methods()[:2] == ["job", "accounted_job"]
    assert cluster.row().state == expected


def test_a_job_without_the_wrapper_is_attributed_from_its_output_file(
    cluster: Cluster, tmp_path: Path
) -> None:
    """No records at all: the tail of the batch output file (the user's words) names the
    NCCL timeout, read as the user's evidence."""
    output = tmp_path / "slurm-7.out"
    output.write_text("step 100\n[rank0]: Watchdog caught collective operation timeout\n")
    os.chown(output, USER, USER)
    cluster.door.jobs[JOB] = replace(cluster.door.jobs[JOB], std_out=str(output))
    cluster.end()
    row = cluster.row()
    assert (row.cause, row.action) == ("nccl_timeout", "requeue")
    assert any(e.get("source") == "user" and e.get("kind") == "log_signature" for e in row.evidence)


def test_host_lists_the_scan_bound_left_unread_are_said_in_the_decision(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's output names more hosts than the scan expands (logscan.MAX_SCAN_NAMES,
    made 4 here): the decision's reason says what went unread, not only a log line."""
    from slurm_triage.attribution import logscan

    monkeypatch.setattr(logscan, "MAX_SCAN_NAMES", 4)
    output = tmp_path / "slurm-7.out"
    lines = [f"srun: error: Node failure on n[{10 * i:03d}-{10 * i + 9:03d}]" for i in range(3)]
    output.write_text("\n".join(lines) + "\n")
    os.chown(output, USER, USER)
    cluster.door.jobs[JOB] = replace(cluster.door.jobs[JOB], std_out=str(output))
    outcome = cluster.end()
    assert outcome.attribution is not None
    assert "job output: 3 host list(s) past 4 names not read" in outcome.attribution.reason


def test_a_record_naming_a_node_outside_the_job_excludes_nothing(cluster: Cluster) -> None:
    """A user's record about node4 (not the job's) cannot get node4 excluded or blamed."""
    cluster.user_record("node1", xid79("node4", Source.USER))
    cluster.end()
    assert cluster.door.jobs[JOB].excluded_nodes == ()
    assert "node4" not in cluster.row().blamed and cluster.events("node4") == []


def test_a_bad_environment_is_logged_not_raised(cluster: Cluster) -> None:
    """EpilogSlurmctld without SLURM_JOB_ID: no decision, no exception, Slurm untouched."""
    assert (
        decide_from_env(cluster.config, {"SLURM_JOB_NODELIST": "node1"}, door=cluster.door) is None
    )
    assert cluster.door.calls == []


def test_a_completed_job_costs_no_cluster_wide_read(cluster: Cluster) -> None:
    """Issue 12 item 3: most job ends are clean; they must not pay for a cluster-wide sinfo.
    The job itself is read, and accounting once (it already has the final state)."""
    cluster.end(state="COMPLETED", exit_code=0)
    assert cluster.row().cause == "completed"
    assert cluster.door.methods() == ["job", "accounted_job"]


def test_a_user_error_blaming_no_node_reads_no_node_list(cluster: Cluster) -> None:
    """A KeyError excludes nothing, so the partition's usable nodes (sinfo) are not read."""
    cluster.user_record(
        "node2", RootException(node="node2", exc_type="KeyError", message="'lr'", time=time.time())
    )
    cluster.end()
    assert cluster.row().cause == "user_code"
    assert "nodes" not in cluster.door.methods()


def test_a_job_not_requeued_names_its_own_attempt_in_the_admin_comment(cluster: Cluster) -> None:
    """`n` is the attempt the decision is about (restart count + 1), as the analytics number
    a job's rows: a user's error, not requeued, lands on its own row and names it (n=0 named
    no attempt, and the analytics dropped the cause)."""
    cluster.user_record(
        "node2", RootException(node="node2", exc_type="KeyError", message="'lr'", time=time.time())
    )
    cluster.end()
    assert "requeue" not in cluster.door.methods()
    assert (comment(cluster.door)["cause"], comment(cluster.door)["n"]) == ("user_code", 1)
    (ended,) = cluster.door.calls_to("set_accounted_admin_comment") or [None]
    assert ended is None or "n=1" in ended.args[1]


def test_a_completing_jobs_shrinking_node_count_still_must_fit(tmp_path: Path) -> None:
    """slurmctld lowers NumNodes as a COMPLETING job's nodes finish their Epilogs; the whole
    allocation (node1, node2) must still fit: on a 2-usable-node partition minus node2 it
    does not, so node2 is not excluded."""
    cluster = Cluster(tmp_path)
    door = cluster.door
    door.node_table = {n: door.node_table[n] for n in ("node1", "node2")}
    cluster.root_record("node2", xid79("node2"))
    door.end_job(JOB, "FAILED", exit_code=1)
    door.jobs[JOB] = replace(door.jobs[JOB], num_nodes=1)
    cluster.decide(restart=0, exit_code=1, exit_signal=0)
    assert cluster.row().excluded == ()


def test_a_completing_jobs_shrinking_node_list_still_must_fit(tmp_path: Path) -> None:
    """Seen in CI on a loaded 22.05: by the time the decision read the COMPLETING job, its
    node list had shrunk as well as its count, and a 2-node job read as a 1-node one was
    requeued excluding node2 where it no longer fits. The environment's node list
    (SLURM_JOB_NODELIST: node1,node2) is the allocation that must fit."""
    cluster = Cluster(tmp_path)
    door = cluster.door
    door.node_table = {n: door.node_table[n] for n in ("node1", "node2")}
    cluster.root_record("node2", xid79("node2"))
    door.end_job(JOB, "FAILED", exit_code=1)
    door.jobs[JOB] = replace(door.jobs[JOB], num_nodes=1, nodes=("node1",))
    cluster.decide(restart=0, exit_code=1, exit_signal=0)
    assert cluster.row().excluded == ()


def test_the_hook_reads_the_job_from_the_controller_once(cluster: Cluster) -> None:
    """EpilogSlurmctld looks at the job once (is it an expedited failure?) and the decision
    starts from that read: one `scontrol show job` per job end, not two."""
    cluster.door.end_job(JOB, "COMPLETED", exit_code=0)
    env = {
        "SLURM_JOB_ID": str(JOB),
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_JOB_UID": str(USER),
        "SLURM_JOB_EXIT_CODE2": "0:0",
    }
    out = decide_from_env(cluster.config, env, door=cluster.door)
    assert out is not None and out.decided
    assert cluster.door.methods().count("job") == 1


@pytest.mark.parametrize(("state", "exit_code"), [("COMPLETED", 0), ("FAILED", 3)])
def test_where_slurm_shows_the_state_under_completing_accounting_is_not_asked(
    cluster: Cluster, state: str, exit_code: int
) -> None:
    """Issue 12 item 3: on 24.05+ (`scontrol --json`) the job's own read says how it ended
    under COMPLETING, so no sacct poll; a clean end costs one read of the job."""
    cluster.door.end_job(JOB, state, exit_code=exit_code, shows_base_state=True)
    # Accounting would say otherwise: it must not be the source.
    cluster.door.accounting[JOB] = replace(cluster.door.accounting[JOB], state=JobState.RUNNING)
    cluster.decide(restart=0, exit_code=exit_code, exit_signal=0)
    assert "accounted_job" not in cluster.door.methods()
    assert cluster.row().state == state
    if state == "COMPLETED":
        assert cluster.door.methods() == ["job"]


def test_a_cancel_still_asks_accounting_who_cancelled(cluster: Cluster) -> None:
    """A cancel's base state is known, but accounting says who cancelled (an admin or the
    user), which attribution reads."""
    cluster.door.end_job(
        JOB, "CANCELLED", signal=15, state_text="CANCELLED by 0", shows_base_state=True
    )
    cluster.decide(restart=0, exit_code=0, exit_signal=15)
    assert "accounted_job" in cluster.door.methods()
    assert cluster.row().state == "CANCELLED by 0"


@pytest.mark.parametrize("shows_base_state", [True, False])
def test_a_prolog_failure_requeue_at_completing_is_read_as_requeued(
    cluster: Cluster, shows_base_state: bool
) -> None:
    """Slurm requeued the job itself (its Prolog failed) and shows COMPLETING, 0:0: on 24.05+
    the base state PENDING says so at once; before, accounting does. Either way the run that
    ended is journalled REQUEUED under its own restart count and is not requeued again."""
    cluster.root_record("node2", xid79("node2"))
    cluster.door.requeue_after_prolog_failure(JOB, shows_base_state=shows_base_state)
    cluster.decide(restart=1, exit_code=0, exit_signal=0)
    assert ("accounted_job" in cluster.door.methods()) is not shows_base_state
    assert "requeue" not in cluster.door.methods()
    assert cluster.row(0).state == "REQUEUED"


def test_every_ended_failure_and_a_clean_end_after_requeues_have_an_admin_comment(
    cluster: Cluster,
) -> None:
    """Issue 17.3: `sacct -o AdminComment` tells the story. A XID 79 run is requeued (JSON
    summary, job pending); its next run completes: that record says so and what came before."""
    cluster.root_record("node2", xid79("node2"))
    cluster.end()
    assert comment(cluster.door)["cause"] == "gpu_unavailable"
    cluster.start_run()
    cluster.door.end_job(JOB, "COMPLETED")
    cluster.decide(restart=1, exit_code=0, exit_signal=0)
    assert cluster.door.accounting[JOB].admin_comment == (
        "triage: completed after 1 requeue; earlier: gpu_unavailable on node2"
    )


class StoppedClock:
    """A Clock whose wall time stands still and whose sleeps only advance its monotonic
    time: every wait of the decision is counted, none is slept."""

    def __init__(self, wall: float) -> None:
        self.wall, self.mono, self.slept = wall, 0.0, 0.0

    def clock(self) -> Clock:
        return Clock(time=lambda: self.wall, monotonic=lambda: self.mono, sleep=self.sleep)

    def sleep(self, seconds: float) -> None:
        self.mono += seconds
        self.slept += seconds


def test_the_decision_reads_time_from_its_clock(cluster: Cluster) -> None:
    """decided_at, the node events and the policies' `now` are the injected clock's wall
    time; waiting for a node's missing evidence is the clock's sleep, bounded by
    decision.wait_for_nodes_s (20 s here, taken in no time)."""
    cluster.root_record("node2", xid79("node2"))  # node1's epilog never writes
    cluster.door.end_job(JOB, "FAILED", exit_code=1)
    stopped = StoppedClock(wall=time.time() + 3600.0)
    end = JobEnd(job_id=JOB, nodes=NODES, uid=USER, exit_code=1, ended_at=time.time())
    out = decide(cluster.config, end, cluster.door, cluster.journal, {}, clock=stopped.clock())
    assert out.decided and out.decision is not None
    assert cluster.row().decided_at == stopped.wall
    assert {e.at for e in cluster.journal.node_events(0)} == {stopped.wall}
    assert stopped.slept >= cluster.config.decision.wait_for_nodes_s


def test_job_end_reads_the_epilogs_environment_too() -> None:
    """The Epilog and the decision read one JobEnd from one table of SLURM_* names: the
    node it runs on, Slurm's start time, whether the job failed."""
    env = {
        "SLURM_JOB_ID": "12",
        "SLURMD_NODENAME": "gpu02",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_JOB_START_TIME": "1700000000",
        "SLURM_JOB_EXIT_CODE2": "0:9",
    }
    end = JobEnd.from_env(env, now=5.0)
    assert (end.node, end.nodes, end.start_time) == ("gpu02", ("gpu01", "gpu02"), 1.7e9)
    assert end.failed and not JobEnd.from_env({"SLURM_JOB_ID": "12"}, now=5.0).failed
    bad = {**env, "SLURM_JOB_NODELIST": "gpu[01-"}
    assert JobEnd.from_env(bad, now=5.0, nodes_required=False).nodes == ()
    with pytest.raises(HostlistError):
        JobEnd.from_env(bad, now=5.0)


def test_the_end_state_stays_typed_from_slurm_to_the_journal() -> None:
    """sacct's text becomes a JobState with the cancelling uid and back, unchanged; a state
    sacct has no name for is UNKNOWN, not a crash after the job end was claimed."""
    cancelled = EndState.parse("CANCELLED by 0")
    assert (cancelled.state, cancelled.by_uid, cancelled.text) == (
        JobState.CANCELLED,
        0,
        "CANCELLED by 0",
    )
    assert EndState.parse("NODE_FAIL").text == "NODE_FAIL"
    assert EndState.parse("SOMETHING_NEW").state is JobState.UNKNOWN
