"""Job-log signatures as data: named, compiled regexes → cause, with how much each one proves.

The literals are what PyTorch, NCCL, CUDA, the NVIDIA driver and slurmstepd print (see
shared/reference/signatures.md §4, which cites each source); where a message changed across
versions both forms are here (`torch.OutOfMemoryError` and the older `RuntimeError: CUDA
out of memory`; old and new slurmstepd oom lines). Kernel-log lines are not here: an XID is
only believed from a kernel log (kernel.py), never from a job's stdout.

To add a signature: append a `Signature` with a stable dotted name (`<origin>.<what>`), the
cause, and the `Tier` that says how strong it is; then add a corpus case that needs it.
"""

from __future__ import annotations

import re
from functools import cached_property

from slurm_triage.attribution.tiers import Tier
from slurm_triage.frozen import Frozen
from slurm_triage.taxonomy import Cause


class Signature(Frozen):
    """A named pattern; a `host` group in the regex (a node name or a Slurm hostlist such
    as `node[03-04]`) moves the hit to the node(s) it names."""

    name: str
    cause: Cause
    role: Tier
    regex: str
    precedence: int = 0

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        # Compiled on first use: ~65 compiles cost every importer (the EpilogSlurmctld's
        # decision, the Prolog's kernel check) ~15 ms, and a scan searches only the
        # signatures whose needles a line holds, so most are never compiled (issue 20).
        return re.compile(self.regex)


def _sig(name: str, cause: Cause, role: Tier, regex: str, precedence: int = 0) -> Signature:
    return Signature(name, cause, role, regex, precedence)


_C = Cause
# slurmstepd's own lines start with `slurmstepd: error: ` (`slurmstepd-<node>: error: ` where
# slurmd is built for several per host), at the start of the line (`N: ` before it under
# `srun --label`): text a program printed mid-line, or quoted in a traceback, is not Slurm's.
_STEPD = r"^(?:\d+: )?slurmstepd(?:-[\w.-]+)?: error: "
# Slurm before 15.08 put the node last: `*** JOB n CANCELLED AT t DUE TO TIME LIMIT on host ***`.
_BANNER = _STEPD + r"\*\*\* (?:JOB|STEP) \S+ (?:ON \S+ )?CANCELLED AT \S+"
# srun's task lines name the node(s) and the task ids: `srun: error: node2: task 1: ...`.
_SRUN_TASK = r"^srun: error: (?P<host>[\w.\[\],-]+): tasks? [\d,-]+: "

