"""`slurm-triage nodes reconcile`: one pass of the node lifecycle over the cluster (issue 16).

Gather (the nodes, the burn-in reservations, the burn-in job's end of each node in burn-in,
the journal's lifecycle steps and node events, the XIDs that took a node out) -> decide
(policies.lifecycle, pure) -> act (actuator.repair, dry-run capable) -> record (the
journal's lifecycle table; every step with its reason). Run every minute on the controller
(contrib/slurm-triage-reconcile.timer). Idempotent: a pass that finds every node where the
last one left it changes nothing in Slurm and records nothing; a step Slurm already shows is
ALREADY, not done twice.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_triage.actuator import repair
from slurm_triage.actuator.repair import RepairAction, RepairOutcome, RepairResult
from slurm_triage.attribution.xid import NodeAction, lookup
from slurm_triage.clock import SYSTEM_CLOCK, Clock
from slurm_triage.config import Config
from slurm_triage.job_state import JobState
from slurm_triage.journal import Journal
from slurm_triage.journal.records import LifecycleEvent, NodeEvent
from slurm_triage.policies.drain_words import read_reason
from slurm_triage.policies.lemons import FRESH_START, NodeSignals, node_signals, since_return
from slurm_triage.policies.lifecycle import (
    BurnIn,
    LifecycleAction,
    LifecycleDecision,
    LifecycleInput,
    NodeLifecycle,
    Repair,
    burn_in_reservation,
    decide_lifecycle,
    lifecycle_state,
)
from slurm_triage.slurm import SlurmDoor, SlurmError
from slurm_triage.slurm.model import NodeInfo, ReservationInfo

_IN_REPAIR = frozenset({NodeLifecycle.REPAIRING, NodeLifecycle.BURN_IN})
# What reconcile starts that puts a node into repair (the breaker counts it at once).
_STARTS_REPAIR = frozenset(
    {LifecycleAction.REBOOT, LifecycleAction.REQUEST_GPU_RESET, LifecycleAction.START_BURN_IN}
)
_XID_REPAIR = {
    NodeAction.RESET_GPU: Repair.GPU_RESET,
    NodeAction.DRAIN_RESET: Repair.GPU_RESET,
    NodeAction.DRAIN_REBOOT: Repair.REBOOT,
    NodeAction.DRAIN_INSPECT: Repair.PERSON,
    NodeAction.DRAIN_RMA: Repair.RMA,
}


@dataclass(frozen=True)
class NodeStep:
    """One node's pass: the decision, what the actuator did, whether it was journalled."""

    decision: LifecycleDecision
    results: tuple[RepairResult, ...] = ()
    recorded: bool = False
    bundle: str = ""
    errors: tuple[str, ...] = field(default=())

    @property
    def applied(self) -> bool:
        return bool(self.results) and all(
            r.outcome in (RepairOutcome.APPLIED, RepairOutcome.ALREADY) for r in self.results
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.decision.to_dict(),
            "applied": self.applied,
            "results": [r.to_dict() for r in self.results],
            "recorded": self.recorded,
            "bundle": self.bundle,
            "errors": list(self.errors),
        }


def repair_for_xid(xids: Iterable[int]) -> Repair:
    """The strongest repair the XIDs ask, by the catalogue's node action (attribution.xid)."""
    return max(
        (_XID_REPAIR.get(lookup(x).node_action, Repair.UNKNOWN) for x in xids),
        default=Repair.UNKNOWN,
    )


def burn_in_state(door: SlurmDoor, job_id: int | None) -> BurnIn:
    """How the burn-in job ended, from slurmctld, else accounting (a job past MinJobAge)."""
    if job_id is None:
        return BurnIn.NONE
    try:
        job = door.job(job_id)
    except SlurmError:
        try:
            job = door.accounted_job(job_id)
        except SlurmError:
            return BurnIn.UNKNOWN
    state = job.base_state if job.state is JobState.COMPLETING else job.state
    if state is JobState.UNKNOWN and job.state is JobState.COMPLETING:
        return BurnIn.RUNNING  # the text form hides the end under COMPLETING: next pass
    if not state.finished:
        return BurnIn.UNKNOWN if state is JobState.UNKNOWN else BurnIn.RUNNING
    ok = state is JobState.COMPLETED and job.exit_code == 0 and job.exit_signal == 0
    return BurnIn.PASSED if ok else BurnIn.FAILED


