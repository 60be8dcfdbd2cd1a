"""Kernel-log, InfiniBand, mount and host checks: real files, real FIFOs, real children."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.attribution.kernel import parse_kernel_lines
from slurm_triage.config import HealthConfig
from slurm_triage.health_checks import app_xids, host, infiniband, kernel_log, mounts
from slurm_triage.health_checks.result import Action, CheckStatus, Severity
from slurm_triage.simulate.estate import NodeEstate, inject

CONFIG = HealthConfig()
NOW = 1_795_300_000.0


def iso(offset: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(NOW + offset, UTC).isoformat()


def events(*lines: str):  # type: ignore[no-untyped-def]
    return parse_kernel_lines(list(lines), node="node2")


def test_fatal_xid_in_window_fails_high() -> None:
    """XID 79 within the window fails gpu.xid at high severity, naming the GPU."""
    evs = events(
        f"{iso(-30)} node2 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus."
    )
    result = kernel_log.check_xid(evs, CONFIG, NOW)
    assert result.failed and result.severity is Severity.HIGH
    assert "XID 79" in result.reason and "0000:5d:00" in result.reason


def test_old_xid_outside_window_is_ignored() -> None:
    """An XID older than the window does not fail the node any more."""
    evs = events(
        f"{iso(-3600)} node2 kernel: NVRM: Xid (PCI:0000:5d:00): 48, pid=1, "
        "name=python, An uncorrectable double bit error"
    )
    assert kernel_log.check_xid(evs, CONFIG, NOW).status is CheckStatus.OK


def test_mig_format_xid_is_read() -> None:
    """The MIG form `(PCI:... GPU-I:05)` is an XID like any other."""
    evs = events(
        f"{iso(-5)} node2 kernel: NVRM: Xid (PCI:0000:01:00 GPU-I:05): 95, pid=7194, "
        "Uncontained: FBHUB. RST: Yes, D-RST: No"
    )
    assert kernel_log.check_xid(evs, CONFIG, NOW).failed


def test_application_xid_only_fails_when_repeated_across_jobs() -> None:
    """XID 13 from one job is the user's bug; from three jobs on one GPU it follows the GPU."""
    line = (
        "{t} node2 kernel: NVRM: Xid (PCI:0000:18:00): 13, pid={pid}, name=python, "
        "Graphics SM Warp Exception"
    )
    one = events(line.format(t=iso(-20), pid=100))
    assert kernel_log.check_xid(one, CONFIG, NOW).status is CheckStatus.OK
    three = events(*(line.format(t=iso(-300 + 100 * i), pid=100 + i) for i in range(3)))
    claims = [
        app_xids.Claim("0000:18:00", NOW - 300 + 100 * i, NOW - 300 + 100 * i, str(70 + i))
        for i in range(3)
    ]
    result = kernel_log.check_xid(three, CONFIG, NOW, app_xid_claims=claims)
    assert result.failed and result.severity is Severity.LOW and result.action is Action.DRAIN
    assert result.evidence["faults"] == ["job:70", "job:71", "job:72"]


def test_user_logger_line_is_not_a_kernel_xid() -> None:
    """A syslog line not tagged `kernel` (a user's `logger`) is no hardware evidence."""
    evs = events(f"{iso(-5)} node2 alice: NVRM: Xid (PCI:0000:18:00): 79, fake")
    assert kernel_log.check_xid(evs, CONFIG, NOW).status is CheckStatus.OK


def test_mce_fails_host_memory() -> None:
    """An uncorrected machine check in the window fails host.memory at high severity."""
    evs = events(
        f"{iso(-10)} node2 kernel: mce: [Hardware Error]: CPU 3: Machine Check "
        "Exception: 5 Bank 7: be00000000800400"
    )
    hw = kernel_log.host_hardware_errors(evs, CONFIG, NOW)
    facts = host.HostFacts(64 << 30, 100 << 30)
    result = host.check_memory(facts, hw, CONFIG)
    assert result.failed and result.severity is Severity.HIGH


def test_kernel_log_file_read_from_tail(tmp_path: Path) -> None:
    """Kernel events are read from a log file's tail (the simulated node's kern.log)."""
    estate = NodeEstate(tmp_path, "node2").ensure()
    inject(estate, "xid", 74, gpu=1)
    evs = kernel_log.read_kernel_events(str(estate.kernel_log), "node2")
    assert [(e.xid, e.pci_bus_id) for e in evs] == [(74, "0000:2a:00")]


