"""On a shared node each job's Epilog claims the application-XID bursts of its own GPUs only
(SLURM_JOB_GPUS matched to NVML's devices), and a job's root record leaves out the XIDs of
its neighbours' GPUs: one user faulting on GPU 0 while neighbours end on GPUs 1 and 2 is one
user, never three, and a neighbour's XID is not this job's cause."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_triage.config import Config
from slurm_triage.evidence import KernelEvent, KernelEventKind
from slurm_triage.gpu_ids import JobGpus, MigDevice, NvmlDevice, job_bus_ids, job_scope
from slurm_triage.health_checks import app_xids, kernel_log
from slurm_triage.health_checks.result import CheckStatus
from slurm_triage.prolog_epilog.epilog import claim_app_xids, collect
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.simulate import driver_log
from slurm_triage.simulate.estate import BUS_IDS, NodeEstate
from tests.unit.test_app_xids import GPU0, fault, xid_check
from tests.unit.test_health_runner import sim_config

HOST = tuple(b.lower()[4:] for b in BUS_IDS)  # sysfs form: 0000:18:00.0 ...
GPU3 = "0000:5d:00"  # the kernel log's form of the estate's GPU 3


@pytest.fixture
def node(tmp_path: Path) -> tuple[Config, NodeEstate]:
    config = sim_config(tmp_path)
    return config, NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def epilog_env(job: int, uid: int, started: float, **slurm: str) -> dict[str, str]:
    """What slurmd gives the node Epilog of `job` (prep_script_slurmd.c _build_env)."""
    return {
        "SLURM_JOB_ID": str(job),
        "SLURMD_NODENAME": "node2",
        "SLURM_JOB_UID": str(uid),
        "SLURM_JOB_EXIT_CODE2": "0:0",
        "SLURM_JOB_NODELIST": "node2",
        "SLURM_JOB_START_TIME": str(int(started)),
        **slurm,
    }


def epilog_claims(config: Config, estate: NodeEstate, env: dict[str, str], now: float) -> None:
    """The job's Epilog claiming, as collect() does: its GPUs looked up, then claimed."""
    collect(config, JobEnd.from_env(env, now), now)


def claims(config: Config) -> list[tuple[str, str]]:
    path = app_xids.ledger_path(config.paths.state_dir, "node2")
    return [(c.bus, c.user) for c in app_xids.read_claims(path)]


def test_neighbours_ending_take_no_burst_of_another_gpu(node) -> None:  # type: ignore[no-untyped-def]
    """The reviewer's case: user 4242 faults three times on GPU 0 while the jobs of users 1080
    (GPU 1) and 1081 (GPU 2) end: they claim nothing, the faults are one user's; when 4242's
    job ends it claims all three as its own."""
    config, estate = node
    now = time.time()
    fault(estate, now - 400, pid=6000)
    epilog_claims(config, estate, epilog_env(80, 1080, now - 500, SLURM_JOB_GPUS="1"), now - 350)
    fault(estate, now - 250, pid=6001)
    epilog_claims(config, estate, epilog_env(81, 1081, now - 500, SLURM_JOB_GPUS="2"), now - 200)
    fault(estate, now - 100, pid=6002)
    status, _, evidence = xid_check(config)
    assert status is CheckStatus.OK and evidence["app_xid_bursts"] == 3
    assert claims(config) == []
    epilog_claims(config, estate, epilog_env(79, 4242, now - 600, SLURM_JOB_GPUS="0"), now)
    assert claims(config) == [(GPU0, "4242")] * 3
    assert xid_check(config)[0] is CheckStatus.OK


def test_jobs_of_three_users_on_the_gpu_still_drain_it(node) -> None:  # type: ignore[no-untyped-def]
    """Three users' jobs in a row on GPU 0, each faulting: the fault follows the GPU."""
    config, estate = node
    now = time.time()
    for i, job in enumerate((70, 71, 72)):
        start = now - 500 + 150 * i
        fault(estate, start + 20, pid=6000 + i)
        env = epilog_env(job, 1070 + i, start, SLURM_JOB_GPUS="0")
        epilog_claims(config, estate, env, start + 60)
    status, _, evidence = xid_check(config)
    assert status is CheckStatus.FAIL
    assert evidence["faults"] == ["user:1070", "user:1071", "user:1072"]


