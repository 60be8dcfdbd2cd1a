"""Ending a process tree for good: signal a group, adopt and kill escaped descendants.

A training command's helpers (dataloader workers, a launcher's daemons) may outlive it, and
some leave its process group with setsid. As a child subreaper the wrapper inherits those
orphans instead of init, so at the end it can find every descendant in /proc, kill it, and
reap it: no orphan runs on after the step, no zombie stays behind.
"""

from __future__ import annotations

import contextlib
import os

from slurm_triage.wrapper.plain_signal import signal

# typing's flag without importing typing: mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt the orphans of our descendants (Linux); False where that is not possible."""
    try:
        return int(_libc_function("prctl")(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError, ImportError):
        return False  # not Linux: killing the child's group is all we can do


def _libc_function(name: str) -> Any:
    """`ctypes.CDLL(None, use_errno=True).<name>`, returning a C int, made from _ctypes
    itself: the ctypes package defines every C type and imports struct to do it, a tenth
    of a wrapped `true` for this one call (issue 20). Arguments go as ctypes passes a
    Python int without argtypes, as a C int."""
    import _ctypes

    class CInt(_ctypes._SimpleCData):  # ctypes.c_int
        _type_ = "i"

    class Function(_ctypes.CFuncPtr):  # CDLL's _FuncPtr with use_errno
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = CInt

    class Library:  # what CFuncPtr reads of a CDLL: the dlopen(3) handle
        # ctypes' default mode (_ctypes adds RTLD_NOW); None: the program and its libraries
        _handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type]

    return Function((name, Library()))  # type: ignore[arg-type]


def signal_group(pgid: int, signum: int) -> None:
    """Signal a process group that may already be gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def has_children() -> bool:
    """Whether this process has a child, running or not yet reaped (peeked at, not reaped).
    None left means no descendant anywhere: a descendant's topmost ancestor below us is our
    child, an orphan included, since a subreaper adopts it."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def kill_descendants(root: int) -> list[int]:
    """SIGKILL every live descendant of `root`; the pids signalled."""
    found = descendants(root)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return found


def descendants(root: int) -> list[int]:
    """Pids of every live (not zombie) descendant of `root`, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields is not None and fields[0] != b"Z":
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stat_fields(pid: str) -> list[bytes] | None:
    """Fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ..."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields if len(fields) > 1 else None
