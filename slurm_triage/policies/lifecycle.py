"""A node's lifecycle (issue 16): healthy -> suspect -> drained -> repairing -> burn-in ->
healthy, or -> rma. Pure: the node as Slurm shows it, its burn-in reservation and job, its
journalled lifecycle steps and lemon signals in; one LifecycleDecision out.

Where each state lives (docs/repair.md): DRAINED, REPAIRING and RMA in the node's reason
(policies.drain_words), BURN_IN in the reservation `triage_burnin_<node>`, SUSPECT in the
node's feature; an admin's drain, down or reboot (a reason without our prefix) is ADMIN and
never touched. The journal remembers what Slurm cannot: when each step was taken, the
repair cycles in the window, the weight a suspect mark replaced, and that a node back in
service after our reboot (a person's resume, or ReturnToService=2 where docs/repair.md says)
still waits for its burn-in.

The repair a node gets follows what took it out: the XID catalogue's node action (the
reconcile gathers it: `repair_for_xid`, since policies read no attribution), else the
check's or the cause's table below. A cause that needs a person (a part to replace, a cable,
cooling) gets nothing automatic; one that needs hardware replaced goes to RMA, as does a node
repaired `rma_after_cycles` times within `rma_window_days`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from slurm_triage.config import RepairConfig
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.policies.drain_words import (
    LEMON_SUBJECT,
    DrainKind,
    DrainWords,
    burn_in_failed_reason,
    gpu_reset_reason,
    read_reason,
    reboot_reason,
    rma_reason,
)
from slurm_triage.policies.lemons import NodeSignals
from slurm_triage.slurm.model import NodeInfo, ReservationInfo

BURN_IN_PREFIX = "triage_burnin_"


def burn_in_reservation(node: str) -> str:
    """The maintenance reservation a node's burn-in runs in."""
    return f"{BURN_IN_PREFIX}{node}"


