"""Kernel-log patterns as the kernel and the NVIDIA driver really print them, and anchoring:
text a user controls inside a kernel message (process name, mapped file name) is never
evidence. Sources are cited per case: open-gpu-kernel-modules 595.45.04 (NVRM), Linux
drivers/net/ethernet/mellanox/mlx5/core/{health,events}.c, drivers/pci/pcie/aer.c,
mm/oom_kill.c, kernel/hung_task.c, arch/x86/mm/fault.c, LBNL NHC `nhc` (die/syslog)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_triage.attribution import attribute, parse_kernel_lines
from slurm_triage.attribution.kernel import is_user_record
from slurm_triage.evidence import KernelEventKind, Source
from slurm_triage.taxonomy import Cause

K = KernelEventKind
T0 = datetime(2024, 11, 21, 10, 0, 0, tzinfo=UTC).timestamp()


def events(lines, **kw):
    return parse_kernel_lines(list(lines), year=2024, node="n1", **kw)


def kinds(lines, **kw):
    return [(e.event, e.pci_bus_id) for e in events(lines, **kw)]


def one(line: str):
    found = events([f"[ 5.000000] {line}"])
    assert len(found) == 1, found
    return found[0]


# --- 1. lost GPU without an Xid line ---------------------------------------------------------

FALLEN_THREE = [
    # osapi.c: one printk, three lines.
    "NVRM: The NVIDIA GPU 0000:3b:00.0",
    "NVRM: (PCI ID: 10de:2330) installed in this system has",
    "NVRM: fallen off the bus and is not responding to commands.",
]


@pytest.mark.parametrize(
    "lines",
    [
        [f"[ 1843.308145] {line}" for line in FALLEN_THREE],  # syslog(2)/console: prefix each
        # dmesg/journalctl indent the record's later lines (nvsentinel gpufallen test data)
        ["[ 1843.308145] " + FALLEN_THREE[0]] + [f"               {x}" for x in FALLEN_THREE[1:]],
        ["3,812,1843308145,-;" + "\\x0a".join(FALLEN_THREE)],  # /dev/kmsg escapes the newline
        ["Nov 21 10:00:00 n1 kernel: " + "#012".join(FALLEN_THREE)],  # rsyslog escapes it
    ],
)
def test_fallen_off_bus_three_line_record_in_every_form(lines):
    """The three-line 'fallen off the bus' record names its GPU in the first line."""
    assert kinds(lines) == [(K.FALLEN_OFF_BUS, "0000:3b:00")]


@pytest.mark.parametrize(
    ("line", "bdf"),
    [
        # osinit.c osHandleGpuLost: NV_DEV_PRINTF(NV_DBG_ERRORS, nv, "GPU has fallen off ...")
        ("NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.", "0000:29:00"),
        # nv-pci.c: NV_DEV_PRINTF(NV_DBG_INFO, nv, "GPU is lost, skipping nv_pci_probe\n")
        ("NVRM: GPU 0000:29:00.0: GPU is lost, skipping nv_pci_probe", "0000:29:00"),
    ],
)
def test_gpu_lost_lines(line, bdf):
    """NV_DEV_PRINTF's lost-GPU lines are gpu_unavailable on the GPU they name."""
    event = one(line)
    assert (event.event, event.pci_bus_id) == (K.FALLEN_OFF_BUS, bdf)
    assert attribute([event]).cause is Cause.GPU_UNAVAILABLE


def test_gpu_is_lost_without_address_takes_the_last_named_gpu():
    """nv.c `NVRM: GPU is lost, skipping nvidia_ioctl` names no GPU: the last one named counts;
    a flood of them is one event a minute."""
    lines = ["[ 1.0] NVRM: GPU at PCI:0000:18:00: GPU-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"]
    lines += [f"[ {2 + i}.0] NVRM: GPU is lost, skipping nvidia_ioctl" for i in range(50)]
    assert kinds(lines, boot_time=T0) == [(K.FALLEN_OFF_BUS, "0000:18:00")]


