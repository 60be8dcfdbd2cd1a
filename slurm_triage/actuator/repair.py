"""A node's repair carried out in Slurm (issue 16): reboot, GPU reset request, burn-in,
RMA and the suspect marks. The lifecycle policy (policies.lifecycle) decides; these do.

What each does in Slurm (read from SchedMD's source, 22.05 and 25.11 alike):

- `reboot_node`: `scontrol update State=DRAIN Reason=<reason>`, then `scontrol reboot
  Reason=<reason> <node>` (no ASAP, no nextstate). The node is drained (our reason, by the
  user we run as) with REBOOT_REQUESTED; once its jobs have ended slurmctld runs
  RebootProgram and shows it DOWN + DRAIN + REBOOT_ISSUED, appending " : reboot issued"
  to the reason; when slurmd registers with a newer boot time it is IDLE + DRAIN, the
  reason unchanged (node_mgr.c validate_node_specs: with no next state DRAIN is kept), so
  nothing lands there before its burn-in, whatever ReturnToService says. (ASAP would set
  next state RESUME on 22.05; nextstate=DOWN, which earlier builds asked, clears DRAIN,
  and ReturnToService=2 then returns the node at its next ping answer, " : reboot complete"
  appended.) A reboot that never comes back is DOWN after ResumeTimeout (" : reboot timed
  out" appended). A node whose reboot is already pending is skipped by slurmctld with no
  error: ALREADY here. So is a node powered down or powering down (proc_req.c): the drain
  still writes our reason, the result's detail says the reboot was skipped, and the
  lifecycle counts the node's power up as its reboot.
- `request_gpu_reset`: drains the node with `reason` (`triage: repairing gpu_reset ...`);
  the node's own HealthCheckProgram resets the GPU when the node is idle (root on the node:
  the controller cannot) and rewrites the reason.
- `finish_gpu_reset`: run by that health check once the GPUs are reset and the full screen
  passes: the same drain with the reason `triage: burn-in pending <subject>`
  (`scontrol update State=DRAIN Reason=...` on a drained node changes only its reason), so
  reconcile starts the burn-in.
- `start_burn_in`: `scontrol create reservation` of the node alone from now
  (Flags=MAINT,IGNORE_JOBS; Slurm adds SPEC_NODES), so that only jobs asking for it run
  there; `scontrol update State=RESUME` (a drained, or DOWN after a reboot, node); then
  `sbatch --reservation --nodelist --exclusive --no-requeue` of the burn-in command. The
  job id is in the result. Root's and SlurmUser's jobs may use any reservation.
- `end_burn_in`: `scontrol delete ReservationName=...`; one already gone is ALREADY.
- `send_to_rma`: drains the node with `reason` (`triage: rma ...`); nothing of ours resumes
  it (a person does, `slurm-triage nodes release`).
- `fail_burn_in`: drains the node with `reason` (`triage: burn-in failed ...`) before its
  reservation ends, so nothing else lands there.

Each drain (the reboot's too) re-reads the node first and is NOT_OURS, changing nothing,
when someone else took it out since the pass read it: drained, DOWN or FAIL with a reason
that is not ours (policies.reasons.may_replace_drain): an admin's drain is never overwritten.
`start_burn_in` is NOT_OURS for a node taken out with any reason not ours: its resume would
undo that.
- `mark_suspect`: `scontrol update NodeName= Weight=<weight>` and the `feature` added to
  AvailableFeatures and ActiveFeatures, so larger jobs land elsewhere first and jobs may
  ask `--constraint=!triage_suspect`; the node's weight and features before are in the
  result for the journal. `clear_suspect` sets the weight recorded before and takes the
  feature out again (other features, an admin's included, stay). `scontrol reconfigure`
  resets both from slurm.conf (22.05 and 25.11): the lifecycle marks the node again from
  the journal.

Every function takes `dry_run` (`policy.act = false`): then nothing changes in Slurm (reads
still happen) and the outcome is DRY_RUN. None raises for Slurm's answers: each returns a
RepairResult whose outcome says what happened and whose `detail` carries Slurm's words,
and logs it with a constant event name (repair_applied, repair_dry_run, repair_not_ours,
repair_failed).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from slurm_triage.logs import get_logger
from slurm_triage.policies.reasons import is_ours, may_replace_drain
from slurm_triage.slurm.door import SlurmDoor
from slurm_triage.slurm.errors import (
    ReservationNotFound,
    SlurmCommandError,
    SlurmError,
    SlurmOutputError,
    SlurmTimeout,
    SlurmUnavailable,
)
from slurm_triage.slurm.model import NodeInfo

SUSPECT_FEATURE = "triage_suspect"


class RepairAction(enum.StrEnum):
    REBOOT = "reboot"
    GPU_RESET = "gpu_reset"
    GPU_RESET_DONE = "gpu_reset_done"
    START_BURN_IN = "start_burn_in"
    END_BURN_IN = "end_burn_in"
    FAIL_BURN_IN = "fail_burn_in"
    RMA = "rma"
    MARK_SUSPECT = "mark_suspect"
    CLEAR_SUSPECT = "clear_suspect"


class RepairOutcome(enum.StrEnum):
    APPLIED = "applied"  # Slurm took the change
    DRY_RUN = "dry_run"  # policy.act = false: nothing was changed
    ALREADY = "already"  # Slurm already showed it (reboot pending, reservation gone, ...)
    REFUSED = "refused"  # Slurm said no (unknown node, bad value, reservation in use, ...)
    UNAVAILABLE = "unavailable"  # slurmctld unreachable or too slow: try again later
    UNKNOWN = "unknown"  # anything else (unreadable output, a failed exec)
    NOT_OURS = "not_ours"  # someone else took the node out meanwhile: left as it is


@dataclass(frozen=True)
class RepairResult:
    """What one repair step did. `detail` is Slurm's one line on a failure (or what a dry
    run would have done); `job_id` is the burn-in job's; the `*_before` fields are the
    node's weight and features before mark_suspect, for the journal to restore."""

    action: RepairAction
    node: str
    outcome: RepairOutcome
    detail: str = ""
    job_id: int | None = None
    weight_before: int | None = None
    features_before: tuple[str, ...] = ()
    active_features_before: tuple[str, ...] = ()

    @property
    def applied(self) -> bool:
        return self.outcome is RepairOutcome.APPLIED

    @property
    def dry_run(self) -> bool:
        return self.outcome is RepairOutcome.DRY_RUN

    @property
    def ok(self) -> bool:
        """Slurm is as wanted (changed now, already so, or a dry run)."""
        return self.outcome in (
            RepairOutcome.APPLIED,
            RepairOutcome.ALREADY,
            RepairOutcome.DRY_RUN,
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action.value,
            "node": self.node,
            "outcome": self.outcome.value,
            "detail": self.detail,
            "job_id": self.job_id,
            "weight_before": self.weight_before,
            "features_before": list(self.features_before),
            "active_features_before": list(self.active_features_before),
        }


