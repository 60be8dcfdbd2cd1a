"""Parse kernel-log lines into `KernelEvent` facts: XIDs, lost GPUs, GSP timeouts, AER, MCE,
OOM kills, HCA faults, hung filesystems, and NHC's own failures.

Reads every form a node keeps its kernel log in (kmsg, dmesg and its time formats, syslog,
journalctl's short forms, RFC 3339): `kernel_lines` splits the prefix off and tells the time
and whether the kernel wrote the line. In tagged forms only the kernel's own lines count, so
a user's `logger "NVRM: Xid ..."` is not a hardware event; NHC's own `Health check failed:`
lines are read under its tag `nhc` (and only those).
XIDs in every driver format: old `NVRM: Xid (0000:03:00): 14, ...`, `PCI:`, and MIG
`(PCI:0000:01:00 GPU-I:05)` and `(PCI:0000:01:00 GPU-I:05 GPU-CI:01)` (kernel_rc.c
krcReportXid). PCI addresses are normalised to lower-case `dddd:bb:dd`.

Anchoring. The kernel prints user-chosen text inside its own messages: a process name (comm,
at most 15 characters) at the start of `python[4242]: segfault at ...`, `traps: python[4242]
general protection ...`, `python invoked oom-killer: ...`, and a mapped file name (any bytes,
newlines included) inside the segfault line. So every pattern is anchored where the driver or
subsystem prints it (the message start, after the prefix above), and a record that is a user
process's own (segfault, trap, oom-killer invocation, page allocation failure ...) is
recognised first and nothing else is read from it, nor from the lines that continue it: its
`\\x0a`/`#012`-escaped parts, indented or prefix-less lines after it, and lines that repeat its
exact prefix (the kernel's syslog interface repeats the prefix on each line of a multi-line
record). With second-resolution stamps (classic syslog, `dmesg -T`) that last rule also skips
a genuine line printed in the same second right after such a record: the price of not taking
a forged line for a real one. That rule holds only after records that can end in a file name
(segfaults, traps); a process name (15 characters) cannot spell an evidence line, and a
message of under 16 characters (the first line of a name holding a newline) is never one.
Other subsystems quote user strings too, newlines included: a mount option in `tmpfs: Unknown
parameter '...'` (any user may mount in their own user namespace), the client's version in
NVRM's API-mismatch message. So any record's later lines (escaped parts, indented or
prefix-less lines after it) are read only in a multi-line driver message that quotes no
string (`kernel_lines.continued_lines`); every other record is read from its first line alone.
The syslog(2) form (`dmesg -S`, rsyslog's imklog reading /proc/kmsg) repeats the prefix on
each line of a record, so its lines read as records of their own: outside segfaults and traps
nothing tells them from real ones (distinct records share a stamp too). Files with no prefix
at all mark no record boundaries but escapes, so cannot be defended against a forged indented
line. Prefer kmsg, dmesg or journal output.
"""

from __future__ import annotations

import heapq
import os
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from slurm_triage.attribution.kernel_lines import KernelLine, continued_lines, split_line
from slurm_triage.attribution.tail import DEFAULT_TAIL_BYTES, decode_tail, read_tail
from slurm_triage.attribution.xid import JOB_MADE_XIDS
from slurm_triage.evidence import KernelEvent, KernelEventKind, Source

_K = KernelEventKind
_NHC_TAGS = re.compile(r"^(?:nhc|NHC)(?:\(.*\))?$")
_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

# --- a user process's own record: read nothing from it ---------------------------------------
# x86 show_signal_msg `%s[%d]: segfault at ...`, do_trap `traps: %s[%d] ...`, older
# `%s[%d] general protection ...`, oom_kill.c `%s invoked oom-killer: `, warn_alloc
# `%s: page allocation failure: `, `%s (%d): drop_caches: %d`, `%s (%d) used greatest stack`.
_USER_RECORD = re.compile(
    r"^(?:traps: "
    r"|.{0,16}?\[\d+\]"
    r"|.{0,16}?invoked oom-killer: "
    r"|.{0,16}?page allocation failure: "
    r"|.{0,16}?\(\d+\)[: ])",
    re.DOTALL,
)
# Of those, the ones that may end in a mapped file name (`... in <file>[<base>+<size>]`), the
# only unbounded user text: a newline there is how a forged line would follow.
_FILE_RECORD = re.compile(r"^(?:traps: |.{0,16}?\[\d+\])", re.DOTALL)
# A process name may itself hold a newline: its first line (at most 14 characters) then stands
# alone. No evidence line is that short.
_MIN_EVIDENCE = 16