def test_ib_ports_from_sysfs(tmp_path: Path) -> None:
    """The fabric's ports ACTIVE/LinkUp at 400 Gb/s pass; a downed port and a slower rate
    fail. The RoCE, BlueField, uncabled and VF ports of a real H100 node are read but not
    checked unless named."""
    estate = NodeEstate(tmp_path, "n").ensure()
    config = replace(CONFIG, ib_rate_gbps=400)
    ports = infiniband.read_ports(str(estate.sysfs), ())
    assert len(ports) == 9
    result = infiniband.check_ports(ports, config, {})
    assert result.status is CheckStatus.OK
    assert result.evidence["ports"] == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]
    assert infiniband.check_ports(ports, replace(config, ib_rate_gbps=800), {}).failed
    previous = {"ib": infiniband.counters(ports)}
    inject(estate, "ib_down", port=2)
    down = infiniband.check_ports(infiniband.read_ports(str(estate.sysfs), ()), config, previous)
    assert down.failed and "mlx5_2:1" in down.reason and "DOWN" in down.reason


def test_ib_link_downed_rising_fails_even_if_port_is_up_again(tmp_path: Path) -> None:
    """A link that flapped since the last run fails even though it is ACTIVE now."""
    estate = NodeEstate(tmp_path, "n").ensure()
    ports = infiniband.read_ports(str(estate.sysfs), ("mlx5_0:1",))
    previous = {"ib": {"mlx5_0:1": {"link_downed": 0}}}
    (estate.sysfs / "class/infiniband/mlx5_0/ports/1/counters/link_downed").write_text("2\n")
    result = infiniband.check_ports(
        infiniband.read_ports(str(estate.sysfs), ("mlx5_0:1",)), CONFIG, previous
    )
    assert result.failed and "link_downed rose 0->2" in result.reason
    assert ports[0].counters == {
        "link_downed": 0,
        "symbol_error": 0,
        "port_rcv_errors": 0,
        "link_error_recovery": 0,
        "local_link_integrity_errors": 0,
    }


def test_missing_expected_port_fails(tmp_path: Path) -> None:
    """An expected HCA port that is not in sysfs fails ib.ports."""
    ports = infiniband.read_ports(str(tmp_path), ("mlx5_9:1",))
    assert infiniband.check_ports(ports, CONFIG, {}).failed


def test_mountinfo_parse() -> None:
    """Mount points and types come from /proc/self/mountinfo, escapes decoded."""
    text = (
        "36 35 98:0 / /mnt/a\\040b rw - nfs4 srv:/x rw\n"
        "37 35 98:1 / /scratch rw shared:1 - lustre 10.0.0.1@o2ib:/fs rw\n"
    )
    assert mounts.parse_mountinfo(text) == {"/mnt/a b": "nfs4", "/scratch": "lustre"}


def test_hung_mount_is_cut_off_at_timeout(tmp_path: Path) -> None:
    """A mount whose probe blocks (a FIFO, like a dead hard NFS mount) fails at the timeout,
    and the healthy mounts beside it still answer."""
    estate = NodeEstate(tmp_path, "n").ensure()
    inject(estate, "mount_hung", mount="shared")
    paths = [str(estate.mount(m)) for m in ("home", "shared", "datasets")]
    started = time.monotonic()
    facts = mounts.probe_mounts(paths, estate.mountinfo.read_text(), timeout_s=0.5)
    assert time.monotonic() - started < 2.0
    assert [f.answered for f in facts] == [True, False, True]
    result = mounts.check_mounts(facts, 0.5)
    assert result.failed and "shared" in result.reason and "hung" in result.reason


def test_unmounted_path_fails(tmp_path: Path) -> None:
    """A required path absent from the mount table fails fs.mounts without probing it."""
    facts = mounts.probe_mounts([str(tmp_path)], "", timeout_s=0.5)
    assert mounts.check_mounts(facts, 0.5).reason.endswith("not mounted")


