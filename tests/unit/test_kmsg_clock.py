"""/dev/kmsg's stamps are dated by the kernel's clock as measured with a mark, not by
CLOCK_MONOTONIC, which drifts from it (node-problem-detector#479); the measure is kept an
hour per boot, and a reader that cannot measure dates records as `dmesg -T` does."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from slurm_triage.config import Config, HealthConfig, PathsConfig
from slurm_triage.health_checks import kernel_log, kmsg_clock
from slurm_triage.health_checks.result import CheckStatus
from slurm_triage.health_checks.runner import FactSources
from slurm_triage.prolog_epilog.epilog import collect
from slurm_triage.prolog_epilog.job_end import JobEnd

NODE = "gpu17"
XID_79 = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


class FakeKmsg:
    """/dev/kmsg as the kernel serves it: records `prio,seq,usec,flags;message` stamped by
    a clock `ahead_s` ahead of CLOCK_MONOTONIC; a write's `<N>` sets level and facility,
    facility 0 becoming user (1) as devkmsg_write makes it. `refuse`: the writer is not root;
    `drop`: printk_devkmsg=off, which accepts a write and logs nothing."""

    def __init__(self, ahead_s: float, *, refuse: bool = False, drop: bool = False) -> None:
        self.ahead_s, self.refuse, self.drop = ahead_s, refuse, drop
        self.records: list[str] = []
        self.writes = 0

    def kernel_now(self) -> float:
        return time.clock_gettime(time.CLOCK_MONOTONIC) + self.ahead_s

    def printk(self, ago_s: float, message: str, prio: int = 3) -> None:
        """A kernel line printed `ago_s` seconds ago."""
        usec = int((self.kernel_now() - ago_s) * 1e6)
        self.records.append(f"{prio},{len(self.records)},{usec},-;{message}")

    def write(self, path: str, text: str) -> None:
        assert path == "/dev/kmsg"
        if self.refuse:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        self.writes += 1
        if self.drop:
            return
        prio, message = 13, text  # LOG_USER | LOG_NOTICE: no <N>
        if text.startswith("<") and ">" in text:
            number, message = text[1:].split(">", 1)
            level, facility = int(number) & 7, int(number) >> 3
            prio = (facility or 1) << 3 | level
        self.printk(0, message.rstrip("\n"), prio)

    def install(self, mp: pytest.MonkeyPatch) -> FakeKmsg:
        mp.setattr(kmsg_clock, "write_record", self.write)
        mp.setattr(kernel_log, "_read_kmsg", lambda path: list(self.records))
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
    fresh = FakeKmsg(-900).install(monkeypatch)
    fresh.printk(120, XID_79)
    events = kernel_log.read_kernel_events("/dev/kmsg", NODE, clock_cache=str(cache))
    assert kernel_log.check_xid(events, HealthConfig(), now).status is CheckStatus.FAIL


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
    assert kept["ahead_s"] == pytest.approx(300, abs=0.1)
    assert read(cache) == read(cache)
    assert kmsg.writes == 1

    stale = time.time() - kmsg_clock.MAX_AGE_S - 1
    cache.write_text(json.dumps({**kept, "measured_at": stale}))
    read(cache)
    assert kmsg.writes == 2
    boot.write_text("1d9a7c3e-5b2f-4e8a-b1c4-7e6d5f4a3b2c\n")
    read(cache)
    assert kmsg.writes == 3
    assert json.loads(cache.read_text())["boot_id"].startswith("1d9a7c3e")


@pytest.mark.parametrize("kmsg", [FakeKmsg(900, refuse=True), FakeKmsg(900, drop=True)])
def test_a_reader_that_cannot_measure_dates_records_as_dmesg_does(
    kmsg: FakeKmsg, tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not root, or printk_devkmsg=off: no measure and nothing kept; records are dated by
    CLOCK_MONOTONIC, as before."""
    kmsg.install(monkeypatch)
    kmsg.printk(120, XID_79)
    cache = tmp_path / "clock.json"
    [when] = read(cache)
    assert when == pytest.approx(time.time() - 120 + 900, abs=0.5)
    assert not cache.exists()


def test_only_the_mark_this_read_wrote_measures_the_clock() -> None:
    """A kernel line quoting the mark's text (a user's string the kernel printed) and an
    earlier mark with another nonce measure nothing: only our nonce at facility user does."""
    mark = kmsg_clock.Mark("c0ffee", monotonic_before=100.0, monotonic_after=100.2)
    records = [
        f"15,1,999000000,-;{kmsg_clock.MARK_TEXT}5ca1ab1e",
        f"3,2,555000000,-;{kmsg_clock.MARK_TEXT}c0ffee",
        f"12,3,444000000,-;{kmsg_clock.MARK_TEXT}c0ffee",
    ]
    assert kmsg_clock.read_mark(records, mark) is None
    records.append(f"15,4,400100000,-;{kmsg_clock.MARK_TEXT}c0ffee")
    measured = kmsg_clock.read_mark(records, mark)
    assert measured == kmsg_clock.KmsgClock(pytest.approx(300.0), measured=True)


def test_a_kept_measure_anyone_else_could_write_is_not_used(tmp_path: Path, boot: Path) -> None:
    """A cache that is group- or world-writable, a symlink, or not JSON is measured again."""
    now = time.time()
    cache = tmp_path / "clock.json"
    clock = kmsg_clock.KmsgClock(42.0, measured=True)
    kmsg_clock.save(cache, kmsg_clock.boot_id(), clock, now)
    assert kmsg_clock.load(cache, kmsg_clock.boot_id(), now) == clock
    assert cache.stat().st_mode & 0o777 == 0o644
    os.chmod(cache, 0o666)
    assert kmsg_clock.load(cache, kmsg_clock.boot_id(), now) is None
    os.chmod(cache, 0o644)
    link = tmp_path / "link.json"
    link.symlink_to(cache)
    assert kmsg_clock.load(link, kmsg_clock.boot_id(), now) is None
    cache.write_text("{not json")
    assert kmsg_clock.load(cache, kmsg_clock.boot_id(), now) is None


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