def test_gpus_unknown_claim_everything_only_with_the_whole_node(node) -> None:  # type: ignore[no-untyped-def]
    """No SLURM_JOB_GPUS (a job without GPUs, a gres Slurm names no ids for): on a shared
    node nothing is claimed; with the node to itself (SLURM_JOB_OVERSUBSCRIBE=NO, 25.11)
    every burst of its run is its own."""
    config, estate = node
    now = time.time()
    fault(estate, now - 100)
    epilog_claims(config, estate, epilog_env(80, 1080, now - 500), now)
    assert claims(config) == []
    env = epilog_env(81, 1081, now - 500, SLURM_JOB_OVERSUBSCRIBE="NO")
    epilog_claims(config, estate, env, now)
    assert claims(config) == [(GPU0, "1081")]


def test_gpus_nvml_cannot_place_claim_nothing_on_a_shared_node(node) -> None:  # type: ignore[no-untyped-def]
    """A Slurm id no GPU of the node has (a gres.conf this node does not match) is not
    guessed: the job claims nothing, and its root record keeps every XID."""
    config, estate = node
    now = time.time()
    fault(estate, now - 100)
    env = epilog_env(80, 1080, now - 500, SLURM_JOB_GPUS="9")
    record = collect(config, JobEnd.from_env(env, now), now)
    assert claims(config) == []
    assert any(getattr(f, "pci_bus_id", None) == GPU0 for f in record.facts)


def test_unreadable_nvml_leaves_the_gpus_unknown_and_the_epilog_running(node) -> None:  # type: ignore[no-untyped-def]
    """NVML's state unreadable: the job's GPUs are not known, nothing is claimed on a shared
    node, every XID is kept, and the Epilog goes on (never a failed Epilog for our trouble)."""
    config, estate = node
    now = time.time()
    fault(estate, now - 100)
    estate.nvml_state.write_text("{not json")
    env = epilog_env(80, 1080, now - 500, SLURM_JOB_GPUS="0")
    record = collect(config, JobEnd.from_env(env, now), now)
    assert claims(config) == []
    assert any(getattr(f, "pci_bus_id", None) == GPU0 for f in record.facts)


def test_mig_devices_claim_nothing_on_a_shared_node(node) -> None:  # type: ignore[no-untyped-def]
    """A job on a MIG device shares its GPU with the jobs on the others: it claims no burst
    there (the unclaimed bursts count as one), unless it had the node to itself."""
    config, estate = node
    now = time.time()
    fault(estate, now - 100)
    events = kernel_log.read_kernel_events(str(estate.kernel_log), "node2")
    mig = JobGpus(frozenset({HOST[0]}), mig=True)
    shared = JobEnd.from_env(epilog_env(80, 1080, now - 500, SLURM_JOB_GPUS="8"), now)
    claim_app_xids(config, shared, events, now, mig)
    assert claims(config) == []
    whole = epilog_env(81, 1081, now - 500, SLURM_JOB_GPUS="8", SLURM_JOB_OVERSUBSCRIBE="NO")
    claim_app_xids(config, JobEnd.from_env(whole, now), events, now, mig)
    assert claims(config) == [(GPU0, "1081")]


def test_the_root_record_leaves_out_the_neighbours_xids(node) -> None:  # type: ignore[no-untyped-def]
    """Job on GPU 0: a neighbour's XID 31 on GPU 3 is not in its record; its own XID, and
    kernel events that name no GPU (a memcg OOM), are. GPUs unknown: everything is kept."""
    config, estate = node
    now = time.time()
    (xid31,) = driver_log.xid_lines(31, GPU3)
    estate.kernel_line(xid31, now - 30)
    fault(estate, now - 20)
    estate.kernel_line(
        "Memory cgroup out of memory: Killed process 4242 (python) total-vm:1000kB, "
        "anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:2002 pgtables:10kB oom_score_adj:0",
        now - 10,
    )
    env = epilog_env(100, 1100, now - 500, SLURM_JOB_GPUS="0", SLURM_JOB_EXIT_CODE2="1:0")
    facts = collect(config, JobEnd.from_env(env, now), now).facts
    kernel = [f for f in facts if isinstance(f, KernelEvent)]
    assert {f.pci_bus_id for f in kernel if f.event is KernelEventKind.XID} == {GPU0}
    assert any(f.event is KernelEventKind.OOM_KILL for f in kernel)
    unknown = collect(config, JobEnd.from_env(epilog_env(101, 1101, now - 500), now), now).facts
    buses = {getattr(f, "pci_bus_id", None) for f in unknown if isinstance(f, KernelEvent)}
    assert {GPU0, GPU3} <= buses