# --- NVIDIA driver (open-gpu-kernel-modules 595.45.04; gpud kmsg.go) --------------------------
_XID = re.compile(
    r"^NVRM: Xid \((?:PCI:)?(?P<bdf>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?"
    r"(?: GPU-I:(?P<gi>\d+)(?: GPU-CI:\d+)?)?\): (?P<xid>\d+),\s*(?P<rest>.*)"
)
_NVRM_BDF = re.compile(rf"^NVRM: (?:GPU|The NVIDIA GPU) (?:at )?(?:PCI:)?({_BDF})")
# osinit.c NV_DEV_PRINTF `NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.`; osapi.c's
# three-line `NVRM: The NVIDIA GPU %04x:%02x:%02x.%x` / `(PCI ID: ...) installed in this
# system has` / `NVRM: fallen off the bus and is not responding to commands.`; nv.c's
# `NVRM: [GPU ...: ]GPU is lost, skipping <what>` (printed at NV_DBG_INFO only).
_FALLEN = re.compile(
    rf"^NVRM: GPU (?P<bdf>{_BDF}): GPU has fallen off the bus\b"
    rf"|^NVRM: (?:The NVIDIA GPU (?P<bdf2>{_BDF})\b.*?|system has )?fallen off the bus and is not "
    r"responding to commands"
    rf"|^NVRM: (?:GPU (?P<bdf3>{_BDF}): )?GPU is lost, skipping \w"
)
# kernel_gsp.c: timeouts the driver logs without an Xid (GSP_SLOWNESS), heartbeats, sanity.
_GSP = re.compile(
    r"^NVRM: (?:GPU\d+ )?(?:\w+: )?"
    r"(?:Timeout after \d+s of waiting for RPC response from GPU\d+ GSP!"
    r"|Timeout waiting for RPC from GSP\d*!"
    r"|GPU\d+ sanity check failed 0x[0-9a-fA-F]+ waiting for RPC response from GSP\."
    r"|(?:GSP RM|LibOS) heartbeat timed out$"
    r"|Heartbeat timed out, currentTimeMs \d+)"
    rf"|^NVRM: Rate limiting GSP RPC error prints for GPU at PCI:(?P<bdf>{_BDF}) "
)

# --- PCIe AER (drivers/pci/pcie/aer.c, pre- and post-6.8 wording) ----------------------------
_AER = re.compile(
    rf"^[\w.-]+ (?P<dev>{_BDF}): AER: (?:Multiple )?Uncorrect(?:ed|able) \((?:Non-)?Fatal\) "
    rf"error (?:message received from|received:) (?P<src>{_BDF})"
    rf"|^[\w.-]+ (?P<dev2>{_BDF}): (?:AER: )?PCIe Bus Error: severity=Uncorrect(?:ed|able) "
    r"\((?:Non-)?Fatal\)"
)

# --- host hardware ---------------------------------------------------------------------------
_MCE = re.compile(
    r"^(?:mce: |\{\d+\})?\[Hardware Error\]: (?:CPU \d+: Machine Check Exception"
    r"|event severity: (?:fatal|recoverable))"
    r"|^(?:mce: )?Uncorrected hardware memory error"
    r"|^Kernel panic - not syncing: Fatal [Mm]achine check"
)
_EDAC_UE = re.compile(r"^EDAC (?:\S+ )?MC\d+: \d+ UE \w")
_PANIC = re.compile(r"^Kernel panic - not syncing: (.*)")
# init/version.c's linux_banner, the first line of every boot: "Linux version 6.1.0-28-amd64
# (debian-kernel@...) (gcc-12 ...) #1 SMP ...". Longer than a task name (16 bytes), so a
# process cannot forge it through a line that starts with its name.
_BOOT = re.compile(r"^Linux version \d+\.\d+\S* \(\S+@\S+\) ")