# --- 2. GSP timeouts without an Xid ----------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # kernel_gsp.c _kgspLogRpcTimeout, GSP_SLOWNESS: NV_ERROR_LOG_DATA (no Xid)
        "NVRM: Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 "
        "(GSP_RM_CONTROL) sequence 1321 (0x20802a02 0x8).",
        # the same with a function-name prefix, as NV_PRINTF prints it
        "NVRM: _kgspRpcRecvPoll: Timeout after 6s of waiting for RPC response from GPU1 GSP! "
        "Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
        # kernel_gsp.c _kgspRpcRecvPoll after a timeout
        "NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out",
        "NVRM: _kgspRpcRecvPoll: LibOS heartbeat timed out",
        # kernel_gsp.c _kgspIsHeartbeatTimedOut
        "NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 81234 heartbeat 75000 "
        "heartbeatWithOffsetMs 75000 diff 6234 timeout 5000",
        # the same as drivers that prefix NV_PRINTF with the GPU instance print it
        "NVRM: GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 812751949 "
        "heartbeat 1899482 heartbeatWithOffsetMs 812745879 diff 6070 timeout 5200",
        # kernel_gsp.c _kgspLogRpcSanityCheckFailure
        "NVRM: _kgspLogRpcSanityCheckFailure: GPU0 sanity check failed 0xf waiting for RPC "
        "response from GSP. Expected function 76 (GSP_RM_CONTROL) sequence 9 (0x0 0x0).",
    ],
)
def test_gsp_timeouts_without_xid_are_gsp_timeout_events(line):
    """GSP RPC timeouts and heartbeat losses the driver prints without an Xid line."""
    assert one(line).event is K.GSP_TIMEOUT


def test_gsp_rate_limit_line_names_the_gpu():
    """kernel_gsp.c portDbgPrintf: `Rate limiting GSP RPC error prints for GPU at PCI:...`."""
    line = (
        "NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:3b:00 (printing 1 of "
        "every 30).  The GPU likely needs to be reset."
    )
    assert (one(line).event, one(line).pci_bus_id) == (K.GSP_TIMEOUT, "0000:3b:00")


def test_gsp_banner_and_xid_119_line_are_not_gsp_timeout_events():
    """The banner alone says nothing; the Xid 119 line is an XID, not a second event."""
    banner = (
        "NVRM: _kgspLogRpcTimeout: ********************************* GSP Timeout "
        "**********************************"
    )
    xid = (
        "NVRM: Xid (PCI:0000:01:00): 119, pid=24109, name=python, Timeout after 45s of waiting "
        "for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) sequence 1321"
    )
    assert [(e.event, e.xid) for e in events([f"[ 1.0] {banner}", f"[ 1.1] {xid}"])] == [
        (K.XID, 119)
    ]


# --- 3. NVLink5 XIDs are read as XIDs --------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # signatures.md §1.3 / gpud kmsg.go RegexNVRMXidExtended example
        "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 "
        "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        # gpud health_state_test.go
        "NVRM: Xid (PCI:0000:04:00): 145, RLW_CTRL Nonfatal XC0 i0 Link 00 (0x00000003 "
        "0x80000000 0x00000000 0x00000000)",
    ],
)
def test_nvlink5_xid_lines(line):
    """The NVLink5 line layout is an ordinary XID line; the catalogue reads its severity."""
    event = one(line)
    assert event.event is K.XID and 144 <= (event.xid or 0) <= 150


