"""What a health run does to the node in Slurm: drain on failure, resume what we drained.

`decide()` is pure: the report, the node's current state and the cluster's nodes in, one
NodeDecision out. `carry_out()` is the actuator (through the Slurm door, dry-run capable).
Rules (mej/nhc's): drain reasons carry our prefix; we only resume nodes whose reason has
our prefix, never a node an admin drained; a full run must pass for a resume. The circuit
breaker: when a check already drained more than `breaker_max_share` of the cluster (and at
least `breaker_min_nodes`) within `breaker_window_s`, the check itself or the fabric is the
likelier fault, so we stop draining for it and say so.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from slurm_triage.config import HealthConfig
from slurm_triage.health_checks.result import CheckResult, Severity
from slurm_triage.health_checks.runner import RunReport
from slurm_triage.logs import get_logger
from slurm_triage.slurm import NodeInfo, SlurmDoor, SlurmError

DRAIN_PREFIX = "triage: "


class Outcome(enum.StrEnum):
    NONE = "none"
    DRAIN = "drain"
    ALREADY_DRAINED = "already_drained"
    ADMIN_DRAINED = "admin_drained"  # drained by someone else: left as it is
    RESUME = "resume"
    BREAKER_OPEN = "breaker_open"
    SLURM_ERROR = "slurm_error"


@dataclass(frozen=True)
class NodeDecision:
    outcome: Outcome
    node: str
    reason: str = ""
    check: str | None = None
    detail: str = ""
    applied: bool = False


def ours(reason: str) -> bool:
    return reason.startswith(DRAIN_PREFIX)


def drain_reason(result: CheckResult) -> str:
    return f"{DRAIN_PREFIX}{result.check} {result.reason}"


def _worst(failures: Sequence[CheckResult]) -> CheckResult:
    high = [r for r in failures if r.severity is Severity.HIGH]
    return (high or list(failures))[0]


def decide(
    report: RunReport,
    node: NodeInfo,
    cluster: Sequence[NodeInfo],
    config: HealthConfig,
    *,
    may_resume: bool,
    now: float | None = None,
) -> NodeDecision:
    """The one thing to do to this node after a run (pure)."""
    now = time.time() if now is None else now
    failures = [r for r in report.results if r.wants_drain]
    if failures:
        worst = _worst(failures)
        reason = drain_reason(worst)
        if node.drained:
            outcome = Outcome.ALREADY_DRAINED if ours(node.reason) else Outcome.ADMIN_DRAINED
            return NodeDecision(outcome, node.name, node.reason, worst.check)
        tripped = _breaker(worst.check, node.name, cluster, config, now)
        if tripped:
            return NodeDecision(Outcome.BREAKER_OPEN, node.name, reason, worst.check, tripped)
        return NodeDecision(Outcome.DRAIN, node.name, reason, worst.check)
    if node.drained and ours(node.reason) and may_resume and report.all_passed:
        return NodeDecision(Outcome.RESUME, node.name, node.reason)
    if node.drained and not ours(node.reason):
        return NodeDecision(Outcome.ADMIN_DRAINED, node.name, node.reason)
    return NodeDecision(Outcome.NONE, node.name)


FAILING_MARK = "triage-failing"


def failing_mark(check: str, now: float) -> str:
    """What a node writes in its Slurm node Comment before draining for `check`."""
    return f"{FAILING_MARK} {check} {int(now)}"


def _marked_failing(node: NodeInfo, check: str, now: float, window_s: float) -> bool:
    words = node.comment.split()
    if len(words) != 3 or words[0] != FAILING_MARK or words[1] != check:
        return False
    return words[2].isdigit() and now - int(words[2]) <= window_s


def _breaker(
    check: str, node: str, cluster: Sequence[NodeInfo], config: HealthConfig, now: float
) -> str:
    """A reason when draining for `check` would exceed the breaker's limit, else ''.

    Counts the other nodes drained for the same check within the window, and those that
    marked the same failure in their node Comment (failing now, not yet drained)."""
    tag = f"{DRAIN_PREFIX}{check} "
    window = config.breaker_window_s
    same = [
        n.name
        for n in cluster
        if n.name != node
        and (
            (
                n.drained
                and n.reason.startswith(tag)
                and (n.reason_time is None or now - n.reason_time <= window)
            )
            or _marked_failing(n, check, now, window)
        )
    ]
    limit = max(config.breaker_min_nodes, config.breaker_max_share * len(cluster))
    if len(same) + 1 > limit:
        return (
            f"{check} failing on {len(same) + 1} of {len(cluster)} nodes within "
            f"{window:g}s (limit {limit:g}): suspected check or fabric fault, not draining"
        )
    return ""


def carry_out(decision: NodeDecision, door: SlurmDoor, *, dry_run: bool) -> NodeDecision:
    """Drain or resume through the door; log every outcome with its reason."""
    log = get_logger(node=decision.node)
    if decision.outcome is Outcome.BREAKER_OPEN:
        log.error("health_breaker_open", check=decision.check, detail=decision.detail)
        return decision
    if decision.outcome not in (Outcome.DRAIN, Outcome.RESUME) or dry_run:
        if decision.outcome is not Outcome.NONE:
            log.info(
                "health_node_decision",
                outcome=decision.outcome.value,
                reason=decision.reason,
                dry_run=dry_run,
            )
        return decision
    try:
        if decision.outcome is Outcome.DRAIN:
            door.drain(decision.node, decision.reason)
        else:
            door.resume(decision.node)
    except SlurmError as exc:
        log.error("health_slurm_failed", outcome=decision.outcome.value, error=str(exc))
        return replace(decision, outcome=Outcome.SLURM_ERROR, detail=str(exc))
    log.warning(
        "health_node_" + decision.outcome.value, reason=decision.reason, check=decision.check
    )
    return replace(decision, applied=True)


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
