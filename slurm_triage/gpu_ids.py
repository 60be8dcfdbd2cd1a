"""Which of the GPUs NVML shows a process are a job's: Slurm's GPU ids matched to devices.

SLURM_STEP_GPUS (srun steps) and SLURM_JOB_GPUS (Prolog, Epilog, batch step) hold Slurm's
global GPU ids, "not relative to any device cgroup" (srun(1)). NVML inside a job whose
devices Slurm constrains (cgroup.conf `ConstrainDevices=yes`) opens only the job's
`/dev/nvidiaN` and numbers what it sees from 0, in PCI bus order: there a global id is not
an NVML index (a job on GPUs 4-7 has NVML indices 0-3; one on 2-3 would watch the host's
GPUs 6-7 as its "2" and "3"). A device's PCI bus id and minor number are the same inside
and outside the cgroup, so the match goes through them, as `health.slurm_gpu_order` says
Slurm numbers GPUs:

- "pci_bus" (gres.conf `AutoDetect=nvml`, the default): Slurm sorts GPUs in NVML's
  enumeration order, which is PCI bus order (src/plugins/gres/gpu/gres_gpu.c sorts by the
  links matrix, "a stand-in for PCI bus ID order"), so id i is the host's i-th NVIDIA GPU
  in PCI bus order, read from sysfs, which a device cgroup does not hide.
- "minor_number" (gres.conf `File=/dev/nvidia[0-7]` without AutoDetect): Slurm's index
  follows the device files, so id i is `/dev/nvidia<i>`. The two orders differ on some
  hosts (PrincetonUniversity/jobstats#34).

With MIG, Slurm's ids name MIG devices, not GPUs (`mig_gres_order`): with `AutoDetect=nvml`
each MIG device is a gres record of its own (src/plugins/gpu/nvml/gpu_nvml.c), and
SLURM_JOB_GPUS holds those records' indices (gres_common.c). Ids are then matched through
`mig_gres_order` only, never as GPU positions: a wrong match would judge another job's GPU.

Pure: the callers read sysfs and NVML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_triage.frozen import Frozen

# typing's flag without importing typing (a rank imports this module, issue 20); mypy takes
# any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    GpuOrder = Literal["pci_bus", "minor_number"]
else:
    GpuOrder = str  # at run time, what its values are
# The step's own GPUs first; a batch step only has the job's.
SLURM_GPU_VARS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
# Compiled on first use, by re's own cache: a rank without GPUs never reads a bus id.
_BUS_ID = r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$"
MAX_GPU_ID = 1023  # Slurm's gres bitmaps are small; larger numbers are not GPU ids


class MigDevice(Frozen):
    """One MIG device of a GPU: its index under the parent (NVML), its GPU and compute
    instance ids (None: NVML did not say)."""

    index: int
    gpu_instance: int | None
    compute_instance: int | None


class NvmlDevice(Frozen):
    """One GPU as NVML shows it to this process; None where NVML could not say (lost)."""

    index: int
    bus_id: str | None = None  # canonical_bus_id form
    minor: int | None = None
    # Its MIG devices: () when MIG is off (or on with none made); None: NVML did not say.
    mig: tuple[MigDevice, ...] | None = ()


class GresGpu(Frozen):
    """What one of Slurm's GPU ids names: a whole GPU (NVML index), or one MIG device on it."""

    gpu: int
    mig: MigDevice | None = None


def in_mig_mode(devices: Sequence[NvmlDevice]) -> bool:
    """Some GPU here has MIG devices, so Slurm's ids name MIG devices (see mig_gres_order)."""
    return any(d.mig for d in devices)


def mig_gres_order(
    devices: Sequence[NvmlDevice], host_bus_ids: Sequence[str], order: GpuOrder
) -> tuple[GresGpu, ...] | None:
    """Slurm's GPU records on a node with MIG, in the order of Slurm's ids; None when that
    order cannot be told here.

    Slurm's gpu/nvml plugin (gpu_nvml.c, 21.08 to 25.11) makes one record per MIG device of
    a GPU in MIG mode, with File "/dev/nvidia<minor>,/dev/nvidia-caps/nvidia-cap<gi>,
    .../nvidia-cap<ci>" and no Links, and one per other GPU with Links naming its NVML index
    (a GPU in MIG mode without MIG devices is such a whole GPU). gres_gpu.c then sorts them
    by File (strnatcmp), then, stably, by the index in Links with no Links last: the whole
    GPUs in NVML order, then the MIG devices by parent minor number, then by the
    nvidia-caps minors of their GPU instance and compute instance, which the driver's
    /proc/driver/nvidia-caps/mig-minors numbers in (GPU, GPU instance, compute instance)
    order. An id is its record's position (gres.c counts a MultipleFiles record once).

    Only for `AutoDetect=nvml` ("pci_bus"; a hand-written gres.conf lists MIG devices in
    its own order), and only when every GPU of the host is seen with what this takes (a
    device cgroup hides the other GPUs, whose MIG devices come before or between ours)."""
    if order != "pci_bus":
        return None
    host = {b for b in (canonical_bus_id(h) for h in host_bus_ids) if b is not None}
    seen = {d.bus_id for d in devices}
    if not host or seen != host or len(devices) != len(host):
        return None
    whole: list[GresGpu] = []
    slices: list[tuple[int, int, int, GresGpu]] = []
    for d in sorted(devices, key=lambda d: d.index):
        if d.mig is None or d.minor is None:
            return None
        if not d.mig:
            whole.append(GresGpu(d.index))
        for m in d.mig:
            if m.gpu_instance is None or m.compute_instance is None:
                return None
            slices.append((d.minor, m.gpu_instance, m.compute_instance, GresGpu(d.index, m)))
    return (*whole, *(s[3] for s in sorted(slices, key=lambda s: s[:3])))