class NodeLifecycle(enum.StrEnum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"  # in service, weighted last, feature triage_suspect
    DRAINED = "drained"  # out by our drain, no repair started
    REPAIRING = "repairing"  # reboot or GPU reset asked, or repaired and waiting for burn-in
    BURN_IN = "burn_in"
    RMA = "rma"
    ADMIN = "admin"  # someone else's drain, down or reboot: never touched
    UNKNOWN = "unknown"


class LifecycleAction(enum.StrEnum):
    NONE = "none"
    MARK_SUSPECT = "mark_suspect"
    CLEAR_SUSPECT = "clear_suspect"
    REQUEST_GPU_RESET = "request_gpu_reset"
    REBOOT = "reboot"
    START_BURN_IN = "start_burn_in"
    FAIL_BURN_IN = "fail_burn_in"  # end the reservation, drain `burn-in failed`
    RETURN_TO_SERVICE = "return_to_service"  # end the reservation; the node is in service
    SEND_TO_RMA = "send_to_rma"
    RELEASE = "release"  # a person returned the node (`slurm-triage nodes release`)
    UNKNOWN = "unknown"


class Repair(enum.IntEnum):
    """What a cause asks of the node, weakest first (a stronger need wins)."""

    UNKNOWN = 0
    BURN_IN_ONLY = 1  # nothing to repair: prove it with the burn-in
    GPU_RESET = 2
    REBOOT = 3
    PERSON = 4  # a person must look (cable, cooling, reseat): nothing automatic
    RMA = 5  # the part must be replaced


class BurnIn(enum.StrEnum):
    """The node's last burn-in job, as Slurm shows it."""

    NONE = "none"  # none submitted (or none recorded) for this cycle
    RUNNING = "running"  # pending or running
    PASSED = "passed"  # COMPLETED, exit 0
    FAILED = "failed"  # any other end
    UNKNOWN = "unknown"  # Slurm could not say
    NOT_READ = "not_read"  # not asked: only a node in burn-in needs it (reconcile)


# A health check's failure: what fixes it (docs/repair.md). NVIDIA's resolutions: a GPU off
# the bus or missing asks RESTART_BM (reboot); ECC and NVLink faults RESET_GPU; PCIe width,
# thermal, InfiniBand and scratch space a person.
CHECK_REPAIR: dict[str, Repair] = {
    "gpu.count": Repair.REBOOT,
    "gpu.lost": Repair.REBOOT,
    "gpu.xid": Repair.REBOOT,  # refined by the XID's own node action
    "gpu.ecc": Repair.GPU_RESET,
    "gpu.row_remap": Repair.GPU_RESET,  # a pending remap; a failed one asks RMA
    "gpu.nvlink": Repair.GPU_RESET,
    "gpu.pcie": Repair.PERSON,
    "gpu.thermal": Repair.PERSON,
    "gpu.processes": Repair.REBOOT,
    "ib.ports": Repair.PERSON,
    "pcie.aer": Repair.PERSON,
    "fs.mounts": Repair.REBOOT,
    "host.memory": Repair.REBOOT,
    "host.disk": Repair.PERSON,
}
# A job end's cause (shared/TAXONOMY.md ids), when no XID says more.
CAUSE_REPAIR: dict[str, Repair] = {
    "gpu_unavailable": Repair.REBOOT,
    "gpu_memory": Repair.GPU_RESET,
    "gpu_nvlink": Repair.GPU_RESET,
    "gpu_driver": Repair.GPU_RESET,
    "pcie": Repair.PERSON,
    "infiniband": Repair.PERSON,
    "thermal": Repair.PERSON,
    "host_hardware": Repair.PERSON,
    "node_failure": Repair.REBOOT,
    "filesystem": Repair.REBOOT,
    "health_check": Repair.REBOOT,
    LEMON_SUBJECT: Repair.REBOOT,
}


@dataclass(frozen=True)
class LifecycleInput:
    """One node's facts for one reconcile pass. `steps`: its journalled lifecycle steps,
    oldest first, since the RMA window began; `signals`: its lemon signals since it last
    returned to service; `xid_repair`: what the XIDs that took it out ask (catalogue)."""

    node: NodeInfo
    reservation: ReservationInfo | None
    steps: tuple[LifecycleEvent, ...]
    burn_in: BurnIn
    signals: NodeSignals | None
    xid_repair: Repair
    now: float


@dataclass(frozen=True)
class LifecycleDecision:
    """The state the node is in and the one thing to do now, with why. `drain_reason` is
    the reason a drain-type action writes; `cycle` the repair cycle this belongs to;
    `job_id` the burn-in job concerned; `lemon` whether this cycle began with a lemon."""

    node: str
    state: NodeLifecycle
    action: LifecycleAction
    reason: str
    subject: str = ""
    repair: Repair = Repair.UNKNOWN
    cycle: int = 0
    drain_reason: str = ""
    job_id: int | None = None
    lemon: bool = False
    restore_weight: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "state": self.state.value,
            "action": self.action.value,
            "reason": self.reason,
            "subject": self.subject,
            "repair": self.repair.name.lower(),
            "cycle": self.cycle,
            "drain_reason": self.drain_reason,
            "job_id": self.job_id,
            "lemon": self.lemon,
        }


_OPENING = frozenset(
    {LifecycleAction.REBOOT, LifecycleAction.REQUEST_GPU_RESET, LifecycleAction.START_BURN_IN}
)


def lifecycle_state(
    node: NodeInfo,
    reservation: ReservationInfo | None,
    steps: Sequence[LifecycleEvent],
    config: RepairConfig,
    now: float,
) -> NodeLifecycle:
    """The node's state (pure): what Slurm shows (`classify`), and what the journal adds:
    a node back in service after our reboot with no burn-in since (`reboot_unproven`), a
    suspect mark not cleared since (`suspect_marked`: `scontrol reconfigure` drops it)."""
    return _state(node, reservation, _History(steps, now, config), config)


def _state(
    node: NodeInfo, reservation: ReservationInfo | None, history: _History, config: RepairConfig
) -> NodeLifecycle:
    return classify(
        node,
        reservation,
        config.suspect_feature,
        reboot_unproven=history.reboot_unproven,
        suspect_marked=history.suspect_since is not None,
    )


