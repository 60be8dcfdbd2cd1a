"""The one tier scale of attribution: how strong a kind of evidence is (higher beats lower
on any node). A log signature's tier is fixed in its row (signatures.py); every other fact's
is given when it becomes a Finding (findings.py). The scale encodes the taxonomy's rules."""

from __future__ import annotations

from enum import IntEnum


class Tier(IntEnum):
    INFO = 0  # says nothing about the cause: never a finding
    EXIT = 1  # a failure with no meaning: non-zero exit, state FAILED, SIGKILL, srun's end
    WEAK = 5  # a weak reading: SIGABRT, an abort banner, a save failure, app XIDs after a fault
    SYMPTOM = 10  # what a rank prints when something else failed (NCCL timeouts, remote errors)
    WARNING = 12  # a non-decisive driver/hardware XID (a warning the catalogue says to watch)
    ERROR = 30  # a real error of the job on this node (CUDA OOM, illegal access, ENOSPC)
    INFRA = 40  # a hardware or infrastructure fault named only by user-collected evidence
    HANG = 45  # the wrapper ended the job for lack of progress
    SCHEDULER = 50  # Slurm's own decision (TIMEOUT, PREEMPTED, CANCELLED, NODE_FAIL, OOM)
    ROOT_HW = 60  # root-collected hardware/infrastructure fault (kernel log, NVML, a check)