# --- OOM killer (mm/oom_kill.c, old and new wording) -----------------------------------------
_OOM_KILL = re.compile(
    r"^(?:(?:Memory cgroup )?[Oo]ut of memory(?: \([\w ]+\))?: )?Kill(?:ed)? process "
    r"(?P<pid>\d+) \((?P<comm>.*?)\)"
    r"|^oom_reaper: reaped process (?P<pid2>\d+) \((?P<comm2>.*?)\)"
    r"|^oom-kill:constraint=\w+,.*,task=(?P<comm3>.*),pid=(?P<pid3>\d+),uid=\d+$"
)

# --- InfiniBand / mlx5 (drivers/net/ethernet/mellanox/mlx5/core/{health,events}.c) ----------
# mlx5_core_err/warn print `mlx5_core <bdf>: <func>:<line>:(pid <n>): <text>`, mlx5_core_info
# `mlx5_core <bdf>: <text>`, netdev_info `mlx5_core <bdf> <ifname>: <text>`.
_IB_NETDEV = re.compile(r"^(?:ib[\w.]*|mlx5_\d+): (?:lost carrier|[Ll]ink down)$")
_MLX5 = re.compile(
    rf"^mlx5_core (?P<bdf>{_BDF})(?: (?P<ifname>[\w.-]+))?: "
    r"(?:(?P<func>\w+):\d+:\(pid \d+\): )?(?P<text>.*)$"
)
_MLX5_FAULT = re.compile(
    r"^(?:health recovery flow aborted, PCI (?:reads still not working|channel offline)"
    r"|device's health compromised - reached miss count"
    r"|Fatal error \d+ detected"
    r"|PCI slot is unavailable"
    r"|Port module event\[error\]: module \d+, Cable error"
    r"|Port module event: module \d+, Cable unplugged)"
)
_IB_PORT_DOWN = re.compile(r"^Port: \d+ Link DOWN$")
# `Health issue observed, <syndrome>, severity(<n>) <LEVEL>:`: 0-3 (EMERG..ERR) only.
_MLX5_HEALTH = re.compile(r"^Health issue observed, .*, severity\((?P<sev>\d+)\) \w+:")

# --- filesystems -----------------------------------------------------------------------------
_FS = re.compile(
    r"^nfs: server (\S+) not responding|^Lustre: \S+: Connection to (\S+) \(at \S+\) was lost"
)
# kernel/hung_task.c, then sched_show_task's call trace (a frame per line, maybe `? `, maybe
# the pre-4.x `[<ffffffff...>] ` address, `[module]` when not built in).
_HUNG = re.compile(r"^(?:INFO: )?task (?P<comm>.{1,16}?):(?P<pid>\d+) blocked for more than \d+ s")
_FRAME = re.compile(
    r"^\s*(?:\[<[0-9a-f]+>\] )?(?:\? )?(?P<sym>[A-Za-z_.$][\w.$]*)\+0x[0-9a-f]+/0x[0-9a-f]+"
    r"(?: \[(?P<mod>[\w-]+)\])?\s*$"
)
_FS_SYMBOL = re.compile(
    r"^(?:nfs4?_|rpc_wait_bit_killable$|__rpc_execute$|ptlrpc_|lustre|mmfs|cxiWaitEventWait"
    r"|_ZN\w*[Gg][Pp][Ff][Ss])"
)
_FS_MODULE_SYMBOL = re.compile(r"^(?:ll_|osc_|cl_)")  # Lustre's, only from a module
_FS_MODULES = {
    "nfs", "nfsv3", "nfsv4", "sunrpc", "lustre", "ptlrpc", "osc", "mdc", "lov", "lmv",
    "obdclass", "lnet", "ko2iblnd", "ksocklnd", "mmfs26", "mmfslinux", "tracedev",
}  # fmt: skip
HUNG_TASK_LINES = 40