def reboot_node(door: SlurmDoor, node: str, reason: str, *, dry_run: bool) -> RepairResult:
    """Reboot the node when its jobs end, leaving it drained afterwards (see the module)."""
    result = RepairResult(RepairAction.REBOOT, node, RepairOutcome.APPLIED, detail=reason)

    def act() -> RepairResult:
        info = door.node(node)
        if info.reboot_pending:
            return replace(result, outcome=RepairOutcome.ALREADY, detail="reboot pending")
        if not _ours_to_drain(info):
            return _not_ours(result, info)
        if dry_run:
            return replace(result, outcome=RepairOutcome.DRY_RUN)
        door.reboot(node, reason)
        # proc_req.c skips POWER_DOWN, POWERED_DOWN and POWERING_DOWN nodes (22.05, 25.11);
        # one powering up is rebooted.
        if info.powered_down or bool({"POWER_DOWN", "POWERING_DOWN"} & info.flags):
            return replace(result, detail=f"{reason} (powered down: slurmctld skips the reboot)")
        return result

    return _finish(result, act)


def request_gpu_reset(door: SlurmDoor, node: str, reason: str, *, dry_run: bool) -> RepairResult:
    """Drain the node with the reason that asks its HealthCheckProgram for a GPU reset."""
    return _drain(RepairAction.GPU_RESET, door, node, reason, dry_run=dry_run)


