"""Read GPU facts through NVML (nvidia-ml-py's `pynvml`, or the simulated estate's copy).

One pass over every device gathers what all `gpu.*` checks need, so NVML is initialised once
per run. The module object is passed in: the real `pynvml` on GPU nodes, and
`slurm_triage.simulate.fake_pynvml` (the same functions, raising errors of the same names
and codes) where there is no GPU. This module only reads; evaluation lives in the checks.

Nodes run any nvidia-ml-py in pyproject's range, so a name that only newer releases have is
read through `_optional` (simulate/bindings.py lists them): a missing name is a fact of None
or the ABI value from nvml.h, never an AttributeError that fails the whole read.

Errors are judged per call: "not supported here" is a fact of None, "device gone" (lost,
reset required, ...) makes that GPU unusable, and any other NVML error from one call on one
GPU (InsufficientSize, Timeout, NotFound, ...) leaves that one fact None and names the call
in the GPU's `unread`. The GPU's identity (PCI info, UUID) is the exception: a GPU that
cannot say which it is gets the error as its `error`, unusable as a GPU gone is. Only
nvmlInit and nvmlDeviceGetCount failing fail the whole read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

T = TypeVar("T")

# nvml.h field id of the driver's recovery action (driver R570+). nvidia-ml-py names it only
# from 12.570.86; the field id is ABI, so older bindings still ask a newer driver for it, and
# an older driver answers NotSupported in the value's slot.
RECOVERY_ACTION_FIELD = 230
# NVML_NVLINK_MAX_LINKS of the bindings before 13.x; link indices past a GPU's own links
# answer NotSupported, so a larger maximum only costs one call.
NVLINK_MAX_LINKS = 18

# Errors meaning "this feature does not exist here": a fact of None, not a failure.
_NOT_APPLICABLE = (
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVMLError_InvalidArgument",
    "NVMLLibraryMismatchError",
)
# Errors meaning the device itself is unusable.
_DEVICE_GONE = (
    "NVMLError_GpuIsLost",
    "NVMLError_ResetRequired",
    "NVMLError_Unknown",
    "NVMLError_IrqIssue",
    "NVMLError_InsufficientPower",
    "NVMLError_CorruptedInforom",
    "NVMLError_NoPermission",
)


class DeviceGone(Exception):
    """A device call raised an error that makes the device unusable."""

    def __init__(self, name: str, code: int | None) -> None:
        super().__init__(name)
        self.name, self.code = name, code


@dataclass(frozen=True)
class RowRemap:
    """nvmlDeviceGetRemappedRows: rows remapped for correctable and uncorrectable errors,
    whether a remap waits for the next GPU reset, and whether one failed (NVIDIA's A100 GPU
    memory error management: a failed remap makes the GPU an RMA candidate)."""

    corrected: int
    uncorrected: int
    pending: bool
    failed: bool

    def requires_reset(self) -> bool:
        """A remap is pending: it takes effect at the next GPU reset."""
        return self.pending

    def qualifies_for_rma(self) -> bool:
        """A remap failed: the bank has no spare rows left, the GPU is to be replaced."""
        return self.failed


@dataclass(frozen=True)
class PcieLink:
    """A PCIe link property now and at its best (width in lanes, or generation)."""

    current: int
    maximum: int

    def below_maximum(self) -> bool:
        return self.current < self.maximum


@dataclass(frozen=True)
class MigFacts:
    """One MIG device (a compute instance in a GPU instance) of a GPU in MIG mode: its
    index under the parent (nvmlDeviceGetMigDeviceHandleByIndex), the ids that name it,
    and the compute processes on it alone."""

    index: int
    gpu_instance: int | None
    compute_instance: int | None
    processes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class GpuFacts:
    """What NVML said about one GPU. None means the feature is not supported here."""

    index: int
    bus_id: str | None = None
    uuid: str | None = None
    minor: int | None = None  # /dev/nvidia<minor>: the same inside and outside a cgroup
    error: str | None = None  # e.g. "NVMLError_GpuIsLost" when the device is unusable
    error_code: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_pending: bool | None = None
    remap: RowRemap | None = None
    recovery_action: int | None = None
    nvlink_up: tuple[bool, ...] | None = None
    nvlink_errors: int | None = None
    pcie_width: PcieLink | None = None
    pcie_gen: PcieLink | None = None
    pcie_replays: int | None = None
    utilization_pct: int | None = None
    temperature_c: int | None = None
    slowdown_temperature_c: int | None = None
    clock_reasons: int | None = None
    processes: tuple[int, ...] | None = None
    # MIG devices on this GPU: () when MIG is off (or on with none created, which Slurm
    # counts as a whole GPU); None when NVML could not say (a lost GPU, a read error).
    mig: tuple[MigFacts, ...] | None = ()
    # NVML calls that failed with an error meaning neither "not supported" nor "device
    # gone" ("nvmlDeviceGetX: NVMLError_Timeout"): their facts are None, i.e. unknown.
    unread: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How reasons name it: `GPU3 00000000:5D:00.0` (NVML's index and bus id)."""
        return f"GPU{self.index} {self.bus_id or '?'}"

    def is_lost(self) -> bool:
        """NVML answers GPU-is-lost: the GPU fell off the bus (XID 79); a reboot is needed."""
        return self.error == "NVMLError_GpuIsLost"

    def requires_reset(self) -> bool:
        """NVML answers reset-required: the GPU must be reset before it can be used."""
        return self.error == "NVMLError_ResetRequired"

    def is_unusable(self) -> bool:
        """Any device-fatal NVML error (lost, reset required, and the others)."""
        return self.error is not None


