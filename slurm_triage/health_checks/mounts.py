"""`fs.mounts`: each required mount is in the mount table and answers within a timeout.

A stat on a hard NFS mount whose server is gone blocks until the server returns, and only
SIGKILL interrupts it (signatures.md §3.4). So the probe runs in a forked child that opens
the mount point and statvfs()s it; the parent waits on a pipe with a deadline, SIGKILLs a
child that overran and does not wait to reap it (it may sit in D state). Such a child is
reaped later, by its own pid and without blocking: never `waitpid(-1)`, which would take the
exit status of children that other parts of the process (subprocess, the runner's threads)
are waiting for.
"""

from __future__ import annotations

import os
import re
import select
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slurm_triage.health_checks.result import Action, CheckResult, Severity, fail, ok, skipped


@dataclass(frozen=True)
class MountFacts:
    path: str
    mounted: bool
    fstype: str = ""
    answered: bool = False
    error: str = ""
    seconds: float = 0.0


# The kernel's seq_escape in show_mountinfo: space, tab, newline and backslash as \ooo;
# every other byte (UTF-8 names included) is written as is.
_OCTAL = re.compile(rb"\\([0-7]{3})")
# Probe children SIGKILLed while stuck, by pid, with the mount each probed; reaped by pid
# once they can exit. While one is still there its mount is not probed again in this
# process: in a resident one (the node agent reads the mounts every few seconds) a dead
# hard mount would otherwise gain an unkillable process at every probe.
_UNREAPED: dict[int, str] = {}
STILL_STUCK = "an earlier probe of it is still stuck"


def unescape_mount_point(field: str) -> str:
    """A mountinfo path field as the path it names: `\\040` is a space, UTF-8 stays UTF-8
    (bytes that are not UTF-8 keep their surrogate escapes, as os.fsdecode gives them)."""
    raw = field.encode("utf-8", "surrogateescape")
    return _OCTAL.sub(lambda m: bytes([int(m.group(1), 8) & 0xFF]), raw).decode(
        "utf-8", "surrogateescape"
    )


def parse_mountinfo(text: str) -> dict[str, str]:
    """Mount point -> fstype from /proc/self/mountinfo (octal escapes decoded)."""
    table: dict[str, str] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        table[unescape_mount_point(fields[4])] = right.split()[0]
    return table


def _probe_child(path: str, write_fd: int) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)  # blocks like stat on a dead hard mount
        os.fstatvfs(fd)
        os.close(fd)
        os.write(write_fd, b"ok")
    except OSError as exc:
        os.write(write_fd, f"{exc.strerror or exc}".encode()[:200])
    finally:
        os._exit(0)


def probe_mounts(
    paths: Sequence[str], mountinfo_text: str, timeout_s: float
) -> tuple[MountFacts, ...]:
    """Probe every mount in parallel children; the whole probe takes at most timeout_s."""
    table = parse_mountinfo(mountinfo_text)
    started = time.monotonic()
    children: dict[str, tuple[int, int]] = {}
    results: dict[str, MountFacts] = {}
    _reap_stragglers()
    stuck = set(_UNREAPED.values())
    for path in paths:
        if path not in table:
            results[path] = MountFacts(path, mounted=False)
            continue
        if path in stuck:
            results[path] = MountFacts(path, True, table[path], answered=False, error=STILL_STUCK)
            continue
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (child)
            os.close(read_fd)
            _probe_child(path, write_fd)
        os.close(write_fd)
        children[path] = (pid, read_fd)
    for path, (pid, read_fd) in children.items():
        remaining = max(0.0, timeout_s - (time.monotonic() - started))
        ready, _, _ = select.select([read_fd], [], [], remaining)
        answer = os.read(read_fd, 256).decode(errors="replace") if ready else ""
        os.close(read_fd)
        if not ready:
            os.kill(pid, signal.SIGKILL)  # not reaped here: it may be stuck in D state
            _UNREAPED[pid] = path
        else:
            os.waitpid(pid, 0)
        results[path] = MountFacts(
            path,
            True,
            table[path],
            answered=bool(ready),
            error="" if answer == "ok" else answer,
            seconds=time.monotonic() - started,
        )
    _reap_stragglers()
    return tuple(results[p] for p in paths)


def _reap_stragglers() -> None:
    """Reap the probe children killed earlier that have exited since; only ours, by pid."""
    for pid in list(_UNREAPED):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid  # already gone (reaped elsewhere, or not our child)
        if done == pid:
            del _UNREAPED[pid]


def check_mounts(mounts: Sequence[MountFacts], timeout_s: float, **_: Any) -> CheckResult:
    name = "fs.mounts"
    if not mounts:
        return skipped(name, "no required mounts configured")
    for m in mounts:
        if not m.mounted:
            return fail(name, f"{m.path} not mounted", Severity.HIGH, Action.DRAIN_NOW, path=m.path)
        if not m.answered:
            return fail(
                name,
                f"{m.path} ({m.fstype}) hung: no answer in {timeout_s:g}s",
                Severity.HIGH,
                Action.DRAIN_NOW,
                path=m.path,
                fstype=m.fstype,
            )
        if m.error:
            return fail(
                name,
                f"{m.path} ({m.fstype}) error: {m.error}",
                Severity.HIGH,
                Action.DRAIN_NOW,
                path=m.path,
                error=m.error,
            )
    return ok(name, f"{len(mounts)} mount(s) answer", mounts=[m.path for m in mounts])
