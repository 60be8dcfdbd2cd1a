"""Every check by its stable dotted name, in one explicit list, and the fact sources it needs.

Prolog, epilog, cron and the CLI differ only in which checks they select and in what they do
with a failure. `PROLOG_SET` is the fast screen run before every job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_triage.health_checks import aer, gpu, host, infiniband, kernel_log, mounts
from slurm_triage.health_checks.result import CheckResult


@dataclass(frozen=True)
class CheckSpec:
    name: str
    needs: tuple[str, ...]  # fact sources, see facts.FactSources
    evaluate: Callable[..., CheckResult]
    prolog: bool  # part of the fast pre-job screen
    summary: str


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec(
        "gpu.count",
        ("nvml", "pci"),
        gpu.check_count,
        True,
        "expected GPUs visible to NVML and on the PCI bus; NVML init works",
    ),
    CheckSpec(
        "gpu.lost",
        ("nvml", "pci"),
        gpu.check_lost,
        True,
        "no GPU is lost (fell off the bus) or needs a reset",
    ),
    CheckSpec(
        "gpu.xid",
        ("kernel",),
        kernel_log.check_xid,
        True,
        "no node-fatal XID in the kernel log window",
    ),
    CheckSpec(
        "gpu.ecc",
        ("nvml",),
        gpu.check_ecc,
        True,
        "no uncorrectable ECC errors; NVML recovery action is none",
    ),
    CheckSpec(
        "gpu.row_remap",
        ("nvml",),
        gpu.check_row_remap,
        True,
        "no pending (reset) or failed (RMA) row remaps",
    ),
    CheckSpec(
        "gpu.nvlink", ("nvml",), gpu.check_nvlink, True, "all NVLinks up, error counters not rising"
    ),
    CheckSpec(
        "gpu.pcie",
        ("nvml",),
        gpu.check_pcie,
        False,
        "PCIe width at maximum (gen under load), replays not rising",
    ),
    CheckSpec(
        "gpu.thermal",
        ("nvml",),
        gpu.check_thermal,
        False,
        "no hardware/thermal/power-brake slowdown, temperature below limit",
    ),
    CheckSpec(
        "gpu.processes",
        ("nvml", "pci"),
        gpu.check_processes,
        True,
        "no stray compute process holds one of the job's GPUs before it starts (prolog only)",
    ),
    CheckSpec(
        "ib.ports",
        ("ib",),
        infiniband.check_ports,
        True,
        "HCA ports ACTIVE/LinkUp at the expected rate, link_downed not rising",
    ),
    CheckSpec(
        "pcie.aer",
        ("aer",),
        aer.check_aer,
        True,
        "PCIe AER error counters of the GPUs and HCAs (and their upstream ports) not rising",
    ),
    CheckSpec(
        "fs.mounts",
        ("mounts",),
        mounts.check_mounts,
        True,
        "required mounts present and answering within the timeout",
    ),
    CheckSpec(
        "host.memory",
        ("host", "kernel"),
        host.check_memory,
        False,
        "free memory above threshold; no uncorrected MCE/EDAC in the kernel log",
    ),
    CheckSpec("host.disk", ("host",), host.check_disk, False, "scratch space above threshold"),
)

BY_NAME = {spec.name: spec for spec in CHECKS}
PROLOG_SET = tuple(spec.name for spec in CHECKS if spec.prolog)
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
