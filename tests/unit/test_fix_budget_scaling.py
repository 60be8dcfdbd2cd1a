"""The user-record budget scales with the job's size: a 512x8-rank job's records (one
rank's CUDA OOM, every other rank ended by NCCL's watchdog, about 5 facts each: 20,480
facts) count in full, while a hostile job on few nodes is still cut, the job's output is
still scanned, and what was cut is said in the decision's reason."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config, DecisionConfig, PathsConfig, SlurmConfig
from slurm_triage.evidence import EvidenceRecord, ProcessExit, Source, record_to_json, store
from slurm_triage.journal import Journal
from slurm_triage.policies import Verdict
from slurm_triage.prolog_epilog.decide import Outcome, decide
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm import JobState
from slurm_triage.testing import FakeDoor, job_info, node_infos
from slurm_triage.wrapper.identity import StepIdentity
from slurm_triage.wrapper.record import RunOutcome, build_facts, build_record, encode_record
from slurm_triage.wrapper.supervise import ChildExit
from tests.unit.conftest import JOB_USER

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chowning the user's files needs root")

JOB = 77
RANKS_PER_NODE = 8
OOM_RANK = 4093  # on the last node: read last, so no partial read can find it
# The end of every surviving rank: NCCL's watchdog takes the process down (about 5 facts).
NCCL_END = (
    b"[rank5]:[E1121 10:00:05.123456 123 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught "
    b"collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, "
    b"NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
    b"[rank5]:[E1121 10:00:05.123456 123 ProcessGroupNCCL.cpp:1785] [PG 0 (default_pg) Rank 5] "
    b"Exception (either an error or timeout) detected by watchdog at work: 1234, last enqueued "
    b"NCCL work: 1234, last completed NCCL work: 1233.\n"
    b"[rank5]:[E1121 10:00:05.123456 123 ProcessGroupNCCL.cpp:630] [Rank 5] Some NCCL "
    b"operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
    b"subsequent GPU operations might run on corrupted/incomplete data.\n"
    b"[rank5]:[E1121 10:00:05.123456 123 ProcessGroupNCCL.cpp:636] [Rank 5] To avoid data "
    b"inconsistency, we are taking the entire process down.\n"
    b"terminate called after throwing an instance of 'c10::DistBackendError'\n"
    b"  what():  [PG 0 (default_pg) Rank 5] Process group watchdog thread terminated with "
    b"exception: [Rank 5] Watchdog caught collective operation timeout\n"
    b"node7:12345:12399 [5] NCCL INFO [Service thread] Connection closed by localRank 3\n"
    b"node7:12345:12399 [5] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from "
    b"peer 10.0.0.3<33333> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
    b"::ffff:10.0.0.7 remoteGid ::ffff:10.0.0.3\n"
)
CUDA_OOM = (
    b"Traceback (most recent call last):\n"
    b'  File "train.py", line 10, in <module>\n'
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
    b"total capacity of 79.10 GiB of which 1.02 GiB is free.\n"
)


def _nodes(count: int) -> tuple[str, ...]:
    return tuple(f"gpu{n:04d}" for n in range(count))


def _user_dir(evidence: Path) -> Path:
    job_dir = evidence / str(JOB)
    job_dir.mkdir(exist_ok=True)
    os.chown(job_dir, JOB_USER, JOB_USER)
    return job_dir


def _write(job_dir: Path, name: str, data: bytes) -> None:
    path = job_dir / name
    path.write_bytes(data)
    os.chown(path, JOB_USER, JOB_USER)


def _wrapped_ranks(evidence: Path, nodes: tuple[str, ...]) -> None:
    """What `srun slurm-triage wrap -- python train.py` leaves: one record per rank, built
    by the wrapper's own functions; rank OOM_RANK ran out of GPU memory 30 s before the
    others' NCCL watchdogs took them down (SIGABRT)."""
    job_dir, now = _user_dir(evidence), time.time()
    for n, node in enumerate(nodes):
        for task in range(RANKS_PER_NODE):
            rank = n * RANKS_PER_NODE + task
            ident = StepIdentity(
                job_id=str(JOB),
                node=node,
                step="0",
                task=str(task),
                rank=rank,
                tasks_on_node=RANKS_PER_NODE,
            )
            if rank == OOM_RANK:
                child, tail, ended = ChildExit(1, None, False), CUDA_OOM, now - 30
            else:
                child, tail, ended = ChildExit(None, 6, True), NCCL_END, now
            outcome = RunOutcome(ident, child, 3600.0, ended, ((b"", True), (tail, True)))
            record = encode_record(build_record(ident, build_facts(outcome)))
            _write(job_dir, ident.record_name, record)


def _huge_records(evidence: Path, node: str, count: int, facts: int = 900) -> None:
    """A hostile user's records: many, each near the per-record fact cap."""
    job_dir = _user_dir(evidence)
    for task in range(count):
        body = EvidenceRecord(
            str(JOB),
            node,
            "0",
            Source.USER,
            tuple(ProcessExit(node=node, exit_code=1) for _ in range(facts)),
        )
        _write(job_dir, f"{node}.0.{task}.json", record_to_json(body))


