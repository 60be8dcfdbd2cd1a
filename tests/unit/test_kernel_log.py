"""Kernel-log parsing: every line format, all three XID formats, and the non-XID events."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from slurm_triage.attribution import normalise_bdf, parse_kernel_file, parse_kernel_lines
from slurm_triage.attribution.kernel import split_line
from slurm_triage.evidence import KernelEventKind, Source

K = KernelEventKind
T0 = datetime(2024, 11, 21, 10, 0, 0, tzinfo=UTC).timestamp()


def _one(line: str, **kw):
    events = parse_kernel_lines([line], year=2024, **kw)
    assert len(events) == 1, events
    return events[0]


@pytest.mark.parametrize(
    ("line", "xid", "bdf"),
    [
        ("NVRM: Xid (0000:03:00): 14, Channel 00000001", 14, "0000:03:00"),
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.",
            79,
            "0000:3b:00",
        ),
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
            "RST: No, D-RST: No",
            94,
            "0000:01:00",
        ),
        ("NVRM: Xid (PCI:00000000:B1:00.0): 48, pid=1, name=python, DBE", 48, "0000:b1:00"),
        # A MIG XID attributed to a GPU and a compute instance: kernel_rc.c krcReportXid's
        # "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u" (open-gpu-kernel-modules).
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 31, pid=7194, name=python, "
            "Ch 0000000e, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted",
            31,
            "0000:01:00",
        ),
    ],
)
def test_three_xid_formats(line, xid, bdf):
    """Old, PCI:, MIG GPU-I: and GPU-I: GPU-CI: XID lines give the XID number and a
    normalised bus id."""
    event = _one(line)
    assert (event.event, event.xid, event.pci_bus_id) == (K.XID, xid, bdf)
    assert event.source is Source.ROOT


def test_line_prefixes_and_times():
    """dmesg, kmsg, dmesg -T, syslog and ISO prefixes are all recognised; times as available."""
    utc = UTC
    assert split_line("[  12.500000] NVRM: x", year=2024, tz=utc, boot_time=None).time is None
    assert split_line("[  12.500000] NVRM: x", year=2024, tz=utc, boot_time=100.0).time == 112.5
    kmsg = split_line("4,1234,5000000,-;NVRM: x", year=2024, tz=utc, boot_time=T0)
    assert (kmsg.time, kmsg.message) == (T0 + 5.0, "NVRM: x")
    dmesg_t = split_line("[Thu Nov 21 10:00:00 2024] NVRM: x", year=1999, tz=utc, boot_time=None)
    assert dmesg_t.time == T0
    syslog = split_line(
        "Nov 21 10:00:00 node07 kernel: [ 12.5] NVRM: x", year=2024, tz=utc, boot_time=None
    )
    assert (syslog.time, syslog.host, syslog.message, syslog.kernel) == (
        T0,
        "node07",
        "NVRM: x",
        True,
    )
    iso = split_line(
        "2024-11-21T11:00:00.250000+01:00 node07 kernel: NVRM: x", year=2024, tz=utc, boot_time=None
    )
    assert iso.time == T0 + 0.25


def test_syslog_lines_from_other_programs_are_not_kernel_events():
    """A user's `logger "NVRM: Xid ..."` in syslog is tagged with its program, not `kernel`."""
    lines = [
        "Nov 21 10:00:01 node02 alice[999]: NVRM: Xid (PCI:0000:01:00): 79, fake",
        "Nov 21 10:00:02 node02 kernel: NVRM: Xid (PCI:0000:01:00): 31, pid=1, name=x, MMU",
    ]
    events = parse_kernel_lines(lines, year=2024)
    assert [e.xid for e in events] == [31]


def test_syslog_host_names_the_node_unless_one_is_given():
    """Without an explicit node, the syslog host (short name) is the node."""
    line = "2024-11-21T10:00:00Z gpu-a17.cluster.local kernel: NVRM: Xid (PCI:0000:5d:00): 79, x"
    assert _one(line).node == "gpu-a17"
    assert _one(line, node="override").node == "override"


def test_fallen_off_bus_without_xid_takes_the_bdf_from_earlier_lines():
    """The multi-line 'fallen off the bus' message is one event on the GPU named before it."""
    lines = [
        "[ 1.0] NVRM: The NVIDIA GPU 0000:18:00.0",
        "[ 1.0] NVRM: (PCI ID: 10de:2330) installed in this system has",
        "[ 1.0] NVRM: fallen off the bus and is not responding to commands.",
    ]
    events = parse_kernel_lines(lines)
    assert [(e.event, e.pci_bus_id) for e in events] == [(K.FALLEN_OFF_BUS, "0000:18:00")]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:3b:00.0",
            K.AER_UNCORRECTED,
        ),
        (
            "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrectable (Non-Fatal), "
            "type=Transaction Layer, (Requester ID)",
            K.AER_UNCORRECTED,
        ),
        (
            "mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 7: be00000000800400",
            K.MCE,
        ),
        ("mce: Uncorrected hardware memory error in user-access at 4f2a3c000", K.MCE),
        (
            "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0)",
            K.EDAC_UE,
        ),
        ("Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009", K.KERNEL_PANIC),
        (
            "Memory cgroup out of memory: Killed process 4567 (python) total-vm:123kB, "
            "anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:12kB oom_score_adj:0",
            K.OOM_KILL,
        ),
        ("Killed process 4567 (python) total-vm:123kB, anon-rss:1kB, file-rss:0kB", K.OOM_KILL),
        ("ib0: lost carrier", K.IB_LINK_DOWN),
        ("mlx5_core 0000:c1:00.0: Port module event: module 1, Cable unplugged", K.IB_LINK_DOWN),
        ("nfs: server fs01 not responding, still trying", K.FS_UNRESPONSIVE),
    ],
)
def test_non_xid_events(line, kind):
    """AER uncorrected, MCE, EDAC UE, panics, OOM kills, IB link loss and NFS hangs are events."""
    assert _one(f"[ 5.000000] {line}").event is kind


@pytest.mark.parametrize(
    "line",
    [
        "mce: [Hardware Error]: Machine check events logged",
        "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0",
        "pcieport 0000:00:03.1: AER: Corrected error received: 0000:3b:00.0",
        "nfs: server fs01 OK",
        "NVRM: GPU at PCI:0000:18:00: GPU-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718",
        "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    ],
)
def test_benign_lines_are_not_events(line):
    """Corrected errors, recoveries and informational driver lines produce nothing."""
    assert parse_kernel_lines([f"[ 5.000000] {line}"]) == []


def test_exact_repeats_are_kept_once():
    """The same XID on the same GPU at the same time (a duplicated line) is one event."""
    line = "Nov 21 10:00:00 n1 kernel: NVRM: Xid (PCI:0000:01:00): 94, pid=1, Contained: SM"
    assert len(parse_kernel_lines([line, line], year=2024)) == 1


def test_normalise_bdf():
    """Both NVML's 8-hex-domain form and the kernel's short form become dddd:bb:dd."""
    assert normalise_bdf("00000000:3B:00.0") == normalise_bdf("0000:3b:00") == "0000:3b:00"


def test_parse_kernel_file_reads_the_tail(tmp_path):
    """A kernel log file is read from its end; the XID near the end is found."""
    path = tmp_path / "kern.log"
    path.write_text("[ 1.0] noise\n" * 200_000 + "[ 2.0] NVRM: Xid (PCI:0000:3b:00): 48, DBE\n")
    events = parse_kernel_file(path, node="n1", tail_bytes=4096)
    assert [(e.node, e.xid) for e in events] == [("n1", 48)]
