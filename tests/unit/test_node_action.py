"""A health run's node action: decided by policies.nodes, carried out by the actuator, and a
dry run (`--dry-run`, `policy.act = false`, the deprecated `health.drain = false`) that
changes nothing in Slurm and says so."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.actuator import carry_out_node
from slurm_triage.config import Config, HealthConfig, PathsConfig, PolicyConfig, deprecations
from slurm_triage.health_checks.result import Action, RunReport, Severity, fail, ok
from slurm_triage.policies.breaker import failing_mark
from slurm_triage.policies.nodes import NodeDecision, NodeOutcome
from slurm_triage.prolog_epilog.node_action import act
from slurm_triage.testing import FakeDoor, node_info

NODE = "node2"


def _config(tmp_path: Path, **policy: object) -> Config:
    return Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        health=HealthConfig(breaker_settle_s=0),
        policy=PolicyConfig(**policy),  # type: ignore[arg-type]
    )


def _failed() -> RunReport:
    result = fail("gpu.lost", "GPU 3 lost", Severity.HIGH, Action.DRAIN_NOW)
    return RunReport(NODE, "cron", time.time(), 0.1, (result,))


def _passed() -> RunReport:
    return RunReport(NODE, "cron", time.time(), 0.1, (ok("gpu.lost"),))


def _cluster() -> FakeDoor:
    return FakeDoor(nodes=[node_info(f"node{i}") for i in range(1, 21)])


def test_a_failed_run_drains_through_the_actuator(tmp_path: Path) -> None:
    """Acting: the failing mark, then the drain with our reason; applied, not a dry run."""
    door = _cluster()
    done = act(_config(tmp_path), _failed(), may_resume=True, dry_run=False, door=door)
    assert (done.outcome, done.applied, done.dry_run) == (NodeOutcome.DRAIN, True, False)
    assert [c.method for c in door.mutations()] == ["set_node_comment", "drain"]
    assert door.node(NODE).reason == "triage: gpu.lost GPU 3 lost"


@pytest.mark.parametrize(
    "switch",
    [
        {"cli": True},
        {"act": False},
        {"health_drain": False},
    ],
)
def test_every_dry_run_switch_decides_and_changes_nothing(
    tmp_path: Path, switch: dict[str, bool]
) -> None:
    """`check --dry-run`, `policy.act = false` and the deprecated `health.drain = false`:
    the drain is decided and returned as a dry run, and Slurm is only read."""
    config = _config(tmp_path, act=switch.get("act", True))
    config = replace(config, health=replace(config.health, drain=switch.get("health_drain", True)))
    door = _cluster()
    done = act(config, _failed(), may_resume=True, dry_run="cli" in switch, door=door)
    assert door.mutations() == []
    assert (done.outcome, done.applied, done.dry_run) == (NodeOutcome.DRAIN, False, True)
    assert done.reason == "triage: gpu.lost GPU 3 lost"


def test_a_dry_run_leaves_a_failing_mark_in_place(tmp_path: Path) -> None:
    """A passing run clears this node's breaker mark from its Comment; a dry run does not."""
    marked = node_info(NODE, comment=failing_mark("gpu.lost", time.time()))
    door = FakeDoor(nodes=[marked])
    act(_config(tmp_path), _passed(), may_resume=True, dry_run=True, door=door)
    assert door.mutations() == []
    act(_config(tmp_path), _passed(), may_resume=True, dry_run=False, door=door)
    assert [c.method for c in door.mutations()] == ["set_node_comment"]
    assert door.node(NODE).comment == ""


def test_carry_out_node_says_what_a_dry_run_left_undone() -> None:
    """Only a drain or a resume is marked as a dry run; nothing else was to be done."""
    door = FakeDoor(nodes=[node_info(NODE)])
    drain = NodeDecision(NodeOutcome.DRAIN, NODE, "triage: x")
    assert carry_out_node(drain, door, dry_run=True).dry_run
    none = NodeDecision(NodeOutcome.NONE, NODE)
    assert not carry_out_node(none, door, dry_run=True).dry_run
    assert door.mutations() == []


def test_health_drain_false_is_a_deprecation_warning() -> None:
    """The old switch is still honoured, and named as deprecated with what replaces it."""
    assert deprecations(Config()) == ()
    old = Config(health=HealthConfig(drain=False))
    (line,) = deprecations(old)
    assert "health.drain" in line and "policy.act" in line
