"""Parse kernel-log lines into `KernelEvent` facts: XIDs, fallen off the bus, AER, MCE, OOM.

Reads the forms a node keeps its kernel log in:
- dmesg `[  123.456789] NVRM: ...` and `/dev/kmsg` `6,1234,5678901,-;NVRM: ...`: monotonic
  time since boot, converted only when `boot_time` is given (else the fact has no time);
- `dmesg -T` `[Thu Nov 21 10:00:00 2024] ...`;
- syslog/journalctl `Nov 21 10:00:00 host kernel: ...` (no year: `year` supplies it) and
  RFC 3339 `2024-11-21T10:00:00.123456+00:00 host kernel: ...`. In these only lines tagged
  `kernel` count, so a user's `logger "NVRM: Xid ..."` is not a hardware event.
XIDs in all three driver formats: old `NVRM: Xid (0000:03:00): 14, ...`, `PCI:` and MIG
`(PCI:0000:01:00 GPU-I:05)`. PCI addresses are normalised to lower-case `dddd:bb:dd`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from slurm_triage.attribution.logscan import DEFAULT_TAIL_BYTES, decode_tail, read_tail
from slurm_triage.evidence import KernelEvent, KernelEventKind, Source

_K = KernelEventKind
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_KMSG = re.compile(r"^\d+,\d+,(\d+),[^;]*;(.*)$")
_DMESG = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_DMESG_T = re.compile(r"^\[(?:\w{3} )?(\w{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]\s?(.*)$")
_SYSLOG = re.compile(
    r"^(\w{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\S+) ([^:\[\s]+)(?:\[\d+\])?: ?(.*)$"
)
_ISO = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:?\d\d)? "
    r"(\S+) ([^:\[\s]+)(?:\[\d+\])?: ?(.*)$"
)
_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bdf>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?"
    r"(?: GPU-I:(?P<gi>\d+))?\): (?P<xid>\d+),\s*(?P<rest>.*)"
)
_NVRM_BDF = re.compile(rf"NVRM: (?:GPU|The NVIDIA GPU) (?:at )?(?:PCI:)?({_BDF})")
_FALLEN = re.compile(r"NVRM: .*fallen off the bus")
_AER = re.compile(
    rf"(?P<dev>{_BDF}): (?:AER: (?:Multiple )?Uncorrect(?:ed|able) \((?:Non-)?Fatal\) error "
    rf"(?:message )?received(?:: (?P<src>{_BDF}))?|PCIe Bus Error: severity=Uncorrect(?:ed|able))"
)
_MCE = re.compile(
    r"\[Hardware Error\]: .*(?:Machine Check Exception|event severity: (?:fatal|recoverable))"
    r"|Uncorrected hardware memory error|Kernel panic - not syncing: Fatal [Mm]achine check"
)
_EDAC_UE = re.compile(r"EDAC .*?MC\d+: \d+ UE\b")
_PANIC = re.compile(r"Kernel panic - not syncing: (.*)")
_OOM = re.compile(r"Killed process (\d+) \(([^)]*)\)")
_IB = re.compile(
    r"\b(ib[\w.]*|mlx5_\d+): (?:lost carrier|[Ll]ink down)"
    rf"|mlx5_core ({_BDF}): Port module event(?:\[error\])?: module \d+, Cable (?:unplugged|error)"
)
_FS = re.compile(
    r"nfs: server (\S+) not responding|Lustre: .*Connection to (\S+) \(at \S+\) was lost"
)
MAX_EVENTS = 500


@dataclass(frozen=True)
class KernelLine:
    """A kernel-log line split into its time (if absolute), host (if named) and message."""

    time: float | None
    host: str | None
    message: str
    kernel: bool = True


def split_line(line: str, *, year: int, tz: tzinfo | None, boot_time: float | None) -> KernelLine:
    """Recognise the line's prefix; a line with none is taken as a bare kernel message."""
    if found := _KMSG.match(line):
        return KernelLine(_since_boot(int(found.group(1)) / 1e6, boot_time), None, found.group(2))
    if found := _DMESG.match(line):
        return KernelLine(_since_boot(float(found.group(1)), boot_time), None, found.group(2))
    if found := _DMESG_T.match(line):
        mon, day, h, mi, s, yr, msg = found.groups()
        return KernelLine(_wall(int(yr), mon, day, h, mi, s, tz), None, msg)
    if found := _SYSLOG.match(line):
        mon, day, h, mi, s, host, tag, msg = found.groups()
        return _tagged(_wall(year, mon, day, h, mi, s, tz), host, tag, msg, boot_time)
    if found := _ISO.match(line):
        stamp, zone, host, tag, msg = found.groups()
        return _tagged(_iso(stamp, zone, tz), host, tag, msg, boot_time)
    return KernelLine(None, None, line)


