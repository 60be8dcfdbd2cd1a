"""The node agent's XID watcher (agent.xids) against the simulated estate's NVML, which
behaves as libnvidia-ml does: events only after registration, NVML_ERROR_TIMEOUT when the
wait ends with none, init errors as NVMLError subclasses."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_triage.agent.xids import XidWatch
from slurm_triage.evidence import KernelEventKind, Source
from slurm_triage.simulate.estate import NodeEstate, inject
from slurm_triage.simulate.fake_pynvml import FakeNvml


@pytest.fixture
def estate(tmp_path: Path) -> NodeEstate:
    return NodeEstate(tmp_path / "sim", "node1").ensure()


@pytest.fixture
def watch(estate: NodeEstate) -> Iterator[XidWatch]:
    watcher = XidWatch(FakeNvml(estate.nvml_state), "node1", window_s=600, poll_ms=50)
    watcher.start()
    assert watcher.watching.wait(10), "the watcher never registered the GPUs"
    yield watcher
    watcher.stop()


def _until(predicate, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_an_xid_after_registration_is_a_root_kernel_event(
    estate: NodeEstate, watch: XidWatch
) -> None:
    """XID 48 on GPU 3 becomes an XID kernel event of root's, on GPU 3's bus id in the
    kernel log's form, dated when it came."""
    before = time.time()
    inject(estate, "xid", 48, gpu=3)
    _until(lambda: watch.recent())
    (event,) = watch.recent()
    bus = estate.load()["gpus"][3]["bus_id"].lower()[4:].rsplit(".", 1)[0]
    assert (event.event, event.xid, event.pci_bus_id) == (KernelEventKind.XID, 48, bus)
    assert event.source is Source.ROOT and event.node == "node1"
    assert event.time is not None and before <= event.time <= time.time()


def test_events_before_the_watch_began_are_not_seen(estate: NodeEstate) -> None:
    """NVML reports only what happens after registration (as the real library)."""
    inject(estate, "xid", 79, gpu=1)
    watcher = XidWatch(FakeNvml(estate.nvml_state), "node1", window_s=600, poll_ms=50)
    watcher.start()
    try:
        assert watcher.watching.wait(10)
        time.sleep(0.3)
        assert watcher.recent() == ()
    finally:
        watcher.stop()


def test_what_is_older_than_the_window_is_forgotten(estate: NodeEstate) -> None:
    now = [1000.0]
    watcher = XidWatch(
        FakeNvml(estate.nvml_state), "node1", window_s=60, poll_ms=50, clock=lambda: now[0]
    )
    watcher.start()
    try:
        assert watcher.watching.wait(10)
        inject(estate, "xid", 13, gpu=0)
        _until(lambda: watcher.recent())
        now[0] += 61
        assert watcher.recent() == ()
    finally:
        watcher.stop()


def test_nvml_that_cannot_start_is_retried_not_fatal(estate: NodeEstate) -> None:
    """With the driver unloaded the watcher keeps trying; once it loads, it watches."""
    inject(estate, "driver_unloaded")
    watcher = XidWatch(FakeNvml(estate.nvml_state), "node1", window_s=600, poll_ms=50, retry_s=0.05)
    watcher.start()
    try:
        time.sleep(0.3)
        assert watcher.is_alive() and not watcher.watching.is_set()
        inject(estate, "clear")
        assert watcher.watching.wait(10)
        inject(estate, "xid", 13, gpu=0)
        _until(lambda: watcher.recent())
    finally:
        watcher.stop()
    assert not watcher.is_alive()


def test_a_storm_of_application_xids_keeps_the_fatal_xid_before_it() -> None:
    """More XID 13 events than MAX_EVENTS after an XID 48: the 48 is still seen, with the
    newest MAX_EVENTS of the storm, in the order they came."""
    from types import SimpleNamespace

    from slurm_triage.agent.xids import MAX_EVENTS

    critical = 8  # nvmlEventTypeXidCriticalError
    nvml = SimpleNamespace(
        nvmlEventTypeXidCriticalError=critical, nvmlDeviceGetIndex=lambda device: device
    )
    now = [1000.0]
    watcher = XidWatch(nvml, "node1", window_s=600, clock=lambda: now[0])
    buses = {0: "0000:18:00", 3: "0000:5d:00"}

    def event(xid: int, gpu: int) -> None:
        now[0] += 0.01
        watcher._record(SimpleNamespace(eventType=critical, eventData=xid, device=gpu), buses)

    event(48, 3)
    for _ in range(MAX_EVENTS + 20):
        event(13, 0)
    seen = watcher.recent()
    assert [e.xid for e in seen] == [48] + [13] * MAX_EVENTS
    assert [e.time for e in seen] == sorted(e.time for e in seen)  # type: ignore[type-var]
