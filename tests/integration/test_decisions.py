"""Epilog, decision and policies on the real local Slurm (issue 6's scenarios)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from slurm_triage.devcluster.config_files import JOB_USER
from slurm_triage.journal import NodeEvent
from slurm_triage.slurm import JobState, open_door
from tests.integration.slurmtest import decision_for as _decision
from tests.integration.slurmtest import env, journal, sbatch, scancel, wait_for

pytestmark = pytest.mark.integration
NODES = ("node1", "node2", "node3")
RESUMES = 'if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then echo resumed; exit 0; fi; '


def _triage(layout, *args: str, extra_env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    e = {**env(layout), **(extra_env or {})}
    return subprocess.run(list(args), env=e, capture_output=True, text=True, timeout=120)


def _inject(layout, node: str, fault: str, gpu: int = 0) -> None:  # type: ignore[no-untyped-def]
    assert (
        _triage(
            layout, "slurm-triage", "inject", "--node", node, fault, "--gpu", str(gpu)
        ).returncode
        == 0
    )


@pytest.fixture
def door(devcluster):  # type: ignore[no-untyped-def]
    d = open_door(env=env(devcluster), timeout_s=20, backend=devcluster.backend)
    yield d
    subprocess.run(["scancel", "-u", JOB_USER], env=env(devcluster), timeout=30)
    for node in NODES:
        _inject(devcluster, node, "clear")
        if d.node(node).drained:
            d.resume(node)


def started(layout) -> str:  # type: ignore[no-untyped-def]
    """Shell that notes the job's script has started. Job ids restart at 1 on a new
    cluster, so the marker lives in the cluster's own directory (removed by `down`), never
    in /tmp where an earlier cluster's could linger."""
    markers = layout.jobs_dir / "markers"
    return (
        f"mkdir -p {markers}; touch {markers}/started-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}; "
    )


def _running(door, layout, job_id: int):  # type: ignore[no-untyped-def]
    """The job's script has started (RUNNING shows while the Prolog still runs)."""
    marker = f"{layout.jobs_dir}/markers/started-{job_id}-0"
    wait_for(lambda: os.path.exists(marker), 60, f"job {job_id} script started")
    return door.job(job_id)


