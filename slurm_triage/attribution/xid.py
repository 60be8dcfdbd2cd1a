"""The NVIDIA XID catalogue as data: number → meaning, NVIDIA's resolutions, cause, node action.

Source: NVIDIA Xid Catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
Ampere+ "Catalog" sheet and "XID 144-150 Decode" sheet) as generated on 2025-10-29 into
leptonai/gpud `components/accelerator/nvidia/xid/catalog_generated.go` @4a8de33a. Mnemonics and
the immediate / investigatory resolutions (`immediate`, `investigatory`) are copied from that
file; the XID 154 action names and the 144-150 line layout from NVIDIA's open-gpu-kernel-modules
595.45.04 (`gpu.c` `_gpuRecoveryActionName`, gpud `kmsg.go`). Cross-checked with DCGM's
always-fail set {48, 74, 79, 95, 119, 120, 140} and k8s-device-plugin's application skip list;
summarised in shared/reference/signatures.md §1.2. The catalogue grows with drivers: an XID
missing here is `UNKNOWN_XID` (driver origin, watch), never silently dropped.

How NVIDIA's immediate resolution becomes our node action:
RESTART_APP → none (application) or watch (driver); IGNORE → watch, or nothing for a side
effect; RESET_GPU → drain and reset; RESTART_BM → drain and reboot; CHECK_MECHANICALS → drain
and inspect; CONTACT_SUPPORT as the *immediate* action (rows the catalogue calls "Unused") →
drain and inspect (a person opens the case; not an automatic RMA); WORKFLOW_* and XID_154 →
read from the workflow or the line.

`decisive` marks an XID that by itself explains a job's death and makes the node suspect
(the taxonomy's rule 1: it beats the symptoms it causes). Application XIDs (13, 31, 43, 68, 69,
137) are never node faults: they point at the job's own CUDA code. Side effects (45 "preemptive
cleanup, due to previous errors", 63 "remapping event", 154 back to None) are never the cause:
the XID that caused them is.
"""

from __future__ import annotations

import re
from dataclasses import replace
from enum import StrEnum

from slurm_triage.frozen import Frozen
from slurm_triage.taxonomy import Cause, NodeAction

CATALOGUE_VERSION = "NVIDIA Xid Catalog, generated 2025-10-29 (leptonai/gpud @4a8de33a)"


class Origin(StrEnum):
    """Where an XID usually comes from (our reading of NVIDIA's description and bucket)."""

    HARDWARE = "hardware"
    DRIVER = "driver"
    APP = "app"
    SIDE_EFFECT = "side_effect"
    UNKNOWN = "unknown"


class XidInfo(Frozen):
    """One catalogue row. `precedence` orders hardware causes on one node (higher wins);
    `immediate` and `investigatory` are NVIDIA's resolution buckets, verbatim."""

    number: int
    mnemonic: str
    meaning: str
    origin: Origin
    cause: Cause
    node_action: NodeAction
    decisive: bool
    precedence: int = 0
    immediate: str = ""
    investigatory: str = ""

    def drains_node(self) -> bool:
        """This XID takes the node out of service now: node-fatal for every job on it."""
        return self.node_action.drains_node


_HW, _DRV, _APP, _SIDE = Origin.HARDWARE, Origin.DRIVER, Origin.APP, Origin.SIDE_EFFECT
_NONE, _WATCH, _RESET = NodeAction.NONE, NodeAction.WATCH, NodeAction.RESET_GPU
_DRESET, _DREBOOT = NodeAction.DRAIN_RESET, NodeAction.DRAIN_REBOOT
_INSPECT = NodeAction.DRAIN_INSPECT
_UA, _MEM, _NVL, _DRIVER = (
    Cause.GPU_UNAVAILABLE,
    Cause.GPU_MEMORY,
    Cause.GPU_NVLINK,
    Cause.GPU_DRIVER,
)
_USER, _THERM = Cause.CUDA_USER_ERROR, Cause.THERMAL
_CS, _RA, _RG, _IG = "CONTACT_SUPPORT", "RESTART_APP", "RESET_GPU", "IGNORE"
_NVL5 = "WORKFLOW_NVLINK5_ERR"

