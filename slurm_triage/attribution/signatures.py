"""Job-log signatures as data: named, compiled regexes → cause, with how much each one proves.

The literals are what PyTorch, NCCL, CUDA, the NVIDIA driver and slurmstepd print (see
shared/reference/signatures.md §4, which cites each source); where a message changed across
versions both forms are here (`torch.OutOfMemoryError` and the older `RuntimeError: CUDA
out of memory`; old and new slurmstepd oom lines). Kernel-log lines are not here: an XID is
only believed from a kernel log (kernel.py), never from a job's stdout.

To add a signature: append a `Signature` with a stable dotted name (`<origin>.<what>`), the
cause, and the `Role` that says how strong it is; then add a corpus case that needs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

from slurm_triage.taxonomy import Cause


class Role(IntEnum):
    """How much a match proves; the value is its tier in the engine (higher wins)."""

    INFO = 0
    WEAK = 5  # a plausible reading, beaten by anything better (an abort, a save failure)
    SYMPTOM = 10  # what a rank prints when something else failed (NCCL errors, timeouts)
    ERROR = 30  # a real error of the job on this node (OOM, illegal access, ENOSPC)
    INFRA = 40  # the job's own log names a hardware or infrastructure fault
    SCHEDULER = 50  # Slurm says it ended the job on purpose


@dataclass(frozen=True)
class Signature:
    """A named pattern; a `host` group in the regex moves the hit to that node."""

    name: str
    cause: Cause
    role: Role
    pattern: re.Pattern[str]
    precedence: int = 0


def _sig(name: str, cause: Cause, role: Role, regex: str, precedence: int = 0) -> Signature:
    return Signature(name, cause, role, re.compile(regex), precedence)


_C = Cause
_SLURM_LINE = r"\*\*\* (?:JOB|STEP) \S+ (?:ON \S+ )?CANCELLED AT \S+"

SIGNATURES: tuple[Signature, ...] = (
    # Slurm: slurmstepd's banner, the cgroup oom line (new and old wording), srun task exits.
    _sig("slurm.time_limit", _C.TIMEOUT, Role.SCHEDULER, _SLURM_LINE + r" DUE TO TIME LIMIT"),
    _sig("slurm.preemption", _C.PREEMPTED, Role.SCHEDULER, _SLURM_LINE + r" DUE TO PREEMPTION"),
    _sig("slurm.job_requeue", _C.PREEMPTED, Role.SCHEDULER, _SLURM_LINE + r" DUE TO JOB REQUEUE"),
    _sig(
        "slurm.node_failure", _C.NODE_FAILURE, Role.SCHEDULER, _SLURM_LINE + r" DUE TO NODE FAILURE"
    ),
    _sig(
        "slurm.cancelled",
        _C.CANCELLED,
        Role.SCHEDULER,
        _SLURM_LINE + r"(?: DUE [Tt][Oo] SIGNAL \w+)? \*\*\*",
    ),
    _sig("slurm.oom_kill", _C.HOST_OOM, Role.ERROR, r"Detected \d+ oom[-_]kill event"),
    _sig(
        "srun.out_of_memory",
        _C.HOST_OOM,
        Role.ERROR,
        r"srun: error: (?P<host>[\w.-]+): tasks? [\d,-]+: Out Of Memory",
    ),
    _sig(
        "srun.crash_signal",
        _C.SEGFAULT,
        Role.ERROR,
        r"srun: error: (?P<host>[\w.-]+): tasks? [\d,-]+: (?:Segmentation fault|Bus error)",
    ),
    # GPU memory exhausted: the caching allocator's message (every PyTorch version), raw CUDA.
    _sig("torch.cuda_oom", _C.CUDA_OOM, Role.ERROR, r"CUDA out of memory\. Tried to allocate"),
    _sig(
        "cuda.out_of_memory",
        _C.CUDA_OOM,
        Role.ERROR,
        r"CUDA error: out of memory|Cuda failure '?out of memory|cudaErrorMemoryAllocation",
    ),
    _sig(
        "xla.resource_exhausted",
        _C.CUDA_OOM,
        Role.ERROR,
        r"RESOURCE_EXHAUSTED: Out of memory while trying to allocate",
    ),
    # The job's own CUDA bugs.
    _sig(
        "cuda.illegal_address",
        _C.CUDA_USER_ERROR,
        Role.ERROR,
        r"an illegal memory access was encountered",
    ),
    _sig(
        "cuda.device_assert",
        _C.CUDA_USER_ERROR,
        Role.ERROR,
        r"device-side assert(?:ion)? triggered",
    ),
    _sig(
        "cuda.kernel_assert",
        _C.CUDA_USER_ERROR,
        Role.ERROR,
        r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion .* failed",
    ),
    _sig(
        "cuda.misaligned_address", _C.CUDA_USER_ERROR, Role.ERROR, r"CUDA error: misaligned address"
    ),
    _sig(
        "cuda.illegal_instruction",
        _C.CUDA_USER_ERROR,
        Role.ERROR,
        r"an illegal instruction was encountered",
    ),
    _sig("cuda.launch_failure", _C.CUDA_USER_ERROR, Role.ERROR, r"unspecified launch failure"),
    _sig(
        "cuda.invalid_device", _C.CUDA_USER_ERROR, Role.ERROR, r"CUDA error: invalid device ordinal"
    ),
    _sig(
        "nccl.invalid_usage",
        _C.USER_CODE,
        Role.ERROR,
        r"ncclInvalidUsage|invalid usage \(run with NCCL_DEBUG=WARN",
    ),
    _sig(
        "nccl.invalid_argument",
        _C.USER_CODE,
        Role.ERROR,
        r"ncclInvalidArgument|invalid argument \(run with NCCL_DEBUG=WARN",
    ),
    # Hardware or infrastructure named in the job's own log (user evidence: never drains).
    _sig(
        "cuda.ecc_uncorrectable",
        _C.GPU_MEMORY,
        Role.INFRA,
        r"uncorrectable ECC error encountered",
        70,
    ),
    _sig(
        "cuda.nvlink_uncorrectable",
        _C.GPU_NVLINK,
        Role.INFRA,
        r"uncorrectable NVLink error detected",
        60,
    ),
    _sig(
        "cuda.no_device", _C.GPU_UNAVAILABLE, Role.INFRA, r"no CUDA-capable device is detected", 80
    ),
    _sig(
        "cuda.device_busy",
        _C.GPU_UNAVAILABLE,
        Role.INFRA,
        r"CUDA-capable device\(s\) (?:is|are|is/are) busy or unavailable",
        80,
    ),
    _sig("nvml.gpu_lost", _C.GPU_UNAVAILABLE, Role.INFRA, r"\bGPU is lost\b", 80),
    _sig(
        "cuda.driver_too_old",
        _C.GPU_DRIVER,
        Role.INFRA,
        r"CUDA driver version is insufficient for CUDA runtime version",
        40,
    ),
    _sig(
        "cuda.not_initialized",
        _C.GPU_DRIVER,
        Role.INFRA,
        r"CUDA error: system not yet initialized",
        40,
    ),
    _sig("nvml.driver_mismatch", _C.GPU_DRIVER, Role.INFRA, r"Driver/library version mismatch", 40),
    _sig(
        "nccl.ib_async_event",
        _C.INFINIBAND,
        Role.INFRA,
        r"NET/IB ?: .*Got async event ?: (?:port error|local catastrophic error)",
        30,
    ),
    _sig("fs.stale_handle", _C.FILESYSTEM, Role.INFRA, r"Stale file handle|\[Errno 116\]", 25),
    _sig("fs.io_error", _C.FILESYSTEM, Role.INFRA, r"\[Errno 5\] Input/output error", 25),
    _sig(
        "fs.transport_endpoint",
        _C.FILESYSTEM,
        Role.INFRA,
        r"Transport endpoint is not connected",
        25,
    ),
    # The job filled its disk, quota or /dev/shm.
    _sig("fs.no_space", _C.STORAGE_FULL, Role.ERROR, r"No space left on device|\[Errno 28\]"),
    _sig("fs.quota", _C.STORAGE_FULL, Role.ERROR, r"Disk quota exceeded|\[Errno 122\]"),
    _sig(
        "torch.shm_bus_error",
        _C.STORAGE_FULL,
        Role.ERROR,
        r"Unexpected bus error encountered in worker\. This might be caused by insufficient "
        r"shared memory|workers are out of shared memory\. Please try to raise your shared memory",
    ),
    _sig(
        "torch.save_write_failed",
        _C.STORAGE_FULL,
        Role.WEAK,
        r"PytorchStreamWriter failed writing file .*file write failed",
    ),
    # Host memory.
    _sig(
        "torch.dataloader_killed",
        _C.HOST_OOM,
        Role.ERROR,
        r"DataLoader worker \(pid\(?s?\)?[^)]*\)? is killed by signal: Killed",
    ),
    # Native crashes: SIGSEGV/SIGBUS are real errors; an abort usually follows something else.
    _sig(
        "proc.segfault",
        _C.SEGFAULT,
        Role.ERROR,
        r"Segmentation fault|segmentation fault encountered in worker|"
        r"Bus error \(core dumped\)|Fatal Python error: Bus error",
    ),
    _sig(
        "proc.abort",
        _C.SEGFAULT,
        Role.WEAK,
        r"Aborted \(core dumped\)|Fatal Python error: Aborted|"
        r"terminate called (?:after throwing an instance of|without an active exception)",
    ),
    # glibc's assert(): `prog: file.c:123: func: Assertion `expr' failed.`, then SIGABRT.
    _sig(
        "proc.c_assert",
        _C.SEGFAULT,
        Role.WEAK,
        r"^\S+: [^\s:]+:\d+: [^:]+: Assertion `.*' failed\.$",
    ),
    # Collective-communication symptoms: what the surviving ranks print.
    _sig(
        "torch.nccl_watchdog_timeout",
        _C.NCCL_TIMEOUT,
        Role.SYMPTOM,
        r"Watchdog caught collective operation timeout",
        10,
    ),
    _sig(
        "torch.nccl_watchdog_stuck",
        _C.NCCL_TIMEOUT,
        Role.SYMPTOM,
        r"ProcessGroupNCCL's watchdog got stuck|Heartbeat monitor timed out",
        10,
    ),
    _sig(
        "torch.nccl_ops_failed",
        _C.NCCL_TIMEOUT,
        Role.SYMPTOM,
        r"Some NCCL operations have failed or timed out",
        5,
    ),
    _sig(
        "nccl.remote_error",
        _C.NETWORK,
        Role.SYMPTOM,
        r"ncclRemoteError|remote process exited or there was a network error",
        20,
    ),
    _sig(
        "nccl.system_error",
        _C.NETWORK,
        Role.SYMPTOM,
        r"ncclSystemError|unhandled system error \(run with NCCL_DEBUG",
        15,
    ),
    _sig(
        "nccl.ib_completion_error",
        _C.NETWORK,
        Role.SYMPTOM,
        r"NET/IB ?: Got completion (?:from peer \S+ )?with (?:error|status)",
        15,
    ),
    _sig(
        "nccl.internal_error",
        _C.NETWORK,
        Role.SYMPTOM,
        r"ncclInternalError|internal error - please report this issue to the NCCL developers",
        5,
    ),
    _sig(
        "net.connection_reset",
        _C.NETWORK,
        Role.SYMPTOM,
        r"Connection reset by peer|Connection closed by (?:remote )?peer",
        10,
    ),
    _sig(
        "torch.dist_network",
        _C.NETWORK,
        Role.SYMPTOM,
        r"DistNetworkError|DistStoreError|RendezvousTimeoutError|RendezvousClosedError",
        10,
    ),
    # CUDA failures that say nothing by themselves: often a GPU lost or reset under the job.
    _sig(
        "cuda.unknown_error",
        _C.UNKNOWN,
        Role.SYMPTOM,
        r"CUDA error: unknown error|Cuda failure 'unknown error'",
        0,
    ),
    _sig(
        "nccl.unhandled_cuda",
        _C.UNKNOWN,
        Role.SYMPTOM,
        r"ncclUnhandledCudaError|unhandled cuda error \(run with NCCL_DEBUG",
        0,
    ),
)

BY_NAME: dict[str, Signature] = {s.name: s for s in SIGNATURES}

# Root-exception types → (cause, role), keyed by the last dotted component of the type name.
# Anything not here and not matched by a signature is the program's own error (user_code).
EXCEPTION_TYPES: dict[str, tuple[Cause, Role]] = {
    "OutOfMemoryError": (_C.CUDA_OOM, Role.ERROR),
    "CUDAOutOfMemoryError": (_C.CUDA_OOM, Role.ERROR),
    "MemoryError": (_C.HOST_OOM, Role.ERROR),
    "_ArrayMemoryError": (_C.HOST_OOM, Role.ERROR),
    "AcceleratorError": (_C.CUDA_USER_ERROR, Role.ERROR),
    "DistBackendError": (_C.NETWORK, Role.SYMPTOM),
    "DistNetworkError": (_C.NETWORK, Role.SYMPTOM),
    "DistStoreError": (_C.NETWORK, Role.SYMPTOM),
    "DistError": (_C.NETWORK, Role.SYMPTOM),
    "RendezvousTimeoutError": (_C.NETWORK, Role.SYMPTOM),
    "RendezvousClosedError": (_C.NETWORK, Role.SYMPTOM),
    "RendezvousConnectionError": (_C.NETWORK, Role.SYMPTOM),
    "ConnectionResetError": (_C.NETWORK, Role.SYMPTOM),
    "ConnectionRefusedError": (_C.NETWORK, Role.SYMPTOM),
    "ConnectionAbortedError": (_C.NETWORK, Role.SYMPTOM),
    "KeyboardInterrupt": (_C.UNKNOWN, Role.INFO),
    "SystemExit": (_C.UNKNOWN, Role.INFO),
    "ChildFailedError": (_C.UNKNOWN, Role.INFO),
}