@dataclass(frozen=True)
class NvmlFacts:
    """NVML as a whole: an init error (driver missing, version mismatch) or the devices."""

    init_error: str | None
    init_error_code: int | None
    driver_version: str | None
    gpus: tuple[GpuFacts, ...]


def _error_name(exc: BaseException) -> str:
    return type(exc).__name__


def _optional(nv: Any, name: str, default: Any = None) -> Any:
    """A module attribute that older nvidia-ml-py releases lack."""
    return getattr(nv, name, default)


def _call(fn: Callable[..., T], *args: Any, unread: list[str] | None = None) -> T | None:
    """Call one NVML function: NotSupported-like errors give None, device-fatal ones raise.

    Any other NVML error (InsufficientSize when processes appear between pynvml's two
    calls, Timeout, NotFound, OperatingSystem, ...) is about this one call: its fact is None
    and the call is noted in `unread`; without `unread` it raises."""
    try:
        return fn(*args)
    except Exception as exc:
        name = _error_name(exc)
        if name in _NOT_APPLICABLE:
            return None
        if name in _DEVICE_GONE:
            raise DeviceGone(name, getattr(exc, "value", None)) from None
        if unread is None or not name.startswith("NVMLError"):
            raise
        unread.append(f"{getattr(fn, '__name__', 'nvml call')}: {name}")
        return None


def read_nvml(nv: Any) -> NvmlFacts:
    """Initialise NVML, read every device, shut down. Never raises an NVML error."""
    try:
        nv.nvmlInit()
    except Exception as exc:
        return NvmlFacts(_error_name(exc), getattr(exc, "value", None), None, ())
    try:
        driver = _text(_call(nv.nvmlSystemGetDriverVersion, unread=[]))
        count = nv.nvmlDeviceGetCount()
        gpus = tuple(_read_device(nv, index) for index in range(count))
        return NvmlFacts(None, None, driver, gpus)
    except DeviceGone as exc:
        return NvmlFacts(exc.name, exc.code, None, ())
    except Exception as exc:
        return NvmlFacts(_error_name(exc), getattr(exc, "value", None), None, ())
    finally:
        with contextlib.suppress(Exception):  # shutdown trouble must not hide what we read
            nv.nvmlShutdown()


