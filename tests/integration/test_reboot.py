"""The dev cluster's RebootProgram: `scontrol reboot` really restarts that node's slurmd with a
new boot time, and reboots its simulated hardware (transient faults clear, persistent ones
come back), so the repair loop is tested against slurmctld's own reboot handling."""

from __future__ import annotations

import json

import pytest

from slurm_triage.slurm import open_door
from tests.integration.slurmtest import env, run, scontrol, wait_for

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


def _reboot_and_wait(layout, door) -> str:  # type: ignore[no-untyped-def]
    before = door.node("node3")
    scontrol(
        layout, "reboot", "ASAP", "nextstate=DOWN", "reason=triage: repairing reboot test", "node3"
    )

    def rebooted() -> str | None:
        node = door.node("node3")
        return node.reason if node.state == "DOWN" and "reboot complete" in node.reason else None

    reason = wait_for(rebooted, 60, "node3 rebooted")
    assert door.node("node3").reason_time >= (before.reason_time or 0)
    return reason


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
