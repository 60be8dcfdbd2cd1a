"""The one way slurm-triage replaces a file: whole, atomically, never through a planted link.

A reader (node_exporter, the decision, the next health run, a job's fake NVML) must never
see half a file, and a writer running as root must never write through a link that another
user planted in a shared directory. So: a temporary file `.<name>.<pid>.<thread>.<random>.tmp`
is created new beside the target (O_EXCL | O_NOFOLLOW, relative to a directory fd), given its
mode whatever the umask, written whole and fsynced, renamed over the target, and the
directory fsynced. Any failure (a full disk) removes the temporary file and raises the
OSError. The name is each call's own: threads of one process (the node agent serves Prologs
in parallel) never write or rename each other's, and no other user can guess it to plant a
link there; a name already taken (by chance) is never opened, another is drawn.

`write_at` is the directory-fd form root's evidence store uses (its directories are opened
O_NOFOLLOW and checked for ownership first); `write_atomically` opens the target's parent
directory, creating it if missing. `read_owned` reads back such a file that a process keeps
for itself (a cache), trusting it only as its owner wrote it. Standard library only: the
wrapper uses it on every job.
"""

from __future__ import annotations

import os
import stat
from _thread import get_ident  # threading's own, without threading (issue 20)
from contextlib import suppress

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OWNED = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Random names drawn before a collision (never seen: 64 bits) is the caller's OSError.
_NAME_DRAWS = 4


def write_atomically(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644) -> None:
    """Replace the file at `path` with `data` (text is written as UTF-8) in one rename.
    os.path rather than pathlib, whose import (with urllib.parse, ipaddress, fnmatch) costs
    the wrapper a third of Python's own start on every rank (issue 20)."""
    parent, name = os.path.split(os.fspath(path).rstrip("/"))
    parent = parent or "."
    os.makedirs(parent, exist_ok=True)
    dir_fd = os.open(parent, _DIR)
    try:
        write_at(dir_fd, name, data, mode=mode)
    finally:
        os.close(dir_fd)


def write_at(dir_fd: int, name: str, data: bytes | str, *, mode: int = 0o644) -> None:
    """Replace `name` in the directory open at `dir_fd` with `data` in one rename."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp, fd = _create(name, dir_fd, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def _create(name: str, dir_fd: int, mode: int) -> tuple[str, int]:
    """A new temporary file for `name` and its fd, under a name no other call uses: this
    process's id and thread's, and 64 random bits, so that no one can plant a link there
    ahead of us. A name already there is never opened or removed (it is not ours)."""
    for _ in range(_NAME_DRAWS - 1):
        with suppress(FileExistsError):
            return _open_new(name, dir_fd, mode)
    return _open_new(name, dir_fd, mode)


def _open_new(name: str, dir_fd: int, mode: int) -> tuple[str, int]:
    # The target's name cut short: a long one must still leave room for our suffix.
    tmp = f".{name[:160]}.{os.getpid()}.{get_ident()}.{os.urandom(8).hex()}.tmp"
    return tmp, os.open(tmp, _NEW, mode, dir_fd=dir_fd)


def read_owned(
    path: str | os.PathLike[str], owner_uid: int, *, max_bytes: int, forbidden_mode: int = 0
) -> bytes | None:
    """The file's bytes when it is a regular file of `owner_uid` with none of the permission
    bits `forbidden_mode` and at most `max_bytes` long; None otherwise, and when it cannot be
    read. Never through a symlink, never blocking on a FIFO; a file that grows past the cap
    while read is refused too."""
    try:
        fd = os.open(path, _OWNED)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != owner_uid
            or stat.S_IMODE(info.st_mode) & forbidden_mode
            or info.st_size > max_bytes
        ):
            return None
        raw = _read_at_most(fd, max_bytes + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return raw if len(raw) <= max_bytes else None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