def classify(
    node: NodeInfo,
    reservation: ReservationInfo | None,
    feature: str,
    *,
    reboot_unproven: bool = False,
    suspect_marked: bool = False,
) -> NodeLifecycle:
    """The state Slurm shows (pure): reason words first, then the reservation, the mark.
    What the journal adds: `reboot_unproven` (our reboot was the cycle's last step) makes a
    node in service REPAIRING, it came back before its burn-in; `suspect_marked` (marked,
    not cleared since) makes it SUSPECT without the feature."""
    words = read_reason(node.reason)
    out = _out_of_service(node)
    if out and not words.ours:
        return NodeLifecycle.ADMIN
    if reservation is not None and reservation.name == burn_in_reservation(node.name):
        return NodeLifecycle.BURN_IN
    if not out and (reboot_unproven or _returned_before_its_burn_in(words)):
        return NodeLifecycle.REPAIRING
    if not out:
        suspect = suspect_marked or _carries(node, feature)
        return NodeLifecycle.SUSPECT if suspect else NodeLifecycle.HEALTHY
    return _STATE_OF_KIND.get(words.kind, NodeLifecycle.UNKNOWN)


def _carries(node: NodeInfo, feature: str) -> bool:
    return feature in node.features or feature in node.active_features


def _out_of_service(node: NodeInfo) -> bool:
    return node.drained or node.state == "DOWN" or node.failed or node.reboot_pending


def _returned_before_its_burn_in(words: DrainWords) -> bool:
    """In service with our reboot's reason still on it and slurmctld's " : reboot complete":
    with ReturnToService=2 slurmctld returns a DOWN node to service at its next ping answer
    (node_mgr.c _node_did_resp), nextstate=DOWN notwithstanding, and keeps the reason until
    a job lands there (make_node_alloc clears it; then only the journal remembers:
    `reboot_unproven`). The node is still unproven: its burn-in comes next."""
    return words.kind is DrainKind.REPAIRING_REBOOT and words.stage == "reboot complete"


_STATE_OF_KIND = {
    DrainKind.CHECK: NodeLifecycle.DRAINED,
    DrainKind.JOB: NodeLifecycle.DRAINED,
    DrainKind.LEMON: NodeLifecycle.DRAINED,
    DrainKind.BURN_IN_FAILED: NodeLifecycle.DRAINED,
    DrainKind.REPAIRING_REBOOT: NodeLifecycle.REPAIRING,
    DrainKind.REPAIRING_GPU_RESET: NodeLifecycle.REPAIRING,
    DrainKind.BURN_IN_PENDING: NodeLifecycle.REPAIRING,
    DrainKind.RMA: NodeLifecycle.RMA,
}


def repair_for(words: DrainWords, xid_repair: Repair, config: RepairConfig) -> Repair:
    """What the drain's cause asks, the stronger of the table's and the XIDs', then what
    the config allows: no resets -> reboot; no reboots -> a person."""
    if words.asks_rma:
        return Repair.RMA
    subject = LEMON_SUBJECT if words.kind is DrainKind.LEMON else words.subject
    table = CHECK_REPAIR if "." in subject else CAUSE_REPAIR  # check names have a dot
    need = max(table.get(subject, Repair.UNKNOWN), xid_repair)
    if need is Repair.GPU_RESET and not config.gpu_reset:
        need = Repair.REBOOT
    if need is Repair.REBOOT and not config.reboot:
        need = Repair.PERSON
    return need


def repair_limit(config: RepairConfig, cluster_size: int) -> float:
    """The breaker: at most this many nodes repairing or in burn-in at once."""
    return max(config.min_nodes_in_repair, config.max_share_in_repair * cluster_size)


def decide_lifecycle(
    given: LifecycleInput,
    config: RepairConfig,
    *,
    in_repair: int,
    cluster_size: int,
) -> LifecycleDecision:
    """The node's state and the one step to take now (pure). `in_repair`: nodes of the
    cluster repairing or in burn-in now, this one excluded (the breaker)."""
    node = given.node
    words = read_reason(node.reason)
    history = _History(given.steps, given.now, config)
    state = _state(node, given.reservation, history, config)
    base = LifecycleDecision(
        node.name,
        state,
        LifecycleAction.NONE,
        "",
        subject=words.subject or history.subject,
        cycle=history.cycle,
        lemon=history.lemon,
    )
    if state in (NodeLifecycle.ADMIN, NodeLifecycle.UNKNOWN, NodeLifecycle.RMA):
        return _none(base, _LEFT_ALONE[state])
    if not config.enabled:
        return _none(base, "repair disabled ([repair] enabled = false)")
    if state is NodeLifecycle.HEALTHY:
        return _healthy(base, given.signals, config)
    if state is NodeLifecycle.SUSPECT:
        return _suspect(base, given, history, config)
    if state is NodeLifecycle.DRAINED:
        limit = repair_limit(config, cluster_size)
        step = _drained(base, words, given, history, config, in_repair, limit)
    elif state is NodeLifecycle.REPAIRING:
        step = _repairing(base, words, history, config, given)
    else:
        step = _burning_in(base, given, history, config)
    return _reboot_first(base, step, node)


