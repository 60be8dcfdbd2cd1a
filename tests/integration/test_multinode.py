"""Multi-node endings under the wrapper on the real local cluster (issue 11).

The commonest end of a large job: one rank dies on a node that is not the batch host,
`srun --kill-on-bad-exit=1` ends the others, and slurmstepd prints its step-cancel banner
into the job log. The decision must follow the rank that failed first: a NCCL watchdog
timeout is requeued; a KeyError or a CUDA OOM is the user's and is not.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from slurm_triage.slurm import JobState, SlurmDoor, open_door
from tests.integration.slurmtest import decision_for, env, sbatch, wait_for

pytestmark = pytest.mark.integration

# The dev cluster's runtime interpreter: first on the job's PATH (sbatch passes the
# submitter's environment); the test's own may sit where the job user cannot reach.
PY = "python3"
RESUMES = 'if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then echo resumed; exit 0; fi\n'
# Rank 1 fails as PyTorch does; rank 0 would run on and is ended by srun.
NCCL_TIMEOUT = (
    "import os, sys, time\n"
    "if os.environ['SLURM_PROCID'] == '1':\n"
    "    time.sleep(1)\n"
    "    w = 'Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48213, "
    "OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600076 "
    "milliseconds before timing out.'\n"
    "    stamp = time.strftime('%m%d %H:%M:%S')\n"
    "    print(f'[rank1]:[E{stamp}.000000660 ProcessGroupNCCL.cpp:616] [Rank 1] {w}', "
    "file=sys.stderr, flush=True)\n"
    "    print(\"terminate called after throwing an instance of 'c10::DistBackendError'\", "
    "file=sys.stderr, flush=True)\n"
    "    os.abort()\n"
    "time.sleep(120)\n"
)
KEY_ERROR = (
    "import os, time\n"
    "if os.environ['SLURM_PROCID'] == '1':\n"
    "    time.sleep(1)\n"
    "    cfg = {}\n"
    "    cfg['lr']\n"
    "time.sleep(120)\n"
)
CUDA_OOM = (
    "import os, time\n"
    "class OutOfMemoryError(RuntimeError):\n"
    "    pass\n"
    "OutOfMemoryError.__module__ = 'torch'\n"
    "if os.environ['SLURM_PROCID'] == '1':\n"
    "    time.sleep(1)\n"
    "    raise OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.10 GiB of which 1.06 GiB is free.')\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def door(devcluster) -> SlurmDoor:  # type: ignore[no-untyped-def]
    return open_door(env=env(devcluster), timeout_s=15, backend=devcluster.backend)


def _two_node_job(devcluster, job_dir: Path, program: str) -> int:  # type: ignore[no-untyped-def]
    (job_dir / "rank.py").write_text(program)
    script = job_dir / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        + RESUMES
        + f"srun --kill-on-bad-exit=1 slurm-triage wrap -- {PY} {job_dir}/rank.py\n"
    )
    return sbatch(
        devcluster,
        "--requeue",
        "-N2",
        "--ntasks-per-node=1",
        f"--output={job_dir}/job.out",
        "--open-mode=append",  # a requeued run keeps the first run's log
        str(script),
        workdir=str(job_dir),
    )


def _ended_run(door: SlurmDoor, devcluster, job_id: int, job_dir: Path):  # type: ignore[no-untyped-def]
    decision = decision_for(devcluster, job_id, 0, timeout=120)
    out = (job_dir / "job.out").read_text()
    return decision, out


def _rank1_off_the_batch_host(door: SlurmDoor, job_id: int, out: str) -> str:
    """The failing rank ran on the second node, not where the batch script (and srun) ran."""
    job = door.job(job_id)
    line = next(ln for ln in out.splitlines() if ": task 1: " in ln and "srun: error:" in ln)
    node = line.split("srun: error: ", 1)[1].split(":", 1)[0]
    assert node != job.batch_host, out
    return node


def _classify(devcluster, log: Path) -> dict:  # type: ignore[no-untyped-def,type-arg]
    done = subprocess.run(
        ["slurm-triage", "classify", "--state", "FAILED", "--exit-code", "1", "--log", str(log)]
        + ["--json"],
        env=env(devcluster),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_nccl_timeout_on_rank1_is_requeued(devcluster, door, job_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """Rank 1 (node2) times out in NCCL and aborts; srun ends rank 0 and slurmstepd prints
    its step-cancel banner. nccl_timeout, requeued (no node to blame), and the run after the
    requeue completes."""
    job_id = _two_node_job(devcluster, job_dir, NCCL_TIMEOUT)
    decision, out = _ended_run(door, devcluster, job_id, job_dir)
    assert "CANCELLED AT" in out, out  # the banner that used to win is there
    _rank1_off_the_batch_host(door, job_id, out)
    assert (decision.cause, decision.action, decision.blamed) == ("nccl_timeout", "requeue", ())
    assert "rank 0: collateral: task 1 on" in out, out
    done = wait_for(
        lambda: (j := door.job(job_id)).state is JobState.COMPLETED and j, 120, "requeued run"
    )
    assert done.restart_count == 1
    assert _classify(devcluster, job_dir / "job.out")["cause"] == "nccl_timeout"


@pytest.mark.parametrize(
    ("program", "cause"),
    [(KEY_ERROR, "user_code"), (CUDA_OOM, "cuda_oom")],
    ids=["keyerror", "oom"],
)
def test_user_error_on_rank1_is_not_requeued(  # type: ignore[no-untyped-def]
    devcluster, door, job_dir: Path, program: str, cause: str
) -> None:
    """Rank 1 (node2) fails with the user's own error; rank 0 is collateral. The job keeps
    the user's cause, is not requeued, and `classify` on its log says the same."""
    job_id = _two_node_job(devcluster, job_dir, program)
    decision, out = _ended_run(door, devcluster, job_id, job_dir)
    assert "CANCELLED AT" in out, out
    node = _rank1_off_the_batch_host(door, job_id, out)
    assert (decision.cause, decision.action) == (cause, "record_only"), out
    assert decision.drained == () and decision.excluded == ()
    job = wait_for(lambda: (j := door.job(job_id)).state.finished and j, 30, "job final")
    assert job.state is JobState.FAILED and job.restart_count == 0
    assert f"rank 0: collateral: task 1 on {node} failed first ({cause})" in out, out
    result = _classify(devcluster, job_dir / "job.out")
    assert (result["cause"], result["nodes"]) == (cause, [node]), result
