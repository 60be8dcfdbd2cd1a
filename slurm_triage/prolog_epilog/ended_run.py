"""What Slurm says of the run that ended, read before the decision claims it: how it ended
(EndState), and whether Slurm already requeued, held or restarted it itself.

At EpilogSlurmctld time slurmctld shows a job that just ended as COMPLETING (the end state
is in accounting), or, when Slurm requeued it before asking us (its Prolog turned it away,
RequeueExit, an expedited requeue), as pending or running again; Slurm then reports the
next run's restart count, so the journal key must be the run that ended.
"""

from __future__ import annotations

import re
from dataclasses import replace

from slurm_triage.clock import Clock
from slurm_triage.config import Config
from slurm_triage.frozen import Frozen
from slurm_triage.job_state import JobState, parse_job_state
from slurm_triage.logs import get_logger
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm import JobInfo, SlurmDoor, SlurmError

# Slurm 25.11's reason for an expedited requeue it held (no Epilog failed); the state shows
# REQUEUE_HOLD, or PENDING once the job has been updated.
SLURM_HELD_REQUEUE_REASON = "job_requeued_in_held_state"
WINDOW_BEFORE_S = 600.0
CLOCK_SLACK_S = 5.0
# How long a detached decision waits for Slurm to settle an expedited requeue: the job stays
# COMPLETING until its processes are gone (up to KillWait, 30 s by default, after SIGTERM)
# and every node's Epilog has ended (ours within decision.epilog_deadline_s plus the
# breaker's settle time; a site's own may run longer). The detached process costs nothing
# while it waits, but the decider's thread holds one of its slots and a stop waits for it:
# three minutes. Asked of slurmctld every SETTLE_POLL_S at most.
EXPEDITED_SETTLE_S = 180.0
SETTLE_POLL_S = (0.05, 2.0)
_RUNNING_AGAIN = frozenset(
    {
        JobState.PENDING,
        JobState.CONFIGURING,
        JobState.RUNNING,
        JobState.REQUEUED,
        JobState.REQUEUE_HOLD,
        JobState.SUSPENDED,
        JobState.EXPEDITING,  # 25.11: pending after an expedited requeue, until it starts
    }
)
# While EpilogSlurmctld runs, slurmctld shows COMPLETING; the reason says how it ended.
_REASON_STATE = {
    "NonZeroExitCode": JobState.FAILED,
    "RaisedSignal": JobState.FAILED,
    "JobLaunchFailure": JobState.FAILED,
    "NodeDown": JobState.NODE_FAIL,
    "NodeFail": JobState.NODE_FAIL,
    "TimeLimit": JobState.TIMEOUT,
    "Preempted": JobState.PREEMPTED,
    "OutOfMemory": JobState.OUT_OF_MEMORY,
}


class EndState(Frozen):
    """How a run ended, and for CANCELLED the uid that cancelled it."""

    state: JobState
    by_uid: int | None = None

    @classmethod
    def parse(cls, text: str) -> EndState:
        """sacct's State ('CANCELLED by 0', 'FAILED'); one it does not know is UNKNOWN."""
        try:
            return cls(*parse_job_state(text))
        except ValueError:
            return cls(JobState.parse(text))

    @property
    def text(self) -> str:
        """As sacct writes it (the journal's `state`)."""
        return (
            f"{self.state.value} by {self.by_uid}" if self.by_uid is not None else self.state.value
        )


def final_state(door: SlurmDoor, job: JobInfo, wait_s: float, clock: Clock) -> EndState:
    """The job's end state: from the controller once final, else from accounting (slurmctld
    shows COMPLETING while EpilogSlurmctld runs), else from the controller's base state
    (CANCELLED, with no uid) or reason."""
    if job.state.finished:
        return EndState(job.state)
    if job.state is JobState.COMPLETING:
        # 24.05+ (scontrol --json) shows the state under COMPLETING: no need to wait for
        # accounting, except for a cancel, where accounting says who cancelled.
        if job.base_state is JobState.PENDING:
            return EndState(JobState.REQUEUED)  # Slurm requeued the run that ended
        if job.base_state.finished and job.base_state is not JobState.CANCELLED:
            return EndState(job.base_state)
    deadline = clock.monotonic() + wait_s
    while True:
        try:
            accounted = door.accounted_job(job.job_id)
            if accounted.state is JobState.REQUEUED:
                return EndState(JobState.REQUEUED)  # Slurm requeued this run itself
            if accounted.state.finished:
                return EndState.parse(accounted.state_text or accounted.state.value)
        except SlurmError:
            pass
        if clock.monotonic() >= deadline:
            break
        clock.sleep(0.25)
    if job.state is JobState.COMPLETING and job.base_state is JobState.CANCELLED:
        # The controller said CANCELLED; accounting (slow or down) only did not say by whom.
        # Kept CANCELLED, uid unknown: a person's (or Slurm's) cancel all the same, never the
        # job's failure, and not requeued (policies.rules.cancelled). Read as FAILED, the
        # cancel banner became collateral and the job was requeued for what the cancel did.
        return EndState(JobState.CANCELLED)
    # "NonZeroExitCode", "RaisedSignal:9(Killed)", "NodeDown ..."
    fallback = _REASON_STATE.get(re.split(r"[ :]", job.state_reason, maxsplit=1)[0])
    if fallback is not None:
        return EndState(fallback)
    ok = (job.exit_code, job.exit_signal) == (0, 0)
    return EndState(JobState.COMPLETED if ok else JobState.FAILED)


