"""Epilog= on every node of a job (root): collect root-side evidence for the job's window.

Gathers, bounded by `decision.epilog_deadline_s`: kernel-log events from 10 minutes before
the job's end to now (XIDs, fallen off the bus, AER, MCE/EDAC, OOM kills), NVML state, and,
when the job failed, a targeted post-job check of the suspect subsystems; writes them as
this node's root record. On a shared node the job's GPUs (SLURM_JOB_GPUS, placed through
NVML) bound its evidence: XIDs on a neighbour's GPU are left out, and the application-XID
bursts it claims are its own GPUs' (job_gpus). The kernel events of the run before those 10
minutes, as far back as a hung collective lets them count (attribution/hang.py), go to a
second record that the decision reads only when a watchdog says the job hung that long
before its end.

It never exits non-zero for our own trouble: Slurm drains a node whose Epilog fails, and our
bugs must not drain nodes. It exits non-zero on purpose when a failed job's root evidence on
this node alone would drain it (`node_fault`): Slurm drains the node at once, and restarts an
expedited-requeue job elsewhere (Slurm 25.11).
"""

from __future__ import annotations

import os
import sys
import time
from types import EllipsisType
from typing import TYPE_CHECKING

from slurm_triage.attribution import job_window
from slurm_triage.attribution.engine import ROOT_REACH_S
from slurm_triage.clock import SYSTEM_CLOCK, Clock
from slurm_triage.config import Config, node_path
from slurm_triage.evidence import (
    EvidenceRecord,
    Fact,
    KernelEvent,
    KernelEventKind,
    NvmlCondition,
    NvmlFact,
    Source,
    record_to_json,
)
from slurm_triage.evidence.store import EARLIER_STEP, EARLIER_SUFFIX, write_root_record
from slurm_triage.gpu_ids import JobGpus, job_bus_ids
from slurm_triage.health_checks import app_xids, registry
from slurm_triage.health_checks.gpu_processes import nvml_devices
from slurm_triage.health_checks.gpu_resets import gpu_key
from slurm_triage.health_checks.kernel_log import read_kernel_events
from slurm_triage.health_checks.result import CheckStatus
from slurm_triage.health_checks.runner import FactError, FactSources, Run
from slurm_triage.logs import get_logger
from slurm_triage.observe import hooks as observe
from slurm_triage.prolog_epilog.job_end import SLURM_ENV, JobEnd
from slurm_triage.prolog_epilog.own_fault import checks_alone, own_fault
from slurm_triage.taxonomy import Cause

if TYPE_CHECKING:
    from slurm_triage.slurm import SlurmDoor


def nvml_facts(config: Config, node: str, now: float) -> list[Fact]:
    """Root's NVML view: lost GPUs and init failures as facts (details are in the checks)."""
    sources = FactSources(config.health, node, config.health.check_timeout_s)
    try:
        nvml = sources.get("nvml")
    except FactError as exc:
        return [
            NvmlFact(
                node=node,
                time=now,
                source=Source.ROOT,
                condition=NvmlCondition.UNKNOWN,
                detail=str(exc)[:300],
            )
        ]
    if nvml.init_error:
        return [
            NvmlFact(
                node=node,
                time=now,
                source=Source.ROOT,
                condition=NvmlCondition.INIT_FAILED,
                detail=nvml.init_error,
            )
        ]
    facts: list[Fact] = []
    for gpu in nvml.gpus:
        if gpu.is_lost():
            facts.append(
                NvmlFact(
                    node=node,
                    time=now,
                    source=Source.ROOT,
                    condition=NvmlCondition.GPU_LOST,
                    gpu=str(gpu.index),
                )
            )
        elif gpu.requires_reset():
            facts.append(
                NvmlFact(
                    node=node,
                    time=now,
                    source=Source.ROOT,
                    condition=NvmlCondition.RESET_REQUIRED,
                    gpu=str(gpu.index),
                )
            )
    return facts


def kernel_events(config: Config, end: JobEnd) -> list[KernelEvent]:
    """This node's kernel events; none when its kernel log cannot be read."""
    try:
        health = config.health
        return read_kernel_events(
            node_path(health.kernel_log, end.node),
            end.node,
            clock_cache=node_path(health.kernel_clock_cache, end.node),
        )
    except Exception as exc:  # a missing or unreadable kernel log is not fatal here
        log = get_logger(job_id=end.job_id, node=end.node)
        log.warning("epilog_kernel_log_unreadable", error=str(exc)[:200])
        return []


