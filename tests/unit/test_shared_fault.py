"""A failed check on many nodes at once is a shared fault, not many broken nodes: a hung
Lustre under a 512-node job fails fs.mounts in all 512 Epilogs. The node Epilog and the
decision ask the health path's circuit breaker (policies.breaker) before draining for a
failed check, so one outage drains, excludes and blames none of them; a check failing on
one node still drains it."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config, DecisionConfig, HealthConfig, PathsConfig, SlurmConfig
from slurm_triage.evidence import (
    CheckStatus,
    EvidenceRecord,
    HealthCheck,
    KernelEvent,
    KernelEventKind,
    Source,
    record_to_json,
    store,
)
from slurm_triage.journal import Journal
from slurm_triage.policies.breaker import failing_mark
from slurm_triage.prolog_epilog.decide import decide
from slurm_triage.prolog_epilog.epilog import breaker_holds
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm import JobState, SlurmUnavailable
from slurm_triage.taxonomy import Cause
from slurm_triage.testing import FakeDoor, job_info, node_infos

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root records need root")

JOB = 9
CLUSTER = 20  # the breaker's limit: max(2, 0.1 * 20) = 2 nodes failing one check at once
JOB_NODES = tuple(f"node{i}" for i in range(1, 9))


def _config(tmp_path: Path) -> Config:
    evidence = tmp_path / "evidence"
    evidence.mkdir(exist_ok=True)
    os.chmod(evidence, 0o1777)
    return Config(
        paths=PathsConfig(evidence_dir=str(evidence), state_dir=str(tmp_path / "state")),
        decision=DecisionConfig(journal=str(tmp_path / "journal.sqlite"), wait_for_nodes_s=0),
        health=HealthConfig(breaker_settle_s=0),
        slurm=SlurmConfig(bin_dir=str(tmp_path / "no-slurm-here")),
    )


def _mount_failed(node: str) -> HealthCheck:
    return HealthCheck(
        node=node,
        time=time.time() - 1,
        source=Source.ROOT,
        check="fs.mounts",
        status=CheckStatus.FAIL,
        reason="/lustre: stat timed out after 2s",
        cause=Cause.FILESYSTEM,
    )


def _record(node: str, *facts: object) -> EvidenceRecord:
    return EvidenceRecord(str(JOB), node, "epilog", Source.ROOT, facts)  # type: ignore[arg-type]


def _end(node: str = "node1") -> JobEnd:
    return JobEnd(
        job_id=JOB, node=node, nodes=JOB_NODES, uid=4242, exit_code=1, ended_at=time.time()
    )


def _decide(tmp_path: Path, failing: tuple[str, ...]) -> tuple[FakeDoor, Journal, object]:
    config = _config(tmp_path)
    door = FakeDoor([job_info(JOB, nodes=JOB_NODES, num_nodes=len(JOB_NODES))], node_infos(CLUSTER))
    door.jobs[JOB] = replace(door.jobs[JOB], state=JobState.RUNNING, start_time=time.time() - 60)
    for node in failing:
        record = record_to_json(_record(node, _mount_failed(node)))
        store.write_root_record(config.paths.evidence_dir, JOB, node, record)
    door.end_job(JOB, "FAILED", exit_code=1)
    journal = Journal(config.decision.journal)
    outcome = decide(config, _end(), door, journal, {})
    return door, journal, outcome


def test_a_mount_failing_under_every_node_of_a_job_drains_and_excludes_none(
    tmp_path: Path,
) -> None:
    door, journal, outcome = _decide(tmp_path, JOB_NODES)
    decision = outcome.decision  # type: ignore[attr-defined]
    assert outcome.attribution.cause is Cause.FILESYSTEM  # type: ignore[attr-defined]
    assert (decision.drain, decision.exclude) == ((), ())
    assert any("fs.mounts failing on 8 of 20 nodes" in r for r in decision.reasons)
    assert not door.calls_to("drain") and not door.calls_to("set_excluded_nodes")
    assert [e for e in journal.node_events(0) if e.kind == "blamed"] == []


def test_a_mount_failing_on_one_node_still_drains_it(tmp_path: Path) -> None:
    door, journal, outcome = _decide(tmp_path, ("node3",))
    decision = outcome.decision  # type: ignore[attr-defined]
    assert (decision.drain, decision.exclude) == (("node3",), ("node3",))
    assert [e.node for e in journal.node_events(0) if e.kind == "blamed"] == ["node3"]


def test_the_epilog_holds_back_when_the_clusters_nodes_fail_the_same_check() -> None:
    """Its own mark, then the others': 3 of 20 marked failing fs.mounts opens the breaker."""
    config = replace(Config(), health=HealthConfig(breaker_settle_s=0))
    door = FakeDoor(nodes=node_infos(CLUSTER))
    record = _record("node1", _mount_failed("node1"))
    assert breaker_holds(config, _end(), record, Cause.FILESYSTEM, door=door) == ""
    assert door.node("node1").comment.startswith("triage-failing fs.mounts ")
    for other in ("node2", "node3"):
        door.set_node_comment(other, failing_mark("fs.mounts", time.time()))
    held = breaker_holds(config, _end(), record, Cause.FILESYSTEM, door=door)
    assert held.startswith("fs.mounts failing on 3 of 20 nodes")


