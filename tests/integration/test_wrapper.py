"""The job wrapper under real srun steps on the local cluster: one record per node or task,
and Slurm's signals reaching the trainer through it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm_triage.evidence import EvidenceRecord, ProcessExit, Source, parse_record
from slurm_triage.slurm import JobState, SlurmDoor, open_door
from tests.integration.slurmtest import env, sbatch, wait_for

pytestmark = pytest.mark.integration

# The dev cluster's runtime interpreter: first on the job's PATH (sbatch passes the
# submitter's environment); the test's own may sit where the job user cannot reach.
PY = "python3"
# Jobs may queue behind other tests' jobs or wait for a node another test drained.
START_TIMEOUT_S = 240
ENDED = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
         JobState.NODE_FAIL, JobState.OUT_OF_MEMORY}  # fmt: skip


@pytest.fixture
def door(devcluster) -> SlurmDoor:  # type: ignore[no-untyped-def]
    return open_door(env=env(devcluster), timeout_s=15, backend=devcluster.backend)


def _submit(devcluster, job_dir: Path, script: str, *options: str) -> int:  # type: ignore[no-untyped-def]
    path = job_dir / "job.sh"
    path.write_text("#!/bin/bash\nset -e\n" + script + "\n")
    # --no-requeue: if another test's fault makes a prolog fail, fail fast instead of hanging.
    return sbatch(
        devcluster, "--no-requeue", f"--output={job_dir}/job.out", *options, str(path),
        workdir=str(job_dir),
    )  # fmt: skip


def _ended(door: SlurmDoor, job_id: int) -> JobState:
    return wait_for(
        lambda: (state := door.job(job_id).state) in ENDED and state,
        START_TIMEOUT_S,
        f"job {job_id} to end",
    )


def _why(door: SlurmDoor, job_id: int, job_dir: Path) -> str:
    """What to show when a job did not end as expected: its state, reason and output."""
    job = door.job(job_id)
    out = job_dir / "job.out"
    text = out.read_text() if out.exists() else "(the job wrote no output: it never ran)"
    return f"job {job_id} {job.state_text or job.state.value} ({job.state_reason}):\n{text}"


def _records(devcluster, job_id: int) -> dict[str, EvidenceRecord]:  # type: ignore[no-untyped-def]
    job_dir = devcluster.evidence_dir / str(job_id)
    return {
        p.name: parse_record(p.read_bytes(), trusted_source=Source.USER)
        for p in sorted(job_dir.glob("*.json"))
        if not p.name.startswith(".")
    }


def _exit(record: EvidenceRecord) -> ProcessExit:
    (fact,) = [f for f in record.facts if isinstance(f, ProcessExit)]
    return fact


def test_three_node_step_leaves_three_records(devcluster, door, job_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """`srun -N3 --ntasks-per-node=1 slurm-triage wrap -- python ...` writes one parseable
    record per node, named <node>.<step>.json, each with that node's exit."""
    job_id = _submit(
        devcluster,
        job_dir,
        f"srun -N3 --ntasks-per-node=1 slurm-triage wrap -- {PY} -c "
        "\"import os; print('rank', os.environ['SLURM_PROCID'], 'on', "
        "os.environ['SLURMD_NODENAME'])\"",
        "-N3",
        "--ntasks-per-node=1",
    )
    assert _ended(door, job_id) is JobState.COMPLETED, _why(door, job_id, job_dir)
    records = _records(devcluster, job_id)
    assert sorted(records) == ["node1.0.json", "node2.0.json", "node3.0.json"]
    for name, record in records.items():
        assert (record.job_id, record.step, record.collected_by) == (str(job_id), "0", Source.USER)
        assert record.node == name.split(".")[0]
        assert _exit(record).exit_code == 0
    out = (job_dir / "job.out").read_text()
    assert sorted(line.split()[1] for line in out.splitlines() if line.startswith("rank")) == [
        "0",
        "1",
        "2",
    ]


