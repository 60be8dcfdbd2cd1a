"""The agent's XID watcher: NVML XID events of every GPU on the node, for the agent's life.

NVML reports an event only to a process registered when it happens (signatures.md §2.3), so
a Prolog started after the fact never sees it; a resident watcher does. The thread blocks
in nvmlEventSetWait_v2 (ctypes releases the GIL) for `poll_ms` at a time, NVML_ERROR_TIMEOUT
meaning nothing happened, and keeps what it saw for `window_s` (health.kernel_window_s) as
root-collected kernel events, which gpu.xid merges with the kernel log's
(health_checks.nvml_xids). NVML that cannot start, or a wait that fails, is a log line and
a new try after `retry_s`: the watcher never stops the agent from serving. `pause()` lets
go of NVML for a GPU reset and `resume()` takes it back (agent.server's release_nvml).
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import threading
import time
from collections.abc import Callable
from typing import Any

from slurm_triage.evidence import KernelEvent, KernelEventKind, Source
from slurm_triage.gpu_ids import canonical_bus_id
from slurm_triage.health_checks.nvml_xids import JOB_MADE_XIDS
from slurm_triage.logs import get_logger

_TIMEOUT = 10  # NVML_ERROR_TIMEOUT: the wait ended with no event
# A flapping GPU must not grow the agent without bound: at most this many job-made XIDs
# (xid.JOB_MADE_XIDS, which a job can cause as often as it likes) and, apart from them, this
# many others, so that a storm of the first cannot push out a node-fatal one.
MAX_EVENTS = 1000


class XidWatch(threading.Thread):
    """Watches nvmlEventTypeXidCriticalError on every GPU NVML shows the agent (root, no
    device cgroup: the whole node). `recent()` is what it saw within the window."""

    def __init__(
        self,
        nvml: Any,
        node: str,
        *,
        window_s: float,
        poll_ms: int = 1000,
        retry_s: float = 30.0,
        clock: Callable[[], float] = time.time,
        on_xid: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="slurm-triage-agent-xids", daemon=True)
        self._nvml, self._node, self._window_s = nvml, node, window_s
        self._on_xid = on_xid  # the agent's: its kept facts predate the XID
        self._poll_ms, self._retry_s, self._clock = poll_ms, retry_s, clock
        self._job_made: collections.deque[KernelEvent] = collections.deque(maxlen=MAX_EVENTS)
        self._others: collections.deque[KernelEvent] = collections.deque(maxlen=MAX_EVENTS)
        self._lock = threading.Lock()
        # Holding NVML (initialised, events registered) or not, paused by release_nvml or
        # stopping: changed under one condition, so pause() knows when NVML is let go.
        self._state = threading.Condition()
        self._holding = self._paused = self._stopping = False
        self.watching = threading.Event()  # set while events are registered
        self._log = get_logger(component="agent.xids", node=node)

    def recent(self) -> tuple[KernelEvent, ...]:
        """The XIDs seen within the window, oldest first (called from the Prolog's runs)."""
        since = self._clock() - self._window_s
        with self._lock:
            kept = heapq.merge(self._job_made, self._others, key=_seen_at)
            return tuple(e for e in kept if e.time is not None and e.time >= since)

    def stop(self, timeout_s: float = 3.0) -> None:
        with self._state:
            self._stopping = True
            self._state.notify_all()
        if self.is_alive():
            self.join(timeout_s)

    def pause(self, timeout_s: float) -> bool:
        """Let go of NVML (a GPU reset is coming; NVIDIA refuses one while any process holds
        the GPU) and wait until it is let go; False if that took longer than `timeout_s`.
        What was seen is kept."""
        with self._state:
            self._paused = True
            self._state.notify_all()
            return self._state.wait_for(lambda: not self._holding, timeout_s)

    def resume(self) -> None:
        with self._state:
            self._paused = False
            self._state.notify_all()

    def _go_on(self) -> bool:
        return not (self._stopping or self._paused)

    def run(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._stopping or not self._paused)
                if self._stopping:
                    return
                self._holding = True
            try:
                self._hold_and_watch()
            finally:
                with self._state:
                    self._holding = False
                    self._state.notify_all()
                    self._state.wait_for(lambda: not self._go_on(), self._retry_s)

    def _hold_and_watch(self) -> None:
        try:
            self._nvml.nvmlInit()
        except Exception as exc:
            self._log.warning("agent_xid_watch_unavailable", error=_describe(exc))
            return
        try:
            self._watch()
        except Exception as exc:  # a driver surprise must not end the agent
            self._log.warning("agent_xid_watch_failed", error=_describe(exc))
        finally:
            self.watching.clear()
            _quietly(self._nvml.nvmlShutdown)

    def _watch(self) -> None:
        nvml = self._nvml
        event_set = nvml.nvmlEventSetCreate()
        try:
            buses = self._register(event_set)
            if not buses:
                self._log.warning("agent_xid_watch_no_gpu")
                return
            self._log.info("agent_xid_watching", gpus=len(buses))
            self.watching.set()
            while self._go_on():
                try:
                    event = nvml.nvmlEventSetWait_v2(event_set, self._poll_ms)
                except nvml.NVMLError as exc:
                    if getattr(exc, "value", None) == _TIMEOUT:
                        continue
                    self._log.warning("agent_xid_wait_failed", error=_describe(exc))
                    return
                self._record(event, buses)
        finally:
            _quietly(nvml.nvmlEventSetFree, event_set)

    def _register(self, event_set: Any) -> dict[int, str | None]:
        """Register every GPU that supports XID events: NVML index -> kernel-form bus id."""
        nvml = self._nvml
        wanted = nvml.nvmlEventTypeXidCriticalError
        buses: dict[int, str | None] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                bus = _kernel_bdf(nvml.nvmlDeviceGetPciInfo(handle).busId)
                if nvml.nvmlDeviceGetSupportedEventTypes(handle) & wanted:
                    nvml.nvmlDeviceRegisterEvents(handle, wanted, event_set)
                    buses[index] = bus
            except nvml.NVMLError as exc:  # a lost GPU: gpu.lost reports it, not this
                self._log.debug("agent_xid_register_failed", gpu=index, error=_describe(exc))
        return buses

    def _record(self, event: Any, buses: dict[int, str | None]) -> None:
        if not int(event.eventType) & self._nvml.nvmlEventTypeXidCriticalError:
            return
        xid = int(event.eventData)
        try:
            bus = buses.get(int(self._nvml.nvmlDeviceGetIndex(event.device)))
        except Exception:
            bus = None
        seen = KernelEvent(
            node=self._node,
            time=self._clock(),
            source=Source.ROOT,
            event=KernelEventKind.XID,
            xid=xid,
            pci_bus_id=bus,
            detail=f"NVML event: XID {xid}",
        )
        with self._lock:
            (self._job_made if xid in JOB_MADE_XIDS else self._others).append(seen)
        self._log.warning("agent_xid_event", xid=xid, pci_bus_id=bus)
        if self._on_xid is not None:
            self._on_xid()


def _seen_at(event: KernelEvent) -> float:
    return event.time if event.time is not None else 0.0


def _kernel_bdf(bus_id: Any) -> str | None:
    """NVML's `00000000:5D:00.0` in the kernel log's form, `0000:5d:00` (a GPU is
    function 0), as attribution.kernel writes KernelEvent.pci_bus_id."""
    canonical = canonical_bus_id(bus_id)
    return canonical.rsplit(".", 1)[0] if canonical else None


def _describe(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]


def _quietly(func: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(Exception):
        func(*args)
