"""Every check by its stable dotted name, in one explicit list: the fact sources it needs,
when it runs, and the cause its failure is evidence of.

Prolog, epilog, cron and the CLI differ only in which checks they select and in what they do
with a failure. `PROLOG_SET` is the fast screen run before every job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_triage.evidence import HealthCheck, Source
from slurm_triage.health_checks import (
    aer,
    gpu,
    gpu_processes,
    host,
    infiniband,
    kernel_log,
    mounts,
)
from slurm_triage.health_checks.result import CheckResult
from slurm_triage.taxonomy import Cause


@dataclass(frozen=True, kw_only=True)
class CheckSpec:
    name: str
    needs: tuple[str, ...]  # fact sources, see runner.FactSources
    evaluate: Callable[..., CheckResult]
    prolog: bool  # part of the fast pre-job screen
    # Run by the node Epilog after a failed job: the subsystems a failed job makes suspect.
    post_job: bool
    # The fault a failure of this check is evidence of (attribution reads it); None when a
    # failure names no cause of its own (gpu.xid: the XID's own cause is in the kernel event).
    cause: Cause | None
    summary: str


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec(
        name="gpu.count",
        needs=("nvml", "pci"),
        evaluate=gpu.check_count,
        prolog=True,
        post_job=True,
        cause=Cause.GPU_UNAVAILABLE,
        summary="expected GPUs visible to NVML and on the PCI bus; NVML init works",
    ),
    CheckSpec(
        name="gpu.lost",
        needs=("nvml", "pci"),
        evaluate=gpu.check_lost,
        prolog=True,
        post_job=True,
        cause=Cause.GPU_UNAVAILABLE,
        summary="no GPU is lost (fell off the bus) or needs a reset",
    ),
    CheckSpec(
        name="gpu.xid",
        needs=("kernel",),
        evaluate=kernel_log.check_xid,
        prolog=True,
        post_job=False,
        cause=None,
        summary="no node-fatal XID in the kernel log window",
    ),
    CheckSpec(
        name="gpu.ecc",
        needs=("nvml",),
        evaluate=gpu.check_ecc,
        prolog=True,
        post_job=True,
        cause=Cause.GPU_MEMORY,
        summary="no uncorrectable ECC errors; NVML recovery action is none",
    ),
    CheckSpec(
        name="gpu.row_remap",
        needs=("nvml",),
        evaluate=gpu.check_row_remap,
        prolog=True,
        post_job=True,
        cause=Cause.GPU_MEMORY,
        summary="no pending (reset) or failed (RMA) row remaps",
    ),
    CheckSpec(
        name="gpu.nvlink",
        needs=("nvml",),
        evaluate=gpu.check_nvlink,
        prolog=True,
        post_job=True,
        cause=Cause.GPU_NVLINK,
        summary="all NVLinks up, error counters not rising",
    ),
    CheckSpec(
        name="gpu.pcie",
        needs=("nvml",),
        evaluate=gpu.check_pcie,
        prolog=False,
        post_job=False,
        cause=Cause.PCIE,
        summary="PCIe width at maximum (gen under load), replays not rising",
    ),
    CheckSpec(
        name="gpu.thermal",
        needs=("nvml",),
        evaluate=gpu.check_thermal,
        prolog=False,
        post_job=False,
        cause=Cause.THERMAL,
        summary="no hardware/thermal/power-brake slowdown, temperature below limit",
    ),
    CheckSpec(
        name="gpu.processes",
        needs=("nvml", "pci", "gpu_processes"),
        evaluate=gpu_processes.check_processes,
        prolog=True,
        post_job=False,
        cause=None,
        summary="no stray compute process holds one of the job's GPUs before it starts "
        "(prolog only)",
    ),
    CheckSpec(
        name="ib.ports",
        needs=("ib",),
        evaluate=infiniband.check_ports,
        prolog=True,
        post_job=True,
        cause=Cause.INFINIBAND,
        summary="HCA ports ACTIVE/LinkUp at the expected rate, link_downed not rising",
    ),
    CheckSpec(
        name="pcie.aer",
        needs=("aer",),
        evaluate=aer.check_aer,
        prolog=True,
        post_job=True,
        cause=Cause.PCIE,
        summary="PCIe AER error counters of the GPUs and HCAs (and their upstream ports) "
        "not rising",
    ),
    CheckSpec(
        name="fs.mounts",
        needs=("mounts",),
        evaluate=mounts.check_mounts,
        prolog=True,
        post_job=True,
        cause=Cause.FILESYSTEM,
        summary="required mounts present and answering within the timeout",
    ),
    CheckSpec(
        name="host.memory",
        needs=("host", "kernel"),
        evaluate=host.check_memory,
        prolog=False,
        post_job=False,
        cause=Cause.HOST_HARDWARE,
        summary="free memory above threshold; no uncorrected MCE/EDAC in the kernel log",
    ),
    CheckSpec(
        name="host.disk",
        needs=("host",),
        evaluate=host.check_disk,
        prolog=False,
        post_job=False,
        cause=None,
        summary="scratch space above threshold",
    ),
)

BY_NAME = {spec.name: spec for spec in CHECKS}
PROLOG_SET = tuple(spec.name for spec in CHECKS if spec.prolog)
POST_JOB_SET = tuple(spec.name for spec in CHECKS if spec.post_job)
ALL = tuple(BY_NAME)


class UnknownCheck(ValueError):
    pass


def select(only: Sequence[str] | None, everything: bool) -> tuple[CheckSpec, ...]:
    """The checks to run: `only` (validated), else all, else the prolog's fast set."""
    if only:
        unknown = [name for name in only if name not in BY_NAME]
        if unknown:
            raise UnknownCheck(f"unknown check {unknown[0]!r}; valid: {', '.join(ALL)}")
        return tuple(BY_NAME[name] for name in dict.fromkeys(only))
    names = ALL if everything else PROLOG_SET
    return tuple(BY_NAME[name] for name in names)


def describe() -> list[dict[str, Any]]:
    return [{"check": s.name, "prolog": s.prolog, "summary": s.summary} for s in CHECKS]


def health_fact(result: CheckResult, node: str, when: float) -> HealthCheck:
    """A check's result as root's evidence for a job end: a failure names its spec's cause."""
    spec = BY_NAME.get(result.check)
    cause = spec.cause if spec is not None and result.failed else None
    return HealthCheck(
        node=node,
        time=when,
        source=Source.ROOT,
        check=result.check,
        status=result.status,
        reason=result.reason,
        cause=cause,
    )
