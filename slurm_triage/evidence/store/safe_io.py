"""The file handling every read of what a job wrote, and every write of root's records,
shares: directory fds opened O_NOFOLLOW, ownership checked on the fd, regular files opened
without following a symlink or blocking on a FIFO, size caps enforced while reading.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from slurm_triage.evidence.record import EvidenceRecord
from slurm_triage.frozen import Frozen
from slurm_triage.logs import get_logger

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeEvidence(Exception):
    """A file or directory failed a safety check; the message says which and why."""


class ReadResult(Frozen):
    records: tuple[EvidenceRecord, ...]
    rejected: tuple[str, ...]  # one line per ignored file or directory
    over_budget: str = ""  # why reading stopped early (the records read are then partial)


@contextmanager
def open_dir(name: str, dir_fd: int | None = None) -> Iterator[int]:
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeEvidence(f"{name}: is a symlink") from None
        if exc.errno == errno.ENOTDIR:
            raise UnsafeEvidence(f"{name}: not a directory") from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def check_owner(fd: int, name: str, owners: tuple[int, ...], shared_ok: bool = False) -> None:
    st = os.fstat(fd)
    if st.st_uid not in owners:
        raise UnsafeEvidence(f"{name}: owned by uid {st.st_uid}, expected {owners[0]}")
    if not shared_ok and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeEvidence(f"{name}: writable by group or others")


def open_owned(name: str, owner: int, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """An fd on a regular file owned by `owner`: never via a symlink, never blocking on a
    FIFO. The caller closes the fd."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeEvidence(f"{name}: is a symlink") from None
        raise UnsafeEvidence(f"{name}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeEvidence(f"{name}: not a regular file")
        if st.st_uid != owner:
            raise UnsafeEvidence(f"{name}: owned by uid {st.st_uid}, not the job's {owner}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_capped(name: str, dir_fd: int, owner: int, cap: int) -> bytes:
    fd, st = open_owned(name, owner, dir_fd)
    try:
        if st.st_size > cap:
            raise UnsafeEvidence(f"{name}: {st.st_size} bytes, over the {cap} cap")
        data = os.read(fd, cap + 1)
        if len(data) > cap:
            raise UnsafeEvidence(f"{name}: grew past the {cap} byte cap while read")
        return data
    finally:
        os.close(fd)


def older(name: str, dir_fd: int, newer_than: float | None) -> bool:
    """Whether the entry was last written before `newer_than` (not following symlinks)."""
    if newer_than is None:
        return False
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime < newer_than
    except OSError:
        return False


def log_rejections(job_id: int, rejected: list[str]) -> None:
    log = get_logger(job_id=job_id)
    for line in rejected:
        log.warning("evidence_rejected", detail=line)
