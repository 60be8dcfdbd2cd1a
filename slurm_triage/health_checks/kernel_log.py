"""Kernel-log facts for the checks: read `/dev/kmsg` or a log file, judge XIDs and MCE/EDAC.

NVML events only report XIDs that happen while someone listens, so a prolog or cron check
must read the kernel log (signatures.md §0.1). Reading is bounded (a tail of the file, a
capped number of kmsg records); events older than `health.kernel_window_s` do not count, and
neither do events without a date (attribution.kernel_lines says which forms have one) or
lines the kernel did not write: such lines never drain a node.
"""

from __future__ import annotations

import errno
import os
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_triage.attribution.kernel import parse_kernel_file, parse_kernel_lines
from slurm_triage.attribution.xid import NodeAction, lookup, names_recovery_action
from slurm_triage.config import HealthConfig
from slurm_triage.evidence import KernelEvent, KernelEventKind
from slurm_triage.health_checks import app_xids, gpu_resets, kmsg_clock
from slurm_triage.health_checks.kmsg_clock import KmsgClock
from slurm_triage.health_checks.result import Action, CheckResult, Severity, fail, ok, warn
from slurm_triage.logs import get_logger

MAX_KMSG_RECORDS = 200_000
# A ring of log_buf_len=32M holds up to a million records (a descriptor per 32 bytes).
MAX_KMSG_READS = 1_000_000
TAIL_BYTES = 8 << 20
# What a draining XID asks of the node, in the checks' terms.
_CHECK_ACTION = {
    NodeAction.DRAIN_RESET: Action.RESET_GPU,
    NodeAction.DRAIN_REBOOT: Action.REBOOT,
    NodeAction.DRAIN_RMA: Action.RMA,
    NodeAction.DRAIN_INSPECT: Action.DRAIN_NOW,
}


def read_kernel_events(path: str, node: str | None, *, clock_cache: str = "") -> list[KernelEvent]:
    """Kernel events from `/dev/kmsg` (record by record, non-blocking) or a log file's tail.
    kmsg's stamps are dated by its clock as measured (kmsg_clock), kept in `clock_cache`;
    without a cache they are dated as `dmesg -T` dates them."""
    if os.path.basename(path) == "kmsg" and path.startswith("/dev/"):
        records, clock = _read_kmsg_clock(path, clock_cache)
        boot_time = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
        if clock.uniform:
            boot_time -= clock.newest_ahead_s
        else:
            records = kmsg_clock.restamped(records, clock)
        return parse_kernel_lines(records, node=node, boot_time=boot_time)
    # A zone-less stamp in this node's own log is this node's local time.
    return parse_kernel_file(path, node=node, tail_bytes=TAIL_BYTES, tz=None)


# The measures this process tried, by cache: kept here too when the cache cannot be
# written, so a resident reader (the agent) still writes a mark an hour at most.
_tried: dict[tuple[str, str], kmsg_clock.Kept] = {}


def _read_kmsg_clock(path: str, cache: str) -> tuple[list[str], KmsgClock]:
    """The records, and the kmsg clock: kept, else measured by a mark written before the
    read (so the read meets it), else assumed to be CLOCK_MONOTONIC."""
    if not cache:
        return _read_kmsg(path), kmsg_clock.ASSUMED
    boot, now = kmsg_clock.boot_id(), time.time()
    kept = kmsg_clock.load(Path(cache), boot)
    in_process = _tried.get((cache, boot))
    if in_process is not None and (kept is None or in_process.tried_at > kept.tried_at):
        kept = in_process
    if kept is not None and kept.fresh(now):
        return _read_kmsg(path), kept.clock
    earlier = kept.clock.measures if kept is not None else ()
    marks: list[kmsg_clock.Mark | None] = []
    # The reader is opened first: one that may write but not read (no CAP_SYSLOG under
    # dmesg_restrict=1) writes nothing, where it would write a mark on every read.
    records = _read_kmsg(path, before_read=lambda: marks.append(kmsg_clock.write_mark(path)))
    mark = marks[0] if marks else None
    if mark is None:  # not root: nothing to keep either
        return records, kmsg_clock.ASSUMED
    measure = kmsg_clock.read_mark(records, mark)
    measures = (*earlier, measure) if measure is not None else earlier
    tried = kmsg_clock.Kept(KmsgClock(measures[-kmsg_clock.MAX_MEASURES :]), now)
    _tried[(cache, boot)] = tried
    if measure is None:
        get_logger(component="kernel_log").warning("kmsg_clock_unmeasured", records=len(records))
    if not kmsg_clock.save(Path(cache), boot, tried):
        get_logger(component="kernel_log").warning("kmsg_clock_not_kept", cache=cache)
    return records, tried.clock