def read_gpu_processes(nv: Any) -> dict[str, tuple[int, ...] | None]:
    """Each GPU's compute processes (pids) by its bus id as NVML writes it, and each MIG
    device's by `mig_key`: what changes at
    every job's start and end, so the Prolog reads it for each job even where the rest of
    NVML's facts were read earlier (health_checks.fact_cache). Raises what NVML raises (the
    run makes that gpu.processes' UNKNOWN reason); a GPU that answers nothing is None."""
    nv.nvmlInit()
    try:
        found: dict[str, tuple[int, ...] | None] = {}
        for index in range(nv.nvmlDeviceGetCount()):
            handle = _call(nv.nvmlDeviceGetHandleByIndex, index)
            bus_id = _bus_id(nv, handle, []) if handle is not None else None
            if bus_id is not None:
                found[bus_id] = _pids(nv, handle, [])
                for mig in _mig_facts(nv, handle, []) or ():
                    found[mig_key(bus_id, mig)] = mig.processes
        return found
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_device(nv: Any, index: int) -> GpuFacts:
    bus_id: str | None = None
    unread: list[str] = []
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:  # no handle, no facts: NVML cannot open this GPU at all
        if not _error_name(exc).startswith("NVML"):
            raise
        return GpuFacts(
            index=index, error=_error_name(exc), error_code=getattr(exc, "value", None), mig=None
        )
    try:
        bus_id = _bus_id(nv, handle, None)
        uuid = _text(_call(nv.nvmlDeviceGetUUID, handle))
    except DeviceGone as exc:
        return GpuFacts(index=index, bus_id=bus_id, error=exc.name, error_code=exc.code, mig=None)
    except Exception as exc:
        # A GPU that cannot say which it is (a Timeout to every call) is no healthy GPU with
        # its facts unknown: it is unusable, as one gone is, so gpu.lost fails it.
        if not _error_name(exc).startswith("NVML"):
            raise
        return GpuFacts(
            index=index,
            bus_id=bus_id,
            error=_error_name(exc),
            error_code=getattr(exc, "value", None),
            mig=None,
        )
    try:
        facts = GpuFacts(
            index=index,
            bus_id=bus_id,
            uuid=uuid,
            minor=_call(nv.nvmlDeviceGetMinorNumber, handle, unread=unread),
            **_memory_facts(nv, handle, unread),
            **_link_facts(nv, handle, unread),
            **_state_facts(nv, handle, unread),
            mig=_mig_facts(nv, handle, unread),
            unread=tuple(unread),
        )
    except DeviceGone as exc:
        return GpuFacts(index=index, bus_id=bus_id, error=exc.name, error_code=exc.code, mig=None)
    if unread and not _answered_any(facts):
        # Its name and nothing else: as unusable as a GPU that cannot say which it is.
        error = unread[0].rpartition(": ")[2]
        return GpuFacts(index=index, bus_id=bus_id, uuid=uuid, error=error, mig=None)
    return facts


# The facts past a GPU's identity; a GPU with none of them read answered nothing. (`mig`
# is () for MIG off and for NotSupported alike: it says nothing of whether the GPU answers.)
_READ_FACTS = tuple(
    f.name
    for f in fields(GpuFacts)
    if f.name not in ("index", "bus_id", "uuid", "error", "error_code", "unread", "mig")
)


def _answered_any(facts: GpuFacts) -> bool:
    return any(getattr(facts, name) is not None for name in _READ_FACTS)


def _bus_id(nv: Any, h: Any, unread: list[str] | None) -> str | None:
    pci = _call(nv.nvmlDeviceGetPciInfo, h, unread=unread)
    return _text(pci.busId) if pci is not None else None


def _pids(nv: Any, h: Any, unread: list[str]) -> tuple[int, ...] | None:
    """The compute processes holding the GPU (or MIG device); None when NVML does not say.
    On a GPU in MIG mode that is every MIG device's processes, other jobs' included."""
    procs = _call(nv.nvmlDeviceGetComputeRunningProcesses, h, unread=unread)
    return None if procs is None else tuple(int(p.pid) for p in procs)


# nvml.h's NVML_DEVICE_MIG_ENABLE (ABI; the stand-in's nvml_abi.py does not list it yet).
MIG_ENABLE = 1


def _mig_facts(nv: Any, h: Any, unread: list[str]) -> tuple[MigFacts, ...] | None:
    """The GPU's MIG devices as Slurm's gpu/nvml plugin counts them (gpu_nvml.c, 25.11:
    indices from 0 until the first that NVML does not find); () when MIG is off or not
    supported (NotSupported from nvmlDeviceGetMigMode); None when NVML failed to say."""
    before = len(unread)
    mode = _call(nv.nvmlDeviceGetMigMode, h, unread=unread)
    if mode is None:
        return None if len(unread) > before else ()
    if int(mode[0]) != MIG_ENABLE:
        return ()
    count = _call(nv.nvmlDeviceGetMaxMigDeviceCount, h, unread=unread)
    found: list[MigFacts] = []
    for index in range(count or 0):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, index)
        except Exception as exc:
            if _error_name(exc) == "NVMLError_NotFound":
                break  # Slurm stops here too: "MIG indexes start at 0 and are contiguous"
            unread.append(f"nvmlDeviceGetMigDeviceHandleByIndex: {_error_name(exc)}")
            return None
        found.append(
            MigFacts(
                index,
                _call(nv.nvmlDeviceGetGpuInstanceId, mig, unread=unread),
                _call(nv.nvmlDeviceGetComputeInstanceId, mig, unread=unread),
                _pids(nv, mig, unread),
            )
        )
    return None if len(unread) > before else tuple(found)


