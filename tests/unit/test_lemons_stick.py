"""Lemons stick (issue 16): what a passing health run may return is read from the node's
reason alone, strictly; lemons, RMA nodes and repairs are never resumed by it, and with
`[repair] enabled` nothing is; a decision drains a lemon with its own reason."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_triage.actuator import carry_out
from slurm_triage.clock import Clock
from slurm_triage.config import Config, HealthConfig, PathsConfig, PolicyConfig, RepairConfig
from slurm_triage.health_checks.result import Action, RunReport, Severity, fail, ok
from slurm_triage.journal.records import NodeEvent
from slurm_triage.policies.drain_words import (
    DrainKind,
    burn_in_failed_reason,
    burn_in_pending_reason,
    gpu_reset_reason,
    lemon_reason,
    read_reason,
    reboot_reason,
    rma_reason,
)
from slurm_triage.policies.lemons import node_signals
from slurm_triage.policies.model import Decision, Verdict
from slurm_triage.policies.nodes import NodeOutcome
from slurm_triage.prolog_epilog.node_action import act
from slurm_triage.testing import FakeDoor, node_info

NODE = "node2"


def _config(tmp_path: Path, *, repair: bool = False) -> Config:
    return Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        health=HealthConfig(breaker_settle_s=0),
        repair=RepairConfig(enabled=repair),
    )


def _passed() -> RunReport:
    return RunReport(NODE, "cron", time.time(), 0.1, (ok("gpu.lost"),))


def _drained(reason: str) -> FakeDoor:
    door = FakeDoor(nodes=[node_info(f"node{i}") for i in range(1, 5)])
    door.drain(NODE, reason)
    door.calls.clear()
    return door


_REPAIRING, _RESET = DrainKind.REPAIRING_REBOOT, DrainKind.REPAIRING_GPU_RESET


@pytest.mark.parametrize(
    ("reason", "kind", "subject", "job", "gpus"),
    [
        ("triage: gpu.lost GPU 3 lost", DrainKind.CHECK, "gpu.lost", None, ()),
        ("triage: gpu_memory job=123: XID 48", DrainKind.JOB, "gpu_memory", 123, ()),
        ("triage: lemon job=7: 4 failed jobs", DrainKind.LEMON, "", 7, ()),
        (
            "triage: repairing reboot gpu_unavailable",
            DrainKind.REPAIRING_REBOOT,
            "gpu_unavailable",
            None,
            (),
        ),
        (
            "triage: repairing gpu_reset gpu=0,3 gpu.ecc",
            DrainKind.REPAIRING_GPU_RESET,
            "gpu.ecc",
            None,
            (0, 3),
        ),
        (
            "triage: repairing gpu_reset gpu=all gpu_driver",
            DrainKind.REPAIRING_GPU_RESET,
            "gpu_driver",
            None,
            (),
        ),
        ("triage: burn-in pending gpu_memory", DrainKind.BURN_IN_PENDING, "gpu_memory", None, ()),
        ("triage: burn-in failed job=9 gpu.xid dcgm", DrainKind.BURN_IN_FAILED, "gpu.xid", 9, ()),
        ("triage: rma gpu.row_remap 3 repairs in 30d", DrainKind.RMA, "gpu.row_remap", None, ()),
        # our prefix, words we do not know, or words that only look like ours
        ("triage: ", DrainKind.UNKNOWN, "", None, ()),
        ("triage: lemon", DrainKind.UNKNOWN, "", None, ()),
        ("triage: lemon job=x: y", DrainKind.UNKNOWN, "", None, ()),
        ("triage: made_up job=1: y", DrainKind.UNKNOWN, "", None, ()),
        ("triage: repairing gpu_reset gpu=../../x y", DrainKind.UNKNOWN, "", None, ()),
        ("triage: repairing format_disk", DrainKind.UNKNOWN, "", None, ()),
        ("triage: burn-in passed", DrainKind.UNKNOWN, "", None, ()),
        ("triage: $(reboot) gpu.lost", DrainKind.UNKNOWN, "", None, ()),
        # a subject that is no cause or check is dropped, not kept
        ("triage: rma $(id) x", DrainKind.RMA, "", None, ()),
        ("triage: repairing reboot ;rm", DrainKind.REPAIRING_REBOOT, "", None, ()),
        # not ours
        ("admin: new PSU", DrainKind.NOT_OURS, "", None, ()),
        ("", DrainKind.NOT_OURS, "", None, ()),
        ("Epilog error", DrainKind.NOT_OURS, "", None, ()),
        ("reboot complete", DrainKind.NOT_OURS, "", None, ()),
    ],
)
def test_reasons_are_read_by_their_first_words_only(
    reason: str, kind: DrainKind, subject: str, job: int | None, gpus: tuple[int, ...]
) -> None:
    """Each reason we write is read back by kind, subject, job and GPUs; anything else with
    our prefix is UNKNOWN and a user's bytes never become a subject."""
    words = read_reason(reason)
    assert (words.kind, words.subject, words.job_id, words.gpus) == (kind, subject, job, gpus)


