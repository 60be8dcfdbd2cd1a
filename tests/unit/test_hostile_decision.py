"""Issue 12: what a hostile job user can put in front of the decision, and what it gets.

Each test fails on the code before the fix it names: a forged hardware claim outranking the
user's own KeyError, foreign node names reaching exclusion lists, user records without a
budget, an actuator error escaping the journal.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from slurm_triage import actuator
from slurm_triage.attribution import attribute
from slurm_triage.evidence import (
    EvidenceRecord,
    KernelEvent,
    KernelEventKind,
    NvmlCondition,
    NvmlFact,
    ProcessExit,
    RootException,
    Source,
    record_to_json,
    store,
)
from slurm_triage.policies import Decision, Verdict
from slurm_triage.prolog_epilog.decide import on_job_nodes
from slurm_triage.taxonomy import Cause
from tests.unit.conftest import JOB_USER

USER = JOB_USER


def _key_error(node: str = "node1") -> list:  # type: ignore[type-arg]
    return [
        ProcessExit(node=node, exit_code=1),
        RootException(node=node, exc_type="KeyError", message="'lr'", source=Source.USER),
    ]


def _forged_xid79(node: str) -> KernelEvent:
    return KernelEvent(
        node=node, source=Source.USER, event=KernelEventKind.XID, xid=79, detail="forged"
    )


def test_a_forged_hardware_claim_never_outranks_the_users_own_error() -> None:
    """KeyError plus a user record claiming XID 79 (here and on another node): user_code."""
    for node in ("node1", "victim99"):
        result = attribute([*_key_error(), _forged_xid79(node)])
        assert result.cause is Cause.USER_CODE, result.reason
        assert "victim99" not in result.nodes


def test_a_user_claim_still_explains_cuda_level_errors() -> None:
    """TAXONOMY rule 1: a GPU fault can cause an illegal access, so the wrapper's own NVML
    XID 48 still wins over it (requeue with exclusion; never a drain: not root-backed)."""
    facts = [
        ProcessExit(node="node1", exit_code=1),
        RootException(
            node="node1",
            exc_type="RuntimeError",
            message="CUDA error: an illegal memory access was encountered",
        ),
        NvmlFact(node="node1", condition=NvmlCondition.XID_EVENT, value=48, gpu="0"),
    ]
    result = attribute(facts)
    assert result.cause is Cause.GPU_MEMORY and not result.root_backed


def test_root_evidence_still_beats_a_user_error() -> None:
    root = KernelEvent(node="node1", source=Source.ROOT, event=KernelEventKind.XID, xid=79)
    result = attribute([*_key_error(), root])
    assert result.cause is Cause.GPU_UNAVAILABLE and result.root_backed


def test_facts_naming_nodes_outside_the_job_are_dropped() -> None:
    """Spelling follows Slurm's; foreign names never reach the attribution."""
    facts = [*_key_error("NODE1"), _forged_xid79("victim99"), _forged_xid79("x" * 200)]
    kept, foreign = on_job_nodes(facts, ("node1", "node2"))
    assert {f.node for f in kept} == {"node1"}
    assert foreign[0] == "victim99" and len(foreign[1]) <= 64


def _record(job_dir: Path, node: str, task: int, facts: int) -> None:
    body = record_to_json(
        EvidenceRecord(
            job_id=job_dir.name,
            node=node,
            step="0",
            collected_by=Source.USER,
            facts=tuple(ProcessExit(node=node, exit_code=1) for _ in range(facts)),
        )
    )
    path = job_dir / f"{node}.0.{task}.json"
    path.write_bytes(body)
    os.chown(path, USER, USER)


def test_user_records_stop_at_the_per_node_budget(job_dir: Path) -> None:
    for task in range(10):
        _record(job_dir, "node1", task, 1)
    budget = store.RecordBudget(max_records_per_node=4)
    result = store.read_user_records(str(job_dir.parent), 77, USER, budget=budget)
    assert len(result.records) == 4 and "node node1" in result.over_budget


def test_user_records_stop_at_the_fact_budget_and_the_deadline(job_dir: Path) -> None:
    for task in range(5):
        _record(job_dir, "node1", task, 900)
    by_facts = store.read_user_records(
        str(job_dir.parent), 77, USER, budget=store.RecordBudget(max_facts=1000)
    )
    assert len(by_facts.records) == 2 and "facts" in by_facts.over_budget
    late = store.RecordBudget(deadline=time.monotonic() - 1)
    by_time = store.read_user_records(str(job_dir.parent), 77, USER, budget=late)
    assert by_time.records == () and "deadline" in by_time.over_budget


def test_a_directory_of_too_many_entries_is_not_listed_whole(job_dir: Path) -> None:
    """A user controls how many entries the job's directory holds: past the listing cap
    (twice the records allowed) nothing more is listed, and the records count as over
    budget (they are ignored)."""
    for task in range(6):
        _record(job_dir, "node1", task, 1)
    for n in range(20):
        (job_dir / f"junk{n}").touch()
    small = store.RecordBudget(max_records=5)
    assert small.max_listed == 10
    result = store.read_user_records(str(job_dir.parent), 77, USER, budget=small)
    assert result.records == () and "entries" in result.over_budget
    roomy = store.RecordBudget(max_records=50)
    assert len(store.read_user_records(str(job_dir.parent), 77, USER, budget=roomy).records) == 6


class _BrokenDoor:
    """Requeue works; setting the exclusion list fails as a 128 KiB argv does (E2BIG)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        self.calls.append("requeue")

    def set_excluded_nodes(self, job_id: int, nodes: tuple[str, ...]) -> tuple[str, ...]:
        raise OSError(errno.E2BIG, os.strerror(errno.E2BIG))

    def set_admin_comment(self, job_id: int, text: str) -> None:
        raise ValueError("unexpected")


def test_every_actuator_error_is_caught_and_recorded() -> None:
    decision = Decision(verdict=Verdict.REQUEUE, exclude=("node2",), reasons=("test",))
    applied = actuator.carry_out(
        _BrokenDoor(),  # type: ignore[arg-type]
        77,
        decision,
        cause="gpu_unavailable",
        blamed=("node2",),
        restart=0,
        drain_reason="triage: test",
        dry_run=False,
    )
    assert applied.requeued and applied.excluded == ()
    assert any("exclude: OSError" in e and "Argument list too long" in e for e in applied.errors)
    assert any("admin_comment: ValueError" in e for e in applied.errors)