def test_gpu_lost_mid_run_requeues_elsewhere_and_drains(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """XID 79 on one node of a running 2-node job: attributed gpu_unavailable on that node,
    requeued with it excluded, drained with our reason, and the job completes elsewhere."""
    job_id = sbatch(
        devcluster, "--requeue", "-N2", "--wrap", RESUMES + started(devcluster) + "sleep 3; exit 1"
    )
    bad = _running(door, devcluster, job_id).nodes[-1]
    _inject(devcluster, bad, "xid=79", gpu=3)
    decision = _decision(devcluster, job_id)
    assert (decision.cause, decision.blamed, decision.action) == (
        "gpu_unavailable",
        (bad,),
        "requeue",
    )
    assert decision.excluded == (bad,) and decision.drained == (bad,)
    job = door.job(job_id)
    assert job.restart_count == 1 and bad in job.excluded_nodes
    summary = json.loads(job.admin_comment)["triage"]
    assert (summary["cause"], summary["nodes"], summary["n"]) == ("gpu_unavailable", [bad], 1)
    node = door.node(bad)
    assert node.drained and node.reason.startswith(f"triage: gpu_unavailable job={job_id}")
    done = wait_for(
        lambda: (j := door.job(job_id)).state is JobState.COMPLETED and j,
        90,
        "requeued job completed",
    )
    assert bad not in done.nodes and len(done.nodes) == 2
    history = _triage(devcluster, "slurm-triage", "history", "--job", str(job_id))
    assert "gpu_unavailable" in history.stdout and "excluded" in history.stdout


def test_user_bug_is_not_requeued(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """A KeyError traceback in the job's output is the user's bug: recorded, not requeued."""
    script = "python3 -c \"import sys; cfg={}; print('step 1', flush=True); cfg['lr']\""
    job_id = sbatch(devcluster, "--requeue", "-N1", "--wrap", script)
    decision = _decision(devcluster, job_id)
    assert (decision.cause, decision.action, decision.drained) == ("user_code", "record_only", ())
    time.sleep(1)
    job = door.job(job_id)
    assert job.state is JobState.FAILED and job.restart_count == 0
    # Ended, so slurmctld refused AdminComment: accounting has it (issue 17.3).
    accounted = wait_for(
        lambda: (j := door.accounted_job(job_id)).admin_comment and j, 30, "AdminComment"
    )
    assert accounted.admin_comment.startswith("triage: cause=user_code action=record_only")
    assert not any(door.node(n).drained for n in NODES)


def test_unknown_failure_requeued_once_then_held(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """An unexplained failure is requeued once; the second time the budget holds the job."""
    job_id = sbatch(devcluster, "--requeue", "-N1", "--wrap", "exit 1")
    first = _decision(devcluster, job_id, 0)
    assert (first.cause, first.action) == ("unknown", "requeue")
    second = _decision(devcluster, job_id, 1, timeout=90)
    assert second.action == "hold" and any("budget" in r for r in second.reasons)
    held = wait_for(lambda: (j := door.job(job_id)).state is JobState.PENDING and j, 30, "job held")
    assert "Held" in held.state_reason or "held" in held.state_reason.lower()


def test_exclusion_that_cannot_fit_is_dropped(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """A 3-node job on the 3-node cluster is requeued without excluding the bad node."""
    job_id = sbatch(
        devcluster, "--requeue", "-N3", "--wrap", started(devcluster) + "sleep 3; exit 1"
    )
    _running(door, devcluster, job_id)
    _inject(devcluster, "node2", "xid=79", gpu=1)
    decision = _decision(devcluster, job_id)
    assert decision.action == "requeue" and decision.excluded == ()
    assert any("requeued without exclusion" in r for r in decision.reasons)
    assert "node2" not in door.job(job_id).excluded_nodes
    scancel(devcluster, job_id)


def test_admin_drain_is_not_overridden(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """A node an admin drained keeps the admin's reason when a job on it fails."""
    job_id = sbatch(
        devcluster,
        "--no-requeue",
        "-N1",
        "-w",
        "node3",
        "--wrap",
        started(devcluster) + "sleep 3; exit 1",
    )
    _running(door, devcluster, job_id)
    door.drain("node3", "admin: PSU swap ticket 981")
    _inject(devcluster, "node3", "xid=48", gpu=2)
    decision = _decision(devcluster, job_id)
    assert decision.cause == "gpu_memory" and decision.drained == ()
    assert door.node("node3").reason == "admin: PSU swap ticket 981"


def test_two_deciders_make_one_decision(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """Running the decision again for the same job end (a racing epilog) changes nothing."""
    job_id = sbatch(devcluster, "--requeue", "-N1", "--wrap", RESUMES + "exit 1")
    _decision(devcluster, job_id)
    restarts = door.job(job_id).restart_count
    job_env = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_RESTART_COUNT": "0",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_JOB_UID": "0",
        "SLURM_JOB_EXIT_CODE2": "1:0",
    }
    again = [
        subprocess.Popen(
            [str(devcluster.hooks / "epilog-slurmctld")], env={**env(devcluster), **job_env}
        )
        for _ in range(2)
    ]
    assert [p.wait(60) for p in again] == [0, 0]
    assert len([r for r in journal(devcluster).decisions(job_id=job_id) if r.restart == 0]) == 1
    assert door.job(job_id).restart_count == restarts


def test_hostile_records_drain_nothing(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """A symlinked record, an oversized one and one naming another job are ignored; a
    record falsely claiming root evidence may blame a node of this job but never drains."""
    evidence = devcluster.evidence_dir
    fake = {
        "schema": "slurm-triage/evidence",
        "version": 1,
        "job_id": "{job}",
        "node": "{node}",
        "step": "0",
        "collected_by": "root",
        "facts": [
            {
                "kind": "kernel_event",
                "node": "{node}",
                "source": "root",
                "event": "xid",
                "xid": 79,
                "pci_bus_id": "0000:5d:00",
                "detail": "GPU has fallen off the bus.",
            }
        ],
    }
    template = json.dumps(fake).replace('"', '\\"')
    # All named for node1, the job's node: records for nodes outside the run are not read.
    script = (
        f"d={evidence}/$SLURM_JOB_ID; mkdir -p $d; "
        f"ln -s /etc/shadow $d/node1.0.json; "
        f"head -c 3000000 /dev/zero > $d/node1.1.json; "
        f'echo "{template}" | sed "s/{{job}}/99999/; s/{{node}}/node1/g" > $d/node1.2.json; '
        f'echo "{template}" | sed "s/{{job}}/$SLURM_JOB_ID/; s/{{node}}/node1/g" '
        f"> $d/node1.3.json; exit 1"
    )
    job_id = sbatch(devcluster, "--requeue", "-N1", "-w", "node1", "--wrap", script)
    decision = _decision(devcluster, job_id)
    assert decision.drained == ()
    assert not any(door.node(n).drained for n in NODES)
    # -w node1: the blamed node is required, so the job is held, never excluded from it.
    assert decision.blamed == ("node1",) and decision.excluded == ()
    assert decision.action == "hold"
    log = (devcluster.log / "slurm-triage.log").read_text()
    rejected = [
        json.loads(x)["detail"]
        for x in log.splitlines()
        if '"evidence_rejected"' in x and f'"job_id": {job_id}' in x
    ]
    assert any("symlink" in r for r in rejected)
    assert any("cap" in r for r in rejected)
    assert any("names job 99999" in r for r in rejected)
    assert os.stat("/etc/shadow").st_size > 0


def test_a_node_that_keeps_failing_jobs_is_a_lemon(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """Four jobs failing with node3 blamed make it a lemon: listed, and drained as one."""
    lemon_journal = journal(devcluster)
    past = time.time() - 3600
    lemon_journal.add_node_events(
        [
            NodeEvent("node3", 900_000 + i, past, "blamed", "gpu_memory", 48 if i else 63, False)
            for i in range(3)
        ]
    )
    job_id = sbatch(
        devcluster,
        "--no-requeue",
        "-N1",
        "-w",
        "node3",
        "--wrap",
        started(devcluster) + "sleep 2; exit 1",
    )
    _running(door, devcluster, job_id)
    _inject(devcluster, "node3", "xid=94", gpu=0)
    decision = _decision(devcluster, job_id)
    assert decision.drained == ("node3",)
    assert any("as a lemon" in r for r in decision.reasons)
    lemons = _triage(devcluster, "slurm-triage", "lemons", "--json")
    (entry,) = [x for x in json.loads(lemons.stdout) if x["node"] == "node3"]
    assert entry["lemon"] and entry["failed_jobs"] >= 4
