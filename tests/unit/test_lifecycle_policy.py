"""The lifecycle policy (issue 16), pure: the state a node is in from what Slurm shows, and
the one step to take, by cause, cycles, breaker and burn-in result."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_triage.config import RepairConfig
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.policies.lemons import NodeSignals
from slurm_triage.policies.lifecycle import (
    BurnIn,
    LifecycleAction,
    LifecycleInput,
    NodeLifecycle,
    Repair,
    burn_in_reservation,
    decide_lifecycle,
)
from slurm_triage.slurm.model import NodeFlag, NodeInfo, ReservationInfo
from slurm_triage.testing import node_info

NOW = 1_000_000.0
ON = RepairConfig(enabled=True)
A, S = LifecycleAction, NodeLifecycle


def _drained(reason: str, **more: object) -> NodeInfo:
    fields: dict[str, object] = {"flags": frozenset({NodeFlag.DRAIN}), "reason": reason, **more}
    return replace(node_info("node2"), **fields)  # type: ignore[arg-type]


def _step(action: LifecycleAction, at: float, **more: object) -> LifecycleEvent:
    return LifecycleEvent("node2", at, "drained", action.value, True, "", **more)  # type: ignore[arg-type]


def _decide(
    node: NodeInfo,
    *,
    steps: tuple[LifecycleEvent, ...] = (),
    burn_in: BurnIn = BurnIn.NONE,
    reservation: ReservationInfo | None = None,
    signals: NodeSignals | None = None,
    xid: Repair = Repair.UNKNOWN,
    config: RepairConfig = ON,
    in_repair: int = 0,
    cluster: int = 100,
):  # type: ignore[no-untyped-def]
    given = LifecycleInput(node, reservation, steps, burn_in, signals, xid, NOW)
    return decide_lifecycle(given, config, in_repair=in_repair, cluster_size=cluster)


def _reservation() -> ReservationInfo:
    return ReservationInfo(
        burn_in_reservation("node2"), ("node2",), int(NOW) - 60, int(NOW) + 3600,
        frozenset({"MAINT"}), ("root",),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "action", "repair"),
    [
        ("triage: gpu.lost GPU 3 lost", A.REBOOT, Repair.REBOOT),
        ("triage: gpu.ecc GPU 1 uncorrectable ECC", A.REQUEST_GPU_RESET, Repair.GPU_RESET),
        ("triage: gpu_memory job=12: XID 48", A.REQUEST_GPU_RESET, Repair.GPU_RESET),
        ("triage: gpu_unavailable job=12: XID 79", A.REBOOT, Repair.REBOOT),
        ("triage: lemon job=12: 4 failed jobs", A.REBOOT, Repair.REBOOT),
        ("triage: gpu.row_remap GPU 1 row remap failure (RMA)", A.SEND_TO_RMA, Repair.RMA),
        ("triage: ib.ports mlx5_0:1 DOWN", A.NONE, Repair.PERSON),
        ("triage: thermal job=3: throttled", A.NONE, Repair.PERSON),
        ("triage: gpu.made_up something", A.NONE, Repair.UNKNOWN),
    ],
)
def test_the_repair_follows_the_cause(reason: str, action: LifecycleAction, repair: Repair) -> None:
    """Checks and causes map to NVIDIA's resolutions: off the bus -> reboot, ECC/NVLink ->
    reset, a failed remap -> RMA, cabling/cooling -> a person (nothing automatic)."""
    done = _decide(_drained(reason))
    assert (done.state, done.action, done.repair) == (S.DRAINED, action, repair)
    if action is A.REBOOT:
        assert done.drain_reason.startswith("triage: repairing reboot ") and done.cycle == 1
    if action is A.NONE:
        assert "stays drained" in done.reason


def test_the_xid_asks_more_than_the_cause() -> None:
    """gpu_memory resets the GPU, unless the XIDs behind it asked for a reboot."""
    done = _decide(_drained("triage: gpu_memory job=12: XID"), xid=Repair.REBOOT)
    assert done.action is A.REBOOT


def test_allowed_repairs_fall_back_to_stronger_ones_then_a_person() -> None:
    reset = _drained("triage: gpu.ecc x")
    assert _decide(reset, config=replace(ON, gpu_reset=False)).action is A.REBOOT
    off = replace(ON, gpu_reset=False, reboot=False)
    assert _decide(reset, config=off).action is A.NONE


@pytest.mark.parametrize(
    ("reason", "state"),
    [
        ("new PSU, do not touch", S.ADMIN),
        ("triage: rma gpu.row_remap failure", S.RMA),
        ("triage: something new", S.UNKNOWN),
    ],
)
def test_admin_rma_and_unknown_are_left_alone(reason: str, state: NodeLifecycle) -> None:
    done = _decide(_drained(reason))
    assert (done.state, done.action) == (state, A.NONE)


def test_an_admins_reboot_is_never_touched() -> None:
    node = replace(
        node_info("node2"),
        flags=frozenset({NodeFlag.DRAIN, NodeFlag.REBOOT_REQUESTED}),
        reason="kernel update",
    )
    assert _decide(node).state is S.ADMIN


@pytest.mark.parametrize(
    ("state", "flags"),
    [("IDLE", {NodeFlag.FAIL}), ("ALLOCATED", {NodeFlag.FAIL}), ("FAIL", set())],
)
def test_a_node_an_admin_set_to_fail_is_theirs(state: str, flags: set[str]) -> None:
    """`scontrol update state=FAIL`: Slurm's JSON says ["IDLE", "FAIL"] (a flag over the base
    state, node_mgr.c, both releases); the node is out of service, an admin's, not healthy."""
    node = replace(node_info("node2"), state=state, flags=frozenset(flags), reason="bad DIMM")
    assert node.failed
    assert _decide(node).state is S.ADMIN