def test_what_we_write_reads_back_as_written() -> None:
    """The builders and the reader agree (one grammar), and a hostile note stays text."""
    cases = [
        (lemon_reason(5, "drained 3 times in 7d"), DrainKind.LEMON),
        (
            reboot_reason("gpu_unavailable"),
            DrainKind.REPAIRING_REBOOT,
        ),
        (gpu_reset_reason([3, 0, 3], "gpu.ecc"), DrainKind.REPAIRING_GPU_RESET),
        (burn_in_pending_reason("gpu.ecc", "released by alice"), DrainKind.BURN_IN_PENDING),
        (burn_in_failed_reason(44, "gpu.ecc", "; rm -rf /"), DrainKind.BURN_IN_FAILED),
        (rma_reason("gpu.row_remap", "row remap failure"), DrainKind.RMA),
    ]
    for reason, kind in cases:
        assert read_reason(reason).kind is kind, reason
        assert len(reason) <= 200 and "\n" not in reason
    assert read_reason(gpu_reset_reason([3, 0, 3], "gpu.ecc")).gpus == (0, 3)
    assert read_reason(reboot_reason("not a cause")).subject == "unknown"  # the cause id


@pytest.mark.parametrize(
    "reason",
    [
        "triage: lemon job=7: 4 failed jobs blamed it in 7d",
        "triage: rma gpu.row_remap row remap failure",
        "triage: repairing reboot gpu_unavailable",
        "triage: repairing gpu_reset gpu=1 gpu.ecc",
        "triage: burn-in pending gpu_unavailable",
        "triage: burn-in failed job=3 gpu_unavailable",
    ],
)
def test_a_passing_run_never_resumes_a_node_kept_out(tmp_path: Path, reason: str) -> None:
    """Repair disabled: lemons, RMA nodes and repairs stay drained when every check
    passes; the outcome says why, and Slurm is not changed."""
    door = _drained(reason)
    done = act(_config(tmp_path), _passed(), may_resume=True, dry_run=False, door=door)
    assert done.outcome is NodeOutcome.KEPT_OUT and not done.applied
    assert "returns it" in done.detail
    assert door.mutations() == []
    assert door.node(NODE).reason == reason


@pytest.mark.parametrize(
    "reason", ["triage: gpu.lost GPU 3 lost", "triage: gpu_memory job=12: XID 48 on node2"]
)
def test_repair_disabled_keeps_the_old_resume(tmp_path: Path, reason: str) -> None:
    """Repair disabled: a node a health check or a job decision drained comes back once the
    full screen passes, as before issue 16."""
    door = _drained(reason)
    done = act(_config(tmp_path), _passed(), may_resume=True, dry_run=False, door=door)
    assert (done.outcome, done.applied) == (NodeOutcome.RESUME, True)
    assert not door.node(NODE).drained


@pytest.mark.parametrize(
    "reason", ["triage: gpu.lost GPU 3 lost", "triage: gpu_memory job=12: XID 48 on node2"]
)
def test_repair_enabled_returns_nothing_from_the_health_check(tmp_path: Path, reason: str) -> None:
    """Repair enabled: reconcile owns every return (through burn-in), so a passing run
    resumes not even the health check's own drain."""
    door = _drained(reason)
    done = act(_config(tmp_path, repair=True), _passed(), may_resume=True, dry_run=False, door=door)
    assert done.outcome is NodeOutcome.KEPT_OUT and "reconcile" in done.detail
    assert door.mutations() == []


def test_an_admin_drain_is_still_an_admins(tmp_path: Path) -> None:
    door = _drained("new PSU, do not touch")
    done = act(_config(tmp_path, repair=True), _passed(), may_resume=True, dry_run=False, door=door)
    assert done.outcome is NodeOutcome.ADMIN_DRAINED and door.mutations() == []