# What a pending reboot holds back: each would resume the node (the burn-in's start), or ask
# a repair slurmctld skips for a node whose reboot is pending (proc_req.c).
_WAITS_FOR_REBOOT = frozenset(
    {LifecycleAction.START_BURN_IN, LifecycleAction.REBOOT, LifecycleAction.REQUEST_GPU_RESET}
)


def _reboot_first(
    base: LifecycleDecision, step: LifecycleDecision, node: NodeInfo
) -> LifecycleDecision:
    """A node whose reboot is pending (someone's `scontrol reboot`, or ours under way) is
    never resumed: State=RESUME clears REBOOT_REQUESTED and REBOOT_ISSUED (node_mgr.c
    update_node, 22.05 and 25.11), cancelling the reboot or landing the burn-in on a node
    that is booting. Nor is a repair opened then: slurmctld skips the reboot, and the cycle
    would count as done. The step waits until the node is back."""
    if not node.reboot_pending or step.action not in _WAITS_FOR_REBOOT:
        return step
    why = f"reboot pending: {step.action.value} waits until the node is back (a resume cancels it)"
    return _none(base, why)


_LEFT_ALONE = {
    NodeLifecycle.ADMIN: "drained, down or rebooted by someone else: never touched",
    NodeLifecycle.UNKNOWN: "our prefix with words this version does not know: left alone",
    NodeLifecycle.RMA: "out for RMA: a person returns it (slurm-triage nodes release)",
}


def _none(base: LifecycleDecision, why: str) -> LifecycleDecision:
    return _with(base, LifecycleAction.NONE, why)


def _with(
    base: LifecycleDecision, action: LifecycleAction, why: str, **more: Any
) -> LifecycleDecision:
    return replace(base, action=action, reason=why, **more)


def _rising(signals: NodeSignals | None, config: RepairConfig) -> str:
    if signals is None:
        return ""
    if signals.lemon:
        return "lemon: " + "; ".join(signals.reasons)
    if config.suspect_failed_jobs and signals.failed_jobs >= config.suspect_failed_jobs:
        bar = config.suspect_failed_jobs
        return f"{signals.failed_jobs} failed jobs blamed it (suspect from {bar})"
    return ""


def _healthy(
    base: LifecycleDecision, signals: NodeSignals | None, config: RepairConfig
) -> LifecycleDecision:
    why = _rising(signals, config)
    if why:
        return _with(base, LifecycleAction.MARK_SUSPECT, why)
    return _none(base, "in service")


def _suspect(
    base: LifecycleDecision, given: LifecycleInput, history: _History, config: RepairConfig
) -> LifecycleDecision:
    # The cool-down runs from the period's first mark: marking again does not restart it.
    since = history.suspect_since if history.suspect_since is not None else given.now
    left = since + config.lemon_cooldown_h * 3600 - given.now
    rising = _rising(given.signals, config)
    if not _carries(given.node, config.suspect_feature) and (left > 0 or rising):
        why = "suspect mark gone (scontrol reconfigure resets Weight and features): marked again"
        return _with(base, LifecycleAction.MARK_SUSPECT, why)
    if left > 0:
        return _none(base, f"suspect: cool-down ends in {left / 3600:.1f} h")
    if rising:
        return _none(base, f"suspect: {rising}")
    before = history.weight_before(config.suspect_weight)
    weight = before if before is not None else 1  # Slurm's default Weight
    return _with(
        base,
        LifecycleAction.CLEAR_SUSPECT,
        "cool-down over, no new failures",
        restore_weight=weight,
    )