def _read_kmsg(path: str, before_read: Callable[[], object] | None = None) -> list[str]:
    """The records; `before_read` runs once the reader is open (a reader opened earlier
    still reads the records written after)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if before_read is not None:
            before_read()
        return read_records(fd)
    finally:
        os.close(fd)


def read_records(fd: int) -> list[str]:
    """The newest MAX_KMSG_RECORDS records (first lines) of a kmsg reader, one per read. A
    reader starts at the ring's oldest record, so the read goes on to the newest (a clock
    mark, a fresh XID), up to MAX_KMSG_READS, which bounds it while the kernel prints faster
    than it reads."""
    lines: deque[str] = deque(maxlen=MAX_KMSG_RECORDS)
    for _ in range(MAX_KMSG_READS):
        try:
            record = os.read(fd, 8192)
        except BlockingIOError:
            break  # no more records
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                continue  # records were overwritten; the next read resumes
            raise
        if not record:
            break
        # A record is "prio,seq,usec,flags;message\n" plus " KEY=value" continuation lines.
        lines.append(record.decode("utf-8", "replace").split("\n", 1)[0])
    return list(lines)


def _recent(events: Sequence[KernelEvent], now: float, window_s: float) -> list[KernelEvent]:
    """Events dated within the window and since the newest boot. A line without a time
    (dmesg's seconds since boot in a file, a form with no wall clock, no prefix at all) could
    be from any day: it never counts, or a single old line would drain the node on every run.
    A log file (rsyslog's kern.log) keeps the lines of earlier boots: an XID from before the
    reboot that repaired the node is history, not the node's state."""
    since = now - window_s
    for e in events:
        if e.event is KernelEventKind.BOOT and e.time is not None and e.time <= now + 300:
            since = max(since, e.time)
    return [
        e
        for e in events
        if e.time is not None
        and since <= e.time <= now + 300
        and e.event is not KernelEventKind.BOOT
    ]


def _undated_xids(events: Sequence[KernelEvent]) -> int:
    kinds = (KernelEventKind.XID, KernelEventKind.FALLEN_OFF_BUS)
    return sum(1 for e in events if e.time is None and e.event in kinds)


# When several XIDs ask for different things, the node needs the most: a person (RMA, an
# inspection) before a reboot before a reset (a reboot resets every GPU, not the reverse).
_RANK = {Action.RMA: 4, Action.DRAIN_NOW: 3, Action.REBOOT: 2, Action.RESET_GPU: 1}


def _latest_recovery_only(events: Sequence[KernelEvent]) -> list[KernelEvent]:
    """XID 154 reports a change of the GPU's recovery action: only each GPU's newest one is
    its current state (a later 154 back to None means it recovered). A 154 that does not
    name the new action (the node agent's NVML event: NVML gives the number alone) stands
    for it only while no line that names one is there: NVML's copy of the kernel's change,
    later by a drifting kmsg clock, must not turn the reboot the kernel asked for into a
    watch."""
    newest: dict[str | None, KernelEvent] = {}
    for e in events:
        if e.event is KernelEventKind.XID and e.xid == 154:
            held = newest.get(e.pci_bus_id)
            if (
                held is None
                or names_recovery_action(e.detail)
                or not names_recovery_action(held.detail)
            ):
                newest[e.pci_bus_id] = e
    keep = set(map(id, newest.values()))
    return [e for e in events if not (e.xid == 154 and id(e) not in keep)]


def _node_fault(event: KernelEvent) -> CheckResult | None:
    """The failure one fatal kernel event asks for, if it is one."""
    name, bus = "gpu.xid", event.pci_bus_id or "?"
    if event.event is KernelEventKind.FALLEN_OFF_BUS:
        return fail(
            name,
            f"GPU {bus} fell off the bus",
            Severity.HIGH,
            Action.REBOOT,
            pci_bus_id=bus,
            line=event.detail,
        )
    if event.event is not KernelEventKind.XID or event.xid is None:
        return None
    info = lookup(event.xid, event.detail)
    evidence = {"xid": event.xid, "pci_bus_id": bus, "meaning": info.meaning, "line": event.detail}
    reason = f"XID {event.xid} GPU {bus} {info.meaning}"
    if info.drains_node():
        return fail(name, reason, Severity.HIGH, _CHECK_ACTION[info.node_action], **evidence)
    if info.node_action is NodeAction.RESET_GPU:
        return fail(name, reason, Severity.LOW, Action.RESET_GPU, **evidence)
    if info.node_action is NodeAction.WATCH:
        return warn(name, reason, **evidence)
    return None


def check_xid(
    events: Sequence[KernelEvent],
    config: HealthConfig,
    now: float,
    app_xid_claims: Sequence[app_xids.Claim] = (),
    gpu_resets: Mapping[str, float] | None = None,
    **_: Any,
) -> CheckResult:
    """XIDs in the window, judged by the XID catalogue: fatal ones fail the node (the one that
    asks the most wins: reboot over reset), application ones only when they come from
    jobs of `app_xid_repeats` distinct users on one GPU (app_xids). Undated lines only warn. An XID
    that a GPU reset repairs, logged before that GPU's last reset (`gpu_resets`, the
    health_checks.gpu_resets ledger), is repaired history."""
    name = "gpu.xid"
    recent = _latest_recovery_only(_recent(events, now, config.kernel_window_s))
    worst: CheckResult | None = None
    warning: CheckResult | None = None
    for event in reversed(recent):  # newest first: among equals the newest is reported
        result = _node_fault(event)
        if result is None or _reset_since(event, result, gpu_resets or {}):
            continue
        if not result.failed:
            warning = warning or result
        elif worst is None or _weight(result) > _weight(worst):
            worst = result
    if worst is not None:
        return worst
    gap_s = config.app_xid_burst_gap_s
    found = app_xids.bursts(recent, gap_s)
    for bus, faults in app_xids.faults_per_gpu(found, app_xid_claims, gap_s).items():
        if len(faults) >= config.app_xid_repeats:
            return fail(
                name,
                f"application XIDs on GPU {bus} from jobs of {len(faults)} users",
                Severity.LOW,
                Action.DRAIN,
                pci_bus_id=bus,
                faults=sorted(faults),
                bursts=sum(1 for b in found if b.bus == bus),
            )
    if warning is not None:
        return warning
    undated = _undated_xids(events)
    if undated:
        return warn(
            name,
            f"{undated} XID line(s) in the kernel log carry no date and are not judged "
            "(use /dev/kmsg, dmesg -T/--time-format=iso or journal output)",
            undated=undated,
        )
    return ok(
        name,
        f"no node-fatal XID in the last {config.kernel_window_s:g}s",
        xids_seen=len([e for e in recent if e.event is KernelEventKind.XID]),
        app_xid_bursts=len(found),
    )


def _reset_since(event: KernelEvent, result: CheckResult, resets: Mapping[str, float]) -> bool:
    """The fault asks for a GPU reset and that GPU was reset after it was logged."""
    if result.action is not Action.RESET_GPU or event.time is None:
        return False
    key = gpu_resets.gpu_key(event.pci_bus_id)
    return key is not None and key in resets and event.time <= resets[key]


def _weight(result: CheckResult) -> tuple[int, int]:
    high = 1 if result.severity is Severity.HIGH else 0
    return high, _RANK.get(result.action, 0)


def host_hardware_errors(
    events: Sequence[KernelEvent], config: HealthConfig, now: float
) -> KernelEvent | None:
    """The newest uncorrected machine check, EDAC UE or PCIe AER in the window, if any."""
    bad = (KernelEventKind.MCE, KernelEventKind.EDAC_UE, KernelEventKind.KERNEL_PANIC)
    recent = [e for e in _recent(events, now, config.kernel_window_s) if e.event in bad]
    return recent[-1] if recent else None