def test_the_epilog_reads_the_jobs_gpus_and_sharing() -> None:
    """SLURM_JOB_GPUS and SLURM_JOB_OVERSUBSCRIBE as slurmd sets them for the Epilog; a
    JobEnd not made from an environment is the whole node, as a tool's run."""
    env = epilog_env(7, 1000, 1.0, SLURM_JOB_GPUS="2,3", SLURM_JOB_OVERSUBSCRIBE="OK")
    end = JobEnd.from_env(env, 2.0)
    assert end.scope == job_scope(env) and end.scope.gpu_ids == (2, 3)
    assert not end.whole_node
    assert JobEnd.from_env({**env, "SLURM_JOB_OVERSUBSCRIBE": "NO"}, 2.0).whole_node
    assert JobEnd(job_id=7, ended_at=2.0).whole_node


def _dev(index: int, minor: int, *slices: tuple[int, int, int]) -> NvmlDevice:
    migs = tuple(MigDevice(i, gi, ci) for i, gi, ci in slices)
    return NvmlDevice(index, HOST[index], minor, migs)


def test_slurm_ids_name_bus_ids_exactly() -> None:
    """PCI bus order, device minor order (which may differ: jobstats#34), MIG records; an id
    that names no device, or a device without a bus id, gives None, never a guess."""
    devices = [_dev(i, 7 - i) for i in range(8)]
    assert job_bus_ids((0, 3), devices, HOST, "pci_bus") == JobGpus(frozenset({HOST[0], HOST[3]}))
    assert job_bus_ids((0,), devices, HOST, "minor_number") == JobGpus(frozenset({HOST[7]}))
    assert job_bus_ids((8,), devices, HOST, "pci_bus") is None
    assert job_bus_ids((0,), [NvmlDevice(0, None, 0), *devices[1:]], HOST, "pci_bus") is None
    mig = [_dev(0, 0, (0, 1, 0), (1, 2, 0)), *(_dev(i, i) for i in range(1, 8))]
    # Records: whole GPUs 1-7 (ids 0-6), then GPU 0's two MIG devices (ids 7, 8).
    assert job_bus_ids((8,), mig, HOST, "pci_bus") == JobGpus(frozenset({HOST[0]}), mig=True)
    assert job_bus_ids((0,), mig, HOST, "pci_bus") == JobGpus(frozenset({HOST[1]}))
    assert job_bus_ids((0,), mig, HOST, "minor_number") is None


def test_the_earlier_record_leaves_out_the_neighbours_xids(node, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The run's kernel events before its window (`<node>.earlier.json`) are filtered as its
    window's are: the neighbour's XID on GPU 3 is not there, the job's own on GPU 0 is."""
    from slurm_triage.evidence import parse_record
    from slurm_triage.prolog_epilog import epilog

    config, estate = node
    now = time.time()
    (xid31,) = driver_log.xid_lines(31, GPU3)
    estate.kernel_line(xid31, now - 700)
    fault(estate, now - 690)
    written = {}
    monkeypatch.setattr(
        epilog,
        "write_root_record",
        lambda _dir, _job, _node, data, suffix=".json": written.update({suffix: data}) or "",
    )
    env = epilog_env(100, 1100, now - 3000, SLURM_JOB_GPUS="0", SLURM_JOB_EXIT_CODE2="1:0")
    epilog.run_epilog(config, env)
    earlier = parse_record(written[".earlier.json"])
    assert {getattr(f, "pci_bus_id", None) for f in earlier.facts} == {GPU0}


def test_a_job_with_the_node_to_itself_keeps_every_gpus_xids(node) -> None:  # type: ignore[no-untyped-def]
    """`--exclusive --gres=gpu:1`: no neighbour, and without ConstrainDevices the job could
    use every GPU: an XID on GPU 3 stays in its record, and its Epilog still drains."""
    config, estate = node
    now = time.time()
    (xid31,) = driver_log.xid_lines(31, GPU3)
    estate.kernel_line(xid31, now - 30)
    env = epilog_env(
        100,
        1100,
        now - 500,
        SLURM_JOB_GPUS="0",
        SLURM_JOB_OVERSUBSCRIBE="NO",
        SLURM_JOB_EXIT_CODE2="1:0",
    )
    facts = collect(config, JobEnd.from_env(env, now), now).facts
    buses = {f.pci_bus_id for f in facts if isinstance(f, KernelEvent)}
    assert GPU3 in buses
