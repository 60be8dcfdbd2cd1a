"""Files the metrics live in: written whole and atomically, under a bounded lock.

node_exporter's textfile collector reads `*.prom` files at every scrape, so a half-written
file must never be seen: slurm_triage.atomic writes a hidden temporary file in the same
directory (its name does not end in `.prom`), 0644 (node_exporter runs as its own user),
and renames it over the old one. Writers of one file (concurrent decisions, a Prolog beside a
health check) are serialised with an flock taken for at most `LOCK_WAIT_S`: an older
snapshot renamed over a newer one would make counters go back, which Prometheus reads as a
reset. Past the wait we give up (`MetricsBusy`) rather than hold up a Prolog.

The lock file `<path>.lock` is the directory's owner's, 0600: on the controller root
(`nodes reconcile`) and SlurmUser (the decision) both write the controller's textfile in
SlurmUser's directory, and a lock left as root's would refuse SlurmUser (EACCES) at every
decision. So root hands a lock it finds or creates to the directory's owner; root can take
any lock, the owner takes its own, and no other user can open it to hold it. The textfile
itself needs nothing: renaming over root's file needs only write access to the directory.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

LOCK_WAIT_S = 1.0
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_OPEN_LOCK = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class MetricsBusy(OSError):
    """Another process held the lock for longer than we may wait."""


@contextmanager
def locked(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold an exclusive flock on `<path>.lock` (0600, the directory owner's) while the
    body runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    fd = _open_lock(lock)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise MetricsBusy(
                        f"{lock}: held by another process for over {wait_s:g}s"
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _open_lock(lock: Path) -> int:
    """The lock file, opened (created 0600 if missing) in its directory, and as root handed
    to the directory's owner."""
    dir_fd = os.open(lock.parent, _OPEN_DIR)
    try:
        fd = os.open(lock.name, _OPEN_LOCK, 0o600, dir_fd=dir_fd)
        if os.geteuid() == 0:  # a lock a user creates is that user's already
            _give_to_directory_owner(fd, dir_fd)
        return fd
    finally:
        os.close(dir_fd)


def _give_to_directory_owner(fd: int, dir_fd: int) -> None:
    """Make the lock open at `fd` the owner's of the directory open at `dir_fd`, so that the
    owner can take it too. Who owns the directory can replace the textfile anyway: this gives
    no one a new power. Only an empty regular file with one link is changed, never a file
    linked here from elsewhere. Best effort: a root without CAP_CHOWN (a root-squashed NFS)
    still holds its own lock."""
    with suppress(OSError):
        directory, info = os.fstat(dir_fd), os.fstat(fd)
        if (
            stat.S_ISREG(info.st_mode)
            and info.st_nlink == 1
            and info.st_size == 0
            and info.st_uid != directory.st_uid
        ):
            os.fchown(fd, directory.st_uid, directory.st_gid)
