"""Kernel-log line prefixes: when a line was written, on which host, and whether the kernel
wrote it.

The forms a node keeps its kernel log in (util-linux dmesg(1), journalctl(1) `--output`,
rsyslog):
- `/dev/kmsg` `prio,seq,usec,flags;msg` and dmesg `[  123.456789] msg` (also dmesg -x's
  `kern  :err   : ` facility and a printk caller id `[T1234]`/`[C3]` after the stamp):
  monotonic time since boot, a wall time only when `boot_time` is given;
- `dmesg -T` (`--time-format=ctime`) `[Thu Nov 21 10:00:00 2024] msg`;
- `dmesg --time-format=iso` `2024-11-21T10:00:00,123456+00:00 msg` (a comma before the
  microseconds, always with the offset; dmesg -x puts the facility first);
- `dmesg -H` (`--time-format=reltime`) `[Nov21 10:00]` heads a minute, `[  +0.000001]` is a
  delta: no time;
- syslog and journalctl `short` `Nov 21 10:00:00 host tag[pid]: msg`, and `short-precise`
  with `10:00:00.123456`: no year (`year` supplies it) and no zone (`tz`; None is this host's);
- journalctl `short-full` `Thu 2024-11-21 10:00:00 CET host tag: msg`: the zone is an
  abbreviation, read when it is UTC/GMT, a numeric offset, or this host's own (time.tzname);
  any other leaves the line without a time rather than guess it hours wrong;
- RFC 3339 (rsyslog, journalctl `short-iso`, `short-iso-precise`)
  `2024-11-21T10:00:00.123456+00:00 host tag: msg`;
- journalctl `short-unix` `1732183200.123456 host tag: msg`.
journalctl `short-monotonic` and dmesg `--time-format=delta|notime` carry no wall time: their
lines have none. A line with no recognised prefix has neither a time nor a known origin.

Origin. In the tagged forms only the tag `kernel` is the kernel's, and only without a pid:
journald (and rsyslog's imjournal) print the sender's pid after its tag and the kernel has
none, so `kernel[4242]:` is a process that named itself kernel (`logger -t kernel`). In
kmsg and dmesg -x forms the facility tells: userspace writing to /dev/kmsg never gets kern.
A record's later lines are the kernel's own words only in a message a driver writes whole
(`continued_lines`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from slurm_triage.attribution.yearless import yearless_epoch

_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_KMSG = re.compile(r"^(\d+),\d+,(\d+),[^;]*;(.*)$")
_FACILITY = r"(?:(?P<fac>[a-z0-9]+) *:[a-z]+ *: )?"  # dmesg -x: `kern  :err   : `
_CALLER = r"(?:\s*\[\s*[TC]\d+\])?"  # CONFIG_PRINTK_CALLER: `[T1234]`, `[    C3]`
_DMESG = re.compile(rf"^{_FACILITY}(?P<stamp>\[\s*(?P<s>\d+\.\d+)\]){_CALLER}\s?(?P<msg>.*)$")
_DMESG_T = re.compile(
    rf"^{_FACILITY}(?P<stamp>\[(?:\w{{3}} )?(?P<mon>\w{{3}}) +(?P<day>\d{{1,2}}) "
    rf"(?P<h>\d\d):(?P<mi>\d\d):(?P<sec>\d\d) (?P<yr>\d{{4}})\]){_CALLER}\s?(?P<msg>.*)$"
)
_DMESG_REL = re.compile(
    rf"^{_FACILITY}(?P<stamp>\[(?:\s*[+-]\d+\.\d+|\w{{3}} ?\d{{1,2}} \d\d:\d\d)\]){_CALLER}"
    r"\s?(?P<msg>.*)$"
)
_DMESG_ISO = re.compile(
    rf"^{_FACILITY}(?P<stamp>(?P<iso>\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d),(?P<frac>\d{{1,9}})"
    rf"(?P<zone>[+-]\d\d:?\d\d))(?= |$){_CALLER}\s?(?P<msg>.*)$"
)
_INNER_DMESG = re.compile(rf"^(\[\s*\d+\.\d+\]){_CALLER}\s?(.*)$")
# The host and `tag[pid]: ` that every tagged form ends its prefix with.
_TAG = r" (?P<host>\S+) (?P<tag>[^:\[\s]+)(?P<pid>\[\d+\])?: ?(?P<msg>.*)$"
_SYSLOG = re.compile(
    r"^(?P<stamp>(?P<mon>\w{3}) +(?P<day>\d{1,2}) (?P<h>\d\d):(?P<mi>\d\d):(?P<sec>\d\d)"
    r"(?:\.(?P<frac>\d{1,9}))?)" + _TAG
)
_FULL = re.compile(
    r"^(?P<stamp>(?:\w{3} )?(?P<date>\d{4}-\d\d-\d\d) (?P<clock>\d\d:\d\d:\d\d(?:\.\d{1,9})?) "
    r"(?P<zone>[A-Z][A-Za-z]{1,5}|[+-]\d\d(?::?\d\d)?))" + _TAG
)
_ISO = re.compile(
    r"^(?P<stamp>(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(?P<zone>Z|[+-]\d\d:?\d\d)?)"
    + _TAG
)
_UNIX = re.compile(r"^(?P<stamp>\d{10}\.\d{1,9})" + _TAG)
_UTC_NAMES = frozenset({"UTC", "GMT", "UT", "Z"})

# One printk may hold newlines: one record, whose later lines kmsg escapes `\x0a`, rsyslog
# `#012`, and dmesg and journalctl indent. Subsystems quote user text holding newlines there:
# `tmpfs: Unknown parameter '%s'` and overlayfs' `failed to resolve '%s'` quote the mount
# options an unprivileged user passes in their own user namespace (`unshare -Urm`), and NVRM
# too: osapi.c RmPerformVersionCheck's `NVRM: API mismatch: the client '%s' (pid %u)\nNVRM: has
# the version %s, ...` quotes the 63 bytes any /dev/nvidiactl client sends. So later lines
# count only after the first line of a message that takes no string argument. Each entry: that
# first line, and how many lines follow it. nv_printf is one vprintk, so one record
# (open-gpu-kernel-modules 595.45.04, kernel-open/nvidia/os-interface.c).
_CONTINUED = (
    # src/nvidia/arch/nvalloc/unix/src/osapi.c rm_is_supported_device:
    #   "NVRM: The NVIDIA GPU %04x:%02x:%02x.%x\n"
    #   "NVRM: (PCI ID: %04x:%04x) installed in this system has\n"
    #   "NVRM: fallen off the bus and is not responding to commands.\n"
    (re.compile(r"^NVRM: The NVIDIA GPU [0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\s*$"), 2),
)


@dataclass(frozen=True)
class KernelLine:
    """A kernel-log line split into its time (if absolute), host (if named) and message.

    `kernel` is whether the kernel wrote it (as far as the form tells); `tag` the syslog tag
    (None outside tagged forms); `stamp` the prefix's own text, which the lines of one
    multi-line record share; `prefixed` False for a line with no recognised prefix."""

    time: float | None
    host: str | None
    message: str
    kernel: bool = True
    tag: str | None = None
    stamp: str | None = None
    prefixed: bool = True


def split_line(line: str, *, year: int, tz: tzinfo | None, boot_time: float | None) -> KernelLine:
    """Recognise the line's prefix; a line with none is a bare message without a time."""
    if found := _KMSG.match(line):
        # Userspace writing to /dev/kmsg cannot use facility 0 (kern): only the kernel can.
        kernel = int(found.group(1)) >> 3 == 0
        when = _since_boot(int(found.group(2)) / 1e6, boot_time)
        return KernelLine(when, None, found.group(3), kernel)
    if found := _DMESG.match(line):
        when = _since_boot(float(found.group("s")), boot_time)
        return _untagged(found, when)
    if found := _DMESG_T.match(line):
        g = found.group
        when = _wall(int(g("yr")), g("mon"), g("day"), g("h"), g("mi"), g("sec"), tz)
        return _untagged(found, when)
    if found := _DMESG_ISO.match(line):
        return _untagged(found, _iso(f"{found['iso']}.{found['frac']}", found["zone"], tz))
    if found := _DMESG_REL.match(line):
        return _untagged(found, None)
    if found := _SYSLOG.match(line):
        g = found.group
        when = _wall(year, g("mon"), g("day"), g("h"), g("mi"), g("sec"), tz, g("frac"))
        return _tagged(found, when)
    if found := _FULL.match(line):
        return _tagged(found, _full(found["date"], found["clock"], found["zone"]))
    if found := _ISO.match(line):
        return _tagged(found, _iso(found["iso"], found["zone"], tz))
    if found := _UNIX.match(line):
        return _tagged(found, float(found["stamp"]))
    return KernelLine(None, None, line, prefixed=False)


