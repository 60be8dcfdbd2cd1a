"""The wrapper reads its tails' naive stamps in the node's local zone, as the decision reads
the job's output: read as UTC, its facts left the decision's window on a non-UTC cluster."""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator

import pytest

from slurm_triage.wrapper.record import _scan_tails

# glog as PyTorch's C++ prints it, in US Central time (UTC-6 in November)
LINE = (
    b"[rank0]:[E1124 05:42:15.123456 1 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    b"collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
    b"NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.\n"
)


@pytest.fixture
def chicago(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "CST6CDT,M3.2.0,M11.1.0")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_wrappers_stamp_is_read_in_the_nodes_zone(chicago: None) -> None:
    hits, _ = _scan_tails([(LINE, True)], "node1", 2026)
    (hit,) = hits
    assert hit.time == pytest.approx(calendar.timegm((2026, 11, 24, 11, 42, 15)) + 0.123456)
