"""The twin's Slurm as the door sees it: jobs and nodes in Slurm's words, and the
operations our actuators call, refused where Slurm refuses them.

SimDoor (replay/door.py) hands every call to this view; the view changes the twin's
state. A requeue counts as one of Slurm's restarts and waits `requeue_delay_s` (Slurm does
not start a requeued job before its credentials expire); a hold waits for an operator
(`hold_release_h`); exclusions and begin times need a pending job, as
`scontrol update` does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, overload

from slurm_triage.slurm.errors import (
    InvalidJobState,
    JobNotFound,
    NodeNotFound,
    SlurmCommandError,
)
from slurm_triage.slurm.model import JobInfo, JobState, NodeFlag, NodeInfo
from slurm_triage.twin.jobs import COMPLETING, HELD, PENDING, RUNNING, Job

if TYPE_CHECKING:
    from slurm_triage.twin.engine import Twin

PARTITION = "gpu"
_STATES = {
    PENDING: (JobState.PENDING, "Priority"),
    HELD: (JobState.PENDING, "JobHeldAdmin"),
    RUNNING: (JobState.RUNNING, "None"),
    COMPLETING: (JobState.COMPLETING, "NonZeroExitCode"),
}


class SlurmView:
    """The SimSlurm of the twin (replay.door.SimSlurm)."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.new_drains: list[int] = []  # drained through the door since the last settle

    def _job(self, job_id: int, command: str) -> Job:
        job = self.twin.jobs.get(job_id)
        if job is None:
            raise JobNotFound(f"{command}: Invalid job id specified")
        return job

    def _node(self, name: str) -> int:
        n = self.twin.nodes.index.get(name)
        if n is None:
            raise NodeNotFound(f"scontrol update NodeName={name} ...: Invalid node name specified")
        return n

    def _pending(self, job_id: int, what: str) -> Job:
        command = f"scontrol update JobId={job_id} {what}=..."
        job = self._job(job_id, command)
        if job.state == COMPLETING:
            raise InvalidJobState(f"{command}: Job has already finished")
        if job.state not in (PENDING, HELD):
            raise SlurmCommandError(f"{command}: Job is no longer pending execution")
        return job

    def job_info(self, job_id: int) -> JobInfo:
        job = self._job(job_id, f"scontrol show job {job_id}")
        state, reason = _STATES[job.state]
        names = self.twin.nodes.names
        return JobInfo(
            job_id=job.id,
            state=state,
            state_reason=reason,
            exit_code=0,
            exit_signal=0,
            nodes=tuple(names[n] for n in job.alloc),
            excluded_nodes=tuple(names[n] for n in sorted(job.excluded)),
            restart_count=job.restarts,
            requeue=True,
            batch=True,
            user="twin",
            uid=None,
            partition=PARTITION,
            num_nodes=max(job.nnodes, 1),
            time_limit_min=None,
            admin_comment="",
            comment="",
            source="twin",
        )

    def node_info(self, name: str) -> NodeInfo:
        nodes = self.twin.nodes
        n = self._node(name)
        state = "DOWN" if nodes.down[n] else ("ALLOCATED" if nodes.jobs[n] else "IDLE")
        if nodes.drained[n]:
            return NodeInfo(
                name,
                state,
                frozenset({NodeFlag.DRAIN}),
                nodes.reason[n],
                "slurm",
                int(nodes.drained_at[n]),
                (PARTITION,),
            )
        return NodeInfo(name, state, frozenset(), "", "", None, (PARTITION,))

    def requeue(self, job_id: int, hold: bool) -> None:
        verb = "requeuehold" if hold else "requeue"
        job = self._job(job_id, f"scontrol {verb} {job_id}")
        if job.state in (PENDING, HELD):
            raise InvalidJobState(f"scontrol {verb} {job_id}: Job is pending execution")
        job.restarts += 1
        job.urgent = True
        if hold:
            self.twin.respond.hold(job)
        else:
            self.twin.measure.requeues_ours += 1
            self.twin.enqueue(job, self.twin.now + self.twin.s.requeue_delay_s)

    def hold(self, job_id: int) -> None:
        job = self._job(job_id, f"scontrol hold {job_id}")
        if job.state == PENDING:  # Slurm answers 0 for a job past pending too
            self.twin.respond.hold(job)

    def release(self, job_id: int) -> None:
        job = self._job(job_id, f"scontrol release {job_id}")
        if job.state not in (PENDING, HELD):
            raise InvalidJobState(f"scontrol release {job_id}: Job is no longer pending execution")
        if job.state == HELD:
            self.twin.enqueue(job, self.twin.now)

    def cancel(self, job_id: int) -> None:
        job = self._job(job_id, f"scancel {job_id}")
        if job.state == COMPLETING:
            raise InvalidJobState(f"scancel {job_id}: Job/step already completing or completed")
        if job.state == PENDING:
            self.twin.dequeue(job)
        self.twin.end_job(job)

    def exclude(self, job_id: int, nodes: tuple[str, ...], merge: bool) -> tuple[str, ...]:
        job = self._pending(job_id, "ExcNodeList")
        ids = {self._node(name) for name in nodes}
        job.excluded = (job.excluded | ids) if merge else ids
        names = self.twin.nodes.names
        return tuple(names[n] for n in sorted(job.excluded))

    def begin_after(self, job_id: int, delay_s: float) -> None:
        job = self._pending(job_id, "StartTime")
        job.begin = max(job.begin, self.twin.now + delay_s)
        self.twin.kick(job.begin)

    def drain(self, node: str, reason: str) -> None:
        n = self._node(node)
        nodes = self.twin.nodes
        if nodes.drained[n]:  # Slurm replaces the reason
            nodes.reason[n] = " ".join(reason.split())
            return
        nodes.set_drained(n, " ".join(reason.split()), self.twin.now)
        self.new_drains.append(n)

    def resume(self, node: str) -> None:
        n = self._node(node)
        nodes = self.twin.nodes
        if not nodes.drained[n] and not nodes.down[n]:
            raise SlurmCommandError(
                f"scontrol update NodeName={node} ...: Invalid node state specified"
            )
        nodes.set_resumed(n)
        self.twin.kick()


class ClusterView(Sequence[NodeInfo]):
    """Every node of the twin as the health checks' circuit breaker reads the cluster
    (policies.breaker.breaker_reason): its length is the cluster's; iterating yields the
    drained nodes only, the others being unable to count towards the breaker (not drained,
    and no twin node writes the failing mark in its Comment), which keeps a 16,384-node
    breaker check cheap."""

    def __init__(self, view: SlurmView) -> None:
        self.view = view

    def __len__(self) -> int:
        return len(self.view.twin.nodes)

    @overload
    def __getitem__(self, index: int) -> NodeInfo: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[NodeInfo]: ...

    def __getitem__(self, index: int | slice) -> NodeInfo | Sequence[NodeInfo]:
        names = self.view.twin.nodes.names
        if isinstance(index, slice):
            return [self.view.node_info(name) for name in names[index]]
        return self.view.node_info(names[index])

    def __iter__(self) -> Iterator[NodeInfo]:
        names = self.view.twin.nodes.names
        for n in sorted(self.view.twin.nodes.drained_set):
            yield self.view.node_info(names[n])
