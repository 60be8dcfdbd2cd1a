"""The one way slurm-triage replaces a file: whole, atomically, never through a planted link.

A reader (node_exporter, the decision, the next health run, a job's fake NVML) must never
see half a file, and a writer running as root must never write through a link that another
user planted in a shared directory. So: a temporary file `.<name>.<pid>.tmp` is created new
beside the target (O_EXCL | O_NOFOLLOW, relative to a directory fd; one already there, left
by a killed writer or planted, is removed, never opened), given its mode whatever the umask,
written whole and fsynced, renamed over the target, and the directory fsynced. Any failure
(a full disk) removes the temporary file and raises the OSError.

`write_at` is the directory-fd form root's evidence store uses (its directories are opened
O_NOFOLLOW and checked for ownership first); `write_atomically` opens the target's parent
directory, creating it if missing. Standard library only: the wrapper uses it on every job.
"""

from __future__ import annotations

import os
from contextlib import suppress

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


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
    tmp = f".{name}.{os.getpid()}.tmp"
    fd = _create(tmp, dir_fd, mode)
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


def _create(tmp: str, dir_fd: int, mode: int) -> int:
    try:
        return os.open(tmp, _NEW, mode, dir_fd=dir_fd)
    except FileExistsError:
        # A killed writer's with our pid, or a planted link: removed, never written through
        # (a sticky directory refuses to remove another user's, and the open then fails).
        os.unlink(tmp, dir_fd=dir_fd)
        return os.open(tmp, _NEW, mode, dir_fd=dir_fd)
