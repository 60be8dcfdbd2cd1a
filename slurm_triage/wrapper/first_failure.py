"""Which task of a step failed first, so the ranks that srun killed after it can say so.

With `srun --kill-on-bad-exit=1` one task's failure ends all the others: they die of
SIGTERM/SIGKILL with nothing wrong of their own, and alone each would read "unknown". The
first task that fails for a reason of its own claims a marker in the job's evidence
directory (`.first-failure.<step>.<restart>`, created with O_EXCL: one task wins) before its
wrapper exits, which is before srun learns of the exit and signals the others. A rank that
was killed with no cause of its own reads that one small file: O(1) per rank, no directory
listing, whatever the job's size.

The marker is the job user's own file in the job user's own directory, read only by that
user's wrappers to word their summary line; the epilog never reads it (it is not a `*.json`
record), so it carries no weight in any decision.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
from pathlib import Path

from slurm_triage.attribution import Attribution
from slurm_triage.frozen import Frozen
from slurm_triage.taxonomy import Cause
from slurm_triage.wrapper.identity import StepIdentity

MAX_MARKER_BYTES = 4096
MAX_FIELD_CHARS = 200
MARKER_MODE = 0o644
# How a task dies when Slurm (or anyone) ends it from outside.
KILLED_FROM_OUTSIDE = frozenset({signal.SIGTERM, signal.SIGKILL})


class FirstFailure(Frozen):
    """The task that failed first in this run of the step, and what it said of itself."""

    task: str
    node: str
    cause: str
    detail: str


def marker_path(evidence_dir: str | os.PathLike[str], identity: StepIdentity) -> Path:
    return (
        Path(evidence_dir) / identity.job_id / f".first-failure.{identity.step}.{identity.restart}"
    )


def is_collateral_candidate(signal_number: int | None, attribution: Attribution) -> bool:
    """Killed from outside with no evidence of its own: maybe ended after another task."""
    return signal_number in KILLED_FROM_OUTSIDE and attribution.cause is Cause.UNKNOWN


def claim(
    evidence_dir: str | os.PathLike[str], identity: StepIdentity, attribution: Attribution
) -> bool:
    """Record this task as the step's first failure unless another already is; never raises."""
    detail = " ".join(attribution.reason.split())[:MAX_FIELD_CHARS]
    body = {
        "task": identity.task,
        "node": identity.node,
        "cause": attribution.cause.value,
        "detail": detail,
    }
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(marker_path(evidence_dir, identity), flags, MARKER_MODE)
    except OSError:
        return False  # taken by an earlier task, or no job directory: nothing to say
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps(body).encode())
    os.close(fd)
    return True


def read(evidence_dir: str | os.PathLike[str], identity: StepIdentity) -> FirstFailure | None:
    """The step's first failure if another task claimed it; None for anything unexpected."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(marker_path(evidence_dir, identity), flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return None
        data = os.read(fd, MAX_MARKER_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _parse(data)


def _parse(data: bytes) -> FirstFailure | None:
    if len(data) > MAX_MARKER_BYTES:
        return None
    try:
        body = json.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    fields = [body.get(k) for k in ("task", "node", "cause", "detail")]
    if not all(isinstance(f, str) for f in fields):
        return None
    task, node, cause, detail = (" ".join(str(f).split())[:MAX_FIELD_CHARS] for f in fields)
    return FirstFailure(task, node, cause, detail)
