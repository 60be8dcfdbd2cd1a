"""Pure evaluation of the `gpu.*` checks over NVML facts (see nvml_facts.py for the reading).

Thresholds and meanings follow shared/reference/signatures.md §2 (NVML): GpuIsLost and
ResetRequired mean drain now; an uncorrectable ECC error or a failed row remap is high
severity; a pending remap lets running jobs finish (drain, reset when idle); NotSupported
is "not applicable" (SKIPPED), never OK or FAIL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurm_triage.config import HealthConfig
from slurm_triage.health_checks.counter_deltas import judged_against
from slurm_triage.health_checks.nvml_facts import GpuFacts, NvmlFacts
from slurm_triage.health_checks.result import (
    Action,
    CheckResult,
    Severity,
    fail,
    ok,
    skipped,
    unknown,
    warn,
)

HIGH, LOW = Severity.HIGH, Severity.LOW
# NVML init errors that mean the node cannot run GPU jobs (signatures.md §2.1).
_INIT_FAILURES = {
    "NVMLError_LibraryNotFound": "NVML library not found (driver userspace missing)",
    "NVMLError_DriverNotLoaded": "NVIDIA kernel driver not loaded",
    "NVMLError_LibRmVersionMismatch": "NVML library and kernel driver versions differ (reboot)",
    "NVMLError_NoPermission": "no permission to talk to the NVIDIA driver",
}
# nvmlDeviceGpuRecoveryAction_t (signatures.md §2.5) -> what the node needs.
_RECOVERY = {
    1: ("GPU reset required", Action.RESET_GPU),
    2: ("node reboot required", Action.REBOOT),
    3: ("drain peer-to-peer traffic", Action.DRAIN_NOW),
    4: ("drain and reset", Action.DRAIN_NOW),
    5: ("recover the IMEX domain", Action.DRAIN_NOW),
    6: ("PCIe bus reset required", Action.RESET_GPU),
    7: ("system reboot required", Action.REBOOT),
}
HW_SLOWDOWN_BITS = {0x8: "HwSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown"}


def _label(gpu: GpuFacts, pci_bus_ids: Sequence[str]) -> str:
    # A lost GPU has no NVML handle; NVML enumerates in PCI order, so sysfs names it.
    bus = gpu.bus_id or (
        _nvml_form(pci_bus_ids[gpu.index]) if gpu.index < len(pci_bus_ids) else "?"
    )
    return f"GPU{gpu.index} {bus}"


def _nvml_form(sysfs_bdf: str) -> str:
    """sysfs `0000:5d:00.0` -> NVML's `00000000:5D:00.0`, so reasons read the same."""
    domain, rest = sysfs_bdf.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def nvml_unusable(check: str, facts: NvmlFacts) -> CheckResult | None:
    if facts.init_error is None:
        return None
    return unknown(check, f"NVML unavailable: {facts.init_error}", error=facts.init_error)


def check_count(
    facts: NvmlFacts, pci_bus_ids: Sequence[str], config: HealthConfig, **_: Any
) -> CheckResult:
    """The expected GPUs are visible to NVML and on the PCI bus; NVML init works."""
    name = "gpu.count"
    if config.expected_gpus == 0:
        return skipped(name, "no GPUs expected on this node (health.expected_gpus = 0)")
    if facts.init_error:
        reason = _INIT_FAILURES.get(facts.init_error, f"NVML init failed: {facts.init_error}")
        return fail(
            name, reason, HIGH, Action.DRAIN_NOW, error=facts.init_error, code=facts.init_error_code
        )
    seen, on_bus = len(facts.gpus), len(pci_bus_ids)
    evidence = {"nvml": seen, "pci": on_bus, "expected": config.expected_gpus}
    if seen < config.expected_gpus:
        return fail(
            name,
            f"{seen} of {config.expected_gpus} GPUs visible to NVML",
            HIGH,
            Action.DRAIN_NOW,
            **evidence,
        )
    if on_bus and on_bus < config.expected_gpus:
        return fail(
            name,
            f"{on_bus} of {config.expected_gpus} GPUs on the PCI bus",
            HIGH,
            Action.DRAIN_NOW,
            **evidence,
        )
    if on_bus > seen:
        return fail(
            name,
            f"{on_bus - seen} GPU(s) on the PCI bus invisible to the driver",
            HIGH,
            Action.DRAIN_NOW,
            **evidence,
        )
    return ok(name, f"{seen} GPUs", **evidence)


