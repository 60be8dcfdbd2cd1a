"""The twin's scheduling pass: FIFO by priority with EASY backfill, and preemption for
jobs requeued after a failure.

Jobs go by priority (submit time; a requeued job keeps its place, a resubmitted one goes to
the back). The first job that does not fit gets a reservation at the time enough running
jobs will have ended (their expected end: the twin's time limits are exact); later jobs may
start only if they end before it, or on nodes the reservation does not need (EASY
backfill), at most `backfill_depth` jobs looked at per pass. A job of fewer GPUs than a node
packs onto partly used nodes first (best fit); larger jobs take whole nodes. A whole-node
job requeued after a failure (`urgent`: the paper's clusters restart interrupted jobs at
top priority) that does not fit may preempt running whole-node jobs of lower priority that
have run `preempt_after_h`; they are requeued, keeping their place.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_triage.twin.engine import Twin
    from slurm_triage.twin.jobs import Job

PREEMPT_RETRY_S = 600.0


def schedule(twin: Twin) -> None:
    """One pass over the queue."""
    queue, nodes, now = twin.queue, twin.nodes, twin.now
    idle = nodes.idle
    reserved, shadow, extra = False, math.inf, 0
    i = scanned = 0
    while i < len(queue) and scanned < twin.s.backfill_depth:
        if not idle and not nodes.has_partial():
            break
        scanned += 1
        job = twin.jobs[queue[i][1]]
        if job.begin > now:
            i += 1
            continue
        est = twin.planned_h(job.run.remaining_h) * 3600.0
        late = reserved and now + est > shadow
        if job.nnodes == 0:
            n = nodes.pick_partial(job.gpus, job.excluded)
            took_idle = False
            if n is None and idle and (not late or extra >= 1):
                picked = nodes.pick_idle(1, job.excluded)
                n, took_idle = (picked[0], True) if picked else (None, False)
            if n is not None and twin.start(job, [n]):
                del queue[i]
                extra -= int(took_idle and late)
            else:
                i += 1
            continue
        if late and job.nnodes > extra:
            i += 1
            continue
        picked = nodes.pick_idle(job.nnodes, job.excluded)
        if picked is None and not reserved and _preempt_for(twin, job):
            picked = nodes.pick_idle(job.nnodes, job.excluded)
        if picked is not None and twin.start(job, picked):
            del queue[i]
            extra -= job.nnodes if late else 0
            continue
        if not reserved:
            reserved = True
            shadow, extra = _reservation(twin, job.nnodes)
        i += 1


def _reservation(twin: Twin, need: int) -> tuple[float, int]:
    """When the blocked job can start (running jobs' expected ends), and the nodes beyond
    its need free by then; (inf, 0) when it cannot be placed at all."""
    have = len(twin.nodes.idle)
    for end_est, job_id in twin.running:
        have += twin.jobs[job_id].nnodes
        if have >= need:
            return end_est, have - need
    return math.inf, 0


def _preempt_for(twin: Twin, job: Job) -> bool:
    """Free nodes for an urgent job by requeueing running whole-node jobs of lower
    priority that have run `preempt_after_h`, latest started first (least work lost).
    Tried at most every PREEMPT_RETRY_S per job."""
    if not (twin.s.preemption and job.urgent) or job.next_preempt > twin.now:
        return False
    job.next_preempt = twin.now + PREEMPT_RETRY_S
    nodes = twin.nodes
    need = job.nnodes - sum(1 for n in nodes.idle if n not in job.excluded)
    oldest = twin.now - twin.s.preempt_after_h * 3600.0
    candidates = [
        other
        for _, other_id in twin.running
        if (other := twin.jobs[other_id]).prio > job.prio
        and not other.urgent
        and other.start <= oldest
    ]
    candidates.sort(key=lambda other: -other.start)
    victims, freed = [], 0
    for other in candidates:
        if freed >= need:
            break
        usable = [n for n in other.alloc if n not in job.excluded and nodes.usable(n)]
        if usable:
            victims.append(other)
            freed += len(usable)
    if freed < need:
        return False
    for other in victims:
        _preempt(twin, other)
    return True


def _preempt(twin: Twin, job: Job) -> None:
    """Requeue a running job for a higher priority: it keeps its checkpoints and place."""
    m = twin.measure
    elapsed_h = (twin.now - job.start) / 3600.0
    saved = twin.saved_h(elapsed_h, job.run.remaining_h)
    m.preemptions += 1
    m.preempted_gpu_h_lost += job.gpus * max(elapsed_h - saved, 0.0)
    twin.credit(job, saved)
    twin.finish_attempt(job, False)
    job.restarts += 1  # Slurm counts a preemption's requeue as a restart
    twin.enqueue(job, twin.now)