def test_repair_disabled_decides_nothing_but_knows_the_state() -> None:
    done = _decide(_drained("triage: gpu.lost x"), config=RepairConfig(enabled=False))
    assert (done.state, done.action) == (S.DRAINED, A.NONE) and "disabled" in done.reason


def test_the_breaker_keeps_extra_nodes_waiting() -> None:
    """At most max_share_in_repair (at least min_nodes_in_repair) repairing at once."""
    node = _drained("triage: gpu.lost x")
    config = replace(ON, max_share_in_repair=0.05, min_nodes_in_repair=1)
    assert _decide(node, config=config, in_repair=4, cluster=100).action is A.REBOOT
    held = _decide(node, config=config, in_repair=5, cluster=100)
    assert held.action is A.NONE and "waiting: 5 nodes" in held.reason
    assert _decide(node, config=config, in_repair=0, cluster=4).action is A.REBOOT


def test_rma_after_n_cycles_in_the_window_and_a_release_starts_over() -> None:
    node = _drained("triage: burn-in failed job=9 gpu.lost")
    cycles = tuple(_step(A.REBOOT, NOW - 86400 * d, cycle=c) for c, d in ((1, 9), (2, 5), (3, 1)))
    done = _decide(node, steps=cycles, config=replace(ON, rma_after_cycles=3))
    assert done.action is A.SEND_TO_RMA and done.drain_reason.startswith("triage: rma gpu.lost")
    # the oldest is outside a 7-day window: 2 cycles, repaired again as cycle 3
    again = _decide(node, steps=cycles, config=replace(ON, rma_after_cycles=3, rma_window_days=7))
    assert (again.action, again.cycle) == (A.REBOOT, 3)
    released = (*cycles, _step(A.RELEASE, NOW - 3600))
    assert _decide(node, steps=released).cycle == 1


