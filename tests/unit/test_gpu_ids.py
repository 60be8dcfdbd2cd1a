"""Slurm's GPU ids meet NVML's numbering inside a device cgroup (issue 14.1)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_triage.evidence import NvmlCondition, NvmlFact, parse_record
from slurm_triage.gpu_ids import (
    NvmlDevice,
    canonical_bus_id,
    job_devices,
    slurm_gpu_ids,
)
from slurm_triage.nvml import read_pci_gpus
from slurm_triage.simulate.estate import BUS_IDS, CGROUP_ENV, NodeEstate, inject
from slurm_triage.simulate.fake_pynvml import FakeNvml
from slurm_triage.wrapper.nvml_watch import NvmlWatcher
from tests.unit.test_wrap import WRAP, wrap_env

HOST = tuple(b.lower()[4:] for b in BUS_IDS)  # sysfs form, PCI order


def _device(index: int, host_position: int, minor: int | None = None) -> NvmlDevice:
    return NvmlDevice(index, HOST[host_position], host_position if minor is None else minor)


def test_slurm_gpu_ids_step_first_and_only_numbers() -> None:
    """SLURM_STEP_GPUS wins over SLURM_JOB_GPUS; CUDA_VISIBLE_DEVICES (local to the cgroup)
    is never read; UUIDs or nothing mean "not known"."""
    assert slurm_gpu_ids({"SLURM_STEP_GPUS": "4,5", "SLURM_JOB_GPUS": "0,1,4,5"}) == (4, 5)
    assert slurm_gpu_ids({"SLURM_JOB_GPUS": "6,2,6"}) == (6, 2)
    assert slurm_gpu_ids({"CUDA_VISIBLE_DEVICES": "0,1"}) is None
    assert slurm_gpu_ids({"SLURM_STEP_GPUS": "GPU-5e1a0000-aaaa"}) is None
    assert slurm_gpu_ids({"SLURM_STEP_GPUS": "99999999999"}) is None
    assert slurm_gpu_ids({}) is None


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("00000000:5D:00.0", "0000:5d:00.0"),
        ("0000:5d:00.0", "0000:5d:00.0"),
        (b"00000001:AB:1F.7", "0001:ab:1f.7"),
        ("5d:00.0", "0000:5d:00.0"),
        ("not a bus id", None),
        ("0000:5d:00.9", None),
    ],
)
def test_canonical_bus_id(text: str | bytes, canonical: str | None) -> None:
    """NVML's, sysfs' and short bus ids compare equal once canonical; junk is None."""
    assert canonical_bus_id(text) == canonical


def test_cgroup_view_is_matched_by_bus_id() -> None:
    """A job on GPUs 2, 3, 6, 7 sees them as NVML 0-3: matched by bus id, not by index."""
    visible = [_device(i, host) for i, host in enumerate((2, 3, 6, 7))]
    assert job_devices((2, 3, 6, 7), visible, HOST, "pci_bus") == {0: 2, 1: 3, 2: 6, 3: 7}
    assert job_devices((6, 7), visible, HOST, "pci_bus") == {2: 6, 3: 7}


def test_whole_node_view_selects_by_bus_id() -> None:
    """Without a device cgroup NVML shows all eight: the job's are picked by bus id."""
    visible = [_device(i, i) for i in range(8)]
    assert job_devices((4, 5), visible, HOST, "pci_bus") == {4: 4, 5: 5}
    assert job_devices(None, visible, HOST, "pci_bus") == {i: i for i in range(8)}


def test_minor_number_order() -> None:
    """With gres.conf File= lines Slurm's id is the minor number, which may not follow PCI
    order (jobstats#34): the device whose /dev/nvidia0 is at PCI position 6 is Slurm's 0."""
    visible = [_device(i, i, minor=(i + 2) % 8) for i in range(8)]
    assert job_devices((0,), visible, HOST, "minor_number") == {6: 0}
    assert job_devices((0,), visible, HOST, "pci_bus") == {0: 0}


def test_unreadable_sysfs_falls_back_on_the_count() -> None:
    """Without the host's PCI list: as many devices as ids is the cgroup's view (position
    names them); a whole node's view means NVML index = Slurm id; otherwise nothing is
    claimed that cannot be shown to be the job's."""
    cgroup = [_device(i, host) for i, host in enumerate((4, 5))]
    assert job_devices((4, 5), cgroup, (), "pci_bus") == {0: 4, 1: 5}
    whole = [_device(i, i) for i in range(8)]
    assert job_devices((4, 5), whole, (), "pci_bus") == {4: 4, 5: 5}
    assert job_devices((4, 5), whole[:3], (), "pci_bus") == {}


def test_a_lost_gpu_in_the_cgroup_is_still_the_jobs() -> None:
    """A GPU lost before the wrapper starts has no bus id; in the cgroup's view it is the
    job's remaining id."""
    visible = [_device(0, 4), NvmlDevice(1), _device(2, 6), _device(3, 7)]
    assert job_devices((4, 5, 6, 7), visible, HOST, "pci_bus") == {0: 4, 2: 6, 3: 7, 1: 5}