# number, mnemonic, meaning, NVIDIA immediate, NVIDIA investigatory,
# origin, cause, node action, decisive, precedence
_Row = tuple[int, str, str, str, str, Origin, Cause, NodeAction, bool, int]
_ROWS: tuple[_Row, ...] = (
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", _RA, _CS,
     _DRV, _DRIVER, _WATCH, False, 0),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception", _RA, "WORKFLOW_XID_13",
     _APP, _USER, _NONE, True, 0),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", _RA,
     "WORKFLOW_XID_31", _APP, _USER, _NONE, True, 0),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream", _RA,
     "CHECK_APP/CUDA", _DRV, _DRIVER, _WATCH, False, 0),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "driver firmware error", _IG, _CS,
     _DRV, _DRIVER, _WATCH, False, 0),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing after an app fault",
     _IG, _CS, _APP, _USER, _NONE, False, 0),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "preemptive cleanup, due to previous errors",
     "WORKFLOW_XID_45", "Solo: RESTART_FM; Not Solo: IGNORE (follow other Xid)",
     _SIDE, _USER, _NONE, False, 0),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", _RG, _CS,
     _HW, _DRIVER, _DRESET, True, 40),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit (uncorrectable) ECC error",
     "WORKFLOW_XID_48", "WORKFLOW_XID_48", _HW, _MEM, _DRESET, True, 70),
    (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "auxiliary power is not connected to the GPU",
     "CHECK_MECHANICALS", _CS, _HW, _UA, _INSPECT, True, 60),
    (61, "PMU_BREAKPOINT", "internal micro-controller breakpoint (unused on Ampere+)", _CS, "",
     _HW, _DRIVER, _INSPECT, True, 40),
    (62, "PMU_HALT_ERROR", "internal micro-controller halt", _RG, _CS,
     _HW, _DRIVER, _DRESET, True, 90),
    # A remap is recorded because of an uncorrectable error that has its own XID (48/94/95);
    # a pending remap is NVML's row_remap_pending. IGNORE/IGNORE: never the cause.
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", _IG, _IG,
     _SIDE, _MEM, _WATCH, False, 0),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", _RG, _CS,
     _HW, _MEM, _DRESET, True, 70),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 (video decoder) exception", _RA, _CS,
     _APP, _USER, _NONE, False, 0),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "graphics engine class error", _RA, "CHECK_APP/CUDA",
     _APP, _USER, _NONE, False, 0),
    (74, "NVLINK_ERROR", "NVLink error", "WORKFLOW_NVLINK_ERR", _CS,
     _HW, _NVL, _DRESET, True, 60),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM",
     _CS, _HW, _UA, _DREBOOT, True, 80),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", _IG, _CS,
     _HW, _MEM, _WATCH, False, 0),
    (93, "INFOROM_ERASE_LIMIT_EXCEEDED", "non-fatal violation of provisioned InfoROM wear limit",
     _IG, _CS, _HW, _MEM, _WATCH, False, 0),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "contained uncorrectable memory error", _RA,
     "IGNORE (sympathetic)", _HW, _MEM, _RESET, True, 70),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained uncorrectable memory error", _RG,
     "IGNORE (sympathetic)", _HW, _MEM, _DRESET, True, 70),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context switch timeout", _RG, _CS,
     _DRV, _DRIVER, _DRESET, True, 40),
    (110, "SEC_FAULT_ERROR", "security fault", _RG, "INVESTIGATE_SW",
     _DRV, _DRIVER, _DRESET, True, 40),
    (119, "GSP_RPC_TIMEOUT", "timeout waiting for the GSP firmware", _RG, "INVESTIGATE_SW",
     _DRV, _DRIVER, _DRESET, True, 90),
    (120, "GSP_ERROR", "GSP firmware error", _RG, "INVESTIGATE_SW",
     _DRV, _DRIVER, _DRESET, True, 90),
    (121, "C2C_ERROR", "chip-to-chip link error", _IG, _CS, _HW, _NVL, _WATCH, False, 0),
    (122, "SPI_PMU_RPC_READ_FAIL", "SPI flash read failure (unused on Ampere+)", _CS, "",
     _HW, _DRIVER, _INSPECT, True, 40),
    (123, "SPI_PMU_RPC_WRITE_FAIL", "SPI flash write failure (unused on Ampere+)", _CS, "",
     _HW, _DRIVER, _INSPECT, True, 40),
    (124, "SPI_PMU_RPC_ERASE_FAIL", "SPI flash erase failure (unused on Ampere+)", _CS, "",
     _HW, _DRIVER, _INSPECT, True, 40),
    (125, "INFOROM_FS_ERROR", "InfoROM file system error (unused on Ampere+)", _CS, "",
     _HW, _DRIVER, _INSPECT, True, 40),
    (136, "ALI_TRAINING_FAIL", "NVLink link training failed", _RG, "INVESTIGATE_LINK_SI",
     _HW, _NVL, _DRESET, True, 60),
    (137, "NVLINK_PRIV_ERR", "NVLink privilege error", _IG, "XID_137_FLOW",
     _APP, _USER, _NONE, False, 0),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC unrecovered error", _RG, _CS,
     _HW, _MEM, _DRESET, True, 70),
    (143, "GPU_INIT_ERROR", "GPU initialisation error", _RG, _CS, _HW, _UA, _DRESET, True, 60),
    (144, "NVLINK_SAW_ERROR", "NVLink SAW error", _NVL5, _NVL5, _HW, _NVL, _WATCH, False, 0),
    (145, "NVLINK_RLW_ERROR", "NVLink RLW error", _NVL5, _NVL5, _HW, _NVL, _WATCH, False, 0),
    (146, "NVLINK_TLW_ERROR", "NVLink TLW error", _NVL5, _NVL5, _HW, _NVL, _WATCH, False, 0),
    (147, "NVLINK_TREX_ERROR", "NVLink TREX error", _NVL5, _NVL5, _HW, _NVL, _WATCH, False, 0),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink NVLPW_CTRL error", _NVL5, _NVL5,
     _HW, _NVL, _WATCH, False, 0),
    (149, "NVLINK_NETIR_ERROR", "NVLink NETIR error", _NVL5, _NVL5, _HW, _NVL, _WATCH, False, 0),
    (150, "NVLINK_MSE_ERROR", "NVLink MSE error", _NVL5, _NVL5, _HW, _NVL, _WATCH, False, 0),
    # The recovery action comes from the line (see lookup); without it we only watch.
    (154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", "XID_154",
     "N/A Informational only regarding another Xid", _SIDE, _DRIVER, _WATCH, False, 10),
    (155, "NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", _RG, "INVESTIGATE_SW_USER",
     _DRV, _NVL, _DRESET, True, 50),
    (156, "RESOURCE_RETIREMENT_EVENT", "resource retirement event", _RG, _IG,
     _HW, _MEM, _RESET, False, 0),
    # IGNORE now, CONTACT_SUPPORT later: the job is not killed by it, so it is not decisive
    # and the node is not drained; the health check warns so that someone opens the case.
    (157, "RESOURCE_RETIREMENT_FAILURE", "resource retirement failure", _IG, _CS,
     _HW, _MEM, _WATCH, False, 0),
    (158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", _RG, _CS, _HW, _DRIVER, _DRESET, True, 40),
    (162, "PSHC_REENGAGED", "power smoothing circuitry capability re-engaged", "", "",
     _HW, _THERM, _WATCH, False, 0),
    (163, "PSHC_DISENGAGED", "power smoothing circuitry capability disengaged", "", "",
     _HW, _THERM, _WATCH, False, 0),
    (164, "PSHC_LOW_LIFETIME", "power smoothing circuitry low lifetime reached", "", "",
     _HW, _THERM, _WATCH, False, 0),
    (165, "PSHC_ZERO_LIFETIME", "power smoothing circuitry lifetime exhausted", "", "",
     _HW, _THERM, _WATCH, False, 0),
    (167, "PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", "", "", _HW, Cause.PCIE, _DRESET, True, 50),
    (169, "SEC2_HALT_ERROR", "internal micro-controller (SEC2) halt", "", "",
     _DRV, _DRIVER, _DRESET, True, 40),
    (171, "UNCORRECTABLE_DRAM_ERROR", "uncorrectable DRAM error (XID 48 detail)", "", "",
     _HW, _MEM, _DRESET, True, 70),
    (172, "UNCORRECTABLE_SRAM_ERROR", "uncorrectable SRAM error (XID 48 detail)", "", "",
     _HW, _MEM, _DRESET, True, 70),
)  # fmt: skip

