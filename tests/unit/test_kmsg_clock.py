"""/dev/kmsg's stamps are dated by the kernel's clock as measured with a mark, not by
CLOCK_MONOTONIC, which drifts from it (node-problem-detector#479); the measures are kept per
boot and retaken hourly, a jump between two of them never makes an old line fresh, and a
reader that cannot measure dates records as `dmesg -T` does."""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_triage.config import Config, HealthConfig, PathsConfig
from slurm_triage.health_checks import kernel_log, kmsg_clock
from slurm_triage.health_checks.result import CheckStatus
from slurm_triage.health_checks.runner import FactSources
from slurm_triage.prolog_epilog.epilog import collect
from slurm_triage.prolog_epilog.job_end import JobEnd

NODE = "gpu17"
XID_48 = "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python, DBE (0x1)"
XID_79 = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


class FakeKmsg:
    """/dev/kmsg as the kernel serves it: records `prio,seq,usec,flags;message` stamped by
    a clock `ahead_s` ahead of CLOCK_MONOTONIC; a write's `<N>` sets level and facility,
    facility 0 becoming user (1) as devkmsg_write makes it. `refuse`: the writer is not
    root. `cap`: records past it are not read (kernel_log.MAX_KMSG_READS). `unreadable`:
    the reader may write but not read (dmesg_restrict=1 without CAP_SYSLOG)."""

    def __init__(self, ahead_s: float, *, refuse: bool = False, cap: int | None = None) -> None:
        self.ahead_s, self.refuse, self.cap = ahead_s, refuse, cap
        self.unreadable = False
        self.records: list[str] = []
        self.writes = 0

    def kernel_now(self) -> float:
        return time.clock_gettime(time.CLOCK_MONOTONIC) + self.ahead_s

    def printk(self, ago_s: float, message: str, prio: int = 3) -> None:
        """A kernel line printed `ago_s` seconds ago (by the clock's lead of now)."""
        usec = int((self.kernel_now() - ago_s) * 1e6)
        self.records.append(f"{prio},{len(self.records)},{usec},-;{message}")

    def write(self, path: str, text: str) -> None:
        assert path == "/dev/kmsg"
        if self.refuse:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        self.writes += 1
        prio, message = 13, text  # LOG_USER | LOG_NOTICE: no <N>
        if text.startswith("<") and ">" in text:
            number, message = text[1:].split(">", 1)
            level, facility = int(number) & 7, int(number) >> 3
            prio = (facility or 1) << 3 | level
        self.printk(0, message.rstrip("\n"), prio)

    def read(self, path: str, before_read: Callable[[], object] | None = None) -> list[str]:
        assert path == "/dev/kmsg"
        if self.unreadable:  # dmesg_restrict=1 without CAP_SYSLOG: open(O_RDONLY) fails
            raise PermissionError(errno.EPERM, "Operation not permitted", path)
        if before_read is not None:
            before_read()
        return list(self.records[: self.cap])

    def install(self, mp: pytest.MonkeyPatch) -> FakeKmsg:
        mp.setattr(kmsg_clock, "write_record", self.write)
        mp.setattr(kernel_log, "_read_kmsg", self.read)
        return self


@pytest.fixture
def boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This host's boot id, as /proc/sys/kernel/random/boot_id holds it."""
    path = tmp_path / "boot_id"
    path.write_text("6f1c2b1e-0d1f-4a52-9d2c-3c7f5b2a9e01\n")
    monkeypatch.setattr(kmsg_clock, "BOOT_ID", path)
    return path


def read(cache: Path | None) -> list[float]:
    events = kernel_log.read_kernel_events("/dev/kmsg", NODE, clock_cache=str(cache or ""))
    return [e.time for e in events if e.time is not None]


