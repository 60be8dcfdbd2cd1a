"""Health checks on the real local Slurm with the simulated GPU estate (issue 4's scenarios)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.slurm import JobState, open_door
from tests.integration.slurmtest import env, journal, run, sbatch, wait_for

pytestmark = pytest.mark.integration


_triage = run


@pytest.fixture
def door(devcluster):  # type: ignore[no-untyped-def]
    d = open_door(env=env(devcluster), timeout_s=15, backend=devcluster.backend)
    yield d
    for node in ("node1", "node2", "node3"):
        _triage(devcluster, "slurm-triage", "inject", "--node", node, "clear")
        if d.node(node).drained:
            d.resume(node)
        d.set_node_comment(node, "")


def test_prolog_drains_faulty_node_and_job_runs_elsewhere(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """XID 79 on node2: the prolog of a job placed there drains node2 with our reason, and
    the jobs all complete on node1/node3."""
    # The session's earlier tests blamed node2 often enough to make it a lemon, and then the
    # decision of a job the Prolog turned away relabels the drain `triage: lemon ...`. A
    # person's release starts its history again (policies.lemons.since_return).
    released = LifecycleEvent("node2", time.time(), "drained", "release", True, "test start")
    journal(devcluster).add_lifecycle_events([released])
    assert (
        _triage(
            devcluster, "slurm-triage", "inject", "--node", "node2", "xid=79", "--gpu", "3"
        ).returncode
        == 0
    )
    jobs = [
        sbatch(devcluster, "--requeue", "-N1", "--gres=gpu:8", "--wrap", "sleep 2")
        for _ in range(3)
    ]

    def drained() -> str | None:
        node = door.node("node2")
        return node.reason if node.drained else None

    reason = wait_for(drained, 60, "node2 drained by the prolog")
    assert reason.startswith("triage: gpu.lost GPU3 00000000:5D:00.0")
    finished = wait_for(
        lambda: (
            all(door.job(j).state is JobState.COMPLETED for j in jobs)
            and [door.job(j) for j in jobs]
        ),
        120,
        "all jobs completed",
    )
    for job in finished:
        assert "node2" not in job.nodes


def test_periodic_check_resumes_after_fault_cleared(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """The periodic check keeps our drain while the fault lasts and lifts it once cleared."""
    _triage(devcluster, "slurm-triage", "inject", "--node", "node2", "remap_failure", "--gpu", "1")
    hook = str(devcluster.hooks / "healthcheck")
    assert _triage(devcluster, hook, node="node2").returncode == 0
    node = door.node("node2")
    assert node.drained and node.reason.startswith("triage: gpu.row_remap GPU1")
    _triage(devcluster, hook, node="node2")
    assert door.node("node2").drained  # still faulty: stays drained
    _triage(devcluster, "slurm-triage", "inject", "--node", "node2", "clear")
    assert _triage(devcluster, hook, node="node2").returncode == 0
    assert not door.node("node2").drained


def test_admin_drained_node_stays_drained(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """A healthy node an admin drained is not resumed by our periodic check."""
    door.drain("node3", "admin: PSU swap ticket 981")
    _triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node3")
    node = door.node("node3")
    assert node.drained and node.reason == "admin: PSU swap ticket 981"


def test_check_cli_json_on_a_cluster_node(devcluster) -> None:  # type: ignore[no-untyped-def]
    """`slurm-triage check --all --json --dry-run` reports every check for a node."""
    _triage(
        devcluster, "slurm-triage", "inject", "--node", "node1", "mount_hung", "--mount", "datasets"
    )
    result = _triage(
        devcluster, "slurm-triage", "check", "--all", "--json", "--dry-run", "--node", "node1"
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    by_check = {r["check"]: r for r in report["results"]}
    assert by_check["fs.mounts"]["status"] == "FAIL" and "hung" in by_check["fs.mounts"]["reason"]
    assert report["decision"]["outcome"] == "drain" and not report["decision"]["applied"]


def test_same_check_failing_everywhere_drains_nothing(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """The same check failing on every node at once trips the circuit breaker: no node is
    drained and each reports a suspected check or fabric fault."""
    for node in ("node1", "node2", "node3"):
        _triage(devcluster, "slurm-triage", "inject", "--node", node, "ib_down", "--port", "1")
    hook = str(devcluster.hooks / "healthcheck")
    runs = [
        subprocess.Popen([hook], env={**env(devcluster), "SLURMD_NODENAME": node})
        for node in ("node1", "node2", "node3")
    ]
    assert [p.wait(60) for p in runs] == [0, 0, 0]
    assert not any(door.node(n).drained for n in ("node1", "node2", "node3"))
    log = (devcluster.log / "slurm-triage.log").read_text().splitlines()[-60:]
    tripped = {json.loads(x)["node"] for x in log if '"health_breaker_open"' in x}
    assert tripped == {"node1", "node2", "node3"}
