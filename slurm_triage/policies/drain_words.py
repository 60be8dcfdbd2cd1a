"""Our drain reasons as the node lifecycle writes and reads them: one grammar, parsed strictly.

Slurm's node reason is the one place every host sees a node's lifecycle state (the health
check on the node has no journal), so each state we set is a reason with our prefix and known
words (docs/repair.md):

    triage: <check> <why>                      a health check drained it   (gpu.lost ...)
    triage: <cause> job=<id>: <why>            a job end's decision drained it
    triage: lemon job=<id>: <why>              a decision drained it as a lemon
    triage: repairing reboot <subject>         we asked Slurm to reboot it
    triage: repairing gpu_reset gpu=<i,..|all> <subject>   its health check resets GPUs
    triage: burn-in pending <subject>          repaired; reconcile starts the burn-in
    triage: burn-in failed job=<id> <subject>  burn-in failed; repaired again, or RMA
    triage: rma <subject> <why>                out for a person; never resumed by us

slurmctld appends its own notes to a reboot's reason (`set_node_reason` in node_mgr.c,
22.05's `set_node_reboot_reason`): ` : reboot issued` (RebootProgram run; after it the node
is back once its reboot is no longer pending and it is not DOWN), ` : reboot complete` (back,
DOWN, for a reboot asked with nextstate=DOWN, as earlier builds of slurm-triage did),
` : reboot timed out` (ResumeTimeout passed); the last one present is the reboot's `stage`.

A reason's text after our words can hold bytes derived from a job's output or a node's
state, so nothing here evaluates it: the kind comes from the first words only, a cause must be
a taxonomy id, a check name must look like one, numbers must be digits. Anything else with our
prefix is UNKNOWN (left alone), anything without it is not ours.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence

from slurm_triage.frozen import Frozen
from slurm_triage.policies.reasons import DRAIN_PREFIX
from slurm_triage.taxonomy import Cause

_CAUSES = frozenset(c.value for c in Cause)
LEMON_SUBJECT = "lemon"  # a repair of a node drained as a lemon names no single cause
REBOOT_STAGES = ("reboot issued", "reboot complete", "reboot timed out")
_CHECK_NAME = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+$")
_JOB_WORD = re.compile(r"^job=(\d{1,12}):?$")
_GPUS_WORD = re.compile(r"^gpu=(all|\d{1,3}(?:,\d{1,3}){0,63})$")
# Slurm keeps a reason up to 4 KB; ours stay short so `sinfo -R` shows them whole.
MAX_REASON = 200


class DrainKind(enum.StrEnum):
    """What a node's reason says about where it is in our lifecycle."""

    CHECK = "check"  # a health check drained it
    JOB = "job"  # a job end's decision drained it (root-backed blame)
    LEMON = "lemon"  # a decision drained it for its history
    REPAIRING_REBOOT = "repairing_reboot"
    REPAIRING_GPU_RESET = "repairing_gpu_reset"
    BURN_IN_PENDING = "burn_in_pending"
    BURN_IN_FAILED = "burn_in_failed"
    RMA = "rma"
    UNKNOWN = "unknown"  # our prefix, words this version does not know: left alone
    NOT_OURS = "not_ours"  # an admin's, Slurm's, or empty


class DrainWords(Frozen):
    """A node reason read back: its kind, the check or cause it names (`subject`, "" when
    none), the job it names, the GPUs a reset is for (() = all)."""

    kind: DrainKind
    subject: str = ""
    job_id: int | None = None
    gpus: tuple[int, ...] = ()
    stage: str = ""  # a reboot's last slurmctld note (REBOOT_STAGES), "" before any
    xid: int | None = None  # gpu.xid's XID, from our own `XID <n> ...` words
    asks_rma: bool = False  # gpu.row_remap's "(RMA)": a failed remap needs the part replaced

    @property
    def keeps_node_out(self) -> bool:
        """Nothing but a person or reconcile's burn-in may return such a node: lemons, RMA,
        a repair or burn-in under way (`[repair] enabled` or not)."""
        return self.kind in _KEPT_OUT

    @property
    def ours(self) -> bool:
        return self.kind is not DrainKind.NOT_OURS


_KEPT_OUT = frozenset(
    {
        DrainKind.LEMON,
        DrainKind.REPAIRING_REBOOT,
        DrainKind.REPAIRING_GPU_RESET,
        DrainKind.BURN_IN_PENDING,
        DrainKind.BURN_IN_FAILED,
        DrainKind.RMA,
    }
)


def _subject(word: str) -> str:
    """A cause id, a check name or `lemon`, else "" (never the raw word)."""
    ok = word in _CAUSES or word == LEMON_SUBJECT or _CHECK_NAME.match(word)
    return word if ok else ""


