"""The controller's metrics: a pure function of what the journal recorded.

Every family here is computed from the journal's decided rows, node events and
notification outcomes (`read_facts`), so the metrics say exactly what `slurm-triage
history` says, survive restarts, and agree between the textfile the decision writes and
`slurm-triage metrics`. No job id, user or node is a label: only taxonomy ids (bounded by
shared/TAXONOMY.md), verdicts, budgets and notification kinds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_triage.config import Config
from slurm_triage.journal import Journal
from slurm_triage.journal.records import DecisionTotal
from slurm_triage.observe.exposition import Family, Histogram, Kind, Spec
from slurm_triage.policies.lemons import FRESH_START, node_signals, since_return
from slurm_triage.policies.lifecycle import NodeLifecycle

# Seconds from a job's end to our requeue of it: sub-second when all is well (README's
# bench: 0.7 s), tens of seconds when the decision waited for a slow node's evidence.
REQUEUE_LATENCY_BOUNDS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)

DECISIONS = Spec(
    "slurm_triage_decisions",
    Kind.COUNTER,
    "Job ends decided, by attributed cause, its domain and the verdict "
    "(record_only, requeue, hold)",
    ("cause", "domain", "action"),
)
LOST_GPU_SECONDS = Spec(
    "slurm_triage_lost_gpu_seconds",
    Kind.COUNTER,
    "GPU-seconds of the runs that ended other than completed (run time x GPUs), by cause",
    ("cause", "domain"),
)
REQUEUE_LATENCY = Spec(
    "slurm_triage_requeue_latency_seconds",
    Kind.HISTOGRAM,
    "Time from a job's end (the decision's start) to the job pending again by our requeue",
    unit="seconds",
)
DECISION_DRAINS = Spec(
    "slurm_triage_decision_drains",
    Kind.COUNTER,
    "Nodes drained by decisions (root-backed blame or lemon), by the job end's cause",
    ("cause",),
)
BUDGETS_EXHAUSTED = Spec(
    "slurm_triage_requeue_budget_exhausted",
    Kind.COUNTER,
    "Jobs held because a requeue budget was spent: total, node_failure, preemption, unknown",
    ("budget",),
)
LEMONS = Spec(
    "slurm_triage_lemon_nodes",
    Kind.GAUGE,
    "Nodes whose recent history (policy.lemon_*) makes them lemons",
)
LIFECYCLE = Spec(
    "slurm_triage_nodes_by_lifecycle_state",
    Kind.GAUGE,
    "Nodes by the lifecycle state nodes reconcile last recorded (healthy, suspect, drained, "
    "repairing, burn_in, rma, admin, unknown); nodes never recorded are not counted",
    ("state",),
)
LAST_DECISION = Spec(
    "slurm_triage_last_decision_timestamp_seconds",
    Kind.GAUGE,
    "When the last decision was recorded (Unix time)",
    unit="seconds",
)
DECISION_NOTIFICATIONS = Spec(
    "slurm_triage_decision_notifications",
    Kind.COUNTER,
    "Webhook notifications sent by decisions, by kind and delivery outcome",
    ("kind", "outcome"),
)
CONTROLLER_SPECS: tuple[Spec, ...] = (
    DECISIONS,
    LOST_GPU_SECONDS,
    REQUEUE_LATENCY,
    DECISION_DRAINS,
    BUDGETS_EXHAUSTED,
    LEMONS,
    LIFECYCLE,
    LAST_DECISION,
    DECISION_NOTIFICATIONS,
)


@dataclass(frozen=True)
class ControllerFacts:
    """What the journal holds, aggregated (`read_facts`)."""

    totals: Sequence[DecisionTotal] = ()
    requeue_latencies_s: Sequence[float] = ()
    budget_holds: Mapping[str, int] = field(default_factory=dict)
    drains: Mapping[str, int] = field(default_factory=dict)
    notifications: Mapping[tuple[str, str], int] = field(default_factory=dict)
    lemon_nodes: int = 0
    # Nodes by their latest recorded lifecycle state (the journal's lifecycle table).
    lifecycle: Mapping[str, int] = field(default_factory=dict)


def read_facts(journal: Journal, config: Config, now: float | None = None) -> ControllerFacts:
    """Aggregate the journal (the I/O half)."""
    now = time.time() if now is None else now
    since = now - config.policy.lemon_window_days * 86400
    returned = journal.last_applied(FRESH_START, since)
    lemons = node_signals(since_return(journal.node_events(since), returned), config.policy)
    return ControllerFacts(
        totals=journal.decision_totals(),
        requeue_latencies_s=journal.requeue_latencies(),
        budget_holds=journal.budget_holds(),
        drains=journal.drain_totals(),
        notifications=journal.notification_totals(),
        lemon_nodes=sum(1 for s in lemons.values() if s.lemon),
        lifecycle=_lifecycle_counts(journal),
    )


def _lifecycle_counts(journal: Journal) -> dict[str, int]:
    """Every state of the closed enum (0 when none), so a label's series never vanishes;
    a state this version does not know counts as unknown (bounded labels)."""
    known = {s.value for s in NodeLifecycle}
    counts = dict.fromkeys(sorted(known), 0)
    for step in journal.latest_lifecycle().values():
        state = step.state if step.state in known else NodeLifecycle.UNKNOWN.value
        counts[state] += 1
    return counts


def controller_families(facts: ControllerFacts) -> list[Family]:
    """The controller's families from the journal's facts (pure)."""
    decisions: dict[tuple[str, ...], int] = {}
    lost: dict[tuple[str, ...], float] = {}
    for t in facts.totals:
        key = (t.cause or "unknown", t.domain or "unknown", t.action or "unknown")
        decisions[key] = decisions.get(key, 0) + t.decisions
        if t.cause != "completed":
            lost_key = key[:2]
            lost[lost_key] = lost.get(lost_key, 0.0) + t.run_gpu_seconds
    stamps = [t.last_decided_at for t in facts.totals if t.last_decided_at is not None]
    return [
        Family(DECISIONS, decisions),
        Family(LOST_GPU_SECONDS, lost),
        Family(
            REQUEUE_LATENCY,
            {(): Histogram.of(facts.requeue_latencies_s, REQUEUE_LATENCY_BOUNDS_S)},
        ),
        Family(DECISION_DRAINS, {(c or "unknown",): n for c, n in facts.drains.items()}),
        Family(BUDGETS_EXHAUSTED, {(b,): n for b, n in facts.budget_holds.items()}),
        Family(LEMONS, {(): facts.lemon_nodes}),
        Family(LIFECYCLE, {(state,): n for state, n in facts.lifecycle.items()}),
        Family(LAST_DECISION, {(): max(stamps)} if stamps else {}),
        Family(DECISION_NOTIFICATIONS, {k: n for k, n in facts.notifications.items()}),
    ]