# --- 4. mlx5 / InfiniBand --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "bdf"),
    [
        # health.c mlx5_health_try_recover (mlx5_core_err adds `func:line:(pid N): `)
        (
            "mlx5_core 0000:5e:00.0: mlx5_health_try_recover:327:(pid 1234): health recovery "
            "flow aborted, PCI reads still not working",
            "0000:5e:00",
        ),
        (
            "mlx5_core 0004:01:00.1: mlx5_health_try_recover:338:(pid 2239): health recovery "
            "flow aborted, PCI channel offline",
            "0004:01:00",
        ),
        # health.c poll_health
        (
            "mlx5_core 0000:d2:00.0: poll_health:825:(pid 0): device's health compromised - "
            "reached miss count",
            "0000:d2:00",
        ),
        ("mlx5_core 0000:d2:00.0: poll_health:830:(pid 0): Fatal error 1 detected", "0000:d2:00"),
        # health.c mlx5_enter_error_state
        ("mlx5_core 0000:5e:00.0: mlx5_enter_error_state:304:(pid 88): start", "0000:5e:00"),
        # health.c print_health_info (mlx5_log at the firmware's severity)
        (
            "mlx5_core 0000:49:00.0: print_health_info:431:(pid 0): Health issue observed, "
            "High temperature, severity(2) CRITICAL:",
            "0000:49:00",
        ),
        (
            "mlx5_core 0000:73:00.0: print_health_info:431:(pid 0): Health issue observed, "
            "firmware internal error, severity(3) ERROR:",
            "0000:73:00",
        ),
        (
            "mlx5_core 0000:73:00.0: print_health_info:424:(pid 0): PCI slot is unavailable",
            "0000:73:00",
        ),
        # events.c port_module: error → mlx5_core_err, otherwise mlx5_core_info (no func)
        (
            "mlx5_core 0000:5e:00.0: port_module:251:(pid 0): Port module event[error]: "
            "module 0, Cable error, Bus stuck (I2C or data shorted)",
            "0000:5e:00",
        ),
        ("mlx5_core 0000:c1:00.0: Port module event: module 1, Cable unplugged", "0000:c1:00"),
        # en_main.c mlx5e_update_carrier: netdev_info → `mlx5_core <bdf> <ifname>: Link down`
        ("mlx5_core 0000:5e:00.0 ibp94s0: Link down", "0000:5e:00"),
        # drivers/infiniband/core/cache.c ib_cache_update: ibdev_info "Port: %d Link %s"
        ("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN", "0000:ab:00"),
    ],
)
def test_mlx5_faults_are_infiniband(line, bdf):
    """mlx5 health, error-state, cable and netdev link-down lines are infiniband evidence."""
    event = one(line)
    assert event.event is K.IB_LINK_DOWN
    assert event.pci_bus_id == bdf
    assert attribute([event]).cause is Cause.INFINIBAND


@pytest.mark.parametrize(
    "line",
    [
        # events.c mlx5_pcie_event: a warning at probe, NVIDIA calls it benign (no job dies)
        "mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power "
        "on the PCIe slot (27W).",
        # events.c temp_warn: a warning; a real over-temperature shows as a Health issue
        "mlx5_core 0000:5c:00.0: temp_warn:166:(pid 0): High temperature on sensors with bit "
        "set 0 1",
        "mlx5_core 0000:49:00.0: print_health_info:431:(pid 0): Health issue observed, "
        "unrecoverable hardware error, severity(4) WARNING:",
        "mlx5_core 0000:5e:00.0: Port module event: module 0, Cable plugged",
        "mlx5_core 0000:5e:00.0 ibp94s0: Link up",
        "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
        "mlx5_core 0000:5e:00.0: mlx5_enter_error_state:320:(pid 88): end",
    ],
)
def test_mlx5_warnings_and_recoveries_are_not_evidence(line):
    """Power and temperature warnings, warning-level health, plug/up events: nothing."""
    assert events([f"[ 5.000000] {line}"]) == []


# --- 5. hung tasks ---------------------------------------------------------------------------

HUNG = "INFO: task python:1234 blocked for more than 120 seconds."
HUNG_HEAD = [
    HUNG,
    "      Tainted: P           OE     5.15.0-105-generic #115-Ubuntu",
    '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
    "task:python          state:D stack:    0 pid: 1234 ppid:  1200 flags:0x00000002",
    "Call Trace:",
    " <TASK>",
    " __schedule+0x2eb/0x8d0",
    " schedule+0x4e/0xc0",
]


@pytest.mark.parametrize(
    "frames",
    [
        # NFS: sunrpc wait in a hard mount
        [" rpc_wait_bit_killable+0x24/0x40 [sunrpc]", " __rpc_execute+0xe2/0x420 [sunrpc]"],
        [" nfs_wait_bit_killable+0x22/0x70 [nfs]"],
        # pre-4.x trace format with the address first
        ["[<ffffffffa04b5e34>] rpc_wait_bit_killable+0x24/0x40 [sunrpc]"],
        # Lustre
        [" ptlrpc_set_wait+0x4d1/0x7b0 [ptlrpc]", " ll_file_io_generic+0x3b2/0x6e0 [lustre]"],
        [" ? osc_io_submit+0x1a2/0x4b0 [osc]"],
        [" cl_sync_io_wait+0x1c5/0x3e0 [obdclass]"],
        # GPFS
        [" cxiWaitEventWait+0x1f3/0x2d0 [mmfslinux]"],
        [" _ZN10gpfsNode_t6waitOnEv+0x81/0x120 [mmfs26]"],
    ],
)
def test_hung_task_in_a_filesystem_is_filesystem(frames):
    """A blocked task whose trace names NFS, Lustre or GPFS is the filesystem's hang."""
    lines = [f"[ 100.{i:06d}] {x}" for i, x in enumerate(HUNG_HEAD + frames)]
    found = events(lines)
    assert [e.event for e in found] == [K.FS_UNRESPONSIVE]
    assert found[0].detail.startswith(HUNG)
    assert attribute(found).cause is Cause.FILESYSTEM


