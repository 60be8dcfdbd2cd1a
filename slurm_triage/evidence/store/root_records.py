"""Root's own records (the node Epilog's, and a failed Prolog's): written atomically where no
user can touch them, read back only from there.

    <evidence_dir>/_root/<job>/<node>.json           the Epilog's record
    <evidence_dir>/_root/<job>/<node>.earlier.json   the Epilog's kernel events of the run
                                                     before the job's window, when any
    <evidence_dir>/_root/<job>/<node>.prolog.json    the Prolog's, when it turned the job away
    <evidence_dir>/_root/rma/<node>-<time>.json      an RMA evidence bundle (nodes reconcile)

`_root` and each job's directory in it must be owned by root (by the writer's euid): a user
can neither plant nor replace a root record.
"""

from __future__ import annotations

import os
import stat
from contextlib import suppress

from slurm_triage.atomic import write_at
from slurm_triage.evidence.facts import Source
from slurm_triage.evidence.record import (
    MAX_RECORD_BYTES,
    EvidenceError,
    EvidenceRecord,
    parse_record,
)
from slurm_triage.evidence.store.safe_io import (
    DIR_FLAGS,
    ReadResult,
    UnsafeEvidence,
    check_owner,
    log_rejections,
    older,
    open_dir,
    read_capped,
)

ROOT_AREA = "_root"
# The Epilog's record of the run before the job's window, and its step: the decision lets its
# facts count only when a watchdog says the job hung that long (attribution.engine.root_window).
EARLIER_SUFFIX = ".earlier.json"
EARLIER_STEP = "epilog-earlier"
# The epilog's records, and the prolog's when it turned the job away.
ROOT_SUFFIXES = (".json", EARLIER_SUFFIX, ".prolog.json")


def read_root_records(
    evidence_dir: str,
    job_id: int,
    nodes: list[str] | tuple[str, ...],
    cap: int = MAX_RECORD_BYTES,
    newer_than: float | None = None,
) -> ReadResult:
    """The epilogs' (and failed prologs') records for these nodes, trusted only from root's
    own area; records older than `newer_than` (an earlier run) are skipped."""
    records: list[EvidenceRecord] = []
    rejected: list[str] = []
    try:
        with (
            open_dir(evidence_dir) as base,
            open_dir(ROOT_AREA, base) as area,
            open_dir(str(job_id), area) as job_fd,
        ):
            check_owner(area, ROOT_AREA, (0,))
            check_owner(job_fd, f"{ROOT_AREA}/{job_id}", (0,))
            for node in nodes:
                for name in (f"{node}{suffix}" for suffix in ROOT_SUFFIXES):
                    if older(name, job_fd, newer_than):
                        continue
                    record = _root_record(name, job_fd, cap, job_id, node, rejected)
                    if record is not None:
                        records.append(record)
    except FileNotFoundError:
        pass
    except (UnsafeEvidence, OSError) as exc:
        rejected.append(f"{evidence_dir}/{ROOT_AREA}/{job_id}: {exc}")
    log_rejections(job_id, rejected)
    return ReadResult(tuple(records), tuple(rejected))


def _root_record(
    name: str, job_fd: int, cap: int, job_id: int, node: str, rejected: list[str]
) -> EvidenceRecord | None:
    try:
        record = parse_record(read_capped(name, job_fd, 0, cap), max_bytes=cap)
    except UnsafeEvidence as exc:
        if "cannot open" not in str(exc):
            rejected.append(str(exc))
        return None
    except EvidenceError as exc:
        rejected.append(f"{name}: {exc}")
        return None
    if record.collected_by is Source.ROOT and record.job_id == str(job_id) and record.node == node:
        return record
    rejected.append(f"{name}: not a root record for job {job_id}/{node}")
    return None


def root_record_present(
    evidence_dir: str, job_id: int, node: str, newer_than: float | None = None
) -> bool:
    path = os.path.join(evidence_dir, ROOT_AREA, str(job_id), f"{node}.json")
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (newer_than is None or st.st_mtime >= newer_than)


def _ensure_root_dir(name: str, parent_fd: int) -> int:
    with suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        check_owner(fd, name, (os.geteuid(),))
    except UnsafeEvidence:
        os.close(fd)
        raise
    return fd


def write_root_record(
    evidence_dir: str, job_id: int, node: str, data: bytes, suffix: str = ".json"
) -> str:
    """Write root's record atomically where no user can touch it; returns its path."""
    with open_dir(evidence_dir) as base:
        area = _ensure_root_dir(ROOT_AREA, base)
        try:
            job_fd = _ensure_root_dir(str(job_id), area)
        finally:
            os.close(area)
        try:
            # A full disk leaves no partial record behind for the decision to trip on.
            write_at(job_fd, f"{node}{suffix}", data, mode=0o644)
        finally:
            os.close(job_fd)
    return os.path.join(evidence_dir, ROOT_AREA, str(job_id), f"{node}{suffix}")


def write_root_file(evidence_dir: str, area: str, name: str, data: bytes) -> str:
    """Write `_root/<area>/<name>` atomically where no user can touch it (both directories
    owned by this euid, no symlink followed); returns its path. `area` and `name` are ours,
    one path component each."""
    for part in (area, name):
        if not part or "/" in part or part in (".", ".."):
            raise ValueError(f"not one path component: {part!r}")
    with open_dir(evidence_dir) as base:
        top = _ensure_root_dir(ROOT_AREA, base)
        try:
            area_fd = _ensure_root_dir(area, top)
        finally:
            os.close(top)
        try:
            write_at(area_fd, name, data, mode=0o644)
        finally:
            os.close(area_fd)
    return os.path.join(evidence_dir, ROOT_AREA, area, name)


def read_root_file(
    evidence_dir: str, area: str, name: str, cap: int = MAX_RECORD_BYTES
) -> bytes | None:
    """`_root/<area>/<name>` when root owns it and its directories (no symlink followed,
    size-capped); None when it is absent or cannot be trusted."""
    try:
        with (
            open_dir(evidence_dir) as base,
            open_dir(ROOT_AREA, base) as top,
            open_dir(area, top) as area_fd,
        ):
            check_owner(top, ROOT_AREA, (0,))
            check_owner(area_fd, f"{ROOT_AREA}/{area}", (0,))
            return read_capped(name, area_fd, 0, cap)
    except (UnsafeEvidence, OSError):
        return None
