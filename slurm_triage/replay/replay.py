"""Replay a site's history under one policy setting: what the decisions would have been,
taken by the project's own chain and actuator (replay.judge) against a ledger of what the
setting did so far (which jobs it requeued, held or left ended; which nodes it drained and
until when).

Walking history's job ends in time order, for each:
- a job this setting already held or left ended has no later attempts: they are not run
  (their GPU-hours are saved when they failed, at risk when they completed, since the job
  then waited for a person);
- a failure blaming a node this setting had drained by then is avoided: the job would have
  run elsewhere (the loss saved: the paper's estimate, half a checkpoint interval plus the
  restart, on all its GPUs); the chain goes on as in history;
- any other end that is not a clean completion is decided. A requeue lets the chain go
  on (or is counted as a requeue history did not make, for a last attempt); a hold or
  leaving it ended cuts the chain there.
Nodes the setting drains are out of service for `repair_h` (repair on: our health check
resumes them once they pass), or to the end of the history (repair off). What the setting
would have done to node-level history beyond that (which jobs would have run where) is the
twin's question, not replay's.

The health checks' circuit breaker is replayed apart: each drain our health checks made in
history (Slurm's node events, `triage: <check> ...`) is decided again by
the node policy (policies.nodes.decide_node) with the setting's breaker limits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from slurm_triage.health_checks.result import Action as CheckAction
from slurm_triage.health_checks.result import RunReport, Severity, fail
from slurm_triage.policies import Decision, JobView, Verdict
from slurm_triage.policies.nodes import NodeOutcome, decide_node
from slurm_triage.policies.reasons import check_drain_reason
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.replay.door import SimDoor
from slurm_triage.replay.history import History, HistoryEnd
from slurm_triage.replay.judge import AttributedEnd, Judge
from slurm_triage.replay.settings import Setting
from slurm_triage.slurm.errors import InvalidJobState, JobNotFound, NodeNotFound
from slurm_triage.slurm.model import JobInfo, JobState, NodeFlag, NodeInfo
from slurm_triage.taxonomy import Action, Cause, info

COMPLETING, PENDING, HELD, ENDED = "completing", "pending", "held", "ended"
_NO_DECISION = frozenset({Cause.COMPLETED})
_DRAIN = frozenset({NodeFlag.DRAIN})


@dataclass
class Outcome:
    """What one setting would have done over the whole history."""

    name: str
    description: str
    decisions: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    requeues: int = 0
    requeues_with_exclusion: int = 0
    requeues_history_did_not_make: int = 0
    backoff_h: float = 0.0  # waits the backoff put before requeued jobs, summed
    jobs_held: set[int] = field(default_factory=set)
    jobs_ended_early: set[int] = field(default_factory=set)  # left ended; history requeued
    crash_loops_stopped: set[int] = field(default_factory=set)
    nodes_drained: set[str] = field(default_factory=set)
    drains: int = 0
    lemon_nodes: set[str] = field(default_factory=set)
    failures_avoided: int = 0
    attempts_not_run: int = 0
    gpu_h_saved: float = 0.0
    gpu_h_at_risk: float = 0.0
    health_drains: int = 0
    breaker_blocked: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "setting": self.name,
            "description": self.description,
            "decisions": self.decisions,
            "verdicts": dict(sorted(self.verdicts.items())),
            "requeues": self.requeues,
            "requeues_with_exclusion": self.requeues_with_exclusion,
            "requeues_history_did_not_make": self.requeues_history_did_not_make,
            "backoff_hours": self.backoff_h,
            "jobs_held": len(self.jobs_held),
            "jobs_left_ended_that_history_requeued": len(self.jobs_ended_early),
            "crash_loops_stopped": len(self.crash_loops_stopped),
            "crash_loop_jobs": sorted(self.crash_loops_stopped)[:20],
            "drains": self.drains,
            "nodes_drained": len(self.nodes_drained),
            "lemon_nodes": sorted(self.lemon_nodes),
            "failures_avoided": self.failures_avoided,
            "attempts_not_run": self.attempts_not_run,
            "gpu_hours_saved": self.gpu_h_saved,
            "gpu_hours_at_risk": self.gpu_h_at_risk,
            "health_drains": self.health_drains,
            "health_drains_breaker_blocked": self.breaker_blocked,
        }


class Ledger:
    """Replay's Slurm (replay.door.SimSlurm): the state of the jobs being decided and the
    nodes this setting drained."""

    def __init__(self, history_nodes: Sequence[str]) -> None:
        self.now = 0.0
        self.known = set(history_nodes)
        self.jobs: dict[int, tuple[str, int, frozenset[str]]] = {}  # state, restarts, excluded
        self.out_until: dict[str, float] = {}
        self.drained_at: dict[str, float] = {}
        self.reasons: dict[str, str] = {}
        self.new_drains: list[str] = []
        self.repair_s = 0.0

    def out_of_service(self, node: str, at: float) -> bool:
        return self.out_until.get(node, -1.0) > at

    def begin(self, end: HistoryEnd, excluded: frozenset[str]) -> None:
        self.now = end.at
        self.jobs[end.job_id] = (COMPLETING, end.attempt - 1, excluded)

    def state(self, job_id: int) -> str:
        return self.jobs[job_id][0]

    def excluded(self, job_id: int) -> frozenset[str]:
        return self.jobs[job_id][2] if job_id in self.jobs else frozenset()

    def _job(self, job_id: int) -> tuple[str, int, frozenset[str]]:
        if job_id not in self.jobs:
            raise JobNotFound(f"job {job_id}: Invalid job id specified")
        return self.jobs[job_id]

    def job_info(self, job_id: int) -> JobInfo:
        state, restarts, excluded = self._job(job_id)
        slurm_state = {COMPLETING: JobState.COMPLETING, ENDED: JobState.FAILED}.get(
            state, JobState.PENDING
        )
        return JobInfo(
            job_id, slurm_state, "None", 0, 0, (), tuple(sorted(excluded)), restarts,
            True, True, "", None, "", 1, None, "", "", "replay",
        )  # fmt: skip

    def node_info(self, name: str) -> NodeInfo:
        if name not in self.known:
            raise NodeNotFound(f"scontrol update NodeName={name} ...: Invalid node name specified")
        if self.out_of_service(name, self.now):
            flags = frozenset({NodeFlag.DRAIN})
            at = int(self.drained_at.get(name, self.now))
            return NodeInfo(name, "IDLE", flags, self.reasons.get(name, ""), "slurm", at)
        return NodeInfo(name, "IDLE", frozenset(), "", "", None)

    def requeue(self, job_id: int, hold: bool) -> None:
        state, restarts, excluded = self._job(job_id)
        if state in (PENDING, HELD):
            raise InvalidJobState(f"scontrol requeue {job_id}: Job is pending execution")
        self.jobs[job_id] = (HELD if hold else PENDING, restarts + 1, excluded)

    def hold(self, job_id: int) -> None:
        state, restarts, excluded = self._job(job_id)
        if state == PENDING:
            self.jobs[job_id] = (HELD, restarts, excluded)

    def release(self, job_id: int) -> None:
        state, restarts, excluded = self._job(job_id)
        if state == HELD:
            self.jobs[job_id] = (PENDING, restarts, excluded)

    def cancel(self, job_id: int) -> None:
        state, restarts, excluded = self._job(job_id)
        self.jobs[job_id] = (ENDED, restarts, excluded)

    def exclude(self, job_id: int, nodes: tuple[str, ...], merge: bool) -> tuple[str, ...]:
        state, restarts, excluded = self._job(job_id)
        if state not in (PENDING, HELD):
            raise InvalidJobState(f"scontrol update JobId={job_id}: Job has already finished")
        unknown = [n for n in nodes if n not in self.known]
        if unknown:
            raise NodeNotFound(f"scontrol update JobId={job_id} ...: Invalid node name specified")
        merged = frozenset(excluded | set(nodes)) if merge else frozenset(nodes)
        self.jobs[job_id] = (state, restarts, merged)
        return tuple(sorted(merged))

    def begin_after(self, job_id: int, delay_s: float) -> None:
        if self._job(job_id)[0] not in (PENDING, HELD):
            raise InvalidJobState(f"scontrol update JobId={job_id}: Job has already finished")

    def drain(self, node: str, reason: str) -> None:
        if node not in self.known:
            raise NodeNotFound(f"scontrol update NodeName={node} ...: Invalid node name specified")
        self.reasons[node] = reason
        if not self.out_of_service(node, self.now):
            self.drained_at[node] = self.now
            self.new_drains.append(node)
        self.out_until[node] = self.now + self.repair_s

    def resume(self, node: str) -> None:
        self.out_until.pop(node, None)


def replay(history: History, setting: Setting) -> Outcome:
    """What `setting` would have done with this history (module docstring)."""
    outcome = Outcome(setting.name, setting.describe())
    ledger = Ledger(history.nodes)
    ledger.repair_s = setting.repair_h * 3600.0 if setting.repair else float("inf")
    judge, door = Judge(setting.policy), SimDoor(ledger)
    # The partition must_fit judges: the nodes history names, and as many more (unnamed:
    # never blamed, only counted) as the cluster is said to have.
    unnamed = max(setting.cluster_nodes - len(history.nodes), 0)
    usable = tuple(history.nodes) + tuple(f"(unnamed {i + 1})" for i in range(unnamed))
    cut: set[int] = set()
    loops = _crash_loop_jobs(history, setting.crash_loop_requeues)
    for end in history.ends:
        if end.job_id in cut:
            outcome.attempts_not_run += 1
            if end.failure or end.state in ("FAILED", "NODE_FAIL", "REQUEUED"):
                outcome.gpu_h_saved += end.gpu_hours
            elif end.state == "COMPLETED":
                outcome.gpu_h_at_risk += end.gpu_hours
            continue
        if end.failure and any(ledger.out_of_service(n, end.at) for n in end.blamed):
            outcome.failures_avoided += 1
            outcome.gpu_h_saved += end.gpus * setting.lost_per_failure_h(end.elapsed_s)
            continue
        if end.cause in _NO_DECISION or end.state == "COMPLETED":
            continue
        ledger.begin(end, ledger.excluded(end.job_id))
        may_exclude = bool(end.blamed) and info(end.cause).action is Action.REQUEUE_EXCLUDE
        judged = judge.judge(_job_end(end, ledger, usable if may_exclude else ()), door)
        _count(outcome, end, judged.decision, ledger)
        outcome.lemon_nodes.update(judged.lemon_drains)
        state = ledger.state(end.job_id)
        if state in (HELD, COMPLETING, ENDED) and not end.last:
            cut.add(end.job_id)
            if state != HELD:
                outcome.jobs_ended_early.add(end.job_id)
            if end.job_id in loops:
                outcome.crash_loops_stopped.add(end.job_id)
        elif state == PENDING and end.last:
            outcome.requeues_history_did_not_make += 1
    _replay_breaker(history, setting, outcome)
    return outcome


def _job_end(end: HistoryEnd, ledger: Ledger, usable: tuple[str, ...]) -> AttributedEnd:
    restarts = end.attempt - 1
    view = JobView(
        job_id=end.job_id,
        user="",
        partition="",
        num_nodes=max(end.nnodes, 1),
        requeue=True,  # accounting does not keep --requeue/--no-requeue: assumed requeueable
        batch=True,
        restart_count=restarts,
        excluded_nodes=tuple(sorted(ledger.excluded(end.job_id))),
        comment="",
        usable_partition_nodes=tuple(n for n in usable if not ledger.out_of_service(n, end.at)),
    )
    return AttributedEnd(
        end=JobEnd(job_id=end.job_id, ended_at=end.at, restart=restarts, nodes=end.nodes),
        cause=end.cause,
        blamed=end.blamed,
        root_backed=end.root_backed,
        job=view,
        summary=f"replayed {end.state}",
    )


def _count(outcome: Outcome, end: HistoryEnd, decision: Decision, ledger: Ledger) -> None:
    verdict = decision.verdict
    outcome.decisions += 1
    outcome.verdicts[verdict.value] = outcome.verdicts.get(verdict.value, 0) + 1
    if verdict is Verdict.REQUEUE:
        outcome.requeues += 1
        outcome.requeues_with_exclusion += int(bool(decision.exclude))
        outcome.backoff_h += decision.begin_delay_s / 3600.0
    elif verdict is Verdict.HOLD:
        outcome.jobs_held.add(end.job_id)
    outcome.drains += len(ledger.new_drains)
    outcome.nodes_drained.update(ledger.new_drains)
    ledger.new_drains.clear()


def _crash_loop_jobs(history: History, requeues: int) -> set[int]:
    """Jobs history requeued after at least `requeues` failures: crash loops."""
    failures: dict[int, int] = {}
    for end in history.ends:
        if end.failure and not end.last:
            failures[end.job_id] = failures.get(end.job_id, 0) + 1
    return {job for job, count in failures.items() if count >= requeues}


class _Drained(Sequence[NodeInfo]):
    """The cluster as the breaker reads it: `size` nodes, of which only the drained ones
    (yielded when iterated) can count (see twin.slurm_view.ClusterView)."""

    def __init__(self, size: int, drained: list[NodeInfo]) -> None:
        self.size, self.drained = size, drained

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> NodeInfo: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[NodeInfo]: ...

    def __getitem__(self, index: int | slice) -> NodeInfo | Sequence[NodeInfo]:
        return self.drained[index]

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self.drained)


def _replay_breaker(history: History, setting: Setting, outcome: Outcome) -> None:
    """Each health-check drain of history decided again with the setting's breaker."""
    kept: list[tuple[float, str, str]] = []  # drains the setting would have made
    size = max(setting.cluster_nodes or len(history.nodes), 1)
    for drain in history.health_drains:
        window = setting.health.breaker_window_s
        same = [
            NodeInfo(node, "IDLE", _DRAIN, check_drain_reason(check, "replayed"), "", int(at))
            for at, node, check in kept
            if check == drain.check and node != drain.node and drain.at - at <= window
        ]
        result = fail(drain.check, "replayed", Severity.HIGH, CheckAction.DRAIN_NOW)
        report = RunReport(drain.node, "cron", drain.at, 0.0, (result,))
        node = NodeInfo(drain.node, "IDLE", frozenset(), "", "", None)
        decided = decide_node(
            report, node, _Drained(size, same), setting.health, may_resume=True, now=drain.at
        )
        outcome.health_drains += 1
        if decided.outcome is NodeOutcome.BREAKER_OPEN:
            outcome.breaker_blocked += 1
        else:
            kept.append((drain.at, drain.node, drain.check))