XID_CATALOGUE: dict[int, XidInfo] = {
    r[0]: XidInfo(r[0], r[1], r[2], r[5], r[6], r[7], r[8], r[9], r[3], r[4]) for r in _ROWS
}
APPLICATION_XIDS = frozenset(n for n, row in XID_CATALOGUE.items() if row.origin is _APP)
# What a job can make the driver report as often as it likes: the application XIDs and what
# follows them (45, the channel's teardown): node action none. Kept apart from the rest
# wherever events are bounded, so that a storm of them cannot push out a node-fatal XID.
JOB_MADE_XIDS = frozenset(n for n, row in XID_CATALOGUE.items() if row.node_action is _NONE)

UNKNOWN_XID = XidInfo(
    0, "UNKNOWN", "XID not in this catalogue", Origin.UNKNOWN, _DRIVER, _WATCH, False, 0
)

# The kernel line's own head, when the caller passes the whole line rather than its rest.
_XID_HEAD = re.compile(r"^NVRM: Xid \([^)]*\): \d+,\s*")
# NVLink5 (144-150): `<UNIT> Fatal|Nonfatal XC0|XC1 i<n> Link <n> (<intrinfo> <errorstatus> ...)`
# after the optional `pid=..., name=..., ` the driver puts in front of every XID text.
_NVLINK5 = re.compile(
    r"^(?:pid=[^,]*, name=.*?, )?(?P<unit>[A-Z][A-Z0-9_]*(?:/[A-Z][A-Z0-9_]*)*) "
    r"(?P<severity>Fatal|Nonfatal) XC[01] i\d+ Link -?\d+ \(0x[0-9a-fA-F]+"
)
# XID 154: `GPU recovery action changed from 0x%x (%s) to 0x%x (%s)` (gpu.c).
_RECOVERY = re.compile(
    r"^(?:pid=[^,]*, name=.*?, )?GPU recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) "
    r"to 0x(?P<code>[0-9a-fA-F]+) \((?P<name>[^)]*)\)"
)
# nvmlDeviceGpuRecoveryAction_t / NV2080_CTRL_GPU_RECOVERY_ACTION_*. Names 0-5 are the
# driver's (gpu.c `_gpuRecoveryActionName`, 595.45.04); 6 and 7 exist in NVML 13
# (NVML_GPU_RECOVERY_ACTION_BUS_RESET / _SYSTEM_REBOOT) before any driver prints them, so
# they are named after NVML and also recognised by the words of their name.
RECOVERY_ACTIONS: dict[int, tuple[str, NodeAction]] = {
    0: ("None", _NONE),
    1: ("GPU Reset Required", _DRESET),
    2: ("Node Reboot Required", _DREBOOT),
    3: ("Drain P2P", _DRESET),
    4: ("Drain and Reset", _DRESET),
    5: ("Recover IMEX Domain", _WATCH),
    6: ("Bus Reset Required", _DRESET),
    7: ("System Reboot Required", _DREBOOT),
}
_RECOVERY_BY_NAME = {name: action for name, action in RECOVERY_ACTIONS.values()}