def settle_bound_s(config: Config) -> float:
    """The longest an expedited failure's decision can take before its own decision starts:
    the read of the job before it detaches, the settle, and the settle's last pause and read
    past its deadline."""
    return config.slurm.timeout_s + EXPEDITED_SETTLE_S + SETTLE_POLL_S[1] + config.slurm.timeout_s


def expedited_failure(job: JobInfo, end: JobEnd) -> bool:
    """A failed run of an `--requeue=expedite` job, still COMPLETING: Slurm restarts it, or
    requeues it held, only once EpilogSlurmctld has ended, and only for a run whose exit
    status is non-zero (job_mgr.c _set_job_requeue_exit_value, WEXITSTATUS: a run ended by
    a signal is not expedited)."""
    code = end.exit_code if end.exit_code is not None else job.exit_code
    return job.expedited_requeue and job.state is JobState.COMPLETING and code != 0


def _settled(door: SlurmDoor, job: JobInfo, deadline: float, clock: Clock) -> JobInfo:
    """The job once Slurm has finished an expedited requeue (restarted it, or requeued it
    held): it stays COMPLETING until every Epilog and EpilogSlurmctld ended. Bounded; the
    polls back off, since a mass failure has one such wait per job."""
    pause, longest = SETTLE_POLL_S
    while job.state is JobState.COMPLETING and clock.monotonic() < deadline:
        clock.sleep(pause)
        pause = min(longest, pause * 2)
        job = door.job(job.job_id)
    return job


class EndedRun(Frozen):
    """The run that ended, as Slurm has it: the job (settled), the end keyed by the run that
    ended, how it ended, and what Slurm already did with it."""

    job: JobInfo
    end: JobEnd
    state: EndState
    requeued_by_slurm: bool  # pending or running again, or accounting says REQUEUED
    held_by_slurm: bool  # an expedited requeue Slurm held, for us to release or leave
    restarted_by_slurm: bool  # an expedited requeue Slurm restarted at once

    @property
    def completed(self) -> bool:
        return self.state.state is JobState.COMPLETED


def read_ended_run(
    config: Config,
    end: JobEnd,
    door: SlurmDoor,
    job: JobInfo,
    clock: Clock,
    started: float,
    *,
    settle: bool = True,
) -> EndedRun:
    """Read what Slurm says of this end (`started`: the decision's monotonic start). Only the
    detached decision of an expedited failure waits (`settle`) for Slurm to settle it: in the
    hook the job stays COMPLETING until the hook ends, whatever else happens."""
    expedited = expedited_failure(job, end)
    if expedited and settle:
        job = _settled(door, job, started + EXPEDITED_SETTLE_S, clock)
    if end.exit_code is None:
        end = replace(end, exit_code=job.exit_code, exit_signal=job.exit_signal)
    # Slurm's own hold of an expedited requeue follows a failed run, and counts the requeue
    # after this hook. An operator's `scontrol requeuehold` sets the same reason, but counts
    # it before the hook, on a run that had not ended (0:0; job_mgr.c _job_requeue_op): that
    # hold is theirs, never ours to release or cancel.
    held_by_slurm = (
        job.expedited_requeue
        and end.exit_code not in (None, 0)
        and job.restart_count > end.restart
        and (job.state is JobState.REQUEUE_HOLD or job.state_reason == SLURM_HELD_REQUEUE_REASON)
    )
    unsettled = expedited and job.state is JobState.COMPLETING
    # An expedited requeue is decided after the hook that read the ended run's restart count
    # (detached): a higher count now means Slurm requeued that run, whatever the next run is
    # doing by now (it may even have finished).
    requeued_since = job.expedited_requeue and job.restart_count > end.restart
    if unsettled:  # Slurm will requeue it (restart or hold) once it settles: never we
        get_logger(job_id=end.job_id).warning(
            "decision_expedited_unsettled", waited_s=EXPEDITED_SETTLE_S if settle else 0.0
        )
    state = (
        EndState(JobState.REQUEUED)
        if job.state in _RUNNING_AGAIN or requeued_since or unsettled
        # Where the controller shows only COMPLETING (before 24.05), even a clean exit is
        # asked of accounting: when Slurm requeues a job itself (its Prolog failed) it still
        # shows 0:0 and no reason at this point.
        else final_state(door, job, min(5.0, config.decision.wait_for_nodes_s), clock)
    )
    requeued_by_slurm = state.state is JobState.REQUEUED
    if requeued_by_slurm:
        # Its next start may already be set; the window of the run that ended will do. A
        # Prolog-failure requeue reports the next run's count already; an expedited one not.
        end = replace(
            end,
            restart=end.restart if requeued_since or unsettled else max(0, job.restart_count - 1),
            records_since=end.ended_at - WINDOW_BEFORE_S,
        )
    elif job.start_time is not None and job.start_time <= end.ended_at:
        end = replace(end, records_since=job.start_time - CLOCK_SLACK_S)
    return EndedRun(
        job=job,
        end=end,
        state=state,
        requeued_by_slurm=requeued_by_slurm,
        held_by_slurm=held_by_slurm,
        restarted_by_slurm=job.expedited_requeue and requeued_by_slurm and not held_by_slurm,
    )
