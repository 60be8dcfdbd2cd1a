"""Watch NVML XID and ECC events for the step's GPUs while the child runs (one thread).

NVML only reports events that happen after registration (signatures.md §2.3), so this is
the one place that sees an XID the moment it hits a running job. The thread blocks in
nvmlEventSetWait (ctypes releases the GIL), wakes every `poll_ms` to check for a stop, and
on stop drains what is already queued. It never affects the child: an NVML that cannot
start (no driver, a CPU-only node) is one log line, and the watcher ends.

Which GPUs are the step's is gpu_ids.py's call: inside a device cgroup NVML numbers the
step's GPUs from 0, so Slurm's global ids are matched to NVML devices by PCI bus id or minor
number, never used as NVML indices. Facts name GPUs by Slurm's global id.

With MIG, Slurm's ids name MIG devices (gpu_ids.mig_gres_order): the watcher registers the
GPUs that hold the step's MIG devices (NVML's events are per GPU), names each by the step's
ids on it ("3+4"), and drops an XID that NVML attributes to another GPU instance on it (a
neighbour job's). Where the ids cannot be matched (a device cgroup hides the host's other
GPUs, whose MIG devices number before ours; `slurm_gpu_order = "minor_number"`) it watches
no GPU rather than a guessed one, and says so in a warning.

The facts it produces are user-collected (the wrapper runs as the job's user), so they can
requeue the job and exclude a node, never drain one (TAXONOMY.md rule 3).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from slurm_triage.evidence import NvmlCondition, NvmlFact, Source
from slurm_triage.gpu_ids import (
    GpuOrder,
    MigDevice,
    NvmlDevice,
    canonical_bus_id,
    in_mig_mode,
    job_devices,
    mig_gres_order,
)
from slurm_triage.logs import get_logger

MAX_FACTS = 100
POLL_MS = 500
_LOST = 15  # NVML_ERROR_GPU_IS_LOST
_TIMEOUT = 10  # NVML_ERROR_TIMEOUT
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_FUNCTION_NOT_FOUND = 13  # a driver older than MIG
_MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE
_NO_INSTANCE = 0xFFFFFFFF  # nvmlEventData_t.gpuInstanceId of an event not tied to one


class NvmlWatcher(threading.Thread):
    """Collects `NvmlFact`s for XID / double-bit ECC / GPU-lost events until stopped.

    `gpus` are Slurm's global ids of the step's GPUs (None: every GPU NVML shows);
    `host_bus_ids` reads the host's NVIDIA GPUs from sysfs (it runs in the thread)."""

    def __init__(
        self,
        load: Callable[[], Any],
        node: str,
        gpus: tuple[int, ...] | None,
        *,
        gpus_expected: bool,
        host_bus_ids: Callable[[], Sequence[str]] = tuple,
        order: GpuOrder = "pci_bus",
        poll_ms: int = POLL_MS,
        block_signals: tuple[int, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name="slurm-triage-nvml", daemon=True)
        self._load, self._node, self._gpus = load, node, gpus
        self._host_bus_ids, self._order = host_bus_ids, order
        self._labels: dict[int, str | None] = {}  # NVML index -> the GPU's name in facts
        self._instances: dict[int, frozenset[int]] = {}  # MIG: NVML index -> our GPU instances
        self._expected = gpus_expected
        self._poll_ms = poll_ms
        self._block = block_signals
        self._clock = clock
        self._stop_event = threading.Event()
        self.watching = threading.Event()  # set once events are registered
        self.facts: list[NvmlFact] = []
        self.dropped = 0
        self._log = get_logger(component="wrapper.nvml", node=node)

    def stop(self, timeout_s: float = 2.0) -> list[NvmlFact]:
        """Stop after draining queued events; the facts collected (a hung NVML is abandoned)."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout_s)
        return list(self.facts)

    def run(self) -> None:
        if self._block:
            signal.pthread_sigmask(signal.SIG_BLOCK, self._block)
        try:
            nvml = self._load()
            nvml.nvmlInit()
        except Exception as exc:
            # Warn only when the step has GPUs: a CPU job on a CPU node is not a problem.
            level = self._log.warning if self._expected else self._log.debug
            level("nvml_unavailable", error=_describe(exc), watching=False)
            return
        try:
            self._watch(nvml)
        except Exception as exc:  # a bug or a driver surprise here must never reach the job
            self._log.warning("nvml_watch_failed", error=_describe(exc))
        finally:
            _quietly(nvml.nvmlShutdown)

    def _watch(self, nvml: Any) -> None:
        event_set = nvml.nvmlEventSetCreate()
        try:
            registered = self._register(nvml, event_set)
            self._log.debug("nvml_watching", gpus=sorted(registered))
            self.watching.set()
            if not registered:
                return
            while not self._stop_event.is_set():
                if self._wait(nvml, event_set, self._poll_ms) is None:
                    return
            while self._wait(nvml, event_set, 0):  # drain what arrived before the stop
                pass
        finally:
            _quietly(nvml.nvmlEventSetFree, event_set)

    def _register(self, nvml: Any, event_set: Any) -> dict[int, Any]:
        wanted = (
            nvml.nvmlEventTypeXidCriticalError
            | nvml.nvmlEventTypeDoubleBitEccError
            | getattr(nvml, "nvmlEventTypeGpuUnavailableError", 0)
        )
        devices, handles, lost = self._devices(nvml)
        try:
            host = tuple(self._host_bus_ids())
        except OSError:
            host = ()
        mig_unknown = any(d.mig is None for d in devices if d.index in handles)
        mig = self._gpus is not None and (in_mig_mode(devices) or mig_unknown)
        if mig:
            chosen = self._mig_parents(devices, host)
        else:
            chosen = job_devices(self._gpus, devices, host, self._order)
        bus = {d.index: d.bus_id for d in devices}
        registered: dict[int, Any] = {}
        for index, slurm_id in sorted(chosen.items()):
            if index not in self._labels:
                self._labels[index] = str(slurm_id) if slurm_id is not None else bus.get(index)
            if index in lost:
                self._add(NvmlCondition.GPU_LOST, index, None, "GPU lost at wrapper start")
                continue
            try:
                mask = nvml.nvmlDeviceGetSupportedEventTypes(handles[index]) & wanted
                if mask:
                    nvml.nvmlDeviceRegisterEvents(handles[index], mask, event_set)
                    registered[index] = handles[index]
            except nvml.NVMLError as exc:
                if _code(exc) == _LOST:
                    self._add(NvmlCondition.GPU_LOST, index, None, "GPU lost at wrapper start")
                elif _code(exc) != _NOT_SUPPORTED:
                    self._log.debug("nvml_register_failed", gpu=index, error=_describe(exc))
        if not mig and self._gpus is not None and len(chosen) < len(self._gpus):
            self._log.warning(
                "nvml_step_gpus_unmatched",
                step_gpus=list(self._gpus),
                matched=sorted(s for s in chosen.values() if s is not None),
                nvml_devices=len(devices),
            )
        return registered

    def _mig_parents(self, devices: list[NvmlDevice], host: Sequence[str]) -> dict[int, int | None]:
        """NVML index -> Slurm id of the GPUs holding the step's GPUs and MIG devices; none
        when Slurm's ids cannot be matched here (never a guessed GPU)."""
        records = mig_gres_order(devices, host, self._order)
        ids = self._gpus or ()
        if records is None or any(i >= len(records) for i in ids):
            self._log.warning(
                "nvml_mig_unmatched",
                step_gpus=list(ids),
                nvml_devices=len(devices),
                host_gpus=len(host),
                order=self._order,
                watching=False,
            )
            return {}
        chosen: dict[int, int | None] = {}
        for slurm_id in ids:
            record = records[slurm_id]
            chosen.setdefault(record.gpu, slurm_id)
            named = self._labels.get(record.gpu)
            self._labels[record.gpu] = f"{named}+{slurm_id}" if named else str(slurm_id)
            if record.mig is not None and record.mig.gpu_instance is not None:
                mine = self._instances.get(record.gpu, frozenset())
                self._instances[record.gpu] = mine | {record.mig.gpu_instance}
        return chosen

    def _devices(self, nvml: Any) -> tuple[list[NvmlDevice], dict[int, Any], set[int]]:
        """Every GPU NVML shows this process, with what identifies it on the host."""
        devices: list[NvmlDevice] = []
        handles: dict[int, Any] = {}
        lost: set[int] = set()
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                bus_id = canonical_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
                minor = _quiet_value(nvml.nvmlDeviceGetMinorNumber, handle)
            except nvml.NVMLError as exc:
                if _code(exc) == _LOST:
                    lost.add(index)
                    devices.append(NvmlDevice(index, mig=None))
                else:
                    self._log.debug("nvml_device_unreadable", gpu=index, error=_describe(exc))
                continue
            handles[index] = handle
            devices.append(NvmlDevice(index, bus_id, minor, _mig_devices(nvml, handle)))
        return devices, handles, lost

    def _wait(self, nvml: Any, event_set: Any, timeout_ms: int) -> bool | None:
        """True: an event was recorded; False: nothing came; None: NVML failed, stop."""
        try:
            event = nvml.nvmlEventSetWait_v2(event_set, timeout_ms)
        except nvml.NVMLError as exc:
            if _code(exc) == _TIMEOUT:
                return False
            if _code(exc) == _LOST:
                self._add(NvmlCondition.GPU_LOST, None, None, "nvmlEventSetWait: GPU is lost")
            else:
                self._log.warning("nvml_wait_failed", error=_describe(exc))
            return None
        self._record(nvml, event)
        return True

    def _record(self, nvml: Any, event: Any) -> None:
        index = _device_index(nvml, event.device)
        kind, data = int(event.eventType), int(event.eventData)
        instance = getattr(event, "gpuInstanceId", _NO_INSTANCE)
        if index in self._instances and instance not in (_NO_INSTANCE, *self._instances[index]):
            # A MIG GPU instance that is not the step's: a neighbour job's XID.
            self._log.debug("nvml_event_other_instance", gpu=index, instance=instance, xid=data)
            return
        if kind & nvml.nvmlEventTypeXidCriticalError:
            self._add(NvmlCondition.XID_EVENT, index, data, f"NVML event: XID {data}")
        elif kind & nvml.nvmlEventTypeDoubleBitEccError:
            self._add(NvmlCondition.ECC_UNCORRECTED, index, data, "NVML event: double-bit ECC")
        else:
            self._add(NvmlCondition.GPU_LOST, index, data, f"NVML event type {kind:#x}")

    def _add(
        self, condition: NvmlCondition, index: int | None, value: int | None, why: str
    ) -> None:
        if len(self.facts) >= MAX_FACTS:
            self.dropped += 1  # a flapping GPU must not grow the record without bound
            return
        self.facts.append(
            NvmlFact(
                node=self._node,
                time=self._clock(),
                source=Source.USER,
                condition=condition,
                gpu=None if index is None else self._labels.get(index, f"nvml{index}"),
                value=value,
                detail=why,
            )
        )


def _mig_devices(nvml: Any, handle: Any) -> tuple[MigDevice, ...] | None:
    """The GPU's MIG devices as Slurm counts them (gpu_ids.mig_gres_order): () when MIG is
    off or not supported, None when NVML failed to say."""
    try:
        if int(nvml.nvmlDeviceGetMigMode(handle)[0]) != _MIG_ENABLE:
            return ()
    except nvml.NVMLError as exc:
        return () if _code(exc) in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND) else None
    found: list[MigDevice] = []
    try:
        for index in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            except nvml.NVMLError as exc:
                if _code(exc) == _NOT_FOUND:
                    break  # where Slurm's count stops too
                raise
            gpu_instance = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
            found.append(
                MigDevice(index, gpu_instance, int(nvml.nvmlDeviceGetComputeInstanceId(mig)))
            )
    except nvml.NVMLError:
        return None
    return tuple(found)


def _device_index(nvml: Any, device: Any) -> int | None:
    """The NVML index (in this process) of an event's device."""
    try:
        return int(nvml.nvmlDeviceGetIndex(device))
    except Exception:
        return None


def _quiet_value(func: Callable[..., Any], *args: Any) -> Any:
    try:
        return func(*args)
    except Exception:
        return None


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _describe(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]


def _quietly(func: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(Exception):
        func(*args)