def test_hung_task_without_filesystem_frames_is_nothing():
    """A blocked task in the block layer or a driver is no filesystem evidence; nor are NFS
    frames far after the header, or a built-in `ll_` symbol with no module."""
    lines = HUNG_HEAD + [" io_schedule+0x16/0x40", " ll_rw_block+0x61/0xa0", " </TASK>"]
    lines += ["x"] * 45 + [" rpc_wait_bit_killable+0x24/0x40 [sunrpc]"]
    assert events(f"[ 100.{i:06d}] {x}" for i, x in enumerate(lines)) == []


# --- 6. AER ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "bdf"),
    [
        # aer.c aer_print_source (6.8+): the source device after "from" is recorded
        (
            "pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error message received from "
            "0000:3b:00.0",
            "0000:3b:00",
        ),
        (
            "pcieport 0000:00:01.0: AER: Multiple Uncorrected (Non-Fatal) error message "
            "received from 0000:3b:00.0",
            "0000:3b:00",
        ),
        (
            "pcieport 0000:00:01.0: AER: Uncorrectable (Fatal) error message received from "
            "0000:3b:00.0 (no details found)",
            "0000:3b:00",
        ),
        # aer.c aer_print_port_info (before 6.8)
        (
            "pcieport 0000:00:03.1: AER: Uncorrected (Non-Fatal) error received: 0000:3b:00.0",
            "0000:3b:00",
        ),
        # aer.c aer_print_error, with and without dev_fmt's `AER: `
        (
            "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
            "type=Transaction Layer, (Receiver ID)",
            "0000:3b:00",
        ),
        (
            "nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrectable (Non-Fatal), "
            "type=Transaction Layer, (Requester ID)",
            "0000:3b:00",
        ),
    ],
)
def test_aer_uncorrected(line, bdf):
    """Uncorrected AER in old and current wording, on the device the error came from."""
    event = one(line)
    assert (event.event, event.pci_bus_id) == (K.AER_UNCORRECTED, bdf)


@pytest.mark.parametrize(
    "line",
    [
        "pcieport 0000:00:01.0: AER: Correctable error message received from 0000:3b:00.0",
        "pcieport 0000:00:01.0: AER: Corrected error received: 0000:3b:00.0",
        "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
        "(Receiver ID)",
    ],
)
def test_aer_correctable_is_not_evidence(line):
    """Corrected/correctable AER errors are not evidence."""
    assert events([f"[ 5.000000] {line}"]) == []


# --- 7. OOM killer ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # oom_kill.c __oom_kill_process (5.x+), memcg and global
        "Out of memory: Killed process 1234 (python) total-vm:262144000kB, anon-rss:251000000kB, "
        "file-rss:20480kB, shmem-rss:0kB, UID:1000 pgtables:493000kB oom_score_adj:0",
        "Memory cgroup out of memory: Killed process 1234 (python) total-vm:262144000kB, "
        "anon-rss:251000000kB, file-rss:20480kB, shmem-rss:0kB, UID:1000 pgtables:493000kB "
        "oom_score_adj:0",
        # oom_kill.c oom_kill_process before 4.19
        "Out of memory: Kill process 1234 (python) score 1000 or sacrifice child",
        # oom_kill.c dump_oom_summary
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
        "oom_memcg=/slurm/uid_1000/job_123,task_memcg=/slurm/uid_1000/job_123/step_0/task_0,"
        "task=python,pid=1234,uid=1000",
        # oom_kill.c oom_reap_task_mm
        "oom_reaper: reaped process 1234 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    ],
)
def test_oom_kill_variants(line):
    """Every wording of one kill is an oom_kill event naming the pid."""
    event = one(line)
    assert event.event is K.OOM_KILL and event.detail == "pid=1234 comm=python"
    assert attribute([event]).cause is Cause.HOST_OOM


