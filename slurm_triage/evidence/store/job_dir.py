"""The Prolog's (root's) `<evidence_dir>/<job>`: a directory of the job's user before the job
starts, whatever another user planted at that name in the shared 1777 evidence directory.
"""

from __future__ import annotations

import os
import stat
from contextlib import suppress

from slurm_triage.evidence.store.safe_io import UnsafeEvidence, open_dir
from slurm_triage.logs import get_logger

JOB_DIR_MODE = 0o755
_SQUAT_TRIES = 3


def prepare_job_dir(evidence_dir: str, job_id: int, uid: int, gid: int) -> str | None:
    """The Prolog's (root's) `<evidence_dir>/<job>`: a directory of the job's user, 0755,
    before the job starts. In the 1777 evidence directory anyone may have created that name
    first (a directory, a file, a symlink) to deny the job its evidence; whatever is there
    and is not the job user's directory (or root's: another node's prolog, half-way) is
    renamed aside, unfollowed, to `.squatted.<job>.<random>`. Returns that name, or None
    when nothing was squatting. Raises UnsafeEvidence or OSError when it cannot."""
    name = str(job_id)
    moved: str | None = None
    with open_dir(evidence_dir) as base:
        for _ in range(_SQUAT_TRIES):
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=base, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid in (uid, os.geteuid()):
                break
            if st is not None:
                # secrets.token_hex(4) is this (os.urandom); importing secrets costs every
                # Prolog ~8 ms (hashlib, hmac, random) for a name picked almost never.
                aside = f".squatted.{job_id}.{os.urandom(4).hex()}"
                with suppress(FileNotFoundError):  # another node's prolog moved it first
                    os.rename(name, aside, src_dir_fd=base, dst_dir_fd=base)
                    moved = aside
                    _log_squat(job_id, st, aside)
            try:
                os.mkdir(name, JOB_DIR_MODE, dir_fd=base)
                break
            except FileExistsError:
                continue  # re-created meanwhile: look again
        else:
            raise UnsafeEvidence(
                f"{evidence_dir}/{name}: still squatted after {_SQUAT_TRIES} tries"
            )
        _give_to_user(name, base, uid, gid)
    return moved


def _give_to_user(name: str, base: int, uid: int, gid: int) -> None:
    """chown/chmod through an fd of the directory itself (never a path that could be swapped)."""
    with open_dir(name, base) as fd:
        st = os.fstat(fd)
        if st.st_uid not in (uid, os.geteuid()):
            raise UnsafeEvidence(f"{name}: owned by uid {st.st_uid}, expected {uid}")
        try:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, JOB_DIR_MODE)
        except OSError:
            if st.st_uid != uid:  # ours and useless to the user (root_squash): leave no trace
                with suppress(OSError):
                    os.rmdir(name, dir_fd=base)
            raise


def _log_squat(job_id: int, st: os.stat_result, aside: str) -> None:
    kind = (
        "symlink"
        if stat.S_ISLNK(st.st_mode)
        else "directory"
        if stat.S_ISDIR(st.st_mode)
        else "file"
        if stat.S_ISREG(st.st_mode)
        else "special file"
    )
    get_logger(job_id=job_id).warning(
        "evidence_dir_squatted", kind=kind, owner_uid=st.st_uid, moved_to=aside
    )
