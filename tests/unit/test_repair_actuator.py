"""The repair actuator (actuator/repair.py) against FakeDoor, and FakeDoor's reboots and
reservations as slurmctld keeps them (proc_req.c _slurm_rpc_reboot_nodes; controller.c
and node_mgr.c validate_node_specs for the reason and state after the reboot;
reservation.c for SPEC_NODES, MAINT and a reservation in use)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from slurm_triage.actuator import repair
from slurm_triage.actuator.repair import RepairOutcome
from slurm_triage.slurm.errors import ReservationNotFound, SlurmCommandError, SlurmUnavailable
from slurm_triage.slurm.model import JobState, NodeFlag
from slurm_triage.testing import FakeDoor, node_info, node_infos

NOW = datetime(2026, 11, 22, 10, 0, 0)
REASON = "triage: repairing reboot xid79"


def _door(**kwargs: object) -> FakeDoor:
    return FakeDoor(nodes=node_infos(4), clock=lambda: NOW, **kwargs)  # type: ignore[arg-type]


def _burn_in(door: FakeDoor, node: str = "node2", *, dry_run: bool = False) -> repair.RepairResult:
    return repair.start_burn_in(
        door,
        node,
        reservation=f"triage_burnin_{node}",
        users=["slurmtriage"],
        duration_s=7200,
        command=["slurm-triage", "burn-in"],
        job_name=f"triage-burnin-{node}",
        output="/var/log/triage/burnin-%j.out",
        time_limit_min=60,
        dry_run=dry_run,
    )


# -- FakeDoor as slurmctld ---------------------------------------------------------------------


def test_a_reboot_drains_at_once_and_ends_drained_with_our_reason_kept() -> None:
    """DRAIN + REBOOT_REQUESTED with our reason; issued: DOWN + REBOOT_ISSUED, " : reboot
    issued" appended by SlurmUser; complete: IDLE, still drained (no next state asked),
    the reason unchanged, a newer boot time."""
    door = _door()
    door.node_table["node2"] = node_info("node2", boot_time=1000)
    door.reboot("node2", REASON)
    node = door.node("node2")
    assert node.drained and NodeFlag.REBOOT_REQUESTED in node.flags
    assert (node.reason, node.reason_user) == (REASON, "slurm")
    door.issue_reboot("node2")
    node = door.node("node2")
    assert (node.state, node.reboot_pending) == ("DOWN", True)
    assert node.reason == f"{REASON} : reboot issued"
    door.complete_reboot("node2")
    node = door.node("node2")
    assert (node.state, node.flags, node.reboot_pending) == ("IDLE", {NodeFlag.DRAIN}, False)
    assert node.reason == f"{REASON} : reboot issued"
    assert node.boot_time is not None and node.boot_time > 1000


def test_a_second_reboot_request_is_skipped_as_slurmctld_does() -> None:
    door = _door()
    door.reboot("node2", REASON)
    door.reboot("node2", "triage: other")
    assert door.node("node2").reason == REASON


def test_a_reboot_needs_reboot_program() -> None:
    door = _door(reboot_program=False)
    with pytest.raises(SlurmCommandError, match="RebootProgram"):
        door.reboot("node2", REASON)


def test_a_reboot_is_not_issued_while_jobs_run() -> None:
    door = _door()
    door.node_table["node2"] = node_info("node2", state="ALLOCATED")
    door.reboot("node2", REASON)
    with pytest.raises(ValueError):
        door.issue_reboot("node2")


def test_a_reservation_makes_the_node_usable_only_by_its_jobs() -> None:
    """Resumed inside the reservation, the node runs the burn-in job and nothing else;
    its job ends, the reservation goes, and the node is everyone's again."""
    door = _door()
    door.drain("node2", "triage: x")
    result = _burn_in(door)
    assert result.applied and result.job_id is not None
    reservation = door.reservations()[0]
    assert reservation.flags == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"}
    assert reservation.active(NOW.timestamp())
    assert NodeFlag.MAINTENANCE in door.node("node2").flags
    assert not door.usable_by("node2")
    assert door.usable_by("node2", "triage_burnin_node2")
    assert not door.usable_by("node1", "triage_burnin_node2")
    door.start_job(result.job_id)
    with pytest.raises(SlurmCommandError, match="in use"):
        door.delete_reservation("triage_burnin_node2")
    # The job ended and the node is idle again.
    door.jobs[result.job_id] = replace(door.jobs[result.job_id], state=JobState.COMPLETED)
    door.node_table["node2"] = replace(door.node("node2"), state="IDLE")
    assert repair.end_burn_in(
        door, "node2", reservation="triage_burnin_node2", dry_run=False
    ).applied
    assert door.usable_by("node2") and door.reservations() == ()


def test_unknown_reservation_is_reservation_not_found() -> None:
    door = _door()
    with pytest.raises(ReservationNotFound):
        door.delete_reservation("nope")
    with pytest.raises(ReservationNotFound):
        door.submit_burn_in("node2", "nope", ["x"], job_name="j", output="/o", time_limit_min=5)


# -- the actuator ---------------------------------------------------------------------------


def test_reboot_node_applies_and_reports_a_pending_one_as_already() -> None:
    door = _door()
    first = repair.reboot_node(door, "node2", REASON, dry_run=False)
    second = repair.reboot_node(door, "node2", REASON, dry_run=False)
    assert (first.outcome, second.outcome) == (RepairOutcome.APPLIED, RepairOutcome.ALREADY)
    assert door.methods().count("reboot") == 1