def names_recovery_action(text: str) -> bool:
    """Whether an XID 154's line (or the text after `154, `) names the new recovery action:
    the kernel's does; an NVML event carries only the number."""
    return _RECOVERY.match(_XID_HEAD.sub("", text, count=1)) is not None


def _recovery_action(code: int, name: str) -> NodeAction:
    """The node action of a recovery action the driver named; a code or name this catalogue
    does not know still asks for a reboot or a reset when its name says so."""
    if code in RECOVERY_ACTIONS:
        return RECOVERY_ACTIONS[code][1]
    if name in _RECOVERY_BY_NAME:
        return _RECOVERY_BY_NAME[name]
    words = name.lower()
    if "reboot" in words:
        return _DREBOOT
    return _DRESET if "reset" in words else _WATCH


def lookup(number: int, text: str = "") -> XidInfo:
    """The catalogue row for XID `number`, refined by its kernel line (the whole line or
    the text after `NNN, `).

    NVLink5 XIDs 144-150 are decisive (drain and reset) only when the line says `Fatal`;
    `Nonfatal` ones and lines that do not parse stay watch-only. XID 154 takes its node
    action from the new recovery action; back to None it is nothing.
    """
    row = XID_CATALOGUE.get(number)
    if row is None:
        return replace(UNKNOWN_XID, number=number)
    text = _XID_HEAD.sub("", text, count=1)
    if 144 <= number <= 150:
        found = _NVLINK5.match(text)
        if found and found.group("severity") == "Fatal":
            return replace(row, decisive=True, node_action=_DRESET, precedence=60)
        return row
    if number == 154 and (found := _RECOVERY.match(text)):
        action = _recovery_action(int(found.group("code"), 16), found.group("name"))
        decisive = action in (_DRESET, _DREBOOT)
        return replace(row, node_action=action, decisive=decisive)
    return row
