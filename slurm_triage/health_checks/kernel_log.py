"""Kernel-log facts for the checks: read `/dev/kmsg` or a log file, judge XIDs and MCE/EDAC.

NVML events only report XIDs that happen while someone listens, so a prolog or cron check
must read the kernel log (signatures.md §0.1). Reading is bounded (a tail of the file, a
capped number of kmsg records); events older than `health.kernel_window_s` do not count.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from slurm_triage.attribution.kernel import parse_kernel_file, parse_kernel_lines
from slurm_triage.attribution.xid import NodeAction, Origin, lookup
from slurm_triage.config import HealthConfig
from slurm_triage.evidence import KernelEvent, KernelEventKind
from slurm_triage.health_checks.result import Action, CheckResult, Severity, fail, ok, warn

MAX_KMSG_RECORDS = 200_000
TAIL_BYTES = 8 << 20
_PID = re.compile(r"pid=(\d+)")
_DRAIN_ACTIONS = {
    NodeAction.DRAIN_RESET: Action.RESET_GPU,
    NodeAction.DRAIN_REBOOT: Action.REBOOT,
    NodeAction.DRAIN_RMA: Action.RMA,
    NodeAction.DRAIN_INSPECT: Action.DRAIN_NOW,
}


def read_kernel_events(path: str, node: str | None) -> list[KernelEvent]:
    """Kernel events from `/dev/kmsg` (record by record, non-blocking) or a log file's tail."""
    if os.path.basename(path) == "kmsg" and path.startswith("/dev/"):
        boot_time = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
        return parse_kernel_lines(_read_kmsg(path), node=node, boot_time=boot_time)
    return parse_kernel_file(path, node=node, tail_bytes=TAIL_BYTES)


def _read_kmsg(path: str) -> list[str]:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines: list[str] = []
    try:
        while len(lines) < MAX_KMSG_RECORDS:
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
    finally:
        os.close(fd)
    return lines


def _recent(events: Sequence[KernelEvent], now: float, window_s: float) -> list[KernelEvent]:
    return [e for e in events if e.time is None or now - window_s <= e.time <= now + 300]


def check_xid(
    events: Sequence[KernelEvent], config: HealthConfig, now: float, **_: Any
) -> CheckResult:
    """XIDs in the window, judged by the XID catalogue: fatal ones fail the node, application
    ones only when they repeat on one GPU across distinct processes."""
    name = "gpu.xid"
    recent = _recent(events, now, config.kernel_window_s)
    app_pids: dict[str, set[str]] = {}
    warning: CheckResult | None = None
    for event in reversed(recent):  # newest first
        bus = event.pci_bus_id or "?"
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
            continue
        info = lookup(event.xid, event.detail)
        evidence = {
            "xid": event.xid,
            "pci_bus_id": bus,
            "meaning": info.meaning,
            "line": event.detail,
        }
        if info.node_action in _DRAIN_ACTIONS:
            return fail(
                name,
                f"XID {event.xid} GPU {bus} {info.meaning}",
                Severity.HIGH,
                _DRAIN_ACTIONS[info.node_action],
                **evidence,
            )
        if info.node_action is NodeAction.RESET_GPU:
            return fail(
                name,
                f"XID {event.xid} GPU {bus} {info.meaning}",
                Severity.LOW,
                Action.RESET_GPU,
                **evidence,
            )
        if info.node_action is NodeAction.WATCH and warning is None:
            warning = warn(name, f"XID {event.xid} GPU {bus} {info.meaning}", **evidence)
        if info.origin is Origin.APP:
            pid = _PID.search(event.detail)
            app_pids.setdefault(bus, set()).add(pid.group(1) if pid else str(event.time))
    for bus, pids in app_pids.items():
        if len(pids) >= config.app_xid_repeats:
            return fail(
                name,
                f"application XIDs on GPU {bus} from {len(pids)} processes",
                Severity.LOW,
                Action.DRAIN,
                pci_bus_id=bus,
                processes=len(pids),
            )
    return warning or ok(
        name,
        f"no node-fatal XID in the last {config.kernel_window_s:g}s",
        xids_seen=len([e for e in recent if e.event is KernelEventKind.XID]),
    )


def host_hardware_errors(
    events: Sequence[KernelEvent], config: HealthConfig, now: float
) -> KernelEvent | None:
    """The newest uncorrected machine check, EDAC UE or PCIe AER in the window, if any."""
    bad = (KernelEventKind.MCE, KernelEventKind.EDAC_UE, KernelEventKind.KERNEL_PANIC)
    recent = [e for e in _recent(events, now, config.kernel_window_s) if e.event in bad]
    return recent[-1] if recent else None