def finish_gpu_reset(door: SlurmDoor, node: str, reason: str, *, dry_run: bool) -> RepairResult:
    """The node reset its GPUs and passed its screen: the reason becomes `reason` (burn-in
    pending), the node stays drained."""
    return _drain(RepairAction.GPU_RESET_DONE, door, node, reason, dry_run=dry_run)


def send_to_rma(door: SlurmDoor, node: str, reason: str, *, dry_run: bool) -> RepairResult:
    """Drain the node for a person to send it for repair; it is never resumed by us."""
    return _drain(RepairAction.RMA, door, node, reason, dry_run=dry_run)


def fail_burn_in(door: SlurmDoor, node: str, reason: str, *, dry_run: bool) -> RepairResult:
    """Drain the node whose burn-in failed, before its reservation ends."""
    return _drain(RepairAction.FAIL_BURN_IN, door, node, reason, dry_run=dry_run)


def start_burn_in(
    door: SlurmDoor,
    node: str,
    *,
    reservation: str,
    users: Sequence[str],
    duration_s: int,
    command: Sequence[str],
    job_name: str,
    output: str,
    time_limit_min: int,
    dry_run: bool,
) -> RepairResult:
    """Reserve the node for the burn-in, return it to service inside the reservation and
    submit the burn-in job (its id in the result). A step that fails leaves the steps
    before it in place (the node stays inside its reservation, where nothing else runs);
    `detail` names the step."""
    result = RepairResult(RepairAction.START_BURN_IN, node, RepairOutcome.APPLIED)
    step = "reservation"

    def act() -> RepairResult:
        nonlocal step
        info = door.node(node)
        if info.taken_out and not is_ours(info.reason):  # resuming would undo it
            return _not_ours(result, info)
        held = {r.name: r for r in door.reservations()}
        if reservation in held and node not in held[reservation].nodes:
            raise SlurmCommandError(
                f"reservation {reservation} exists for {','.join(held[reservation].nodes)}"
            )
        if dry_run:
            return replace(
                result,
                outcome=RepairOutcome.DRY_RUN,
                detail=f"would reserve {node} as {reservation}, resume it, submit {job_name}",
            )
        if reservation not in held:
            door.create_reservation(reservation, node, duration_s, users)
        step = "resume"
        if door.node(node).taken_out:
            door.resume(node)
        step = "submit"
        job_id = door.submit_burn_in(
            node,
            reservation,
            command,
            job_name=job_name,
            output=output,
            time_limit_min=time_limit_min,
        )
        return replace(result, job_id=job_id, detail=f"job {job_id} in {reservation}")

    return _finish(result, act, lambda: step)


def end_burn_in(door: SlurmDoor, node: str, *, reservation: str, dry_run: bool) -> RepairResult:
    """Delete the node's burn-in reservation (its job must have ended: Slurm refuses
    while one runs in it)."""
    result = RepairResult(RepairAction.END_BURN_IN, node, RepairOutcome.APPLIED)

    def act() -> RepairResult:
        if dry_run:
            return replace(
                result, outcome=RepairOutcome.DRY_RUN, detail=f"would delete {reservation}"
            )
        try:
            door.delete_reservation(reservation)
        except ReservationNotFound:
            return replace(result, outcome=RepairOutcome.ALREADY, detail=f"{reservation} gone")
        return result

    return _finish(result, act)


def mark_suspect(
    door: SlurmDoor,
    node: str,
    *,
    weight: int,
    feature: str = SUSPECT_FEATURE,
    dry_run: bool,
) -> RepairResult:
    """Raise the node's Weight and add `feature` to its available and active features;
    the weight and features before are returned for clear_suspect."""
    result = RepairResult(RepairAction.MARK_SUSPECT, node, RepairOutcome.APPLIED)

    def act() -> RepairResult:
        info = door.node(node)
        # Never the suspect weight itself as the weight before: a mark whose weight went
        # through and whose features did not leaves it, and the clear would restore it.
        before = replace(
            result,
            weight_before=info.weight if info.weight != weight else None,
            features_before=info.features,
            active_features_before=info.active_features,
        )
        if info.weight == weight and feature in info.features and feature in info.active_features:
            return replace(before, outcome=RepairOutcome.ALREADY)
        if dry_run:
            return replace(
                before, outcome=RepairOutcome.DRY_RUN, detail=f"weight {weight}, +{feature}"
            )
        if info.weight != weight:
            door.set_node_weight(node, weight)
        if feature not in info.features or feature not in info.active_features:
            door.set_node_features(
                node, _with(info.features, feature), _with(info.active_features, feature)
            )
        return replace(before, detail=f"weight {weight}, +{feature}")

    return _finish(result, act)


