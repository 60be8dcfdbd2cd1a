"""Lemon nodes: nodes that keep taking jobs down (Kokolis et al.: 1.2% of nodes touched 13%
of daily jobs). Pure: per-node journal events in, per-node signals and a verdict out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field

from slurm_triage.config import PolicyConfig
from slurm_triage.frozen import Frozen
from slurm_triage.journal.records import NodeEvent


class NodeSignals(Frozen):
    node: str
    failed_jobs: int = 0  # distinct jobs that failed with this node blamed
    multi_node_failures: int = 0
    single_node_failures: int = 0
    excluded_by_jobs: int = 0
    times_drained: int = 0
    xids: tuple[int, ...] = ()
    reasons: tuple[str, ...] = field(default=())

    @property
    def lemon(self) -> bool:
        return bool(self.reasons)

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "failed_jobs": self.failed_jobs,
            "multi_node_failures": self.multi_node_failures,
            "single_node_failures": self.single_node_failures,
            "excluded_by_jobs": self.excluded_by_jobs,
            "times_drained": self.times_drained,
            "distinct_xids": list(self.xids),
            "lemon": self.lemon,
            "reasons": list(self.reasons),
        }


# The lifecycle steps (policies.lifecycle.LifecycleAction values, which import this module)
# after which a node's lemon history starts again: its burn-in passed, or a person released it.
FRESH_START = frozenset({"return_to_service", "release"})


def since_return(events: Iterable[NodeEvent], returned: Mapping[str, float]) -> list[NodeEvent]:
    """The events after each node last came back (`returned`: node -> when its burn-in
    passed or a person released it, FRESH_START): a node proven healthy
    starts its lemon history again, so failures before its repair do not drain it anew."""
    return [e for e in events if e.at > returned.get(e.node, 0.0)]


def node_signals(events: Iterable[NodeEvent], config: PolicyConfig) -> dict[str, NodeSignals]:
    """Aggregate journal events per node and judge them against the lemon thresholds."""
    blamed: dict[str, dict[int, bool]] = {}
    excluded: dict[str, set[int]] = {}
    drained: dict[str, int] = {}
    xids: dict[str, set[int]] = {}
    for e in events:
        if e.kind == "blamed":
            blamed.setdefault(e.node, {})[e.job_id] = e.multi_node
            if e.xid is not None:
                xids.setdefault(e.node, set()).add(e.xid)
        elif e.kind == "excluded":
            excluded.setdefault(e.node, set()).add(e.job_id)
        elif e.kind == "drained":
            drained[e.node] = drained.get(e.node, 0) + 1
    out = {}
    for node in sorted(set(blamed) | set(excluded) | set(drained)):
        jobs = blamed.get(node, {})
        sig = NodeSignals(
            node=node,
            failed_jobs=len(jobs),
            multi_node_failures=sum(1 for multi in jobs.values() if multi),
            single_node_failures=sum(1 for multi in jobs.values() if not multi),
            excluded_by_jobs=len(excluded.get(node, ())),
            times_drained=drained.get(node, 0),
            xids=tuple(sorted(xids.get(node, ()))),
        )
        out[node] = _judge(sig, config)
    return out


def _judge(sig: NodeSignals, config: PolicyConfig) -> NodeSignals:
    reasons = []
    if sig.failed_jobs >= config.lemon_failed_jobs:
        reasons.append(f"{sig.failed_jobs} failed jobs blamed it in {config.lemon_window_days:g}d")
    if len(sig.xids) >= config.lemon_distinct_xids:
        reasons.append(f"{len(sig.xids)} distinct XIDs {list(sig.xids)}")
    if sig.times_drained >= config.lemon_times_drained:
        reasons.append(f"drained {sig.times_drained} times in {config.lemon_window_days:g}d")
    return NodeSignals(**{**sig.__dict__, "reasons": tuple(reasons)})
