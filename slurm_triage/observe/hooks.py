"""The calls the programs make to be observed: metrics and notifications.

One call at each place where something worth counting or telling happened, so the
decision and health code stay as they are:
- the decision: `journal_columns()` adds what the metrics need to the journal row, and
  `after_decision()` notifies drains and holds, then rewrites the controller's textfile;
- health runs (Prolog, periodic, `check`): `after_health_report()` and
  `after_health_action()` (drains, resumes, breaker trips, RMA candidates);
- the Epilog: `after_epilog()`.
None of them raises: metrics and notifications must never fail a Prolog or a decision. A
slow webhook costs at most `notify.max_wait_s`; the textfile lock at most a second.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from slurm_triage.config import Config
from slurm_triage.logs import get_logger

# Imports of the observing modules wait until something is to be observed: every Prolog
# imports this module, and most sites leave metrics or notifications off on some nodes.
if TYPE_CHECKING:
    from slurm_triage.actuator import Applied
    from slurm_triage.health_checks.result import RunReport
    from slurm_triage.journal import Journal
    from slurm_triage.observe import notify
    from slurm_triage.policies import Decision
    from slurm_triage.policies.nodes import NodeDecision
    from slurm_triage.taxonomy import Cause

F = TypeVar("F", bound=Callable[..., Any])


def _never_raises(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # observing must never fail what it observes
            get_logger().warning(
                "observe_failed", hook=fn.__name__, error=f"{type(exc).__name__}: {exc}"[:300]
            )
            return None

    return wrapper  # type: ignore[return-value]


def _keeps_ledger(config: Config) -> bool:
    """A node keeps its ledger when node metrics are on, or notifications (the breaker's
    messages are rate-limited through it)."""
    return bool(config.metrics.node_textfile or config.notify.webhook_url_file)


def run_start(
    slurm_start: float | None, job_start: float | None, ended_at: float, requeued_by_slurm: bool
) -> float | None:
    """When the run that ended started: Slurm's own SLURM_JOB_START_TIME (EpilogSlurmctld,
    23.02 on; JobEnd.start_time), else the controller's start time unless Slurm already
    requeued the job (it may be the next run's by then). None when neither can be trusted."""
    if slurm_start is not None and 0 < slurm_start <= ended_at:
        return slurm_start
    if job_start is not None and not requeued_by_slurm and 0 < job_start <= ended_at:
        return job_start
    return None


def journal_columns(
    config: Config,
    *,
    ended_at: float,
    run_started_at: float | None,
    nodes: Sequence[str],
    decision: Decision,
    applied: Applied,
) -> dict[str, Any]:
    """The journal columns the metrics read (migration 2). GPUs are the allocation's nodes
    times `health.expected_gpus`: the controller does not see a job's GPU count."""
    return {
        "ended_at": ended_at,
        "run_started_at": run_started_at,
        "gpus": len(nodes) * config.health.expected_gpus,
        "requeued_at": applied.requeued_at,
        "budget_spent": decision.budget_spent or None,
    }


def decision_notices(
    job_id: int, cause: str, reason: str, decision: Decision, applied: Applied, now: float
) -> list[notify.Notice]:
    """What a person should hear about this decision: each node it drained, a held job."""
    from slurm_triage.observe import notify

    if applied.dry_run:
        return []
    host = notify.this_host()
    notices = [
        notify.Notice(
            notify.NoticeKind.DRAIN,
            f"{node} drained: {cause} (job {job_id}): {reason}",
            now,
            node=node,
            job_id=job_id,
            cause=cause,
            reason=reason,
            host=host,
        )
        for node in applied.drained
    ]
    if applied.held:
        why = next((r for r in reversed(decision.reasons) if "held" in r), "held")
        notices.append(
            notify.Notice(
                notify.NoticeKind.HOLD,
                f"job {job_id} held after {cause}: {why}",
                now,
                job_id=job_id,
                cause=cause,
                reason="; ".join(decision.reasons),
                host=host,
            )
        )
    return notices


@_never_raises
def after_decision(
    config: Config,
    journal: Journal,
    *,
    job_id: int,
    cause: str,
    reason: str,
    decision: Decision,
    applied: Applied,
) -> None:
    """After the decision is journalled: notify, journal the outcomes, rewrite the textfile."""
    if not (config.notify.webhook_url_file or config.metrics.controller_textfile):
        return
    from slurm_triage.observe import notify

    notices = decision_notices(job_id, cause, reason, decision, applied, time.time())
    outcomes = notify.send(config.notify, notices)
    if outcomes:
        journal.add_notifications(
            [(o.notice.at, o.notice.kind.value, o.delivery.value) for o in outcomes]
        )
    if config.metrics.controller_textfile:
        write_controller_textfile(config, journal)


def write_controller_textfile(config: Config, journal: Journal) -> None:
    from slurm_triage.atomic import write_atomically
    from slurm_triage.observe.controller import controller_families, read_facts
    from slurm_triage.observe.exposition import prometheus_text
    from slurm_triage.observe.textfile import locked

    path = Path(config.metrics.controller_textfile)
    with locked(path):
        text = prometheus_text(controller_families(read_facts(journal, config)))
        write_atomically(path, text)


@_never_raises
def after_health_report(config: Config, report: RunReport) -> None:
    """A health run's checks: status, duration, time."""
    if not _keeps_ledger(config):
        return
    from slurm_triage.observe import node_metrics

    results = {r.check: (r.status.value, r.seconds) for r in report.results}
    with node_metrics.open_ledger(config, report.node) as ledger:
        node_metrics.record_report(ledger, report.mode, report.started, results)


@_never_raises
def after_health_action(
    config: Config, report: RunReport, decision: NodeDecision, *, dry_run: bool
) -> None:
    """What a health run did to the node; a dry run did nothing and counts nothing."""
    if dry_run or not _keeps_ledger(config):
        return
    from slurm_triage.observe import node_metrics, notify

    notices = node_metrics.health_notices(report, decision, time.time())
    with node_metrics.open_ledger(config, report.node) as ledger:
        node_metrics.record_action(ledger, report, decision)
        window_s = config.health.breaker_window_s
        notices = node_metrics.not_yet_notified(ledger, notices, window_s)
    outcomes = notify.send(config.notify, notices)
    if outcomes:
        with node_metrics.open_ledger(config, report.node) as ledger:
            node_metrics.record_notifications(ledger, outcomes)


@_never_raises
def after_epilog(config: Config, node: str, fault: Cause | None) -> None:
    """An Epilog ran; `fault` is the cause for which it asked Slurm to drain the node."""
    if not _keeps_ledger(config):
        return
    from slurm_triage.observe import node_metrics

    with node_metrics.open_ledger(config, node) as ledger:
        node_metrics.record_epilog(ledger, time.time(), fault.value if fault else None)
