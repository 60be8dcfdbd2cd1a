"""A stand-in for the `pynvml` module, served from a simulated node's state file.

Same function names and signatures as nvidia-ml-py, NVML's own constant values and error
classes (`nvml_abi.py`: never borrowed from the installed pynvml), and the same failure
modes as the real library where hardware differs from the happy path:

- **Device cgroups** (Slurm `ConstrainDevices=yes`): NVML opens `/dev/nvidiaN` for each GPU
  and skips the ones the cgroup denies, so a process sees only its allowed GPUs, numbered
  from 0 in PCI bus order; `nvmlDeviceGetMinorNumber` and the PCI bus id still name the
  host's device (seen in the field: guilbaults/slurm-job-exporter#63, PrincetonUniversity/
  jobstats#34). `allowed_minors` is that allow list.
- **NVLink**: a link a GPU has but that is not trained reads FEATURE_DISABLED, not
  NotSupported: H100 PCIe boards report 18 links of which 6 are inactive by design, and all
  18 without bridges (Azure/azurehpc-health-checks#162, NVIDIA/NVSentinel#1481, NVIDIA/
  DCGM#198); a link index past the GPU's links is NotSupported (leptonai/gpud nvlink.go).
- **Hopper**: retired pages are NotSupported (row remapping replaced them).
- **Driver versions**: the recovery-action field (230) exists from driver R570; older
  drivers answer NotSupported in the field's slot.
- **nvidia-ml-py versions**: `binding` is the module surface of one release
  (`bindings.py`): a name that release lacks is an AttributeError here too.
- **MIG** (a GPU's state `"mig": {"mode": 1, "devices": [{"gi": 1, "ci": 0, "processes":
  []}, ...]}`, list position = MIG device index; `"mig_capable": false` for a board without
  MIG): as nvml.h documents, nvmlDeviceGetMigMode is NotSupported on a board without MIG;
  nvmlDeviceGetMigDeviceHandleByIndex is NotSupported while MIG is off, InvalidArgument past
  the maximum count and NotFound for an empty slot (Slurm's gpu_nvml.c stops counting at the
  first NotFound); the parent GPU's compute processes are every MIG device's, a MIG
  device's its own.

Functions it does not model raise AttributeError, except the few listed in
`_UNMODELLED_FUNCTIONS`, which raise NVMLError_FunctionNotFound as an old driver's
libnvidia-ml does for a missing symbol.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from slurm_triage.simulate import nvml_abi
from slurm_triage.simulate.bindings import NEWEST, BindingSurface
from slurm_triage.simulate.nvml_abi import CONSTANTS, ERROR_CLASSES, ERROR_CODES, NVMLError

_E = nvml_abi.error
_C = CONSTANTS
# Driver-side functions a real libnvidia-ml may lack; the stand-in never has them.
_UNMODELLED_FUNCTIONS = frozenset({"nvmlDeviceGetGspFirmwareMode", "nvmlDeviceGetGpuFabricInfo"})
# The recovery-action field arrived with driver R570.
_RECOVERY_FIELD_DRIVER = 570
# nvml.h's MIG mode values (ABI), and the MIG devices an A100/H100 can hold.
_MIG_CONSTANTS = {"NVML_DEVICE_MIG_DISABLE": 0, "NVML_DEVICE_MIG_ENABLE": 1}
_MAX_MIG_DEVICES = 7


class _Handle:
    def __init__(self, host: int, local: int, mig: int | None = None) -> None:
        self.host, self.local = host, local  # position on the host, NVML index in this process
        self.mig = mig  # a MIG device handle: its index under the parent GPU


class _PciInfo:
    def __init__(self, bus_id: str) -> None:
        self.busId = bus_id.encode()  # nvidia-ml-py's char array: bytes


class _FieldValue:
    class _Value:
        uiVal = 0

    def __init__(self, field_id: int) -> None:
        self.fieldId, self.scopeId = field_id, 0
        self.nvmlReturn = _C["NVML_SUCCESS"]
        self.valueType = _C["NVML_VALUE_TYPE_UNSIGNED_INT"]
        self.value = self._Value()


class _Utilization:
    def __init__(self, gpu: int) -> None:
        self.gpu, self.memory = gpu, 0


class _Process:
    def __init__(self, pid: int) -> None:
        self.pid, self.usedGpuMemory = pid, 1 << 30


class _EventData:
    def __init__(self, device: _Handle, event_type: int, data: int) -> None:
        self.device, self.eventType, self.eventData = device, event_type, data
        self.gpuInstanceId = self.computeInstanceId = 0xFFFFFFFF


class _EventSet:
    def __init__(self) -> None:
        self.handles: dict[int, int] = {}  # host position -> event mask
        self.seen = 0


def _binding_of(fake: FakeNvml) -> BindingSurface:
    binding: BindingSurface = object.__getattribute__(fake, "__dict__").get("_binding", NEWEST)
    return binding


class FakeNvml:
    """Behaves like the pynvml module for one simulated node (and one process's cgroup)."""

    def __init__(
        self,
        state_path: str | Path,
        *,
        allowed_minors: frozenset[int] | None = None,
        binding: BindingSurface = NEWEST,
    ) -> None:
        self._path = Path(state_path)
        self._initialised = 0
        # libnvidia-ml is thread-safe and counts nvmlInit/nvmlShutdown pairs; the node agent
        # shares one module between its Prolog runs and its event watcher.
        self._init_lock = threading.Lock()
        self._allowed = allowed_minors
        self._binding = binding

    def __getattribute__(self, name: str) -> Any:
        if name.startswith(("nvml", "NVML")) and name in _binding_of(self).absent:
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        # Python falls back here when __getattribute__ refused a name: refuse it again.
        if name in _binding_of(self).absent:
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        if name in _C:
            return _C[name]
        if name in _MIG_CONSTANTS:
            return _MIG_CONSTANTS[name]
        if name in ERROR_CODES:
            return ERROR_CODES[name]
        if name in ERROR_CLASSES:
            return ERROR_CLASSES[name]
        if name == "NVMLError":
            return NVMLError
        if name == "NVML_NVLINK_MAX_LINKS":
            return _binding_of(self).nvlink_max_links
        if name in _UNMODELLED_FUNCTIONS:

            def missing(*_args: Any, **_kwargs: Any) -> Any:
                raise _E("NVML_ERROR_FUNCTION_NOT_FOUND")

            return missing
        raise AttributeError(f"module 'pynvml' has no attribute {name!r}")

    # -- state ------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        # Read on every call, as the driver answers live; parsed again only when the bytes
        # changed (a health run makes ~900 calls on 8 GPUs; parsing each was most of the
        # Prolog's time on a simulated node). The state is only ever read, never mutated.
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            raise _E("NVML_ERROR_LIBRARY_NOT_FOUND") from None
        cached = object.__getattribute__(self, "__dict__").get("_parsed")
        if cached is not None and cached[0] == raw:
            state: dict[str, Any] = cached[1]
        else:
            state = json.loads(raw)
            self._parsed = (raw, state)
        hang = state.get("driver", {}).get("hang_s", 0)
        if hang:
            time.sleep(hang)
        return state

    def _visible(self, state: dict[str, Any]) -> list[int]:
        """Host positions of the GPUs this process may open, in NVML's (PCI bus) order."""
        gpus = state["gpus"]
        allowed = [
            i
            for i, g in enumerate(gpus)
            if self._allowed is None or int(g.get("minor", i)) in self._allowed
        ]
        return sorted(allowed, key=lambda i: str(gpus[i]["bus_id"]))

    def _gpu(self, handle: _Handle) -> dict[str, Any]:
        if not self._initialised:
            raise _E("NVML_ERROR_UNINITIALIZED")
        gpu: dict[str, Any] = self._state()["gpus"][handle.host]
        if gpu["lost"]:
            raise _E("NVML_ERROR_GPU_IS_LOST")
        if gpu["reset_required"]:
            raise _E("NVML_ERROR_RESET_REQUIRED")
        return gpu

    def _driver_major(self) -> int:
        version = str(self._state()["driver"]["version"])
        head = version.split(".", 1)[0]
        return int(head) if head.isdigit() else 0

    # -- init -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        state = self._state()
        if not state["driver"]["loaded"]:
            raise _E("NVML_ERROR_DRIVER_NOT_LOADED")
        if state["driver"].get("version_mismatch"):
            raise _E("NVML_ERROR_LIB_RM_VERSION_MISMATCH")
        if state["driver"].get("init_error"):
            raise NVMLError(int(state["driver"]["init_error"]))
        with self._init_lock:
            self._initialised += 1

    def nvmlShutdown(self) -> None:
        with self._init_lock:
            if not self._initialised:
                raise _E("NVML_ERROR_UNINITIALIZED")
            self._initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._state()["driver"]["version"])

    def nvmlDeviceGetCount(self) -> int:
        if not self._initialised:
            raise _E("NVML_ERROR_UNINITIALIZED")
        return len(self._visible(self._state()))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not self._initialised:
            raise _E("NVML_ERROR_UNINITIALIZED")
        visible = self._visible(self._state())
        if not 0 <= index < len(visible):
            raise _E("NVML_ERROR_INVALID_ARGUMENT")
        handle = _Handle(visible[index], index)
        self._gpu(handle)  # a lost GPU fails here already, as on real hardware
        return handle

    def nvmlDeviceGetIndex(self, h: _Handle) -> int:
        return h.local if h.mig is None else h.mig  # a MIG device: its index on the parent

    # -- identity ---------------------------------------------------------------------
    def nvmlDeviceGetPciInfo(self, h: _Handle) -> _PciInfo:
        return _PciInfo(str(self._gpu(h)["bus_id"]))

    def nvmlDeviceGetMinorNumber(self, h: _Handle) -> int:
        return int(self._gpu(h).get("minor", h.host))

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        return str(self._gpu(h)["uuid"])

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        return str(self._gpu(h)["name"])

    # -- memory -----------------------------------------------------------------------
    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(h)
        if error_type != _C["NVML_MEMORY_ERROR_TYPE_UNCORRECTED"]:
            return 0
        key = "volatile" if counter_type == _C["NVML_VOLATILE_ECC"] else "aggregate"
        return int(gpu[f"ecc_{key}_uncorrected"])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: _Handle) -> int:
        self._gpu(h)
        raise _E("NVML_ERROR_NOT_SUPPORTED")  # Hopper: row remapping replaces it

    def nvmlDeviceGetRemappedRows(self, h: _Handle) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = self._gpu(h)["remap"]
        return int(corr), int(unc), int(pending), int(failure)

    def nvmlDeviceGetFieldValues(self, h: _Handle, field_ids: list[int]) -> list[_FieldValue]:
        gpu = self._gpu(h)
        values = []
        for field_id in field_ids:
            slot = _FieldValue(field_id)
            if (
                field_id == _C["NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"]
                and self._driver_major() >= _RECOVERY_FIELD_DRIVER
            ):
                slot.value.uiVal = int(gpu["recovery_action"])
            else:
                slot.nvmlReturn = ERROR_CODES["NVML_ERROR_NOT_SUPPORTED"]
            values.append(slot)
        return values

    # -- links ------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> int:
        links = self._gpu(h)["nvlink"]
        if not 0 <= link < len(links):
            raise _E("NVML_ERROR_NOT_SUPPORTED")  # past this GPU's links (gpud nvlink.go)
        return _C["NVML_FEATURE_ENABLED"] if links[link] else _C["NVML_FEATURE_DISABLED"]

    def nvmlDeviceGetNvLinkErrorCounter(self, h: _Handle, link: int, counter: int) -> int:
        gpu = self._gpu(h)
        if not 0 <= link < len(gpu["nvlink"]):
            raise _E("NVML_ERROR_NOT_SUPPORTED")
        # All simulated link errors are CRC flit errors on link 3 (where XID 74 puts them).
        return (
            int(gpu["nvlink_errors"])
            if (link, counter) == (3, _C["NVML_NVLINK_ERROR_DL_CRC_FLIT"])
            else 0
        )

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: _Handle) -> int:
        return int(self._gpu(h)["pcie"]["width"])

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: _Handle) -> int:
        return int(self._gpu(h)["pcie"]["max_width"])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: _Handle) -> int:
        return int(self._gpu(h)["pcie"]["gen"])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: _Handle) -> int:
        return int(self._gpu(h)["pcie"]["max_gen"])

    def nvmlDeviceGetPcieReplayCounter(self, h: _Handle) -> int:
        return int(self._gpu(h)["pcie"]["replays"])

    # -- state ------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> _Utilization:
        return _Utilization(int(self._gpu(h)["utilization_pct"]))

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        return int(self._gpu(h)["temperature_c"])

    def nvmlDeviceGetTemperatureThreshold(self, h: _Handle, kind: int) -> int:
        return int(self._gpu(h)["slowdown_temperature_c"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        return int(self._gpu(h)["clock_reasons"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[_Process]:
        gpu = self._gpu(h)
        if h.mig is not None:
            return [_Process(pid) for pid in self._mig_device(h)["processes"]]
        pids = list(gpu["processes"])
        if self._mig_state(gpu)["mode"]:  # the parent answers for all its MIG devices
            pids += [p for d in self._mig_state(gpu)["devices"] if d for p in d["processes"]]
        return [_Process(pid) for pid in pids]

    # -- MIG --------------------------------------------------------------------------
    @staticmethod
    def _mig_state(gpu: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = gpu.get("mig") or {"mode": 0, "devices": []}
        return state

    def _mig_parent(self, h: _Handle) -> dict[str, Any]:
        """The MIG state of a parent GPU handle that supports MIG."""
        gpu = self._gpu(h)
        if not gpu.get("mig_capable", True):
            raise _E("NVML_ERROR_NOT_SUPPORTED")
        if h.mig is not None:
            raise _E("NVML_ERROR_INVALID_ARGUMENT")  # a MIG device has no MIG devices
        return self._mig_state(gpu)

    def _mig_device(self, h: _Handle) -> dict[str, Any]:
        devices = self._mig_state(self._gpu(h))["devices"]
        if h.mig is None or h.mig >= len(devices) or not devices[h.mig]:
            raise _E("NVML_ERROR_INVALID_ARGUMENT")  # destroyed since: a stale handle
        device: dict[str, Any] = devices[h.mig]
        return device

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        mig = self._mig_parent(h)
        return [int(mig["mode"]), int(mig.get("pending", mig["mode"]))]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        return _MAX_MIG_DEVICES if self._mig_parent(h)["mode"] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _Handle:
        mig = self._mig_parent(h)
        if not mig["mode"]:
            raise _E("NVML_ERROR_NOT_SUPPORTED")
        if not 0 <= index < _MAX_MIG_DEVICES:
            raise _E("NVML_ERROR_INVALID_ARGUMENT")
        if index >= len(mig["devices"]) or not mig["devices"][index]:
            raise _E("NVML_ERROR_NOT_FOUND")
        return _Handle(h.host, h.local, index)

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        if h.mig is None:
            raise _E(
                "NVML_ERROR_NOT_SUPPORTED" if self._mig_off(h) else "NVML_ERROR_INVALID_ARGUMENT"
            )
        return int(self._mig_device(h)["gi"])

    def nvmlDeviceGetComputeInstanceId(self, h: _Handle) -> int:
        if h.mig is None:
            raise _E(
                "NVML_ERROR_NOT_SUPPORTED" if self._mig_off(h) else "NVML_ERROR_INVALID_ARGUMENT"
            )
        return int(self._mig_device(h)["ci"])

    def _mig_off(self, h: _Handle) -> bool:
        gpu = self._gpu(h)
        return not gpu.get("mig_capable", True) or not self._mig_state(gpu)["mode"]

    # -- events -----------------------------------------------------------------------
    def nvmlDeviceGetSupportedEventTypes(self, h: _Handle) -> int:
        self._gpu(h)
        return int(
            _C["nvmlEventTypeXidCriticalError"]
            | _C["nvmlEventTypeDoubleBitEccError"]
            | _C["nvmlEventTypeSingleBitEccError"]
        )

    def nvmlEventSetCreate(self) -> _EventSet:
        event_set = _EventSet()
        event_set.seen = len(self._state()["events"])  # only events after registration count
        return event_set

    def nvmlDeviceRegisterEvents(self, h: _Handle, mask: int, event_set: _EventSet) -> None:
        self._gpu(h)
        event_set.handles[h.host] = mask

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> _EventData:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            state = self._state()
            events = state["events"]
            while event_set.seen < len(events):
                event = events[event_set.seen]
                event_set.seen += 1
                kind = (
                    _C["nvmlEventTypeXidCriticalError"]
                    if event["type"] == "xid"
                    else _C["nvmlEventTypeDoubleBitEccError"]
                )
                host = event["gpu"]
                if host in event_set.handles and kind & event_set.handles[host]:
                    local = self._visible(state).index(host)
                    data = _EventData(_Handle(host, local), kind, int(event["data"]))
                    # With MIG, NVML names the GPU instance an XID belongs to, if one.
                    data.gpuInstanceId = int(event.get("gpu_instance", 0xFFFFFFFF))
                    return data
            if time.monotonic() >= deadline:
                raise _E("NVML_ERROR_TIMEOUT")
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> _EventData:
        return self.nvmlEventSetWait_v2(event_set, timeout_ms)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        event_set.handles.clear()