def _drained(
    base: LifecycleDecision,
    words: DrainWords,
    given: LifecycleInput,
    history: _History,
    config: RepairConfig,
    in_repair: int,
    limit: float,
) -> LifecycleDecision:
    lemon = words.kind is DrainKind.LEMON or bool(given.signals and given.signals.lemon)
    subject = LEMON_SUBJECT if words.kind is DrainKind.LEMON else base.subject
    need = repair_for(words, given.xid_repair, config)
    if words.kind is DrainKind.BURN_IN_FAILED and history.last_repair is Repair.GPU_RESET:
        need = max(need, Repair.REBOOT if config.reboot else Repair.PERSON)  # escalate
    done = history.cycle
    if done >= config.rma_after_cycles:
        why = f"repaired {done} times in {config.rma_window_days:g} d"
        return _with(
            base,
            LifecycleAction.SEND_TO_RMA,
            why,
            drain_reason=rma_reason(subject, why),
            repair=Repair.RMA,
            lemon=lemon,
        )
    if need is Repair.RMA:
        why = f"{subject or 'the fault'} needs the part replaced"
        return _with(
            base,
            LifecycleAction.SEND_TO_RMA,
            why,
            drain_reason=rma_reason(subject, "part replacement"),
            repair=need,
            lemon=lemon,
        )
    if need in (Repair.PERSON, Repair.UNKNOWN):
        what = "needs a person" if need is Repair.PERSON else "no known repair"
        why = f"{subject or 'cause'}: {what}; stays drained"
        return _with(base, LifecycleAction.NONE, why, repair=need)
    if in_repair + 1 > limit:
        why = f"waiting: {in_repair} nodes in repair or burn-in (limit {limit:g})"
        return _with(base, LifecycleAction.NONE, why, repair=need)
    return _open_cycle(base, need, subject, done + 1, lemon)


def _open_cycle(
    base: LifecycleDecision, need: Repair, subject: str, cycle: int, lemon: bool
) -> LifecycleDecision:
    if need is Repair.GPU_RESET:
        return _with(
            base,
            LifecycleAction.REQUEST_GPU_RESET,
            f"repair {cycle}: GPU reset for {subject}",
            drain_reason=gpu_reset_reason((), subject),
            repair=need,
            cycle=cycle,
            lemon=lemon,
        )
    if need is Repair.REBOOT:
        return _with(
            base,
            LifecycleAction.REBOOT,
            f"repair {cycle}: reboot for {subject}",
            drain_reason=reboot_reason(subject),
            repair=need,
            cycle=cycle,
            lemon=lemon,
        )
    return _with(
        base,
        LifecycleAction.START_BURN_IN,
        f"repair {cycle}: burn-in only for {subject}",
        repair=need,
        cycle=cycle,
        lemon=lemon,
    )


def _repairing(
    base: LifecycleDecision,
    words: DrainWords,
    history: _History,
    config: RepairConfig,
    given: LifecycleInput,
) -> LifecycleDecision:
    if not _out_of_service(given.node):
        # Back in service before its burn-in (classify): the reservation (IGNORE_JOBS)
        # keeps new jobs off, the burn-in waits for any job that landed meanwhile.
        why = "rebooted, back in service before its burn-in: burn-in next"
        return _with(base, LifecycleAction.START_BURN_IN, why)
    if words.kind is DrainKind.BURN_IN_PENDING:
        return _with(base, LifecycleAction.START_BURN_IN, "repaired: burn-in next")
    asked = history.open_request()
    # No request of this cycle in the journal (its row lost, Slurm refused the reboot): the
    # drain that asked for the repair says since when.
    since = asked.at if asked else given.node.reason_time
    waited = given.now - since if since else 0.0
    late = waited > config.repair_timeout_s
    if words.kind is DrainKind.REPAIRING_REBOOT:
        booted = _booted_since(given.node, asked)
        return _rebooting(base, words, given.node, booted, waited, late)
    if late and config.reboot:  # the node's health check did not reset its GPUs in time
        return _with(
            base,
            LifecycleAction.REBOOT,
            f"GPU reset not done after {waited:.0f} s: reboot instead",
            drain_reason=reboot_reason(base.subject),
            repair=Repair.REBOOT,
        )
    return _none(base, "waiting for the node's health check to reset its GPUs")


def _booted_since(node: NodeInfo, asked: LifecycleEvent | None) -> bool:
    """slurmd registered with a boot time after we asked for the repair (a power up counts:
    slurmctld may have skipped the reboot itself, the node being powered down)."""
    return asked is not None and node.boot_time is not None and node.boot_time > asked.at