def test_host_disk_and_memory_thresholds(tmp_path: Path) -> None:
    """Low scratch space or memory fails at low severity; an unusable scratch at high."""
    facts = host.read_host(str(tmp_path))
    assert host.check_disk(facts, CONFIG).status is CheckStatus.OK
    tight = replace(CONFIG, min_free_disk_gb=10**7, min_free_memory_gb=10**7)
    assert host.check_disk(facts, tight).severity is Severity.LOW
    assert host.check_memory(facts, None, tight).severity is Severity.LOW
    gone = host.read_host(str(tmp_path / "missing"))
    assert host.check_disk(gone, CONFIG).severity is Severity.HIGH


@pytest.mark.skipif(not os.path.exists("/dev/kmsg"), reason="no /dev/kmsg on this host")
def test_dev_kmsg_is_readable_without_blocking() -> None:
    """Reading the real /dev/kmsg returns (possibly no) events and never blocks."""
    started = time.monotonic()
    try:
        kernel_log.read_kernel_events("/dev/kmsg", "here")
    except PermissionError:
        pytest.skip("no permission to read /dev/kmsg")
    assert time.monotonic() - started < 5


def test_mountinfo_keeps_non_ascii_paths(tmp_path: Path) -> None:
    """A UTF-8 mount point is read as itself (the kernel escapes only space, tab, newline and
    backslash), so a required mount named in UTF-8 is found and probed, not 'not mounted'."""
    point = tmp_path / "données à b"
    point.mkdir()
    escaped = str(point).replace(" ", "\\040")
    text = f"36 35 98:0 / {escaped} rw - nfs4 srv:/x rw\n38 35 98:2 / /a\\134b rw - nfs4 s:/y rw\n"
    assert mounts.parse_mountinfo(text) == {str(point): "nfs4", "/a\\b": "nfs4"}
    facts = mounts.probe_mounts([str(point)], text, timeout_s=2.0)
    assert (facts[0].mounted, facts[0].answered, facts[0].error) == (True, True, "")


def _wait_zombie(pid: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return
        time.sleep(0.01)
    raise AssertionError(f"{pid} did not exit")


def test_mount_probe_reaps_only_its_own_children(tmp_path: Path) -> None:
    """Probing mounts leaves other children of the process alone: a subprocess that exited
    with 3 before the probe still reports 3 (waitpid(-1) took its status, Popen read 0)."""
    import subprocess

    other = subprocess.Popen(["sh", "-c", "exit 3"])
    _wait_zombie(other.pid)
    estate = NodeEstate(tmp_path, "n").ensure()
    inject(estate, "mount_hung", mount="shared")
    paths = [str(estate.mount(m)) for m in ("home", "shared")]
    facts = mounts.probe_mounts(paths, estate.mountinfo.read_text(), timeout_s=0.3)
    assert [f.answered for f in facts] == [True, False]
    assert other.wait(timeout=5) == 3
    # The killed probe child is reaped later, by its pid, once it has exited.
    deadline = time.monotonic() + 5
    while mounts._UNREAPED and time.monotonic() < deadline:
        time.sleep(0.02)
        mounts._reap_stragglers()
    assert not mounts._UNREAPED


def test_a_mount_whose_killed_probe_is_still_stuck_is_not_probed_again(tmp_path: Path) -> None:
    """A probe child SIGKILLed in D state (a dead hard NFS mount) lives on until the server
    answers: while it does, its mount is reported unanswered without forking another (the
    node agent probes every few seconds), and probed again once that child is gone. The
    stuck child is a process SIGKILL has not ended yet, here one that has not been sent it."""
    import subprocess

    estate = NodeEstate(tmp_path, "n").ensure()
    paths = [str(estate.mount(m)) for m in ("home", "shared")]
    stuck = subprocess.Popen(["sleep", "60"])
    mounts._UNREAPED[stuck.pid] = paths[1]
    try:
        facts = mounts.probe_mounts(paths, estate.mountinfo.read_text(), timeout_s=2.0)
        assert [f.answered for f in facts] == [True, False]
        assert facts[1].error == mounts.STILL_STUCK
        assert mounts.check_mounts(facts, 2.0).failed
    finally:
        stuck.kill()
        _wait_zombie(stuck.pid)
    facts = mounts.probe_mounts(paths, estate.mountinfo.read_text(), timeout_s=2.0)
    assert [f.answered for f in facts] == [True, True]
    assert stuck.pid not in mounts._UNREAPED
