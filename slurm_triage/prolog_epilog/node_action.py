"""A health run's node action (Prolog, HealthCheckProgram, `slurm-triage check`): read the
node and the cluster from Slurm, decide (policies.nodes, with the circuit breaker), mark and
settle before a drain, carry out (the actuator), and count it in the node's metrics.
"""

from __future__ import annotations

import time

from slurm_triage.actuator import carry_out_node, clear_failing_mark, mark_failing
from slurm_triage.config import Config
from slurm_triage.health_checks.result import RunReport
from slurm_triage.logs import get_logger
from slurm_triage.observe import hooks as observe
from slurm_triage.policies.breaker import has_failing_mark
from slurm_triage.policies.nodes import NodeDecision, NodeOutcome, decide_node
from slurm_triage.slurm import SlurmDoor, SlurmError, open_door


def act(
    config: Config,
    report: RunReport,
    *,
    may_resume: bool,
    dry_run: bool,
    door: SlurmDoor | None = None,
) -> NodeDecision:
    """Decide and carry out drain/resume for this node; Slurm trouble is an outcome.

    Before a drain the node marks its failure in its Slurm node Comment and waits
    `breaker_settle_s`, so nodes failing the same check together see each other and the
    circuit breaker can hold all of them back, not only the ones after the first few. A dry
    run (`--dry-run`, `policy.act = false`, or the deprecated `health.drain = false`)
    decides, marks nothing and changes nothing."""
    log = get_logger(node=report.node)
    dry = dry_run or not config.policy.act or not config.health.drain
    try:
        door = door or open_door(config.slurm)
        cluster = door.nodes() if report.failures else ()
        node = next((n for n in cluster if n.name == report.node), None) or door.node(report.node)
        decision = decide_node(
            report, node, cluster, config.health, may_resume=may_resume, now=time.time()
        )
        if decision.outcome is NodeOutcome.BREAKER_OPEN and not dry and decision.check:
            # Failing too: say so, so the nodes still settling count this one as well.
            mark_failing(door, report.node, decision.check, time.time())
        elif decision.outcome is NodeOutcome.DRAIN and not dry and decision.check:
            decision = _settle_then_decide(config, report, door, decision.check, may_resume)
        elif not report.failures and has_failing_mark(node.comment) and not dry:
            clear_failing_mark(door, report.node)
    except SlurmError as exc:
        log.error("health_slurm_unreachable", error=str(exc))
        return NodeDecision(NodeOutcome.SLURM_ERROR, report.node, detail=str(exc))
    done = carry_out_node(decision, door, dry_run=dry)
    observe.after_health_action(config, report, done, dry_run=dry_run)  # metrics, webhook
    return done


def _settle_then_decide(
    config: Config, report: RunReport, door: SlurmDoor, check: str, may_resume: bool
) -> NodeDecision:
    mark_failing(door, report.node, check, time.time())
    time.sleep(config.health.breaker_settle_s)
    cluster = door.nodes()
    node = next(n for n in cluster if n.name == report.node)
    return decide_node(report, node, cluster, config.health, may_resume=may_resume, now=time.time())
