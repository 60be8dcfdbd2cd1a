"""A pending reboot is never cancelled by a resume of ours (State=RESUME clears
REBOOT_REQUESTED and REBOOT_ISSUED), nor is a repair opened under it; a node powered down
(slurmctld skips `scontrol reboot` for it, rc 0) counts its power up as the reboot instead
of being asked again every pass."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.cli.reconcile import NodeStep, reconcile
from slurm_triage.clock import Clock
from slurm_triage.config import Config, DecisionConfig, HealthConfig, PathsConfig, RepairConfig
from slurm_triage.health_checks.result import RunReport, ok
from slurm_triage.journal import Journal
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.policies.lifecycle import (
    BurnIn,
    LifecycleAction,
    LifecycleInput,
    NodeLifecycle,
    Repair,
    burn_in_reservation,
    decide_lifecycle,
)
from slurm_triage.policies.nodes import NodeOutcome, decide_node
from slurm_triage.slurm.model import NodeFlag, NodeInfo, ReservationInfo
from slurm_triage.testing import FakeDoor, node_info, node_infos

A, S = LifecycleAction, NodeLifecycle
NOW = 1_700_000_000.0
ON = RepairConfig(enabled=True)
REBOOTING = "triage: repairing reboot gpu_unavailable"


def _node(state: str, flags: set[str], reason: str, **more: object) -> NodeInfo:
    return node_info("node2", state=state, flags=frozenset(flags), reason=reason, **more)


def _decide(
    node: NodeInfo,
    steps: tuple[LifecycleEvent, ...] = (),
    reservation: ReservationInfo | None = None,
    burn_in: BurnIn = BurnIn.NOT_READ,
):  # type: ignore[no-untyped-def]
    given = LifecycleInput(node, reservation, steps, burn_in, None, Repair.UNKNOWN, NOW)
    return decide_lifecycle(given, ON, in_repair=0, cluster_size=100)


def _rebooted_at(at: float) -> tuple[LifecycleEvent, ...]:
    return (
        LifecycleEvent("node2", at, "drained", "reboot", True, "repair 1", "gpu_unavailable", 1),
    )


# -- a pending reboot ---------------------------------------------------------------------


def test_a_passing_screen_does_not_resume_a_node_whose_reboot_is_pending() -> None:
    """An admin's `scontrol reboot` on a node we drained for a check: the resume would
    silently cancel it."""
    node = _node("ALLOCATED", {"DRAIN", "REBOOT_REQUESTED"}, "triage: fs.mounts /scratch missing")
    report = RunReport("node2", "epilog", time.time(), 1.0, (ok("fs.mounts"),))
    got = decide_node(report, node, [node], HealthConfig(), may_resume=True, now=time.time())
    assert got.outcome is NodeOutcome.KEPT_OUT
    assert "reboot pending" in got.detail


@pytest.mark.parametrize(
    ("node", "reservation", "burn_in"),
    [
        # `burn-in pending` written while a reboot is in flight
        (_node("DOWN", {"DRAIN", "REBOOT_ISSUED"}, "triage: burn-in pending gpu.xid"), None,
         BurnIn.NOT_READ),
        # reserved for its burn-in, no job yet, a reboot asked
        (_node("IDLE", {"DRAIN", "REBOOT_REQUESTED"}, "triage: burn-in pending gpu.xid"),
         ReservationInfo(burn_in_reservation("node2"), ("node2",), int(NOW), int(NOW) + 60,
                         frozenset({"MAINT"}), ("root",)),
         BurnIn.NONE),
        # our reboot completed, and a new one was asked since
        (_node("IDLE", {"DRAIN", "REBOOT_REQUESTED"}, f"{REBOOTING} : reboot complete"), None,
         BurnIn.NOT_READ),
    ],
)  # fmt: skip
def test_no_burn_in_starts_while_a_reboot_is_pending(
    node: NodeInfo, reservation: ReservationInfo | None, burn_in: BurnIn
) -> None:
    got = _decide(node, reservation=reservation, burn_in=burn_in)
    assert got.action is A.NONE
    assert got.reason.startswith("reboot pending")


@pytest.mark.parametrize(
    "reason",
    ["triage: gpu.lost GPU 3 lost", "triage: gpu.ecc GPU 1 uncorrectable ECC"],
)
def test_no_repair_opens_on_a_drained_node_whose_reboot_someone_asked(reason: str) -> None:
    """slurmctld skips our reboot, the cycle would count as done, and every pass would open
    another until the node went to RMA."""
    got = _decide(_node("IDLE", {"DRAIN", "REBOOT_REQUESTED"}, reason))
    assert got.state is S.DRAINED
    assert got.action is A.NONE and got.cycle == 0 and got.drain_reason == ""


def _config(tmp_path: Path) -> Config:
    (tmp_path / "ev").mkdir(exist_ok=True)
    return Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        decision=DecisionConfig(journal=str(tmp_path / "j.sqlite")),
        repair=ON,
    )


def _passes(config: Config, door: FakeDoor, journal: Journal, count: int) -> list[NodeStep]:
    now = [NOW]
    clock = Clock(time=lambda: now[0], monotonic=lambda: now[0], sleep=lambda s: None)
    seen = []
    for _ in range(count):
        steps = reconcile(config, door, journal, dry_run=False, clock=clock, only=("node2",))
        seen.append(steps[0])
        now[0] += 60
    return seen


def test_reconcile_waits_for_an_admins_reboot_of_a_node_we_drained(tmp_path: Path) -> None:
    config = _config(tmp_path)
    door = FakeDoor(nodes=node_infos(20))
    journal = Journal(config.decision.journal)
    door.drain("node2", "triage: gpu.lost GPU 3 lost")
    node = door.node("node2")
    door.node_table["node2"] = replace(node, flags=node.flags | {NodeFlag.REBOOT_REQUESTED})
    steps = _passes(config, door, journal, 4)
    assert all(s.decision.action is A.NONE for s in steps)
    assert door.calls_to("reboot") == [] and door.calls_to("resume") == []
    assert NodeFlag.REBOOT_REQUESTED in door.node("node2").flags
    assert not [e for e in journal.lifecycle_events(since=0) if e.applied]


# -- a powered-down node ------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["POWERED_DOWN"])
def test_a_powered_down_node_counts_its_power_up_as_the_reboot(flag: str) -> None:
    got = _decide(_node("IDLE", {"DRAIN", flag}, REBOOTING), _rebooted_at(NOW - 600))
    assert (got.state, got.action) == (S.REPAIRING, A.START_BURN_IN)
    assert "power up is the reboot" in got.reason


@pytest.mark.parametrize("flag", ["POWER_DOWN", "POWERING_DOWN", "POWERING_UP"])
def test_a_node_powering_down_or_up_is_not_asked_to_reboot_again(flag: str) -> None:
    got = _decide(_node("IDLE", {"DRAIN", flag}, REBOOTING), _rebooted_at(NOW - 600))
    assert got.action is A.NONE
    assert "powering" in got.reason


def test_a_node_that_booted_since_our_request_is_burned_in() -> None:
    """Powered up (or booted by a person) after our request, no slurmctld note on the
    reason: its boot time says it booted."""
    node = _node("IDLE", {"DRAIN"}, REBOOTING, boot_time=int(NOW - 300))
    assert _decide(node, _rebooted_at(NOW - 600)).action is A.START_BURN_IN
    before = replace(node, boot_time=int(NOW - 900))  # booted before we asked: ask again
    assert _decide(before, _rebooted_at(NOW - 600)).action is A.REBOOT


def test_fake_slurmctld_skips_a_reboot_of_a_powered_down_node() -> None:
    """The door's drain goes through, the reboot is skipped with no error (proc_req.c)."""
    door = FakeDoor(nodes=[_node("IDLE", {"POWERED_DOWN"}, "")])
    door.reboot("node2", REBOOTING)
    node = door.node("node2")
    assert node.drained and node.reason == REBOOTING
    assert not node.reboot_pending


