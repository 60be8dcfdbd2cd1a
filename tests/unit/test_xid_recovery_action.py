"""XID 154 (GPU recovery action changed) asks for what the new action says (issue 14, item 9):
a node or system reboot is a reboot, never a reset, and the newest 154 of a GPU is its state."""

from __future__ import annotations

import pytest

from slurm_triage.attribution import parse_kernel_lines
from slurm_triage.attribution.xid import NodeAction, lookup
from slurm_triage.config import HealthConfig
from slurm_triage.health_checks import kernel_log
from slurm_triage.health_checks.result import Action, CheckStatus, Severity

NOW = 1_795_300_000.0
CONFIG = HealthConfig()


def kmsg(offset_s: float, message: str) -> str:
    """A /dev/kmsg record `offset_s` seconds from NOW (boot at NOW - 1000 s)."""
    return f"4,1,{int((1000 + offset_s) * 1e6)},-;{message}"


def xid(bus: str, number: int, text: str) -> str:
    return f"NVRM: Xid (PCI:0000:{bus}:00): {number}, pid='<unknown>', name=<unknown>, {text}"


def changed(old: str, new: str) -> str:
    return f"GPU recovery action changed from {old} to {new}"


def check(*lines: str):  # type: ignore[no-untyped-def]
    events = parse_kernel_lines(list(lines), boot_time=NOW - 1000)
    return kernel_log.check_xid(events, CONFIG, NOW)


@pytest.mark.parametrize(
    ("new", "action"),
    [
        ("0x2 (Node Reboot Required)", NodeAction.DRAIN_REBOOT),
        # NVML 13's NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT / _BUS_RESET, by code and by name
        ("0x7 (System Reboot Required)", NodeAction.DRAIN_REBOOT),
        ("0x6 (Bus Reset Required)", NodeAction.DRAIN_RESET),
        ("0x9 (Chassis Reboot Required)", NodeAction.DRAIN_REBOOT),
        ("0xa (Link Reset Required)", NodeAction.DRAIN_RESET),
        ("0xb (Something New)", NodeAction.WATCH),
    ],
)
def test_recovery_action_from_the_line(new: str, action: NodeAction) -> None:
    """Codes NVML knows map by code; codes it does not yet know by the words of their name."""
    assert lookup(154, changed("0x0 (None)", new)).node_action is action


def test_a_system_reboot_is_a_reboot() -> None:
    """XID 154 to System Reboot Required drains for a reboot (it only watched before)."""
    result = check(kmsg(-5, xid("3b", 154, changed("0x0 (None)", "0x7 (System Reboot Required)"))))
    assert (result.status, result.severity, result.action) == (
        CheckStatus.FAIL,
        Severity.HIGH,
        Action.REBOOT,
    )


def test_a_later_reset_xid_does_not_turn_a_reboot_into_a_reset() -> None:
    """The GSP times out (XID 119, reset) after the driver said the node must reboot: the node
    needs the reboot; reporting the newer reset would send it back broken."""
    result = check(
        kmsg(-60, xid("3b", 154, changed("0x0 (None)", "0x2 (Node Reboot Required)"))),
        kmsg(-30, xid("3b", 119, "Timeout after 6s of waiting for RPC response from GPU0 GSP!")),
    )
    assert result.action is Action.REBOOT and result.reason.startswith("XID 154 GPU 0000:3b:00")


def test_the_newest_recovery_action_of_a_gpu_is_its_state() -> None:
    """Reset, then back to None: the GPU recovered and the old 154 no longer fails it."""
    result = check(
        kmsg(-90, xid("3b", 154, changed("0x0 (None)", "0x1 (GPU Reset Required)"))),
        kmsg(-20, xid("3b", 154, changed("0x1 (GPU Reset Required)", "0x0 (None)"))),
    )
    assert result.status is CheckStatus.OK
    other_gpu = check(
        kmsg(-90, xid("3b", 154, changed("0x0 (None)", "0x1 (GPU Reset Required)"))),
        kmsg(-20, xid("5d", 154, changed("0x1 (GPU Reset Required)", "0x0 (None)"))),
    )
    assert other_gpu.failed and "0000:3b:00" in other_gpu.reason


def test_on_the_simulated_node_a_reboot_stays_a_reboot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The simulated GPU logs XID 154 (node reboot required), then its GSP times out: the
    prolog's gpu.xid asks for the reboot and names the XID that asked for it."""
    import time
    from pathlib import Path

    from slurm_triage.health_checks import registry
    from slurm_triage.health_checks.runner import Run
    from slurm_triage.simulate import driver_log
    from slurm_triage.simulate.estate import NodeEstate, inject
    from tests.unit.test_health_runner import sim_config

    config = sim_config(tmp_path)
    estate = NodeEstate(Path(config.health.simulate_root), "node2").ensure()
    reboot = changed("0x0 (None)", "0x2 (Node Reboot Required)")
    for line in driver_log.xid_lines(154, "0000:5d:00", reboot):
        estate.kernel_line(line, time.time() - 30)
    inject(estate, "xid", 119, gpu=3)
    (result,) = Run(config, registry.select(["gpu.xid"], False), node="node2").execute().results
    assert (result.action, result.reason) == (
        Action.REBOOT,
        "XID 154 GPU 0000:5d:00 GPU recovery action changed",
    )


def test_the_agents_nvml_copy_of_a_154_does_not_undo_the_kernels_reboot() -> None:
    """The node agent merges NVML's XID events, which carry the number alone; when the kmsg
    clock drifts, NVML's copy of the kernel's 154 looks newer (review: kmsg drift). The
    kernel's line names the action; the copy does not replace it. A later kernel line back
    to None still clears it, and a copy alone only warns, as before."""
    from slurm_triage.evidence import KernelEvent, KernelEventKind, Source
    from slurm_triage.health_checks import nvml_xids

    kernel = parse_kernel_lines(
        [kmsg(-100, xid("3b", 154, changed("0x0 (None)", "0x2 (Node Reboot Required)")))],
        boot_time=NOW - 1000,
    )
    copy = KernelEvent(
        node="n1",
        time=NOW - 60,
        source=Source.ROOT,
        event=KernelEventKind.XID,
        xid=154,
        pci_bus_id="0000:3b:00",
        detail="NVML event: XID 154",
    )
    merged = nvml_xids.merge(kernel, [copy])
    assert len(merged) == 2  # not taken for the same fault: 40 s apart
    result = kernel_log.check_xid(merged, CONFIG, NOW)
    assert (result.status, result.action) == (CheckStatus.FAIL, Action.REBOOT)
    back = parse_kernel_lines(
        [kmsg(-30, xid("3b", 154, changed("0x2 (Node Reboot Required)", "0x0 (None)")))],
        boot_time=NOW - 1000,
    )
    assert kernel_log.check_xid([*merged, *back], CONFIG, NOW).status is CheckStatus.OK
    assert kernel_log.check_xid([copy], CONFIG, NOW).status is CheckStatus.WARN