# --- LBNL NHC (nhc `die()`: syslog `Health check failed:  <check>:  <why>`, log file
# `ERROR:  nhc:  Health check failed:  ...`) -----------------------------------------------
_NHC = re.compile(r"^(?:ERROR: +[\w().-]+: +)?Health check failed: +(?P<what>\S.*)$")

# A job can make the kernel print application XIDs (XID 13 prints a line per trapped SM,
# hundreds per fault) and OOM kills (one per killed process) as often as it likes: at most
# this many of them are kept, and apart from them this many of all others, so that a storm
# cannot push out the node-fatal event logged before it. The two, with the Epilog's other
# facts, stay within an evidence record's MAX_FACTS (1000).
MAX_EVENTS = 300
_REPEAT_S = 60.0  # the same non-XID event on the same device within this is one event


def parse_kernel_lines(
    lines: list[str],
    *,
    node: str | None = None,
    year: int | None = None,
    tz: tzinfo | None = UTC,
    boot_time: float | None = None,
    source: Source = Source.ROOT,
) -> list[KernelEvent]:
    """Every recognised event in `lines`, in order; a syslog host names the node if `node`
    is None. Exact repeats (same event, GPU and time) are kept once, the same non-XID event on
    one device within a minute once, one OOM kill (one pid) once. At most the newest
    MAX_EVENTS job-made events (application XIDs and what follows them, OOM kills) and the
    newest MAX_EVENTS others: a burst of hundreds of application XIDs must hide neither the
    XID 79 after it nor the XID 48 before it."""
    reader = _Reader(node, source)
    year = year or datetime.now(tz).year
    for raw in lines:
        reader.feed(split_line(raw, year=year, tz=tz, boot_time=boot_time))
    return reader.events()


def parse_kernel_file(
    path: str | os.PathLike[str],
    *,
    node: str | None = None,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    year: int | None = None,
    tz: tzinfo | None = UTC,
    boot_time: float | None = None,
) -> list[KernelEvent]:
    """`parse_kernel_lines` over the tail of a kernel-log file; LogReadError if unreadable."""
    data, whole = read_tail(path, tail_bytes)
    return parse_kernel_lines(
        decode_tail(data, whole_file=whole), node=node, year=year, tz=tz, boot_time=boot_time
    )


def normalise_bdf(text: str) -> str:
    """`00000000:3B:00.0` or `0000:3b:00` → `0000:3b:00` (4-hex domain, no function)."""
    domain, bus, rest = text.lower().split(":", 2)
    return f"{domain[-4:]}:{bus}:{rest.split('.', 1)[0]}"


def is_user_record(message: str) -> bool:
    """True when a kernel message is a user process's own record (segfault, trap, ...)."""
    return _USER_RECORD.match(message) is not None


@dataclass
class _Hung:
    where: str | None
    time: float | None
    header: str
    left: int = HUNG_TASK_LINES


_Found = tuple[KernelEventKind, int | None, str | None, str, str | None]


