"""What a node's programs record in its ledger and tell a person, and the node's textfile.

The updates are pure changes to a `NodeLedger`; `open_ledger()` is the I/O around them:
lock, read, let the caller change it, write it back and rewrite the node's textfile from
it. A ledger is kept when node metrics or notifications are on (the breaker's messages
are rate-limited through it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_triage.atomic import write_atomically
from slurm_triage.config import Config
from slurm_triage.observe import notify
from slurm_triage.observe.exposition import prometheus_text
from slurm_triage.observe.node_ledger import (
    BREAKER_TRIPS,
    CHECK_DURATION,
    CHECK_LAST_RUN,
    EPILOG_FAULTS,
    HEALTH_DRAINS,
    HEALTH_RESUMES,
    LAST_RUN,
    NOTIFICATIONS,
    RUNS,
    NodeLedger,
    ledger_path,
    node_families,
    read_ledger,
)
from slurm_triage.observe.textfile import locked

if TYPE_CHECKING:
    from slurm_triage.health_checks.result import RunReport
    from slurm_triage.policies.nodes import NodeDecision


def node_textfile(config: Config, node: str) -> Path:
    return Path(config.metrics.node_textfile.replace("{node}", node))


@contextmanager
def open_ledger(config: Config, node: str) -> Iterator[NodeLedger]:
    """The node's ledger, locked; written back (and the textfile rewritten) on success."""
    path = ledger_path(config.paths.state_dir, node)
    with locked(path):
        ledger = read_ledger(path, node)
        yield ledger
        write_atomically(path, ledger.to_json(), mode=0o600)
        if config.metrics.node_textfile:
            text = prometheus_text(node_families([ledger]))
            write_atomically(node_textfile(config, node), text)


def record_report(
    ledger: NodeLedger, mode: str, started: float, results: Mapping[str, tuple[str, float]]
) -> None:
    """A health run: its mode, and each check's status, duration and time."""
    ledger.add(RUNS, (mode,))
    ledger.set(LAST_RUN, (mode,), started)
    for check, (status, seconds) in results.items():
        ledger.check_status[check] = status.lower()
        ledger.set(CHECK_DURATION, (check,), seconds)
        ledger.set(CHECK_LAST_RUN, (check,), started)


def _asked_action(report: RunReport, check: str | None) -> str:
    """The action the failing check asked for (drain, drain_now, reset_gpu, reboot, rma)."""
    found = next((r for r in report.results if r.check == check and r.failed), None)
    return found.action.value if found else "unknown"


def record_action(ledger: NodeLedger, report: RunReport, decision: NodeDecision) -> None:
    """Drains and resumes that were applied; breaker trips (nothing applied, by design)."""
    outcome = decision.outcome.value
    check = decision.check or "unknown"
    if outcome == "drain" and decision.applied:
        ledger.add(HEALTH_DRAINS, (check, _asked_action(report, decision.check)))
    elif outcome == "resume" and decision.applied:
        ledger.add(HEALTH_RESUMES, ())
    elif outcome == "breaker_open":
        ledger.add(BREAKER_TRIPS, (check,))


def health_notices(report: RunReport, decision: NodeDecision, now: float) -> list[notify.Notice]:
    """A drain (an RMA candidate when the failing check asked for one), a breaker trip."""
    outcome, node = decision.outcome.value, decision.node
    check = decision.check or ""
    if outcome == "drain" and decision.applied:
        rma = _asked_action(report, decision.check) == "rma"
        kind = notify.NoticeKind.RMA if rma else notify.NoticeKind.DRAIN
        what = "drained, RMA candidate" if rma else "drained"
        text = f"{node} {what} by health check {check}: {decision.reason}"
    elif outcome == "breaker_open":
        kind = notify.NoticeKind.BREAKER_TRIP
        text = f"circuit breaker held back the drain of {node} for {check}: {decision.detail}"
    else:
        return []
    return [
        notify.Notice(
            kind,
            text,
            now,
            node=node,
            check=check,
            reason=decision.reason,
            host=notify.this_host(),
        )
    ]


def not_yet_notified(
    ledger: NodeLedger, notices: Sequence[notify.Notice], window_s: float
) -> list[notify.Notice]:
    """Breaker trips repeat at every run while the breaker is open: one message per check
    per breaker window is enough. Marks the ones let through."""
    kept = []
    for n in notices:
        if n.kind is notify.NoticeKind.BREAKER_TRIP:
            last = ledger.breaker_notified_at.get(n.check)
            if last is not None and n.at - last < window_s:
                continue
            ledger.breaker_notified_at[n.check] = n.at
        kept.append(n)
    return kept


def record_notifications(ledger: NodeLedger, outcomes: Sequence[notify.Outcome]) -> None:
    for o in outcomes:
        ledger.add(NOTIFICATIONS, (o.notice.kind.value, o.delivery.value))


def record_epilog(ledger: NodeLedger, now: float, fault_cause: str | None) -> None:
    ledger.add(RUNS, ("epilog",))
    ledger.set(LAST_RUN, ("epilog",), now)
    if fault_cause:
        ledger.add(EPILOG_FAULTS, (fault_cause,))