@pytest.mark.parametrize(
    ("flag", "skipped"),
    [("POWERED_DOWN", True), ("POWER_DOWN", True), ("POWERING_DOWN", True), ("POWERING_UP", False)],
)
def test_reboot_node_says_slurmctld_skipped_only_what_it_skips(flag: str, skipped: bool) -> None:
    """proc_req.c skips the reboot of a node powered down, or asked or going to be; one
    powering up is rebooted, and the journal's detail must not say otherwise."""
    door = _door()
    node = door.node("node2")
    door.node_table["node2"] = replace(node, flags=node.flags | {flag})
    done = repair.reboot_node(door, "node2", REASON, dry_run=False)
    assert ("slurmctld skips the reboot" in done.detail) is skipped


def test_every_action_in_a_dry_run_changes_nothing() -> None:
    """policy.act = false: reads only, outcome DRY_RUN."""
    door = _door()
    results = [
        repair.reboot_node(door, "node2", REASON, dry_run=True),
        repair.request_gpu_reset(door, "node2", "triage: repairing gpu_reset gpu=3", dry_run=True),
        repair.send_to_rma(door, "node2", "triage: rma 3 cycles", dry_run=True),
        repair.mark_suspect(door, "node2", weight=1000, dry_run=True),
        repair.clear_suspect(door, "node1", weight=1, dry_run=True),
        _burn_in(door, dry_run=True),
        repair.end_burn_in(door, "node2", reservation="triage_burnin_node2", dry_run=True),
    ]
    assert {r.outcome for r in results} == {RepairOutcome.DRY_RUN}
    assert all(r.dry_run and not r.applied for r in results)
    assert door.mutations() == []


def test_rma_and_gpu_reset_drain_with_the_reason_given() -> None:
    door = _door()
    assert repair.send_to_rma(door, "node3", "triage: rma row remap failure", dry_run=False).applied
    assert door.node("node3").reason == "triage: rma row remap failure"
    repair.request_gpu_reset(door, "node3", "triage: repairing gpu_reset gpu=1", dry_run=False)
    assert door.node("node3").reason == "triage: repairing gpu_reset gpu=1"


def test_mark_then_clear_suspect_restores_weight_and_keeps_other_features() -> None:
    door = _door()
    door.node_table["node2"] = node_info(
        "node2", weight=10, features=("a100", "ib"), active_features=("a100",)
    )
    marked = repair.mark_suspect(door, "node2", weight=1000, dry_run=False)
    assert marked.applied
    assert (marked.weight_before, marked.features_before, marked.active_features_before) == (
        10,
        ("a100", "ib"),
        ("a100",),
    )
    node = door.node("node2")
    assert node.weight == 1000
    assert node.features == ("a100", "ib", "triage_suspect")
    assert node.active_features == ("a100", "triage_suspect")
    again = repair.mark_suspect(door, "node2", weight=1000, dry_run=False)
    assert again.outcome is RepairOutcome.ALREADY
    cleared = repair.clear_suspect(door, "node2", weight=marked.weight_before or 1, dry_run=False)
    assert cleared.applied
    node = door.node("node2")
    assert (node.weight, node.features, node.active_features) == (10, ("a100", "ib"), ("a100",))


def test_start_burn_in_resumes_a_node_down_after_its_reboot() -> None:
    door = _door()
    repair.reboot_node(door, "node2", REASON, dry_run=False)
    door.complete_reboot("node2")
    result = _burn_in(door)
    assert result.applied and door.node("node2").state == "IDLE"
    mutating = [c.method for c in door.mutations()]
    assert mutating == ["reboot", "create_reservation", "resume", "submit_burn_in"]


def test_start_burn_in_reports_the_step_that_failed_and_never_raises() -> None:
    door = _door()
    door.fail("submit_burn_in", SlurmCommandError("sbatch: error: Batch job submission failed"))
    result = _burn_in(door)
    assert result.outcome is RepairOutcome.REFUSED
    assert result.detail.startswith("submit: ")
    assert result.job_id is None


def test_an_existing_reservation_of_the_node_is_reused() -> None:
    """A retry after a failed submit does not trip over its own reservation."""
    door = _door()
    door.fail("submit_burn_in", SlurmUnavailable("Unable to contact slurm controller"))
    assert _burn_in(door).outcome is RepairOutcome.UNAVAILABLE
    assert _burn_in(door).applied
    assert [c.method for c in door.mutations()].count("create_reservation") == 1


def test_end_burn_in_of_a_gone_reservation_is_already() -> None:
    door = _door()
    result = repair.end_burn_in(door, "node2", reservation="triage_burnin_node2", dry_run=False)
    assert result.outcome is RepairOutcome.ALREADY and result.ok


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (SlurmUnavailable("Unable to contact slurm controller"), RepairOutcome.UNAVAILABLE),
        (SlurmCommandError("Invalid node state specified"), RepairOutcome.REFUSED),
        (OSError(7, "Argument list too long"), RepairOutcome.UNKNOWN),
    ],
)
def test_failures_become_outcomes_with_slurms_words(
    error: Exception, outcome: RepairOutcome
) -> None:
    door = _door()
    door.fail("drain", error)
    result = repair.send_to_rma(door, "node2", "triage: rma x", dry_run=False)
    assert (result.outcome, result.ok, result.applied) == (outcome, False, False)
    assert str(error).split()[0] in result.detail


def test_result_to_dict_is_plain_json() -> None:
    result = repair.mark_suspect(_door(), "node2", weight=5, dry_run=True)
    assert result.to_dict()["outcome"] == "dry_run"
    assert result.to_dict()["action"] == "mark_suspect"
