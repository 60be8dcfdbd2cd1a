"""gpu.processes: before a job starts, no compute process holds one of its GPUs (or, with
MIG, one of its MIG devices). Pure, over NVML facts and the processes read for this run.

Which GPUs are the job's is gpu_ids.py's call; with MIG its ids name MIG devices
(gpu_ids.mig_gres_order), matched exactly or not at all: a process on a guessed GPU would
drain a healthy shared node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_triage.config import HealthConfig
from slurm_triage.gpu_ids import (
    GpuOrder,
    JobScope,
    MigDevice,
    NvmlDevice,
    canonical_bus_id,
    job_devices,
    mig_gres_order,
)
from slurm_triage.health_checks.gpu import nvml_unusable, usable_gpus
from slurm_triage.health_checks.nvml_facts import GpuFacts, NvmlFacts, mig_key
from slurm_triage.health_checks.result import (
    Action,
    CheckResult,
    Severity,
    fail,
    ok,
    skipped,
    unknown,
)

HIGH = Severity.HIGH


def check_processes(
    facts: NvmlFacts,
    mode: str,
    pci_bus_ids: Sequence[str] = (),
    config: HealthConfig | None = None,
    job: JobScope | None = None,
    gpu_processes: Mapping[str, tuple[int, ...] | None] | None = None,
    **_: Any,
) -> CheckResult:
    """Before a job starts (prolog), no compute process may hold one of its GPUs.

    Only the job's GPUs (SLURM_JOB_GPUS, matched to NVML devices by gpu_ids.py): on a
    shared node the other GPUs belong to jobs that are running. With MIG the job's ids name
    MIG devices, each asked on its own (the parent GPU lists every MIG device's processes,
    other jobs' too); where they cannot be matched the check is SKIPPED, never judged on a
    guessed GPU. A job Slurm gave no GPUs is checked on every GPU only when it has the node
    to itself; `job` None (not run by a Prolog) means the whole node. `gpu_processes` (bus
    id, or nvml_facts.mig_key -> pids) is read for this run even when `facts` were read
    earlier (the node agent's kept facts): the previous job's processes must not be taken
    for strays of this one. A GPU whose processes NVML cannot list makes it UNKNOWN."""
    name = "gpu.processes"
    if mode != "prolog":
        return skipped(name, "only meaningful before a job starts (prolog)")
    if (early := nvml_unusable(name, facts)) is not None:
        return early
    if job is not None and job.gpu_ids is None and not job.whole_node:
        return skipped(name, "the job has no GPUs on this shared node (SLURM_JOB_GPUS unset)")
    if job is None or job.gpu_ids is None:
        # The whole node: a GPU in MIG mode answers for all its MIG devices.
        targets = [_Target(g.label, g, g.bus_id, g.processes) for g in usable_gpus(facts)]
        return _judge_processes(name, targets, gpu_processes, "any GPU")
    order = config.slurm_gpu_order if config is not None else "pci_bus"
    mig_mode = [g for g in facts.gpus if g.mig]
    mig_unknown = [g for g in usable_gpus(facts) if g.mig is None]
    if mig_mode or mig_unknown:
        chosen = _job_mig_targets(name, facts, job.gpu_ids, pci_bus_ids, order)
        if isinstance(chosen, CheckResult):
            return chosen
        return _judge_processes(name, chosen, gpu_processes, f"the job's {len(chosen)} GPUs")
    gpus = usable_gpus(facts)
    devices = [NvmlDevice(g.index, canonical_bus_id(g.bus_id), g.minor) for g in gpus]
    mine = job_devices(job.gpu_ids, devices, pci_bus_ids, order)
    if job.gpu_ids and not mine:
        return unknown(name, f"none of the job's GPUs {list(job.gpu_ids)} found in NVML")
    targets = [_Target(g.label, g, g.bus_id, g.processes) for g in gpus if g.index in mine]
    return _judge_processes(name, targets, gpu_processes, f"the job's {len(targets)} GPUs")


@dataclass(frozen=True)
class _Target:
    """One GPU or MIG device whose compute processes are judged."""

    label: str
    gpu: GpuFacts
    key: str | None  # its key in the run's gpu_processes
    processes: tuple[int, ...] | None  # as `facts` read them


def _job_mig_targets(
    name: str,
    facts: NvmlFacts,
    ids: tuple[int, ...],
    pci_bus_ids: Sequence[str],
    order: GpuOrder,
) -> list[_Target] | CheckResult:
    """The job's GPUs and MIG devices on a node with MIG (gpu_ids.mig_gres_order)."""
    devices = nvml_devices(facts.gpus)
    records = mig_gres_order(devices, pci_bus_ids, order)
    if records is None:
        in_mig = [g.index for g in facts.gpus if g.mig]
        unsaid = [g.index for g in facts.gpus if g.mig is None]
        return skipped(
            name,
            f"MIG: the job's GPUs {list(ids)} cannot be matched to MIG devices here "
            f"(MIG on GPU(s) {in_mig}; MIG state unknown on {unsaid}; "
            f"health.slurm_gpu_order = {order}): not judged on a guessed GPU",
        )
    missing = [i for i in ids if i >= len(records)]
    if missing:
        return unknown(
            name,
            f"the job's GPU id(s) {missing} are not among this node's {len(records)} "
            "GPUs and MIG devices",
        )
    by_index = {g.index: g for g in facts.gpus}
    targets = []
    for record in (records[i] for i in ids):
        g = by_index[record.gpu]
        if record.mig is None:
            targets.append(_Target(g.label, g, g.bus_id, g.processes))
            continue
        mig = next(m for m in g.mig or () if m.index == record.mig.index)
        label = f"{g.label} MIG gi{mig.gpu_instance}/ci{mig.compute_instance}"
        key = mig_key(g.bus_id, mig) if g.bus_id is not None else None
        targets.append(_Target(label, g, key, mig.processes))
    return targets


def nvml_devices(gpus: Sequence[GpuFacts]) -> list[NvmlDevice]:
    """The node's GPUs as gpu_ids places them (the Prolog's check and the node Epilog)."""
    return [NvmlDevice(g.index, canonical_bus_id(g.bus_id), g.minor, _mig_devices(g)) for g in gpus]


def _mig_devices(g: GpuFacts) -> tuple[MigDevice, ...] | None:
    if g.mig is None or g.is_unusable():
        return None
    return tuple(MigDevice(m.index, m.gpu_instance, m.compute_instance) for m in g.mig)


def _judge_processes(
    name: str,
    targets: Sequence[_Target],
    gpu_processes: Mapping[str, tuple[int, ...] | None] | None,
    where: str,
) -> CheckResult:
    unlisted: list[_Target] = []
    for t in targets:
        processes = t.processes
        if gpu_processes is not None and t.key is not None:
            processes = gpu_processes.get(t.key)  # read for this run; absent: not known
        if processes is None:
            unlisted.append(t)
        elif processes:
            return fail(
                name,
                f"{t.label} held by stray process(es) {list(processes)[:4]}",
                HIGH,
                Action.DRAIN_NOW,
                gpu=t.gpu.index,
                pids=list(processes),
            )
    if unlisted:
        why = [u for t in unlisted for u in t.gpu.unread if "RunningProcesses" in u]
        return unknown(
            name,
            f"NVML cannot list the compute processes on {', '.join(t.label for t in unlisted)}"
            f" ({'; '.join(dict.fromkeys(why)) or 'not supported by this driver'})",
            gpus=[t.gpu.index for t in unlisted],
        )
    return ok(name, f"no compute processes on {where}")
