"""The twin's jobs, runs and event kinds.

A `Run` is one logical job: the work it needs, across requeues and resubmissions, and what
ETTR is measured on. A `Job` is one Slurm job of a run: a requeue keeps it (same id, its
restart count one higher), a user's resubmission makes a new one at the back of the queue.
Events are tuples (time, sequence, kind, a, b, c) with `kind` one of the constants below.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_triage.twin.faults import FaultPlan
from slurm_triage.twin.scenario import Scenario
from slurm_triage.twin.workload import Workload

PENDING, RUNNING, COMPLETING, HELD, ENDED = "pending", "running", "completing", "held", "ended"
(
    ARRIVE,
    END,
    USER_FAIL,
    FAULT,
    BLACKHOLE,
    CHECK,
    NODE_UP,
    REPAIRED,
    RESUME_CHECK,
    ADMIN_RETURN,
    REVIEW,
    RELEASE,
    RESUBMIT,
    SCHED,
    KICK,
    SAMPLE,
) = range(16)


class Run:
    """One logical job: the work it needs, across requeues and resubmissions."""

    __slots__ = (
        "id",
        "gpus",
        "remaining_h",
        "submit",
        "first_start",
        "productive_h",
        "failures",
        "stream",
        "done",
    )

    def __init__(self, run_id: int, gpus: int, work_h: float, submit: float, stream: bool):
        self.id = run_id
        self.gpus = gpus
        self.remaining_h = work_h
        self.submit = submit
        self.first_start: float | None = None
        self.productive_h = 0.0
        self.failures = 0
        self.stream = stream
        self.done = False


class Job:
    """One Slurm job of a run: a requeue keeps it, a resubmission makes a new one."""

    __slots__ = (
        "id",
        "run",
        "gpus",
        "nnodes",
        "prio",
        "begin",
        "state",
        "alloc",
        "token",
        "start",
        "end_est",
        "restarts",
        "excluded",
        "urgent",
        "next_preempt",
    )

    def __init__(self, job_id: int, run: Run, nnodes: int, prio: float) -> None:
        self.id = job_id
        self.run = run
        self.gpus = run.gpus
        self.nnodes = nnodes  # 0: fewer GPUs than a node, packed onto a shared node
        self.prio = prio
        self.begin = prio
        self.state = PENDING
        self.alloc: list[int] = []
        self.token = 0
        self.start = 0.0
        self.end_est = 0.0
        self.restarts = 0
        self.excluded: set[int] = set()
        self.urgent = False  # requeued after a failure: may preempt lower priorities
        self.next_preempt = 0.0


@dataclass(frozen=True)
class Inputs:
    scenario: Scenario
    workload: Workload
    faults: FaultPlan
