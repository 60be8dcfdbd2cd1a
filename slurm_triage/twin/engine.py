"""The twin's discrete-event loop: jobs arrive, a FIFO scheduler with EASY backfill places
them, faults kill them, and the policy set in force (respond.py) decides what happens next.

Time is seconds from the start of the period. Events live in one heap; stale ones (a job's
end after it already failed, a repair of a node resumed meanwhile) carry a token that no
longer matches and are dropped. Arrivals and faults are fed from their pre-drawn arrays one
at a time, so the heap stays small. Scheduling passes run `sched_interval_s` after
something changed (a job ended or was queued, a node came back), as slurmctld's do.

The scheduling pass is scheduler.py; what follows a fault, respond.py and upkeep.py.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
import time

from slurm_triage.twin import measure as measure_mod
from slurm_triage.twin import scheduler
from slurm_triage.twin.jobs import (
    ARRIVE,
    END,
    ENDED,
    FAULT,
    HELD,
    KICK,
    PENDING,
    REVIEW,
    RUNNING,
    SAMPLE,
    SCHED,
    USER_FAIL,
    Inputs,
    Job,
    Run,
)
from slurm_triage.twin.measure import LARGE_GPUS, Measure, TwinResult, bucket_of
from slurm_triage.twin.nodes import Nodes
from slurm_triage.twin.policysets import PolicySet
from slurm_triage.twin.respond import Responder


class Twin:
    """One policy set's run over the scenario's period."""

    def __init__(self, inputs: Inputs, policy_set: PolicySet) -> None:
        s = inputs.scenario
        self.s, self.ps, self.workload, self.faults = s, policy_set, inputs.workload, inputs.faults
        self.rng = random.Random(s.seed * 7919 + 1)
        self.nodes = Nodes(s.nodes, s.gpus_per_node)
        for n in self.faults.lemons.tolist():
            self.nodes.lemon[n] = True
        self.gpn = s.gpus_per_node
        self.horizon = s.days * 86400.0
        self.warmup = s.warmup_days * 86400.0
        self.u0_h = s.restart_min / 60.0
        self.dt_h = s.ckpt_interval_min / 60.0
        self.w_h = s.ckpt_write_s / 3600.0
        self.now = 0.0
        self.heap: list[tuple[float, int, int, int, int, int]] = []
        self._seq = itertools.count()
        self.queue: list[tuple[float, int]] = []
        self.running: list[tuple[float, int]] = []  # whole-node jobs by expected end
        self.jobs: dict[int, Job] = {}
        self.live_runs: dict[int, Run] = {}
        self._ids = itertools.count(1)
        self._run_ids = itertools.count(1)
        self._next_arrival = 0
        self._next_fault = 0
        self._sched_pending = False
        self.busy_gpus = 0
        self.measure = Measure()
        self.respond = Responder(self)
        self.upkeep = self.respond.upkeep
        self._handlers = (
            self._on_arrive,
            self._on_end,
            self._on_user_fail,
            self._on_fault,
            self._on_blackhole,
            self.upkeep.on_check,
            self._on_node_up,
            self.upkeep.on_repaired,
            self.upkeep.on_resume_check,
            self.upkeep.on_admin_return,
            self.upkeep.on_review,
            self._on_release,
            self._on_resubmit,
            self._on_sched,
            self._on_kick,
            self._on_sample,
        )

    # -- the loop ------------------------------------------------------------------------

    def push(self, at: float, kind: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        heapq.heappush(self.heap, (at, next(self._seq), kind, a, b, c))

    def run(self) -> TwinResult:
        started = time.perf_counter()
        if self.s.fixed_sizes_gpus:
            for i in range(self.workload.count):
                self._new_run(int(self.workload.gpus[i]), float(self.workload.work_h[i]), True)
        elif self.workload.count:
            self.push(float(self.workload.submit_s[0]), ARRIVE)
        if self.faults.count:
            self.push(float(self.faults.time_s[0]), FAULT)
        self.push(0.0, SAMPLE)
        self.push(self.s.admin_review_h * 3600.0, REVIEW)
        heap, handlers, horizon = self.heap, self._handlers, self.horizon
        while heap:
            at, _, kind, a, b, c = heapq.heappop(heap)
            if at > horizon:
                break
            self.now = at
            handlers[kind](a, b, c)
        self.now = horizon
        self._close_period()
        capacity = self.s.total_gpus * (self.horizon - self.warmup) / 3600.0
        figures = measure_mod.figures(self.measure, capacity, int(self.faults.lemons.size))
        # What our actuators asked of the simulated Slurm, by door operation.
        figures["door_calls"] = dict(sorted(self.respond.door.calls.items()))
        return TwinResult(
            self.ps.name,
            self.ps.describe(),
            figures,
            self.measure.series,
            time.perf_counter() - started,
        )

    def kick(self, at: float | None = None) -> None:
        """Ask for a scheduling pass (at `at`, or one interval from now)."""
        if at is not None and at > self.now:
            self.push(at, KICK)
            return
        if not self._sched_pending:
            self._sched_pending = True
            self.push(self.now + self.s.sched_interval_s, SCHED)

    def _on_kick(self, *_: int) -> None:
        self.kick()

    def _on_sample(self, *_: int) -> None:
        drained, down = self.nodes.out_of_service()
        point = (self.now / 3600.0, drained, down, self.busy_gpus, len(self.queue))
        self.measure.series.append(point)
        self.push(self.now + self.s.sample_interval_h * 3600.0, SAMPLE)

    # -- jobs ----------------------------------------------------------------------------

    def _on_arrive(self, *_: int) -> None:
        i = self._next_arrival
        w = self.workload
        self._new_run(int(w.gpus[i]), float(w.work_h[i]), False)
        self._next_arrival = i + 1
        if i + 1 < w.count:
            self.push(float(w.submit_s[i + 1]), ARRIVE)

    def _new_run(self, gpus: int, work_h: float, stream: bool) -> None:
        run = Run(next(self._run_ids), gpus, work_h, self.now, stream)
        self.live_runs[run.id] = run
        self.submit(run)

    def submit(self, run: Run) -> Job:
        """A new Slurm job for the run, queued at the back (priority: now)."""
        nnodes = 0 if run.gpus < self.gpn else math.ceil(run.gpus / self.gpn)
        job = Job(next(self._ids), run, nnodes, self.now)
        self.jobs[job.id] = job
        self.enqueue(job, self.now)
        return job

    def enqueue(self, job: Job, begin: float) -> None:
        job.state = PENDING
        job.begin = begin
        bisect.insort(self.queue, (job.prio, job.id))
        self.kick(begin if begin > self.now else None)

    def dequeue(self, job: Job) -> None:
        i = bisect.bisect_left(self.queue, (job.prio, job.id))
        if i < len(self.queue) and self.queue[i][1] == job.id:
            del self.queue[i]

    def planned_h(self, remaining_h: float) -> float:
        """Wallclock of an attempt that runs to the end: u0, the work, a write after every
        checkpoint interval but the last (analytics.simulate's model)."""
        writes = max(math.ceil(remaining_h / self.dt_h - 1e-12) - 1, 0)
        return self.u0_h + remaining_h + self.w_h * writes

    def saved_h(self, elapsed_h: float, remaining_h: float) -> float:
        """Work kept by an attempt that dies after `elapsed_h`: its completed checkpoints."""
        chunks = math.floor(max(elapsed_h - self.u0_h, 0.0) / (self.dt_h + self.w_h))
        return min(chunks * self.dt_h, remaining_h)

    def _progress_h(self, elapsed_h: float, remaining_h: float) -> float:
        """Work done so far by a running attempt, checkpointed or not."""
        busy = max(elapsed_h - self.u0_h, 0.0)
        chunks = math.floor(busy / (self.dt_h + self.w_h))
        partial = min(busy - chunks * (self.dt_h + self.w_h), self.dt_h)
        return min(chunks * self.dt_h + partial, remaining_h)

    def start(self, job: Job, picked: list[int]) -> bool:
        """Start the job on `picked`, unless our Prolog turns a broken node away (then the
        node is drained and the job stays queued)."""
        if self.nodes.broken_set and not self.upkeep.prolog_passes(job, picked):
            return False
        now, run, nodes = self.now, job.run, self.nodes
        per_node = job.gpus if job.nnodes == 0 else self.gpn
        for n in picked:
            nodes.allocate(n, per_node, job)
        self.busy_gpus += per_node * len(picked)
        job.alloc, job.state, job.start = picked, RUNNING, now
        job.token += 1
        if run.first_start is None:
            run.first_start = now
        planned_s = self.planned_h(run.remaining_h) * 3600.0
        job.end_est = now + planned_s
        self.push(job.end_est, END, job.id, job.token)
        if job.nnodes:
            bisect.insort(self.running, (job.end_est, job.id))
        if self.rng.random() < self.s.user_failure_share:
            self.push(now + self.rng.random() * planned_s, USER_FAIL, job.id, job.token)
        if nodes.broken_set:
            self.respond.black_hole(job, picked)
        return True

    def finish_attempt(self, job: Job, infra_failure: bool) -> None:
        """Free the job's nodes and count the attempt that just ended."""
        now, nodes = self.now, self.nodes
        per_node = job.gpus if job.nnodes == 0 else self.gpn
        for n in job.alloc:
            nodes.release(n, per_node, job)
        self.busy_gpus -= per_node * len(job.alloc)
        if job.nnodes:
            i = bisect.bisect_left(self.running, (job.end_est, job.id))
            if i < len(self.running) and self.running[i][1] == job.id:
                del self.running[i]
        hours = (now - job.start) / 3600.0
        m = self.measure
        bucket = m.buckets[bucket_of(job.gpus)]
        bucket.attempts += 1
        bucket.attempt_hours += hours
        bucket.failed_attempts += int(infra_failure)
        if job.gpus >= LARGE_GPUS:
            m.large_attempts += 1
            m.large_failed += int(infra_failure)
        after_warmup = max(now - max(job.start, self.warmup), 0.0) / 3600.0
        m.allocated_gpu_h += job.gpus * after_warmup
        job.token += 1
        self.kick()

    def credit(self, job: Job, work_h: float) -> None:
        """Productive work of the attempt that ended, counted towards goodput after the
        warm-up (the share of the attempt that lies after it)."""
        job.run.productive_h += work_h
        job.run.remaining_h -= work_h
        span = self.now - job.start
        share = 1.0 if span <= 0 else max(self.now - max(job.start, self.warmup), 0.0) / span
        self.measure.productive_gpu_h += job.gpus * work_h * share

    def end_job(self, job: Job) -> None:
        job.state = ENDED
        self.jobs.pop(job.id, None)

    def _on_end(self, job_id: int, token: int, _: int) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.token != token or job.state != RUNNING:
            return
        self.credit(job, job.run.remaining_h)
        self.finish_attempt(job, False)
        self.end_job(job)
        self.run_done(job.run, completed=True)

    def _on_user_fail(self, job_id: int, token: int, _: int) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.token != token or job.state != RUNNING:
            return
        self.measure.user_failures += 1
        elapsed_h = (self.now - job.start) / 3600.0
        self.credit(job, self.saved_h(elapsed_h, job.run.remaining_h))
        alloc = job.alloc
        self.finish_attempt(job, False)
        self.respond.user_failure(job, alloc)

    def run_done(self, run: Run, completed: bool) -> None:
        """The run ended: completed, or a user's error ended it (not counted in ETTR)."""
        run.done = True
        self.live_runs.pop(run.id, None)
        if completed:
            self.measure.completed_runs += 1
            self._count_run(run, self.now)
        if run.stream and self.now < self.horizon:
            self._new_run(run.gpus, self.s.fixed_work_days * 24.0, True)

    def _count_run(self, run: Run, end: float) -> None:
        if run.first_start is None or run.first_start < self.warmup:
            return
        m = self.measure
        bucket = m.buckets[bucket_of(run.gpus)]
        bucket.runs += 1
        bucket.gpu_productive_h += run.gpus * run.productive_h
        bucket.gpu_wall_h += run.gpus * (end - run.first_start) / 3600.0
        bucket.first_wait_h += (run.first_start - run.submit) / 3600.0
        if run.gpus >= LARGE_GPUS:
            m.large_runs += 1
            m.large_runs_failed += int(run.failures > 0)

    def _on_release(self, job_id: int, _b: int, _c: int) -> None:
        """An operator deals with a held job: it is cancelled and resubmitted (a new job,
        with its own budget), as a person does with a job held for its requeue budget."""
        job = self.jobs.get(job_id)
        if job is None or job.state != HELD:
            return
        self.end_job(job)
        self.respond.forget(job.id)
        self.measure.resubmissions += 1
        self.submit(job.run)

    def _on_resubmit(self, run_id: int, _b: int, _c: int) -> None:
        run = self.live_runs.get(run_id)
        if run is not None and not run.done:
            self.measure.resubmissions += 1
            self.submit(run)

    def _close_period(self) -> None:
        """Runs still going at the end count with the work they have done so far."""
        for job in list(self.jobs.values()):
            if job.state == RUNNING:
                elapsed_h = (self.now - job.start) / 3600.0
                self.credit(job, self._progress_h(elapsed_h, job.run.remaining_h))
                self.measure.allocated_gpu_h += (
                    job.gpus * max(self.now - max(job.start, self.warmup), 0.0) / 3600.0
                )
        for run in self.live_runs.values():
            self._count_run(run, self.now)

    # -- faults --------------------------------------------------------------------------

    def _on_fault(self, *_: int) -> None:
        i = self._next_fault
        plan = self.faults
        self._next_fault = i + 1
        if i + 1 < plan.count:
            self.push(float(plan.time_s[i + 1]), FAULT)
        self.respond.fault(i)

    def _on_blackhole(self, job_id: int, token: int, node: int) -> None:
        job = self.jobs.get(job_id)
        fault = self.nodes.broken[node]
        if job is None or job.token != token or job.state != RUNNING or fault is None:
            return
        self.respond.job_failed(job, fault, node)

    def _on_node_up(self, node: int, _b: int, _c: int) -> None:
        self.nodes.set_down(node, False)
        self.kick()

    def _on_sched(self, *_: int) -> None:
        self._sched_pending = False
        scheduler.schedule(self)
