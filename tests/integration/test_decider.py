"""The decider on the real local Slurm (issue 20): EpilogSlurmctld (SlurmUser, run by
slurmctld) hands the job end to a `slurm-triage decider` run as SlurmUser, which decides it
exactly as EpilogSlurmctld would have; with the decider stopped, EpilogSlurmctld decides
itself again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from slurm_triage.devcluster.config_files import JOB_USER, SLURM_USER
from slurm_triage.slurm import open_door
from tests.integration.slurmtest import decision_for, env, sbatch, wait_for

pytestmark = pytest.mark.integration


def _events(layout: Any, event: str, job_id: int) -> list[dict[str, Any]]:
    found = []
    for line in (layout.log / "slurm-triage.log").read_text().splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if item.get("event") == event and item.get("job_id") == str(job_id):
            found.append(item)
    return found


@pytest.fixture
def door(devcluster):  # type: ignore[no-untyped-def]
    d = open_door(env=env(devcluster), timeout_s=20, backend=devcluster.backend)
    yield d
    subprocess.run(["scancel", "-u", JOB_USER], env=env(devcluster), timeout=30)
    for node in ("node1", "node2", "node3"):
        _inject(devcluster, node, "clear")
        if d.node(node).drained:
            d.resume(node)


def _inject(layout: Any, node: str, fault: str) -> None:
    done = subprocess.run(
        ["slurm-triage", "inject", "--node", node, fault, "--gpu", "0"],
        env=env(layout),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def decider(devcluster) -> Iterator[subprocess.Popen[str]]:  # type: ignore[no-untyped-def]
    """`slurm-triage decider` as SlurmUser on the socket the cluster's EpilogSlurmctld asks
    (config_files.hook_script exports it), as systemd would run it."""
    socket_path = devcluster.decider_socket
    process = subprocess.Popen(
        ["runuser", "-u", SLURM_USER, "--", f"{devcluster.bin_dir}/slurm-triage", "decider"],
        env={**env(devcluster), "SLURM_TRIAGE__DECIDER__SOCKET": str(socket_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: socket_path.exists() or process.poll() is not None, 30, "decider socket")
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert not socket_path.exists()


def _failed_job_on(layout: Any, door: Any) -> tuple[int, str]:
    """A one-node job whose GPU falls off the bus (XID 79) while it runs; then it fails."""
    markers = layout.jobs_dir / "markers"
    script = (
        'if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then exit 0; fi; '
        f"mkdir -p {markers}; touch {markers}/decider-$SLURM_JOB_ID; sleep 3; exit 1"
    )
    job_id = sbatch(layout, "--requeue", "-N1", "--wrap", script)
    wait_for(lambda: os.path.exists(markers / f"decider-{job_id}"), 60, "job started")
    node = door.job(job_id).nodes[0]
    _inject(layout, node, "xid=79")
    return job_id, node


def test_epilog_slurmctld_hands_the_job_end_to_the_decider(devcluster, door, decider) -> None:  # type: ignore[no-untyped-def]
    """The decider, not EpilogSlurmctld, decides the failed job: attributed to the node's
    GPU, requeued with it excluded and drained, as in-process; EpilogSlurmctld fell back
    for nothing."""
    job_id, node = _failed_job_on(devcluster, door)
    decision = decision_for(devcluster, job_id)
    assert (decision.cause, decision.action, decision.drained) == (
        "gpu_unavailable",
        "requeue",
        (node,),
    )
    # The journal row comes first, the decider's role_done line once decide() returned; the
    # node's Prolog and Epilog have role_done lines of the same job too.
    by_decider = wait_for(
        lambda: (
            [e for e in _events(devcluster, "role_done", job_id) if e.get("via") == "decider"]
            or None
        ),
        30,
        "the decider's role_done",
    )
    assert [(e["outcome"], e["cause"], e["action"]) for e in by_decider] == [
        ("decided", "gpu_unavailable", "requeue")
    ]
    assert by_decider[0]["program"] == "slurm-triage-decider"
    assert _events(devcluster, "epilog_slurmctld_decider_fallback", job_id) == []
    job = door.job(job_id)
    assert job.restart_count == 1 and node in job.excluded_nodes
    assert door.node(node).drained


def test_with_the_decider_stopped_epilog_slurmctld_decides_itself(devcluster, door) -> None:  # type: ignore[no-untyped-def]
    """No decider: EpilogSlurmctld finds no socket, says so at info, and decides in its
    own process, with the same decision."""
    assert not devcluster.decider_socket.exists()
    job_id, node = _failed_job_on(devcluster, door)
    decision = decision_for(devcluster, job_id)
    assert (decision.cause, decision.action) == ("gpu_unavailable", "requeue")
    fallback = wait_for(
        lambda: _events(devcluster, "epilog_slurmctld_decider_fallback", job_id) or None,
        30,
        "fallback line",
    )
    assert [(e["outcome"], e["level"]) for e in fallback] == [("not_running", "info")]
    assert [e for e in _events(devcluster, "role_done", job_id) if e.get("via")] == []
