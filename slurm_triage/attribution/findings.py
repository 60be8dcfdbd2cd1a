"""What each fact says about the cause: fact → zero or more `Finding`s (pure).

A finding is a candidate cause on one node with a tier (how strong this kind of evidence is;
higher beats lower on any node), a precedence (orders hardware causes on one node), a time,
and a confidence. The tiers (tiers.Tier) encode the taxonomy's rules: root-collected
hardware faults (ROOT_HW) beat Slurm's own decisions (SCHEDULER), a hang, faults only the job
named (INFRA), the job's real errors (ERROR), watched XIDs (WARNING), symptoms, weak readings
and failures that say nothing (EXIT).
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_triage.attribution.matcher import classify_exception
from slurm_triage.attribution.signatures import BY_NAME
from slurm_triage.attribution.tiers import Tier
from slurm_triage.evidence import (
    CheckStatus,
    Fact,
    HealthCheck,
    JobState,
    KernelEvent,
    KernelEventKind,
    LogHit,
    NvmlCondition,
    NvmlFact,
    ProcessExit,
    RootException,
    SlurmState,
    Source,
    Stall,
    signal_name,
)
from slurm_triage.frozen import Frozen
from slurm_triage.taxonomy import Cause, Domain, info

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Orders hardware causes found on one node: the XID catalogue refines it (XID 119 beats 79).
PRECEDENCE = {
    Cause.GPU_UNAVAILABLE: 80,
    Cause.GPU_MEMORY: 70,
    Cause.GPU_NVLINK: 60,
    Cause.PCIE: 50,
    Cause.HOST_HARDWARE: 45,
    Cause.GPU_DRIVER: 40,
    Cause.THERMAL: 35,
    Cause.INFINIBAND: 30,
    Cause.FILESYSTEM: 25,
    Cause.HEALTH_CHECK: 20,
    Cause.NODE_FAILURE: 10,
}
_CRASH_SIGNALS = {4, 7, 8, 11}  # SIGILL, SIGBUS, SIGFPE, SIGSEGV
_SIGABRT = 6


class Finding(Frozen):
    """One candidate cause on one node, and the fact it rests on."""

    cause: Cause
    tier: int
    confidence: float
    fact: Fact
    index: int
    why: str
    precedence: int = 0
    final: bool = False
    drainable: bool = False
    job_wide: bool = False

    @property
    def node(self) -> str | None:
        """The node this finding blames; None for job-wide ones (Slurm's own decisions)."""
        return None if self.job_wide else self.fact.node

    @property
    def time(self) -> float | None:
        return self.fact.time


def findings_for(fact: Fact, index: int) -> list[Finding]:
    """Every finding `fact` supports (none for facts that explain nothing)."""
    handler = _HANDLERS.get(type(fact))
    return handler(fact, index) if handler else []


def _hardware(
    cause: Cause,
    fact: Fact,
    index: int,
    why: str,
    precedence: int | None = None,
) -> Finding:
    root = fact.source is Source.ROOT
    return Finding(
        cause,
        Tier.ROOT_HW if root else Tier.INFRA,
        0.95 if root else 0.75,
        fact,
        index,
        why,
        PRECEDENCE.get(cause, 0) if precedence is None else precedence,
        drainable=root,
    )


def _process_exit(fact: ProcessExit, index: int) -> list[Finding]:
    if not fact.failed():
        return []
    sig = fact.death_signal()
    if sig is not None:
        return [_signal_finding(sig, fact, index, "process")]
    return [Finding(Cause.UNKNOWN, Tier.EXIT, 0.2, fact, index, f"exit code {fact.exit_code}")]


def _signal_finding(sig: int, fact: Fact, index: int, who: str) -> Finding:
    why = f"{who} killed by {signal_name(sig)}"
    if sig in _CRASH_SIGNALS:
        return Finding(Cause.SEGFAULT, Tier.ERROR, 0.6, fact, index, why)
    if sig == _SIGABRT:
        return Finding(Cause.SEGFAULT, Tier.WEAK, 0.5, fact, index, why)
    return Finding(Cause.UNKNOWN, Tier.EXIT, 0.2, fact, index, why)


_STATE_CAUSES = {
    JobState.CANCELLED: (Cause.CANCELLED, 0.9),
    JobState.DEADLINE: (Cause.CANCELLED, 0.8),
    JobState.TIMEOUT: (Cause.TIMEOUT, 0.9),
    JobState.PREEMPTED: (Cause.PREEMPTED, 0.9),
    JobState.OUT_OF_MEMORY: (Cause.HOST_OOM, 0.9),
    JobState.NODE_FAIL: (Cause.NODE_FAILURE, 0.8),
    JobState.BOOT_FAIL: (Cause.NODE_FAILURE, 0.8),
    JobState.LAUNCH_FAILED: (Cause.HEALTH_CHECK, 0.7),
}


def _slurm_state(fact: SlurmState, index: int) -> list[Finding]:
    why = f"Slurm state {fact.state.value}"
    if fact.by_uid is not None:
        why += f" by uid {fact.by_uid}"
    if fact.state is JobState.FAILED:
        return [Finding(Cause.UNKNOWN, Tier.EXIT, 0.2, fact, index, why)]
    if fact.state not in _STATE_CAUSES:
        return []
    cause, confidence = _STATE_CAUSES[fact.state]
    drainable = fact.source is Source.ROOT and info(cause).domain is Domain.HARDWARE
    return [
        Finding(
            cause,
            Tier.SCHEDULER,
            confidence,
            fact,
            index,
            why,
            PRECEDENCE.get(cause, 0),
            drainable=drainable,
        )
    ]


_KERNEL_CAUSES = {
    KernelEventKind.FALLEN_OFF_BUS: Cause.GPU_UNAVAILABLE,
    KernelEventKind.AER_UNCORRECTED: Cause.PCIE,
    KernelEventKind.MCE: Cause.HOST_HARDWARE,
    KernelEventKind.EDAC_UE: Cause.HOST_HARDWARE,
    KernelEventKind.KERNEL_PANIC: Cause.HOST_HARDWARE,
    KernelEventKind.IB_LINK_DOWN: Cause.INFINIBAND,
    KernelEventKind.FS_UNRESPONSIVE: Cause.FILESYSTEM,
    KernelEventKind.GSP_TIMEOUT: Cause.GPU_DRIVER,
    KernelEventKind.HEALTH_CHECK_FAILED: Cause.HEALTH_CHECK,
}


def _kernel_event(fact: KernelEvent, index: int) -> list[Finding]:
    where = f" on {fact.pci_bus_id}" if fact.pci_bus_id else ""
    if fact.event is KernelEventKind.XID and fact.xid is not None:
        return _xid(fact.xid, fact.detail, fact, index, f"kernel log: XID {fact.xid}{where}")
    if fact.event is KernelEventKind.OOM_KILL:
        return [
            Finding(
                Cause.HOST_OOM, Tier.ERROR, 0.9, fact, index, f"kernel OOM killer ({fact.detail})"
            )
        ]
    cause = _KERNEL_CAUSES.get(fact.event)
    if cause is None:
        return []
    if fact.event is KernelEventKind.FALLEN_OFF_BUS:
        # The driver prints this next to XID 79: one less, so the XID line is the one cited.
        return [_hardware(cause, fact, index, f"kernel log: GPU fell off the bus{where}", 79)]
    if fact.event is KernelEventKind.GSP_TIMEOUT:
        # Just below XID 119's precedence: when both are there, the XID line is cited.
        return [_hardware(cause, fact, index, f"kernel log: GSP RPC timeout{where}", 89)]
    if fact.event is KernelEventKind.HEALTH_CHECK_FAILED:
        return [_hardware(cause, fact, index, f"NHC: {fact.detail[:160]}")]
    return [
        _hardware(cause, fact, index, f"kernel log: {fact.event.value.replace('_', ' ')}{where}")
    ]


def _xid(number: int, text: str, fact: Fact, index: int, why: str) -> list[Finding]:
    # The XID catalogue (a hundred-odd rows built at import) is imported for an XID only: a
    # job's own logs never give one (issue 20).
    from slurm_triage.attribution import xid as xids

    row = xids.lookup(number, text)
    why = f"{why} ({row.meaning})"
    if row.origin is xids.Origin.APP:
        tier = Tier.ERROR if row.decisive else Tier.WEAK
        return [Finding(row.cause, tier, 0.8 if row.decisive else 0.4, fact, index, why)]
    if row.decisive:
        return [_hardware(row.cause, fact, index, why, row.precedence)]
    if row.origin is xids.Origin.SIDE_EFFECT:
        return []
    return [Finding(row.cause, Tier.WARNING, 0.6, fact, index, why, row.precedence)]


_NVML_CAUSES = {
    NvmlCondition.GPU_LOST: Cause.GPU_UNAVAILABLE,
    NvmlCondition.GPU_MISSING: Cause.GPU_UNAVAILABLE,
    NvmlCondition.ECC_UNCORRECTED: Cause.GPU_MEMORY,
    NvmlCondition.ROW_REMAP_PENDING: Cause.GPU_MEMORY,
    NvmlCondition.ROW_REMAP_FAILURE: Cause.GPU_MEMORY,
    NvmlCondition.RETIRED_PAGES_PENDING: Cause.GPU_MEMORY,
    NvmlCondition.NVLINK_DOWN: Cause.GPU_NVLINK,
    NvmlCondition.NVLINK_ERRORS: Cause.GPU_NVLINK,
    NvmlCondition.PCIE_DEGRADED: Cause.PCIE,
    NvmlCondition.THERMAL_SLOWDOWN: Cause.THERMAL,
    NvmlCondition.POWER_BRAKE: Cause.THERMAL,
    NvmlCondition.INIT_FAILED: Cause.GPU_DRIVER,
    NvmlCondition.DRIVER_MISMATCH: Cause.GPU_DRIVER,
    NvmlCondition.RESET_REQUIRED: Cause.GPU_DRIVER,
}


def _nvml(fact: NvmlFact, index: int) -> list[Finding]:
    gpu = f" on GPU {fact.gpu}" if fact.gpu else ""
    if fact.condition is NvmlCondition.XID_EVENT and fact.value is not None:
        return _xid(fact.value, fact.detail, fact, index, f"NVML event: XID {fact.value}{gpu}")
    if fact.condition is NvmlCondition.RECOVERY_ACTION:
        if not fact.value:
            return []
        return [
            _hardware(Cause.GPU_DRIVER, fact, index, f"NVML recovery action {fact.value}{gpu}", 10)
        ]
    cause = _NVML_CAUSES.get(fact.condition)
    if cause is None:
        return []
    return [_hardware(cause, fact, index, f"NVML: {fact.condition.value.replace('_', ' ')}{gpu}")]


def _health_check(fact: HealthCheck, index: int) -> list[Finding]:
    if fact.status is not CheckStatus.FAIL:
        return []
    cause = fact.cause or Cause.HEALTH_CHECK
    why = f"health check {fact.check} failed" + (f": {fact.reason}" if fact.reason else "")
    found = _hardware(cause, fact, index, why)
    return [
        found
        if info(cause).domain is not Domain.USER
        else Finding(cause, Tier.ERROR, 0.8, fact, index, why)
    ]


def _default_role(cause: Cause) -> Tier:
    domain = info(cause).domain
    if cause in (Cause.NETWORK, Cause.NCCL_TIMEOUT) or domain is Domain.UNKNOWN:
        return Tier.SYMPTOM
    return {
        Domain.HARDWARE: Tier.INFRA,
        Domain.INFRASTRUCTURE: Tier.INFRA,
        Domain.SCHEDULER: Tier.SCHEDULER,
        Domain.USER: Tier.ERROR,
    }.get(domain, Tier.INFO)


_ROLE_CONFIDENCE = {
    Tier.EXIT: 0.2,
    Tier.SCHEDULER: 0.85,
    Tier.INFRA: 0.7,
    Tier.ERROR: 0.8,
    Tier.SYMPTOM: 0.6,
    Tier.WEAK: 0.5,
}


def _log_hit(fact: LogHit, index: int) -> list[Finding]:
    sig = BY_NAME.get(fact.signature)
    cause, role = (sig.cause, sig.role) if sig else (fact.cause, _default_role(fact.cause))
    if role is Tier.INFO:
        return []
    precedence = sig.precedence if sig else PRECEDENCE.get(cause, 0)
    times = f" ({fact.count}x)" if fact.count > 1 else ""
    # slurmstepd prints its banner on the batch host, which is not the node it is about;
    # a Slurm line that names its node (`srun: error: Node failure on node3`) is about it.
    names_node = sig is not None and "host" in sig.pattern.groupindex
    return [
        Finding(
            cause,
            int(role),
            _ROLE_CONFIDENCE[role],
            fact,
            index,
            f"log: {fact.signature}{times}: {fact.excerpt[:160]}",
            precedence,
            job_wide=role is Tier.SCHEDULER and not names_node,
        )
    ]


def _root_exception(fact: RootException, index: int) -> list[Finding]:
    short = fact.exc_type.rsplit(".", 1)[-1]
    rank = f" (rank {fact.rank})" if fact.rank is not None else ""
    if short == "ChildFailedError":
        return (
            []
            if fact.signal is None
            else [_signal_finding(fact.signal, fact, index, f"child{rank}")]
        )
    cause, role, name = classify_exception(fact.exc_type, fact.message)
    if role is Tier.INFO:
        return []
    confidence = 0.85 if name.startswith("exception") else min(0.9, _ROLE_CONFIDENCE[role] + 0.1)
    why = f"root exception{rank}: {short}: {fact.message[:160]}".rstrip(": ")
    return [
        Finding(
            cause, int(role), confidence, fact, index, why, PRECEDENCE.get(cause, 0), final=True
        )
    ]


def _stall(fact: Stall, index: int) -> list[Finding]:
    return [
        Finding(Cause.HANG, Tier.HANG, 0.8, fact, index, f"no progress for {fact.idle_s:.0f} s")
    ]


_HANDLERS: dict[type, Callable[[Any, int], list[Finding]]] = {
    ProcessExit: _process_exit,
    SlurmState: _slurm_state,
    KernelEvent: _kernel_event,
    NvmlFact: _nvml,
    HealthCheck: _health_check,
    LogHit: _log_hit,
    RootException: _root_exception,
    Stall: _stall,
}
