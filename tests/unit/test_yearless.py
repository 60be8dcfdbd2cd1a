"""Stamps written without their year (syslog's, glog's) read around New Year: a line of
31 December read on 1 January is last year's, not a year ahead (review: a fresh XID or NCCL
watchdog line was dropped from the window for the first hours of each year)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from slurm_triage.attribution import parse_kernel_lines, scan_lines
from slurm_triage.attribution.yearless import AHEAD_S, yearless_epoch
from slurm_triage.evidence import KernelEventKind, LogHit


def _moment(ahead_s: float) -> datetime:
    return datetime.fromtimestamp(int(time.time() + ahead_s), UTC)


def _clock(moment: datetime) -> tuple[int, int, int, int]:
    return (moment.hour, moment.minute, moment.second, 0)


def _year_before(moment: datetime) -> float:
    return moment.replace(year=moment.year - 1).timestamp()


def test_a_stamp_ahead_by_more_than_a_day_is_last_years() -> None:
    ahead = _moment(2 * AHEAD_S)
    got = yearless_epoch(ahead.year, ahead.month, ahead.day, _clock(ahead), UTC)
    assert got == _year_before(ahead)


def test_a_stamp_a_little_ahead_is_this_years() -> None:
    """Another node's clock an hour ahead of this one: still this year."""
    ahead = _moment(3600)
    got = yearless_epoch(ahead.year, ahead.month, ahead.day, _clock(ahead), UTC)
    assert got == ahead.timestamp()


def test_no_such_day_is_no_time() -> None:
    assert yearless_epoch(2026, 2, 30, (0, 0, 0, 0), UTC) is None


def test_a_syslog_xid_of_31_december_read_on_1_january() -> None:
    """The kernel log's syslog form: the XID is dated last year, minutes old, not next year."""
    ahead = _moment(2 * AHEAD_S)
    stamp = f"{ahead:%b} {ahead.day:2d} {ahead:%H:%M:%S}"  # syslog pads the day with a space
    line = f"{stamp} node1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', GPU has fallen"
    (event,) = parse_kernel_lines([line], year=ahead.year, tz=UTC)
    assert (event.event, event.time) == (KernelEventKind.XID, _year_before(ahead))


def test_a_glog_watchdog_line_of_31_december_read_on_1_january() -> None:
    ahead = _moment(2 * AHEAD_S)
    line = (
        f"[rank0]:[E{ahead:%m%d %H:%M:%S}.408271257 ProcessGroupNCCL.cpp:616] [Rank 0] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
        "Timeout(ms)=600000) ran for 600043 milliseconds before timing out."
    )
    (hit,) = [
        f for f in scan_lines([line], node="n1", year=ahead.year, tz=UTC) if isinstance(f, LogHit)
    ]
    assert hit.time is not None
    assert abs(hit.time - (_year_before(ahead) + 0.408271)) < 1e-3
    assert abs(hit.time - (ahead - timedelta(days=365)).timestamp()) < 2 * 86400
