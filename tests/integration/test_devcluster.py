"""The dev cluster itself: idempotent, real accounting, our programs wired into slurm.conf."""

from __future__ import annotations

import json
import subprocess

import pytest

from slurm_triage.devcluster import cluster
from slurm_triage.slurm import JobState, open_door
from tests.integration.slurmtest import env, sbatch, wait_for

pytestmark = pytest.mark.integration


def test_up_again_is_a_no_op(devcluster) -> None:  # type: ignore[no-untyped-def]
    """A second `up` keeps every running daemon (same pids) and returns quickly."""
    before = {s.name: s.pid for s in cluster.daemon_status(devcluster)}
    assert all(before.values())
    cluster.up(devcluster, timeout_s=30)
    after = {s.name: s.pid for s in cluster.daemon_status(devcluster)}
    assert after == before


def test_sacct_json_and_hooks_run(devcluster) -> None:  # type: ignore[no-untyped-def]
    """A finished job is in `sacct --json`, and our Prolog/Epilog programs logged for it."""
    door = open_door(env=env(devcluster), backend=devcluster.backend)
    job_id = sbatch(
        devcluster,
        "-N1",
        "--gres=gpu:8",
        "--wrap",
        'test "$CUDA_VISIBLE_DEVICES" = 0,1,2,3,4,5,6,7',
    )
    wait_for(lambda: door.job(job_id).state is JobState.COMPLETED, 30, "job completed")

    def accounted() -> dict | None:
        out = subprocess.run(
            ["sacct", "--json", "-j", str(job_id)],
            env=env(devcluster),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        jobs = [j for j in json.loads(out)["jobs"] if j["job_id"] == job_id]
        # 22.05 prints the state as a word, 23.02+ as a list of flags.
        current = jobs[0]["state"]["current"] if jobs else None
        return jobs[0] if current in ("COMPLETED", ["COMPLETED"]) else None

    record = wait_for(accounted, 30, "job in sacct --json")
    gpus = [
        t["count"] for t in record["tres"]["allocated"] if (t["type"], t["name"]) == ("gres", "gpu")
    ]
    assert gpus == [8]

    def hook_lines() -> set[str]:
        log = devcluster.log / "slurm-triage.log"
        lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        return {x["program"] for x in lines if x.get("job_id") == str(job_id)}

    wait_for(
        lambda: (
            {"slurm-triage-prolog", "slurm-triage-epilog", "slurm-triage-epilog-slurmctld"}
            <= hook_lines()
        ),
        30,
        "hook log lines",
    )
