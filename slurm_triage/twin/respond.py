"""What happens after a fault in the twin: which jobs it kills, the attribution, and the
policy set's answer (the node upkeep that follows is upkeep.py).

The attribution is drawn (scenario: accuracy, misblame, root evidence per cause). The
answer of `triage` is the project's own code: `replay.judge.Judge` runs
`policies.default_chain` and `actuator.carry_out` through a SimDoor onto the twin. `none`
and `native` are Slurm's and the users' behaviour, written here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurm_triage.policies import JobView
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.replay.judge import AttributedEnd, Judge
from slurm_triage.taxonomy import Action, Cause, info
from slurm_triage.twin.jobs import (
    BLACKHOLE,
    CHECK,
    COMPLETING,
    HELD,
    NODE_UP,
    RELEASE,
    RESUBMIT,
    Job,
)
from slurm_triage.twin.policysets import Kind
from slurm_triage.twin.scenario import FAULT_KINDS, FaultKind
from slurm_triage.twin.slurm_view import PARTITION
from slurm_triage.twin.upkeep import Upkeep

if TYPE_CHECKING:
    from slurm_triage.twin.engine import Twin

USER_MISREAD_CAUSE = Cause.GPU_MEMORY


class Responder:
    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.s = twin.s
        self.kind = twin.ps.kind
        self.upkeep = Upkeep(twin)
        self.door = self.upkeep.door
        self.judge = Judge(twin.ps.policy) if self.kind is Kind.TRIAGE else None
        self._usable: tuple[int, tuple[str, ...]] = (-1, ())

    # -- faults and failures -------------------------------------------------------------

    def fault(self, i: int) -> None:
        twin, plan, nodes = self.twin, self.twin.faults, self.twin.nodes
        n = int(plan.node[i])
        if plan.lemon_extra[i] and not nodes.lemon[n]:
            return  # the lemon was fixed: its extra faults are gone
        twin.measure.faults += 1
        kind = FAULT_KINDS[int(plan.kind[i])]
        nodes.last_fault_s[n] = twin.now
        if kind.cause is Cause.NODE_FAILURE:
            if nodes.down[n]:
                return
            victims = list(nodes.jobs[n])
            nodes.set_down(n, True)
            twin.push(twin.now + self.s.reboot_h * 3600.0, NODE_UP, n)
            for job in victims:
                self.job_failed(job, i, n)  # type: ignore[arg-type]
            return
        victims = list(nodes.jobs[n]) if kind.scope == "node" else self._gpu_victim(n, i)
        if plan.persistent[i] and nodes.broken[n] is None:
            nodes.broken[n] = i
            nodes.broken_set.add(n)
            if plan.visible[i]:
                interval = self.s.check_interval_min * 60.0
                twin.push(twin.now + twin.rng.random() * interval, CHECK, n, 0, i)
        for job in victims:
            self.job_failed(job, i, n)  # type: ignore[arg-type]

    def _gpu_victim(self, n: int, i: int) -> list[object]:
        """The job holding the GPU the fault hit, if any (GPUs handed out in job order)."""
        gpu, held = int(self.twin.faults.gpu[i]), 0
        for job in self.twin.nodes.jobs[n]:
            held += job.gpus if job.nnodes == 0 else self.twin.gpn  # type: ignore[attr-defined]
            if gpu < held:
                return [job]
        return []

    def job_failed(self, job: Job, i: int, n: int) -> None:
        """A fault on node n ended the job's attempt: keep its checkpoints, answer."""
        twin = self.twin
        if job.state != "running":
            return
        twin.measure.job_failures += 1
        review = self.upkeep.failed_since_review
        review[n] = review.get(n, 0) + 1
        job.run.failures += 1
        twin.credit(job, twin.saved_h((twin.now - job.start) / 3600.0, job.run.remaining_h))
        alloc = job.alloc
        twin.finish_attempt(job, True)
        kind = FAULT_KINDS[int(twin.faults.kind[i])]
        cause, blamed, root = self._attribute(kind, n, alloc)
        self._answer(job, alloc, cause, blamed, root, node_fail=kind.cause is Cause.NODE_FAILURE)

    def user_failure(self, job: Job, alloc: list[int]) -> None:
        """The job's own error ended it; our attribution may misread it (as hardware)."""
        twin = self.twin
        if self.kind is Kind.TRIAGE and twin.rng.random() < self.s.user_misattribution:
            n = alloc[int(twin.rng.random() * len(alloc))]
            blamed = (twin.nodes.names[n],)
            self._answer(job, alloc, USER_MISREAD_CAUSE, blamed, True, node_fail=False)
            return
        twin.end_job(job)
        twin.run_done(job.run, completed=False)

    def _attribute(
        self, kind: FaultKind, n: int, alloc: list[int]
    ) -> tuple[Cause, tuple[str, ...], bool]:
        rng, names = self.twin.rng, self.twin.nodes.names
        if kind.cause is Cause.NODE_FAILURE:
            return Cause.NODE_FAILURE, (names[n],), True  # Slurm's own NODE_FAIL
        multi = len(alloc) > 1
        if rng.random() >= self.s.attribution_accuracy:
            return (Cause.NCCL_TIMEOUT if multi else Cause.UNKNOWN), (), False
        blamed = n
        if multi and rng.random() < self.s.misblame:
            others = [m for m in alloc if m != n]
            blamed = others[int(rng.random() * len(others))]
        return kind.cause, (names[blamed],), rng.random() < kind.root

    def _answer(
        self,
        job: Job,
        alloc: list[int],
        cause: Cause,
        blamed: tuple[str, ...],
        root: bool,
        *,
        node_fail: bool,
    ) -> None:
        if self.kind is Kind.NONE or (self.kind is Kind.NATIVE and not node_fail):
            self.left_to_user(job)
            return
        restart = job.restarts
        if node_fail:
            self._slurm_requeue(job)
        if self.kind is Kind.NATIVE:
            return
        if not node_fail:
            job.state = COMPLETING
        self._decide(job, alloc, restart, cause, blamed, root, already_requeued=node_fail)
        if job.state == COMPLETING:  # left ended (recorded only): its user resubmits it
            self.left_to_user(job)

    def _slurm_requeue(self, job: Job) -> None:
        """Slurm's own answer to NODE_FAIL for a --requeue batch job: requeue, up to
        MaxBatchRequeue, then hold (JobHeldAdmin)."""
        twin = self.twin
        job.urgent = True
        if job.restarts < self.s.max_batch_requeue:
            job.restarts += 1
            twin.measure.requeues_slurm += 1
            twin.enqueue(job, twin.now + self.s.requeue_delay_s)
        else:
            job.restarts += 1
            self.hold(job)

    def hold(self, job: Job) -> None:
        twin = self.twin
        if job.state == "pending":
            twin.dequeue(job)
        job.state = HELD
        twin.measure.holds += 1
        twin.push(twin.now + self.s.hold_release_h * 3600.0, RELEASE, job.id)

    def forget(self, job_id: int) -> None:
        if self.judge is not None:
            self.judge.forget(job_id)

    def left_to_user(self, job: Job) -> None:
        """Nobody requeues it: the user resubmits the run later, as a new job."""
        twin = self.twin
        twin.end_job(job)
        self.forget(job.id)
        delay = self.s.resubmit_delay_h * 3600.0
        wait = twin.rng.expovariate(1.0 / delay) if delay > 0 else 0.0
        twin.push(twin.now + wait, RESUBMIT, job.run.id)

    def _decide(
        self,
        job: Job,
        alloc: list[int],
        restart: int,
        cause: Cause,
        blamed: tuple[str, ...],
        root: bool,
        *,
        already_requeued: bool,
    ) -> None:
        """Our decision: the real chain and actuator through the door (replay.judge)."""
        assert self.judge is not None
        twin, names = self.twin, self.twin.nodes.names
        may_exclude = bool(blamed) and info(cause).action is Action.REQUEUE_EXCLUDE
        view = JobView(
            job_id=job.id,
            user="twin",
            partition=PARTITION,
            num_nodes=max(job.nnodes, 1),
            requeue=True,
            batch=True,
            restart_count=job.restarts,
            excluded_nodes=tuple(names[n] for n in sorted(job.excluded)),
            comment="",
            usable_partition_nodes=self._usable_names() if may_exclude else (),
        )
        end = AttributedEnd(
            end=JobEnd(
                job_id=job.id,
                ended_at=twin.now,
                restart=restart,
                nodes=tuple(names[n] for n in alloc),
            ),
            cause=cause,
            blamed=blamed,
            root_backed=root,
            job=view,
            already_requeued=already_requeued,
        )
        judged = self.judge.judge(end, self.door)
        m = twin.measure
        m.decisions += 1
        verdict = judged.decision.verdict.value
        m.verdicts[verdict] = m.verdicts.get(verdict, 0) + 1
        self.upkeep.settle("decision", set(judged.lemon_drains))

    def _usable_names(self) -> tuple[str, ...]:
        """The partition's usable nodes (decide()'s must-fit input), cached per change."""
        nodes = self.twin.nodes
        if self._usable[0] != nodes.version:
            usable = tuple(nodes.names[n] for n in range(len(nodes)) if nodes.usable(n))
            self._usable = (nodes.version, usable)
        return self._usable[1]

    def black_hole(self, job: Job, picked: list[int]) -> None:
        """A job started on a broken node dies there shortly after (at its start)."""
        twin, plan = self.twin, self.twin.faults
        for n in picked:
            i = twin.nodes.broken[n]
            if i is None:
                continue
            kind = FAULT_KINDS[int(plan.kind[i])]
            shared_gpu = kind.scope == "gpu" and job.nnodes == 0
            if shared_gpu and twin.rng.random() >= job.gpus / twin.gpn:
                continue
            at = twin.now + self.s.blackhole_min * 60.0
            twin.push(at, BLACKHOLE, job.id, job.token, n)
            return
