"""The pyslurm door against the real dev cluster on Slurm 25.11 with the real pyslurm 25.11.

Each read is checked against the command-line door's reading of the same job or node, so
the two backends stay interchangeable; each write is read back through the command line.
Runs where pyslurm is importable and the dev cluster is the 25.11 one:

    SLURM_TRIAGE_DEVCLUSTER_SLURM=25.11 PYTHONPATH=/opt/slurm-25.11/python \\
        pytest -m integration tests/integration/test_pyslurm_door.py

Drains use node2 only (other suites drain node3 of the same cluster).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_triage.slurm import (
    BackendMismatch,
    InvalidJobState,
    JobInfo,
    JobNotFound,
    JobState,
    NodeNotFound,
    NotRequeueable,
    SlurmDoor,
    open_door,
)
from tests.integration.slurmtest import env, sbatch, scancel, scontrol, wait_for

pytestmark = [
    pytest.mark.integration,
    # Skipped without pyslurm, except in a session on the pyslurm backend: there its
    # absence fails (conftest installs it before collection).
    pytest.mark.skipif(
        importlib.util.find_spec("pyslurm") is None
        and os.environ.get("SLURM_TRIAGE_DEVCLUSTER_BACKEND") != "pyslurm",
        reason="pyslurm is not importable (PYTHONPATH=/opt/slurm-25.11/python after "
        "`pip install --target /opt/slurm-25.11/python <pyslurm 25.11 wheel>`)",
    ),
    pytest.mark.skipif(
        os.environ.get("SLURM_TRIAGE_DEVCLUSTER_SLURM") != "25.11",
        reason="pyslurm 25.11 drives only Slurm 25.11: SLURM_TRIAGE_DEVCLUSTER_SLURM=25.11",
    ),
]

NODE = "node2"  # the only node this file drains
# The record fields both doors must agree on (source differs by design).
SAME = [f.name for f in dataclasses.fields(JobInfo) if f.name != "source"]


@pytest.fixture(scope="module")
def door(devcluster) -> SlurmDoor:  # type: ignore[no-untyped-def]
    door = open_door(env=env(devcluster), timeout_s=15, backend="pyslurm")
    assert door.name == "pyslurm"
    return door


@pytest.fixture(scope="module")
def cli(devcluster) -> SlurmDoor:  # type: ignore[no-untyped-def]
    return open_door(env=env(devcluster), timeout_s=15, backend="cli")


def _differences(a: JobInfo, b: JobInfo) -> dict[str, tuple[object, object]]:
    left, right = dataclasses.asdict(a), dataclasses.asdict(b)
    return {k: (left[k], right[k]) for k in SAME if left[k] != right[k]}


def _in_state(door: SlurmDoor, job_id: int, state: JobState, timeout_s: float = 60) -> JobInfo:
    return wait_for(
        lambda: (j := door.job(job_id)).state is state and j, timeout_s, f"job {job_id} {state}"
    )


def _running_prolog_done(door: SlurmDoor, job_id: int) -> JobInfo:
    """The job once RUNNING with its Prolog done. With PrologFlags=Alloc a job is RUNNING
    with reason "Prolog" while its Prolog runs: compared then with a second read, that read
    can already see the reason gone (the CI saw it in test_expedited_requeue_flag)."""
    return wait_for(
        lambda: (
            (j := door.job(job_id)).state is JobState.RUNNING and j.state_reason != "Prolog" and j
        ),
        60,
        f"job {job_id} running, its Prolog done",
    )


def test_backend_and_version(door: SlurmDoor, cli: SlurmDoor) -> None:
    """backend = "pyslurm" gives the pyslurm door, and slurmctld's version is the clients'."""
    assert door.slurm_version().startswith("25.11.")
    assert door.slurm_version() == cli.slurm_version()


def test_running_job_reads_as_scontrol_does(door: SlurmDoor, cli: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """A running job: state, allocated nodes, the user's --exclude (a hostlist string in
    pyslurm), time limit, requeue flag, output paths and start time agree with scontrol."""
    job_id = sbatch(
        devcluster, "--requeue", "-N1", "--exclude=node3", "-t", "30", "--wrap", "sleep 60"
    )
    try:
        job = _running_prolog_done(door, job_id)
        assert job.source == "pyslurm"
        assert job.nodes and job.nodes[0] in ("node1", "node2")
        assert job.excluded_nodes == ("node3",)
        assert job.time_limit_min == 30
        assert job.requeue and job.batch and job.restart_count == 0
        assert job.std_out and job.std_err == job.std_out
        assert _differences(job, cli.job(job_id)) == {}
    finally:
        scancel(devcluster, job_id)


def test_pending_job_with_required_nodes(door: SlurmDoor, cli: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """A pending job has no nodes yet; its -w nodes and unlimited time limit read as with
    scontrol, and accounting already has it ("None assigned", "PartitionLimit")."""
    job_id = sbatch(devcluster, "-N1", "-w", "node1", "--begin=now+600", "--wrap", "true")
    try:
        job = door.job(job_id)
        assert job.state is JobState.PENDING
        assert job.nodes == () and job.required_nodes == ("node1",)
        assert job.time_limit_min is None
        assert _differences(job, cli.job(job_id)) == {}
        accounted = door.accounted_job(job_id)
        assert (accounted.state, accounted.nodes, accounted.time_limit_min) == (
            JobState.PENDING,
            (),
            None,
        )
        assert accounted.source == "pyslurm-db"
    finally:
        scancel(devcluster, job_id)


@pytest.mark.parametrize(
    ("script", "exit_status"),
    [("exit 3", (3, 0)), ("exit 137", (137, 0)), ("kill -9 $$", (0, 9))],
)
def test_exit_codes_are_exact(
    door: SlurmDoor,
    cli: SlurmDoor,
    devcluster,  # type: ignore[no-untyped-def]
    script: str,
    exit_status: tuple[int, int],
) -> None:
    """Exit codes as Slurm records them, from the controller and from accounting: 137 stays
    137 (pyslurm alone folds it to 9), a signal stays a signal."""
    job_id = sbatch(devcluster, "--no-requeue", "-N1", "--wrap", script)
    job = _in_state(door, job_id, JobState.FAILED)
    assert (job.exit_code, job.exit_signal) == exit_status
    assert _differences(job, cli.job(job_id)) == {}
    accounted = wait_for(
        lambda: (a := door.accounted_job(job_id)).state is JobState.FAILED and a,
        30,
        "the failure in accounting",
    )
    assert (accounted.exit_code, accounted.exit_signal) == exit_status
    assert _differences(accounted, cli.accounted_job(job_id)) == {}


def test_requeue_exclude_merge_and_begin_time(door: SlurmDoor, cli: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """Requeue, exclude the node it ran on (the user's --exclude kept), hold it back with a
    begin time, then let it go: it runs again on the other node, counted as a restart, and
    accounting counts the restart too."""
    job_id = sbatch(devcluster, "--requeue", "-N1", "--exclude=node3", "--wrap", "sleep 120")
    try:
        bad_node = _in_state(door, job_id, JobState.RUNNING).nodes[0]
        door.requeue(job_id)
        assert set(door.set_excluded_nodes(job_id, [bad_node])) == {"node3", bad_node}
        assert set(cli.job(job_id).excluded_nodes) == {"node3", bad_node}
        door.set_begin_time(job_id, 300)
        eligible = re.search(
            r"EligibleTime=(\S+)", scontrol(devcluster, "show", "job", str(job_id))
        )
        assert eligible is not None
        ahead_s = time.mktime(time.strptime(eligible.group(1), "%Y-%m-%dT%H:%M:%S")) - time.time()
        assert 240 < ahead_s <= 301
        door.set_begin_time(job_id, 0)
        second = _in_state(door, job_id, JobState.RUNNING, 90)
        (good_node,) = {"node1", "node2"} - {bad_node}
        assert second.nodes == (good_node,)
        assert second.restart_count == 1
        assert door.accounted_job(job_id).restart_count == 1
    finally:
        scancel(devcluster, job_id)


def test_expedited_requeue_flag(door: SlurmDoor, cli: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """`sbatch --requeue=expedite` (which pyslurm cannot show) reads as scontrol's
    ExpeditedRequeue=Yes; a plain --requeue job's flag is off."""
    expedited = sbatch(devcluster, "--requeue=expedite", "-N1", "--wrap", "sleep 60")
    plain = sbatch(devcluster, "--requeue", "-N1", "--wrap", "sleep 60")
    try:
        job = _running_prolog_done(door, expedited)
        if not cli.job(expedited).expedited_requeue:
            pytest.skip("the command-line door does not read ExpeditedRequeue= yet")
        assert job.expedited_requeue
        assert not door.job(plain).expedited_requeue
        assert _differences(job, cli.job(expedited)) == {}
    finally:
        scancel(devcluster, expedited)
        scancel(devcluster, plain)


def test_requeue_held_then_release(door: SlurmDoor, cli: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """requeue(hold=True) leaves the job held with scontrol's reason; release lets it run."""
    job_id = sbatch(devcluster, "--requeue", "-N1", "--exclude=node3", "--wrap", "sleep 120")
    try:
        _in_state(door, job_id, JobState.RUNNING)
        door.requeue(job_id, hold=True)
        held = _in_state(door, job_id, JobState.PENDING, 30)
        assert held.state_reason in ("job_requeued_in_held_state", "JobHeldAdmin")
        assert _differences(held, cli.job(job_id)) == {}
        door.release(job_id)
        assert _in_state(door, job_id, JobState.RUNNING, 90).restart_count == 1
    finally:
        scancel(devcluster, job_id)


def test_cancel(door: SlurmDoor, cli: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """cancel ends a pending job; cancelling it again, or an unknown job, is no error in
    either door, as real scancel exits 0 for both (SIGKILL: scancel.c _cancel_job_id)."""
    job_id = sbatch(devcluster, "-N1", "--begin=now+600", "--wrap", "true")
    door.cancel(job_id)
    _in_state(door, job_id, JobState.CANCELLED, 30)
    door.cancel(job_id)
    cli.cancel(job_id)
    cli.cancel(999_999)
    door.cancel(999_999)


def test_requeue_refused_for_no_requeue_job(door: SlurmDoor, devcluster) -> None:  # type: ignore[no-untyped-def]
    """A --no-requeue job cannot be requeued, and the door says so with its own error."""
    job_id = sbatch(devcluster, "--no-requeue", "-N1", "--wrap", "exit 1")
    _in_state(door, job_id, JobState.FAILED, 30)
    with pytest.raises(NotRequeueable):
        door.requeue(job_id)


def test_admin_comment_through_controller_and_accounting(
    door: SlurmDoor, cli: SlurmDoor, devcluster
) -> None:  # type: ignore[no-untyped-def]
    """AdminComment written through pyslurm reads back from scontrol and from accounting;
    "" clears it; a finished job's is refused, as with scontrol."""
    summary = json.dumps({"triage": {"cause": "gpu_unavailable", "nodes": ["node2"], "n": 1}})
    job_id = sbatch(devcluster, "-N1", "--wrap", "sleep 3")
    _in_state(door, job_id, JobState.RUNNING)
    door.set_admin_comment(job_id, "to be cleared")
    door.set_admin_comment(job_id, "")
    assert cli.job(job_id).admin_comment == ""
    door.set_admin_comment(job_id, summary)
    assert json.loads(cli.job(job_id).admin_comment) == json.loads(summary)
    _in_state(door, job_id, JobState.COMPLETED, 30)
    with pytest.raises(InvalidJobState):
        door.set_admin_comment(job_id, "{}")
    accounted = wait_for(
        lambda: (a := door.accounted_job(job_id)).admin_comment and a, 30, "AdminComment"
    )
    assert json.loads(accounted.admin_comment) == json.loads(summary)
    assert _differences(accounted, cli.accounted_job(job_id)) == {}


def test_drain_comment_and_resume_node(door: SlurmDoor, cli: SlurmDoor) -> None:
    """Drain with our reason (one line, as the command line writes it), set and clear the
    node's comment, resume: each step reads back the same through scontrol."""
    try:
        door.drain(NODE, "triage: gpu.lost GPU3\n00000000:3B:00.0")
        node = door.node(NODE)
        assert node.drained and node.reason == "triage: gpu.lost GPU3 00000000:3B:00.0"
        assert node.reason_user == "root" and node.reason_time
        assert node == cli.node(NODE)
        door.set_node_comment(NODE, "triage-failing gpu.lost")
        assert cli.node(NODE).comment == "triage-failing gpu.lost"
        door.set_node_comment(NODE, "")
        assert cli.node(NODE).comment == ""
    finally:
        door.resume(NODE)
    node = door.node(NODE)
    assert not node.drained and node.reason == ""
    assert [n.name for n in door.nodes()] == ["node1", "node2", "node3"]


def test_node_events_read_as_sacctmgr_does(door: SlurmDoor, cli: SlurmDoor) -> None:
    """Issue 18: the pyslurm door's node events are the command line's (sacctmgr), a drain
    among them once slurmdbd has it."""
    from datetime import datetime, timedelta

    since = datetime.now().replace(microsecond=0) - timedelta(seconds=5)
    try:
        door.drain(NODE, "triage: gpu_memory job=0: issue 18")
        wait_for(
            lambda: any(e.node == NODE for e in door.node_events(since).events),
            30,
            f"a node event of {NODE}",
        )
    finally:
        door.resume(NODE)
    wait_for(
        lambda: all(e.end for e in door.node_events(since).events if e.node == NODE),
        30,
        f"{NODE}'s event closed",
    )
    assert door.node_events(since) == cli.node_events(since)


def test_unknown_job_and_node_are_clear_errors(door: SlurmDoor) -> None:
    """Reads and writes of a job or node that does not exist raise the door's own classes
    (a job unknown to slurmctld is looked up in accounting first)."""
    with pytest.raises(JobNotFound, match="not known to slurmctld or accounting"):
        door.job(999_999)
    with pytest.raises(JobNotFound):
        door.requeue(999_999)
    with pytest.raises(JobNotFound):
        door.set_excluded_nodes(999_999, ["node1"])
    with pytest.raises(NodeNotFound):
        door.node("node99")
    with pytest.raises(NodeNotFound):
        door.drain("node99", "triage: test")


def test_a_second_slurm_conf_in_one_process_is_refused(
    door: SlurmDoor, devcluster, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """libslurm reads its configuration once per process: a door naming another slurm.conf
    cannot use pyslurm (a clear error; auto takes the command line)."""
    other = tmp_path / "slurm.conf"
    shutil.copy(env(devcluster)["SLURM_CONF"], other)
    elsewhere = {**env(devcluster), "SLURM_CONF": str(other)}
    with pytest.raises(BackendMismatch, match="once per process"):
        open_door(env=elsewhere, backend="pyslurm")
    assert open_door(env=elsewhere).name == "cli"
    assert open_door(env=env(devcluster)).name == "pyslurm"


def _cli_run(devcluster, *argv: str, **changes: str | None) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    run_env = {**env(devcluster), **{k: v for k, v in changes.items() if v is not None}}
    for key in [k for k, v in changes.items() if v is None]:
        run_env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "slurm_triage", *argv],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_command_line_through_pyslurm(devcluster) -> None:  # type: ignore[no-untyped-def]
    """`slurm-triage slurm --backend pyslurm job N` prints the job; errors are one line with
    exit status 3, never a traceback, including an unknown job and an unreadable slurm.conf."""
    job_id = sbatch(devcluster, "-N1", "--begin=now+600", "--exclude=node3", "--wrap", "true")
    try:
        shown = _cli_run(devcluster, "slurm", "--backend", "pyslurm", "job", str(job_id))
        assert shown.returncode == 0, shown.stderr
        assert re.search(r"excluded: node3\n", shown.stdout)
        assert re.search(r"source: pyslurm\n", shown.stdout)
    finally:
        scancel(devcluster, job_id)
    for argv, changes in [
        (("job", "999999"), {}),
        (("nodes",), {"SLURM_CONF": "/nonexistent/slurm.conf"}),
    ]:
        failed = _cli_run(devcluster, "slurm", "--backend", "pyslurm", *argv, **changes)
        assert failed.returncode == 3, failed.stderr
        assert "Traceback" not in failed.stderr
        assert failed.stderr.startswith("slurm-triage: error: ")
        assert len(failed.stderr.strip().splitlines()) == 1


def test_auto_without_slurm_conf_does_not_end_the_process(devcluster) -> None:  # type: ignore[no-untyped-def]
    """No SLURM_CONF and no default slurm.conf: libslurm would end the process with exit 1
    (`fatal: Could not establish a configuration source`); auto probes pyslurm in a child,
    takes the command line, and the command ends as a Slurm failure (exit 3) on one line."""
    failed = _cli_run(devcluster, "slurm", "nodes", SLURM_CONF=None)
    assert failed.returncode == 3, (failed.returncode, failed.stderr)
    assert "Traceback" not in failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith("slurm-triage: error: ")