def check_lost(facts: NvmlFacts, pci_bus_ids: Sequence[str], **_: Any) -> CheckResult:
    """No device answers GPU-is-lost or reset-required."""
    name = "gpu.lost"
    if (early := nvml_unusable(name, facts)) is not None:
        return early
    for gpu in facts.gpus:
        if gpu.is_lost():
            return fail(
                name,
                f"{_label(gpu, pci_bus_ids)} GPU is lost (fell off the bus)",
                HIGH,
                Action.REBOOT,
                gpu=gpu.index,
                error=gpu.error,
            )
        if gpu.requires_reset():
            return fail(
                name,
                f"{_label(gpu, pci_bus_ids)} GPU reset required",
                HIGH,
                Action.RESET_GPU,
                gpu=gpu.index,
                error=gpu.error,
            )
        if gpu.is_unusable():
            return fail(
                name,
                f"{_label(gpu, pci_bus_ids)} unusable: {gpu.error}",
                HIGH,
                Action.DRAIN_NOW,
                gpu=gpu.index,
                error=gpu.error,
            )
    return ok(name, f"{len(facts.gpus)} GPUs answer")


def usable_gpus(facts: NvmlFacts) -> list[GpuFacts]:
    return [g for g in facts.gpus if not g.is_unusable()]


def check_ecc(facts: NvmlFacts, previous: Mapping[str, Any], **_: Any) -> CheckResult:
    """No uncorrectable ECC since driver load, no new aggregate ones, no pending retirement,
    and the driver's recovery action (where it has one) is NONE."""
    name = "gpu.ecc"
    if (early := nvml_unusable(name, facts)) is not None:
        return early
    gpus = usable_gpus(facts)
    if all(g.ecc_volatile_uncorrected is None and g.recovery_action is None for g in gpus):
        return skipped(name, "ECC not supported or disabled on these GPUs")
    last = previous.get("ecc_aggregate", {})
    for g in gpus:
        if g.recovery_action in _RECOVERY:
            what, action = _RECOVERY[g.recovery_action]
            return fail(
                name,
                f"{g.label} recovery action: {what}",
                HIGH,
                action,
                gpu=g.index,
                recovery_action=g.recovery_action,
            )
        if g.ecc_volatile_uncorrected:
            return fail(
                name,
                f"{g.label} {g.ecc_volatile_uncorrected} uncorrectable ECC errors",
                HIGH,
                Action.RESET_GPU,
                gpu=g.index,
                volatile=g.ecc_volatile_uncorrected,
            )
        now = g.ecc_aggregate_uncorrected
        before = None if now is None else judged_against(now, _saved_ecc(g, last))
        if now and before is not None and now > before:
            return fail(
                name,
                f"{g.label} uncorrectable ECC count rose {before}->{g.ecc_aggregate_uncorrected}",
                HIGH,
                Action.RESET_GPU,
                gpu=g.index,
            )
        if g.retired_pages_pending:
            return fail(
                name,
                f"{g.label} retired pages pending (reset)",
                LOW,
                Action.RESET_GPU,
                gpu=g.index,
            )
    historic = [g.index for g in gpus if g.ecc_aggregate_uncorrected]
    if historic:
        return warn(name, f"historic uncorrectable ECC errors on GPU(s) {historic}", gpus=historic)
    return ok(name, "no uncorrectable ECC errors")


def _saved_ecc(g: GpuFacts, last: Mapping[str, Any]) -> int | None:
    """The GPU's saved aggregate count: by the GPU itself, so a replacement board (RMA) or a
    GPU that moved to another index after one fell off the bus is not judged against another
    board's count; a state file from before that kept it by NVML index is read by index."""
    saved = last.get(_gpu_key(g), last.get(str(g.index)))
    return saved if isinstance(saved, int) else None


def check_row_remap(facts: NvmlFacts, **_: Any) -> CheckResult:
    """Row remapping (Ampere+): a failed remap is an RMA candidate, a pending one needs a
    reset when the GPU is idle."""
    name = "gpu.row_remap"
    if (early := nvml_unusable(name, facts)) is not None:
        return early
    gpus = [g for g in usable_gpus(facts) if g.remap is not None]
    if not gpus:
        return skipped(name, "row remapping not supported (pre-Ampere, or MIG active)")
    for g in gpus:
        assert g.remap is not None
        if g.remap.qualifies_for_rma():
            return fail(
                name,
                f"{g.label} row remap failure (RMA)",
                HIGH,
                Action.RMA,
                gpu=g.index,
                uncorrected_rows=g.remap.uncorrected,
            )
        if g.remap.requires_reset():
            return fail(
                name,
                f"{g.label} row remap pending (reset GPU)",
                LOW,
                Action.RESET_GPU,
                gpu=g.index,
                uncorrected_rows=g.remap.uncorrected,
            )
    return ok(name, "no pending or failed row remaps")


