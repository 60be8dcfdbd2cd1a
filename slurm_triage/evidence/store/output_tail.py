"""The tail of a job's output file (`--output`), read by the decision as SlurmUser or root.

The path is the user's choice, so nothing is opened before it is known to be a regular file
of the job's user: the walk to it follows only root's symlinks, and the file is lstat'ed,
then opened non-following, non-blocking, without a controlling tty, and checked again.
"""

from __future__ import annotations

import os
import stat

from slurm_triage.deadline import CallTimedOut, call_with_deadline
from slurm_triage.evidence.store.safe_io import UnsafeEvidence

# Reading the job's output file is bounded as a whole: a stat on a hard NFS mount whose
# server is gone, or on an automount that never comes, blocks in the kernel.
OUTPUT_READ_TIMEOUT_S = 5.0
_MAX_LINK_HOPS = 40
_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TAIL_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def read_user_tail(
    path: str, uid: int, max_bytes: int, *, timeout_s: float = OUTPUT_READ_TIMEOUT_S
) -> bytes:
    """The tail of a job's output file (`--output`, read by the decision as SlurmUser or
    root). The path is the user's choice, so nothing is opened before it is known to be a
    regular file of the job's user (`/dev/watchdog` opened by root arms a reboot); see
    `_tail_now`. Past `timeout_s` (a hung mount) it is UnsafeEvidence "unreadable"."""
    try:
        return call_with_deadline(
            lambda: _tail_now(path, uid, max_bytes), timeout_s, name="read-output-tail"
        )
    except CallTimedOut:
        raise UnsafeEvidence(f"{path}: unreadable: no answer within {timeout_s:g}s") from None


def _tail_now(path: str, uid: int, max_bytes: int) -> bytes:
    """Walk to the parent with O_PATH fds, lstat the file, refuse anything but a regular
    file owned by `uid` without opening it, then open it non-following, non-blocking and
    without a controlling tty, and check with fstat that it is the same file."""
    dir_fd, name = _walk_to_parent(path)
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        _check_user_file(path, before, uid)
        fd = os.open(name, _TAIL_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise UnsafeEvidence(f"{path}: cannot open: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    try:
        after = os.fstat(fd)
        _check_user_file(path, after, uid)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise UnsafeEvidence(f"{path}: replaced while it was opened")
        os.lseek(fd, max(0, after.st_size - max_bytes), os.SEEK_SET)
        return os.read(fd, max_bytes)
    except OSError as exc:
        raise UnsafeEvidence(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def _check_user_file(path: str, st: os.stat_result, uid: int) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeEvidence(f"{path}: is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeEvidence(f"{path}: not a regular file")
    if st.st_uid != uid:
        raise UnsafeEvidence(f"{path}: owned by uid {st.st_uid}, not the job's {uid}")


def _walk_to_parent(path: str) -> tuple[int, str]:
    """An O_PATH fd on the directory holding `path`'s last name, and that name. Each
    directory is lstat'ed and opened O_NOFOLLOW; a symlink on the way is followed only when
    root owns it (a site's `/home -> /data/home`), never a user's; no `..` in the path."""
    parts = path.split("/")
    if not path.startswith("/") or ".." in parts or not parts[-1] or parts[-1] == ".":
        raise UnsafeEvidence(f"{path}: not an absolute path to a file without '..'")
    todo = [p for p in parts[1:] if p not in ("", ".")]
    walked: list[str] = []
    fd = os.open("/", _PATH_DIR)
    hops = 0
    try:
        while len(todo) > 1:
            part = todo.pop(0)
            st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if st.st_uid != 0 or hops > _MAX_LINK_HOPS:
                    raise UnsafeEvidence(f"{path}: {part} is a symlink of uid {st.st_uid}")
                target = os.path.normpath(os.path.join("/", *walked, os.readlink(part, dir_fd=fd)))
                todo = [p for p in target.split("/") if p] + todo
                walked = []
                os.close(fd)
                fd = os.open("/", _PATH_DIR)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeEvidence(f"{path}: {part} is not a directory")
            next_fd = os.open(part, _PATH_DIR, dir_fd=fd)
            os.close(fd)
            fd, walked = next_fd, [*walked, part]
        return fd, todo[0]
    except OSError as exc:
        os.close(fd)
        raise UnsafeEvidence(f"{path}: cannot open: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