SIGNATURES: tuple[Signature, ...] = (
    # Slurm: slurmstepd's banner (src/slurmd/slurmstepd/req.c), the cgroup oom line (new and
    # old wording), srun's task exits (src/srun/launch.c). A DUE TO banner is more specific
    # than a bare CANCELLED state, hence its precedence.
    _sig("slurm.time_limit", _C.TIMEOUT, Tier.SCHEDULER, _BANNER + r" DUE TO TIME LIMIT", 5),
    _sig("slurm.preemption", _C.PREEMPTED, Tier.SCHEDULER, _BANNER + r" DUE TO PREEMPTION", 5),
    _sig("slurm.job_requeue", _C.PREEMPTED, Tier.SCHEDULER, _BANNER + r" DUE TO JOB REQUEUE", 5),
    _sig(
        "slurm.node_failure",
        _C.NODE_FAILURE,
        Tier.SCHEDULER,
        _BANNER + r" DUE TO NODE FAILURE",
        10,
    ),
    # The batch step cancelled (scancel), or any step signalled by name (Slurm >= 25.05).
    _sig(
        "slurm.cancelled",
        _C.CANCELLED,
        Tier.SCHEDULER,
        _STEPD
        + r"\*\*\* JOB \S+ ON \S+ CANCELLED AT \S+ \*\*\*|"
        + _BANNER
        + r" DUE [Tt][Oo] SIGNAL \w+ \*\*\*",
    ),
    # A step's bare banner (Slurm <= 24.11) or DUE TO TASK FAILURE (>= 25.05): srun ended the
    # step because one of its tasks failed (--kill-on-bad-exit); that task's error is the
    # cause, this banner is the collateral.
    _sig(
        "slurm.step_killed",
        _C.UNKNOWN,
        Tier.EXIT,
        _STEPD + r"\*\*\* STEP \S+ ON \S+ CANCELLED AT \S+(?: DUE TO TASK FAILURE)? \*\*\*",
    ),
    _sig(
        "slurm.oom_kill",
        _C.HOST_OOM,
        Tier.ERROR,
        r"^(?:\d+: )?slurmstepd(?:-(?P<host>[\w.-]+))?: error: Detected \d+ oom[-_]kill event",
    ),
    # jobacct_gather's memory enforcement (Slurm before cgroup v2 limits; src/common/jag).
    _sig(
        "slurm.memory_limit",
        _C.HOST_OOM,
        Tier.ERROR,
        _STEPD + r"(?:Step \S+ exceeded memory limit \(\d+ > \d+\), being killed|"
        r"Exceeded (?:job|step) memory limit|Job \S+ exceeded memory limit)",
    ),
    _sig(
        "salloc.time_limit",
        _C.TIMEOUT,
        Tier.SCHEDULER,
        r"salloc: Job \d+ has exceeded its time limit and its allocation has been revoked",
        5,
    ),
    _sig(
        "slurm.execve_failed",
        _C.USER_CODE,
        Tier.ERROR,
        _STEPD + r"execve\(\): (?:bad interpreter\(|\S+: )",
    ),
    _sig(
        "srun.node_failure",
        _C.NODE_FAILURE,
        Tier.SCHEDULER,
        r"^srun: error: Node failure on (?P<host>[\w.\[\],-]+)",
        10,
    ),
    _sig("srun.out_of_memory", _C.HOST_OOM, Tier.ERROR, _SRUN_TASK + r"Out Of Memory"),
    _sig(
        "srun.crash_signal",
        _C.SEGFAULT,
        Tier.ERROR,
        _SRUN_TASK + r"(?:Segmentation fault|Bus error)",
    ),
    _sig("srun.task_exit", _C.UNKNOWN, Tier.EXIT, _SRUN_TASK + r"Exited with exit code \d+"),
    _sig("srun.task_killed", _C.UNKNOWN, Tier.EXIT, _SRUN_TASK + r"Killed$"),
    # The dynamic loader, or a program's own environment: never the node's fault.
    _sig(
        "env.shared_object",
        _C.USER_CODE,
        Tier.ERROR,
        r"error while loading shared libraries: \S+: cannot open shared object file",
    ),
    # GPU memory exhausted: the caching allocator's message (every PyTorch version), raw CUDA.
    _sig("torch.cuda_oom", _C.CUDA_OOM, Tier.ERROR, r"CUDA out of memory\. Tried to allocate"),
    _sig(
        "cuda.out_of_memory",
        _C.CUDA_OOM,
        Tier.ERROR,
        r"CUDA error: out of memory|Cuda failure '?out of memory|cudaErrorMemoryAllocation",
    ),
    _sig(
        "xla.resource_exhausted",
        _C.CUDA_OOM,
        Tier.ERROR,
        r"RESOURCE_EXHAUSTED: Out of memory while trying to allocate",
    ),
    # The job's own CUDA bugs.
    _sig(
        "cuda.illegal_address",
        _C.CUDA_USER_ERROR,
        Tier.ERROR,
        r"an illegal memory access was encountered",
    ),
    _sig(
        "cuda.device_assert",
        _C.CUDA_USER_ERROR,
        Tier.ERROR,
        r"device-side assert(?:ion)? triggered",
    ),
    _sig(
        "cuda.kernel_assert",
        _C.CUDA_USER_ERROR,
        Tier.ERROR,
        r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion .* failed",
    ),
    _sig(
        "cuda.misaligned_address", _C.CUDA_USER_ERROR, Tier.ERROR, r"CUDA error: misaligned address"
    ),
    _sig(
        "cuda.illegal_instruction",
        _C.CUDA_USER_ERROR,
        Tier.ERROR,
        r"an illegal instruction was encountered",
    ),
    _sig("cuda.launch_failure", _C.CUDA_USER_ERROR, Tier.ERROR, r"unspecified launch failure"),
    _sig(
        "cuda.invalid_device", _C.CUDA_USER_ERROR, Tier.ERROR, r"CUDA error: invalid device ordinal"
    ),
    _sig(
        "nccl.invalid_usage",
        _C.USER_CODE,
        Tier.ERROR,
        r"ncclInvalidUsage|invalid usage \(run with NCCL_DEBUG=WARN",
    ),
    _sig(
        "nccl.invalid_argument",
        _C.USER_CODE,
        Tier.ERROR,
        r"ncclInvalidArgument|invalid argument \(run with NCCL_DEBUG=WARN",
    ),
    # Hardware or infrastructure named in the job's own log (user evidence: never drains).
    _sig(
        "cuda.ecc_uncorrectable",
        _C.GPU_MEMORY,
        Tier.INFRA,
        r"uncorrectable ECC error encountered",
        70,
    ),
    _sig(
        "cuda.nvlink_uncorrectable",
        _C.GPU_NVLINK,
        Tier.INFRA,
        r"uncorrectable NVLink error detected",
        60,
    ),
    _sig(
        "cuda.no_device", _C.GPU_UNAVAILABLE, Tier.INFRA, r"no CUDA-capable device is detected", 80
    ),
    _sig(
        "cuda.device_busy",
        _C.GPU_UNAVAILABLE,
        Tier.INFRA,
        r"CUDA-capable device\(s\) (?:is|are|is/are) busy or unavailable",
        80,
    ),
    _sig("nvml.gpu_lost", _C.GPU_UNAVAILABLE, Tier.INFRA, r"\bGPU is lost\b", 80),
    # `nvidia-smi -q`'s clock event (throttle) reasons: the GPU is slowed by heat or power.
    _sig(
        "nvml.hw_slowdown",
        _C.THERMAL,
        Tier.INFRA,
        r"^\s+HW (?:Thermal |Power Brake )?Slowdown\s+: Active",
        35,
    ),
    # nvidia-smi when NVML cannot reach a GPU that is still enumerated (typically XID 79).
    _sig(
        "nvml.no_device_handle",
        _C.GPU_UNAVAILABLE,
        Tier.INFRA,
        r"Unable to determine the device handle for GPU ?[0-9A-Fa-f:.]*: "
        r"(?:Unknown Error|GPU is lost)",
        80,
    ),
    # LBNL NHC, run by the job or printed into its log by a prolog: `ERROR:  nhc:  Health check
    # failed:  check_fs_mount:  /scratch not mounted`.
    _sig(
        "nhc.check_failed",
        _C.HEALTH_CHECK,
        Tier.INFRA,
        r"^(?:ERROR:\s+nhc:\s+)?Health check failed:\s+check_\w+:",
        20,
    ),
    _sig(
        "cuda.driver_too_old",
        _C.GPU_DRIVER,
        Tier.INFRA,
        r"CUDA driver version is insufficient for CUDA runtime version",
        40,
    ),
    _sig(
        "cuda.not_initialized",
        _C.GPU_DRIVER,
        Tier.INFRA,
        r"CUDA error: system not yet initialized|Error 802: system not yet initialized",
        40,
    ),
    _sig("nvml.driver_mismatch", _C.GPU_DRIVER, Tier.INFRA, r"Driver/library version mismatch", 40),
    # NCCL's IB async thread on an HCA fault: the port went down or the device died (verbs'
    # IBV_EVENT_PORT_ERR, IBV_EVENT_DEVICE_FATAL, as ibv_event_type_str() names them). Its
    # words by version (src/transport/net_ib.cc, net_ib/common.cc): 2.12-2.19 `NET/IB : Got
    # async event : port error`; 2.20-2.22 `NET/IB : mlx5_3:1 Got async event : ...`;
    # 2.23-2.28.3 `... Got async error event: port error` and `... async fatal event: local
    # catastrophic error`; 2.28.7+ `... Got non-fatal async event: port error(10)`. Other
    # events of the same lines are no fault of the node: `port active`, `LID change`, `GID
    # table change`, `client reregistration` (the link coming back, the subnet manager); the
    # per-connection QP and CQ errors (`async fatal event on QP (0x...): ...`) can follow a
    # peer's exit or the program's misuse of verbs, and blame no node on their own.
    _sig(
        "nccl.ib_async_event",
        _C.INFINIBAND,
        Tier.INFRA,
        r"(?:^(?P<host>[\w.-]+):\d+:\d+ \[\d+\] .*)?"
        r"NET/IB ?: .* async (?:(?:error|fatal) )?event ?: "
        r"(?:port error|local catastrophic error)",
        30,
    ),
    _sig("fs.stale_handle", _C.FILESYSTEM, Tier.INFRA, r"Stale file handle|\[Errno 116\]", 25),
    _sig("fs.io_error", _C.FILESYSTEM, Tier.INFRA, r"\[Errno 5\] Input/output error", 25),
    _sig(
        "fs.transport_endpoint",
        _C.FILESYSTEM,
        Tier.INFRA,
        r"Transport endpoint is not connected",
        25,
    ),
    # The job filled its disk, quota or /dev/shm.
    _sig("fs.no_space", _C.STORAGE_FULL, Tier.ERROR, r"No space left on device|\[Errno 28\]"),
    _sig("fs.quota", _C.STORAGE_FULL, Tier.ERROR, r"Disk quota exceeded|\[Errno 122\]"),
    _sig(
        "torch.shm_bus_error",
        _C.STORAGE_FULL,
        Tier.ERROR,
        r"Unexpected bus error encountered in worker\. This might be caused by insufficient "
        r"shared memory|workers are out of shared memory\. Please try to raise your shared memory",
    ),
    _sig(
        "torch.save_write_failed",
        _C.STORAGE_FULL,
        Tier.WEAK,
        r"PytorchStreamWriter failed writing file .*file write failed",
    ),
    # Host memory.
    _sig(
        "torch.dataloader_killed",
        _C.HOST_OOM,
        Tier.ERROR,
        r"DataLoader worker \(pid\(?s?\)?[^)]*\)? is killed by signal: Killed",
    ),
    # Native crashes: SIGSEGV/SIGBUS are real errors; an abort usually follows something else.
    _sig(
        "proc.segfault",
        _C.SEGFAULT,
        Tier.ERROR,
        r"Segmentation fault|segmentation fault encountered in worker|"
        r"Bus error \(core dumped\)|Fatal Python error: Bus error",
    ),
    _sig(
        "proc.abort",
        _C.SEGFAULT,
        Tier.WEAK,
        r"Aborted +\(core dumped\)|Fatal Python error: Aborted|"
        r"terminate called (?:after throwing an instance of|without an active exception)",
    ),
    # glibc's heap checks abort a program that corrupted its own memory.
    _sig(
        "proc.heap_corruption",
        _C.SEGFAULT,
        Tier.ERROR,
        r"^(?:free|malloc|realloc)\(\): (?:invalid pointer|invalid size|corrupted)|"
        r"^double free or corruption|^corrupted size vs\. prev_size",
    ),
    # glibc's assert(): `prog: file.c:123: func: Assertion `expr' failed.`, then SIGABRT.
    _sig(
        "proc.c_assert",
        _C.SEGFAULT,
        Tier.WEAK,
        r"^\S+: [^\s:]+:\d+: [^:]+: Assertion `.*' failed\.$",
    ),
    # Collective-communication symptoms: what the surviving ranks print.
    _sig(
        "torch.nccl_watchdog_timeout",
        _C.NCCL_TIMEOUT,
        Tier.SYMPTOM,
        r"Watchdog caught collective operation timeout",
        10,
    ),
    _sig(
        "torch.nccl_watchdog_stuck",
        _C.NCCL_TIMEOUT,
        Tier.SYMPTOM,
        r"ProcessGroupNCCL's watchdog got stuck|Heartbeat monitor timed out",
        10,
    ),
    _sig(
        "torch.nccl_ops_failed",
        _C.NCCL_TIMEOUT,
        Tier.SYMPTOM,
        r"Some NCCL operations have failed or timed out",
        5,
    ),
    _sig(
        "nccl.remote_error",
        _C.NETWORK,
        Tier.SYMPTOM,
        r"ncclRemoteError|remote process exited or there was a network error",
        20,
    ),
    _sig(
        "nccl.system_error",
        _C.NETWORK,
        Tier.SYMPTOM,
        r"ncclSystemError|unhandled system error \(run with NCCL_DEBUG",
        15,
    ),
    _sig(
        "nccl.ib_completion_error",
        _C.NETWORK,
        Tier.SYMPTOM,
        r"NET/IB ?: Got completion (?:from peer \S+ )?with (?:error|status)",
        15,
    ),
    _sig(
        "nccl.internal_error",
        _C.NETWORK,
        Tier.SYMPTOM,
        r"ncclInternalError|internal error - please report this issue to the NCCL developers",
        5,
    ),
    _sig(
        "net.connection_reset",
        _C.NETWORK,
        Tier.SYMPTOM,
        r"Connection reset by peer|Connection closed by (?:remote )?peer",
        10,
    ),
    _sig(
        "torch.dist_network",
        _C.NETWORK,
        Tier.SYMPTOM,
        r"DistNetworkError|DistStoreError|RendezvousTimeoutError|RendezvousClosedError",
        10,
    ),
    # CUDA failures the driver reports without saying why: most often a GPU lost or reset
    # under the job (TAXONOMY: gpu_driver). Symptom tier, so any real error elsewhere wins;
    # but alone they name the node, so the requeue excludes it instead of landing there again.
    _sig(
        "cuda.unknown_error",
        _C.GPU_DRIVER,
        Tier.SYMPTOM,
        r"CUDA error: unknown error|Cuda failure 'unknown error'",
        40,
    ),
    _sig(
        "nccl.unhandled_cuda",
        _C.GPU_DRIVER,
        Tier.SYMPTOM,
        r"ncclUnhandledCudaError|unhandled cuda error \(run with NCCL_DEBUG",
        40,
    ),
)

