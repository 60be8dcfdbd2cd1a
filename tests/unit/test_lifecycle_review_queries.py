"""A reconcile pass asks Slurm for a burn-in job only for a node in burn-in, and every drain
(or resume) of the repair actuator re-reads the node first: an admin's drain made during the
pass is never overwritten or undone."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from slurm_triage.actuator import repair
from slurm_triage.actuator.repair import RepairOutcome, RepairResult
from slurm_triage.cli.reconcile import reconcile
from slurm_triage.clock import Clock
from slurm_triage.config import Config, DecisionConfig, PathsConfig, RepairConfig
from slurm_triage.journal import Journal
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.policies.lifecycle import LifecycleAction, NodeLifecycle, burn_in_reservation
from slurm_triage.slurm.model import NodeFlag
from slurm_triage.testing import FakeDoor, node_info, node_infos

NOW = 1_700_000_000.0
ADMIN = "PSU swap ticket 42"
OURS = "triage: gpu.lost GPU 3 lost"


def _config(tmp_path: Path) -> Config:
    (tmp_path / "ev").mkdir(exist_ok=True)
    return Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        decision=DecisionConfig(journal=str(tmp_path / "j.sqlite")),
        repair=RepairConfig(enabled=True),
    )


def _returned(node: str, job_id: int) -> list[LifecycleEvent]:
    t = NOW - 10 * 86400
    return [
        LifecycleEvent(node, t, "drained", "reboot", True, "r", "gpu.xid", 1),
        LifecycleEvent(node, t + 600, "repairing", "start_burn_in", True, "b", "gpu.xid", 1,
                       job_id=job_id),
        LifecycleEvent(node, t + 4000, "burn_in", "return_to_service", True, "ok", "gpu.xid", 1,
                       job_id=job_id),
    ]  # fmt: skip


def test_a_pass_asks_no_burn_in_job_of_nodes_that_are_not_in_burn_in(tmp_path: Path) -> None:
    """The reviewer's case scaled down: 20 of 200 nodes repaired and returned 10 days ago;
    one node in burn-in now, whose job is the only one asked."""
    config = _config(tmp_path)
    door = FakeDoor(nodes=node_infos(200))
    journal = Journal(config.decision.journal)
    events = [e for i in range(1, 21) for e in _returned(f"node{i}", 5000 + i)]
    burning = LifecycleEvent("node30", NOW - 600, "repairing", "start_burn_in", True, "b",
                             "gpu.xid", 1, job_id=6000)  # fmt: skip
    journal.add_lifecycle_events([*events, burning])
    door.create_reservation(burn_in_reservation("node30"), "node30", 3600, ("root",))
    door.calls.clear()
    now = [NOW]
    clock = Clock(time=lambda: now[0], monotonic=lambda: now[0], sleep=lambda s: None)
    steps = {
        s.decision.node: s for s in reconcile(config, door, journal, dry_run=False, clock=clock)
    }
    asked = [c.args[0] for c in door.calls if c.method in ("job", "accounted_job")]
    assert set(asked) == {6000}, Counter(c.method for c in door.calls)
    assert steps["node30"].decision.state is NodeLifecycle.BURN_IN
    assert steps["node30"].decision.action is LifecycleAction.NONE  # Slurm could not say


def _taken_by_admin(door: FakeDoor) -> None:
    """The pass read node2 drained by us; an admin drains it before the step runs."""
    door.drain_as_admin("node2", ADMIN)


@pytest.mark.parametrize(
    "step",
    [
        lambda door: repair.request_gpu_reset(door, "node2", "triage: repairing gpu_reset "
                                              "gpu=all gpu.ecc", dry_run=False),
        lambda door: repair.send_to_rma(door, "node2", "triage: rma gpu.ecc x", dry_run=False),
        lambda door: repair.reboot_node(door, "node2", "triage: repairing reboot gpu.lost",
                                        dry_run=False),
        lambda door: repair.fail_burn_in(door, "node2", "triage: burn-in failed job=5 gpu.lost",
                                         dry_run=False),
        lambda door: repair.finish_gpu_reset(door, "node2", "triage: burn-in pending gpu.ecc",
                                             dry_run=False),
    ],
)  # fmt: skip
def test_a_repair_drain_leaves_an_admins_drain_made_during_the_pass(step) -> None:  # type: ignore[no-untyped-def]
    door = FakeDoor(nodes=[node_info("node2", flags=frozenset({NodeFlag.DRAIN}), reason=OURS)])
    _taken_by_admin(door)
    got: RepairResult = step(door)
    assert got.outcome is RepairOutcome.NOT_OURS and not got.ok
    assert ADMIN in got.detail
    assert door.node("node2").reason == ADMIN
    assert door.admin_drains_touched == []


@pytest.mark.parametrize("state", ["DOWN", "IDLE"])
def test_a_repair_drain_leaves_an_admins_down_or_fail_node(state: str) -> None:
    flags = frozenset() if state == "DOWN" else frozenset({NodeFlag.FAIL})
    door = FakeDoor(nodes=[node_info("node2", state=state, flags=flags, reason=ADMIN)])
    got = repair.send_to_rma(door, "node2", "triage: rma gpu.ecc x", dry_run=False)
    assert got.outcome is RepairOutcome.NOT_OURS
    assert door.calls_to("drain") == []


def test_a_repair_drain_goes_ahead_on_our_own_drain_or_a_node_in_service() -> None:
    door = FakeDoor(nodes=[node_info("node2", flags=frozenset({NodeFlag.DRAIN}), reason=OURS),
                           node_info("node3")])  # fmt: skip
    assert repair.send_to_rma(door, "node2", "triage: rma gpu.ecc x", dry_run=False).applied
    assert repair.send_to_rma(door, "node3", "triage: rma gpu.ecc x", dry_run=False).applied
    assert door.node("node2").reason == door.node("node3").reason == "triage: rma gpu.ecc x"


def test_a_burn_in_does_not_resume_a_node_an_admin_drained_during_the_pass() -> None:
    door = FakeDoor(
        nodes=[node_info("node2", flags=frozenset({NodeFlag.DRAIN}),
                         reason="triage: burn-in pending gpu.ecc")]
    )  # fmt: skip
    _taken_by_admin(door)
    got = repair.start_burn_in(
        door, "node2", reservation=burn_in_reservation("node2"), users=("root",),
        duration_s=3600, command=("true",), job_name="b", output="/tmp/x", time_limit_min=60,
        dry_run=False,
    )  # fmt: skip
    assert got.outcome is RepairOutcome.NOT_OURS
    assert door.calls_to("resume") == [] and door.calls_to("create_reservation") == []
    assert door.node("node2").reason == ADMIN