def test_reconcile_burns_in_a_powered_down_node_instead_of_rebooting_it_for_ever(
    tmp_path: Path,
) -> None:
    """Power saving powered the drained node down: our reboot is skipped, and the next
    pass starts the burn-in (its job powers the node up) rather than asking again."""
    config = _config(tmp_path)
    door = FakeDoor(nodes=[*node_infos(20)])
    door.node_table["node2"] = _node("IDLE", {"DRAIN", "POWERED_DOWN"}, "triage: gpu.lost GPU 3")
    journal = Journal(config.decision.journal)
    first, second, third = _passes(config, door, journal, 3)
    assert first.decision.action is A.REBOOT
    assert "slurmctld skips the reboot" in first.results[0].detail
    assert second.decision.action is A.START_BURN_IN and second.applied
    assert third.decision.state is S.BURN_IN
    assert len(door.calls_to("reboot")) == 1
    assert len(door.calls_to("submit_burn_in")) == 1


def test_a_boot_since_an_older_cycles_reboot_is_no_reboot_of_this_cycle() -> None:
    """Cycle 1 rebooted the node ten days ago and returned it; cycle 2's drain with our
    reboot reason went through but `scontrol reboot` did not (timed out). The node's boot
    after cycle 1's reboot proves nothing about cycle 2: it is asked again, not burned in
    unrebooted."""
    day = 86400.0

    def step(at: float, action: A, applied: bool = True, cycle: int = 1) -> LifecycleEvent:
        return LifecycleEvent(
            node="node2",
            at=at,
            state="drained",
            action=action.value,
            applied=applied,
            reason="x",
            subject="gpu.lost",
            cycle=cycle,
        )

    steps = (
        step(NOW - 10 * day, A.REBOOT),
        step(NOW - 10 * day + 600, A.START_BURN_IN),
        step(NOW - 10 * day + 4000, A.RETURN_TO_SERVICE),
        step(NOW - 120, A.REBOOT, applied=False, cycle=2),
    )
    node = _node(
        "IDLE",
        {"DRAIN"},
        "triage: repairing reboot gpu.lost",
        reason_time=int(NOW - 120),
        boot_time=int(NOW - 10 * day + 300),
    )
    given = LifecycleInput(
        node=node,
        reservation=None,
        steps=steps,
        burn_in=BurnIn.NOT_READ,
        signals=None,
        xid_repair=Repair.UNKNOWN,
        now=NOW,
    )
    decision = decide_lifecycle(given, ON, in_repair=0, cluster_size=100)
    assert (decision.action, decision.reason) == (A.REBOOT, "reboot no longer pending: asked again")