def test_one_oom_kill_is_one_event():
    """The summary, the kill and the reaper's line of one kill are one fact (dedupe by pid)."""
    lines = [
        "[ 9011.2] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE), order=0",
        "[ 9011.4] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/job_1,task_memcg=/job_1/step_0,task=python,pid=51234,uid=1000",
        "[ 9011.4] Memory cgroup out of memory: Killed process 51234 (python) total-vm:1kB",
        "[ 9011.6] oom_reaper: reaped process 51234 (python), now anon-rss:0kB, file-rss:0kB",
        "[ 9020.0] Memory cgroup out of memory: Killed process 51299 (python) total-vm:1kB",
    ]
    assert [e.detail for e in events(lines, boot_time=T0)] == [
        "pid=51234 comm=python",
        "pid=51299 comm=python",
    ]


def test_oom_lines_in_the_same_second_as_the_oom_killer_invocation():
    """`<comm> invoked oom-killer` is the user's record, but the kernel's own lines that follow
    it in the same second (classic syslog) are read: a comm is too short to forge them."""
    lines = [
        "Dec 22 03:19:58 cpu-s01 kernel: python invoked oom-killer: gfp_mask=0x140dca("
        "GFP_HIGHUSER_MOVABLE|__GFP_COMP|__GFP_ZERO), order=0, oom_score_adj=0",
        "Dec 22 03:19:58 cpu-s01 kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),"
        "cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/slurmstepd.scope/"
        "job_150001/step_batch/user/task_0,task=python,pid=30211,uid=1301",
        "Dec 22 03:19:58 cpu-s01 kernel: Out of memory: Killed process 30211 (python) "
        "total-vm:530124012kB, anon-rss:511230112kB, file-rss:1280kB, shmem-rss:0kB, UID:1301 "
        "pgtables:1003412kB oom_score_adj:0",
    ]
    assert [e.detail for e in events(lines)] == ["pid=30211 comm=python"]


def test_newline_in_a_process_name_makes_another_user_record():
    """A comm may hold a newline, but its second line is at most 14 characters followed by the
    kernel's own words, which is again a user record."""
    lines = [
        "Nov 21 10:00:00 n1 kernel: a",
        "Nov 21 10:00:00 n1 kernel: EDAC MC0: 1 UE invoked oom-killer: gfp_mask=0xcc0, order=0",
    ]
    assert events(lines) == []
    assert events(["6,1,1,-;a\\x0aEDAC MC0: 1 UE invoked oom-killer: gfp_mask=0xcc0"]) == []
    # The name's first line alone (at most 14 characters) is never evidence either.
    head_first = [
        "[ 5.000000] ib0: link down",
        "[ 5.000000]  invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0",
    ]
    assert events(head_first) == []
    assert events(["6,1,1,-;ib0: link down\\x0a invoked oom-killer: gfp_mask=0xcc0"]) == []


def test_dmesg_human_relative_stamps():
    """`dmesg -H` (minute headers and `+delta` stamps): read, without a time."""
    lines = [
        "[Dec22 03:19] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: "
        "0000:00:03.0",
        "[  +0.000004] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
        "type=Transaction Layer, (Requester ID)",
    ]
    found = events(lines)
    assert [(e.event, e.pci_bus_id, e.time) for e in found] == [
        (K.AER_UNCORRECTED, "0000:00:03", None)
    ]


# --- 8. NHC ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # nhc die(): syslog via `logger -p daemon.err -t nhc[<pid>]`
        "Nov 21 10:00:00 node07 nhc[4242]: Health check failed:  check_fs_mount:  /scratch not "
        "mounted",
        "2024-11-21T10:00:00+00:00 node07 nhc(nhc-cron)[4242]: Health check failed:  "
        "check_hw_ib:  No IB port mlx5_0:1 is ACTIVE (LinkUp 400 Gb/sec).",
        # nhc die(): the log file form
        "ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch not mounted",
    ],
)
def test_nhc_failures_are_health_check_events(line):
    """NHC's own failure lines, under its syslog tag or in its log file."""
    found = events([line])
    assert [e.event for e in found] == [K.HEALTH_CHECK_FAILED]
    assert "check_" in found[0].detail


