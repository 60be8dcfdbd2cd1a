"""What a health run asks for this node in Slurm: drain on failure, resume what we drained.

Pure: the run's report, the node's current state, the cluster's nodes and the time in, one
NodeDecision out; the actuator carries it out. Rules (mej/nhc's): we only resume nodes whose
reason is ours (policies.reasons), never a node an admin drained, set DOWN or FAIL, and
never one whose reboot is pending (a resume cancels it); we drain over no one's reason but
Slurm's own for a node fault; a full run must pass for a resume; the circuit breaker
(policies.breaker) holds back a drain that a cluster-wide failure asks for.

What may come back here is read from the reason alone (policies.drain_words): the node has
no journal. A lemon, an RMA node, and a node in repair or burn-in never come back by a
passing health run; with `[repair] enabled` nothing does, since reconcile on the controller
returns every node through burn-in (docs/repair.md).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_triage.config import HealthConfig
from slurm_triage.health_checks.result import CheckResult, RunReport, Severity
from slurm_triage.policies.breaker import breaker_reason
from slurm_triage.policies.drain_words import read_reason
from slurm_triage.policies.reasons import check_drain_reason, is_ours, may_replace_drain
from slurm_triage.slurm.model import NodeInfo


class NodeOutcome(enum.StrEnum):
    NONE = "none"
    DRAIN = "drain"
    ALREADY_DRAINED = "already_drained"
    ADMIN_DRAINED = "admin_drained"  # drained by someone else: left as it is
    RESUME = "resume"
    KEPT_OUT = "kept_out"  # ours and passing, but not ours to return here (detail says why)
    BREAKER_OPEN = "breaker_open"
    SLURM_ERROR = "slurm_error"


@dataclass(frozen=True)
class NodeDecision:
    """The one thing to do to a node after a health run, and once carried out, whether it
    was applied (`dry_run`: decided, recorded, and on purpose not applied)."""

    outcome: NodeOutcome
    node: str
    reason: str = ""
    check: str | None = None
    detail: str = ""
    applied: bool = False
    dry_run: bool = False


def drain_reason(result: CheckResult) -> str:
    """The drain reason for a failed check: our prefix, the check, its one-line reason."""
    return check_drain_reason(result.check, result.reason)


def why_kept_out(node: NodeInfo, *, repair_enabled: bool) -> str:
    """Why a passing health run must not resume this node drained with our reason, or ''."""
    if node.reboot_pending:
        # State=RESUME clears REBOOT_REQUESTED and REBOOT_ISSUED (node_mgr.c update_node,
        # 22.05 and 25.11): resuming would cancel the reboot, someone's or our own.
        return "reboot pending: a resume would cancel it; the node waits for its reboot"
    words = read_reason(node.reason)
    if words.keeps_node_out:
        return f"{words.kind.value}: only reconcile's burn-in or a person returns it"
    if repair_enabled:
        return "repair.enabled: reconcile returns it after burn-in"
    return ""


def _worst(failures: Sequence[CheckResult]) -> CheckResult:
    high = [r for r in failures if r.severity is Severity.HIGH]
    return (high or list(failures))[0]


def decide_node(
    report: RunReport,
    node: NodeInfo,
    cluster: Sequence[NodeInfo],
    config: HealthConfig,
    *,
    may_resume: bool,
    now: float,
    repair_enabled: bool = False,
) -> NodeDecision:
    """The one thing to do to this node after a run (pure; `now` is the breaker's clock).
    `repair_enabled` is `[repair] enabled`: then reconcile owns every return."""
    failures = [r for r in report.results if r.wants_drain]
    if failures:
        worst = _worst(failures)
        reason = drain_reason(worst)
        if not may_replace_drain(node):  # drained, DOWN or FAIL, by us or by someone else
            outcome = (
                NodeOutcome.ALREADY_DRAINED if is_ours(node.reason) else NodeOutcome.ADMIN_DRAINED
            )
            return NodeDecision(outcome, node.name, node.reason, worst.check)
        tripped = breaker_reason(worst.check, node.name, cluster, config, now)
        if tripped:
            return NodeDecision(NodeOutcome.BREAKER_OPEN, node.name, reason, worst.check, tripped)
        return NodeDecision(NodeOutcome.DRAIN, node.name, reason, worst.check)
    if node.drained and is_ours(node.reason) and may_resume and report.all_passed:
        kept_out = why_kept_out(node, repair_enabled=repair_enabled)
        if kept_out:
            return NodeDecision(NodeOutcome.KEPT_OUT, node.name, node.reason, detail=kept_out)
        return NodeDecision(NodeOutcome.RESUME, node.name, node.reason)
    if node.taken_out and not is_ours(node.reason):
        return NodeDecision(NodeOutcome.ADMIN_DRAINED, node.name, node.reason)
    return NodeDecision(NodeOutcome.NONE, node.name)
