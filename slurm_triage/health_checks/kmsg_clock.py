"""Where /dev/kmsg's clock stands against CLOCK_MONOTONIC, measured rather than assumed.

A kmsg record is stamped with the kernel's local_clock(), microseconds since boot. Dating
it as `time.time() - CLOCK_MONOTONIC + usec` (what `dmesg -T` does) assumes the two clocks
agree; they drift apart: NTP slews CLOCK_MONOTONIC and not local_clock (seconds a day on a
long uptime), and a VM's guest clocks part further (node-problem-detector#479: ten hours).
A fresh XID then falls out of the 10-minute window, or an old one drains a healthy node.

So a root reader measures the kernel's own clock: it writes one mark record to /dev/kmsg
(facility user, which no kernel line has, so the parsers drop it) and reads its stamp back
beside CLOCK_MONOTONIC read just before the write (printk stamps a record on entry). The
mark carries a random nonce, so no line a user makes the kernel print can pose as it.

The measures of this boot are kept (`health.kernel_clock_cache`, root's own file) with the
sequence number of their mark, and a new one is taken once the newest is an hour old, so a
node's log gains a line an hour at most, also when a measure fails. A record is dated by the
measure of the first mark after it. When the lead changed between that mark and the one
before it, the clocks jumped somewhere in between (a VM paused): the record is dated by the
larger lead, the earlier date, because a line from before the jump must not pass for a
fresh one. A reader that may not write (not root) dates records as `dmesg -T` does.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_triage.atomic import read_owned, write_atomically

MARK_TEXT = "slurm-triage: kmsg clock mark "
# facility user (1) << 3 | debug (7); what the kernel stamps on `<15>` written to /dev/kmsg.
MARK_PRIORITY = 15
MAX_AGE_S = 3600.0
# A write that took longer than this (preempted, stalled) measures nothing.
MAX_WRITE_S = 0.05
MAX_MEASURES = 48
MAX_CACHE_BYTES = 65536  # MAX_MEASURES measures take about 2 kB
# Measures this close are one lead: dating every record by the newest is then exact enough.
SAME_LEAD_S = 1.0
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class Mark:
    """A mark written to /dev/kmsg: its nonce and CLOCK_MONOTONIC around the write."""

    nonce: str
    monotonic_before: float
    monotonic_after: float

    @property
    def quick(self) -> bool:
        """Whether the write was quick enough to tell when the kernel stamped the mark."""
        return self.monotonic_after - self.monotonic_before <= MAX_WRITE_S


@dataclass(frozen=True)
class Measure:
    """The kmsg clock minus CLOCK_MONOTONIC (seconds) when the mark `seq` was written."""

    seq: int
    ahead_s: float


@dataclass(frozen=True)
class KmsgClock:
    """What is known of the kmsg clock this boot: its measures, oldest first. Without any,
    records are dated as `dmesg -T` dates them."""

    measures: tuple[Measure, ...] = ()

    @property
    def uniform(self) -> bool:
        """Whether one lead dates every record (no jump between the measures)."""
        leads = [m.ahead_s for m in self.measures]
        return not leads or max(leads) - min(leads) <= SAME_LEAD_S

    @property
    def newest_ahead_s(self) -> float:
        return self.measures[-1].ahead_s if self.measures else 0.0

    def ahead_at(self, seq: int) -> float:
        """The lead to date record `seq` by (the module's docstring says why)."""
        previous: Measure | None = None
        for measure in self.measures:
            if seq < measure.seq:
                if previous is None:
                    return measure.ahead_s
                return max(previous.ahead_s, measure.ahead_s)
            previous = measure
        return self.newest_ahead_s


ASSUMED = KmsgClock()


def restamped(records: list[str], clock: KmsgClock) -> list[str]:
    """The records with their stamps moved onto CLOCK_MONOTONIC (usec less the lead at
    their sequence number; a stamp before the boot is the boot's)."""
    moved = []
    for record in records:
        if parsed := _header(record):
            fields, message = parsed
            lead = round(clock.ahead_at(int(fields[1])) * 1e6)
            fields[2] = str(max(0, int(fields[2]) - lead))
            record = f"{','.join(fields)};{message}"
        moved.append(record)
    return moved


def _header(record: str) -> tuple[list[str], str] | None:
    """A kmsg record's header fields (prio, seq, usec, flags, ...) and its message; None
    without such a header."""
    head, sep, message = record.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3 or not (fields[1].isdigit() and fields[2].isdigit()):
        return None
    return fields, message


def write_record(path: str, text: str) -> None:
    """One record into the kernel's log (root only; refused otherwise)."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_mark(path: str) -> Mark | None:
    """Write a mark; None when this reader may not write to the kernel's log. A slow write
    is written again at once: without threaded consoles the writer flushes the console's
    backlog (a serial console after an XID burst), which is done by then."""
    mark = None
    for _ in range(2):
        nonce = os.urandom(12).hex()  # not secrets: its hashlib import costs every Prolog
        before = time.clock_gettime(time.CLOCK_MONOTONIC)
        try:
            write_record(path, f"<{MARK_PRIORITY}>{MARK_TEXT}{nonce}\n")
        except OSError:
            return mark
        mark = Mark(nonce, before, time.clock_gettime(time.CLOCK_MONOTONIC))
        if mark.quick:
            break
    return mark


def read_mark(records: list[str], mark: Mark) -> Measure | None:
    """The measure `mark` gives, found among kmsg records (`prio,seq,usec,flags;msg`); None
    when it is not there (past the read's cap) or the write took too long to tell."""
    if not mark.quick:
        return None
    wanted = f"{MARK_TEXT}{mark.nonce}"
    for record in reversed(records):
        parsed = _header(record)
        if parsed is None or parsed[1] != wanted or parsed[0][0] != str(MARK_PRIORITY):
            continue
        fields = parsed[0]
        return Measure(int(fields[1]), int(fields[2]) / 1e6 - mark.monotonic_before)
    return None


@dataclass(frozen=True)
class Kept:
    """The measures kept for this boot, and when the last measure was tried."""

    clock: KmsgClock
    tried_at: float

    def fresh(self, now: float) -> bool:
        return now - MAX_AGE_S < self.tried_at <= now + 60


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def load(cache: Path, boot: str) -> Kept | None:
    """What `cache` keeps for this boot, if written by this user alone (anyone else could
    move the window)."""
    if not boot:
        return None
    forbidden = stat.S_IWGRP | stat.S_IWOTH
    raw = read_owned(cache, os.geteuid(), max_bytes=MAX_CACHE_BYTES, forbidden_mode=forbidden)
    if raw is None:
        return None
    try:
        kept = json.loads(raw)
        if kept["boot_id"] != boot:
            return None
        measures = tuple(Measure(int(s), float(a)) for s, a in kept["measures"])
        return Kept(KmsgClock(measures[-MAX_MEASURES:]), float(kept["tried_at"]))
    except (ValueError, TypeError, KeyError):
        return None


def save(cache: Path, boot: str, kept: Kept) -> bool:
    """Keep the measures (atomically, mode 0644); False when they cannot be kept."""
    if not boot:
        return False
    measures = [[m.seq, m.ahead_s] for m in kept.clock.measures[-MAX_MEASURES:]]
    text = json.dumps({"boot_id": boot, "tried_at": kept.tried_at, "measures": measures})
    try:
        write_atomically(cache, text, mode=0o644)
    except OSError:
        return False
    return True