def test_tasks_sharing_a_node_are_named_by_task_id(devcluster, door, job_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """With --ntasks-per-node=2 each task's record carries its task id, and a failing rank's
    record has its own exit code."""
    job_id = _submit(
        devcluster,
        job_dir,
        f"srun --ntasks-per-node=2 slurm-triage wrap -- {PY} -c "
        "\"import os,sys; sys.exit(3 if os.environ['SLURM_PROCID'] == '1' else 0)\"",
        "-N1",
        "--ntasks-per-node=2",
    )
    assert _ended(door, job_id) is JobState.FAILED, _why(door, job_id, job_dir)
    records = _records(devcluster, job_id)
    assert len(records) == 2, sorted(records)
    node = next(iter(records.values())).node
    assert sorted(records) == [f"{node}.0.0.json", f"{node}.0.1.json"]
    assert _exit(records[f"{node}.0.0.json"]).exit_code == 0
    assert _exit(records[f"{node}.0.1.json"]).exit_code == 3
    assert "slurm-triage: job" in (job_dir / "job.out").read_text()  # rank 1's summary


@pytest.mark.parametrize("launch", ["srun", "srun bash -c"])
def test_scancel_signal_reaches_the_trainer_once(  # type: ignore[no-untyped-def]
    devcluster, door, job_dir: Path, launch: str
) -> None:
    """`scancel --signal=USR1` (what --signal=USR1@120 does before the time limit) reaches
    the trainer on every node exactly once, whether srun runs the wrapper or a shell does."""
    trainer = (
        "import os,signal,sys,time\n"
        "d = sys.argv[1]; r = os.environ['SLURM_PROCID']\n"
        "got = []\n"
        "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
        "open(f'{d}/ready.{r}', 'w').close()\n"
        "deadline = time.monotonic() + 60\n"
        "while not got and time.monotonic() < deadline: time.sleep(0.05)\n"
        "time.sleep(1)  # a duplicate would arrive within this second\n"
        "open(f'{d}/got.{r}', 'w').write(str(len(got)))\n"
    )
    (job_dir / "trainer.py").write_text(trainer)
    command = f"slurm-triage wrap -- {PY} {job_dir}/trainer.py {job_dir}"
    if launch != "srun":
        command = f"bash -c '{command}'"
    job_id = _submit(
        devcluster, job_dir, f"srun -N2 --ntasks-per-node=1 {command}", "-N2",
        "--ntasks-per-node=1",
    )  # fmt: skip
    wait_for(lambda: len(list(job_dir.glob("ready.*"))) == 2, START_TIMEOUT_S, "both ranks started")
    subprocess.run(
        ["scancel", "--signal=USR1", str(job_id)],
        env=env(devcluster),
        check=True,
        timeout=30,
        capture_output=True,
    )
    assert _ended(door, job_id) is JobState.COMPLETED, _why(door, job_id, job_dir)
    assert {p.name: p.read_text() for p in job_dir.glob("got.*")} == {"got.0": "1", "got.1": "1"}
    assert all(_exit(r).exit_code == 0 for r in _records(devcluster, job_id).values())


def test_batch_shell_relays_usr1_through_srun(devcluster, door, job_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """The README's `--signal=B:USR1` pattern: the batch shell traps USR1 and passes it to
    srun, which has it delivered to the tasks; the trainer gets it exactly once."""
    trainer = (
        "import os,signal,sys,time\n"
        "d = sys.argv[1]\n"
        "got = []\n"
        "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
        "open(f'{d}/ready', 'w').close()\n"
        "deadline = time.monotonic() + 60\n"
        "while not got and time.monotonic() < deadline: time.sleep(0.05)\n"
        "time.sleep(1)  # a duplicate would arrive within this second\n"
        "open(f'{d}/count', 'w').write(str(len(got)))\n"
    )
    (job_dir / "trainer.py").write_text(trainer)
    job_id = _submit(
        devcluster,
        job_dir,
        f"srun slurm-triage wrap -- {PY} {job_dir}/trainer.py {job_dir} &\n"
        "pid=$!\n"
        "trap 'kill -USR1 $pid' USR1\n"
        "wait $pid || wait $pid\n",
        "-N1",
    )
    wait_for(lambda: (job_dir / "ready").exists(), START_TIMEOUT_S, "the trainer started")
    subprocess.run(
        ["scancel", "--batch", "--signal=USR1", str(job_id)],
        env=env(devcluster),
        check=True,
        timeout=30,
        capture_output=True,
    )
    assert _ended(door, job_id) is JobState.COMPLETED, _why(door, job_id, job_dir)
    assert (job_dir / "count").read_text() == "1"