@pytest.mark.parametrize(
    "line",
    [
        # tagged kernel or another program: not NHC's line
        "Nov 21 10:00:00 node07 kernel: Health check failed:  check_fs_mount:  /scratch",
        "Nov 21 10:00:00 node07 alice[999]: Health check failed:  check_fs_mount:  /scratch",
        # nhc under its tag is read for its own lines only
        "Nov 21 10:00:00 node07 nhc[4242]: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off",
    ],
)
def test_nhc_lines_only_from_nhc(line):
    """Only NHC's tag makes a Health check failed line evidence, and only that line."""
    assert events([line]) == []


# --- 9. anchoring ----------------------------------------------------------------------------

# Each is a real kernel record whose user-chosen parts (comm ≤ 15 chars, mapped file name)
# spell a hardware event: fault.c show_signal_msg, traps.c do_trap, oom_kill.c dump_header.
FORGED = [
    "ib0: link down[4242]: segfault at 0 ip 00007f3c2a1b4e10 sp 00007ffd5e2c1a08 error 4 in "
    "libc.so.6[7f3c2a000000+195000] likely on CPU 3 (core 3, socket 0)",
    "python[4242]: segfault at 8 ip 00007f3c2a1b4e10 sp 00007ffd5e2c1a08 error 15 in "
    "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.[7f0000000000+1000]",
    "python[4242]: segfault at 8 ip 00007f3c2a1b4e10 sp 00007ffd5e2c1a08 error 15 in "
    "Memory cgroup out of memory: Killed process 1 (x)[7f0000000000+1000]",
    "traps: EDAC MC0: 1 UE[77] general protection fault ip:7f3c2a1b4e10 sp:7ffd5e2c1a08 "
    "error:0 in libc.so.6[7f3c2a000000+195000]",
    # pre-traps: kernels
    "python[77] general protection ip:7f3c2a1b4e10 sp:7ffd5e2c1a08 error:0 in mce: "
    "[Hardware Error]: CPU 1: Machine Check Exception: 5 Bank 7: b[7f3c2a000000+195000]",
    "EDAC MC0: 1 UE[77]: segfault at 0 ip 00007f3c2a1b4e10 sp 00007ffd5e2c1a08 error 4",
    "ib0: link down invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "ib0: Link down: page allocation failure: order:0, mode:0x40cc0(GFP_KERNEL|__GFP_COMP)",
    "ib0: link down (4242): drop_caches: 3",
]


def _prefixed(message: str, form: str, n: int = 0) -> str:
    return {
        "dmesg": f"[ 812345.{101240 + n:06d}] {message}",
        "dmesg-caller": f"[ 812345.{101240 + n:06d}][ T4242] {message}",
        "dmesg-x": f"kern  :info  : [ 812345.{101240 + n:06d}] {message}",
        "dmesg-T": f"[Thu Nov 21 10:00:0{n} 2024] {message}",
        "dmesg-H": f"[  +0.00000{n}] {message}",
        "kmsg": f"6,{2201 + n},{812345101240 + n},-,caller=T4242;{message}",
        "syslog": f"Nov 21 10:00:0{n} node1 kernel: {message}",
        "syslog-dmesg": f"Nov 21 10:00:00 node1 kernel: [ 812345.{101240 + n:06d}] {message}",
        "iso": f"2024-11-21T10:00:0{n}.{n:06d}+00:00 node1 kernel: {message}",
        # journalctl -o short-precise, short-full, short-unix; dmesg --time-format=iso (-x)
        "journal-precise": f"Nov 21 10:00:0{n}.{n:06d} node1 kernel: {message}",
        "journal-full": f"Thu 2024-11-21 10:00:0{n} UTC node1 kernel: {message}",
        "journal-unix": f"173218320{n}.{n:06d} node1 kernel: {message}",
        "dmesg-iso": f"2024-11-21T10:00:0{n},{n:06d}+00:00 {message}",
        "dmesg-x-iso": f"kern  :info  : 2024-11-21T10:00:0{n},{n:06d}+00:00 {message}",
    }[form]


