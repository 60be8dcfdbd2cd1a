"""A health run's node action (Prolog, HealthCheckProgram, `slurm-triage check`): read the
node and the cluster from Slurm, decide (policies.nodes, with the circuit breaker), mark and
settle before a drain, carry out (the actuator), and count it in the node's metrics.

Time comes from an injected Clock (the breaker's window, the failing mark's stamp, the
settling wait), as in the decision, so tests set each one without patching `time`.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_triage.actuator import carry_out_node, clear_failing_mark, mark_failing
from slurm_triage.clock import SYSTEM_CLOCK, Clock
from slurm_triage.config import Config
from slurm_triage.health_checks.result import RunReport
from slurm_triage.logs import get_logger
from slurm_triage.observe import hooks as observe
from slurm_triage.policies.breaker import has_failing_mark
from slurm_triage.policies.nodes import NodeDecision, NodeOutcome, decide_node
from slurm_triage.slurm import SlurmDoor, SlurmError, open_door
from slurm_triage.slurm.model import NodeInfo


def act(
    config: Config,
    report: RunReport,
    *,
    may_resume: bool,
    dry_run: bool,
    door: SlurmDoor | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> NodeDecision:
    """Decide and carry out drain/resume for this node; Slurm trouble is an outcome.

    Before a drain the node marks its failure in its Slurm node Comment and waits
    `breaker_settle_s`, so nodes failing the same check together see each other and the
    circuit breaker can hold all of them back, not only the ones after the first few. A dry
    run (`--dry-run`, `policy.act = false`, or the deprecated `health.drain = false`)
    decides, marks nothing and changes nothing. With `[repair] enabled` a passing run
    resumes nothing (reconcile returns nodes through burn-in); lemons, RMA nodes and nodes
    in repair are never resumed here (policies.nodes.why_kept_out)."""
    log = get_logger(node=report.node)
    dry = dry_run or not config.policy.act or not config.health.drain
    try:
        door = door or open_door(config.slurm)
        cluster = door.nodes() if report.failures else ()
        node = next((n for n in cluster if n.name == report.node), None) or door.node(report.node)
        decision = _decide(config, report, node, cluster, may_resume, clock)
        if decision.outcome is NodeOutcome.BREAKER_OPEN and not dry and decision.check:
            # Failing too: say so, so the nodes still settling count this one as well.
            mark_failing(door, report.node, decision.check, clock.time())
        elif decision.outcome is NodeOutcome.DRAIN and not dry and decision.check:
            decision = _settle_then_decide(config, report, door, decision.check, may_resume, clock)
        elif not report.failures and has_failing_mark(node.comment) and not dry:
            clear_failing_mark(door, report.node)
    except SlurmError as exc:
        log.error("health_slurm_unreachable", error=str(exc))
        return NodeDecision(NodeOutcome.SLURM_ERROR, report.node, detail=str(exc))
    done = carry_out_node(decision, door, dry_run=dry)
    observe.after_health_action(config, report, done, dry_run=dry_run)  # metrics, webhook
    return done


def _decide(
    config: Config,
    report: RunReport,
    node: NodeInfo,
    cluster: Sequence[NodeInfo],
    may_resume: bool,
    clock: Clock,
) -> NodeDecision:
    return decide_node(
        report,
        node,
        cluster,
        config.health,
        may_resume=may_resume,
        now=clock.time(),
        repair_enabled=config.repair.enabled,
    )


def _settle_then_decide(
    config: Config,
    report: RunReport,
    door: SlurmDoor,
    check: str,
    may_resume: bool,
    clock: Clock,
) -> NodeDecision:
    mark_failing(door, report.node, check, clock.time())
    clock.sleep(config.health.breaker_settle_s)
    cluster = door.nodes()
    node = next(n for n in cluster if n.name == report.node)
    return _decide(config, report, node, cluster, may_resume, clock)
