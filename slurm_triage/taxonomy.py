"""The failure taxonomy as data: causes, domains, actions (the contract in shared/TAXONOMY.md),
what a node needs (NodeAction), and the prefix that marks the drain reasons we write in Slurm.

Every attribution names one `Cause`; the cause fixes the `Domain` and the default `Action`.
The ids are stable strings used in JSON, the journal, AdminComment and user policies: add an
id only with a reason, never rename one.

Two defaults in the contract are conditional, and we keep the condition instead of flattening
it: `timeout` is "requeue if the job is resumable, else none" and `unknown` is "requeue once".
`CauseInfo.condition` says which, and `CauseInfo.action_for()` resolves it once the caller
knows whether the job is resumable and how often it was already requeued.
"""

from __future__ import annotations

from enum import StrEnum

from slurm_triage.frozen import Frozen

# Every drain reason slurm-triage writes starts with this (mej/nhc's rule): a node whose reason
# lacks it was drained by someone else. The policies own which drains are ours
# (policies.reasons); the analytics and the replay read Slurm's node events by it.
DRAIN_PREFIX = "triage: "


class Domain(StrEnum):
    """Who is at fault: a part of a node, shared software, the scheduler, the job, or nobody."""

    HARDWARE = "hardware"
    INFRASTRUCTURE = "infrastructure"
    SCHEDULER = "scheduler"
    USER = "user"
    NONE = "none"
    UNKNOWN = "unknown"


class Action(StrEnum):
    """What to do with the job by default; a site policy may override any of them."""

    NONE = "none"
    REQUEUE = "requeue"
    REQUEUE_EXCLUDE = "requeue_exclude"
    HOLD = "hold"


class NodeAction(StrEnum):
    """What a node needs: the one scale of the health checks' results and of the XID
    catalogue's rows. A failed check says how urgent with its Severity and names the repair
    (RESET_GPU, REBOOT, RMA; DRAIN_NOW when the running jobs are probably dying already, DRAIN
    to let them finish); the catalogue says with `drain_*` that the node leaves service now
    and what then (reset, reboot, RMA, a person's look), and RESET_GPU for a reset that can
    wait until the GPU is idle (health_checks.kernel_log maps one onto the other)."""

    NONE = "none"
    WATCH = "watch"
    DRAIN = "drain"
    DRAIN_NOW = "drain_now"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    RMA = "rma"
    DRAIN_RESET = "drain_reset"
    DRAIN_REBOOT = "drain_reboot"
    DRAIN_RMA = "drain_rma"
    DRAIN_INSPECT = "drain_inspect"

    @property
    def drains(self) -> bool:
        """A failed check asking for this takes the node out of service (Slurm's DRAIN)."""
        return self not in (NodeAction.NONE, NodeAction.WATCH)

    @property
    def drains_node(self) -> bool:
        """The node leaves service now (then reset, reboot, RMA or a person's look): fatal
        for every job on it. A plain RESET_GPU waits for the GPU to be idle; WATCH and NONE
        leave the node in service."""
        return self.value.startswith("drain_")


class Condition(StrEnum):
    """When the default action applies: always, only if resumable, or only on the first try."""

    ALWAYS = "always"
    IF_RESUMABLE = "if_resumable"
    ONCE = "once"


class Cause(StrEnum):
    """Why a job ended. The values are the contract's ids, spelled exactly as there."""

    COMPLETED = "completed"
    GPU_UNAVAILABLE = "gpu_unavailable"
    GPU_MEMORY = "gpu_memory"
    GPU_NVLINK = "gpu_nvlink"
    GPU_DRIVER = "gpu_driver"
    PCIE = "pcie"
    INFINIBAND = "infiniband"
    THERMAL = "thermal"
    HOST_HARDWARE = "host_hardware"
    NODE_FAILURE = "node_failure"
    FILESYSTEM = "filesystem"
    NETWORK = "network"
    NCCL_TIMEOUT = "nccl_timeout"
    HEALTH_CHECK = "health_check"
    HANG = "hang"
    PREEMPTED = "preempted"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    CUDA_OOM = "cuda_oom"
    HOST_OOM = "host_oom"
    CUDA_USER_ERROR = "cuda_user_error"
    STORAGE_FULL = "storage_full"
    SEGFAULT = "segfault"
    USER_CODE = "user_code"
    UNKNOWN = "unknown"