def test_the_epilog_never_holds_back_a_fault_no_check_found() -> None:
    """An XID is the node's own: no breaker, not even a read of Slurm."""
    config = replace(Config(), health=HealthConfig(breaker_settle_s=0))
    door = FakeDoor(nodes=node_infos(CLUSTER))
    xid = KernelEvent(
        node="node1", time=time.time(), source=Source.ROOT, event=KernelEventKind.XID, xid=79
    )
    assert breaker_holds(config, _end(), _record("node1", xid), Cause.GPU_UNAVAILABLE, door) == ""
    assert door.calls == []


def _gpu_lost(node: str) -> tuple[KernelEvent, HealthCheck]:
    """An XID 79 and the post-job gpu.lost check it fails: the GPU's own fault."""
    xid = KernelEvent(
        node=node, time=time.time() - 5, source=Source.ROOT, event=KernelEventKind.XID, xid=79
    )
    check = HealthCheck(
        node=node,
        time=time.time() - 1,
        source=Source.ROOT,
        check="gpu.lost",
        status=CheckStatus.FAIL,
        reason="GPU 3 lost",
        cause=Cause.GPU_UNAVAILABLE,
    )
    return xid, check


def test_a_gpus_own_fault_that_a_check_also_finds_is_never_held_back() -> None:
    """XID 79 fails gpu.lost as well: other nodes marked failing gpu.lost (a dev cluster's
    leftovers, or real lost GPUs elsewhere) do not hold this node back; Slurm is not asked."""
    config = replace(Config(), health=HealthConfig(breaker_settle_s=0))
    door = FakeDoor(nodes=node_infos(CLUSTER))
    for other in ("node2", "node3", "node4"):
        door.set_node_comment(other, failing_mark("gpu.lost", time.time()))
    door.calls.clear()
    record = _record("node1", *_gpu_lost("node1"))
    assert breaker_holds(config, _end(), record, Cause.GPU_UNAVAILABLE, door=door) == ""
    assert door.calls == []


def test_lost_gpus_on_several_nodes_are_each_drained(tmp_path: Path) -> None:
    config = _config(tmp_path)
    door = FakeDoor([job_info(JOB, nodes=JOB_NODES, num_nodes=len(JOB_NODES))], node_infos(CLUSTER))
    door.jobs[JOB] = replace(door.jobs[JOB], state=JobState.RUNNING, start_time=time.time() - 60)
    for node in ("node1", "node2", "node3"):
        record = record_to_json(_record(node, *_gpu_lost(node)))
        store.write_root_record(config.paths.evidence_dir, JOB, node, record)
    door.end_job(JOB, "FAILED", exit_code=1)
    outcome = decide(config, _end(), door, Journal(config.decision.journal), {})
    assert set(outcome.decision.drain) == {"node1", "node2", "node3"}  # type: ignore[union-attr]


def test_the_epilog_drains_as_before_when_slurm_cannot_be_read() -> None:
    config = replace(Config(), health=HealthConfig(breaker_settle_s=0))
    door = FakeDoor(nodes=node_infos(CLUSTER))
    door.fail("nodes", SlurmUnavailable("sinfo: Unable to contact slurm controller"))
    record = _record("node1", _mount_failed("node1"))
    assert breaker_holds(config, _end(), record, Cause.FILESYSTEM, door=door) == ""


def test_only_roots_checks_count_toward_a_shared_fault() -> None:
    """A user's record naming a failed check (any name, e.g. one many nodes are drained for)
    cannot make a node's real fault look shared: only root's checks are counted."""
    from slurm_triage.prolog_epilog.own_fault import checks_alone

    forged = replace(_mount_failed("node1"), source=Source.USER, check="gpu.lost")
    facts = [_mount_failed("node1"), forged]
    assert checks_alone(facts, Cause.FILESYSTEM, ("node1",)) == ("fs.mounts",)
    assert checks_alone([*facts, *_gpu_lost("node1")], Cause.FILESYSTEM, ("node1",)) == ()