@pytest.fixture
def estate(tmp_path: Path) -> NodeEstate:
    return NodeEstate(tmp_path, "node1").ensure()


def test_fake_nvml_renumbers_inside_a_device_cgroup(estate: NodeEstate) -> None:
    """The stand-in, like NVML, shows a cgroup only its GPUs, numbered from 0 in PCI order,
    with their host bus ids and minor numbers; host indices past the count are invalid."""
    nv = FakeNvml(estate.nvml_state, allowed_minors=frozenset({6, 4, 5, 7}))
    nv.nvmlInit()
    assert nv.nvmlDeviceGetCount() == 4
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetPciInfo(handle).busId == BUS_IDS[4].encode()
    assert nv.nvmlDeviceGetMinorNumber(handle) == 4
    assert nv.nvmlDeviceGetIndex(handle) == 0
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetHandleByIndex(4)


def _watch(estate: NodeEstate, allowed: set[int], gpus: tuple[int, ...], **kw: object) -> list:  # type: ignore[type-arg]
    nv = FakeNvml(estate.nvml_state, allowed_minors=frozenset(allowed))
    watcher = NvmlWatcher(
        lambda: nv,
        "node1",
        gpus,
        gpus_expected=True,
        host_bus_ids=lambda: read_pci_gpus(str(estate.sysfs)),
        poll_ms=20,
        **kw,  # type: ignore[arg-type]
    )
    watcher.start()
    assert watcher.watching.wait(10)
    return [watcher]


def _facts(watcher: NvmlWatcher, count: int) -> list[tuple[str | None, int | None]]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(watcher.facts) < count:
        time.sleep(0.02)
    time.sleep(0.1)  # anything more that should not come would have come
    return [(f.gpu, f.value) for f in watcher.stop()]


def test_wrapper_in_a_cgroup_watches_the_steps_gpus(estate: NodeEstate) -> None:
    """A step on GPUs 4-7 in its device cgroup watches those four and names them 4-7 (it
    watched nothing: NVML indices 4-7 do not exist there)."""
    (watcher,) = _watch(estate, {4, 5, 6, 7}, (4, 5, 6, 7))
    inject(estate, "xid", 79, gpu=6)
    assert _facts(watcher, 1) == [("6", 79)]


def test_wrapper_in_a_cgroup_never_watches_other_gpus(estate: NodeEstate) -> None:
    """A step on GPUs 2, 3, 6, 7: an XID on its GPU 2 is seen and named 2; its NVML index 2
    is host GPU 6, which it used to report as "2"."""
    (watcher,) = _watch(estate, {2, 3, 6, 7}, (2, 3, 6, 7))
    inject(estate, "xid", 48, gpu=2)
    inject(estate, "xid", 74, gpu=6)
    assert _facts(watcher, 2) == [("2", 48), ("6", 74)]


def test_wrapper_minor_number_order(estate: NodeEstate) -> None:
    """gres.conf File= numbering: the step's Slurm GPU 0 is /dev/nvidia0, wherever that sits
    on the PCI bus (here at PCI position 6)."""
    state = estate.load()
    for position, g in enumerate(state["gpus"]):
        g["minor"] = (position + 2) % 8
    estate.save(state)
    (watcher,) = _watch(estate, {0}, (0,), order="minor_number")
    inject(estate, "xid", 79, gpu=6)
    assert _facts(watcher, 1) == [("0", 79)]


def test_wrap_in_a_simulated_cgroup_records_the_right_gpu(tmp_path: Path) -> None:
    """End to end: `slurm-triage wrap` under srun's environment for a step on GPUs 4-7 in a
    (simulated) device cgroup records an XID 79 on GPU 5 as GPU 5."""
    sim = tmp_path / "sim"
    estate = NodeEstate(sim, "nodeA").ensure()
    log = tmp_path / "triage.log"
    config = (
        f'[logging]\ndestination = "file"\nfile = "{log}"\nlevel = "debug"\nformat = "json"\n'
        f'[health]\nnvml = "simulated"\nsimulate_root = "{sim}"\n'
        f'sysfs_root = "{sim}/{{node}}/sys"\n'
    )
    env = wrap_env(tmp_path, config=config, SLURM_STEP_GPUS="4,5,6,7")
    env.update({"SLURM_TRIAGE__WRAPPER__WATCH_NVML": "true", CGROUP_ENV: "4,5,6,7"})
    env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"  # what Slurm gives a constrained step
    proc = subprocess.Popen(
        [*WRAP, "--kill-grace", "1", "--", sys.executable, "-c", "import time; time.sleep(60)"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (log.exists() and '"nvml_watching"' in log.read_text()):
        assert time.monotonic() < deadline, "the wrapper never started watching"
        time.sleep(0.02)
    inject(estate, "xid", 79, gpu=5)
    proc.communicate(timeout=30)
    record = parse_record((tmp_path / "evidence" / "77" / "nodeA.0.json").read_bytes())
    nvml = [f for f in record.facts if isinstance(f, NvmlFact)]
    assert [(f.condition, f.gpu, f.value) for f in nvml] == [(NvmlCondition.XID_EVENT, "5", 79)]