def read_reason(reason: str) -> DrainWords:
    """The lifecycle meaning of a node's reason (pure, strict; see the module's grammar)."""
    if not reason.startswith(DRAIN_PREFIX):
        return DrainWords(DrainKind.NOT_OURS)
    words = reason[len(DRAIN_PREFIX) :].split()
    if not words:
        return DrainWords(DrainKind.UNKNOWN)
    head, rest = words[0], words[1:]
    if head == "rma":
        return DrainWords(DrainKind.RMA, _subject(rest[0]) if rest else "")
    if head == "lemon" and rest and (job := _JOB_WORD.match(rest[0])):
        return DrainWords(DrainKind.LEMON, job_id=int(job.group(1)))
    if head == "repairing" and rest:
        return _repairing(rest)
    if head == "burn-in" and rest:
        return _burn_in(rest)
    if head in _CAUSES and rest and (job := _JOB_WORD.match(rest[0])):
        return DrainWords(DrainKind.JOB, head, int(job.group(1)))
    if _CHECK_NAME.match(head):
        return _check(head, rest)
    return DrainWords(DrainKind.UNKNOWN)


def _check(name: str, words: Sequence[str]) -> DrainWords:
    """A health check's drain; gpu.xid's reason starts `XID <n> GPU ...`, gpu.row_remap's
    failure ends `(RMA)` (health_checks.kernel_log, health_checks.gpu)."""
    xid = None
    if name == "gpu.xid" and len(words) > 1 and words[0] == "XID" and words[1].isdigit():
        xid = int(words[1][:6])
    asks_rma = name == "gpu.row_remap" and tuple(words[-1:]) == ("(RMA)",)
    return DrainWords(DrainKind.CHECK, name, xid=xid, asks_rma=asks_rma)


def _stage(words: Sequence[str]) -> str:
    """The last of slurmctld's reboot notes (` : reboot complete`) in the reason."""
    text = " ".join(words)
    found = [(text.rfind(f": {s}"), s) for s in REBOOT_STAGES]
    place, stage = max(found)
    return stage if place >= 0 else ""


def _repairing(words: Sequence[str]) -> DrainWords:
    if words[0] == "reboot":
        subject = _subject(words[1]) if len(words) > 1 else ""
        return DrainWords(DrainKind.REPAIRING_REBOOT, subject, stage=_stage(words[2:]))
    if words[0] == "gpu_reset" and len(words) > 1 and (gpus := _GPUS_WORD.match(words[1])):
        chosen = () if gpus.group(1) == "all" else tuple(int(g) for g in gpus.group(1).split(","))
        subject = _subject(words[2]) if len(words) > 2 else ""
        return DrainWords(DrainKind.REPAIRING_GPU_RESET, subject, gpus=chosen)
    return DrainWords(DrainKind.UNKNOWN)


def _burn_in(words: Sequence[str]) -> DrainWords:
    if words[0] == "pending":
        return DrainWords(DrainKind.BURN_IN_PENDING, _subject(words[1]) if len(words) > 1 else "")
    if words[0] == "failed" and len(words) > 1 and (job := _JOB_WORD.match(words[1])):
        subject = _subject(words[2]) if len(words) > 2 else ""
        return DrainWords(DrainKind.BURN_IN_FAILED, subject, int(job.group(1)))
    return DrainWords(DrainKind.UNKNOWN)


def _clip(text: str) -> str:
    return " ".join(text.split())[:MAX_REASON]


def lemon_reason(job_id: int, why: str) -> str:
    """A decision drains a lemon node of job `job_id` with this reason."""
    return _clip(f"{DRAIN_PREFIX}lemon job={job_id}: {why}")


def reboot_reason(subject: str) -> str:
    return _clip(f"{DRAIN_PREFIX}repairing reboot {_subject(subject) or 'unknown'}")


def gpu_reset_reason(gpus: Sequence[int], subject: str, note: str = "") -> str:
    """`note` (after the subject, never read back): why the node's own reset did not work."""
    which = ",".join(str(g) for g in sorted(set(gpus))[:64]) if gpus else "all"
    subject = _subject(subject) or "unknown"
    return _clip(f"{DRAIN_PREFIX}repairing gpu_reset gpu={which} {subject} {note}")


def burn_in_pending_reason(subject: str, note: str = "") -> str:
    return _clip(f"{DRAIN_PREFIX}burn-in pending {_subject(subject) or 'unknown'} {note}")


def burn_in_failed_reason(job_id: int, subject: str, note: str = "") -> str:
    text = f"{DRAIN_PREFIX}burn-in failed job={job_id} {_subject(subject) or 'unknown'} {note}"
    return _clip(text)


def rma_reason(subject: str, why: str) -> str:
    return _clip(f"{DRAIN_PREFIX}rma {_subject(subject) or 'unknown'} {why}")
