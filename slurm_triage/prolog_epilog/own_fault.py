"""One node's own fault, as its Epilog judges it and as the decision judges the job's other
nodes: the drain cause root's evidence from that node alone shows, and the failed post-job
checks that alone found a cause (what the circuit breaker may hold back). Pure."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from slurm_triage.attribution import Window, attribute
from slurm_triage.config import PolicyConfig
from slurm_triage.evidence import CheckStatus, Fact, HealthCheck, Source
from slurm_triage.policies.rules import drains_blamed_nodes
from slurm_triage.taxonomy import Cause


def own_fault(
    policy: PolicyConfig, node: str, facts: Iterable[Fact], window: Window | None = None
) -> Cause | None:
    """The cause for which `node` must leave service, judged on `facts` (root's, from that
    node alone) as the decision's drain step judges it; None when not."""
    found = attribute(facts, window=window)
    if node in found.nodes and drains_blamed_nodes(policy, found.cause, found.root_backed):
        return found.cause
    return None


def checks_alone(
    facts: Sequence[Fact], cause: Cause, nodes: Collection[str | None]
) -> tuple[str, ...]:
    """The health checks whose failure on `nodes` found `cause` (a post-job check of their
    Epilogs: fs.mounts, ib.ports, ...), when checks alone found it: none when one of those
    nodes' GPUs shows a fault of its own (Fact.gpu_own: an XID 79 fails gpu.lost as well,
    and is that node's, never a shared fault's)."""
    if any(f.source is Source.ROOT and f.node in nodes and f.gpu_own() for f in facts):
        return ()
    found = {
        f.check
        for f in facts
        if isinstance(f, HealthCheck)
        and f.source is Source.ROOT
        and f.status is CheckStatus.FAIL
        and f.cause is cause
        and f.node in nodes
    }
    return tuple(sorted(found))
