"""MIG: Slurm's GPU ids name MIG devices; gpu.processes and the wrapper match them exactly
(Slurm 25.11 gpu_nvml.c + gres_gpu.c order) or not at all, never on a guessed GPU."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurm_triage.config import Config
from slurm_triage.gpu_ids import GresGpu, MigDevice, NvmlDevice, job_scope, mig_gres_order
from slurm_triage.health_checks import registry
from slurm_triage.health_checks.result import CheckResult, CheckStatus
from slurm_triage.health_checks.runner import Run
from slurm_triage.nvml import read_pci_gpus
from slurm_triage.simulate.estate import BUS_IDS, NodeEstate
from slurm_triage.simulate.fake_pynvml import FakeNvml
from slurm_triage.wrapper.nvml_watch import NvmlWatcher
from tests.unit.test_health_runner import sim_config

HOST = tuple(b.lower()[4:] for b in BUS_IDS)  # sysfs form of the estate's bus ids


def _dev(index: int, minor: int, *slices: tuple[int, int, int]) -> NvmlDevice:
    migs = tuple(MigDevice(i, gi, ci) for i, gi, ci in slices)
    return NvmlDevice(index, HOST[index], minor, migs)


def test_slurm_ids_follow_slurms_record_order() -> None:
    """Whole GPUs first in NVML order (Links), then MIG devices by parent minor number, GPU
    instance and compute instance (File, strnatcmp), whatever NVML's MIG indices say."""
    devices = [
        _dev(0, 1, (0, 9, 0), (1, 7, 0), (2, 7, 1)),  # minor 1: after the GPU with minor 0
        _dev(1, 2),  # MIG off: a whole GPU, first
        _dev(2, 0, (0, 3, 0)),
        *(_dev(i, i) for i in range(3, 8)),
    ]
    order = mig_gres_order(devices, HOST, "pci_bus")
    assert order is not None
    assert order[:6] == tuple(GresGpu(i) for i in (1, 3, 4, 5, 6, 7))
    assert [(r.gpu, r.mig.gpu_instance, r.mig.compute_instance) for r in order[6:]] == [  # type: ignore[union-attr]
        (2, 3, 0),
        (0, 7, 0),
        (0, 7, 1),
        (0, 9, 0),
    ]


def test_slurm_ids_are_not_guessed() -> None:
    """No order where it cannot be told: gres.conf File= numbering, a device cgroup's view
    (the host's other GPUs hidden), a GPU whose MIG state or instance ids are unknown."""
    devices = [_dev(i, i, (0, 1, 0)) for i in range(8)]
    assert mig_gres_order(devices, HOST, "pci_bus") is not None
    assert mig_gres_order(devices, HOST, "minor_number") is None
    assert mig_gres_order(devices[:2], HOST, "pci_bus") is None
    assert mig_gres_order(devices, (), "pci_bus") is None
    assert mig_gres_order([*devices[:7], replace(devices[7], mig=None)], HOST, "pci_bus") is None
    unnamed = NvmlDevice(7, HOST[7], 7, (MigDevice(0, None, 0),))
    assert mig_gres_order([*devices[:7], unnamed], HOST, "pci_bus") is None


def _mig(devices: list[tuple[int, int, list[int]]]) -> dict[str, Any]:
    return {
        "mode": 1,
        "devices": [{"gi": gi, "ci": ci, "processes": pids} for gi, ci, pids in devices],
    }


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return sim_config(tmp_path)


@pytest.fixture
def mig_node(config: Config) -> NodeEstate:
    """node2, every GPU split in two MIG devices (GPU instances 1 and 2; on GPU0 NVML lists
    instance 2 first). Slurm's ids: 2g for GPU g's instance 1, 2g+1 for its instance 2.
    A neighbour job runs on id 0 (GPU0 instance 1) and id 2 (GPU1 instance 1)."""
    estate = NodeEstate(Path(config.health.simulate_root), "node2").ensure()
    state = estate.load()
    for position, g in enumerate(state["gpus"]):
        g["mig"] = _mig([(1, 0, [7000 + position] if position < 2 else []), (2, 0, [])])
    state["gpus"][0]["mig"]["devices"].reverse()
    estate.save(state)
    return estate


def _prolog(config: Config, env: dict[str, str]) -> CheckResult:
    (spec,) = registry.select(["gpu.processes"], everything=False)
    report = Run(config, [spec], mode="prolog", node="node2", job=job_scope(env)).execute()
    return report.results[0]


def test_job_on_a_free_mig_device_passes_beside_a_neighbour(
    config: Config, mig_node: NodeEstate
) -> None:
    """Job on id 1 (GPU0 instance 2): passes, although GPU0's other MIG device and GPU1
    (its position taken for a whole GPU: the old drain) hold a neighbour's processes."""
    result = _prolog(config, {"SLURM_JOB_GPUS": "1"})
    assert result.status is CheckStatus.OK, result.reason
    nine = _prolog(config, {"SLURM_JOB_GPUS": "9"})  # GPU4 instance 2: was "not found"
    assert nine.status is CheckStatus.OK, nine.reason


def test_stray_on_the_jobs_own_mig_device_fails(config: Config, mig_node: NodeEstate) -> None:
    """Id 0 is GPU0's instance 1, held: the Prolog fails naming that MIG device."""
    result = _prolog(config, {"SLURM_JOB_GPUS": "0"})
    assert result.failed, result.reason
    assert result.reason.startswith("GPU0 00000000:18:00.0 MIG gi1/ci0 held by")
    assert result.evidence["pids"] == [7000]