_CANCELLED = next(s for s in SIGNATURES if s.name == "slurm.cancelled")
# Not scanned for: what logscan calls a cancel banner that follows a task failure in the same
# log (srun ends the rest, or someone cancels a job that has already failed): collateral.
CANCELLED_AFTER_FAILURE = Signature(
    "slurm.cancelled_after_task_failure", _C.UNKNOWN, Tier.EXIT, _CANCELLED.regex
)
BY_NAME: dict[str, Signature] = {s.name: s for s in (*SIGNATURES, CANCELLED_AFTER_FAILURE)}
# srun's lines for a task that ended by itself (not killed after another), strongest first.
TASK_FAILURE_LINES = ("srun.task_exit", "srun.task_killed")

# Root-exception types → (cause, role), keyed by the last dotted component of the type name.
# Anything not here and not matched by a signature is the program's own error (user_code).
EXCEPTION_TYPES: dict[str, tuple[Cause, Tier]] = {
    "OutOfMemoryError": (_C.CUDA_OOM, Tier.ERROR),
    "CUDAOutOfMemoryError": (_C.CUDA_OOM, Tier.ERROR),
    "MemoryError": (_C.HOST_OOM, Tier.ERROR),
    "_ArrayMemoryError": (_C.HOST_OOM, Tier.ERROR),
    "AcceleratorError": (_C.CUDA_USER_ERROR, Tier.ERROR),
    "DistBackendError": (_C.NETWORK, Tier.SYMPTOM),
    "DistNetworkError": (_C.NETWORK, Tier.SYMPTOM),
    "DistStoreError": (_C.NETWORK, Tier.SYMPTOM),
    "DistError": (_C.NETWORK, Tier.SYMPTOM),
    "RendezvousTimeoutError": (_C.NETWORK, Tier.SYMPTOM),
    "RendezvousClosedError": (_C.NETWORK, Tier.SYMPTOM),
    "RendezvousConnectionError": (_C.NETWORK, Tier.SYMPTOM),
    "ConnectionResetError": (_C.NETWORK, Tier.SYMPTOM),
    "ConnectionRefusedError": (_C.NETWORK, Tier.SYMPTOM),
    "ConnectionAbortedError": (_C.NETWORK, Tier.SYMPTOM),
    "KeyboardInterrupt": (_C.UNKNOWN, Tier.INFO),
    "SystemExit": (_C.UNKNOWN, Tier.INFO),
    "ChildFailedError": (_C.UNKNOWN, Tier.INFO),
    # torchrun's own handler for SIGTERM/SIGINT (torch/distributed/elastic/multiprocessing/
    # api.py, `_terminate_process_handler`): "Process 999 got signal: 15". srun tearing the
    # step down after another task failed makes every surviving node's torchrun print it: a
    # death signal, no error of the program (tier and cause of a SIGTERM, findings.py).
    "SignalException": (_C.UNKNOWN, Tier.EXIT),
}
