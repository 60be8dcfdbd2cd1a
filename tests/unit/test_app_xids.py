"""Application XIDs are counted as faults of users' jobs (bursts claimed by each job's Epilog),
never as kernel-log lines (issue 14, item 2), on the simulated estate's kernel log."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurm_triage.config import Config
from slurm_triage.health_checks import app_xids, kernel_log, registry
from slurm_triage.health_checks.result import Action, CheckStatus, Severity
from slurm_triage.health_checks.runner import Run
from slurm_triage.prolog_epilog.epilog import claim_app_xids
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.simulate import driver_log
from slurm_triage.simulate.estate import NodeEstate, inject
from tests.unit.test_health_runner import sim_config

GPU0 = "0000:18:00"


@pytest.fixture
def node(tmp_path: Path) -> tuple[Config, NodeEstate]:
    config = sim_config(tmp_path)
    return config, NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def xid_check(config: Config) -> tuple[CheckStatus, str, dict[str, object]]:
    (result,) = Run(config, registry.select(["gpu.xid"], False), node="node2").execute().results
    return result.status, result.reason, dict(result.evidence)


def fault(estate: NodeEstate, when: float, pid: int = 4242) -> None:
    """One XID 13 fault on GPU 0 at `when`, every line as the driver prints it."""
    for n, line in enumerate(driver_log.xid_lines(13, GPU0, pid=pid)):
        estate.kernel_line(line, when + n * 0.0015)


def job_ends(
    config: Config, estate: NodeEstate, job: int, started: float, ended: float, uid: int = -1
) -> None:
    """The Epilog of `job` (of user `uid`, by default one of its own: 1000 + job) on node2
    claims the bursts of its run."""
    uid = 1000 + job if uid < 0 else uid
    events = kernel_log.read_kernel_events(str(estate.kernel_log), "node2")
    end = JobEnd(job_id=job, node="node2", uid=uid, exit_code=1, ended_at=ended, start_time=started)
    claim_app_xids(config, end, events, ended)


def test_the_fake_prints_an_xid_13_fault_as_a_burst_without_a_process(node) -> None:  # type: ignore[no-untyped-def]
    """`inject xid=13` writes what a real GPU writes: Warp/Global/ESR lines per trapped SM
    with pid='<unknown>', then the channel's line naming the process, then XID 43."""
    _, estate = node
    inject(estate, "xid", 13, gpu=0)
    lines = estate.kernel_log.read_text().splitlines()
    unknown = [line for line in lines if "pid='<unknown>', name=<unknown>, Graphics" in line]
    assert len(unknown) == 9 and len(lines) == 11
    assert "13, pid=4242, name=python, Graphics Exception: ChID 0010" in lines[-2]
    assert lines[-1].endswith("NVRM: Xid (PCI:0000:18:00): 43, pid=4242, name=python, Ch 00000010")
    stamps = [line.split(" ", 1)[0] for line in lines]
    assert len(set(stamps)) == len(stamps)  # microsecond stamps, a few apart


def test_one_user_fault_does_not_drain(node) -> None:  # type: ignore[no-untyped-def]
    """One XID 13 burst (nine lines without a pid) is one fault, not nine processes."""
    config, estate = node
    inject(estate, "xid", 13, gpu=0)
    status, _, evidence = xid_check(config)
    assert status is CheckStatus.OK
    assert evidence["app_xid_bursts"] == 1


def test_one_job_restarting_its_workers_is_one_job(node) -> None:  # type: ignore[no-untyped-def]
    """torchrun restarting after the same bug: three bursts, three pids, one job."""
    config, estate = node
    now = time.time()
    started = now - 500
    for i in range(3):
        fault(estate, now - 400 + 120 * i, pid=5000 + i)
    assert xid_check(config)[0] is CheckStatus.OK  # running: not claimed yet, one job at most
    job_ends(config, estate, 70, started, now)
    status, _, evidence = xid_check(config)
    assert status is CheckStatus.OK and evidence["app_xid_bursts"] == 3


def test_three_jobs_faulting_on_one_gpu_drain_it(node) -> None:  # type: ignore[no-untyped-def]
    """Three jobs in a row hit XID 13 on GPU 0: the fault follows the GPU, not the code."""
    config, estate = node
    now = time.time()
    for i, job in enumerate((70, 71, 72)):
        start = now - 500 + 150 * i
        fault(estate, start + 20, pid=6000 + i)
        job_ends(config, estate, job, start, start + 60)
    status, reason, evidence = xid_check(config)
    assert status is CheckStatus.FAIL
    assert reason == f"application XIDs on GPU {GPU0} from jobs of 3 users"
    assert evidence["faults"] == ["user:1070", "user:1071", "user:1072"]
    (result,) = Run(config, registry.select(["gpu.xid"], False), node="node2").execute().results
    assert (result.severity, result.action) == (Severity.LOW, Action.DRAIN)


