"""`pcie.aer`: PCIe Advanced Error Reporting counters of the GPUs and HCAs not rising.

The kernel counts the AER errors each device reported since it was enumerated (Linux 4.19+,
drivers/pci/pcie/aer.c `aer_stats_dev_attr`; Documentation/ABI/testing/
sysfs-bus-pci-devices-aer_stats) in `/sys/bus/pci/devices/<bdf>/aer_dev_correctable`,
`aer_dev_nonfatal` and `aer_dev_fatal`: one `<error name> <count>` line per named status bit
(short names such as `RxErr`, `CmpltTO`, `SDES` today; `Receiver Error`, `Completion Timeout`
on the kernels the ABI document shows, names with spaces), `<array>_bit[<n>] <count>` for
unnamed bits that counted, then `TOTAL_ERR_COR|TOTAL_ERR_NONFATAL|TOTAL_ERR_FATAL <count>`.
Errors an endpoint causes may be counted at its link partner instead (the ABI document), so
each device's upstream port (its parent in /sys/devices) is read too.

Read for the NVIDIA GPUs on the bus and the HCAs under /sys/class/infiniband (physical
functions: VFs have no AER of their own). The totals are remembered per node between runs;
a rise is evidence: fatal → the node is drained now (high), non-fatal (uncorrectable, the
link survived) → drained after its jobs (low), correctable → a warning (a trend to watch).
A device without the files (no AER capability, AER off, an older kernel) is not judged;
uncorrectable errors counted before the first run, or since a reboot (totals below the saved
ones: counter_deltas), only warn: when they happened is unknown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_triage.health_checks.counter_deltas import judged_against
from slurm_triage.health_checks.result import Action, CheckResult, Severity, fail, ok, skipped, warn

KINDS = ("fatal", "nonfatal", "correctable")  # most severe first
_FILES = {
    "correctable": ("aer_dev_correctable", "TOTAL_ERR_COR"),
    "nonfatal": ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    "fatal": ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
}
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
COUNTERS_KEY = "aer"


@dataclass(frozen=True)
class AerDevice:
    """One PCI function's AER totals (`kind -> count`) and its non-zero error names."""

    bdf: str
    role: str  # "GPU", "HCA mlx5_0", "upstream of 0000:18:00.0"
    totals: Mapping[str, int]
    errors: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def parse_aer_stats(text: str, total_name: str) -> tuple[int | None, dict[str, int]]:
    """The total and the non-zero per-error counts of one aer_dev_* file."""
    total: int | None = None
    errors: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.strip().rpartition(" ")
        if not name or not value.isdigit():
            continue
        if name == total_name:
            total = int(value)
        elif int(value):
            errors[name] = int(value)
    return total, errors


def _read_device(path: Path, bdf: str, role: str) -> AerDevice | None:
    totals: dict[str, int] = {}
    errors: dict[str, dict[str, int]] = {}
    for kind, (name, total_name) in _FILES.items():
        try:
            text = (path / name).read_text()
        except OSError:
            continue
        total, named = parse_aer_stats(text, total_name)
        if total is not None:
            totals[kind] = total
            if named:
                errors[kind] = named
    return AerDevice(bdf, role, totals, errors) if totals else None


def _hcas(sysfs: Path) -> list[tuple[str, str]]:
    found = []
    for dev in sorted((sysfs / "class/infiniband").glob("*")):
        pci = dev / "device"
        if pci.exists() and not (pci / "physfn").exists():
            found.append((os.path.basename(os.path.realpath(pci)), f"HCA {dev.name}"))
    return found


def read_aer(sysfs_root: str, gpu_bdfs: Sequence[str]) -> tuple[AerDevice, ...]:
    """AER totals of the GPUs (`dddd:bb:dd.f`), the HCAs and each one's upstream port."""
    sysfs = Path(sysfs_root)
    wanted = [(bdf.lower(), "GPU") for bdf in gpu_bdfs] + _hcas(sysfs)
    devices: dict[str, AerDevice] = {}
    for bdf, role in wanted:
        path = Path(os.path.realpath(sysfs / "bus/pci/devices" / bdf))
        found = _read_device(path, bdf, role)
        if found is None or bdf in devices:
            continue
        devices[bdf] = found
        parent = path.parent
        if _BDF.match(parent.name) and parent.name not in devices:
            upstream = _read_device(parent, parent.name, f"upstream of {bdf}")
            if upstream is not None:
                devices[parent.name] = upstream
    return tuple(devices.values())


def counters(devices: Sequence[AerDevice]) -> dict[str, dict[str, int]]:
    return {d.bdf: dict(d.totals) for d in devices}


def _named(device: AerDevice, kind: str) -> str:
    names = device.errors.get(kind, {})
    return ", ".join(f"{name} {count}" for name, count in sorted(names.items()))


def check_aer(devices: Sequence[AerDevice], previous: Mapping[str, Any], **_: Any) -> CheckResult:
    name = "pcie.aer"
    if not devices:
        return skipped(name, "no AER counters (no AER capability or kernel before 4.19)")
    last = previous.get(COUNTERS_KEY, {})
    worst: CheckResult | None = None
    for kind in KINDS:
        for d in devices:
            now, saved = d.totals.get(kind), last.get(d.bdf, {}).get(kind)
            if now is None:
                continue
            before = judged_against(now, saved)
            if before is not None and now <= before:
                continue
            what = f"{d.role} {d.bdf} {kind} AER errors"
            detail = _named(d, kind)
            evidence = {"pci_bus_id": d.bdf, "kind": kind, "count": now, "errors": detail}
            if before is None:  # first sight: since boot, when unknown
                if kind != "correctable" and now and worst is None:
                    worst = warn(name, f"{what}: {now} since boot ({detail})", **evidence)
                continue
            rose = f"{what} rose {before}->{now} ({detail})"
            if kind == "fatal":
                return fail(name, rose, Severity.HIGH, Action.DRAIN_NOW, **evidence)
            if kind == "nonfatal":
                return fail(name, rose, Severity.LOW, Action.DRAIN, **evidence)
            worst = worst or warn(name, rose, **evidence)
    return worst or ok(
        name, f"{len(devices)} PCIe function(s), AER counters not rising", devices=len(devices)
    )
