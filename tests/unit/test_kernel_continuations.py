"""A kernel record's later lines are the kernel's own only in a multi-line driver message that
quotes no string. Subsystems quote user strings holding newlines: an unprivileged user in their
own user namespace (`unshare -Urm`) runs `mount -t tmpfs -o $'x\\nNVRM: ...'` and the kernel
logs `tmpfs: Unknown parameter 'x<newline>NVRM: ...'`; any /dev/nvidiactl client sends NVRM's
API-mismatch message a version string of its own. Each case goes through what the checks and
the Epilog use (read_kernel_events, gpu.xid, the Epilog's root record and attribute()) in the
forms a node's kernel log comes in: /dev/kmsg (`\\x0a`), `dmesg -x --time-format=iso` and
journalctl (indented later lines), syslog (rsyslog's `#012`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_triage.attribution import attribute, job_window
from slurm_triage.config import Config, HealthConfig, PathsConfig
from slurm_triage.evidence import KernelEventKind
from slurm_triage.health_checks import kernel_log
from slurm_triage.health_checks.result import Action, CheckStatus
from slurm_triage.prolog_epilog.epilog import collect
from slurm_triage.prolog_epilog.job_end import JobEnd

K = KernelEventKind
NODE = "node07"
FORMS = ["kmsg", "dmesg-x", "journal", "syslog"]

FALLEN = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
XID48 = (
    "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python, An uncorrectable double bit error "
    "(DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."
)
XID79 = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)
# fs_context.c logfc `%s: Unknown parameter '%s'` (tmpfs), overlayfs ovl_mount_dir_noesc
# `failed to resolve '%s': %i`: one record each, the user's option quoted whole.
ATTACKS = {
    "tmpfs-lost-gpu": ["tmpfs: Unknown parameter 'x", f"{FALLEN}'"],
    "overlayfs-xid48": ["overlayfs: failed to resolve '/x", f"{XID48}': -2"],
    # osapi.c RmPerformVersionCheck: 63 bytes of the client's version string, newlines and all
    "nvrm-api-mismatch": [
        "NVRM: API mismatch: the client 'python' (pid 4242)",
        "NVRM: has the version x",
        "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus., but this kernel module has",
        "NVRM: the version 595.45.04.  Please make sure that this",
        "NVRM: kernel module and all NVIDIA driver components",
        "NVRM: have the same version.",
    ],
}
# osapi.c rm_is_supported_device: one nv_printf, three lines, no string argument.
REAL_FALLEN = [
    "NVRM: The NVIDIA GPU 0000:5d:00.0",
    "NVRM: (PCI ID: 10de:2330) installed in this system has",
    "NVRM: fallen off the bus and is not responding to commands.",
]


def boot_time() -> float:
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


def record(form: str, when: float, lines: list[str], seq: int) -> list[str]:
    """One kernel record of `lines` as the form writes it."""
    utc, local = datetime.fromtimestamp(when, UTC), datetime.fromtimestamp(when).astimezone()
    if form == "kmsg":
        usec = int((when - boot_time()) * 1e6)
        return [f"3,{seq},{usec},-;" + "\\x0a".join(lines)]
    if form == "syslog":
        day = f"{local:%b} {local.day:2d} {local:%H:%M:%S}"
        return [f"{day} {NODE} kernel: " + "#012".join(lines)]
    head = {
        "dmesg-x": f"kern  :err   : {utc:%Y-%m-%dT%H:%M:%S,%f}+00:00 ",
        "journal": f"{utc:%Y-%m-%dT%H:%M:%S.%f}+00:00 {NODE} kernel: ",
    }[form]
    return [head + lines[0]] + [" " * len(head) + line for line in lines[1:]]


def kernel_log_at(
    form: str, records: list[tuple[float, list[str]]], tmp_path: Path, mp: pytest.MonkeyPatch
) -> str:
    """The `health.kernel_log` a node would have: /dev/kmsg (its records faked at the read)
    or a file."""
    lines = [x for i, (when, rec) in enumerate(records) for x in record(form, when, rec, 100 + i)]
    if form == "kmsg":
        mp.setattr(kernel_log, "_read_kmsg", lambda path, before_read=None: list(lines))
        return "/dev/kmsg"
    path = tmp_path / f"kern-{form}.log"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def epilog_attribution(path: str, tmp_path: Path, now: float):  # type: ignore[no-untyped-def]
    """The Epilog's root record for a job that ended now, and the attribution of it."""
    config = Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        health=HealthConfig(kernel_log=path, expected_gpus=0),
    )
    rec = collect(config, JobEnd(job_id=5, node=NODE, uid=1000, ended_at=now), now)
    return rec, attribute(rec.facts, window=job_window(now))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_newline_in_a_quoted_user_string_forges_no_gpu_fault(
    attack: str, form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost GPU or an XID after a newline in a user's string is no event: gpu.xid stays OK and
    the Epilog's record blames no node. Put at the start of the quote, it is not at the start
    of the message either (anchoring)."""
    now = time.time()
    lines = ATTACKS[attack]
    records = [(now - 90, ["".join(lines)]), (now - 60, lines)]
    path = kernel_log_at(form, records, tmp_path, monkeypatch)
    events = kernel_log.read_kernel_events(path, NODE)
    assert events == []
    assert kernel_log.check_xid(events, HealthConfig(), now).status is CheckStatus.OK
    rec, blamed = epilog_attribution(path, tmp_path, now)
    assert (rec.facts, blamed.nodes, blamed.root_backed) == ((), (), False)


@pytest.mark.parametrize("form", FORMS)
def test_the_real_multi_line_lost_gpu_is_read_beside_a_forged_one(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVRM's three-line 'fallen off the bus' message still names its GPU in every form; the
    forged one before it names none."""
    now = time.time()
    records = [(now - 60, ATTACKS["tmpfs-lost-gpu"]), (now - 30, REAL_FALLEN)]
    path = kernel_log_at(form, records, tmp_path, monkeypatch)
    events = kernel_log.read_kernel_events(path, NODE)
    assert [(e.event, e.pci_bus_id) for e in events] == [(K.FALLEN_OFF_BUS, "0000:5d:00")]
    result = kernel_log.check_xid(events, HealthConfig(), now)
    assert (result.failed, result.action, result.evidence["pci_bus_id"]) == (
        True,
        Action.REBOOT,
        "0000:5d:00",
    )


@pytest.mark.parametrize("form", FORMS)
def test_a_quoted_boot_banner_does_not_hide_an_earlier_xid(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Linux version ...` after a newline in a mount option is no boot: the real XID 79 logged
    before it still fails gpu.xid and asks for a reboot."""
    now = time.time()
    forged = ["tmpfs: Unknown parameter 'x", "Linux version 6.1.0 (a@b) #1'"]
    records = [(now - 120, [XID79]), (now - 60, forged)]
    path = kernel_log_at(form, records, tmp_path, monkeypatch)
    events = kernel_log.read_kernel_events(path, NODE)
    assert [(e.event, e.xid) for e in events] == [(K.XID, 79)]
    result = kernel_log.check_xid(events, HealthConfig(), now)
    assert (result.failed, result.action) == (True, Action.REBOOT)


@pytest.mark.parametrize("form", FORMS)
def test_a_quoted_call_trace_frame_is_no_filesystem_hang(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's own task blocked outside any filesystem, then an NFS frame in a mount option:
    no filesystem hang."""
    now = time.time()
    hung = "INFO: task python:4242 blocked for more than 120 seconds."
    frame = ["tmpfs: Unknown parameter 'x", " rpc_wait_bit_killable+0x24/0x40 [sunrpc]", "'"]
    records = [(now - 61, [hung]), (now - 60, frame)]
    path = kernel_log_at(form, records, tmp_path, monkeypatch)
    assert kernel_log.read_kernel_events(path, NODE) == []
