"""The kernel log as a file (issue 14, item 7): journalctl's and dmesg's time formats are read
with their time; a line without a time, or not written by the kernel, never drains a node."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_triage.attribution import parse_kernel_lines
from slurm_triage.attribution.kernel_lines import split_line
from slurm_triage.config import HealthConfig
from slurm_triage.health_checks import kernel_log
from slurm_triage.health_checks.result import Action, CheckStatus

T0 = datetime(2024, 11, 21, 10, 0, 0, tzinfo=UTC).timestamp()
XID79 = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


def split(line: str):  # type: ignore[no-untyped-def]
    return split_line(line, year=2024, tz=UTC, boot_time=None)


@pytest.mark.parametrize(
    ("line", "when"),
    [
        # journalctl -o short-precise
        (f"Nov 21 10:00:00.250000 node07 kernel: {XID79}", T0 + 0.25),
        # journalctl -o short-full
        (f"Thu 2024-11-21 10:00:00 UTC node07 kernel: {XID79}", T0),
        (f"Thu 2024-11-21 11:00:00 +0100 node07 kernel: {XID79}", T0),
        # journalctl -o short-iso / short-iso-precise (rsyslog's RFC 3339 too)
        (f"2024-11-21T10:00:00+0000 node07 kernel: {XID79}", T0),
        (f"2024-11-21T10:00:00.123456+00:00 node07 kernel: {XID79}", T0 + 0.123456),
        # journalctl -o short-unix
        (f"1732183200.500000 node07 kernel: {XID79}", T0 + 0.5),
        # dmesg --time-format=iso, alone and with -x (util-linux; gpud's dmesg parser tests)
        (f"2024-11-21T10:00:00,123456+00:00 {XID79}", T0 + 0.123456),
        (f"kern  :warn  : 2024-11-21T11:00:00,000001+01:00 {XID79}", T0 + 0.000001),
    ],
)
def test_time_formats_are_dated_and_read(line: str, when: float) -> None:
    """Each form gives the event with its wall-clock time."""
    parsed = split(line)
    assert parsed.kernel and parsed.message == XID79
    assert parsed.time == pytest.approx(when)
    (event,) = parse_kernel_lines([line], year=2024)
    assert (event.xid, event.time) == (79, pytest.approx(when))


def test_short_full_with_a_zone_we_cannot_place_has_no_time() -> None:
    """A zone abbreviation that is neither UTC, a number, nor this host's is not guessed."""
    assert split(f"Thu 2024-11-21 10:00:00 XST node07 kernel: {XID79}").time is None


@pytest.mark.parametrize(
    "line",
    [
        # `logger -t kernel` through journald / rsyslog imjournal: the sender's pid follows
        f"Nov 21 10:00:00 node07 kernel[4242]: {XID79}",
        f"Nov 21 10:00:00.250000 node07 kernel[4242]: {XID79}",
        f"Thu 2024-11-21 10:00:00 UTC node07 kernel[4242]: {XID79}",
        f"2024-11-21T10:00:00.123456+00:00 node07 kernel[4242]: {XID79}",
        f"1732183200.500000 node07 kernel[4242]: {XID79}",
        # plain `logger`
        f"Nov 21 10:00:00.250000 node07 alice[4242]: {XID79}",
        f"Nov 21 10:00:00.250000 node07 alice: {XID79}",
        # userspace writing to /dev/kmsg, shown by dmesg -x --time-format=iso
        f"user  :warn  : 2024-11-21T10:00:00,000001+00:00 {XID79}",
    ],
)
def test_lines_the_kernel_did_not_write_are_no_events(line: str) -> None:
    """A user's `logger "NVRM: Xid ... 79"`, even tagged kernel, is nobody's hardware event."""
    assert not split(line).kernel
    assert parse_kernel_lines([line], year=2024) == []


def write_log(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def stamp(when: float, form: str) -> str:
    local = datetime.fromtimestamp(when).astimezone()
    utc = datetime.fromtimestamp(when, UTC)
    return {
        "short-precise": local.strftime("%b %d %H:%M:%S.%f"),
        "short-full": utc.strftime("%a %Y-%m-%d %H:%M:%S UTC"),
        "dmesg-iso": utc.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00"),
    }[form]


@pytest.mark.parametrize("form", ["short-precise", "short-full", "dmesg-iso"])
def test_a_fatal_xid_in_the_file_counts_only_while_it_is_recent(tmp_path: Path, form) -> None:  # type: ignore[no-untyped-def]
    """An XID 79 written a minute ago fails gpu.xid; the same line two hours later does not
    (it was 'always recent' before: the node was drained on every run, forever)."""
    now = time.time()
    host = "" if form == "dmesg-iso" else " node07 kernel:"
    path = write_log(tmp_path / "kern.log", [f"{stamp(now - 60, form)}{host} {XID79}"])
    events = kernel_log.read_kernel_events(path, "node07")
    config = HealthConfig()
    result = kernel_log.check_xid(events, config, now)
    assert result.failed and result.action is Action.REBOOT
    assert kernel_log.check_xid(events, config, now + 7200).status is CheckStatus.OK


def test_an_undated_xid_never_drains(tmp_path: Path) -> None:
    """dmesg's seconds-since-boot in a file (which boot?) and a bare line carry no date: the
    check warns that it cannot judge them and never fails on them."""
    # The bare line first: after a prefixed line it would be that record's later line.
    path = write_log(
        tmp_path / "dmesg.txt", [XID79.replace("3b:00", "5d:00"), f"[  123.456789] {XID79}"]
    )
    events = kernel_log.read_kernel_events(path, "node07")
    assert [e.time for e in events] == [None, None]
    result = kernel_log.check_xid(events, HealthConfig(), time.time())
    assert result.status is CheckStatus.WARN
    assert result.reason.startswith("2 XID line(s) in the kernel log carry no date")


def test_undated_machine_checks_do_not_fail_host_memory() -> None:
    """The same rule for MCE/EDAC: an undated machine check is no evidence of when."""
    events = parse_kernel_lines(
        ["[ 99.0] mce: [Hardware Error]: CPU 3: Machine Check Exception: 5 Bank 7: be000000"]
    )
    assert kernel_log.host_hardware_errors(events, HealthConfig(), time.time()) is None


def test_the_epilog_keeps_no_undated_kernel_event(tmp_path: Path) -> None:
    """The Epilog's root record holds only kernel events dated inside the job's window."""
    from slurm_triage.config import Config, HealthConfig, PathsConfig
    from slurm_triage.prolog_epilog.epilog import collect
    from slurm_triage.prolog_epilog.job_end import JobEnd

    now = time.time()
    log = write_log(
        tmp_path / "kern.log",
        [f"[  12.5] {XID79}", f"{stamp(now - 30, 'dmesg-iso')} {XID79.replace('3b', '5d')}"],
    )
    config = Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        health=HealthConfig(kernel_log=log, expected_gpus=0),
    )
    record = collect(config, JobEnd(job_id=5, node="node07", uid=1000, ended_at=now), now)
    assert [(f.pci_bus_id, f.time is not None) for f in record.facts] == [("0000:5d:00", True)]
