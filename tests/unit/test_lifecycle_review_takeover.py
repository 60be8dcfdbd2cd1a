"""A node an admin set DOWN or FAIL is treated like one an admin drained: no drain of ours
replaces its reason, no passing health run resumes it; a node Slurm itself took out for a
fault of the node (not responding, a task it could not kill, ...) is taken over."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from slurm_triage import actuator
from slurm_triage.config import HealthConfig, RepairConfig
from slurm_triage.health_checks.result import Action, RunReport, Severity, fail, ok
from slurm_triage.policies import Decision, Verdict
from slurm_triage.policies.lifecycle import (
    BurnIn,
    LifecycleAction,
    LifecycleInput,
    NodeLifecycle,
    Repair,
    decide_lifecycle,
)
from slurm_triage.policies.nodes import NodeOutcome, decide_node
from slurm_triage.policies.reasons import is_slurm_fault, may_replace_drain
from slurm_triage.slurm.model import NodeFlag, NodeInfo
from slurm_triage.testing import FakeDoor, job_info, node_info, node_infos

JOB = 77
REASON = "triage: node_failure job=77: node failed"
ADMIN_DOWN = node_info("node2", state="DOWN", reason="PSU swap ticket 42", reason_user="admin")
ADMIN_FAIL = node_info(
    "node3", flags=frozenset({NodeFlag.FAIL}), reason="flaky HCA, do not use", reason_user="admin"
)


def _carry_out(door: FakeDoor, nodes: tuple[str, ...]) -> actuator.Applied:
    decision = Decision(Verdict.RECORD_ONLY, drain=nodes)
    return actuator.carry_out(
        door,
        JOB,
        decision,
        cause="node_failure",
        blamed=nodes,
        restart=0,
        drain_reason=REASON,
        dry_run=False,
    )


def _door(*nodes: NodeInfo) -> FakeDoor:
    door = FakeDoor([job_info(JOB)], [*node_infos(4), *nodes])
    door.end_job(JOB, "NODE_FAIL", exit_code=1)
    return door


def test_a_job_end_leaves_an_admins_down_and_fail_nodes_as_they_are() -> None:
    """DOWN and FAIL carry no DRAIN flag, yet Slurm accepts a drain over them and it would
    replace the admin's reason (and clear FAIL): the drain is skipped instead."""
    door = _door(ADMIN_DOWN, ADMIN_FAIL)
    applied = _carry_out(door, ("node2", "node3"))
    assert applied.drained == ()
    assert applied.skipped_drains == ("node2", "node3")
    assert door.node("node2") == ADMIN_DOWN
    assert door.node("node3") == ADMIN_FAIL
    assert door.admin_drains_touched == []


@pytest.mark.parametrize(
    ("state", "flags", "reason"),
    [
        ("DOWN", {"NOT_RESPONDING"}, "Not responding"),
        ("DOWN", set(), "Node unexpectedly rebooted"),
        ("IDLE", {NodeFlag.DRAIN}, "Kill task failed"),  # 22.05
        ("MIXED", {NodeFlag.DRAIN}, "Kill task failed (JobId=77 StepId=0)"),  # 25.11
        ("IDLE", {NodeFlag.DRAIN}, "Epilog error"),
        ("IDLE", {NodeFlag.DRAIN}, "batch job complete failure"),
        ("DOWN", set(), ""),
    ],
)
def test_a_job_end_takes_over_a_node_slurm_took_out_for_a_fault_of_its_own(
    state: str, flags: set[str], reason: str
) -> None:
    node = node_info("node2", state=state, flags=frozenset(flags), reason=reason)
    door = _door(node)
    applied = _carry_out(door, ("node2",))
    assert applied.drained == ("node2",)
    assert door.node("node2").reason == REASON


@pytest.mark.parametrize(
    ("reason", "slurms"),
    [
        ("Not responding", True),
        ("Kill task failed (JobId=12 StepId=batch)", True),
        ("Kill task failed by admin", False),
        ("Low RealMemory (reported:1 < 100.00% of configured:2)", False),
        ("reboot timed out", False),
        ("PSU swap ticket 42", False),
        ("triage: gpu.lost GPU 3 lost", False),
    ],
)
def test_only_slurms_own_fault_reasons_are_taken_over(reason: str, slurms: bool) -> None:
    assert is_slurm_fault(reason) is slurms
    down = node_info("node2", state="DOWN", reason=reason)
    assert may_replace_drain(down) is slurms
    assert may_replace_drain(replace(down, state="IDLE"))  # in service: any drain goes


def _report(*results: object) -> RunReport:
    return RunReport("node2", "cron", time.time(), 0.1, results)  # type: ignore[arg-type]


FAILING = _report(fail("gpu.lost", "GPU 3 lost", Severity.HIGH, Action.DRAIN_NOW))
PASSING = _report(ok("gpu.lost"))


@pytest.mark.parametrize("node", [ADMIN_DOWN, replace(ADMIN_FAIL, name="node2")])
def test_a_health_run_neither_drains_nor_resumes_an_admins_down_or_fail_node(
    node: NodeInfo,
) -> None:
    cluster = [*node_infos(100, "n"), node]
    now = time.time()
    drained = decide_node(FAILING, node, cluster, HealthConfig(), may_resume=True, now=now)
    assert (drained.outcome, drained.reason) == (NodeOutcome.ADMIN_DRAINED, node.reason)
    passed = decide_node(PASSING, node, cluster, HealthConfig(), may_resume=True, now=now)
    assert passed.outcome is NodeOutcome.ADMIN_DRAINED


def test_a_health_run_drains_a_node_that_stopped_answering() -> None:
    node = node_info("node2", state="DOWN", flags=frozenset({"NOT_RESPONDING"}))
    node = replace(node, reason="Not responding")
    cluster = [*node_infos(100, "n"), node]
    got = decide_node(FAILING, node, cluster, HealthConfig(), may_resume=True, now=time.time())
    assert (got.outcome, got.reason) == (NodeOutcome.DRAIN, "triage: gpu.lost GPU 3 lost")


def test_an_admins_down_node_stays_the_admins_in_the_lifecycle() -> None:
    """After the job end skipped it, reconcile sees the admin's node and touches nothing."""
    door = _door(ADMIN_DOWN)
    _carry_out(door, ("node2",))
    given = LifecycleInput(
        door.node("node2"), None, (), BurnIn.NOT_READ, None, Repair.UNKNOWN, time.time()
    )
    got = decide_lifecycle(given, RepairConfig(enabled=True), in_repair=0, cluster_size=100)
    assert (got.state, got.action) == (NodeLifecycle.ADMIN, LifecycleAction.NONE)
