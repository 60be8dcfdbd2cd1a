"""A health run's NodeDecision carried out through the Slurm door (dry-run capable), and
the circuit breaker's failing marks in the node Comment (policies.breaker). An admin's text
in the Comment is never erased: the mark goes after it, and its clear leaves it.

A dry run changes nothing in Slurm and says so in the decision it returns (`dry_run`), so
what it would have drained is recorded like what it would have excluded.
"""

from __future__ import annotations

import enum
from dataclasses import replace

from slurm_triage.logs import get_logger
from slurm_triage.policies.breaker import failing_mark, split_failing_mark
from slurm_triage.policies.nodes import NodeDecision, NodeOutcome
from slurm_triage.slurm.arguments import MAX_REASON_CHARS
from slurm_triage.slurm.door import SlurmDoor
from slurm_triage.slurm.errors import SlurmError


def carry_out_node(decision: NodeDecision, door: SlurmDoor, *, dry_run: bool) -> NodeDecision:
    """Drain or resume through the door; log every outcome with its reason. Slurm's refusal
    is the SLURM_ERROR outcome, with Slurm's one line as the detail."""
    log = get_logger(node=decision.node)
    if decision.outcome is NodeOutcome.BREAKER_OPEN:
        log.error("health_breaker_open", check=decision.check, detail=decision.detail)
        return decision
    if decision.outcome not in (NodeOutcome.DRAIN, NodeOutcome.RESUME) or dry_run:
        if decision.outcome is not NodeOutcome.NONE:
            log.info(
                "health_node_decision",
                outcome=decision.outcome.value,
                reason=decision.reason,
                dry_run=dry_run,
            )
        wanted = decision.outcome in (NodeOutcome.DRAIN, NodeOutcome.RESUME)
        return replace(decision, dry_run=True) if dry_run and wanted else decision
    try:
        if decision.outcome is NodeOutcome.DRAIN:
            door.drain(decision.node, decision.reason)
        else:
            door.resume(decision.node)
    except SlurmError as exc:
        log.error("health_slurm_failed", outcome=decision.outcome.value, error=str(exc))
        return replace(decision, outcome=NodeOutcome.SLURM_ERROR, detail=str(exc))
    log.warning(
        "health_node_" + decision.outcome.value, reason=decision.reason, check=decision.check
    )
    return replace(decision, applied=True)


class MarkOutcome(enum.StrEnum):
    MARKED = "marked"  # the Comment held nothing else: it is the mark
    APPENDED = "appended"  # after someone else's text, which stays
    SKIPPED = "skipped"  # someone else's text leaves no room for it: not marked, text kept


def mark_failing(door: SlurmDoor, node: str, check: str, now: float) -> MarkOutcome:
    """Say in the node's Comment that it is failing `check` (the breaker counts it), after
    any text of someone else's there (read now: an admin's note, an inventory tag), which is
    kept. A text so long that the doors' cut (MAX_REASON_CHARS) would take the mark off is
    left alone and the node goes unmarked: SKIPPED, logged."""
    others, _ = split_failing_mark(door.node(node).comment)
    mark = failing_mark(check, now)
    text = f"{others} {mark}" if others else mark
    if len(text) > MAX_REASON_CHARS:
        get_logger(node=node).warning("health_failing_mark_skipped", check=check, chars=len(others))
        return MarkOutcome.SKIPPED
    door.set_node_comment(node, text)
    return MarkOutcome.APPENDED if others else MarkOutcome.MARKED


def clear_failing_mark(door: SlurmDoor, node: str) -> None:
    """The node passes again: its failing mark no longer counts toward the breaker. Only
    the mark goes; someone else's text before it stays (nothing is written without one)."""
    comment = door.node(node).comment
    others, mark = split_failing_mark(comment)
    if mark:
        door.set_node_comment(node, others)