def mig_key(bus_id: str, mig: MigFacts) -> str:
    """How a MIG device's processes are keyed beside whole GPUs' (by bus id)."""
    return f"{bus_id} gi{mig.gpu_instance} ci{mig.compute_instance}"


def gpu_processes(facts: NvmlFacts) -> dict[str, tuple[int, ...] | None]:
    """What read_gpu_processes reads, taken from facts read in this same run."""
    found: dict[str, tuple[int, ...] | None] = {}
    for g in facts.gpus:
        if g.bus_id is not None:
            found[g.bus_id] = g.processes
            for mig in g.mig or ():
                found[mig_key(g.bus_id, mig)] = mig.processes
    return found


def _memory_facts(nv: Any, h: Any, unread: list[str]) -> dict[str, Any]:
    unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    remap = _call(nv.nvmlDeviceGetRemappedRows, h, unread=unread)
    pending = _call(nv.nvmlDeviceGetRetiredPagesPendingStatus, h, unread=unread)
    total = nv.nvmlDeviceGetTotalEccErrors
    return {
        "ecc_volatile_uncorrected": _call(total, h, unc, nv.NVML_VOLATILE_ECC, unread=unread),
        "ecc_aggregate_uncorrected": _call(total, h, unc, nv.NVML_AGGREGATE_ECC, unread=unread),
        "retired_pages_pending": None if pending is None else pending == nv.NVML_FEATURE_ENABLED,
        "remap": None
        if remap is None
        else RowRemap(int(remap[0]), int(remap[1]), bool(remap[2]), bool(remap[3])),
        "recovery_action": _field(
            nv,
            h,
            _optional(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", RECOVERY_ACTION_FIELD),
            unread,
        ),
    }


def _field(nv: Any, h: Any, field_id: int, unread: list[str]) -> int | None:
    values = _call(nv.nvmlDeviceGetFieldValues, h, [field_id], unread=unread)
    if not values or values[0].nvmlReturn != nv.NVML_SUCCESS:
        return None
    return int(values[0].value.uiVal)


def _link_facts(nv: Any, h: Any, unread: list[str]) -> dict[str, Any]:
    links: list[bool] = []
    errors: int | None = 0
    for link in range(_optional(nv, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS)):
        state = _call(nv.nvmlDeviceGetNvLinkState, h, link, unread=unread)
        if state is None:
            break
        links.append(state == nv.NVML_FEATURE_ENABLED)
        for counter in (
            nv.NVML_NVLINK_ERROR_DL_REPLAY,
            nv.NVML_NVLINK_ERROR_DL_RECOVERY,
            nv.NVML_NVLINK_ERROR_DL_CRC_FLIT,
            nv.NVML_NVLINK_ERROR_DL_CRC_DATA,
        ):
            before = len(unread)
            value = _call(nv.nvmlDeviceGetNvLinkErrorCounter, h, link, counter, unread=unread)
            # A sum with a term missing is not the count: unknown, not lower.
            errors = None if errors is None or len(unread) > before else errors + (value or 0)
    width = (
        _call(nv.nvmlDeviceGetCurrPcieLinkWidth, h, unread=unread),
        _call(nv.nvmlDeviceGetMaxPcieLinkWidth, h, unread=unread),
    )
    gen = (
        _call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h, unread=unread),
        _call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h, unread=unread),
    )
    return {
        "nvlink_up": tuple(links) if links else None,
        "nvlink_errors": errors if links else None,
        "pcie_width": _link(*width),
        "pcie_gen": _link(*gen),
        "pcie_replays": _call(nv.nvmlDeviceGetPcieReplayCounter, h, unread=unread),
    }


def _link(current: int | None, maximum: int | None) -> PcieLink | None:
    return None if current is None or maximum is None else PcieLink(current, maximum)


def _state_facts(nv: Any, h: Any, unread: list[str]) -> dict[str, Any]:
    reasons = None
    for name in (  # the 535 rename first; the old name is deprecated, maybe gone one day
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        if reasons is None and (fn := _optional(nv, name)) is not None:
            reasons = _call(fn, h, unread=unread)
    util = _call(nv.nvmlDeviceGetUtilizationRates, h, unread=unread)
    return {
        "utilization_pct": None if util is None else int(util.gpu),
        "temperature_c": _call(
            nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU, unread=unread
        ),
        "slowdown_temperature_c": _call(
            nv.nvmlDeviceGetTemperatureThreshold,
            h,
            nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            unread=unread,
        ),
        "clock_reasons": reasons,
        "processes": _pids(nv, h, unread),
    }
