"""The journal's row types: what a decision recorded, a node's history event, a cause's
totals. Pure data (the policies and the metrics read them); the store is store.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DecisionRow:
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


@dataclass(frozen=True)
class NodeEvent:
    node: str
    job_id: int
    at: float
    kind: str
    cause: str | None
    xid: int | None
    multi_node: bool


@dataclass(frozen=True)
class DecisionTotal:
    cause: str
    domain: str
    action: str
    decisions: int
    run_gpu_seconds: float
    last_decided_at: float | None