@pytest.mark.parametrize("ahead_s", [900.0, -900.0, 0.25])
def test_a_record_is_dated_by_the_kernels_clock_however_far_it_drifted(
    ahead_s: float, tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An XID printed 2 minutes ago is dated 2 minutes ago when the kernel's clock runs 15
    minutes ahead of or behind CLOCK_MONOTONIC; dated as `dmesg -T` dates it, it is off by
    just that drift."""
    kmsg = FakeKmsg(ahead_s).install(monkeypatch)
    kmsg.printk(120, XID_79)
    [measured] = read(tmp_path / "clock.json")
    assert measured == pytest.approx(time.time() - 120, abs=0.5)
    [assumed] = read(None)
    assert assumed == pytest.approx(time.time() - 120 + ahead_s, abs=0.5)


def test_an_old_xid_does_not_fail_the_node_when_the_kernels_clock_runs_ahead(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """XID 79 from 20 minutes ago, a kernel clock 15 minutes ahead: without the measure it
    looks 5 minutes old and fails gpu.xid; measured, it is outside the window. A fresh one
    under a clock 15 minutes behind fails the node (it looked 17 minutes old)."""
    now = time.time()
    old = FakeKmsg(900).install(monkeypatch)
    old.printk(1200, XID_79)
    cache = tmp_path / "clock.json"
    events = kernel_log.read_kernel_events("/dev/kmsg", NODE, clock_cache=str(cache))
    assert kernel_log.check_xid(events, HealthConfig(), now).status is CheckStatus.OK
    assumed = kernel_log.read_kernel_events("/dev/kmsg", NODE)
    assert kernel_log.check_xid(assumed, HealthConfig(), now).status is CheckStatus.FAIL

    cache.unlink()
    kernel_log._tried.clear()  # as in the next Prolog's process
    fresh = FakeKmsg(-900).install(monkeypatch)
    fresh.printk(120, XID_79)
    events = kernel_log.read_kernel_events("/dev/kmsg", NODE, clock_cache=str(cache))
    assert kernel_log.check_xid(events, HealthConfig(), now).status is CheckStatus.FAIL


def stale(cache: Path) -> None:
    """Make the kept measures an hour and a second old."""
    kept = json.loads(cache.read_text())
    kept["tried_at"] = time.time() - kmsg_clock.MAX_AGE_S - 1
    cache.write_text(json.dumps(kept))
    kernel_log._tried.clear()  # as in the next Prolog's process


def test_the_mark_is_written_once_an_hour_per_boot_and_is_no_event(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first read writes a mark and keeps the measure; the next reads use it without a
    mark, until it is an hour old or the node has booted again. The mark (facility user) is
    never a kernel event."""
    kmsg = FakeKmsg(300).install(monkeypatch)
    kmsg.printk(60, XID_79)
    cache = tmp_path / "clock.json"
    assert len(read(cache)) == 1
    assert kmsg.writes == 1
    kept = json.loads(cache.read_text())
    assert kept["boot_id"] == boot.read_text().strip()
    [[seq, ahead]] = kept["measures"]
    assert (seq, ahead) == (1, pytest.approx(300, abs=0.1))
    kernel_log._tried.clear()
    assert read(cache) == pytest.approx(read(cache), abs=0.01)
    assert kmsg.writes == 1

    stale(cache)
    read(cache)
    assert kmsg.writes == 2
    assert [s for s, _ in json.loads(cache.read_text())["measures"]] == [1, 2]
    boot.write_text("1d9a7c3e-5b2f-4e8a-b1c4-7e6d5f4a3b2c\n")
    read(cache)
    assert kmsg.writes == 3
    kept = json.loads(cache.read_text())
    assert kept["boot_id"].startswith("1d9a7c3e") and len(kept["measures"]) == 1


def test_a_line_from_before_a_clock_jump_stays_old(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kmsg clock stood still for 10 of the last 10 hours and 2 minutes (a VM paused):
    an XID 48 from before the pause is dated by the mark before it, 10 hours ago, and fails
    nothing; one printed after the next mark is dated by that mark's lead and fails the node.
    A line between the two marks is dated by the larger lead (older), never the fresher."""
    now = time.time()
    kmsg = FakeKmsg(50_000).install(monkeypatch)
    kmsg.printk(36_120, XID_48)
    cache = tmp_path / "clock.json"
    [before] = read(cache)  # an hourly read, before the pause
    assert before == pytest.approx(now - 36_120, abs=0.5)
    kmsg.ahead_s -= 36_000  # the pause: CLOCK_MONOTONIC went on, the kmsg clock did not
    kmsg.printk(60, XID_79)  # after the pause, before the next mark
    stale(cache)
    events = kernel_log.read_kernel_events("/dev/kmsg", NODE, clock_cache=str(cache))
    assert [round(now - e.time, -1) for e in events] == [36_120, 36_060]
    assert kernel_log.check_xid(events, HealthConfig(), now).status is CheckStatus.OK
    kmsg.printk(30, XID_79)  # after the new mark
    events = kernel_log.read_kernel_events("/dev/kmsg", NODE, clock_cache=str(cache))
    assert round(now - events[-1].time) == 30
    assert kernel_log.check_xid(events, HealthConfig(), now).status is CheckStatus.FAIL


def test_a_measure_that_failed_is_tried_again_only_an_hour_later(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mark the read did not reach (past MAX_KMSG_READS), or a cache that cannot be
    written: one mark, not one per read. The agent rereads every 10 s."""
    kmsg = FakeKmsg(600, cap=1).install(monkeypatch)
    kmsg.printk(60, XID_79)
    cache = tmp_path / "clock.json"
    for _ in range(3):
        read(cache)
    assert kmsg.writes == 1
    assert json.loads(cache.read_text())["measures"] == []
    unwritable = tmp_path / "file" / "clock.json"
    (tmp_path / "file").write_text("")  # its directory is a file
    kmsg.cap = None
    for _ in range(3):
        assert len(read(unwritable)) == 1
    assert kmsg.writes == 2


def test_a_reader_that_may_write_but_not_read_writes_no_mark(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root without CAP_SYSLOG under dmesg_restrict=1 (a container given /dev/kmsg) may
    write to the kernel's log but not read it: every read fails, and writes no mark."""
    kmsg = FakeKmsg(0).install(monkeypatch)
    kmsg.unreadable = True
    for _ in range(3):
        with pytest.raises(PermissionError):
            read(tmp_path / "clock.json")
    assert kmsg.writes == 0


def test_a_slow_mark_is_written_again_at_once(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that flushed a console backlog took too long to tell when the kernel stamped
    it: a second mark is written at once, and it measures the clock."""
    kmsg = FakeKmsg(-900).install(monkeypatch)
    kmsg.printk(120, XID_79)
    fake_write = kmsg.write

    def first_slow(path: str, text: str) -> None:
        fake_write(path, text)
        if kmsg.writes == 1:
            time.sleep(kmsg_clock.MAX_WRITE_S * 2)

    monkeypatch.setattr(kmsg_clock, "write_record", first_slow)
    [when] = read(tmp_path / "clock.json")
    assert kmsg.writes == 2
    assert when == pytest.approx(time.time() - 120, abs=0.5)


def test_a_reader_that_may_not_write_dates_records_as_dmesg_does(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not root: no measure and nothing kept; records are dated by CLOCK_MONOTONIC, as
    before. (printk_devkmsg=off refuses readers too: no kernel log to date.)"""
    FakeKmsg(900, refuse=True).install(monkeypatch).printk(120, XID_79)
    cache = tmp_path / "clock.json"
    [when] = read(cache)
    assert when == pytest.approx(time.time() - 120 + 900, abs=0.5)
    assert not cache.exists()


def test_only_the_mark_this_read_wrote_measures_the_clock() -> None:
    """A kernel line quoting the mark's text (a user's string the kernel printed) and an
    earlier mark with another nonce measure nothing: only our nonce at facility user does,
    and only when the write was quick enough to tell when the kernel stamped it."""
    mark = kmsg_clock.Mark("c0ffee", monotonic_before=100.0, monotonic_after=100.001)
    records = [
        f"15,1,999000000,-;{kmsg_clock.MARK_TEXT}5ca1ab1e",
        f"3,2,555000000,-;{kmsg_clock.MARK_TEXT}c0ffee",
        f"12,3,444000000,-;{kmsg_clock.MARK_TEXT}c0ffee",
    ]
    assert kmsg_clock.read_mark(records, mark) is None
    records.append(f"15,4,400000100,-;{kmsg_clock.MARK_TEXT}c0ffee")
    measured = kmsg_clock.read_mark(records, mark)
    assert measured == kmsg_clock.Measure(4, pytest.approx(300.0001))
    slow = kmsg_clock.Mark("c0ffee", monotonic_before=100.0, monotonic_after=100.2)
    assert kmsg_clock.read_mark(records, slow) is None


def test_a_kept_measure_anyone_else_could_write_is_not_used(tmp_path: Path, boot: Path) -> None:
    """A cache that is group- or world-writable, a symlink, or not JSON is measured again."""
    cache = tmp_path / "clock.json"
    kept = kmsg_clock.Kept(kmsg_clock.KmsgClock((kmsg_clock.Measure(9, 42.0),)), time.time())
    assert kmsg_clock.save(cache, kmsg_clock.boot_id(), kept)
    assert kmsg_clock.load(cache, kmsg_clock.boot_id()) == kept
    assert cache.stat().st_mode & 0o777 == 0o644
    os.chmod(cache, 0o666)
    assert kmsg_clock.load(cache, kmsg_clock.boot_id()) is None
    os.chmod(cache, 0o644)
    link = tmp_path / "link.json"
    link.symlink_to(cache)
    assert kmsg_clock.load(link, kmsg_clock.boot_id()) is None
    cache.write_text("{not json")
    assert kmsg_clock.load(cache, kmsg_clock.boot_id()) is None


def test_the_epilog_and_the_checks_keep_the_measure_where_the_config_says(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`health.kernel_clock_cache` ({node} expanded) is where both the Epilog's record and
    the checks' kernel source keep the measure; the Epilog's XID is dated by it."""
    kmsg = FakeKmsg(-900).install(monkeypatch)
    kmsg.printk(120, XID_79)
    health = HealthConfig(
        kernel_log="/dev/kmsg",
        kernel_clock_cache=str(tmp_path / "{node}.clock.json"),
        expected_gpus=0,
    )
    config = Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        health=health,
    )
    now = time.time()
    rec = collect(config, JobEnd(job_id=5, node=NODE, uid=1000, ended_at=now), now)
    assert (tmp_path / f"{NODE}.clock.json").exists()
    assert kmsg.writes == 1
    xids = [f for f in rec.facts if getattr(f, "xid", None) == 79]
    assert [round(f.time) for f in xids] == [round(now - 120)]
    events = FactSources(health, NODE, timeout_s=5).get("kernel")
    assert [round(e.time) for e in events] == [round(now - 120)]
    assert kmsg.writes == 1


def test_a_read_keeps_the_rings_newest_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kmsg reader starts at the ring's oldest record: past MAX_KMSG_RECORDS, the newest
    are kept (a clock mark, a fresh XID), not the oldest. One read, one record, as
    devkmsg_read serves them (a SEQPACKET socket here); EAGAIN ends the read."""
    monkeypatch.setattr(kernel_log, "MAX_KMSG_RECORDS", 3)
    ours, kernels = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, kernels:
        for seq in range(8):
            kernels.send(f"6,{seq},{seq * 1000},-;line {seq}\n SUBSYSTEM=x\n".encode())
        ours.setblocking(False)
        lines = kernel_log.read_records(ours.fileno())
    assert lines == ["6,5,5000,-;line 5", "6,6,6000,-;line 6", "6,7,7000,-;line 7"]
