"""gpu.xid's second witness: XIDs the node agent's NVML watcher saw, merged into the
kernel log's events (health_checks.nvml_xids)."""

from __future__ import annotations

from slurm_triage.config import HealthConfig
from slurm_triage.evidence import KernelEvent, KernelEventKind, Source
from slurm_triage.health_checks.kernel_log import check_xid
from slurm_triage.health_checks.nvml_xids import SAME_FAULT_S, merge
from slurm_triage.health_checks.result import CheckStatus

NOW = 1_800_000_000.0


def _xid(xid: int, when: float | None, bus: str = "0000:5d:00", detail: str = "") -> KernelEvent:
    return KernelEvent(
        node="node1",
        time=when,
        source=Source.ROOT,
        event=KernelEventKind.XID,
        xid=xid,
        pci_bus_id=bus,
        detail=detail or f"NVRM: Xid (PCI:{bus}): {xid}, pid=1, name=python",
    )


def _boot(when: float) -> KernelEvent:
    return KernelEvent(node="node1", time=when, source=Source.ROOT, event=KernelEventKind.BOOT)


def test_an_xid_the_kernel_log_lost_fails_gpu_xid() -> None:
    """A context-switch timeout (XID 109) seen only by NVML's event fails the node as the
    kernel line would have; without the NVML event the log alone passes."""
    seen = _xid(109, NOW - 30, detail="NVML event: XID 109")
    log = [_boot(NOW - 3600)]
    assert check_xid(log, HealthConfig(), NOW).status is CheckStatus.OK
    result = check_xid(merge(log, [seen]), HealthConfig(), NOW)
    assert result.status is CheckStatus.FAIL and "XID 109" in result.reason


def test_an_xid_both_saw_counts_once() -> None:
    """The kernel line and NVML's event of one fault, seconds apart, on one GPU (NVML's bus
    id in its own form), are one event; another GPU's or a later one is not."""
    line = _xid(13, NOW - 100)
    same = _xid(13, NOW - 100 + SAME_FAULT_S / 2, bus="0000:5D:00.0")
    other_gpu = _xid(13, NOW - 100, bus="0000:9a:00")
    later = _xid(13, NOW - 100 + SAME_FAULT_S * 3)
    assert merge([line], [same]) == [line]
    assert merge([line], [other_gpu, later]) == [line, other_gpu, later]


def test_nvml_events_take_their_place_in_time() -> None:
    """Inserted after the last dated kernel event not newer than them; the kernel log's own
    order and undated lines are kept as they were."""
    undated = _xid(31, None)
    a, b = _xid(13, NOW - 50), _xid(13, NOW - 10, bus="0000:9a:00")
    early, middle = _xid(79, NOW - 60, bus="0000:1b:00"), _xid(79, NOW - 30, bus="0000:1b:00")
    assert merge([undated, a, b], [middle]) == [undated, a, middle, b]
    assert merge([undated, a, b], [early]) == [early, undated, a, b]
    assert merge([a, b], []) == [a, b]
