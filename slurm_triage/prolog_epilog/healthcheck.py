"""HealthCheckProgram= (or cron, a systemd timer, `slurm-triage check --all`) on every node
(root): the full health screen. Every check runs; a failure drains the node, and a node we
drained is resumed once everything passes (node_action). With `[repair] enabled`, a node
reconcile asked for a GPU reset resets its GPUs first when idle (gpu_repair). Its status is
only logged by slurmd: the drain is our own call, so it always exits 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_triage.config import Config
from slurm_triage.health_checks.reports import log_report, save_report
from slurm_triage.health_checks.result import RunReport
from slurm_triage.health_checks.runner import node_name, run_checks
from slurm_triage.logs import get_logger
from slurm_triage.observe import hooks as observe

# The Prolog imports this module for `record` on every job start; acting on the node (the
# door, the policies) is imported only by the runs that act.
if TYPE_CHECKING:
    from slurm_triage.policies.nodes import NodeDecision
    from slurm_triage.prolog_epilog.gpu_repair import GpuRepair
    from slurm_triage.slurm import SlurmDoor


@dataclass(frozen=True)
class HealthRun:
    """A periodic run's report, what it did to the node, and the GPU reset it did first when
    reconcile asked for one (prolog_epilog.gpu_repair; None when not asked)."""

    report: RunReport
    decision: NodeDecision
    gpu_repair: GpuRepair | None = None


def record(config: Config, report: RunReport) -> None:
    """Keep the last report per node, and count it in the node's metrics when configured."""
    save_report(config, report)
    observe.after_health_report(config, report)


def periodic(
    config: Config,
    *,
    only: list[str] | None = None,
    dry_run: bool = False,
    node: str | None = None,
    door: SlurmDoor | None = None,
) -> HealthRun:
    """The full screen (cron, HealthCheckProgram, `slurm-triage check --all`). With
    `[repair] enabled`, a node reconcile asked for a GPU reset resets them first when idle,
    and the screen that follows decides its reason (prolog_epilog.gpu_repair)."""
    from slurm_triage.prolog_epilog.node_action import act

    name = node_name(node)
    repair = reset_if_asked(config, name, dry_run=dry_run, door=door) if not only else None
    report = run_checks(config, mode="cron", only=only, everything=True, node=name)
    log_report(report)
    record(config, report)
    repair = settle_repair(config, repair, report, dry_run=dry_run, door=door)
    decision = act(config, report, may_resume=not only, dry_run=dry_run, door=door)
    return HealthRun(report, decision, repair)


def settle_repair(
    config: Config,
    repair: GpuRepair | None,
    report: RunReport,
    *,
    dry_run: bool,
    door: SlurmDoor | None = None,
) -> GpuRepair | None:
    """After the screen that follows a GPU reset: the node's new reason (gpu_repair)."""
    if repair is None:
        return None
    from slurm_triage.prolog_epilog.gpu_repair import settle_reason
    from slurm_triage.slurm import open_door

    door = door or open_door(config.slurm)
    return settle_reason(door, repair, report, dry_run=_dry(config, dry_run))


def _dry(config: Config, dry_run: bool) -> bool:
    """As node_action.act: `--dry-run`, `policy.act = false` or `health.drain = false`."""
    return dry_run or not config.policy.act or not config.health.drain


def reset_if_asked(
    config: Config, name: str, *, dry_run: bool, door: SlurmDoor | None = None
) -> GpuRepair | None:
    """With `[repair] enabled`: reset the GPUs reconcile asked this node to reset, when it
    runs no job (gpu_repair); None when it asked nothing (or Slurm did not answer)."""
    if not config.repair.enabled:
        return None
    from slurm_triage.prolog_epilog.gpu_repair import asked_reset, reset_asked_gpus
    from slurm_triage.slurm import SlurmError, open_door

    try:
        info = (door or open_door(config.slurm)).node(name)
    except SlurmError as exc:  # act() meets it again and says so in its decision
        get_logger(node=name).error("gpu_repair_slurm_unreachable", error=str(exc))
        return None
    words = asked_reset(info)
    if words is None:
        return None
    return reset_asked_gpus(config, info, words, dry_run=_dry(config, dry_run))
