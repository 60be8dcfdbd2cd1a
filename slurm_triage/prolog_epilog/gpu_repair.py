"""The GPU reset `slurm-triage nodes reconcile` asks for (`triage: repairing gpu_reset
gpu=<i,..|all> <subject>`), done by the node's own periodic health check (root, on the node:
the controller cannot reset a GPU) before its full screen (docs/repair.md).

Only on a node that runs no job (IDLE+DRAIN, nothing completing): a reset fails while a
process holds the GPU. The screen that follows the reset is what proves it: all passed, the
reason becomes `triage: burn-in pending <subject>` and reconcile starts the burn-in. A reset
that did not happen (FAILED, UNKNOWN, UNAVAILABLE: a lost GPU, no nvidia-smi) or a screen
that still fails leaves the node `repairing gpu_reset`, with what went wrong after the
subject: the grammar has no word for a failed reset, so reconcile reboots the node once
`repair.repair_timeout_s` has passed since it asked. A dry run resets nothing and changes
nothing in Slurm; it says what it would have done.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from slurm_triage.actuator.repair import RepairResult, finish_gpu_reset, request_gpu_reset
from slurm_triage.agent.protocol import MAX_RELEASE_S
from slurm_triage.config import Config, node_path
from slurm_triage.health_checks.gpu_reset import (
    RESET_TIMEOUT_S,
    GpuReset,
    ResetOutcome,
    reset_gpu,
)
from slurm_triage.health_checks.gpu_resets import ledger_path, record_resets
from slurm_triage.health_checks.result import RunReport
from slurm_triage.logs import get_logger
from slurm_triage.nvml import read_pci_gpus
from slurm_triage.policies.drain_words import (
    DrainKind,
    DrainWords,
    burn_in_pending_reason,
    gpu_reset_reason,
    read_reason,
)
from slurm_triage.slurm.door import SlurmDoor
from slurm_triage.slurm.model import NodeFlag, NodeInfo


class GpuRepairOutcome(enum.StrEnum):
    RESET = "reset"  # the GPUs were reset; the screen decides what follows
    REPAIRED = "repaired"  # reset, screen passed: burn-in pending
    RESET_FAILED = "reset_failed"  # a GPU was not reset: stays repairing, reconcile reboots
    SCREEN_FAILED = "screen_failed"  # reset, but the screen still fails: as above
    BUSY = "busy"  # the node runs (or is finishing) a job: not now
    DRY_RUN = "dry_run"  # would have reset `gpus`; nothing changed
    SLURM_ERROR = "slurm_error"  # the reason could not be changed (detail says why)


@dataclass(frozen=True)
class GpuRepair:
    """One run's GPU repair on this node: which GPUs, each reset's outcome, the reason it
    set in Slurm (or would have, in a dry run)."""

    node: str
    subject: str
    gpus: tuple[int, ...]  # the GPUs reset
    outcome: GpuRepairOutcome
    resets: tuple[GpuReset, ...] = ()
    reason: str = ""
    detail: str = ""
    reason_before: str = ""
    asked: tuple[int, ...] = ()  # the reason's `gpu=` list, () for all
    results: tuple[RepairResult, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "subject": self.subject,
            "gpus": list(self.gpus),
            "outcome": self.outcome.value,
            "resets": [
                {"gpu": r.gpu, "bus_id": r.bus_id, "outcome": r.outcome.value, "detail": r.detail}
                for r in self.resets
            ],
            "reason": self.reason,
            "detail": self.detail,
        }


def runs_no_job(node: NodeInfo) -> bool:
    """Drained and idle: no job on it, none still completing (Slurm's IDLE+DRAIN)."""
    return node.drained and node.state == "IDLE" and NodeFlag.COMPLETING not in node.flags


def asked_reset(node: NodeInfo) -> DrainWords | None:
    """The reason's words when reconcile asked this node for a GPU reset, else None."""
    words = read_reason(node.reason)
    return words if words.kind is DrainKind.REPAIRING_GPU_RESET else None


def reset_asked_gpus(
    config: Config, node: NodeInfo, words: DrainWords, *, dry_run: bool
) -> GpuRepair:
    """Reset the GPUs the reason names (all on the PCI bus for `gpu=all`), each by its bus
    id, or say why not (a job on the node, a dry run)."""
    bus_ids = read_pci_gpus(node_path(config.health.sysfs_root, node.name))
    gpus = words.gpus or tuple(range(len(bus_ids)))
    base = GpuRepair(
        node.name,
        words.subject,
        gpus,
        GpuRepairOutcome.BUSY,
        reason_before=node.reason,
        asked=words.gpus,
    )
    if not runs_no_job(node):
        return _logged(_with(base, GpuRepairOutcome.BUSY, detail=node.label))
    if dry_run:
        return _logged(_with(base, GpuRepairOutcome.DRY_RUN, detail="would reset"))
    with _agent_lets_go(config, node.name, len(gpus)):
        resets = tuple(_reset(config, node.name, gpu, bus_ids) for gpu in gpus)
    # Before the screen: gpu.xid forgives what these resets repaired (health_checks.gpu_resets).
    ledger = ledger_path(config.paths.state_dir, node.name)
    record_resets(ledger, [r.bus_id for r in resets if r.done], time.time())
    if not gpus:
        resets = (GpuReset(-1, "", ResetOutcome.UNAVAILABLE, "no NVIDIA GPU on the PCI bus"),)
    done = all(r.done for r in resets)
    outcome = GpuRepairOutcome.RESET if done else GpuRepairOutcome.RESET_FAILED
    return _with(base, outcome, resets=resets)


def settle_reason(
    door: SlurmDoor, repair: GpuRepair, report: RunReport, *, dry_run: bool
) -> GpuRepair:
    """After the reset and the screen: burn-in pending when the screen passed, else the
    node stays `repairing gpu_reset` with what went wrong (see the module)."""
    if repair.outcome is GpuRepairOutcome.RESET and report.all_passed:
        reason = burn_in_pending_reason(repair.subject)
        result = finish_gpu_reset(door, repair.node, reason, dry_run=dry_run)
        done = _with(repair, GpuRepairOutcome.REPAIRED, reason=reason, results=(result,))
    elif repair.outcome in (GpuRepairOutcome.RESET, GpuRepairOutcome.RESET_FAILED):
        outcome, note = _failure(repair, report)
        reason = gpu_reset_reason(repair.asked, repair.subject, note)
        done = _with(repair, outcome, reason=reason, detail=note)
        if reason == repair.reason_before:  # the same failure as the last run: said already
            return _logged(done)
        result = request_gpu_reset(door, repair.node, reason, dry_run=dry_run)
        done = replace(done, results=(result,))
    else:
        return repair
    if not result.ok:
        done = _with(done, GpuRepairOutcome.SLURM_ERROR, detail=result.detail)
    return _logged(done)


def _failure(repair: GpuRepair, report: RunReport) -> tuple[GpuRepairOutcome, str]:
    failed = next((r for r in repair.resets if not r.done), None)
    if failed is not None:
        which = f"GPU{failed.gpu}" if failed.gpu >= 0 else "GPU"
        return (
            GpuRepairOutcome.RESET_FAILED,
            f"reset {failed.outcome.value}: {which} {failed.detail}",
        )
    worst = report.failures[0] if report.failures else None
    what = f"{worst.check} {worst.reason}" if worst else "not every check passed"
    return GpuRepairOutcome.SCREEN_FAILED, f"reset done, screen fails: {what}"


def _reset(config: Config, node: str, gpu: int, bus_ids: tuple[str, ...]) -> GpuReset:
    if not 0 <= gpu < len(bus_ids):
        return GpuReset(gpu, "", ResetOutcome.FAILED, "not on the PCI bus")
    return reset_gpu(config.health, node, gpu, bus_ids[gpu])


@contextlib.contextmanager
def _agent_lets_go(config: Config, node: str, gpus: int) -> Iterator[None]:
    """The node agent holds NVML (its own init, its XID watch), and NVIDIA refuses a reset
    while any process holds the GPU: ask it to let go for the resets' longest time, and to
    take NVML back after. No agent, or one that does not answer: the resets go ahead."""
    from slurm_triage.agent.client import Outcome, release_nvml

    agent = config.agent
    seconds = min(MAX_RELEASE_S, int(RESET_TIMEOUT_S) * max(gpus, 1) + 60)
    outcome, released, detail = release_nvml(
        agent.socket, seconds, agent.connect_timeout_s, agent.answer_timeout_s
    )
    if outcome not in (Outcome.ANSWERED, Outcome.NOT_RUNNING):
        get_logger(node=node).warning(
            "gpu_repair_agent_holds_nvml", outcome=str(outcome), detail=detail
        )
    try:
        yield
    finally:
        if released:
            release_nvml(agent.socket, 0, agent.connect_timeout_s, agent.answer_timeout_s)


def _with(repair: GpuRepair, outcome: GpuRepairOutcome, **changes: object) -> GpuRepair:
    return replace(repair, outcome=outcome, **changes)  # type: ignore[arg-type]


def _logged(repair: GpuRepair) -> GpuRepair:
    log = get_logger(node=repair.node)
    fields = {k: v for k, v in repair.to_dict().items() if k != "node"}
    if repair.outcome in (GpuRepairOutcome.REPAIRED, GpuRepairOutcome.DRY_RUN):
        log.info("gpu_repair_done", **fields)
    elif repair.outcome is GpuRepairOutcome.BUSY:
        log.info("gpu_repair_waiting", **fields)
    else:
        log.error("gpu_repair_failed", **fields)
    return repair
