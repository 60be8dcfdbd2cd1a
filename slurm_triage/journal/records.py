"""The journal's row types: what a decision recorded, a node's history event, a cause's
totals, a node's lifecycle step. Pure data (the policies and the metrics read them); the
store is store.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from types import MappingProxyType
from typing import Any

from slurm_triage.frozen import Frozen


class DecisionRow(Frozen):
    """One recorded decision, as `history` shows it."""

    job_id: int
    restart: int
    decided_at: float | None
    state: str | None
    cause: str | None
    action: str | None
    blamed: tuple[str, ...]
    excluded: tuple[str, ...]
    drained: tuple[str, ...]
    reasons: tuple[str, ...]
    applied: bool
    outcome: str | None
    user: str | None
    nodes: tuple[str, ...]
    confidence: float | None
    root_backed: bool
    evidence: Any

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


class NodeEvent(Frozen):
    node: str
    job_id: int
    at: float
    kind: str
    cause: str | None
    xid: int | None
    multi_node: bool


class DecisionTotal(Frozen):
    cause: str
    domain: str
    action: str
    decisions: int
    run_gpu_seconds: float
    last_decided_at: float | None


class LifecycleEvent(Frozen):
    """One step of a node's lifecycle (policies.lifecycle), as reconcile or a person took
    it: the state the node was found in, the action decided, whether it was carried out,
    and why. `subject` is the check or cause that took the node out, `cycle` the repair
    cycle it belongs to, `job_id` a burn-in job, `detail` what else it needs later (the
    weight and features before a suspect mark, Slurm's refusals, the RMA bundle's path)."""

    node: str
    at: float
    state: str
    action: str
    applied: bool
    reason: str
    subject: str = ""
    cycle: int = 0
    job_id: int | None = None
    actor: str = "reconcile"
    detail: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items() if k != "detail"},
            "detail": dict(self.detail),
        }