def continued_lines(head: str) -> int:
    """How many of the lines after `head`, a kernel record's first line, are the kernel's own
    words too: none unless the record is a known multi-line driver message (_CONTINUED)."""
    for first, count in _CONTINUED:
        if first.match(head):
            return count
    return 0


def _untagged(found: re.Match[str], when: float | None) -> KernelLine:
    kernel = found["fac"] in (None, "kern")
    return KernelLine(when, None, found["msg"], kernel, stamp=found["stamp"])


def _tagged(found: re.Match[str], when: float | None) -> KernelLine:
    stamp, msg, tag = found["stamp"], found["msg"], found["tag"]
    # rsyslog often keeps the dmesg stamp inside the message: drop it, keep the wall time
    # (and let it tell the lines of one record from the next record in the same second).
    if inner := _INNER_DMESG.match(msg):
        stamp, msg = f"{stamp} {inner.group(1)}", inner.group(2)
    kernel = tag == "kernel" and found["pid"] is None
    return KernelLine(when, found["host"], msg, kernel=kernel, tag=tag, stamp=stamp)


def _since_boot(seconds: float, boot_time: float | None) -> float | None:
    return None if boot_time is None else boot_time + seconds


def _wall(
    year: int,
    mon: str,
    day: str,
    h: str,
    mi: str,
    s: str,
    tz: tzinfo | None,
    frac: str | None = None,
) -> float | None:
    if mon not in _MONTHS:
        return None
    micro = int((frac or "0")[:6].ljust(6, "0"))
    return yearless_epoch(year, _MONTHS[mon], int(day), (int(h), int(mi), int(s), micro), tz)


def _iso(stamp: str, zone: str | None, tz: tzinfo | None) -> float | None:
    head, _, frac = stamp.partition(".")
    if frac:  # fromisoformat takes 3 or 6 digits before 3.11's fuller parser: give it 6
        stamp = f"{head}.{frac[:6].ljust(6, '0')}"
    try:
        moment = datetime.fromisoformat(stamp + (zone or ""))
    except ValueError:
        return None
    if moment.tzinfo is None and tz is not None:
        moment = moment.replace(tzinfo=tz)
    return moment.timestamp()


def _full(date: str, clock: str, zone: str) -> float | None:
    """journalctl short-full's time; None when its zone abbreviation is not one we can read."""
    try:
        moment = datetime.fromisoformat(f"{date}T{clock}")
    except ValueError:
        return None
    if zone in _UTC_NAMES:
        return moment.replace(tzinfo=UTC).timestamp()
    if zone[0] in "+-":
        digits = zone[1:].replace(":", "").ljust(4, "0")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        sign = -1 if zone[0] == "-" else 1
        return moment.replace(tzinfo=timezone(sign * offset)).timestamp()
    if zone in time.tzname:
        return moment.timestamp()  # this host's zone, as journalctl printed it
    return None
