"""The NVIDIA XID catalogue as data: number → meaning, origin, cause id and node action.

Source: NVIDIA Xid Catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
Ampere+ sheet, as generated into leptonai/gpud `catalog_generated.go` @4a8de33a on
2025-10-29), cross-checked with DCGM's always-fail set {48, 74, 79, 95, 119, 120, 140} and
k8s-device-plugin's application skip list {13, 31, 43, 45, 68, 109}; summarised in
shared/reference/signatures.md §1.2. Transcribed 2025-11. The catalogue grows with drivers:
an XID missing here is `UNKNOWN_XID` (driver origin, watch), never silently dropped.

`decisive` marks an XID that by itself explains a job's death and makes the node suspect
(the taxonomy's rule 1: it beats the symptoms it causes). Application XIDs (13, 31, 43, 45,
68, 109) are never node faults: they point at the job's own CUDA code. Note: TAXONOMY.md lists
109 under gpu_driver too; we follow NVIDIA and k8s-device-plugin in treating it as an
application XID, so one context-switch timeout never drains a node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum

from slurm_triage.taxonomy import Cause


class Origin(StrEnum):
    """Where an XID usually comes from (our reading of NVIDIA's description and bucket)."""

    HARDWARE = "hardware"
    DRIVER = "driver"
    APP = "app"
    SIDE_EFFECT = "side_effect"
    UNKNOWN = "unknown"


class NodeAction(StrEnum):
    """What the node needs after this XID (signatures.md's recommended node action)."""

    NONE = "none"
    WATCH = "watch"
    RESET_GPU = "reset_gpu"
    DRAIN_RESET = "drain_reset"
    DRAIN_REBOOT = "drain_reboot"
    DRAIN_RMA = "drain_rma"
    DRAIN_INSPECT = "drain_inspect"


@dataclass(frozen=True)
class XidInfo:
    """One catalogue row. `precedence` orders hardware causes on one node (higher wins)."""

    number: int
    mnemonic: str
    meaning: str
    origin: Origin
    cause: Cause
    node_action: NodeAction
    decisive: bool
    precedence: int = 0


_HW, _DRV, _APP, _SIDE = Origin.HARDWARE, Origin.DRIVER, Origin.APP, Origin.SIDE_EFFECT
_NONE, _WATCH, _RESET = NodeAction.NONE, NodeAction.WATCH, NodeAction.RESET_GPU
_DRESET, _DREBOOT, _RMA = NodeAction.DRAIN_RESET, NodeAction.DRAIN_REBOOT, NodeAction.DRAIN_RMA
_UA, _MEM, _NVL, _DRIVER = (
    Cause.GPU_UNAVAILABLE,
    Cause.GPU_MEMORY,
    Cause.GPU_NVLINK,
    Cause.GPU_DRIVER,
)
_USER, _THERM = Cause.CUDA_USER_ERROR, Cause.THERMAL

# (number, mnemonic, meaning, origin, cause, node action, decisive, precedence)
_ROWS: tuple[tuple[int, str, str, Origin, Cause, NodeAction, bool, int], ...] = (
    (
        8,
        "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
        "GPU stopped processing",
        _DRV,
        _DRIVER,
        _WATCH,
        False,
        0,
    ),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception", _APP, _USER, _NONE, True, 0),
    (
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault",
        _APP,
        _USER,
        _NONE,
        True,
        0,
    ),
    (
        32,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        "invalid or corrupted push buffer stream",
        _DRV,
        _DRIVER,
        _WATCH,
        False,
        0,
    ),
    (38, "FECS_ERR_WATCHDOG_TIMEOUT", "driver firmware error", _DRV, _DRIVER, _WATCH, False, 0),
    (
        43,
        "RESETCHANNEL_VERIF_ERROR",
        "GPU stopped processing after an app fault",
        _APP,
        _USER,
        _NONE,
        False,
        0,
    ),
    (
        45,
        "PREEMPTIVE_REMOVAL",
        "preemptive cleanup after earlier errors",
        _SIDE,
        _USER,
        _NONE,
        False,
        0,
    ),
    (46, "GPU_TIMEOUT_ERROR", "GPU stopped processing", _HW, _DRIVER, _DRESET, True, 40),
    (
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "double-bit (uncorrectable) ECC error",
        _HW,
        _MEM,
        _DRESET,
        True,
        70,
    ),
    (
        54,
        "AUX_POWER_NOT_CONNECTED",
        "auxiliary power not connected",
        _HW,
        _UA,
        NodeAction.DRAIN_INSPECT,
        True,
        60,
    ),
    (61, "PMU_BREAKPOINT", "internal micro-controller breakpoint", _HW, _DRIVER, _DRESET, True, 40),
    (62, "PMU_HALT_ERROR", "internal micro-controller halt", _HW, _DRIVER, _DRESET, True, 90),
    (
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "row remap / page retirement recorded",
        _HW,
        _MEM,
        _DRESET,
        True,
        65,
    ),
    (
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "row remap / page retirement failed",
        _HW,
        _MEM,
        _RMA,
        True,
        70,
    ),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "video decoder exception", _APP, _USER, _NONE, False, 0),
    (69, "GR_CLASS_ERROR", "graphics engine class error", _DRV, _DRIVER, _WATCH, False, 0),
    (74, "NVLINK_ERROR", "NVLink error", _HW, _NVL, _DRESET, True, 60),
    (79, "GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", _HW, _UA, _DREBOOT, True, 80),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", _HW, _MEM, _WATCH, False, 0),
    (93, "INFOROM_WEAR_LIMIT", "InfoROM wear-limit violation", _HW, _MEM, _WATCH, False, 0),
    (
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "contained uncorrectable memory error",
        _HW,
        _MEM,
        _RESET,
        True,
        70,
    ),
    (
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "uncontained uncorrectable memory error",
        _HW,
        _MEM,
        _DRESET,
        True,
        70,
    ),
    (109, "CTXSW_TIMEOUT_ERROR", "context switch timeout", _APP, _USER, _NONE, False, 0),
    (110, "SEC_FAULT_ERROR", "security fault", _DRV, _DRIVER, _DRESET, True, 40),
    (
        119,
        "GSP_RPC_TIMEOUT",
        "timeout waiting for the GSP firmware",
        _DRV,
        _DRIVER,
        _DRESET,
        True,
        90,
    ),
    (120, "GSP_ERROR", "GSP firmware error", _DRV, _DRIVER, _DRESET, True, 90),
    (121, "C2C_ERROR", "chip-to-chip link error", _HW, _NVL, _WATCH, False, 0),
    (123, "SPI_PMU_RPC_ERASE_FAIL", "SPI flash erase failure", _HW, _DRIVER, _DRESET, True, 40),
    (136, "ALI_TRAINING_FAIL", "NVLink link training failed", _HW, _NVL, _DRESET, True, 60),
    (137, "NVLINK_PRIV_ERR", "NVLink FLA privilege error", _APP, _USER, _NONE, False, 0),
    (
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "unrecoverable ECC error escape",
        _HW,
        _MEM,
        _DRESET,
        True,
        70,
    ),
    (143, "GPU_INIT_ERROR", "GPU initialisation failure", _HW, _UA, _DRESET, True, 60),
    (
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        "GPU recovery action changed",
        _SIDE,
        _DRIVER,
        _WATCH,
        False,
        10,
    ),
    (
        155,
        "NVLINK_SW_DEFINED_ERROR",
        "NVLink software-defined error",
        _DRV,
        _NVL,
        _DRESET,
        True,
        50,
    ),
    (156, "RESOURCE_RETIREMENT_EVENT", "resource retirement event", _HW, _MEM, _RESET, False, 0),
    (157, "RESOURCE_RETIREMENT_FAILURE", "resource retirement failure", _HW, _MEM, _RMA, True, 65),
    (158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", _HW, _DRIVER, _DRESET, True, 40),
    (
        162,
        "POWER_SMOOTHING_ERROR",
        "power smoothing circuitry error",
        _HW,
        _THERM,
        _WATCH,
        False,
        0,
    ),
    (167, "PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", _HW, Cause.PCIE, _DRESET, True, 50),
    (169, "SEC2_HALT", "SEC2 micro-controller halt", _DRV, _DRIVER, _DRESET, True, 40),
    (
        171,
        "UNCORRECTABLE_DRAM_ERROR",
        "uncorrectable DRAM error (XID 48 detail)",
        _HW,
        _MEM,
        _DRESET,
        True,
        70,
    ),
    (
        172,
        "UNCORRECTABLE_SRAM_ERROR",
        "uncorrectable SRAM error (XID 48 detail)",
        _HW,
        _MEM,
        _DRESET,
        True,
        70,
    ),
)

XID_CATALOGUE: dict[int, XidInfo] = {row[0]: XidInfo(*row) for row in _ROWS}

# Blackwell NVLink5 unit errors: severity is in the line itself (signatures.md §1.3).
for _number in range(144, 151):
    XID_CATALOGUE[_number] = XidInfo(
        _number, "NVLINK5_UNIT_ERROR", "NVLink5 unit error", _HW, _NVL, _WATCH, False, 0
    )

UNKNOWN_XID = XidInfo(
    0, "UNKNOWN", "XID not in this catalogue", Origin.UNKNOWN, _DRIVER, _WATCH, False, 0
)

_NVLINK5_FATAL = re.compile(r"\b(?:Link )?Fatal\b")
_RECOVERY_NONE = re.compile(r"\bto 0x0 \(None\)")


def lookup(number: int, text: str = "") -> XidInfo:
    """The catalogue row for XID `number`, refined by the rest of its kernel line.

    NVLink5 XIDs 144-150 are decisive only when the line says "Fatal" or "Link Fatal";
    XID 154 is decisive when the new recovery action is anything but None.
    """
    row = XID_CATALOGUE.get(number)
    if row is None:
        return replace(UNKNOWN_XID, number=number)
    if 144 <= number <= 150 and _NVLINK5_FATAL.search(text) and "Nonfatal" not in text:
        return replace(row, decisive=True, node_action=_DRESET, precedence=60)
    if number == 154 and text and not _RECOVERY_NONE.search(text):
        return replace(row, decisive=True, node_action=_DRESET)
    return row
