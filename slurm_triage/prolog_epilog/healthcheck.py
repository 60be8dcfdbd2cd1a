"""HealthCheckProgram= (or cron, a systemd timer, `slurm-triage check --all`) on every node
(root): the full health screen. Every check runs; a failure drains the node, and a node we
drained is resumed once everything passes (node_action). Its status is only logged by
slurmd: the drain is our own call, so it always exits 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_triage.config import Config
from slurm_triage.health_checks.reports import log_report, save_report
from slurm_triage.health_checks.result import RunReport
from slurm_triage.health_checks.runner import run_checks
from slurm_triage.observe import hooks as observe

# The Prolog imports this module for `record` on every job start; acting on the node (the
# door, the policies) is imported only by the runs that act.
if TYPE_CHECKING:
    from slurm_triage.policies.nodes import NodeDecision


@dataclass(frozen=True)
class HealthRun:
    """A periodic run's report, and what it did to the node."""

    report: RunReport
    decision: NodeDecision


def record(config: Config, report: RunReport) -> None:
    """Keep the last report per node, and count it in the node's metrics when configured."""
    save_report(config, report)
    observe.after_health_report(config, report)


def periodic(
    config: Config, *, only: list[str] | None = None, dry_run: bool = False, node: str | None = None
) -> HealthRun:
    """The full screen (cron, HealthCheckProgram, `slurm-triage check --all`)."""
    from slurm_triage.prolog_epilog.node_action import act

    report = run_checks(config, mode="cron", only=only, everything=True, node=node)
    log_report(report)
    record(config, report)
    decision = act(config, report, may_resume=not only, dry_run=dry_run)
    return HealthRun(report, decision)
