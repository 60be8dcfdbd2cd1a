"""Watch NVML XID and ECC events for the step's GPUs while the child runs (one thread).

NVML only reports events that happen after registration (signatures.md §2.3), so this is
the one place that sees an XID the moment it hits a running job. The thread blocks in
nvmlEventSetWait (ctypes releases the GIL), wakes every `poll_ms` to check for a stop, and
on stop drains what is already queued. It never affects the child: an NVML that cannot
start (no driver, a CPU-only node) is one log line, and the watcher ends.

The facts it produces are user-collected (the wrapper runs as the job's user), so they can
requeue the job and exclude a node, never drain one (TAXONOMY.md rule 3).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from slurm_triage.evidence import NvmlCondition, NvmlFact, Source
from slurm_triage.logs import get_logger

MAX_FACTS = 100
POLL_MS = 500
_LOST = 15  # NVML_ERROR_GPU_IS_LOST
_TIMEOUT = 10  # NVML_ERROR_TIMEOUT
_NOT_SUPPORTED = 3


class NvmlWatcher(threading.Thread):
    """Collects `NvmlFact`s for XID / double-bit ECC / GPU-lost events until stopped."""

    def __init__(
        self,
        load: Callable[[], Any],
        node: str,
        gpus: tuple[int, ...] | None,
        *,
        gpus_expected: bool,
        poll_ms: int = POLL_MS,
        block_signals: tuple[int, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name="slurm-triage-nvml", daemon=True)
        self._load, self._node, self._gpus = load, node, gpus
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
        indices = self._gpus if self._gpus is not None else range(nvml.nvmlDeviceGetCount())
        handles: dict[int, Any] = {}
        for index in indices:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                mask = nvml.nvmlDeviceGetSupportedEventTypes(handle) & wanted
                if mask:
                    nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
                    handles[index] = handle
            except nvml.NVMLError as exc:
                if _code(exc) == _LOST:
                    self._add(NvmlCondition.GPU_LOST, index, None, "GPU lost at wrapper start")
                elif _code(exc) != _NOT_SUPPORTED:
                    self._log.debug("nvml_register_failed", gpu=index, error=_describe(exc))
        return handles

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
        if kind & nvml.nvmlEventTypeXidCriticalError:
            self._add(NvmlCondition.XID_EVENT, index, data, f"NVML event: XID {data}")
        elif kind & nvml.nvmlEventTypeDoubleBitEccError:
            self._add(NvmlCondition.ECC_UNCORRECTED, index, data, "NVML event: double-bit ECC")
        else:
            self._add(NvmlCondition.GPU_LOST, index, data, f"NVML event type {kind:#x}")

    def _add(self, condition: NvmlCondition, gpu: int | None, value: int | None, why: str) -> None:
        if len(self.facts) >= MAX_FACTS:
            self.dropped += 1  # a flapping GPU must not grow the record without bound
            return
        self.facts.append(
            NvmlFact(
                node=self._node,
                time=self._clock(),
                source=Source.USER,
                condition=condition,
                gpu=None if gpu is None else str(gpu),
                value=value,
                detail=why,
            )
        )


def _device_index(nvml: Any, device: Any) -> int | None:
    """The NVML index of an event's device; the simulated estate's handles carry it."""
    try:
        return int(nvml.nvmlDeviceGetIndex(device))
    except Exception:
        index = getattr(device, "index", None)
        return index if isinstance(index, int) else None


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _describe(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]


def _quietly(func: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(Exception):
        func(*args)
