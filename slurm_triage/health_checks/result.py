"""The one result type of every health check, with closed enums.

A check that cannot decide (NVML missing, timed out, crashed) is UNKNOWN with the reason,
never OK: failing open would put jobs on a broken node.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from slurm_triage.evidence.facts import CheckStatus
from slurm_triage.taxonomy import NodeAction


class Severity(enum.StrEnum):
    """How bad a FAIL is (Kokolis et al.): HIGH removes the node now, LOW drains it."""

    NONE = "none"
    LOW = "low"
    HIGH = "high"


# What the node needs: one scale with the XID catalogue's (taxonomy.NodeAction); the checks
# call it Action.
Action = NodeAction


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check on one node. `reason` is one line and becomes the drain
    reason after our prefix; `evidence` holds the facts it relied on (JSON-able)."""

    check: str
    status: CheckStatus
    severity: Severity = Severity.NONE
    reason: str = ""
    evidence: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    action: Action = Action.NONE
    seconds: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", " ".join(self.reason.split())[:300])
        object.__setattr__(self, "evidence", MappingProxyType(dict(self.evidence)))

    @property
    def failed(self) -> bool:
        return self.status is CheckStatus.FAIL

    @property
    def wants_drain(self) -> bool:
        return self.failed and self.action.drains

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status.value,
            "severity": self.severity.value,
            "reason": self.reason,
            "action": self.action.value,
            "seconds": round(self.seconds, 4),
            "evidence": dict(self.evidence),
        }


def ok(check: str, reason: str = "", **evidence: Any) -> CheckResult:
    return CheckResult(check, CheckStatus.OK, reason=reason, evidence=evidence)


def fail(
    check: str, reason: str, severity: Severity, action: Action, **evidence: Any
) -> CheckResult:
    return CheckResult(check, CheckStatus.FAIL, severity, reason, evidence, action)


def warn(check: str, reason: str, **evidence: Any) -> CheckResult:
    return CheckResult(check, CheckStatus.WARN, Severity.LOW, reason, evidence, Action.WATCH)


def unknown(check: str, reason: str, **evidence: Any) -> CheckResult:
    return CheckResult(check, CheckStatus.UNKNOWN, reason=reason, evidence=evidence)


def skipped(check: str, reason: str) -> CheckResult:
    return CheckResult(check, CheckStatus.SKIPPED, reason=reason)


@dataclass(frozen=True)
class RunReport:
    """All results of one run on one node, in the order they ran."""

    node: str
    mode: str
    started: float
    seconds: float
    results: tuple[CheckResult, ...]
    stopped_early: bool = False

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.failed)

    @property
    def all_passed(self) -> bool:
        """Every check decided and none failed (SKIPPED and WARN pass; UNKNOWN does not)."""
        return all(
            r.status in (CheckStatus.OK, CheckStatus.WARN, CheckStatus.SKIPPED)
            for r in self.results
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "mode": self.mode,
            "started": self.started,
            "seconds": round(self.seconds, 4),
            "stopped_early": self.stopped_early,
            "results": [r.to_dict() for r in self.results],
        }