def test_mig_ids_beyond_the_node_are_unknown(config: Config, mig_node: NodeEstate) -> None:
    """An id past the node's 16 MIG devices cannot be judged: UNKNOWN, not a drain."""
    result = _prolog(config, {"SLURM_JOB_GPUS": "16"})
    assert result.status is CheckStatus.UNKNOWN and "16" in result.reason


def test_unmatchable_mig_ids_are_skipped(config: Config, mig_node: NodeEstate) -> None:
    """gres.conf File= numbering on a MIG node: SKIPPED with the reason, never a FAIL on
    the GPU at the id's position (GPU0 holds a neighbour's process)."""
    minor = replace(config, health=replace(config.health, slurm_gpu_order="minor_number"))
    result = _prolog(minor, {"SLURM_JOB_GPUS": "0"})
    assert result.status is CheckStatus.SKIPPED and "MIG" in result.reason


def test_whole_node_job_sees_every_mig_devices_processes(
    config: Config, mig_node: NodeEstate
) -> None:
    """An exclusive job's Prolog asks the parent GPUs, which list every MIG device's."""
    result = _prolog(config, {"SLURM_JOB_OVERSUBSCRIBE": "NO"})
    assert result.failed and result.reason.startswith("GPU0 ")


def test_fake_nvml_mig_calls_behave_like_nvml(mig_node: NodeEstate) -> None:
    """As nvml.h documents: NotSupported without MIG, NotFound for an empty slot,
    InvalidArgument past the maximum; the parent lists all its MIG devices' processes."""
    state = mig_node.load()
    state["gpus"][2]["mig"] = {"mode": 0, "devices": []}
    state["gpus"][3]["mig_capable"] = False
    mig_node.save(state)
    nv = FakeNvml(mig_node.nvml_state)
    nv.nvmlInit()
    gpu0, gpu2, gpu3 = (nv.nvmlDeviceGetHandleByIndex(i) for i in (0, 2, 3))
    assert nv.nvmlDeviceGetMigMode(gpu0) == [nv.NVML_DEVICE_MIG_ENABLE] * 2
    assert nv.nvmlDeviceGetMigMode(gpu2) == [nv.NVML_DEVICE_MIG_DISABLE] * 2
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetMigMode(gpu3)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu2, 0)
    assert nv.nvmlDeviceGetMaxMigDeviceCount(gpu0) == 7
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 2)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 7)
    first = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 1)
    assert (nv.nvmlDeviceGetGpuInstanceId(first), nv.nvmlDeviceGetComputeInstanceId(first)) == (
        1,
        0,
    )
    assert [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(first)] == [7000]
    second = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0)
    assert nv.nvmlDeviceGetComputeRunningProcesses(second) == []
    assert [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(gpu0)] == [7000]


def _watcher(estate: NodeEstate, gpus: tuple[int, ...], allowed: set[int] | None) -> NvmlWatcher:
    nv = FakeNvml(estate.nvml_state, allowed_minors=None if allowed is None else frozenset(allowed))
    watcher = NvmlWatcher(
        lambda: nv,
        "node2",
        gpus,
        gpus_expected=True,
        host_bus_ids=lambda: read_pci_gpus(str(estate.sysfs)),
        poll_ms=20,
    )
    watcher.start()
    assert watcher.watching.wait(10)
    return watcher


def _xid(estate: NodeEstate, gpu: int, xid: int, instance: int | None = None) -> None:
    state = estate.load()
    event: dict[str, Any] = {"gpu": gpu, "type": "xid", "data": xid, "time": time.time()}
    if instance is not None:
        event["gpu_instance"] = instance
    state["events"].append(event)
    estate.save(state)


def _facts(watcher: NvmlWatcher, count: int) -> list[tuple[str | None, int | None]]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(watcher.facts) < count:
        time.sleep(0.02)
    time.sleep(0.1)  # anything more that should not come would have come
    return [(f.gpu, f.value) for f in watcher.stop()]


def test_wrapper_watches_the_gpu_of_its_mig_devices(mig_node: NodeEstate) -> None:
    """A step on ids 1 and 3 (GPU0 instance 2, GPU1 instance 2) watches GPUs 0 and 1, not
    GPUs 1 and 3; it drops GPU0 instance 1's XID (the neighbour's) and keeps its own and a
    whole-GPU one, named by its ids."""
    watcher = _watcher(mig_node, (1, 3), None)
    _xid(mig_node, 0, 43, instance=1)  # the neighbour's
    _xid(mig_node, 3, 79)  # GPU3: not the step's
    _xid(mig_node, 0, 31, instance=2)
    _xid(mig_node, 1, 48)
    assert _facts(watcher, 2) == [("1", 31), ("3", 48)]


def test_wrapper_in_a_cgroup_on_a_mig_node_watches_nothing(mig_node: NodeEstate) -> None:
    """Inside a device cgroup the host's other GPUs (whose MIG devices number before ours)
    are hidden: ids cannot be matched, so no GPU is watched (it watched none, or a wrong one)."""
    watcher = _watcher(mig_node, (3,), {1})
    _xid(mig_node, 1, 48)
    assert _facts(watcher, 1) == []


def test_per_run_process_read_lists_each_mig_device(mig_node: NodeEstate) -> None:
    """The per-job read beside the agent's kept facts lists each MIG device on its own, so
    the kept (possibly previous job's) lists are never used for them."""
    from slurm_triage.health_checks.nvml_facts import read_gpu_processes

    found = read_gpu_processes(FakeNvml(mig_node.nvml_state))
    assert found["00000000:18:00.0 gi1 ci0"] == (7000,)
    assert found["00000000:18:00.0 gi2 ci0"] == ()
    assert found["00000000:18:00.0"] == (7000,)  # the parent: every MIG device's