def slurm_gpu_ids(
    env: Mapping[str, str], names: Sequence[str] = SLURM_GPU_VARS
) -> tuple[int, ...] | None:
    """Slurm's global GPU ids from the first of `names` that is set; None: not known.

    A value that is not a list of small numbers (a site's UUIDs, garbage) is "not known"."""
    for name in names:
        value = env.get(name, "").strip()
        if not value:
            continue
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if parts and all(p.isdigit() and int(p) <= MAX_GPU_ID for p in parts):
            return tuple(dict.fromkeys(int(p) for p in parts))
        return None
    return None


def canonical_bus_id(text: str | bytes | None) -> str | None:
    """`00000000:5D:00.0` (NVML), `0000:5d:00.0` (sysfs) or `5d:00.0` -> `0000:5d:00.0`."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    import re

    match = re.match(_BUS_ID, text.strip())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


def slurm_id(device: NvmlDevice, host_bus_ids: Sequence[str], order: GpuOrder) -> int | None:
    """The Slurm global id of `device`, or None when what it takes is unknown."""
    if order == "minor_number":
        return device.minor
    host = sorted(b for b in (canonical_bus_id(h) for h in host_bus_ids) if b is not None)
    if device.bus_id is None or device.bus_id not in host:
        return None
    return host.index(device.bus_id)


def job_devices(
    ids: tuple[int, ...] | None,
    devices: Sequence[NvmlDevice],
    host_bus_ids: Sequence[str],
    order: GpuOrder,
) -> dict[int, int | None]:
    """NVML index -> Slurm id of each device among `devices` that is one of the job's GPUs
    (`ids`; None: every device, the job's ids unknown). A device whose id cannot be told
    (sysfs unreadable, a lost GPU) counts only when the count shows it must be the job's."""
    named = {d.index: slurm_id(d, host_bus_ids, order) for d in devices}
    if ids is None:
        return named
    wanted = set(ids)
    chosen: dict[int, int | None] = {i: sid for i, sid in named.items() if sid in wanted}
    unnamed = sorted(i for i, sid in named.items() if sid is None)
    if not unnamed:
        return chosen
    missing = sorted(wanted - set(chosen.values()))
    if len(devices) == len(ids):
        # NVML shows exactly as many GPUs as the job has: the device cgroup's view. Both
        # NVML and Slurm ("pci_bus") count in PCI bus order, so position names the rest.
        return {**chosen, **dict(zip(unnamed, missing, strict=False))}
    if order == "pci_bus" and not chosen and len(devices) > max(ids):
        # The whole node is visible and sysfs said nothing: NVML's index is Slurm's id.
        return {i: i for i in ids if i < len(devices)}
    return chosen


class JobScope(Frozen):
    """What of the node a Prolog's job has: its GPUs (Slurm ids), or the whole node."""

    gpu_ids: tuple[int, ...] | None  # SLURM_JOB_GPUS; None: Slurm gave the job no GPUs
    whole_node: bool  # exclusive: no other job shares the node


def job_scope(env: Mapping[str, str]) -> JobScope:
    """The scope the Prolog's environment describes (slurm.conf Prolog, prolog_epilog.html):
    SLURM_JOB_GPUS for the GPUs; SLURM_JOB_OVERSUBSCRIBE=NO (Slurm 23.02+) or
    SLURM_JOB_EXCLUSIVE=NODE|TOPO for a job that has the node to itself."""
    exclusive = env.get("SLURM_JOB_EXCLUSIVE", "").strip().upper() in ("NODE", "TOPO")
    no_sharing = env.get("SLURM_JOB_OVERSUBSCRIBE", "").strip().upper() == "NO"
    return JobScope(slurm_gpu_ids(env, ("SLURM_JOB_GPUS",)), exclusive or no_sharing)


class JobGpus(Frozen):
    """The GPUs a job had on a node, by PCI bus id (canonical_bus_id form)."""

    bus_ids: frozenset[str]
    # Its ids named MIG devices: other jobs may have had the rest of these GPUs.
    mig: bool = False


def job_bus_ids(
    ids: Sequence[int],
    devices: Sequence[NvmlDevice],
    host_bus_ids: Sequence[str],
    order: GpuOrder,
) -> JobGpus | None:
    """The GPUs that Slurm's ids `ids` name, as a program outside the job's device cgroup
    sees them (the node Epilog: `devices` are every GPU of the node); None when one of them
    cannot be told (an id no device has, a lost GPU, MIG ids that mig_gres_order cannot
    place): a guessed GPU would be another job's.

    With MIG (or a GPU whose MIG state NVML did not say) the ids name Slurm's MIG records,
    placed by mig_gres_order only; else each id is matched exactly (slurm_id), never by
    position as job_devices may inside a cgroup."""
    by_index = {d.index: d for d in devices}
    mig = False
    if in_mig_mode(devices) or any(d.mig is None for d in devices):
        records = mig_gres_order(devices, host_bus_ids, order)
        if records is None or any(i >= len(records) for i in ids):
            return None
        gpus = {records[i].gpu for i in ids}
        mig = any(records[i].mig is not None for i in ids)
    else:
        wanted = set(ids)
        named = {d.index: slurm_id(d, host_bus_ids, order) for d in devices}
        gpus = {index for index, sid in named.items() if sid in wanted}
        if {named[g] for g in gpus} != wanted:
            return None
    buses = {by_index[g].bus_id for g in gpus}
    if not buses or None in buses:
        return None
    return JobGpus(frozenset(b for b in buses if b is not None), mig)
