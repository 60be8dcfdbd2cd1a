"""What policies read and what they return: frozen inputs, one Decision.

A policy is a small pure callable `(PolicyInput, Decision) -> Decision`; policies compose
with `|` (left to right), each refining the decision the previous ones reached and adding
its reason, so the final Decision says why at every step.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import field, replace
from typing import Any

from slurm_triage.frozen import Frozen
from slurm_triage.job_state import JobState
from slurm_triage.taxonomy import Cause, Domain


class Verdict(enum.StrEnum):
    RECORD_ONLY = "record_only"  # leave the job ended; record why
    REQUEUE = "requeue"
    HOLD = "hold"  # requeue held, for an operator to look at


class Family(enum.StrEnum):
    """Requeue budgets are kept per family of causes."""

    NODE_FAILURE = "node_failure"
    PREEMPTION = "preemption"
    UNKNOWN = "unknown"
    OTHER = "other"


_PREEMPTION = frozenset({Cause.PREEMPTED, Cause.TIMEOUT})


def family(cause: Cause, domain: Domain) -> Family:
    if cause in _PREEMPTION:
        return Family.PREEMPTION
    if cause is Cause.UNKNOWN:
        return Family.UNKNOWN
    if domain in (Domain.HARDWARE, Domain.INFRASTRUCTURE) or cause is Cause.HANG:
        return Family.NODE_FAILURE
    return Family.OTHER


class PastDecision(Frozen):
    """An earlier decision for the same job (from the journal)."""

    restart: int
    cause: Cause
    family: Family
    verdict: str
    at: float


class JobView(Frozen):
    """The job as the policies need it."""

    job_id: int
    user: str
    partition: str
    num_nodes: int
    requeue: bool  # submitted with --requeue (or the cluster's JobRequeue default)
    batch: bool
    restart_count: int
    excluded_nodes: tuple[str, ...]  # already excluded: the user's own and ours
    comment: str
    # Nodes of the job's partition that can run jobs now (not down, not drained); None when
    # Slurm could not be asked (the must-fit rule then keeps the exclusion: an unreadable
    # partition is not an empty one).
    usable_partition_nodes: tuple[str, ...] | None
    # sbatch -w/--nodelist (ReqNodeList): never excluded, or Slurm never starts the job.
    required_nodes: tuple[str, ...] = ()


class PolicyInput(Frozen):
    cause: Cause
    domain: Domain
    blamed: tuple[str, ...]
    root_backed: bool
    job: JobView
    history: tuple[PastDecision, ...]
    now: float
    lemons: tuple[str, ...] = ()  # nodes of this job whose history makes them lemons
    lemon_reasons: dict[str, str] = field(default_factory=dict)
    # Why the blamed nodes' failed check is a shared fault (the circuit breaker of health
    # drains, policies.breaker.shared_fault_reason): then they are neither drained nor
    # excluded. "" when not.
    shared_fault: str = ""
    # Nodes of this job, not blamed for its cause, whose own root-collected evidence is a
    # drain cause (node -> cause), as their Epilogs judged them (prolog_epilog.own_fault).
    own_faults: dict[str, str] = field(default_factory=dict)
    # How Slurm ended the run (EndState: CANCELLED, FAILED, ...; UNKNOWN where the caller
    # does not say), and for CANCELLED the uid accounting names (None: it did not answer).
    # A cancelled run is never requeued, whatever its cause (rules.cancelled).
    end_state: JobState = JobState.UNKNOWN
    cancelled_by_uid: int | None = None


class Decision(Frozen):
    verdict: Verdict = Verdict.RECORD_ONLY
    exclude: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    begin_delay_s: float = 0.0
    reasons: tuple[str, ...] = ()
    # Blamed nodes the job requires (-w): why it is held instead of requeued excluding them.
    required_failed: tuple[str, ...] = ()
    # The requeue budget a hold spent: "total" or the cause family (metrics count them).
    budget_spent: str = ""

    def but(self, reason: str, **changes: Any) -> Decision:
        """This decision changed as `changes` say, with the reason appended."""
        return replace(self, **changes, reasons=(*self.reasons, reason))

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "exclude": list(self.exclude),
            "drain": list(self.drain),
            "begin_delay_s": self.begin_delay_s,
            "reasons": list(self.reasons),
            "required_failed": list(self.required_failed),
            "budget_spent": self.budget_spent,
        }


class Policy:
    """A named pure step; `a | b` runs a, then b on a's result."""

    def __init__(self, name: str, fn: Callable[[PolicyInput, Decision], Decision]) -> None:
        self.name, self._fn = name, fn

    def __call__(self, given: PolicyInput, decision: Decision | None = None) -> Decision:
        return self._fn(given, decision or Decision())

    def __or__(self, other: Policy) -> Policy:
        return Policy(f"{self.name} | {other.name}", lambda g, d: other(g, self(g, d)))

    def __repr__(self) -> str:
        return f"Policy({self.name})"


def policy(fn: Callable[[PolicyInput, Decision], Decision]) -> Policy:
    return Policy(fn.__name__, fn)
