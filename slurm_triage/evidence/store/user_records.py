"""The wrapper's records of a job, read as root or SlurmUser from a directory the job's user
owns: each file a regular file of that user under the size cap, valid against our schema,
naming this job and the node its file name says; every fact downgraded to USER. A user
controls how many records there are and how big: a RecordBudget, scaled to the job's size
(`RecordBudget.for_job`), bounds what one decision spends on them.

    <evidence_dir>/<job>/<node>.<step>[.<task>].json
"""

from __future__ import annotations

import os
import re
import time

from slurm_triage.evidence.facts import Source
from slurm_triage.evidence.record import (
    MAX_RECORD_BYTES,
    EvidenceError,
    EvidenceRecord,
    parse_record,
)
from slurm_triage.evidence.store.safe_io import (
    ReadResult,
    UnsafeEvidence,
    check_owner,
    log_rejections,
    older,
    open_dir,
    read_capped,
)
from slurm_triage.frozen import Frozen

# The records of any job, whatever its size; a larger job's cap is its nodes' per-node cap.
MAX_RECORDS_PER_JOB = 4096
# Entries of a job's evidence directory looked at per record allowed (records, and whatever
# else is there: temp files of records being written, a user's own files).
LISTED_PER_RECORD = 2
# What each of a job's nodes adds to the budget's base. A rank's record is about 1.5 KiB
# with about 5 facts (a rank ended by NCCL's watchdog), so a node of 8 ranks writes about
# 12 KiB and 40 facts. Past the base, a job can make the decision spend only in proportion
# to its own size. Bytes grow slowly: attribution costs about 0.1 us a byte of a fact's
# text (20 us a fact besides), several times what reading it costs, and it runs after the
# reading deadline.
BYTES_PER_NODE = 32 << 10
FACTS_PER_NODE = 128
_USER_NAME = re.compile(
    r"^(?P<node>[A-Za-z0-9][A-Za-z0-9_.-]{0,127}?)\.(?P<step>[A-Za-z0-9_]+)"
    r"(?:\.(?P<task>\d+))?\.json$"
)


class RecordBudget(Frozen):
    """What one decision may spend on a job's user records: a user controls their number,
    size and facts (4096 records of 1 MiB with 1000 facts each took minutes and GiBs). The
    defaults are the base every job gets; `for_job` adds its nodes' share. Each record is
    capped on its own too (MAX_RECORD_BYTES, the parser's facts per record)."""

    max_records: int = MAX_RECORDS_PER_JOB
    max_records_per_node: int = 256
    max_bytes: int = 32 << 20
    max_facts: int = 20_000
    deadline: float = float("inf")  # time.monotonic() past which reading stops

    @classmethod
    def for_job(cls, nodes: int, *, deadline: float) -> RecordBudget:
        """The budget of a job on `nodes` nodes: the base plus each node's share, so a
        legitimate 512x8-rank job (4096 records, about 20,480 facts) is read whole, and a
        job on few nodes writing many huge records is still cut at about the base."""
        base = cls()
        return cls(
            max_records=max(base.max_records, nodes * base.max_records_per_node),
            max_bytes=base.max_bytes + nodes * BYTES_PER_NODE,
            max_facts=base.max_facts + nodes * FACTS_PER_NODE,
            deadline=deadline,
        )

    @property
    def max_listed(self) -> int:
        """Entries of the job's evidence directory looked at."""
        return self.max_records * LISTED_PER_RECORD


def read_user_records(
    evidence_dir: str,
    job_id: int,
    uid: int,
    *,
    node: str | None = None,
    nodes: tuple[str, ...] | None = None,
    newer_than: float | None = None,
    cap: int = MAX_RECORD_BYTES,
    budget: RecordBudget | None = None,
) -> ReadResult:
    """The wrapper's records for a job (all nodes, one, or those of `nodes`), every fact
    downgraded to USER. Records older than `newer_than` (an earlier run of a requeued job)
    are skipped. Past the `budget` reading stops and `over_budget` says why."""
    records: list[EvidenceRecord] = []
    rejected: list[str] = []
    spent = _Spent(budget or RecordBudget())
    try:
        with open_dir(evidence_dir) as base, open_dir(str(job_id), base) as job_fd:
            check_owner(job_fd, f"{evidence_dir}/{job_id}", (uid, 0))
            names = _listed(job_fd, spent)
            for name in names:
                match = _USER_NAME.match(name)
                if not match or (node and match["node"] != node):
                    continue
                if nodes is not None and match["node"] not in nodes:
                    continue
                if older(name, job_fd, newer_than):
                    continue
                if spent.exhausted(match["node"]):
                    break
                try:
                    data = read_capped(name, job_fd, uid, cap)
                    record = parse_record(data, max_bytes=cap, trusted_source=Source.USER)
                    _check_names(record, job_id, match["node"], name)
                    records.append(record)
                    spent.add(match["node"], len(data), len(record.facts))
                except (UnsafeEvidence, EvidenceError) as exc:
                    rejected.append(f"{job_id}/{name}: {exc}")
    except FileNotFoundError:
        pass  # the job wrote nothing (no wrapper): not a problem
    except (UnsafeEvidence, OSError) as exc:
        rejected.append(f"{evidence_dir}/{job_id}: {exc}")
    log_rejections(job_id, rejected)
    return ReadResult(tuple(records), tuple(rejected), spent.why)


def _listed(job_fd: int, spent: _Spent) -> list[str]:
    """The directory's first `max_listed` names, sorted. A user controls how many entries
    it holds (their inode quota: os.listdir of 300,000 took 0.6 s and 96 MiB before any
    budget was asked): past `max_listed`, or the deadline, the listing stops and the budget
    is spent, so the user's records do not count."""
    names: list[str] = []
    most = spent.budget.max_listed
    with os.scandir(job_fd) as entries:
        for entry in entries:
            if len(names) >= most:
                spent.why = f"more than {most} entries in the job's evidence directory"
                break
            if len(names) % 1024 == 0 and time.monotonic() >= spent.budget.deadline:
                spent.why = "the decision's deadline for reading records passed"
                break
            names.append(entry.name)
    return sorted(names)


class _Spent:
    """What reading has cost so far against a RecordBudget; `why` once it is exhausted."""

    def __init__(self, budget: RecordBudget) -> None:
        self.budget = budget
        self.records = self.bytes = self.facts = 0
        self.per_node: dict[str, int] = {}
        self.why = ""

    def add(self, node: str, size: int, facts: int) -> None:
        self.per_node[node] = self.per_node.get(node, 0) + 1
        self.records += 1
        self.bytes += size
        self.facts += facts

    def exhausted(self, node: str) -> bool:
        b = self.budget
        if self.records >= b.max_records:
            self.why = f"more than {b.max_records} records"
        elif self.per_node.get(node, 0) >= b.max_records_per_node:
            self.why = f"more than {b.max_records_per_node} records for node {node}"
        elif self.bytes >= b.max_bytes:
            self.why = f"more than {b.max_bytes} bytes of records"
        elif self.facts >= b.max_facts:
            self.why = f"more than {b.max_facts} facts in records"
        elif time.monotonic() >= b.deadline:
            self.why = "the decision's deadline for reading records passed"
        return bool(self.why)


def _check_names(record: EvidenceRecord, job_id: int, node: str, name: str) -> None:
    if record.job_id != str(job_id):
        raise UnsafeEvidence(f"{name}: names job {record.job_id}, not {job_id}")
    if record.node != node:
        raise UnsafeEvidence(f"{name}: names node {record.node}, not {node}")
