"""Where /dev/kmsg's clock stands against CLOCK_MONOTONIC, measured rather than assumed.

A kmsg record is stamped with the kernel's local_clock(), microseconds since boot. Dating
it as `time.time() - CLOCK_MONOTONIC + usec` (what `dmesg -T` does) assumes the two clocks
agree; they drift apart: NTP slews CLOCK_MONOTONIC and not local_clock (seconds a day on a
long uptime), and a VM's guest clocks part further (node-problem-detector#479: ten hours).
A fresh XID then falls out of the 10-minute window, or an old one drains a healthy node.

So a root reader measures the kernel's own clock: it writes one mark record to /dev/kmsg
(facility user, which no kernel line has, so the parsers drop it) between two readings of
CLOCK_MONOTONIC and reads the mark's stamp back. The mark carries a random nonce, so no
line a user makes the kernel print can pose as it. The measure is kept for an hour per
boot (`health.kernel_clock_cache`, root's own file), so a node's log gains a line an hour
at most. A reader that may not write (not root, `printk_devkmsg=off`) or has no cache
configured dates records as `dmesg -T` does.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

MARK_TEXT = "slurm-triage: kmsg clock mark "
# facility user (1) << 3 | debug (7); what the kernel stamps on `<15>` written to /dev/kmsg.
MARK_PRIORITY = 15
MAX_AGE_S = 3600.0
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class Mark:
    """A mark written to /dev/kmsg: its nonce and CLOCK_MONOTONIC around the write."""

    nonce: str
    monotonic_before: float
    monotonic_after: float


@dataclass(frozen=True)
class KmsgClock:
    """The kmsg clock minus CLOCK_MONOTONIC, in seconds; `measured` when read off a mark."""

    ahead_s: float
    measured: bool

    def boot_time(self, wall_now: float, monotonic_now: float) -> float:
        """The wall time at which the kmsg clock read zero."""
        return wall_now - monotonic_now - self.ahead_s


ASSUMED = KmsgClock(0.0, measured=False)


def write_record(path: str, text: str) -> None:
    """One record into the kernel's log (root only; refused or dropped otherwise)."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_mark(path: str) -> Mark | None:
    """Write a mark; None when this reader may not write to the kernel's log."""
    nonce = secrets.token_hex(12)
    before = time.clock_gettime(time.CLOCK_MONOTONIC)
    try:
        write_record(path, f"<{MARK_PRIORITY}>{MARK_TEXT}{nonce}\n")
    except OSError:
        return None
    return Mark(nonce, before, time.clock_gettime(time.CLOCK_MONOTONIC))


def read_mark(records: list[str], mark: Mark) -> KmsgClock | None:
    """The clock measured by `mark`, found among kmsg records (`prio,seq,usec,flags;msg`);
    None when it is not there (dropped by `printk_devkmsg`, or past the read's cap)."""
    wanted = f"{MARK_TEXT}{mark.nonce}"
    for record in reversed(records):
        head, _, message = record.partition(";")
        fields = head.split(",")
        if message != wanted or len(fields) < 3 or fields[0] != str(MARK_PRIORITY):
            continue
        if not fields[2].isdigit():
            return None
        written = (mark.monotonic_before + mark.monotonic_after) / 2
        return KmsgClock(int(fields[2]) / 1e6 - written, measured=True)
    return None


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def load(cache: Path, boot: str, now: float) -> KmsgClock | None:
    """The measure kept in `cache`, if this boot's, under an hour old and written by this
    user alone (anyone else could move the window)."""
    if not boot:
        return None
    try:
        fd = os.open(cache, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != os.geteuid()
            or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            return None
        kept = json.loads(os.read(fd, 4096))
        ahead, at = float(kept["ahead_s"]), float(kept["measured_at"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    finally:
        os.close(fd)
    if kept.get("boot_id") != boot or not now - MAX_AGE_S < at <= now + 60:
        return None
    return KmsgClock(ahead, measured=True)


def save(cache: Path, boot: str, clock: KmsgClock, now: float) -> None:
    """Keep the measure (atomically, mode 0644); a cache that cannot be written only means
    the next read measures again."""
    if not boot:
        return
    text = json.dumps({"boot_id": boot, "ahead_s": clock.ahead_s, "measured_at": now})
    partial = cache.with_name(f".{cache.name}.{os.getpid()}")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(partial, cache)
    except OSError:
        partial.unlink(missing_ok=True)