def collect(
    config: Config,
    end: JobEnd,
    now: float | None = None,
    events: list[KernelEvent] | None = None,
    gpus: JobGpus | None | EllipsisType = ...,
) -> EvidenceRecord:
    """Root-side facts for this node and this job's window; `events` are the node's kernel
    events and `gpus` the job's GPUs (job_gpus), each read here when not given."""
    now = time.time() if now is None else now
    window = job_window(now)
    events = kernel_events(config, end) if events is None else events
    if isinstance(gpus, EllipsisType):
        gpus = job_gpus(config, end, events, min(window.start, end.start_time or window.start))
    # An undated line could be from any day: it is no evidence for this job's window.
    facts: list[Fact] = [
        e for e in on_job_gpus(events, gpus) if e.time is not None and window.contains(e.time)
    ]
    log = get_logger(job_id=end.job_id, node=end.node)
    try:
        claim_app_xids(config, end, events, now, gpus)
    except Exception as exc:  # unclaimed bursts then count as the running job's, never drain
        log.warning("epilog_app_xids_unclaimed", error=f"{type(exc).__name__}: {exc}"[:200])
    if config.health.expected_gpus:
        facts += nvml_facts(config, end.node, now)
    if end.failed:
        specs = registry.select(list(registry.POST_JOB_SET), everything=False)
        report = Run(
            config,
            specs,
            mode="epilog",
            node=end.node,
            deadline_s=config.decision.epilog_deadline_s / 2,
        ).execute()
        facts += [
            registry.health_fact(r, end.node, now)
            for r in report.results
            if r.status is not CheckStatus.SKIPPED
        ]
    return EvidenceRecord(
        job_id=str(end.evidence_job_id),
        node=end.node,
        step="epilog",
        collected_by=Source.ROOT,
        facts=tuple(facts),
    )


# The newest kernel events of the run before its window that the earlier record keeps: what
# lies nearest the window is what a hang that began there reaches first.
MAX_EARLIER_FACTS = 200


def on_job_gpus(events: list[KernelEvent], gpus: JobGpus | None) -> list[KernelEvent]:
    """`events` less the XIDs on GPUs of the node that were not the job's (`gpus`; None:
    not known, all kept): on a shared node those are a neighbour's, not this job's cause."""
    if gpus is None:
        return events
    return [
        e
        for e in events
        if not (
            e.event is KernelEventKind.XID
            and e.pci_bus_id
            and gpu_key(e.pci_bus_id) not in gpus.bus_ids
        )
    ]


def earlier_record(end: JobEnd, events: list[KernelEvent], now: float) -> EvidenceRecord | None:
    """The kernel events of this run before its window (collect), back to the run's start
    and at most ROOT_REACH_S before its end: the decision lets them count only when a
    watchdog timed out a collective that began that early (attribution.engine.root_window).
    None when there are none."""
    window = job_window(now)
    since = now - ROOT_REACH_S
    if end.start_time is not None:
        since = max(since, end.start_time)
    facts = [e for e in events if e.time is not None and since <= e.time < window.start]
    if not facts:
        return None
    return EvidenceRecord(
        job_id=str(end.evidence_job_id),
        node=end.node,
        step=EARLIER_STEP,
        collected_by=Source.ROOT,
        facts=tuple(facts[-MAX_EARLIER_FACTS:]),
    )


def claim_app_xids(
    config: Config,
    end: JobEnd,
    events: list[KernelEvent],
    now: float,
    gpus: JobGpus | None = None,
) -> None:
    """Record this job as the owner of the application-XID bursts of its run on its GPUs
    `gpus` (job_gpus), so that `gpu.xid` counts one job's repeated faults as one
    (health_checks.app_xids). A job whose GPUs are not known (or are MIG devices, whose
    GPUs other jobs share) claims on every GPU only when it had the node to itself, else
    none: a neighbour's claims would count one user still faulting as several users,
    where bursts nobody claims count as one."""
    gap_s = config.health.app_xid_burst_gap_s
    found = app_xids.bursts(events, gap_s)
    mine = gpus.bus_ids if gpus is not None and not gpus.mig else None
    if not found or (mine is None and not end.whole_node):
        return
    since = end.start_time if end.start_time is not None else job_window(now).start
    path = app_xids.ledger_path(config.paths.state_dir, end.node)
    user = str(end.uid) if end.uid >= 0 else ""
    new = app_xids.claim_bursts(
        path, found, str(end.job_id), since, now, gap_s, now, user, gpus=mine
    )
    if new:
        log = get_logger(job_id=end.job_id, node=end.node)
        log.info("epilog_app_xids_claimed", bursts=len(new))


def job_gpus(
    config: Config, end: JobEnd, events: list[KernelEvent], since: float
) -> JobGpus | None:
    """This job's GPUs on this node: SLURM_JOB_GPUS matched to NVML's devices and sysfs's
    GPUs in `health.slurm_gpu_order` (gpu_ids.job_bus_ids); None when every GPU counts as
    the job's (it had the node to itself: no neighbour, and without ConstrainDevices it
    could use them all) or when not known (Slurm named none, NVML or sysfs cannot place
    them). NVML is read only when an XID on a GPU was logged since `since`: without one
    there is nothing to place."""
    if end.whole_node:
        return None
    ids = end.scope.gpu_ids if end.scope is not None else None
    xids = (e for e in events if e.event is KernelEventKind.XID and e.pci_bus_id)
    if ids is None or not any(e.time is not None and e.time >= since for e in xids):
        return None
    sources = FactSources(config.health, end.node, config.health.check_timeout_s)
    try:
        nvml, host = sources.get("nvml"), sources.get("pci")
        devices = nvml_devices(() if nvml.init_error else nvml.gpus)
        order = config.health.slurm_gpu_order
        found = job_bus_ids(ids, devices, host, order) if devices else None
        error = nvml.init_error or ""
    except Exception as exc:  # FactError, or our bug: not known, never a failed Epilog
        found, error = None, f"{type(exc).__name__}: {exc}"
    if found is None:
        log = get_logger(job_id=end.job_id, node=end.node)
        log.warning("epilog_job_gpus_unknown", gpu_ids=list(ids), error=error[:200])
    return found