def test_a_reset_that_failed_burn_in_escalates_to_a_reboot() -> None:
    steps = (_step(A.REQUEST_GPU_RESET, NOW - 7200, cycle=1),)
    done = _decide(_drained("triage: burn-in failed job=9 gpu.ecc"), steps=steps)
    assert (done.action, done.cycle) == (A.REBOOT, 2)


def test_a_reboot_runs_its_course() -> None:
    """Requested -> pending; slurmctld's ' : reboot complete' -> burn-in; a reboot issued
    and no longer pending, or timed out -> a person."""
    reason = "triage: repairing reboot gpu_unavailable"
    pending = _drained(reason, flags=frozenset({NodeFlag.DRAIN, NodeFlag.REBOOT_REQUESTED}))
    steps = (_step(A.REBOOT, NOW - 60, cycle=1, subject="gpu_unavailable"),)
    assert _decide(pending, steps=steps).action is A.NONE
    complete = replace(
        node_info("node2"),
        state="DOWN",
        reason=f"{reason} : reboot issued : reboot complete",
    )
    done = _decide(complete, steps=steps)
    assert (done.state, done.action, done.cycle) == (S.REPAIRING, A.START_BURN_IN, 1)
    lost = replace(complete, reason=f"{reason} : reboot issued")
    assert "timed out" in _decide(lost, steps=steps).reason
    # Our reboot asks no next state: the node boots drained, the reason as issued.
    booted = _drained(f"{reason} : reboot issued")
    done = _decide(booted, steps=steps)
    assert (done.state, done.action, done.cycle) == (S.REPAIRING, A.START_BURN_IN, 1)
    cancelled = _drained(reason)
    assert _decide(cancelled, steps=steps).action is A.REBOOT


def test_a_node_slurm_returned_to_service_before_its_burn_in_is_burned_in() -> None:
    """ReturnToService=2: slurmctld's next ping answer takes the rebooted node from DOWN to
    IDLE, our reason kept (seen on the dev cluster); it is not healthy until burned in."""
    steps = (_step(A.REBOOT, NOW - 60, cycle=1, subject="gpu.lost"),)
    reason = "triage: repairing reboot gpu.lost : reboot issued : reboot complete"
    returned = replace(node_info("node2"), state="IDLE", reason=reason)
    done = _decide(returned, steps=steps)
    assert (done.state, done.action) == (S.REPAIRING, A.START_BURN_IN)
    # Without the journal, the reason alone counts only while slurmctld's note says the
    # reboot completed; with it, the reboot is the cycle's last step whatever the note.
    issued = replace(returned, reason="triage: repairing reboot gpu.lost : reboot issued")
    assert _decide(issued).state is S.HEALTHY
    assert _decide(issued, steps=steps).action is A.START_BURN_IN
    assert _decide(returned).action is A.START_BURN_IN


def test_a_node_back_in_service_whose_reason_slurm_cleared_is_burned_in_by_the_journal() -> None:
    """A job landing on the returned node clears our reason (make_node_alloc): only the
    journal still says the cycle's last step was our reboot. Any later step closes it."""
    reboot = _step(A.REBOOT, NOW - 60, cycle=1, subject="gpu.lost")
    cleared = replace(node_info("node2"), state="ALLOCATED", reason="")
    done = _decide(cleared, steps=(reboot,))
    assert (done.state, done.action, done.cycle, done.subject) == (
        S.REPAIRING,
        A.START_BURN_IN,
        1,
        "gpu.lost",
    )
    for later in (A.START_BURN_IN, A.RETURN_TO_SERVICE, A.SEND_TO_RMA, A.RELEASE):
        closed = (reboot, _step(later, NOW - 30, cycle=1))
        assert _decide(cleared, steps=closed).state is S.HEALTHY, later
    # A reboot that was only asked (a dry run, or refused) or a mark since proves nothing.
    asked = (replace(reboot, applied=False),)
    assert _decide(cleared, steps=asked).state is S.HEALTHY
    marked = (reboot, _step(A.MARK_SUSPECT, NOW - 30))
    assert _decide(cleared, steps=marked).action is A.START_BURN_IN
    # Out of service, the reason still rules: the reboot is under way.
    pending = _drained(
        "triage: repairing reboot gpu.lost",
        flags=frozenset({NodeFlag.DRAIN, NodeFlag.REBOOT_REQUESTED}),
    )
    assert _decide(pending, steps=(reboot,)).action is A.NONE