def clear_suspect(
    door: SlurmDoor,
    node: str,
    *,
    weight: int,
    feature: str = SUSPECT_FEATURE,
    dry_run: bool,
) -> RepairResult:
    """Set the node's Weight back to `weight` (the one recorded by mark_suspect) and take
    `feature` out of its available and active features."""
    result = RepairResult(RepairAction.CLEAR_SUSPECT, node, RepairOutcome.APPLIED)

    def act() -> RepairResult:
        info = door.node(node)
        marked = feature in info.features or feature in info.active_features
        if info.weight == weight and not marked:
            return replace(result, outcome=RepairOutcome.ALREADY)
        if dry_run:
            return replace(
                result, outcome=RepairOutcome.DRY_RUN, detail=f"weight {weight}, -{feature}"
            )
        if info.weight != weight:
            door.set_node_weight(node, weight)
        if marked:
            door.set_node_features(
                node, _without(info.features, feature), _without(info.active_features, feature)
            )
        return replace(result, detail=f"weight {weight}, -{feature}")

    return _finish(result, act)


# -- internals ---------------------------------------------------------------------------


def _drain(
    action: RepairAction, door: SlurmDoor, node: str, reason: str, *, dry_run: bool
) -> RepairResult:
    result = RepairResult(action, node, RepairOutcome.APPLIED, detail=reason)

    def act() -> RepairResult:
        info = door.node(node)  # now, not as the pass read it: an admin may have drained it
        if not _ours_to_drain(info):
            return _not_ours(result, info)
        if dry_run:
            return replace(result, outcome=RepairOutcome.DRY_RUN)
        door.drain(node, reason)
        return result

    return _finish(result, act)


def _ours_to_drain(info: NodeInfo) -> bool:
    """In service, or out with our reason, none, or Slurm's own for a node fault."""
    return is_ours(info.reason) or may_replace_drain(info)


def _not_ours(result: RepairResult, info: NodeInfo) -> RepairResult:
    reason = " ".join(info.reason.split())[:200]
    detail = f"{info.label} by someone else meanwhile: {reason!r}; left as it is"
    return replace(result, outcome=RepairOutcome.NOT_OURS, detail=detail)


def _finish(
    result: RepairResult,
    act: Callable[[], RepairResult],
    step: Callable[[], str] | None = None,
) -> RepairResult:
    """Run the step, turn a failure into its outcome, log what happened."""
    log = get_logger(node=result.node)
    try:
        done = act()
    except (SlurmUnavailable, SlurmTimeout) as exc:
        done = replace(result, outcome=RepairOutcome.UNAVAILABLE, detail=_said(exc, step))
    except SlurmOutputError as exc:
        done = replace(result, outcome=RepairOutcome.UNKNOWN, detail=_said(exc, step))
    except SlurmError as exc:
        done = replace(result, outcome=RepairOutcome.REFUSED, detail=_said(exc, step))
    except OSError as exc:  # e.g. E2BIG, or a Slurm command that cannot be executed
        done = replace(result, outcome=RepairOutcome.UNKNOWN, detail=_said(exc, step))
    if done.ok:
        event = "repair_dry_run" if done.dry_run else "repair_applied"
        log.info(event, action=done.action.value, outcome=done.outcome.value, detail=done.detail)
    elif done.outcome is RepairOutcome.NOT_OURS:
        log.warning("repair_not_ours", action=done.action.value, detail=done.detail)
    else:
        log.error(
            "repair_failed",
            action=done.action.value,
            outcome=done.outcome.value,
            detail=done.detail,
        )
    return done


def _said(exc: BaseException, step: Callable[[], str] | None) -> str:
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    return f"{step()}: {text}" if step else text


def _with(features: tuple[str, ...], feature: str) -> tuple[str, ...]:
    return features if feature in features else (*features, feature)


def _without(features: tuple[str, ...], feature: str) -> tuple[str, ...]:
    return tuple(f for f in features if f != feature)