# The Epilog's exit status when it asks Slurm to drain its node (any non-zero does).
NODE_FAULT_EXIT = 1


def node_fault(config: Config, end: JobEnd, record: EvidenceRecord, now: float) -> Cause | None:
    """The cause for which this node must leave service now, judged on root's evidence from
    this node alone, as the decision's drain step would judge it; None when not."""
    if not (end.failed and config.decision.fail_epilog_on_node_fault and config.policy.act):
        return None
    return own_fault(config.policy, end.node, record.facts, job_window(now))


def breaker_holds(
    config: Config,
    end: JobEnd,
    record: EvidenceRecord,
    fault: Cause,
    door: SlurmDoor | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> str:
    """The circuit breaker's reason not to drain this node for `fault` when a post-job
    check found it (a mount hanging under every node of a 512-node job fails on all of
    them at once), as the health path's breaker: the node marks the failure in its Slurm
    node Comment, settles `health.breaker_settle_s` so the job's other nodes mark theirs,
    and counts the cluster's nodes failing the same check. '' for a fault no check found
    (an XID is this node's own) and when Slurm cannot be read (drained as before). A node
    whose GPUs show a fault of their own (an XID in its kernel log, NVML's lost GPU: an XID 79
    fails gpu.lost too) is judged on that, never held back; kernel lines of a hung mount or
    a link down are the shared fault's as much as the checks are."""
    checks = checks_alone(record.facts, fault, (None, end.node))
    if not checks:
        return ""
    from slurm_triage.actuator import mark_failing
    from slurm_triage.policies.breaker import breaker_reason
    from slurm_triage.slurm import SlurmError, open_door

    try:
        door = door or open_door(config.slurm)
        now = clock.time()
        mark_failing(door, end.node, checks[0], now)
        clock.sleep(config.health.breaker_settle_s)
        cluster = door.nodes()
    except SlurmError as exc:
        get_logger(job_id=end.job_id, node=end.node).warning(
            "epilog_breaker_unread", error=str(exc)[:200]
        )
        return ""
    reasons = (breaker_reason(c, end.node, cluster, config.health, now) for c in checks)
    return next((why for why in reasons if why), "")


def run_epilog(config: Config, env: dict[str, str] | None = None) -> int:
    """Collect and write this node's root record; then decide if this node must. Exits
    NODE_FAULT_EXIT when this node must be drained now (`node_fault`), else 0."""
    env = dict(os.environ) if env is None else env
    now = time.time()
    # A node list the decision cannot read is the decision's trouble: the record is written.
    end = JobEnd.from_env(env, now, nodes_required=False)
    if not end.node:
        raise KeyError(SLURM_ENV["node"])
    log = get_logger(job_id=end.job_id, node=end.node)
    events = kernel_events(config, end)
    reach = now - ROOT_REACH_S
    gpus = job_gpus(config, end, events, min(reach, end.start_time or reach))
    record = collect(config, end, now, events, gpus)
    earlier = earlier_record(end, on_job_gpus(events, gpus), now)
    # The earlier record first: the decision waits for `<node>.json` alone, then reads both.
    written = ([(earlier, EARLIER_SUFFIX)] if earlier else []) + [(record, ".json")]
    for each, suffix in written:
        try:
            # A het job component's under its leader's id: the het job's one decision (the
            # leader's) reads every component's nodes there (decide.decide).
            path = write_root_record(
                config.paths.evidence_dir,
                end.evidence_job_id,
                end.node,
                record_to_json(each),
                suffix=suffix,
            )
            log.info("epilog_evidence_written", path=path, facts=len(each.facts))
        except Exception as exc:
            log.error("epilog_evidence_unwritten", error=f"{type(exc).__name__}: {exc}")
    if config.decision.run_in == "first_node_epilog" and end.nodes[:1] == (end.node,):
        from slurm_triage.prolog_epilog.decide import decide_from_env

        decide_from_env(config, env)
    try:
        fault = node_fault(config, end, record, now)
    except Exception as exc:  # our bug must not drain the node
        log.error("epilog_node_fault_unjudged", error=f"{type(exc).__name__}: {exc}")
        return 0
    if fault is not None and (held := breaker_holds(config, end, record, fault)):
        log.warning("epilog_node_fault_breaker_open", cause=fault.value, reason=held)
        fault = None  # the decision finds the same shared fault and drains nothing either
    observe.after_epilog(config, end.node, fault)  # the node's metrics
    if fault is None:
        return 0
    log.warning("epilog_node_fault", cause=fault.value)
    print(f"slurm-triage epilog: {end.node} must be drained: {fault.value}", file=sys.stderr)
    return NODE_FAULT_EXIT