def _decide(tmp_path: Path, nodes: tuple[str, ...], output: bytes = b"") -> Outcome:
    """The job's run on `nodes` fails with exit code 1 and the decision runs, as
    EpilogSlurmctld would run it."""
    evidence = tmp_path / "evidence"
    config = Config(
        paths=PathsConfig(evidence_dir=str(evidence), state_dir=str(tmp_path / "state")),
        decision=DecisionConfig(journal=str(tmp_path / "journal.sqlite"), wait_for_nodes_s=0),
        slurm=SlurmConfig(bin_dir=str(tmp_path / "no-slurm-here")),
    )
    job = job_info(JOB, nodes=nodes, num_nodes=len(nodes), start_time=time.time() - 3600)
    if output:
        _write(tmp_path, "slurm-77.out", output)
        job = replace(job, std_out=str(tmp_path / "slurm-77.out"))
    door = FakeDoor([replace(job, state=JobState.RUNNING)], node_infos(4))
    door.end_job(JOB, "FAILED", exit_code=1)
    end = JobEnd(
        job_id=JOB, restart=0, nodes=nodes, uid=JOB_USER, exit_code=1, ended_at=time.time()
    )
    return decide(config, end, door, Journal(config.decision.journal), {})


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    path = tmp_path / "evidence"
    path.mkdir()
    os.chmod(path, 0o1777)  # as installed: shared, sticky
    return path


def test_a_4096_rank_job_whose_one_rank_ran_out_of_gpu_memory_is_the_users_error(
    tmp_path: Path, evidence: Path
) -> None:
    """512 nodes x 8 ranks, about 20,480 facts: every record counts, so the one rank's CUDA
    OOM (a user bug) is the cause and the 4,096-GPU job is not requeued."""
    nodes = _nodes(512)
    _wrapped_ranks(evidence, nodes)
    outcome = _decide(tmp_path, nodes)
    assert outcome.attribution is not None and outcome.decision is not None
    assert outcome.attribution.cause.value == "cuda_oom", outcome.attribution.reason
    assert "ignored" not in outcome.attribution.reason
    assert outcome.decision.verdict is not Verdict.REQUEUE


def test_records_of_8192_ranks_are_all_read(evidence: Path) -> None:
    """1,024 nodes x 8 ranks: past the old 4,096 records per job (which kept only the
    alphabetically first names, silently), every rank's record is read."""
    nodes = _nodes(1024)
    job_dir = _user_dir(evidence)
    for node in nodes:
        for task in range(RANKS_PER_NODE):
            body = EvidenceRecord(str(JOB), node, "0", Source.USER, (ProcessExit(node=node),))
            _write(job_dir, f"{node}.0.{task}.json", record_to_json(body))
    budget = store.RecordBudget.for_job(len(nodes), deadline=time.monotonic() + 60)
    result = store.read_user_records(str(evidence), JOB, JOB_USER, nodes=nodes, budget=budget)
    assert len(result.records) == 8192 and result.over_budget == ""
    assert result.records[-1].node == nodes[-1]


def test_records_cut_at_the_per_job_cap_are_said(evidence: Path) -> None:
    """Past the job's record cap reading stops, and over_budget says so (not only a log
    line), so the decision's reason does too."""
    job_dir = _user_dir(evidence)
    for task in range(6):
        body = EvidenceRecord(str(JOB), "gpu0000", "0", Source.USER, (ProcessExit(),))
        _write(job_dir, f"gpu0000.0.{task}.json", record_to_json(body))
    budget = store.RecordBudget(max_records=4)
    result = store.read_user_records(str(evidence), JOB, JOB_USER, budget=budget)
    assert len(result.records) == 4 and "more than 4 records" in result.over_budget


def test_a_hostile_job_on_few_nodes_is_still_cut(evidence: Path) -> None:
    """Two nodes, 30 records of 900 facts on one: the budget is the base plus two nodes'
    allowance, so reading stops well before 27,000 facts."""
    nodes = _nodes(2)
    _huge_records(evidence, nodes[0], 30)
    budget = store.RecordBudget.for_job(len(nodes), deadline=time.monotonic() + 60)
    result = store.read_user_records(str(evidence), JOB, JOB_USER, nodes=nodes, budget=budget)
    assert "facts" in result.over_budget
    assert sum(len(r.facts) for r in result.records) <= budget.max_facts + 900


def test_over_budget_the_job_output_is_still_scanned_and_the_cut_is_said(
    tmp_path: Path, evidence: Path
) -> None:
    """The hostile records count for nothing, but the job's output (its own bounds) still
    names the CUDA OOM, and the decision's reason says which records were ignored."""
    nodes = _nodes(2)
    _huge_records(evidence, nodes[0], 30)
    outcome = _decide(tmp_path, nodes, output=b"step 100\n" + CUDA_OOM)
    assert outcome.attribution is not None
    assert outcome.attribution.cause.value == "cuda_oom", outcome.attribution.reason
    assert "user records ignored (more than" in outcome.attribution.reason
    assert "facts in records" in outcome.attribution.reason
