"""A suspect node gets its own Weight back at the clear, never the suspect weight: a mark
taken while the weight was still raised (its feature gone) records no weight before."""

from __future__ import annotations

from pathlib import Path

from slurm_triage.actuator import repair
from slurm_triage.cli.reconcile import reconcile
from slurm_triage.clock import Clock
from slurm_triage.config import Config, DecisionConfig, PathsConfig, RepairConfig
from slurm_triage.journal import Journal
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.policies.lifecycle import (
    BurnIn,
    LifecycleAction,
    LifecycleInput,
    Repair,
    decide_lifecycle,
)
from slurm_triage.testing import FakeDoor, node_info, node_infos

NOW = 1_700_000_000.0
ON = RepairConfig(enabled=True)
SUSPECT = ON.suspect_weight


def _mark(at: float, weight: object) -> LifecycleEvent:
    return LifecycleEvent(
        "node2", at, "healthy", "mark_suspect", True, "lemon", detail={"weight_before": weight}
    )


def _clear_weight(*marks: LifecycleEvent) -> int | None:
    marked = ("triage_suspect",)
    node = node_info("node2", weight=SUSPECT, features=marked, active_features=marked)
    now = NOW + 25 * 3600
    given = LifecycleInput(node, None, marks, BurnIn.NOT_READ, None, Repair.UNKNOWN, now)
    got = decide_lifecycle(given, ON, in_repair=0, cluster_size=100)
    assert got.action is LifecycleAction.CLEAR_SUSPECT, got
    return got.restore_weight


def test_the_clear_restores_the_weight_before_the_period_not_a_remarks_suspect_weight() -> None:
    assert _clear_weight(_mark(NOW, 10), _mark(NOW + 3600, SUSPECT)) == 10


def test_a_remark_after_reconfigure_records_the_slurm_conf_weight_which_the_clear_restores() -> (
    None
):
    """`scontrol reconfigure` reset the Weight from slurm.conf (changed meanwhile to 20)."""
    assert _clear_weight(_mark(NOW, 10), _mark(NOW + 3600, 20)) == 20


def test_with_no_weight_recorded_the_clear_restores_slurms_default() -> None:
    assert _clear_weight(_mark(NOW, None), _mark(NOW + 60, SUSPECT)) == 1


def test_mark_suspect_never_records_the_suspect_weight_as_the_weight_before() -> None:
    door = FakeDoor(nodes=[node_info("node2", weight=SUSPECT)])
    got = repair.mark_suspect(door, "node2", weight=SUSPECT, dry_run=False)
    assert got.applied and got.weight_before is None
    fresh = FakeDoor(nodes=[node_info("node2", weight=7)])
    assert repair.mark_suspect(fresh, "node2", weight=SUSPECT, dry_run=False).weight_before == 7


def test_a_mark_whose_feature_was_lost_ends_with_the_nodes_own_weight(tmp_path: Path) -> None:
    """The reviewer's case: marked an hour ago (weight 1 before); the features update
    failed after the weight went through, so the node is at the suspect weight without the
    feature. The pass marks it again; after the cool-down the clear gives it weight 1."""
    (tmp_path / "ev").mkdir()
    config = Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        decision=DecisionConfig(journal=str(tmp_path / "j.sqlite")),
        repair=ON,
    )
    now = [NOW]
    clock = Clock(time=lambda: now[0], monotonic=lambda: now[0], sleep=lambda s: None)
    door = FakeDoor(nodes=node_infos(20))
    journal = Journal(config.decision.journal)
    journal.add_lifecycle_events([_mark(NOW - 3600, 1)])
    door.set_node_weight("node2", SUSPECT)
    first = reconcile(config, door, journal, dry_run=False, clock=clock, only=("node2",))[0]
    assert first.decision.action is LifecycleAction.MARK_SUSPECT and first.applied
    now[0] += 25 * 3600
    second = reconcile(config, door, journal, dry_run=False, clock=clock, only=("node2",))[0]
    assert second.decision.action is LifecycleAction.CLEAR_SUSPECT and second.applied
    node = door.node("node2")
    assert (node.weight, node.features) == (1, ())