class CauseInfo(Frozen):
    """One row of the taxonomy table.

    `blames_nodes` is False for causes that are not a property of any node (the scheduler's
    decisions, success, a fabric-wide NCCL failure, no evidence): their Attribution names no
    nodes, so nothing is excluded or drained because of them.
    """

    cause: Cause
    domain: Domain
    action: Action
    description: str
    condition: Condition = Condition.ALWAYS
    blames_nodes: bool = True

    def action_for(self, *, resumable: bool, restart_count: int) -> Action:
        """The default action once the job's resumability and restart count are known."""
        if self.condition is Condition.IF_RESUMABLE and not resumable:
            return Action.NONE
        if self.condition is Condition.ONCE and restart_count > 0:
            return Action.NONE
        return self.action

    @property
    def action_text(self) -> str:
        """The default action in words, condition included, as the contract states it."""
        if self.condition is Condition.IF_RESUMABLE:
            return f"{self.action} if the job is resumable, else none"
        if self.condition is Condition.ONCE:
            return f"{self.action} once"
        return str(self.action)


def _row(cause: Cause, domain: Domain, action: Action, description: str, **kw: object) -> CauseInfo:
    return CauseInfo(cause, domain, action, description, **kw)  # type: ignore[arg-type]


_H, _I, _S, _U = Domain.HARDWARE, Domain.INFRASTRUCTURE, Domain.SCHEDULER, Domain.USER
_RX, _RQ, _NO = Action.REQUEUE_EXCLUDE, Action.REQUEUE, Action.NONE

CAUSES: dict[Cause, CauseInfo] = {
    info.cause: info
    for info in (
        _row(
            Cause.COMPLETED, Domain.NONE, _NO, "the job completed successfully", blames_nodes=False
        ),
        _row(Cause.GPU_UNAVAILABLE, _H, _RX, "a GPU fell off the bus or is lost"),
        _row(Cause.GPU_MEMORY, _H, _RX, "uncorrectable GPU memory (ECC) error or row remap"),
        _row(Cause.GPU_NVLINK, _H, _RX, "NVLink error"),
        _row(Cause.GPU_DRIVER, _I, _RX, "GPU driver or GSP firmware failure"),
        _row(Cause.PCIE, _H, _RX, "uncorrected PCIe error or degraded link"),
        _row(Cause.INFINIBAND, _H, _RX, "InfiniBand HCA port or link failure"),
        _row(Cause.THERMAL, _H, _RX, "GPU thermal or power-brake slowdown"),
        _row(Cause.HOST_HARDWARE, _H, _RX, "host CPU or memory hardware error (MCE, EDAC)"),
        _row(Cause.NODE_FAILURE, _H, _RX, "a node stopped answering (Slurm NODE_FAIL)"),
        _row(Cause.FILESYSTEM, _I, _RX, "a shared filesystem failed, hung or went stale"),
        _row(
            Cause.NETWORK, _I, _RQ, "NCCL remote or network error between ranks", blames_nodes=False
        ),
        _row(
            Cause.NCCL_TIMEOUT,
            _I,
            _RQ,
            "NCCL collective timed out with no other root cause",
            blames_nodes=False,
        ),
        _row(Cause.HEALTH_CHECK, _I, _RX, "a health check failed on one of the job's nodes"),
        _row(
            Cause.HANG,
            Domain.UNKNOWN,
            _RQ,
            "no progress for the configured time",
            blames_nodes=False,
        ),
        _row(Cause.PREEMPTED, _S, _RQ, "preempted by the scheduler", blames_nodes=False),
        _row(
            Cause.TIMEOUT,
            _S,
            _RQ,
            "reached its time limit",
            condition=Condition.IF_RESUMABLE,
            blames_nodes=False,
        ),
        _row(Cause.CANCELLED, _S, _NO, "cancelled by a user or an admin", blames_nodes=False),
        _row(Cause.CUDA_OOM, _U, _NO, "ran out of GPU memory"),
        _row(Cause.HOST_OOM, _U, _NO, "ran out of host memory (OOM killer)"),
        _row(Cause.CUDA_USER_ERROR, _U, _NO, "CUDA error in the job's own kernels or indices"),
        _row(Cause.STORAGE_FULL, _U, _NO, "no space left on device or disk quota exceeded"),
        _row(Cause.SEGFAULT, _U, _NO, "crashed with SIGSEGV, SIGBUS or SIGABRT"),
        _row(Cause.USER_CODE, _U, _NO, "the program's own exception"),
        _row(
            Cause.UNKNOWN,
            Domain.UNKNOWN,
            _RQ,
            "non-zero exit with no recognisable evidence",
            condition=Condition.ONCE,
            blames_nodes=False,
        ),
    )
}


def info(cause: Cause) -> CauseInfo:
    """The taxonomy row of `cause`."""
    return CAUSES[cause]


def parse_cause(text: str) -> Cause:
    """The Cause named `text`; ValueError naming the valid ids otherwise."""
    try:
        return Cause(text)
    except ValueError:
        valid = ", ".join(c.value for c in Cause)
        raise ValueError(f"unknown cause {text!r} (valid: {valid})") from None