class _Reader:
    """Walks the lines once, keeping what one record tells about the next."""

    def __init__(self, node: str | None, source: Source) -> None:
        self.node, self.source = node, source
        # (line order, event), job-made apart from the rest: each evicts only its own kind.
        self.job_made: deque[tuple[int, KernelEvent]] = deque(maxlen=MAX_EVENTS)
        self.node_level: deque[tuple[int, KernelEvent]] = deque(maxlen=MAX_EVENTS)
        self.emitted = 0
        self.seen: set[tuple[object, ...]] = set()
        self.last_at: dict[tuple[object, ...], float] = {}
        self.last_bdf: str | None = None
        self.hung: _Hung | None = None
        self.any_prefix = False
        # The record the last lines belong to; whether it is a user process's own, and one
        # that may carry a file name (its later lines may repeat its prefix).
        self.rec: KernelLine | None = None
        self.rec_user = False
        self.rec_file = False
        self.rec_more = 0  # how many more of its lines are the kernel's own words

    def events(self) -> list[KernelEvent]:
        """What was kept of both kinds, in the order of their lines."""
        merged = heapq.merge(self.job_made, self.node_level, key=lambda kept: kept[0])
        return [event for _, event in merged]

    def feed(self, line: KernelLine) -> None:
        if not line.prefixed:
            if not line.message.strip():
                return
            if self.rec is not None and (line.message[:1].isspace() or self.any_prefix):
                # Indented (dmesg, journalctl) or prefix-less amid prefixed lines: the rest of
                # the record before it. With no prefix yet, nothing marks where a record ends.
                if self.rec.prefixed:
                    self._later(self.rec, [line.message.strip()])
                else:
                    self._unbounded(self.rec, line.message.strip())
                return
        else:
            self.any_prefix = True
            rec = self.rec
            if (
                self.rec_file
                and rec is not None
                and line.stamp is not None
                and (line.stamp, line.host) == (rec.stamp, rec.host)
            ):
                return  # the same record's next line, its prefix repeated
        parts = line.message.split("\\x0a")
        if line.tag is not None:
            parts = [p for part in parts for p in part.split("#012")]
        self.rec = line
        self.rec_user = line.kernel and is_user_record(parts[0])
        self.rec_file = self.rec_user and _FILE_RECORD.match(parts[0]) is not None
        self.rec_more = continued_lines(parts[0])
        if not self.rec_user:
            self._read(line, parts[0])
            self._later(line, parts[1:])

    def _later(self, line: KernelLine, parts: list[str]) -> None:
        """The record's later lines (escaped parts, indented lines). In a kernel record they
        are read only as far as it is a multi-line driver message (continued_lines): in any
        other they may be a user's string the kernel quotes (`tmpfs: Unknown parameter 'x
        <newline>NVRM: ...'`). NHC's lines under its tag are all its own."""
        if self.rec_user:
            return
        for part in parts:
            if not part:
                continue
            if line.kernel:
                if self.rec_more <= 0:
                    return
                self.rec_more -= 1
            self._read(line, part)

    def _unbounded(self, line: KernelLine, msg: str) -> None:
        """An indented line in a file with no prefixes: read as a line of its own, unless it
        shows the record is a user process's own (a newline in its name)."""
        if self.rec_user:
            return
        if line.kernel and is_user_record(msg):
            self.rec_user = True
            self.rec_file = _FILE_RECORD.match(msg) is not None
            return
        self._read(line, msg)

    def _read(self, line: KernelLine, msg: str) -> None:
        where = self.node or (line.host.split(".", 1)[0] if line.host else None)
        if line.kernel:
            self._kernel(msg, line.time, where)
            if not line.prefixed:
                self._nhc(msg, line.time, where)  # NHC's own log file, read as is
        elif line.tag is not None and _NHC_TAGS.match(line.tag):
            self._nhc(msg, line.time, where)

    def _nhc(self, msg: str, when: float | None, where: str | None) -> None:
        if found := _NHC.match(msg):
            self._emit(_K.HEALTH_CHECK_FAILED, None, None, found.group(0), None, when, where)

    def _kernel(self, msg: str, when: float | None, where: str | None) -> None:
        if found := _NVRM_BDF.match(msg):
            self.last_bdf = normalise_bdf(found.group(1))
        if self._hung_task(msg, when, where) or len(msg) < _MIN_EVIDENCE:
            return
        for kind, xid, bdf, detail, key in _events(msg, self.last_bdf):
            self._emit(kind, xid, bdf, detail, key, when, where)

    def _hung_task(self, msg: str, when: float | None, where: str | None) -> bool:
        if _HUNG.match(msg):
            self.hung = _Hung(where, when, msg)
            return True
        hung = self.hung
        if hung is None or hung.where != where:
            return False
        hung.left -= 1
        if hung.left <= 0:
            self.hung = None
        if (frame := _FRAME.match(msg)) and _fs_frame(frame.group("sym"), frame.group("mod")):
            self.hung = None
            detail = f"{hung.header} (in {frame.group('sym')})"
            self._emit(_K.FS_UNRESPONSIVE, None, None, detail, None, hung.time, where)
            return True
        return False

    def _emit(
        self,
        kind: KernelEventKind,
        xid: int | None,
        bdf: str | None,
        detail: str,
        key: str | None,
        when: float | None,
        where: str | None,
    ) -> None:
        if key is not None:  # one OOM kill is one event, however many lines tell it
            ident: tuple[object, ...] = (kind, key, where)
            if ident in self.seen:
                return
            self.seen.add(ident)
        else:
            ident = (kind, xid, bdf, when, where)
            if ident in self.seen:
                return
            self.seen.add(ident)
            if kind is not _K.XID and when is not None:
                device = (kind, bdf, where)
                last = self.last_at.get(device)
                if last is not None and 0 <= when - last < _REPEAT_S:
                    return
                self.last_at[device] = when
        event = KernelEvent(
            node=where,
            time=when,
            source=self.source,
            event=kind,
            xid=xid,
            pci_bus_id=bdf,
            detail=detail[:300],
        )
        job_made = kind is _K.OOM_KILL or (kind is _K.XID and xid in JOB_MADE_XIDS)
        (self.job_made if job_made else self.node_level).append((self.emitted, event))
        self.emitted += 1