def _burn_in(door: SlurmDoor, steps: Sequence[LifecycleEvent], state: NodeLifecycle) -> BurnIn:
    """The node's burn-in job's end, asked of Slurm only for a node in burn-in (the only
    state that reads it): a pass over thousands of nodes, hundreds of them repaired within
    the window, would otherwise query slurmctld, and accounting for each job gone, per node."""
    if state is not NodeLifecycle.BURN_IN:
        return BurnIn.NOT_READ
    wanted = LifecycleAction.START_BURN_IN.value
    started = next((s for s in reversed(steps) if s.action == wanted and s.applied), None)
    return burn_in_state(door, started.job_id if started else None)


@dataclass(frozen=True)
class _Cluster:
    nodes: tuple[NodeInfo, ...]
    reservations: dict[str, ReservationInfo]
    steps: dict[str, tuple[LifecycleEvent, ...]]
    events: dict[str, tuple[NodeEvent, ...]]


def _gather_cluster(config: Config, door: SlurmDoor, journal: Journal, now: float) -> _Cluster:
    windows = (config.repair.rma_window_days, config.policy.lemon_window_days)
    since = now - max(windows) * 86400
    steps: dict[str, list[LifecycleEvent]] = {}
    for s in journal.lifecycle_events(since=since):
        steps.setdefault(s.node, []).append(s)
    events: dict[str, list[NodeEvent]] = {}
    for e in journal.node_events(now - config.policy.lemon_window_days * 86400):
        events.setdefault(e.node, []).append(e)
    return _Cluster(
        door.nodes(),
        {r.name: r for r in door.reservations()},
        {n: tuple(v) for n, v in steps.items()},
        {n: tuple(v) for n, v in events.items()},
    )


def _signals(
    config: Config, steps: Sequence[LifecycleEvent], events: Sequence[NodeEvent], node: str
) -> NodeSignals | None:
    """Lemon signals since the node last came back (burn-in passed, or a person's release)."""
    back = max((s.at for s in steps if s.action in FRESH_START and s.applied), default=0.0)
    return node_signals(since_return(events, {node: back}), config.policy).get(node)


def _xid_repair(node: NodeInfo, events: Sequence[NodeEvent]) -> Repair:
    words = read_reason(node.reason)
    xids = [words.xid] if words.xid is not None else []
    if words.job_id is not None:
        xids += [e.xid for e in events if e.job_id == words.job_id and e.xid is not None]
    return repair_for_xid(xids)


