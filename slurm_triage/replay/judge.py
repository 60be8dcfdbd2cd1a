"""Decisions for job ends that a replay or the twin produces: the project's own policy chain
and actuator, fed from an in-memory journal.

The live decision (prolog_epilog/decide.py) gathers evidence, attributes it, reads the
journal, runs `policies.default_chain(config.policy)` and carries the Decision out with
`actuator.carry_out`. A replay of history and the twin already hold the attribution
(history recorded it; the twin drew it), so the Judge starts from there. It reads from its
own journal what decide() reads from SQLite (the job's earlier decisions, for budgets and
backoff; the node events of the lemon window), builds the PolicyInput, runs the real chain,
carries the decision out through the door it is given with the real actuator, and records
what decide() records: the decision, and the nodes' `blamed`, `excluded` and `drained`
events. What counts against a node is decide()'s rule (`node_blame`): a hardware or
infrastructure cause backed by root-collected evidence, never a user's claim.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from slurm_triage.actuator import Applied, carry_out
from slurm_triage.config import PolicyConfig
from slurm_triage.journal.store import NodeEvent
from slurm_triage.policies import (
    Decision,
    JobView,
    PastDecision,
    PolicyInput,
    default_chain,
    family,
)
from slurm_triage.policies.lemons import node_signals
from slurm_triage.policies.reasons import job_drain_reason
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm.door import SlurmDoor
from slurm_triage.taxonomy import Cause, Domain, info

_NODE_FAULT_DOMAINS = (Domain.HARDWARE, Domain.INFRASTRUCTURE)


def counts_against_nodes(cause: Cause, root_backed: bool) -> bool:
    """decide.node_blame's rule: a job end counts in its blamed nodes' history only for a
    hardware or infrastructure cause that root-collected evidence backs."""
    return info(cause).domain in _NODE_FAULT_DOMAINS and root_backed


@dataclass(frozen=True)
class AttributedEnd:
    """One job end (the slurm.conf programs' JobEnd: job, restart count of the run that
    ended, its nodes, `ended_at` in epoch seconds for a replay and simulated seconds for the
    twin) with what decide() knows once attribution is done."""

    end: JobEnd
    cause: Cause
    blamed: tuple[str, ...]
    root_backed: bool
    job: JobView
    # Slurm requeued the job itself before the decision (NODE_FAIL, a failed Prolog).
    already_requeued: bool = False
    summary: str = "simulated"  # the attribution's reason, for the drain reason


@dataclass(frozen=True)
class Judged:
    """The decision taken for one end, what the actuator did, and which of the drained
    nodes were drained as lemons."""

    given: PolicyInput
    decision: Decision
    applied: Applied
    lemon_drains: tuple[str, ...] = ()


@dataclass
class _Journal:
    """decide()'s reads of the journal, in memory: decisions per job, events per node."""

    decisions: dict[int, list[PastDecision]] = field(default_factory=dict)
    events: dict[str, deque[NodeEvent]] = field(default_factory=dict)


class Judge:
    """Takes decisions with one PolicyConfig and remembers them, as the journal would."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.chain = default_chain(config)
        self._journal = _Journal()
        self._window_s = config.lemon_window_days * 86400.0

    def judge(self, attributed: AttributedEnd, door: SlurmDoor) -> Judged:
        """Decide one end with the real chain, carry it out through `door` with the real
        actuator (dry run when policy.act is false, as decide() does), and record it."""
        given = self.policy_input(attributed)
        decision = self.chain(given)
        end, cause = attributed.end, attributed.cause.value
        applied = carry_out(
            door,
            end.job_id,
            decision,
            cause=cause,
            blamed=attributed.blamed,
            restart=end.restart,
            drain_reason=job_drain_reason(cause, end.job_id, attributed.summary),
            dry_run=not self.config.act,
            already_requeued=attributed.already_requeued,
        )
        self._record(attributed, decision, applied)
        lemons = tuple(n for n in applied.drained if n in given.lemons)
        return Judged(given, decision, applied, lemons)

    def policy_input(self, attributed: AttributedEnd) -> PolicyInput:
        """The PolicyInput decide() would build for this end from its journal."""
        end, cause = attributed.end, attributed.cause
        blame = counts_against_nodes(cause, attributed.root_backed)
        lemons = self._lemons(attributed) if blame and attributed.blamed else {}
        past = self._journal.decisions.get(end.job_id, ())
        return PolicyInput(
            cause=cause,
            domain=info(cause).domain,
            blamed=attributed.blamed,
            root_backed=attributed.root_backed,
            job=attributed.job,
            history=tuple(p for p in past if p.restart < end.restart),
            now=end.ended_at,
            lemons=tuple(lemons),
            lemon_reasons=lemons,
        )

    def forget(self, job_id: int) -> None:
        """Drop a job's decisions (it is gone; a resubmission is a new job id)."""
        self._journal.decisions.pop(job_id, None)

    def node_history(self, node: str, now: float) -> tuple[NodeEvent, ...]:
        """The node's events inside the lemon window ending at `now`."""
        return tuple(self._window(node, now))

    def _window(self, node: str, now: float) -> deque[NodeEvent]:
        events = self._journal.events.get(node)
        if events is None:
            return deque()
        since = now - self._window_s
        while events and events[0].at < since:
            events.popleft()
        return events

    def _lemons(self, attributed: AttributedEnd) -> dict[str, str]:
        """decide()'s _lemons: the window's events of the job's nodes plus this end's
        blame, judged by policies.lemons.node_signals; lemons among the job's nodes."""
        end = attributed.end
        events: list[NodeEvent] = []
        for node in end.nodes:
            if node in self._journal.events:
                events.extend(self._window(node, end.ended_at))
        events += self._blamed(attributed)
        signals = node_signals(events, self.config)
        nodes = set(end.nodes)
        return {n: "; ".join(s.reasons) for n, s in signals.items() if s.lemon and n in nodes}

    def _blamed(self, attributed: AttributedEnd) -> list[NodeEvent]:
        if not counts_against_nodes(attributed.cause, attributed.root_backed):
            return []
        end = attributed.end
        multi = len(end.nodes) > 1
        return [
            NodeEvent(n, end.job_id, end.ended_at, "blamed", attributed.cause.value, None, multi)
            for n in attributed.blamed
        ]

    def _record(self, attributed: AttributedEnd, decision: Decision, applied: Applied) -> None:
        end, cause = attributed.end, attributed.cause
        multi = len(end.nodes) > 1
        events = self._blamed(attributed)
        excluded = applied.excluded or (decision.exclude if applied.dry_run else ())
        events += [
            NodeEvent(n, end.job_id, end.ended_at, "excluded", None, None, multi) for n in excluded
        ]
        # A dry run records what it would have drained, as decide() does.
        drained = applied.drained or (decision.drain if applied.dry_run else ())
        events += [
            NodeEvent(n, end.job_id, end.ended_at, "drained", cause.value, None, multi)
            for n in drained
        ]
        for event in events:
            self._journal.events.setdefault(event.node, deque()).append(event)
        past = PastDecision(
            end.restart,
            cause,
            family(cause, info(cause).domain),
            decision.verdict.value,
            end.ended_at,
        )
        self._journal.decisions.setdefault(end.job_id, []).append(past)