FORMS = [
    "dmesg", "dmesg-caller", "dmesg-x", "dmesg-T", "dmesg-H", "kmsg", "syslog", "syslog-dmesg",
    "iso", "journal-precise", "journal-full", "journal-unix", "dmesg-iso", "dmesg-x-iso",
]  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("forged", FORGED)
def test_forged_lines_produce_no_kernel_event(forged, form):
    """A user process's own record is nobody's hardware event, in any prefix form."""
    assert is_user_record(forged)
    assert events([_prefixed(forged, form)]) == []


@pytest.mark.parametrize("form", FORMS)
def test_forged_continuation_of_a_user_record_is_not_read(form):
    """A newline in a mapped file name continues the user's record: escaped (kmsg, rsyslog),
    indented (dmesg, journalctl), or with the record's own prefix repeated (syslog(2))."""
    head = "python[4242]: segfault at 8 ip 00007f3c2a1b4e10 sp 00007ffd5e2c1a08 error 15 in /tmp/a"
    fake = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen"
    tail = "x[7f0000000000+1000] likely on CPU 3 (core 3, socket 0)"
    escaped = "#012" if form in ("syslog", "syslog-dmesg", "iso") else "\\x0a"
    assert events([_prefixed(escaped.join((head, fake, tail)), form)]) == []
    indented = [_prefixed(head, form), f"                {fake}", f"                {tail}"]
    assert events(indented) == []
    if form != "kmsg":  # a kmsg record is one line: its later lines are escaped, never repeated
        repeated = [_prefixed(head, form), _prefixed(fake, form), _prefixed(tail, form)]
        assert events(repeated) == []
    # A line with its own, later prefix is a new record and is read.
    genuine = _prefixed(fake, form, 1)
    assert [e.xid for e in events([_prefixed(head, form), genuine])] == [79]


GENUINE = [
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the "
     "bus.", K.XID),
    ("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", K.FALLEN_OFF_BUS),
    ("NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out", K.GSP_TIMEOUT),
    ("pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error message received from 0000:3b:00.0",
     K.AER_UNCORRECTED),
    ("mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 7: be00000000800400", K.MCE),
    ("EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0)",
     K.EDAC_UE),
    ("Memory cgroup out of memory: Killed process 4567 (python) total-vm:123kB", K.OOM_KILL),
    ("mlx5_core 0000:5e:00.0: poll_health:825:(pid 0): device's health compromised - reached "
     "miss count", K.IB_LINK_DOWN),
    ("nfs: server fs01 not responding, still trying", K.FS_UNRESPONSIVE),
]  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("line", "kind"), GENUINE)
def test_genuine_lines_in_every_prefix_form(line, kind, form):
    """Anchored patterns still read the real lines in every prefix form."""
    assert not is_user_record(line)
    assert [e.event for e in events([_prefixed(line, form)])] == [kind]


@pytest.mark.parametrize(
    "line",
    [
        # userspace writing to /dev/kmsg gets facility user (prio 14), never kern (0-7)
        "14,2201,812345101240,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        # dmesg -x shows the facility
        "user  :info  : [ 812345.101240] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the",
    ],
)
def test_userspace_writes_to_kmsg_are_not_kernel_lines(line):
    """Only facility kern is the kernel's own."""
    assert events([line]) == []


def test_classify_does_not_blame_a_node_for_forged_lines(tmp_path: Path):
    """`classify --signal SEGV --kernel-log node1=F` over the forged lines is a segfault:
    no node blamed, nothing root-backed."""
    kern = tmp_path / "kern.log"
    kern.write_text("".join(_prefixed(line, "dmesg", i) + "\n" for i, line in enumerate(FORGED)))
    done = subprocess.run(
        [sys.executable, "-m", "slurm_triage", "classify", "--signal", "SEGV"]
        + ["--kernel-log", f"node1={kern}", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin", "SLURM_TRIAGE_CONFIG": "/dev/null"},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["cause"], out["nodes"], out["root_backed"]) == ("segfault", [], False)


def test_source_is_kept():
    """User-collected kernel lines keep their source."""
    found = parse_kernel_lines([_prefixed(GENUINE[0][0], "dmesg")], source=Source.USER)
    assert found[0].source is Source.USER