def reconcile(
    config: Config,
    door: SlurmDoor,
    journal: Journal,
    *,
    dry_run: bool,
    only: Sequence[str] = (),
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[NodeStep, ...]:
    """One pass over the cluster's nodes (or `only` these): decide, act, record. Slurm's
    refusals are in each step's results; the pass itself raises only when Slurm cannot be
    read at all (SlurmError) or the journal cannot be written (JournalError)."""
    now = clock.time()
    cluster = _gather_cluster(config, door, journal, now)
    states = {
        n.name: lifecycle_state(
            n,
            cluster.reservations.get(burn_in_reservation(n.name)),
            cluster.steps.get(n.name, ()),
            config.repair,
            now,
        )
        for n in cluster.nodes
    }
    in_repair = sum(1 for s in states.values() if s in _IN_REPAIR)
    latest = journal.latest_lifecycle()
    done: list[NodeStep] = []
    for node in cluster.nodes:
        if only and node.name not in only:
            continue
        steps = cluster.steps.get(node.name, ())
        events = cluster.events.get(node.name, ())
        given = LifecycleInput(
            node=node,
            reservation=cluster.reservations.get(burn_in_reservation(node.name)),
            steps=steps,
            burn_in=_burn_in(door, steps, states[node.name]),
            signals=_signals(config, steps, events, node.name),
            xid_repair=_xid_repair(node, events),
            now=now,
        )
        others = in_repair - (1 if states[node.name] in _IN_REPAIR else 0)
        decision = decide_lifecycle(
            given, config.repair, in_repair=others, cluster_size=len(cluster.nodes)
        )
        step = _carry_out(config, door, journal, decision, dry_run=dry_run, now=now)
        if (
            decision.action in _STARTS_REPAIR
            and states[node.name] not in _IN_REPAIR
            and step.applied
        ):
            in_repair += 1
        step = _record(journal, step, latest.get(node.name), dry_run=dry_run, now=now)
        done.append(step)
    return tuple(done)


def _carry_out(
    config: Config,
    door: SlurmDoor,
    journal: Journal,
    decision: LifecycleDecision,
    *,
    dry_run: bool,
    now: float,
) -> NodeStep:
    """The decision through the actuator (a dry run changes nothing)."""
    cfg, node, action = config.repair, decision.node, decision.action
    reservation = burn_in_reservation(node)
    A = LifecycleAction
    results: list[RepairResult] = []
    if action is A.MARK_SUSPECT:
        results.append(
            repair.mark_suspect(
                door, node, weight=cfg.suspect_weight, feature=cfg.suspect_feature, dry_run=dry_run
            )
        )
    elif action is A.CLEAR_SUSPECT:
        weight = decision.restore_weight or 1
        results.append(
            repair.clear_suspect(
                door, node, weight=weight, feature=cfg.suspect_feature, dry_run=dry_run
            )
        )
    elif action is A.REQUEST_GPU_RESET:
        results.append(repair.request_gpu_reset(door, node, decision.drain_reason, dry_run=dry_run))
    elif action is A.REBOOT:
        results.append(repair.reboot_node(door, node, decision.drain_reason, dry_run=dry_run))
    elif action is A.START_BURN_IN:
        results.append(_start_burn_in(config, door, node, reservation, dry_run=dry_run))
    elif action is A.RETURN_TO_SERVICE:
        results.append(repair.end_burn_in(door, node, reservation=reservation, dry_run=dry_run))
    elif action is A.FAIL_BURN_IN:
        results.append(repair.fail_burn_in(door, node, decision.drain_reason, dry_run=dry_run))
        results.append(repair.end_burn_in(door, node, reservation=reservation, dry_run=dry_run))
    elif action is A.SEND_TO_RMA:
        results.append(repair.send_to_rma(door, node, decision.drain_reason, dry_run=dry_run))
        if decision.state is NodeLifecycle.BURN_IN:
            results.append(repair.end_burn_in(door, node, reservation=reservation, dry_run=dry_run))
    step = NodeStep(decision, tuple(results))
    if action is A.SEND_TO_RMA and not dry_run and step.applied:
        from slurm_triage.cli.rma_bundle import write_bundle

        path, error = write_bundle(config, journal, door, decision, now)
        step = replace(step, bundle=path, errors=(error,) if error else ())
    return step


def burn_in_command() -> list[str]:
    """What the burn-in job runs on the node: this installation's slurm-triage."""
    return [shutil.which("slurm-triage") or "slurm-triage", "burn-in"]


def _start_burn_in(
    config: Config, door: SlurmDoor, node: str, reservation: str, *, dry_run: bool
) -> RepairResult:
    cfg = config.repair
    return repair.start_burn_in(
        door,
        node,
        reservation=reservation,
        users=(cfg.burn_in_user,),
        # the reservation outlives the job's limit a little, so a slow start still fits
        duration_s=(cfg.burn_in_time_limit_min + 30) * 60,
        command=burn_in_command(),
        job_name=f"triage-burnin-{node}",
        output=f"{config.paths.state_dir}/burn-in-{node}-%j.out",
        time_limit_min=cfg.burn_in_time_limit_min,
        dry_run=dry_run,
    )


def _record(
    journal: Journal,
    step: NodeStep,
    last: LifecycleEvent | None,
    *,
    dry_run: bool,
    now: float,
) -> NodeStep:
    """Journal the step when it did something, or when the node's state or reason moved
    since its last recorded step (a node first seen healthy is not recorded: no history)."""
    d = step.decision
    moved = last is not None and (last.state, last.reason) != (d.state.value, d.reason)
    first = last is None and d.state is not NodeLifecycle.HEALTHY
    acted = d.action is not LifecycleAction.NONE
    repeated = (
        last is not None
        and acted
        and not step.applied
        and (last.action, last.reason, last.applied) == (d.action.value, d.reason, False)
    )
    if not (acted or moved or first) or repeated:
        return step
    detail: dict[str, Any] = {"results": [r.to_dict() for r in step.results]}
    if d.lemon:
        detail["lemon"] = True
    if dry_run:
        detail["dry_run"] = True
    suspect = next((r for r in step.results if r.action is RepairAction.MARK_SUSPECT), None)
    if suspect is not None and suspect.outcome is RepairOutcome.APPLIED:
        detail["weight_before"] = suspect.weight_before
        detail["features_before"] = list(suspect.features_before)
    if step.bundle:
        detail["bundle"] = step.bundle
    if step.errors:
        detail["errors"] = list(step.errors)
    job = next((r.job_id for r in step.results if r.job_id is not None), d.job_id)
    journal.add_lifecycle_events(
        [
            LifecycleEvent(
                node=d.node,
                at=now,
                state=d.state.value,
                action=d.action.value,
                applied=step.applied and not dry_run,
                reason=d.reason,
                subject=d.subject,
                cycle=d.cycle,
                job_id=job,
                actor="reconcile",
                detail=detail,
            )
        ]
    )
    return replace(step, recorded=True)
