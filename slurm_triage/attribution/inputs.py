"""Turn what an operator has (a state, an exit status, log files, records) into facts.

Shared by `slurm-triage classify`, the corpus test and the benchmark, so all three read
inputs the same way. This is the I/O side: files are read here, through the bounded readers.
Bad input raises TriageError with one line.
"""

from __future__ import annotations

import os
import re

from slurm_triage.attribution.logscan import DEFAULT_TAIL_BYTES, read_tail, scan_file
from slurm_triage.errors import TriageError
from slurm_triage.evidence import (
    MAX_RECORD_BYTES,
    EvidenceError,
    Fact,
    ProcessExit,
    SlurmState,
    Source,
    parse_job_state,
    parse_record,
    parse_signal,
)

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import tzinfo

    FilePath = str | os.PathLike[str]

_EXIT = re.compile(r"\s*(-?\d{1,3})(?::(\d{1,3}))?\s*")


def status_facts(
    state: str | None, exit_code: str | int | None, signal: str | int | None
) -> list[Fact]:
    """Facts for a Slurm state ("CANCELLED by 0"), an exit code (1, 137, -11 or sacct's
    "0:9") and a signal (SIGSEGV, SEGV, 11)."""
    facts: list[Fact] = []
    if state is not None:
        try:
            job_state, by_uid = parse_job_state(state)
        except ValueError as exc:
            raise TriageError(str(exc)) from None
        # Slurm's own record, not something the job wrote.
        facts.append(SlurmState(state=job_state, by_uid=by_uid, source=Source.ROOT))
    code, sig = parse_exit(str(exit_code)) if exit_code is not None else (None, None)
    if signal is not None:
        try:
            sig = parse_signal(str(signal))
        except ValueError as exc:
            raise TriageError(str(exc)) from None
    if code is not None or sig:
        facts.append(ProcessExit(exit_code=code, signal=sig or None))
    return facts


def parse_exit(text: str) -> tuple[int, int | None]:
    """`"1"` → (1, None); sacct's `"0:9"` → (0, 9); TriageError if neither."""
    found = _EXIT.fullmatch(text)
    if found is None or not -64 <= int(found.group(1)) <= 255:
        raise TriageError(f"bad exit code {text!r}: expected 0-255, -N, or EXIT:SIGNAL like 0:9")
    return int(found.group(1)), int(found.group(2)) if found.group(2) else None


def read_evidence(path: FilePath, *, follow_symlinks: bool = True) -> list[Fact]:
    """The facts of one evidence record file: size-capped, non-blocking, strictly parsed."""
    data, whole = read_tail(path, MAX_RECORD_BYTES, follow_symlinks=follow_symlinks)
    if not whole:
        raise EvidenceError(f"{path}: evidence record over the {MAX_RECORD_BYTES} byte cap")
    try:
        return list(parse_record(data).facts)
    except EvidenceError as exc:
        raise EvidenceError(f"{path}: {exc}") from None


def collect(
    *,
    state: str | None = None,
    exit_code: str | int | None = None,
    signal: str | int | None = None,
    logs: Iterable[tuple[str | None, FilePath]] = (),
    kernel_logs: Iterable[tuple[str | None, FilePath]] = (),
    evidence: Iterable[FilePath] = (),
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    year: int | None = None,
    tz: tzinfo | None = None,
) -> list[Fact]:
    """All facts from these inputs; logs are (node or None, path) pairs. Naive timestamps in
    logs are read in `tz` (None: this host's local zone)."""
    facts = status_facts(state, exit_code, signal)
    for node, path in logs:
        facts += scan_file(path, node=node, tail_bytes=tail_bytes, year=year, tz=tz)
    for node, path in kernel_logs:
        # Imported for a kernel log only: its ~35 regexes cost a job-log-only classify ~10 ms.
        from slurm_triage.attribution.kernel import parse_kernel_file

        facts += parse_kernel_file(path, node=node, tail_bytes=tail_bytes, year=year, tz=tz)
    for path in evidence:
        facts += read_evidence(path)
    return facts
