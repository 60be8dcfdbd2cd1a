"""XIDs NVML reported to a resident watcher (the node agent), merged into the kernel log's
events for gpu.xid.

NVML events reach only a process that listens when they happen (signatures.md §2.3), so the
kernel log stays gpu.xid's source; the agent's watcher is a second witness for what the log
lost or has not written yet: /dev/kmsg's ring overwritten by a flood of lines, an XID that
rsyslog has not yet written to kern.log. An XID both saw is counted once. An NVML event
carries only the XID's number, not its line, so XIDs whose meaning is in the line (154's new
recovery action, NVLink5's Fatal or Nonfatal) are judged as the catalogue's row alone: the
kernel log's line stays the decisive one for them.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_triage.attribution.xid import JOB_MADE_XIDS
from slurm_triage.evidence import KernelEvent, KernelEventKind
from slurm_triage.health_checks.gpu_resets import gpu_key

# The XIDs a job can make NVML report as often as it likes: the watcher keeps them apart
# from the rest (agent.xids), as the kernel parser does.
__all__ = ["JOB_MADE_XIDS", "SAME_FAULT_S", "merge"]

# A kernel line and an NVML event this close, same XID, same GPU: one fault seen twice.
SAME_FAULT_S = 10.0


def merge(kernel: Sequence[KernelEvent], nvml: Sequence[KernelEvent]) -> list[KernelEvent]:
    """The kernel log's events, in their order, with each NVML XID the log does not hold
    placed after the last dated kernel event not newer than it."""
    merged = list(kernel)
    for event in nvml:
        when = event.time
        if when is None or _logged(kernel, event.xid, event.pci_bus_id, when):
            continue
        at = len(merged)
        while at > 0:
            before = merged[at - 1].time
            if before is not None and before <= when:
                break
            at -= 1
        merged.insert(at, event)
    return merged


def _logged(kernel: Sequence[KernelEvent], xid: int | None, bus: str | None, when: float) -> bool:
    key = gpu_key(bus)
    return any(
        k.event is KernelEventKind.XID
        and k.xid == xid
        and k.time is not None
        and abs(k.time - when) <= SAME_FAULT_S
        and gpu_key(k.pci_bus_id) == key
        for k in kernel
    )
