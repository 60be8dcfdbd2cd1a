"""The wrapper's evidence record: the facts of one rank's run, and its atomic write.

`build_facts` is pure; the log scanner (its signature tables) is imported only when a
stream has bytes to scan (issue 20). `write_record` puts the record at
`<evidence_dir>/<job>/<node>.<step>[.<task>].json`: temp file in the same directory
(`.<name>.<random>.tmp`, which the epilog ignores: it reads `*.json` not starting with a
dot), fsync, rename, fsync of the directory; a reader sees the whole record or none.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from slurm_triage.atomic import write_atomically
from slurm_triage.evidence import (
    EvidenceRecord,
    Fact,
    LogHit,
    NvmlFact,
    ProcessExit,
    RootException,
    Source,
    Stall,
    parse_record,
    record_to_json,
)
from slurm_triage.frozen import Frozen, replace
from slurm_triage.wrapper.errorfile import ErrorReport
from slurm_triage.wrapper.files import not_ours
from slurm_triage.wrapper.identity import StepIdentity
from slurm_triage.wrapper.supervise import ChildExit

JOB_DIR_MODE = 0o755
RECORD_MODE = 0o644


class RecordError(Exception):
    """The record could not be written; the message is one line for the user's stderr."""


class RunOutcome(Frozen):
    """Everything the wrapper learnt about one run, gathered once the child has exited."""

    identity: StepIdentity
    child: ChildExit
    runtime_s: float
    end_time: float
    tails: tuple[tuple[bytes, bool], ...]  # (tail bytes, whether it is the whole stream)
    error: ErrorReport | None = None
    nvml: tuple[NvmlFact, ...] = ()
    stall: Stall | None = None


def build_facts(outcome: RunOutcome, year: int | None = None) -> tuple[Fact, ...]:
    """This rank's facts: how it ended, its hang, NVML events, log hits, its root exception."""
    node = outcome.identity.node
    facts: list[Fact] = [_process_exit(outcome)]
    if outcome.stall is not None:
        facts.append(outcome.stall)
    facts.extend(outcome.nvml)
    hits, roots = _scan_tails(outcome.tails, node, year)
    facts.extend(hits)
    if outcome.error is not None:
        facts.append(_root_from_report(outcome.error, outcome.identity))
    elif roots:
        # stderr is scanned first: that is where Python prints the traceback that ended it.
        root = roots[0]
        rank = root.rank if root.rank is not None else outcome.identity.rank
        facts.append(replace(root, rank=rank))
    return tuple(_sane_time(f) for f in facts)


def build_record(identity: StepIdentity, facts: Sequence[Fact]) -> EvidenceRecord:
    return EvidenceRecord(identity.job_id, identity.node, identity.step, Source.USER, tuple(facts))


def encode_record(record: EvidenceRecord) -> bytes:
    """The record's JSON, checked with the same strict parser the epilog uses."""
    data = record_to_json(record)
    parse_record(data)  # EvidenceError here is our bug, caught before anyone reads it
    return data


def _process_exit(outcome: RunOutcome) -> ProcessExit:
    child = outcome.child
    return ProcessExit(
        node=outcome.identity.node,
        time=outcome.end_time,
        source=Source.USER,
        exit_code=child.exit_code,
        signal=child.signal_number,
        core_dumped=child.core_dumped,
        runtime_s=max(0.0, outcome.runtime_s),
    )


def _scan_tails(
    tails: Sequence[tuple[bytes, bool]], node: str, year: int | None
) -> tuple[list[LogHit], list[RootException]]:
    hits: dict[tuple[str, str | None], LogHit] = {}
    roots: list[RootException] = []
    for data, whole in tails:
        if not data:
            continue
        from slurm_triage.attribution import decode_tail, scan_lines

        # Naive stamps in the node's local zone, as the decision reads the job's output.
        lines = decode_tail(data, whole_file=whole)
        for fact in scan_lines(lines, node=node, year=year, tz=None):
            if isinstance(fact, RootException):
                roots.append(fact)
            elif isinstance(fact, LogHit):
                key = (fact.signature, fact.node)
                seen = hits.get(key)
                hits[key] = fact if seen is None else replace(seen, count=seen.count + fact.count)
    return list(hits.values()), roots


def _root_from_report(report: ErrorReport, identity: StepIdentity) -> RootException:
    return RootException(
        node=identity.node,
        time=report.time,
        source=Source.USER,
        exc_type=report.exc_type,
        message=report.message,
        rank=identity.rank,
    )


def _sane_time(fact: Fact) -> Fact:
    """A log stamp before 1970 or not finite would make the record invalid: drop the time."""
    when = fact.time
    if when is None or (math.isfinite(when) and when >= 0):
        return fact
    return replace(fact, time=None)


def write_record(evidence_dir: str | os.PathLike[str], identity: StepIdentity, data: bytes) -> str:
    """Atomically write `data` as this rank's record; RecordError (one line) on failure.
    (os.path: pathlib is no import of the wrapper's, issue 20.)"""
    job_dir = _job_dir(os.fspath(evidence_dir), identity.job_id)
    final = os.path.join(job_dir, identity.record_name)
    try:
        write_atomically(final, data, mode=RECORD_MODE)
    except OSError as exc:
        raise RecordError(f"cannot write {final}: {exc.strerror}") from None
    return final


def _job_dir(evidence_dir: str, job_id: str) -> str:
    """`<evidence_dir>/<job>`, created 0755 if missing; refused if it is not ours to write."""
    if not os.path.isdir(evidence_dir):
        raise RecordError(f"evidence directory {evidence_dir} does not exist")
    path = os.path.join(evidence_dir, job_id)
    try:
        os.mkdir(path, JOB_DIR_MODE)
        os.chmod(path, JOB_DIR_MODE)  # mkdir's mode is filtered by the umask
    except FileExistsError:
        pass
    except OSError as exc:
        raise RecordError(f"cannot create {path}: {exc.strerror}") from None
    refusal = not_ours(path)
    if refusal:
        raise RecordError(f"{path} {refusal}")
    return path