def test_a_reboot_that_timed_out_waits_for_a_person_until_the_node_boots() -> None:
    """The reasons both releases leave (test_repair on the dev cluster): 22.05 clears DRAIN,
    25.11 keeps it. A late boot appends ' : reboot complete' after the timeout to a reboot
    asked with nextstate=DOWN (older versions), and leaves ours drained (25.11) or, on
    22.05 with ReturnToService=2, in service (the journal then says it is unproven)."""
    reason = "triage: repairing reboot gpu.lost : reboot issued : reboot timed out"
    steps = (_step(A.REBOOT, NOW - 600, cycle=1, subject="gpu.lost"),)
    down = replace(node_info("node2"), state="DOWN", reason=reason)
    for node in (down, replace(down, flags=frozenset({NodeFlag.DRAIN}))):
        waiting = _decide(node, steps=steps)
        assert (waiting.action, waiting.reason) == (
            A.NONE,
            "reboot timed out (ResumeTimeout): a person must look",
        )
    booted = _decide(replace(down, reason=f"{reason} : reboot complete"), steps=steps)
    assert (booted.state, booted.action) == (S.REPAIRING, A.START_BURN_IN)
    # Our reboot asks no next state: a late boot leaves it drained, the reason as it was.
    late = _decide(_drained(reason), steps=steps)
    assert (late.state, late.action) == (S.REPAIRING, A.START_BURN_IN)
    returned = _decide(replace(down, state="IDLE"), steps=steps)  # 22.05, ReturnToService=2
    assert (returned.state, returned.action) == (S.REPAIRING, A.START_BURN_IN)


def test_a_gpu_reset_not_done_in_time_becomes_a_reboot() -> None:
    node = _drained("triage: repairing gpu_reset gpu=all gpu.ecc")
    recent = (_step(A.REQUEST_GPU_RESET, NOW - 60, cycle=1),)
    assert _decide(node, steps=recent).action is A.NONE
    old = (_step(A.REQUEST_GPU_RESET, NOW - 7200, cycle=1),)
    assert _decide(node, steps=old).action is A.REBOOT


def test_burn_in_pending_starts_the_burn_in() -> None:
    done = _decide(_drained("triage: burn-in pending gpu.ecc"))
    assert (done.state, done.action) == (S.REPAIRING, A.START_BURN_IN)


@pytest.mark.parametrize(
    ("result", "action"),
    [
        (BurnIn.RUNNING, A.NONE),
        (BurnIn.PASSED, A.RETURN_TO_SERVICE),
        (BurnIn.FAILED, A.FAIL_BURN_IN),
        (BurnIn.UNKNOWN, A.NONE),
        (BurnIn.NONE, A.START_BURN_IN),
    ],
)
def test_burn_in_results(result: BurnIn, action: LifecycleAction) -> None:
    steps = (
        _step(A.REBOOT, NOW - 3600, cycle=1, subject="gpu.lost"),
        _step(A.START_BURN_IN, NOW - 600, cycle=1, job_id=None if result is BurnIn.NONE else 77),
    )
    done = _decide(node_info("node2"), steps=steps, burn_in=result, reservation=_reservation())
    assert (done.state, done.action) == (S.BURN_IN, action)
    if action is A.FAIL_BURN_IN:
        assert done.drain_reason == "triage: burn-in failed job=77 gpu.lost"


