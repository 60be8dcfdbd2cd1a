"""A stand-in for the `pynvml` module, served from a simulated node's state file.

Same function names and signatures as nvidia-ml-py, same constants (taken from the real
`pynvml`), and the same error classes with the same codes (`pynvml.NVMLError(code)` builds
the real subclass, e.g. NVMLError_GpuIsLost for 15). Where real H100s answer NotSupported
(retired pages, superseded by row remapping), so does this. Functions it does not know
raise NVMLError_FunctionNotFound, as an old driver's libnvidia-ml would.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pynvml

_E = pynvml.NVMLError


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


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
        self.handles: dict[int, int] = {}
        self.seen = 0


class FakeNvml:
    """Behaves like the pynvml module for one simulated node."""

    def __init__(self, state_path: str | Path) -> None:
        self._path = Path(state_path)
        self._initialised = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml") and callable(getattr(pynvml, name, None)):

            def missing(*_args: Any, **_kwargs: Any) -> Any:
                raise _E(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

            return missing
        return getattr(pynvml, name)  # constants and error classes are the real ones

    # -- state ------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(self._path.read_text())
        except FileNotFoundError:
            raise _E(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND) from None
        hang = state.get("driver", {}).get("hang_s", 0)
        if hang:
            time.sleep(hang)
        return state

    def _gpu(self, handle: _Handle) -> dict[str, Any]:
        if not self._initialised:
            raise _E(pynvml.NVML_ERROR_UNINITIALIZED)
        gpu: dict[str, Any] = self._state()["gpus"][handle.index]
        if gpu["lost"]:
            raise _E(pynvml.NVML_ERROR_GPU_IS_LOST)
        if gpu["reset_required"]:
            raise _E(pynvml.NVML_ERROR_RESET_REQUIRED)
        return gpu

    # -- init -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        state = self._state()
        if not state["driver"]["loaded"]:
            raise _E(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        if state["driver"].get("version_mismatch"):
            raise _E(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
        if state["driver"].get("init_error"):
            raise _E(int(state["driver"]["init_error"]))
        self._initialised += 1

    def nvmlShutdown(self) -> None:
        if not self._initialised:
            raise _E(pynvml.NVML_ERROR_UNINITIALIZED)
        self._initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._state()["driver"]["version"])

    def nvmlDeviceGetCount(self) -> int:
        if not self._initialised:
            raise _E(pynvml.NVML_ERROR_UNINITIALIZED)
        return len(self._state()["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < self.nvmlDeviceGetCount():
            raise _E(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        handle = _Handle(index)
        self._gpu(handle)  # a lost GPU fails here already, as on real hardware
        return handle

    # -- identity ---------------------------------------------------------------------
    def nvmlDeviceGetPciInfo(self, h: _Handle) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._gpu(h)["bus_id"].encode()
        return info

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        return str(self._gpu(h)["uuid"])

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        return str(self._gpu(h)["name"])

    # -- memory -----------------------------------------------------------------------
    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(h)
        if error_type != pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return 0
        key = "volatile" if counter_type == pynvml.NVML_VOLATILE_ECC else "aggregate"
        return int(gpu[f"ecc_{key}_uncorrected"])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: _Handle) -> int:
        self._gpu(h)
        raise _E(pynvml.NVML_ERROR_NOT_SUPPORTED)  # Hopper: row remapping replaces it

    def nvmlDeviceGetRemappedRows(self, h: _Handle) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = self._gpu(h)["remap"]
        return int(corr), int(unc), int(pending), int(failure)

    def nvmlDeviceGetFieldValues(self, h: _Handle, field_ids: list[int]) -> Any:
        gpu = self._gpu(h)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for slot, field_id in zip(values, field_ids, strict=True):
            slot.fieldId = field_id
            if field_id == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
                slot.nvmlReturn = pynvml.NVML_SUCCESS
                slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                slot.value.uiVal = int(gpu["recovery_action"])
            else:
                slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    # -- links ------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> int:
        links = self._gpu(h)["nvlink"]
        if link >= len(links):
            raise _E(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED if links[link] else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, h: _Handle, link: int, counter: int) -> int:
        gpu = self._gpu(h)
        # All simulated link errors are CRC flit errors on link 3 (where XID 74 puts them).
        return (
            int(gpu["nvlink_errors"])
            if (link, counter) == (3, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
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
        return [_Process(pid) for pid in self._gpu(h)["processes"]]

    # -- events -----------------------------------------------------------------------
    def nvmlDeviceGetSupportedEventTypes(self, h: _Handle) -> int:
        self._gpu(h)
        return int(
            pynvml.nvmlEventTypeXidCriticalError
            | pynvml.nvmlEventTypeDoubleBitEccError
            | pynvml.nvmlEventTypeSingleBitEccError
        )

    def nvmlEventSetCreate(self) -> _EventSet:
        event_set = _EventSet()
        event_set.seen = len(self._state()["events"])  # only events after registration count
        return event_set

    def nvmlDeviceRegisterEvents(self, h: _Handle, mask: int, event_set: _EventSet) -> None:
        self._gpu(h)
        event_set.handles[h.index] = mask

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> _EventData:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            events = self._state()["events"]
            while event_set.seen < len(events):
                event = events[event_set.seen]
                event_set.seen += 1
                kind = (
                    pynvml.nvmlEventTypeXidCriticalError
                    if event["type"] == "xid"
                    else pynvml.nvmlEventTypeDoubleBitEccError
                )
                if event["gpu"] in event_set.handles and kind & event_set.handles[event["gpu"]]:
                    return _EventData(_Handle(event["gpu"]), kind, int(event["data"]))
            if time.monotonic() >= deadline:
                raise _E(pynvml.NVML_ERROR_TIMEOUT)
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    nvmlEventSetWait = nvmlEventSetWait_v2

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        event_set.handles.clear()