def parse_kernel_lines(
    lines: list[str],
    *,
    node: str | None = None,
    year: int | None = None,
    tz: tzinfo | None = UTC,
    boot_time: float | None = None,
    source: Source = Source.ROOT,
) -> list[KernelEvent]:
    """Every recognised event in `lines`, in order; a syslog host names the node if `node`
    is None. Exact repeats (same event, GPU and time) are kept once; at most MAX_EVENTS."""
    year = year or datetime.now(UTC).year
    events: list[KernelEvent] = []
    seen: set[tuple[object, ...]] = set()
    last_bdf: str | None = None
    for raw in lines:
        line = split_line(raw, year=year, tz=tz, boot_time=boot_time)
        if not line.kernel or len(events) >= MAX_EVENTS:
            continue
        if found := _NVRM_BDF.search(line.message):
            last_bdf = normalise_bdf(found.group(1))
        where = node or (line.host.split(".", 1)[0] if line.host else None)
        for kind, xid, bdf, detail in _events(line.message, last_bdf):
            key = (kind, xid, bdf, line.time, where)
            if key not in seen:
                seen.add(key)
                events.append(
                    KernelEvent(
                        node=where,
                        time=line.time,
                        source=source,
                        event=kind,
                        xid=xid,
                        pci_bus_id=bdf,
                        detail=detail[:300],
                    )
                )
    return events


def parse_kernel_file(
    path: str | os.PathLike[str],
    *,
    node: str | None = None,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    year: int | None = None,
    tz: tzinfo | None = UTC,
    boot_time: float | None = None,
) -> list[KernelEvent]:
    """`parse_kernel_lines` over the tail of a kernel-log file; LogReadError if unreadable."""
    data, whole = read_tail(path, tail_bytes)
    return parse_kernel_lines(
        decode_tail(data, whole_file=whole), node=node, year=year, tz=tz, boot_time=boot_time
    )


def normalise_bdf(text: str) -> str:
    """`00000000:3B:00.0` or `0000:3b:00` → `0000:3b:00` (4-hex domain, no function)."""
    domain, bus, rest = text.lower().split(":", 2)
    return f"{domain[-4:]}:{bus}:{rest.split('.', 1)[0]}"


def _events(
    msg: str, last_bdf: str | None
) -> Iterator[tuple[KernelEventKind, int | None, str | None, str]]:
    if found := _XID.search(msg):
        yield _K.XID, int(found.group("xid")), normalise_bdf(found.group("bdf")), msg
        return
    if _FALLEN.search(msg):
        found = _NVRM_BDF.search(msg)
        yield _K.FALLEN_OFF_BUS, None, normalise_bdf(found.group(1)) if found else last_bdf, msg
    elif found := _AER.search(msg):
        yield _K.AER_UNCORRECTED, None, normalise_bdf(found.group("src") or found.group("dev")), msg
    elif _MCE.search(msg):
        yield _K.MCE, None, None, msg
    elif _EDAC_UE.search(msg):
        yield _K.EDAC_UE, None, None, msg
    elif found := _PANIC.search(msg):
        kind = _K.OOM_KILL if "Out of memory" in found.group(1) else _K.KERNEL_PANIC
        yield kind, None, None, msg
    elif found := _OOM.search(msg):
        yield _K.OOM_KILL, None, None, f"pid={found.group(1)} comm={found.group(2)}"
    elif found := _IB.search(msg):
        yield _K.IB_LINK_DOWN, None, normalise_bdf(found.group(2)) if found.group(2) else None, msg
    elif _FS.search(msg):
        yield _K.FS_UNRESPONSIVE, None, None, msg


def _tagged(
    when: float | None, host: str, tag: str, msg: str, boot_time: float | None
) -> KernelLine:
    # rsyslog often keeps the dmesg stamp inside the message: drop it, keep the wall time.
    if found := _DMESG.match(msg):
        msg = found.group(2)
    return KernelLine(when, host, msg, kernel=tag == "kernel")


def _since_boot(seconds: float, boot_time: float | None) -> float | None:
    return None if boot_time is None else boot_time + seconds


def _wall(
    year: int, mon: str, day: str, h: str, mi: str, s: str, tz: tzinfo | None
) -> float | None:
    if mon not in _MONTHS:
        return None
    try:
        moment = datetime(year, _MONTHS[mon], int(day), int(h), int(mi), int(s))
    except ValueError:
        return None
    return moment.replace(tzinfo=tz).timestamp() if tz is not None else moment.timestamp()


def _iso(stamp: str, zone: str | None, tz: tzinfo | None) -> float | None:
    try:
        moment = datetime.fromisoformat(stamp + (zone or ""))
    except ValueError:
        return None
    if moment.tzinfo is None and tz is not None:
        moment = moment.replace(tzinfo=tz)
    return moment.timestamp()
