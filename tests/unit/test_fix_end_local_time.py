"""The decision reads the job's output as `classify` does: naive times (Python logging, glog,
slurmstepd's `CANCELLED AT`) are the cluster's local time, the controller's zone."""

from __future__ import annotations

import calendar
import datetime
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.clock import Clock
from slurm_triage.config import Config, DecisionConfig, PathsConfig, PolicyConfig, SlurmConfig
from slurm_triage.evidence import RootException
from slurm_triage.journal import Journal
from slurm_triage.prolog_epilog.decide import Outcome, decide
from slurm_triage.prolog_epilog.gather import output_facts
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm import JobState
from slurm_triage.testing import FakeDoor, job_info, node_infos

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the job's output is chowned")

USER = 4242
JOB = 7
# Central time as a POSIX rule (no tzdata needed): UTC-6 in November.
CHICAGO = "CST6CDT,M3.2.0,M11.1.0"


@pytest.fixture
def chicago(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The controller's zone is America/Chicago for the test, restored after it."""
    monkeypatch.setenv("TZ", CHICAGO)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def job_output(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "slurm-7.out"
    path.write_text("\n".join(lines) + "\n")
    os.chown(path, USER, USER)
    return str(path)


def local(seconds_ago: float, fmt: str) -> str:
    return datetime.datetime.fromtimestamp(time.time() - seconds_ago).strftime(fmt)


def test_a_logging_time_is_read_in_the_local_zone(chicago: None, tmp_path: Path) -> None:
    """`05:42:15,123` written by Python's logging in Chicago is 11:42:15.123 UTC."""
    path = job_output(
        tmp_path,
        [
            "2026-11-24 05:42:15,123 - ERROR - train - batch 400 failed",
            "Traceback (most recent call last):",
            '  File "/home/ana/train.py", line 188, in main',
            "KeyError: '<|im_sep|>'",
        ],
    )
    job = job_info(JOB, nodes=("node1",), num_nodes=1, batch_host="node1", std_out=path)
    at = float(calendar.timegm((2026, 11, 24, 12, 0, 0)))
    facts, _ = output_facts(job, USER, time.monotonic() + 30, Clock(time=lambda: at))
    (root,) = [f for f in facts if isinstance(f, RootException)]
    assert root.time == pytest.approx(calendar.timegm((2026, 11, 24, 11, 42, 15)) + 0.123, abs=1e-3)


class Run:
    """One job on a fake cluster, decided as EpilogSlurmctld decides it."""

    def __init__(self, tmp_path: Path, nodes: tuple[str, ...], lines: list[str]) -> None:
        evidence = tmp_path / "evidence"
        evidence.mkdir()
        os.chmod(evidence, 0o1777)
        self.config = Config(
            paths=PathsConfig(evidence_dir=str(evidence), state_dir=str(tmp_path / "state")),
            decision=DecisionConfig(journal=str(tmp_path / "journal.sqlite"), wait_for_nodes_s=0),
            policy=PolicyConfig(),
            slurm=SlurmConfig(bin_dir=str(tmp_path / "no-slurm-here")),
        )
        self.nodes = nodes
        job = job_info(
            JOB,
            nodes=nodes,
            num_nodes=len(nodes),
            batch_host=nodes[0],
            std_out=job_output(tmp_path, lines),
        )
        self.door = FakeDoor([job], node_infos(len(nodes) + 4, prefix="node"))
        self.door.jobs[JOB] = replace(job, state=JobState.RUNNING, start_time=time.time() - 3600)
        self.journal = Journal(self.config.decision.journal)

    def end(self, state: str, *, exit_code: int, signal: int) -> Outcome:
        self.door.end_job(JOB, state, exit_code=exit_code, signal=signal)
        ending = JobEnd(
            job_id=JOB,
            restart=0,
            nodes=self.nodes,
            uid=USER,
            exit_code=exit_code,
            exit_signal=signal,
            ended_at=time.time(),
        )
        return decide(self.config, ending, self.door, self.journal, {})


def test_a_users_traceback_with_a_local_time_is_the_users_bug(
    chicago: None, tmp_path: Path
) -> None:
    """A KeyError 30 s before the end, logged in Chicago time, is in the job's window: the
    user's bug, recorded only (read as UTC it fell 6 h out: unknown, requeued)."""
    lines = [
        f"{local(30, '%Y-%m-%d %H:%M:%S,123')} - ERROR - train - batch 400 failed",
        "Traceback (most recent call last):",
        '  File "/home/ana/train.py", line 188, in main',
        "KeyError: '<|im_sep|>'",
    ]
    outcome = Run(tmp_path, ("node1",), lines).end("FAILED", exit_code=1, signal=0)
    assert outcome.attribution is not None and outcome.decision is not None
    assert outcome.attribution.cause.value == "user_code"
    assert outcome.decision.verdict.value == "record_only"


def test_a_node_failure_srun_names_is_excluded_in_a_local_zone(
    chicago: None, tmp_path: Path
) -> None:
    """srun's `Node failure on node5` takes the banner's local `CANCELLED AT` time: node5
    is excluded from the requeue (read as UTC the line fell out and nothing was)."""
    lines = [
        f"slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT {local(20, '%Y-%m-%dT%H:%M:%S')} "
        "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
        "srun: error: Node failure on node5",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    ]
    nodes = tuple(f"node{i}" for i in range(1, 9))
    outcome = Run(tmp_path, nodes, lines).end("NODE_FAIL", exit_code=0, signal=9)
    assert outcome.decision is not None
    assert outcome.decision.verdict.value == "requeue"
    assert outcome.decision.exclude == ("node5",)
