"""The facts attribution reasons over: typed, frozen, each with its node, time and collector.

A fact says what was observed, not what it means: `attribution` turns facts into a cause.
Every fact carries `node` (the Slurm node name it concerns, None if job-wide or unknown),
`time` (epoch seconds when known; None is kept by the window rule) and `source`: USER when the
job's own processes, wrapper or logs produced it, ROOT when root did (epilog, kernel log,
NVML from the epilog, health checks). Only ROOT facts can make a node drainable.
"""

from __future__ import annotations

from enum import StrEnum

from slurm_triage.frozen import Frozen
from slurm_triage.job_state import JobState
from slurm_triage.taxonomy import Cause


class Source(StrEnum):
    """Who collected a fact: the job's user, or root."""

    USER = "user"
    ROOT = "root"


def parse_signal(text: str) -> int:
    """A signal number from `SIGSEGV`, `segv` or `11`; ValueError otherwise."""
    value = text.strip()
    if value.isdigit():
        number = int(value)
        if 1 <= number <= 64:
            return number
        raise ValueError(f"signal number {number} out of range 1-64")
    name = value.upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    import signal  # a name to read: classify and the decision mostly see numbers (issue 20)

    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {text!r} (use a name like SIGSEGV or a number)") from None


def signal_name(number: int) -> str:
    """`SIGSEGV` for 11; `signal 42` for numbers with no name."""
    import signal  # its Signals enum: ~1 ms to build, for a record that names a signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Fact(Frozen, kw_only=True):
    """Base of all facts: the node it concerns, when it happened, and who collected it."""

    # The record's name for the kind, a class attribute: left unannotated, as a ClassVar
    # annotation would need typing imported for dataclasses to tell it from a field.
    KIND = ""
    node: str | None = None
    time: float | None = None
    source: Source = Source.USER

    def gpu_own(self) -> bool:
        """Whether this is a node's own GPU fault (an XID, NVML's view of a GPU), which no
        circuit breaker holds back: a GPU does not fail because a mount hangs elsewhere,
        while a hung mount's kernel lines or a link down belong to a shared fault."""
        return False


class ProcessExit(Fact, kw_only=True):
    """How a process (the job step's task, or the wrapper's child) ended."""

    KIND = "process_exit"
    exit_code: int | None = None
    signal: int | None = None
    core_dumped: bool = False
    runtime_s: float | None = None

    def death_signal(self) -> int | None:
        """The signal that ended it: the explicit one, or 128+N / -N in the exit code."""
        if self.signal:
            return self.signal
        code = self.exit_code
        if code is not None and (-64 <= code < 0):
            return -code
        if code is not None and 129 <= code <= 128 + 64:
            return code - 128
        return None

    def failed(self) -> bool:
        """True when the process did not exit 0."""
        return bool(self.signal) or (self.exit_code is not None and self.exit_code != 0)


class SlurmState(Fact, kw_only=True):
    """The job state Slurm recorded, and for CANCELLED the uid that cancelled it."""

    KIND = "slurm_state"
    state: JobState
    by_uid: int | None = None
    reason: str = ""


class KernelEventKind(StrEnum):
    """What a kernel-log line reported."""

    XID = "xid"
    FALLEN_OFF_BUS = "fallen_off_bus"
    AER_UNCORRECTED = "aer_uncorrected"
    MCE = "mce"
    EDAC_UE = "edac_ue"
    KERNEL_PANIC = "kernel_panic"
    OOM_KILL = "oom_kill"
    IB_LINK_DOWN = "ib_link_down"
    FS_UNRESPONSIVE = "fs_unresponsive"
    GSP_TIMEOUT = "gsp_timeout"
    HEALTH_CHECK_FAILED = "health_check_failed"
    BOOT = "boot"  # the kernel's banner: nothing before it is the running kernel's state
    UNKNOWN = "unknown"


class KernelEvent(Fact, kw_only=True):
    """One event from a node's kernel log; `xid` and `pci_bus_id` (dddd:bb:dd) when known."""

    KIND = "kernel_event"
    event: KernelEventKind
    xid: int | None = None
    pci_bus_id: str | None = None
    detail: str = ""

    def gpu_own(self) -> bool:
        return self.xid is not None


class NvmlCondition(StrEnum):
    """A GPU condition read through NVML (by the wrapper or the epilog)."""

    GPU_LOST = "gpu_lost"
    GPU_MISSING = "gpu_missing"
    XID_EVENT = "xid_event"
    ECC_UNCORRECTED = "ecc_uncorrected"
    ROW_REMAP_PENDING = "row_remap_pending"
    ROW_REMAP_FAILURE = "row_remap_failure"
    RETIRED_PAGES_PENDING = "retired_pages_pending"
    NVLINK_DOWN = "nvlink_down"
    NVLINK_ERRORS = "nvlink_errors"
    PCIE_DEGRADED = "pcie_degraded"
    THERMAL_SLOWDOWN = "thermal_slowdown"
    POWER_BRAKE = "power_brake"
    INIT_FAILED = "init_failed"
    DRIVER_MISMATCH = "driver_mismatch"
    RESET_REQUIRED = "reset_required"
    RECOVERY_ACTION = "recovery_action"
    UNKNOWN = "unknown"


class NvmlFact(Fact, kw_only=True):
    """An NVML observation about one GPU; `value` is the XID, count or action code if any."""

    KIND = "nvml"
    condition: NvmlCondition
    gpu: str | None = None
    value: int | None = None
    detail: str = ""

    def gpu_own(self) -> bool:
        return True


class CheckStatus(StrEnum):
    """A health check's verdict: the one status type of health_checks.CheckResult and of
    the HealthCheck facts made from it. A check that cannot decide is UNKNOWN, never OK."""

    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"
    SKIPPED = "SKIPPED"


class HealthCheck(Fact, kw_only=True):
    """A health check's result on a node; `cause` names the fault it found, if specific."""

    KIND = "health_check"
    check: str
    status: CheckStatus
    reason: str = ""
    cause: Cause | None = None


class LogHit(Fact, kw_only=True):
    """A known signature matched in a job's stdout/stderr tail; `count` lines matched it."""

    KIND = "log_signature"
    signature: str
    cause: Cause
    excerpt: str = ""
    count: int = 1


class RootException(Fact, kw_only=True):
    """The root exception of a log (attribution.tracebacks.find_root: the traceback that
    ended the failing rank).

    For a torchrun `ChildFailedError` it is the summary's "Root Cause (first observed
    failure)": the failed rank, its exit code, and the signal when it died of one.
    """

    KIND = "root_exception"
    exc_type: str
    message: str = ""
    rank: int | None = None
    exit_code: int | None = None
    signal: int | None = None


class Stall(Fact, kw_only=True):
    """The wrapper saw no progress for `idle_s` seconds and ended the job."""

    KIND = "stall"
    idle_s: float


FACT_TYPES: dict[str, type[Fact]] = {
    cls.KIND: cls
    for cls in (
        ProcessExit,
        SlurmState,
        KernelEvent,
        NvmlFact,
        HealthCheck,
        LogHit,
        RootException,
        Stall,
    )
}
