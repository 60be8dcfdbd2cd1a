"""Slurm's job states: the one JobState of slurm-triage (the door's jobs, accounting, the
evidence's SlurmState facts, the decision), with Slurm's spellings parsed in one place.

Standard library only: the wrapper and the node programs import it through evidence.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    """Slurm's base job states (squeue(1) JOB STATE CODES), plus UNKNOWN for anything else."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    EXPEDITING = "EXPEDITING"  # 25.11: an expedited requeue under way
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SIGNALING = "SIGNALING"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    LAUNCH_FAILED = "LAUNCH_FAILED"  # the job's launch failed (attribution: a health cause)
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, text: str | None) -> JobState:
        """Map Slurm's spellings ('CANCELLED by 0', 'CA', 'node_fail') to a state."""
        word = (text or "").strip().split(" ")[0].upper()
        word = _SHORT_CODES.get(word, word)
        try:
            return cls(word)
        except ValueError:
            return cls.UNKNOWN

    @property
    def finished(self) -> bool:
        return self in _FINISHED

    @property
    def shown_base(self) -> JobState:
        """The base state, as far as this shown state tells it: Slurm's text (and pyslurm's
        `state`) shows a flag (COMPLETING, EXPEDITING, REQUEUED, ...) in place of the base
        state whenever one is set, so a flag tells nothing of the base (UNKNOWN)."""
        return JobState.UNKNOWN if self in _SHOWN_FLAGS else self


_SHORT_CODES = {
    "PD": "PENDING",
    "CF": "CONFIGURING",
    "R": "RUNNING",
    "S": "SUSPENDED",
    "CG": "COMPLETING",
    "CD": "COMPLETED",
    "CA": "CANCELLED",
    "F": "FAILED",
    "TO": "TIMEOUT",
    "NF": "NODE_FAIL",
    "PR": "PREEMPTED",
    "BF": "BOOT_FAIL",
    "DL": "DEADLINE",
    "OOM": "OUT_OF_MEMORY",
    "RQ": "REQUEUED",
    "RH": "REQUEUE_HOLD",
    "RF": "REQUEUE_FED",
    "RS": "RESIZING",
    "RV": "REVOKED",
    "SI": "SIGNALING",
    "SE": "SPECIAL_EXIT",
    "SO": "STAGE_OUT",
    "ST": "STOPPED",
}
# job_state_string()'s flags in its order (slurm_protocol_defs.c): Slurm's text (and
# pyslurm's `state`) shows the first one set instead of the base state.
SHOWN_FLAG_ORDER = (
    JobState.COMPLETING,
    JobState.STAGE_OUT,
    JobState.CONFIGURING,
    JobState.EXPEDITING,
    JobState.RESIZING,
    JobState.REQUEUED,
    JobState.REQUEUE_FED,
    JobState.REQUEUE_HOLD,
    JobState.SPECIAL_EXIT,
    JobState.STOPPED,
    JobState.REVOKED,
    JobState.RESV_DEL_HOLD,
    JobState.SIGNALING,
)
_SHOWN_FLAGS = frozenset({*SHOWN_FLAG_ORDER, JobState.UNKNOWN})
_FINISHED = frozenset(
    {
        JobState.COMPLETED,
        JobState.CANCELLED,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
        JobState.OUT_OF_MEMORY,
        JobState.REVOKED,
        JobState.SPECIAL_EXIT,
    }
)


def parse_job_state(text: str) -> tuple[JobState, int | None]:
    """`"CANCELLED by 1234"` → (CANCELLED, 1234), long names and squeue's codes alike;
    ValueError naming the valid states for anything else (UNKNOWN included): for input a
    person or a record gave, where a typo must not pass as a state."""
    words = text.strip().split()
    by_uid: int | None = None
    if len(words) == 3 and words[1].lower() == "by" and words[2].isdigit():
        by_uid = int(words[2])
        words = words[:1]
    name = words[0].upper().rstrip("+") if len(words) == 1 else ""
    name = _SHORT_CODES.get(name, name)
    if name and name != "UNKNOWN" and name in JobState.__members__:
        return JobState[name], by_uid
    valid = ", ".join(s.value for s in JobState if s is not JobState.UNKNOWN)
    raise ValueError(f"unknown Slurm job state {text!r} (valid: {valid}, or 'CANCELLED by UID')")