def check_nvlink(
    facts: NvmlFacts, previous: Mapping[str, Any], config: HealthConfig, **_: Any
) -> CheckResult:
    """No NVLink that should be up is down; error counters did not rise since the last run.

    "Should be up" is not "every link NVML lists": H100 PCIe boards list 18 links of which
    6 are inactive by design, and all 18 without bridges (fake_pynvml.py cites the field
    reports). So links are judged against `health.nvlinks_per_gpu` when set (e.g. 18 on an
    HGX H100), else against the links that were up when the node last passed every check
    (its baseline, kept with the counters); a node without a baseline yet is only warned
    about GPUs with fewer links up than their peers."""
    name = "gpu.nvlink"
    if (early := nvml_unusable(name, facts)) is not None:
        return early
    if config.nvlinks_per_gpu == 0:
        return skipped(name, "NVLink not checked (health.nvlinks_per_gpu = 0)")
    gpus = [g for g in usable_gpus(facts) if g.nvlink_up is not None]
    if not gpus:
        return skipped(name, "no NVLink on these GPUs")
    baseline: Mapping[str, Any] = previous.get(NVLINK_BASELINE_KEY, {})
    for g in gpus:
        if (failure := _links_down(name, g, config.nvlinks_per_gpu, baseline)) is not None:
            return failure
    last = previous.get("nvlink_errors", {})
    for g in gpus:
        before = judged_against(g.nvlink_errors or 0, last.get(str(g.index)))
        if before is not None and (g.nvlink_errors or 0) > before:
            return warn(
                name, f"GPU{g.index} NVLink errors rose {before}->{g.nvlink_errors}", gpu=g.index
            )
    up = {g.index: len(_up_links(g)) for g in gpus}
    if config.nvlinks_per_gpu < 0 and not any(_gpu_key(g) in baseline for g in gpus):
        if len(set(up.values())) > 1:
            fewest = min(up, key=lambda i: up[i])
            return warn(
                name,
                f"GPU{fewest} has {up[fewest]} NVLinks up, its peers up to "
                f"{max(up.values())} (no baseline yet)",
                links_up=up,
            )
        return ok(name, f"{min(up.values())} NVLinks up per GPU (no baseline yet)", links_up=up)
    return ok(name, f"NVLinks up as expected on {len(gpus)} GPUs", links_up=up)


NVLINK_BASELINE_KEY = "nvlink_baseline"


def _up_links(g: GpuFacts) -> list[int]:
    return [link for link, up in enumerate(g.nvlink_up or ()) if up]


def _gpu_key(g: GpuFacts) -> str:
    # The GPU itself, so a replaced board starts a new baseline; its slot if NVML has no UUID.
    return g.uuid or g.bus_id or str(g.index)


def _links_down(
    name: str, g: GpuFacts, expected: int, baseline: Mapping[str, Any]
) -> CheckResult | None:
    up = _up_links(g)
    if expected > 0:
        if len(up) >= expected:
            return None
        down = [link for link in range(len(g.nvlink_up or ())) if link not in up]
        return fail(
            name,
            f"{g.label} {len(up)} of {expected} NVLinks up",
            HIGH,
            Action.RESET_GPU,
            gpu=g.index,
            links_down=down,
        )
    was = baseline.get(_gpu_key(g))
    if not isinstance(was, list):
        return None
    down = [link for link in was if link not in up]
    if not down:
        return None
    return fail(
        name,
        f"{g.label} NVLink {down[0]} down (up at baseline)",
        HIGH,
        Action.RESET_GPU,
        gpu=g.index,
        links_down=down,
    )


def nvlink_baseline(
    facts: NvmlFacts, previous: Mapping[str, Any], node_healthy: bool
) -> dict[str, list[int]]:
    """The baseline to keep: the previous one, plus each GPU's links up now when the node
    passed every check this run (links only join it; see docs/health-checks.md to reset)."""
    kept: dict[str, list[int]] = dict(previous.get(NVLINK_BASELINE_KEY, {}))
    if not node_healthy or facts.init_error is not None:
        return kept
    for g in usable_gpus(facts):
        if g.nvlink_up is not None:
            key = _gpu_key(g)
            kept[key] = sorted(set(kept.get(key, [])) | set(_up_links(g)))
    return kept


