"""A storm of job-made kernel lines (application XIDs, OOM kills) keeps at most MAX_EVENTS of
them, but never pushes out the node-fatal event logged before it (review: kernel.py eviction)."""

from __future__ import annotations

from slurm_triage.attribution import parse_kernel_lines
from slurm_triage.attribution.kernel import MAX_EVENTS
from slurm_triage.config import HealthConfig
from slurm_triage.evidence import KernelEvent, KernelEventKind
from slurm_triage.health_checks import kernel_log
from slurm_triage.health_checks.result import CheckStatus

NOW = 1_795_300_000.0
BOOT = NOW - 1000.0


def kmsg(seq: int, at: float, message: str) -> str:
    """A /dev/kmsg record stamped `at` (usec since BOOT)."""
    return f"4,{seq},{int((at - BOOT) * 1e6)},-;{message}"


def sm_trap(seq: int, at: float) -> str:
    """One line of an XID 13 storm: the driver prints one per trapped SM."""
    return kmsg(
        seq,
        at,
        "NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
        f"Exception on (GPC {seq % 8}, TPC {seq % 9}, SM {seq % 2}): Out Of Range Address",
    )


def oom_kill(seq: int, at: float) -> str:
    return kmsg(
        seq,
        at,
        f"Memory cgroup out of memory: Killed process {10_000 + seq} (python) total-vm:1kB",
    )


DBE = kmsg(1, NOW - 120, "NVRM: Xid (PCI:0000:3b:00): 48, pid=777, name=python, DBE (0x1)")


def parse(lines: list[str]) -> list[KernelEvent]:
    return parse_kernel_lines(lines, boot_time=BOOT)


def test_an_application_xid_storm_keeps_the_fatal_xid_before_it():
    """XID 48, then more XID 13 lines than MAX_EVENTS on another GPU: the 48 still fails
    the node, and the newest MAX_EVENTS of the storm are kept."""
    storm = [sm_trap(i, NOW - 60 + i * 0.001) for i in range(2, MAX_EVENTS + 22)]
    events = parse([DBE, *storm])
    assert [e.xid for e in events if e.xid == 48] == [48]
    thirteens = [e for e in events if e.xid == 13]
    assert len(thirteens) == MAX_EVENTS
    assert thirteens[-1].detail == storm[-1].split(";", 1)[1]
    result = kernel_log.check_xid(events, HealthConfig(), NOW)
    assert result.status is CheckStatus.FAIL
    assert "XID 48" in result.reason


def test_an_oom_kill_flood_keeps_the_fatal_xid_before_it():
    """A job whose processes are OOM-killed by the hundred cannot push out an XID 79."""
    fallen = kmsg(1, NOW - 120, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen")
    kills = [oom_kill(i, NOW - 60 + i * 0.001) for i in range(2, MAX_EVENTS + 22)]
    events = parse([fallen, *kills])
    assert [e.xid for e in events if e.event is KernelEventKind.XID] == [79]
    assert sum(e.event is KernelEventKind.OOM_KILL for e in events) == MAX_EVENTS


def test_events_of_both_kinds_come_out_in_line_order():
    """Job-made and other events interleaved in the log keep their order."""
    lines = [
        sm_trap(1, NOW - 50),
        kmsg(2, NOW - 45, "NVRM: Xid (PCI:0000:3b:00): 48, pid=777, name=python, DBE (0x1)"),
        oom_kill(3, NOW - 40),
        kmsg(4, NOW - 30, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen"),
        sm_trap(5, NOW - 20),
    ]
    kinds = [(e.event, e.xid) for e in parse(lines)]
    assert kinds == [
        (KernelEventKind.XID, 13),
        (KernelEventKind.XID, 48),
        (KernelEventKind.OOM_KILL, None),
        (KernelEventKind.XID, 79),
        (KernelEventKind.XID, 13),
    ]


def test_a_flood_of_any_kind_stays_bounded():
    """However many lines of each kind, at most MAX_EVENTS of each are kept, the newest."""
    fatal = [
        kmsg(i, NOW - 500 + i * 0.01, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, fallen")
        for i in range(3 * MAX_EVENTS)
    ]
    storm = [sm_trap(i, NOW - 100 + i * 0.01) for i in range(3 * MAX_EVENTS)]
    events = parse([*fatal, *storm])
    assert len(events) == 2 * MAX_EVENTS
    kept_fatal = [e.time for e in events if e.xid == 79]
    assert kept_fatal == [e.time for e in parse(fatal[-MAX_EVENTS:])]
    kept_storm = [e.time for e in events if e.xid == 13]
    assert kept_storm == [e.time for e in parse(storm[-MAX_EVENTS:])]


def test_the_most_a_storm_leaves_fits_one_evidence_record():
    """Both kinds at their bound, with room for the Epilog's NVML and check facts: the
    decision reads the record (over MAX_FACTS it would refuse it whole)."""
    from slurm_triage.evidence import EvidenceRecord, Source, parse_record, record_to_json

    lines = [
        kmsg(i, NOW - 500 + i * 0.01, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, fallen")
        for i in range(2 * MAX_EVENTS)
    ] + [sm_trap(i, NOW - 60 + i * 0.001) for i in range(2, 2 * MAX_EVENTS)]
    events = parse_kernel_lines(lines, node="node1", boot_time=BOOT)
    assert len(events) == 2 * MAX_EVENTS
    record = EvidenceRecord("7", "node1", "epilog", Source.ROOT, (*events, *events[:100]))
    assert len(parse_record(record_to_json(record)).facts) == 2 * MAX_EVENTS + 100