def _rebooting(
    base: LifecycleDecision,
    words: DrainWords,
    node: NodeInfo,
    booted: bool,
    waited: float,
    late: bool,
) -> LifecycleDecision:
    """slurmctld's notes and the node's state say where the reboot is. Issued (" : reboot
    issued"), no longer pending and the node not DOWN: it booted (drained still: our reboot
    asks no next state), also after " : reboot timed out" when it booted late; so did a node
    whose boot time is after our request (`booted`). " : reboot complete": booted, DOWN (a
    reboot an earlier build of slurm-triage asked with nextstate=DOWN). Issued or timed out,
    no longer pending, DOWN: it did not come back, a person looks. Never issued, the node
    powered down: slurmctld skipped the reboot with no error (proc_req.c, 22.05 and 25.11),
    and asking again would be skipped for ever; its power up is a fresh boot, so the
    burn-in's job, which powers it up, comes next."""
    issued = words.stage in ("reboot issued", "reboot timed out")
    up = node.state != "DOWN" and not node.failed
    if words.stage == "reboot complete" or ((issued or booted) and not node.reboot_pending and up):
        return _with(base, LifecycleAction.START_BURN_IN, "rebooted: burn-in next")
    if issued and not node.reboot_pending:
        return _none(base, "reboot timed out (ResumeTimeout): a person must look")
    if not node.reboot_pending and node.power_changing:
        return _none(base, "powering down or up: slurmctld skips its reboot; the boot will do")
    if not node.reboot_pending and node.powered_down:
        why = "powered down, so slurmctld skipped the reboot: the burn-in's power up is the reboot"
        return _with(base, LifecycleAction.START_BURN_IN, why)
    if not node.reboot_pending:  # an admin's `scontrol cancel_reboot`, or a lost request
        return _with(
            base,
            LifecycleAction.REBOOT,
            "reboot no longer pending: asked again",
            drain_reason=reboot_reason(base.subject),
            repair=Repair.REBOOT,
        )
    return _none(base, f"reboot pending for {waited:.0f} s" + (": overdue" if late else ""))


def _burning_in(
    base: LifecycleDecision, given: LifecycleInput, history: _History, config: RepairConfig
) -> LifecycleDecision:
    started = history.last(LifecycleAction.START_BURN_IN)
    job_id = started.job_id if started else None
    if given.burn_in is BurnIn.NOT_READ:
        return _none(base, "burn-in job not read this pass")
    if given.burn_in is BurnIn.NONE or job_id is None:
        return _with(base, LifecycleAction.START_BURN_IN, "reserved, no burn-in job: submit it")
    if given.burn_in is BurnIn.RUNNING:
        return _none(base, f"burn-in job {job_id} running")
    if given.burn_in is BurnIn.UNKNOWN:
        return _none(base, f"burn-in job {job_id}: Slurm could not say how it ended")
    if given.burn_in is BurnIn.PASSED:
        cooling = base.lemon or bool(given.signals and given.signals.lemon)
        marked = config.suspect_feature in given.node.features
        if cooling and not marked and config.lemon_cooldown_h > 0:
            hours = config.lemon_cooldown_h
            why = f"burn-in job {job_id} passed; a lemon: suspect for {hours:g} h"
            return _with(base, LifecycleAction.MARK_SUSPECT, why, job_id=job_id)
        why = f"burn-in job {job_id} passed"
        return _with(base, LifecycleAction.RETURN_TO_SERVICE, why, job_id=job_id)
    if history.cycle >= config.rma_after_cycles:
        why = f"burn-in job {job_id} failed after {history.cycle} repairs"
        return _with(
            base,
            LifecycleAction.SEND_TO_RMA,
            why,
            drain_reason=rma_reason(base.subject, why),
            repair=Repair.RMA,
            job_id=job_id,
        )
    return _with(
        base,
        LifecycleAction.FAIL_BURN_IN,
        f"burn-in job {job_id} failed",
        drain_reason=burn_in_failed_reason(job_id, base.subject),
        job_id=job_id,
    )