def check_pcie(facts: NvmlFacts, previous: Mapping[str, Any], **_: Any) -> CheckResult:
    """Link width at its maximum; generation only judged under load (idle GPUs downclock the
    link to save power); replay counter not rising."""
    name = "gpu.pcie"
    if (early := nvml_unusable(name, facts)) is not None:
        return early
    gpus = [g for g in usable_gpus(facts) if g.pcie_width is not None]
    if not gpus:
        return skipped(name, "PCIe link information not available")
    last = previous.get("pcie_replays", {})
    for g in gpus:
        assert g.pcie_width is not None
        if g.pcie_width.below_maximum():
            return fail(
                name,
                f"{g.label} PCIe x{g.pcie_width.current} below x{g.pcie_width.maximum}",
                LOW,
                Action.DRAIN,
                gpu=g.index,
            )
        busy = (g.utilization_pct or 0) >= 50
        if busy and g.pcie_gen and g.pcie_gen.below_maximum():
            return fail(
                name,
                f"{g.label} PCIe gen{g.pcie_gen.current} below gen{g.pcie_gen.maximum} under load",
                LOW,
                Action.DRAIN,
                gpu=g.index,
            )
        before = judged_against(g.pcie_replays or 0, last.get(str(g.index)))
        if before is not None and (g.pcie_replays or 0) > before:
            return warn(name, f"GPU{g.index} PCIe replays rose {before}->{g.pcie_replays}")
    return ok(name, "PCIe width at maximum (generation only judged under load)")


def check_thermal(facts: NvmlFacts, config: HealthConfig, **_: Any) -> CheckResult:
    """No hardware slowdown (thermal, power brake) and temperature below the limit."""
    name = "gpu.thermal"
    if (early := nvml_unusable(name, facts)) is not None:
        return early
    for g in usable_gpus(facts):
        slow = [n for bit, n in HW_SLOWDOWN_BITS.items() if (g.clock_reasons or 0) & bit]
        if slow:
            return fail(
                name,
                f"{g.label} {'+'.join(slow)}",
                LOW,
                Action.DRAIN,
                gpu=g.index,
                clock_reasons=g.clock_reasons,
                temperature_c=g.temperature_c,
            )
        if g.temperature_c is not None and g.temperature_c > config.max_temperature_c:
            return fail(
                name,
                f"{g.label} at {g.temperature_c} C",
                LOW,
                Action.DRAIN,
                gpu=g.index,
                temperature_c=g.temperature_c,
            )
    return ok(name, "no hardware slowdown")


# Each group of counters and the check that judges its rises: the runner saves a group only
# when that check ran, so that no other run swallows a rise before it is judged.
COUNTER_CHECKS = {
    "ecc_aggregate": "gpu.ecc",
    "nvlink_errors": "gpu.nvlink",
    "pcie_replays": "gpu.pcie",
}


def counters(facts: NvmlFacts) -> dict[str, dict[str, int]]:
    """The cumulative counters to remember for the next run's deltas (COUNTER_CHECKS): the
    ECC aggregate count by the GPU itself (`_saved_ecc`), the others by NVML index."""
    out: dict[str, dict[str, int]] = {"ecc_aggregate": {}, "nvlink_errors": {}, "pcie_replays": {}}
    for g in usable_gpus(facts):
        for key, gpu_key, value in (
            ("ecc_aggregate", _gpu_key(g), g.ecc_aggregate_uncorrected),
            ("nvlink_errors", str(g.index), g.nvlink_errors),
            ("pcie_replays", str(g.index), g.pcie_replays),
        ):
            if value is not None:
                out[key][gpu_key] = int(value)
    return out


def saved_counters(facts: NvmlFacts, previous: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Each group of `counters` merged over the saved one (a GPU not read this run keeps its
    count). The ECC count of a GPU now kept by its UUID drops its count kept by index in an
    older state file: left there, a board that later takes that index would be judged
    against it."""
    merged: dict[str, dict[str, int]] = {}
    for key, values in counters(facts).items():
        merged[key] = {**previous.get(key, {}), **values}
    ecc = merged["ecc_aggregate"]
    for g in usable_gpus(facts):
        if g.ecc_aggregate_uncorrected is not None and _gpu_key(g) != str(g.index):
            ecc.pop(str(g.index), None)
    return merged
