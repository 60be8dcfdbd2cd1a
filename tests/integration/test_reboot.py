"""The dev cluster's RebootProgram: `scontrol reboot` really restarts that node's slurmd with a
new boot time, and reboots its simulated hardware (transient faults clear, persistent ones
come back), so the repair loop is tested against slurmctld's own reboot handling."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from slurm_triage.devcluster import cluster
from slurm_triage.slurm import open_door
from tests.integration.slurmtest import env, log_tail, run, scontrol, wait_for

pytestmark = pytest.mark.integration


def _triage(layout, *args: str):  # type: ignore[no-untyped-def]
    return run(layout, "slurm-triage", *args)


@pytest.fixture
def door(devcluster):  # type: ignore[no-untyped-def]
    d = open_door(env=env(devcluster), timeout_s=15, backend=devcluster.backend)
    yield d
    _triage(devcluster, "inject", "--node", "node3", "clear")
    if d.node("node3").state == "DOWN" or d.node("node3").drained:
        scontrol(devcluster, "update", "nodename=node3", "state=resume")
    wait_for(lambda: d.node("node3").responding, 60, "node3 back in service")


def _boot_time(layout, node: str) -> float:  # type: ignore[no-untyped-def]
    shown = scontrol(layout, "-o", "show", "node", node)
    stamp = next(f for f in shown.split() if f.startswith("BootTime="))[len("BootTime=") :]
    return datetime.fromisoformat(stamp).timestamp()


def _reboot_and_wait(layout, door) -> str:  # type: ignore[no-untyped-def]
    # slurmctld counts a reboot as done when the node's boot time is not before the second
    # the reboot was issued (waiting_for_node_boot): issued in the second the node last
    # registered its boot, the old slurmd's next answer returns the node to service before
    # the RebootProgram has run. Real nodes are not rebooted within a second of a boot.
    boot = _boot_time(layout, "node3")
    wait_for(lambda: time.time() >= boot + 2, 5, "two seconds since node3's last boot")
    before = door.node("node3")
    scontrol(
        layout, "reboot", "ASAP", "nextstate=DOWN", "reason=triage: repairing reboot test", "node3"
    )

    seen: list[str] = []

    def rebooted() -> str | None:
        node = door.node("node3")
        seen.append(f"{node.state} {node.reason!r}")
        return node.reason if node.state == "DOWN" and "reboot complete" in node.reason else None

    try:
        reason = wait_for(rebooted, 60, "node3 rebooted")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_reboot_story(layout, seen)}") from None
    assert door.node("node3").reason_time >= (before.reason_time or 0)
    return reason


def _reboot_story(layout, seen: list[str]) -> str:  # type: ignore[no-untyped-def]
    """What node3 went through, for a reboot that did not complete: the states the test saw
    (each change once), the RebootProgram's own log and the daemons' lines about node3."""
    states = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
    return "\n".join(
        [
            "node3 as the test saw it: " + " -> ".join(states[-12:]),
            "--- reboot-node3.log",
            *log_tail(layout, "reboot-node3.log", 20),
            "--- slurmctld.log, node3",
            *log_tail(layout, "slurmctld.log", 20, "node3"),
            "--- slurmd-node3.log",
            *log_tail(layout, "slurmd-node3.log", 20),
        ]
    )


def _failed(layout) -> set[str]:  # type: ignore[no-untyped-def]
    out = _triage(layout, "check", "--all", "--json", "--dry-run", "--node", "node3")
    results = json.loads(out.stdout)["results"]
    return {r["check"] for r in results if r["status"] == "FAIL"}


def test_reboot_clears_a_transient_fault_and_keeps_our_reason(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    assert _triage(devcluster, "inject", "--node", "node3", "xid=79", "--gpu", "2").returncode == 0
    assert "gpu.lost" in _failed(devcluster)
    reason = _reboot_and_wait(devcluster, door)
    # slurmctld appends its words (set_node_reason): our prefix stays first.
    assert reason.startswith("triage: repairing reboot test : reboot issued")
    assert _failed(devcluster) == set()


def test_a_persistent_fault_survives_the_reboot(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    injected = _triage(
        devcluster, "inject", "--node", "node3", "xid=79", "--gpu", "2", "--persistent"
    )
    assert injected.returncode == 0, injected.stderr
    _reboot_and_wait(devcluster, door)
    assert {"gpu.xid", "gpu.lost"} <= _failed(devcluster)


def _slurmd_environment(layout, node: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    pid = next(s.pid for s in cluster.daemon_status(layout) if s.name == f"slurmd-{node}")
    raw = Path(f"/proc/{pid}/environ").read_bytes() if pid else b""
    return dict(v.decode().partition("=")[::2] for v in raw.split(b"\0") if b"=" in v)


def test_a_reboot_after_scontrol_reconfigure_completes(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """25.11's slurmd re-execs itself for `scontrol reconfigure` with SLURMD_RECONF and
    SLURMD_BOOT_TIME in its environment, which its RebootProgram inherits: the restarted
    slurmd must not get them, or it reports the old boot time and slurmctld waits for a boot
    that never comes. (22.05 reconfigures in place: there the reboot is an ordinary one.)"""
    scontrol(devcluster, "reconfigure")
    if devcluster.slurm != "22.05":
        wait_for(
            lambda: "SLURMD_BOOT_TIME" in _slurmd_environment(devcluster, "node3"),
            30,
            "node3's slurmd re-executed by the reconfigure",
        )
    wait_for(lambda: door.node("node3").responding, 60, "node3 responding after reconfigure")
    _reboot_and_wait(devcluster, door)
    assert "SLURMD_BOOT_TIME" not in _slurmd_environment(devcluster, "node3")