class _History:
    """What the node's journalled steps say: the repair cycles since the window began (a
    person's release starts over), the current cycle's subject and whether it began with a
    lemon, the last step of a kind."""

    def __init__(self, steps: Sequence[LifecycleEvent], now: float, config: RepairConfig) -> None:
        window_start = now - config.rma_window_days * 86400
        released = [s.at for s in steps if s.action == LifecycleAction.RELEASE.value and s.applied]
        start = max([window_start, *released])
        self.steps = tuple(s for s in steps if s.at >= start)
        openings = [s for s in self.steps if s.applied and s.action in _OPENING_VALUES and s.cycle]
        # Cycles are counted, not read: a cycle numbered 3 when the window held more.
        self.cycle = len({s.cycle for s in openings})
        newest = openings[-1].cycle if openings else 0
        current = [s for s in openings if s.cycle == newest]
        self.subject = current[0].subject if current else ""
        self.lemon = bool(current and current[0].detail.get("lemon"))
        repairs = [s for s in self.steps if s.applied and s.action in _REPAIR_VALUES]
        self.last_repair = (
            Repair.GPU_RESET
            if repairs and repairs[-1].action == LifecycleAction.REQUEST_GPU_RESET.value
            else Repair.REBOOT
            if repairs
            else Repair.UNKNOWN
        )

    @property
    def reboot_unproven(self) -> bool:
        """Our reboot is the last step of the node's lifecycle: no burn-in, end of one, RMA
        or release followed it. A node in service so came back before its burn-in."""
        taken = [s for s in self.steps if s.applied and s.action in _CYCLE_VALUES]
        return bool(taken) and taken[-1].action == LifecycleAction.REBOOT.value

    @property
    def suspect_since(self) -> float | None:
        """When the node's suspect period began: its first mark since the last clear (None:
        not marked, by the journal). Slurm may have lost the mark meanwhile."""
        since = None
        for s in self.steps:
            if s.applied and s.action == LifecycleAction.CLEAR_SUSPECT.value:
                since = None
            elif s.applied and s.action == LifecycleAction.MARK_SUSPECT.value and since is None:
                since = s.at
        return since

    def weight_before(self, suspect_weight: int) -> int | None:
        """The node's Weight before its suspect period, to restore at the clear: the newest
        a mark since the last clear recorded that is not `suspect_weight` itself. A mark
        taken when the feature was gone but the weight still raised (its features update
        failed after the weight went through, or a person took only the feature off)
        recorded the suspect weight; one after `scontrol reconfigure` the slurm.conf weight,
        newer than the first mark's. None: none recorded."""
        found = None
        for s in self.steps:
            if s.applied and s.action == LifecycleAction.CLEAR_SUSPECT.value:
                found = None
            elif s.applied and s.action == LifecycleAction.MARK_SUSPECT.value:
                weight = s.detail.get("weight_before")
                if type(weight) is int and weight != suspect_weight:  # not a bool, not None
                    found = weight
        return found

    def open_request(self) -> LifecycleEvent | None:
        """Our reboot or GPU reset that the node's current repair asked for: the last one
        applied, unless a burn-in, a return, an RMA or a release came after it, which closed
        its cycle (then this cycle's request never reached Slurm, or its row was lost, and
        the node's boot since that older request proves nothing)."""
        found = None
        for s in self.steps:
            if not s.applied or s.action not in _CYCLE_VALUES:
                continue
            found = s if s.action in _REPAIR_VALUES else None
        return found

    def last(self, *actions: LifecycleAction) -> LifecycleEvent | None:
        wanted = {a.value for a in actions}
        found = [s for s in self.steps if s.action in wanted and s.applied]
        return found[-1] if found else None


_OPENING_VALUES = frozenset(a.value for a in _OPENING)
_REPAIR_VALUES = frozenset({LifecycleAction.REBOOT.value, LifecycleAction.REQUEST_GPU_RESET.value})
# The steps that move a repair cycle on (the suspect marks and NONE do not).
_CYCLE_VALUES = frozenset(
    a.value
    for a in (
        LifecycleAction.REBOOT,
        LifecycleAction.REQUEST_GPU_RESET,
        LifecycleAction.START_BURN_IN,
        LifecycleAction.FAIL_BURN_IN,
        LifecycleAction.RETURN_TO_SERVICE,
        LifecycleAction.SEND_TO_RMA,
        LifecycleAction.RELEASE,
    )
)
