"""Loaded by every Python child of tests/unit/test_cli.py (its directory is put first on
PYTHONPATH): an audit hook that refuses, and reports, starting a real Slurm client command
or writing under the host's paths, whatever path or PATH lookup the code under test uses.

Configured by the environment the test fixture sets: GUARD_REPORT (a file the refusals are
appended to), GUARD_COMMANDS (colon-separated Slurm command names), GUARD_FAKES (the
directory of fake ones, which may run) and GUARD_PATHS (colon-separated host directories
never to write). Without GUARD_REPORT it
does nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

_REPORT = os.environ.get("GUARD_REPORT", "")
_FAKES = os.environ.get("GUARD_FAKES", "")
_PATHS = tuple(p for p in os.environ.get("GUARD_PATHS", "").split(":") if p)
_COMMANDS = frozenset(c for c in os.environ.get("GUARD_COMMANDS", "").split(":") if c)
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_MUTATE = frozenset(
    (
        "os.mkdir",
        "os.rename",
        "os.remove",
        "os.rmdir",
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.symlink",
        "os.link",
        "os.utime",
        "shutil.rmtree",
    )
)
_WITH_DIR_FD = frozenset(("os.mkdir", "os.remove", "os.rmdir"))  # dir_fd is the last arg
_SPAWN = frozenset(("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn"))


class Refused(PermissionError):
    """What the code under test sees instead of the real Slurm or the host write."""


def _name(value: object) -> str | None:
    return os.fsdecode(value) if isinstance(value, str | bytes | os.PathLike) else None


def _dir_of(fd: object) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else None
    except OSError:
        return None


def _written(event: str, args: tuple[Any, ...]) -> list[str]:
    """The absolute paths this event would write."""
    pairs: list[tuple[object, str | None]] = []
    if event == "open":
        path, mode, flags = (*args, None, None)[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE)
        )
        pairs = [(path, None)] if writes else []
    elif event == "sqlite3.connect":
        pairs = [(args[0], None)]
    elif event in _MUTATE:
        base = _dir_of(args[-1]) if event in _WITH_DIR_FD else None
        pairs = [(a, base) for a in args if _name(a) is not None]
    out = []
    for path, base in pairs:
        name = _name(path)
        if name:
            out.append(os.path.abspath(os.path.join(base, name) if base else name))
    return out


def _slurm_commands(event: str, args: tuple[Any, ...]) -> list[str]:
    """Real Slurm commands this spawn would start (our fakes and absent files are fine)."""
    if event not in _SPAWN:
        return []
    found = []
    for value in args:
        if isinstance(value, list | tuple) and value:
            value = value[0]
        name = (_name(value) or "").strip()
        if not name or os.path.basename(name.split()[0]) not in _COMMANDS:
            continue
        name = name.split()[0]
        where = name if os.sep in name else shutil.which(name)
        if where and os.path.exists(where) and os.path.dirname(os.path.abspath(where)) != _FAKES:
            found.append(where)
    return found


def _refuse(what: str) -> None:
    with open(_REPORT, "a") as report:
        report.write(f"{os.getpid()} {what}\n")
    raise Refused(f"blocked by the unit-test guard: {what}")


def _hook(event: str, args: tuple[Any, ...]) -> None:
    try:
        commands = _slurm_commands(event, args)
        written = _written(event, args)
    except Exception:
        return  # an event shape we did not expect: never break the code under test
    for command in commands:
        _refuse(f"{event} {command}")
    for path in written:
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in _PATHS):
            _refuse(f"{event} {path}")


if _REPORT:
    sys.addaudithook(_hook)