def test_one_users_three_jobs_faulting_do_not_drain(node) -> None:  # type: ignore[no-untyped-def]
    """A hostile (or unlucky) user's three tiny jobs, each one out-of-bounds store on GPU 0:
    one user's code, not the GPU; with the running job's unclaimed burst still two users at
    most, never app_xid_repeats."""
    config, estate = node
    now = time.time()
    for i, job in enumerate((70, 71, 72)):
        start = now - 500 + 150 * i
        fault(estate, start + 20, pid=6000 + i)
        job_ends(config, estate, job, start, start + 60, uid=4242)
    fault(estate, now - 10, pid=7000)
    status, _, evidence = xid_check(config)
    assert status is CheckStatus.OK and evidence["app_xid_bursts"] == 4


def test_a_claim_of_an_earlier_build_counts_as_its_job(tmp_path: Path) -> None:
    """A ledger written before claims named their user: each claim is its own job."""
    path = tmp_path / "n.app-xids.json"
    old = [{"bus": GPU0, "start": 100.0 * i, "end": 100.0 * i, "job": str(70 + i)} for i in (1, 2)]
    path.write_text(json.dumps({"claims": old}))
    claims = app_xids.read_claims(path)
    found = [app_xids.Burst(GPU0, 100.0 * i, 100.0 * i, 9, (13,), frozenset()) for i in (1, 2)]
    assert app_xids.faults_per_gpu(found, claims, 5.0) == {GPU0: {"job:71", "job:72"}}


def test_two_jobs_and_the_running_one_are_three(node) -> None:  # type: ignore[no-untyped-def]
    """Bursts no Epilog claimed yet (the job running now) count as one more job."""
    config, estate = node
    now = time.time()
    for i, job in enumerate((70, 71)):
        start = now - 500 + 150 * i
        fault(estate, start + 20, pid=6000 + i)
        job_ends(config, estate, job, start, start + 60)
    fault(estate, now - 30, pid=7000)
    fault(estate, now - 10, pid=7001)
    status, _, evidence = xid_check(config)
    assert status is CheckStatus.FAIL
    assert evidence["faults"] == [app_xids.UNCLAIMED, "user:1070", "user:1071"]


def test_first_claim_wins_and_a_job_claims_nothing_before_it_started(tmp_path: Path) -> None:
    """An Epilog claims only unclaimed bursts of its own run."""
    path = tmp_path / "n.app-xids.json"
    early = app_xids.Burst(GPU0, 100.0, 100.2, 11, (13, 43), frozenset({"1"}))
    late = app_xids.Burst(GPU0, 300.0, 300.1, 11, (13, 43), frozenset({"2"}))
    assert app_xids.claim_bursts(path, [early], "70", 50, 200, 5.0, now=200) != []
    new = app_xids.claim_bursts(path, [early, late], "71", 250, 400, 5.0, now=400)
    assert [(c.job, c.start) for c in new] == [("71", 300.0)]
    claims = app_xids.read_claims(path)
    assert [getattr(app_xids.owner(b, claims, 5.0), "job", None) for b in (early, late)] == [
        "70",
        "71",
    ]


def test_an_unreadable_ledger_counts_bursts_as_unclaimed(tmp_path: Path) -> None:
    """A damaged ledger is no claim at all: never more faults than bursts, no crash."""
    path = tmp_path / "n.app-xids.json"
    path.write_text(json.dumps({"claims": [{"bus": GPU0, "start": "x", "end": 1, "job": "7"}]}))
    assert app_xids.read_claims(path) == ()
    path.write_text("{not json")
    assert app_xids.read_claims(path) == ()


def test_a_long_burst_does_not_hide_the_fatal_xid_after_it(node) -> None:  # type: ignore[no-untyped-def]
    """Hundreds of XID 13 lines (a kernel trapping on every SM) before an XID 79: the parser
    keeps the newest events, so the lost GPU is still seen."""
    config, estate = node
    now = time.time() - 60
    for n in range(700):
        line = driver_log.xid_lines(13, GPU0)[n % 9]
        estate.kernel_line(line, now + n * 0.001)
    inject(estate, "xid", 79, gpu=3)
    status, reason, _ = xid_check(config)
    assert status is CheckStatus.FAIL and reason.startswith("XID 79 GPU 0000:5d:00")