def test_a_lemon_is_suspect_after_burn_in_then_cleared_after_the_cool_down() -> None:
    """Lemons stick: a passed burn-in marks it suspect first, the reservation ends next
    pass; the mark is cleared only after lemon_cooldown_h with no new failures."""
    steps = (
        _step(A.REBOOT, NOW - 3600, cycle=1, subject="lemon", detail={"lemon": True}),
        _step(A.START_BURN_IN, NOW - 600, cycle=1, job_id=77),
    )
    node = node_info("node2")
    first = _decide(node, steps=steps, burn_in=BurnIn.PASSED, reservation=_reservation())
    assert first.action is A.MARK_SUSPECT
    marked = replace(node, features=("triage_suspect",), active_features=("triage_suspect",))
    second = _decide(marked, steps=steps, burn_in=BurnIn.PASSED, reservation=_reservation())
    assert second.action is A.RETURN_TO_SERVICE
    mark = _step(A.MARK_SUSPECT, NOW - 3600, detail={"weight_before": 7})
    cooling = _decide(marked, steps=(*steps, mark))
    assert (cooling.state, cooling.action) == (S.SUSPECT, A.NONE)
    over = (*steps, replace(mark, at=NOW - 25 * 3600))
    cleared = _decide(marked, steps=over)
    assert (cleared.action, cleared.restore_weight) == (A.CLEAR_SUSPECT, 7)
    rising = NodeSignals("node2", failed_jobs=3)
    assert _decide(marked, steps=over, signals=rising).action is A.NONE


def test_a_suspect_mark_slurm_dropped_is_set_again_until_the_cool_down_ends() -> None:
    """`scontrol reconfigure` resets Weight and features from slurm.conf (seen on 22.05 and
    25.11): the journal still holds the mark, so reconcile marks the node again; the
    cool-down runs from the first mark, and a clear ends the journal's period."""
    node = node_info("node2")  # the feature gone
    first = _step(A.MARK_SUSPECT, NOW - 3600, detail={"weight_before": 7})
    again = _decide(node, steps=(first,))
    assert (again.state, again.action) == (S.SUSPECT, A.MARK_SUSPECT)
    assert "marked again" in again.reason
    # Marked again 23 h into a 24 h cool-down: the clear comes at 24 h from the first mark.
    remark = _step(A.MARK_SUSPECT, NOW - 3600, detail={"weight_before": 1})
    marked = replace(node, features=("triage_suspect",), active_features=("triage_suspect",))
    spent = (replace(first, at=NOW - 25 * 3600), remark)
    cleared = _decide(marked, steps=spent)
    assert (cleared.action, cleared.restore_weight) == (A.CLEAR_SUSPECT, 1)
    # Gone after the cool-down: nothing to mark again, the clear closes the period.
    assert _decide(node, steps=spent).action is A.CLEAR_SUSPECT
    rising = NodeSignals("node2", failed_jobs=3)
    assert _decide(node, steps=spent, signals=rising).action is A.MARK_SUSPECT
    closed = (first, _step(A.CLEAR_SUSPECT, NOW - 60))
    assert _decide(node, steps=closed).state is S.HEALTHY
    refused = (replace(first, applied=False),)
    assert _decide(node, steps=refused).state is S.HEALTHY


def test_a_node_in_service_with_rising_failures_becomes_suspect() -> None:
    node = node_info("node2")
    assert _decide(node, signals=NodeSignals("node2", failed_jobs=1)).action is A.NONE
    done = _decide(node, signals=NodeSignals("node2", failed_jobs=2))
    assert (done.state, done.action) == (S.HEALTHY, A.MARK_SUSPECT)


def test_the_lemon_historys_fresh_start_names_lifecycle_actions() -> None:
    """policies.lemons keeps the steps as strings (lifecycle imports lemons): they must be
    the lifecycle's burn-in return and a person's release."""
    from slurm_triage.policies.lemons import FRESH_START

    assert {A.RETURN_TO_SERVICE.value, A.RELEASE.value} == FRESH_START