def _events(msg: str, last_bdf: str | None) -> Iterator[_Found]:
    if found := _XID.match(msg):
        yield _K.XID, int(found.group("xid")), normalise_bdf(found.group("bdf")), msg, None
        return
    if found := _FALLEN.match(msg):
        named = found.group("bdf") or found.group("bdf2") or found.group("bdf3")
        yield _K.FALLEN_OFF_BUS, None, normalise_bdf(named) if named else last_bdf, msg, None
    elif found := _GSP.match(msg):
        bdf = found.group("bdf")
        yield _K.GSP_TIMEOUT, None, normalise_bdf(bdf) if bdf else None, msg, None
    elif found := _AER.match(msg):
        bdf = found.group("src") or found.group("dev") or found.group("dev2")
        yield _K.AER_UNCORRECTED, None, normalise_bdf(bdf), msg, None
    elif _MCE.match(msg):
        yield _K.MCE, None, None, msg, None
    elif _BOOT.match(msg):
        yield _K.BOOT, None, None, msg[:80], None
    elif _EDAC_UE.match(msg):
        yield _K.EDAC_UE, None, None, msg, None
    elif found := _PANIC.match(msg):
        kind = _K.OOM_KILL if "Out of memory" in found.group(1) else _K.KERNEL_PANIC
        yield kind, None, None, msg, None
    elif found := _OOM_KILL.match(msg):
        pid = found.group("pid") or found.group("pid2") or found.group("pid3")
        comm = found.group("comm") or found.group("comm2") or found.group("comm3") or ""
        yield _K.OOM_KILL, None, None, f"pid={pid} comm={comm}", f"pid={pid}"
    elif _IB_NETDEV.match(msg):
        yield _K.IB_LINK_DOWN, None, None, msg, None
    elif (found := _MLX5.match(msg)) and _mlx5_fault(found):
        yield _K.IB_LINK_DOWN, None, normalise_bdf(found.group("bdf")), msg, None
    elif _FS.match(msg):
        yield _K.FS_UNRESPONSIVE, None, None, msg, None


def _mlx5_fault(found: re.Match[str]) -> bool:
    text, func = found.group("text"), found.group("func")
    if found.group("ifname"):  # a netdev's carrier, or ib_core's port state (cache.c)
        return text == "Link down" or _IB_PORT_DOWN.match(text) is not None
    if func == "mlx5_enter_error_state":
        return text == "start"
    if health := _MLX5_HEALTH.match(text):
        return int(health.group("sev")) <= 3
    return _MLX5_FAULT.match(text) is not None


def _fs_frame(symbol: str, module: str | None) -> bool:
    if _FS_SYMBOL.match(symbol) or (module is not None and module in _FS_MODULES):
        return True
    return module is not None and _FS_MODULE_SYMBOL.match(symbol) is not None