def test_the_node_action_reads_time_from_its_clock(tmp_path: Path) -> None:
    """The failing mark's stamp and the settling wait come from the injected Clock."""
    slept: list[float] = []
    clock = Clock(time=lambda: 1_000_000.0, monotonic=lambda: 5.0, sleep=slept.append)
    config = _config(tmp_path)
    config = Config(
        paths=config.paths, health=HealthConfig(breaker_settle_s=2.5), repair=config.repair
    )
    report = RunReport(
        NODE, "cron", 0.0, 0.1, (fail("gpu.lost", "GPU 3 lost", Severity.HIGH, Action.DRAIN_NOW),)
    )
    door = FakeDoor(nodes=[node_info(f"node{i}") for i in range(1, 21)])
    done = act(config, report, may_resume=True, dry_run=False, door=door, clock=clock)
    assert done.outcome is NodeOutcome.DRAIN and done.applied
    assert slept == [2.5]
    comment = door.calls_to("set_node_comment")[0]
    assert comment.args[1] == "triage-failing gpu.lost 1000000"


def _decision(drain: tuple[str, ...]) -> Decision:
    return Decision(verdict=Verdict.RECORD_ONLY, drain=drain)


def test_a_lemon_is_drained_with_its_own_reason() -> None:
    """The decision's lemon gets `triage: lemon job=N: ...`; the blamed node the job
    reason."""
    door = FakeDoor(nodes=[node_info("node1"), node_info("node2")], jobs=[])
    applied = carry_out(
        door,
        77,
        _decision(("node1", "node2")),
        cause="gpu_memory",
        blamed=("node1",),
        restart=0,
        drain_reason="triage: gpu_memory job=77: XID 48",
        dry_run=False,
        lemon_drain_reasons={"node2": lemon_reason(77, "4 failed jobs")},
    )
    assert set(applied.drained) == {"node1", "node2"}
    assert door.node("node1").reason == "triage: gpu_memory job=77: XID 48"
    assert read_reason(door.node("node2").reason).kind is DrainKind.LEMON


@pytest.mark.parametrize(
    ("before", "relabelled"),
    [
        ("triage: gpu_memory job=70: XID 48", True),
        ("triage: gpu.ecc uncorrectable ECC", True),
        ("triage: rma gpu.row_remap failure", False),
        ("triage: repairing reboot gpu_unavailable", False),
        ("admin: cabling", False),
    ],
)
def test_a_drained_lemon_is_relabelled_only_from_our_plain_drains(
    before: str, relabelled: bool
) -> None:
    """A lemon drained already for one fault becomes a lemon drain (else the passing health
    check resumes it, the bug of issue 16); an admin's drain, an RMA or a repair keeps its
    reason."""
    door = FakeDoor(nodes=[node_info("node2")], jobs=[])
    door.drain("node2", before)
    carry_out(
        door,
        78,
        _decision(("node2",)),
        cause="gpu_memory",
        blamed=(),
        restart=0,
        drain_reason="triage: gpu_memory job=78: x",
        dry_run=False,
        lemon_drain_reasons={"node2": lemon_reason(78, "3 distinct XIDs")},
    )
    now = door.node("node2").reason
    assert (read_reason(now).kind is DrainKind.LEMON) is relabelled
    if not relabelled:
        assert now == before


def test_only_drained_events_count_as_drains() -> None:
    """The lemon count of drains reads the one kind the decision writes ('drained')."""
    events = [NodeEvent("node1", j, 1.0, "drained", "gpu_memory", None, False) for j in (1, 2, 3)]
    signals = node_signals(events, PolicyConfig(lemon_times_drained=3))
    assert signals["node1"].times_drained == 3 and signals["node1"].lemon


def test_the_health_path_reads_reasons_without_the_journal() -> None:
    """Nodes have no journal: deciding what may come back imports no sqlite3, no journal
    store and no lifecycle policy (a fresh interpreter, as slurmd starts it)."""
    import subprocess
    import sys

    code = (
        "import sys, slurm_triage.prolog_epilog.healthcheck;"
        "import slurm_triage.prolog_epilog.node_action;"
        "print(sorted(m for m in ('sqlite3', 'slurm_triage.journal.store',"
        " 'slurm_triage.policies.lifecycle') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
