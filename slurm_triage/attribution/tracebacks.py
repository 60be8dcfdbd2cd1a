"""Find the root exception of the last Python traceback in a log tail.

Python prints a chain as separate tracebacks joined by "The above exception was the direct
cause of the following exception:" (`raise ... from`) or "During handling of the above
exception, another exception occurred:"; the first exception of the chain is where it
started. Several ranks may write to one log, each line prefixed `[rank3]:` (torchrun) or
`3: ` (srun --label), interleaved: we split the lines into one stream per prefix first.

torchrun ends with a `ChildFailedError` whose summary names the "Root Cause (first observed
failure)": rank, exitcode, error_file and the child's traceback (or "Signal 9 (SIGKILL)
received by PID n"); that block, not the wrapper exception, is the root.
"""

from __future__ import annotations

import re

from slurm_triage.attribution.matcher import classify_exception
from slurm_triage.attribution.tiers import Tier
from slurm_triage.frozen import Frozen, replace
from slurm_triage.taxonomy import Cause

HEADER = "Traceback (most recent call last):"
_CHAIN_MARKERS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_PREFIX = re.compile(r"^(?:\[(?:rank|default)(\d+)\]:|(\d+): )")
# Lines Slurm's own programs write into the same file: never part of a program's traceback.
_SLURM_LINE = re.compile(r"^(?:srun|sbatch|salloc|slurmstepd(?:-[\w.-]+)?|slurm-triage): ")
_FRAME = re.compile(r'^\s+File "[^"]*", line \d+')
# Without its header, an unindented line after frames is taken as the exception only when it
# looks like one (an `...Error`, a dotted type): a progress line must not pass for it.
_LIKELY_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*\.)+[A-Z]\w*(?::|$)|^_?[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)(?::|$)"
)
# torchrun's summary may be all that is left of its traceback in a log's tail.
_CHILD_FAILED = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*ChildFailedError):?\s*$")
# Unindented lines of other tasks that land between one traceback's frames in merged output.
_MAX_FOREIGN = 20
_EXC_LINE = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*_?[A-Z]\w*)(?::[ ]?(?P<msg>.*))?$")
# Exceptions that are only the background of the real one (a queue poll that timed out).
_BENIGN = frozenset({"Empty", "StopIteration", "StopAsyncIteration", "GeneratorExit"})
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID")
_MAX_MESSAGE = 500


class ExcLine(Frozen):
    """One exception line: its type, first message line, and the indexes (in the tail's
    lines) of the line itself and of its traceback's header."""

    exc_type: str
    message: str
    index: int
    header: int


class Root(Frozen):
    """The root of the last traceback: the exception, and torchrun's summary fields if any."""

    exc: ExcLine
    rank: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    host: str | None = None
    time_text: str | None = None


def split_prefix(line: str) -> tuple[str, str]:
    """(`[rank3]:`-style stream key or "", the line without it)."""
    found = _PREFIX.match(line)
    if found is None:
        return "", line
    rank = found.group(1) or found.group(2)
    return rank, line[found.end() :].removeprefix(" ") if found.group(1) else line[found.end() :]


def find_root(lines: list[str]) -> Root | None:
    """The root exception of the last traceback in `lines`, or None when there is none."""
    chains = _chains(lines)
    if not chains:
        return None
    last = max(chains, key=lambda chain: chain[-1].index)
    root = _pick_root(last)
    if root.exc_type.rsplit(".", 1)[-1] != "ChildFailedError":
        stream = split_prefix(lines[root.index])[0]
        return Root(root, rank=int(stream) if stream.isdigit() else None)
    return _child_failed(lines, last[-1], [c for c in chains if c[-1].index < last[-1].index])


def _chains(lines: list[str]) -> list[list[ExcLine]]:
    streams: dict[str, list[tuple[int, str]]] = {}
    for index, raw in enumerate(lines):
        key, text = split_prefix(raw)
        if _SLURM_LINE.match(text):
            key = "slurm"
        streams.setdefault(key, []).append((index, text))
    chains: list[list[ExcLine]] = []
    for stream in streams.values():
        chains.extend(_stream_chains(stream))
    return chains


def _stream_chains(stream: list[tuple[int, str]]) -> list[list[ExcLine]]:
    chains: list[list[ExcLine]] = []
    chained = False
    i = 0
    while i < len(stream):
        text = stream[i][1]
        if text.rstrip() == HEADER:
            exc, i = _exception_after(stream, i + 1, stream[i][0])
        elif _FRAME.match(text) and (i == 0 or not stream[i - 1][1].startswith((" ", "\t"))):
            # A traceback whose header was cut off by the tail or lost in merged output.
            exc, i = _exception_after(stream, i, stream[i][0], headerless=True)
        elif child := _CHILD_FAILED.match(text):
            exc, i = ExcLine(child.group("type"), "", stream[i][0], stream[i][0]), i + 1
        else:
            i += 1
            continue
        if exc is None:
            chained = False
            continue
        if chained and chains:
            chains[-1].append(exc)
        else:
            chains.append([exc])
        chained, i = _chain_marker_follows(stream, i)
    return chains


def _exception_after(
    stream: list[tuple[int, str]], i: int, header: int, *, headerless: bool = False
) -> tuple[ExcLine | None, int]:
    """Skip the indented frames; the first unindented line should be the exception. An
    unindented line that frames follow belongs to another task's output and is skipped."""
    foreign = 0
    while i < len(stream):
        text = stream[i][1]
        if not text or text[0] in " \t":
            i += 1
            continue
        frames_follow = i + 1 < len(stream) and _FRAME.match(stream[i + 1][1]) is not None
        if (
            not frames_follow
            or foreign >= _MAX_FOREIGN
            or text.rstrip() == HEADER
            or _LIKELY_EXCEPTION.match(text)
        ):
            break
        foreign += 1
        i += 1
    if i >= len(stream):
        return None, i
    index, text = stream[i]
    found = _EXC_LINE.match(text.rstrip())
    if found is None or (headerless and not _LIKELY_EXCEPTION.match(text)):
        return None, i
    message = (found.group("msg") or "").strip()
    if message.endswith(":") and i + 1 < len(stream) and _LIKELY_EXCEPTION.match(stream[i + 1][1]):
        # `BackendCompilerFailed: backend='inductor' raised:` and the real error below it.
        i += 1
        message = f"{message} {stream[i][1].strip()}"
    return ExcLine(found.group("type"), message[:_MAX_MESSAGE], index, header), i + 1


def _chain_marker_follows(stream: list[tuple[int, str]], i: int) -> tuple[bool, int]:
    """Whether a chain marker follows within a few lines (blank lines around it)."""
    for j in range(i, min(i + 4, len(stream))):
        text = stream[j][1].strip()
        if text in _CHAIN_MARKERS:
            return True, j + 1
        if text == HEADER:
            return False, j
    return False, i


def _pick_root(chain: list[ExcLine]) -> ExcLine:
    """The first exception that names a real error; else the first that is not benign."""
    for exc in chain:
        cause, role, why = classify_exception(exc.exc_type, exc.message)
        if role >= Tier.ERROR and not (cause is Cause.USER_CODE and why.startswith("exception")):
            return exc
    for exc in chain:
        if exc.exc_type.rsplit(".", 1)[-1] not in _BENIGN:
            return exc
    return chain[0]


def _child_failed(lines: list[str], wrapper: ExcLine, earlier: list[list[ExcLine]]) -> Root:
    fields, block = _summary_fields(lines, wrapper.index + 1)
    rank = _int_prefix(fields.get("rank"))
    exit_code = _int_prefix(fields.get("exitcode"))
    found = _SIGNAL.search(fields.get("traceback", ""))
    signal = int(found.group(1)) if found else None
    if signal is None and exit_code is not None and exit_code < 0:
        signal = -exit_code
    child = find_root(block) if block else None
    # The child's lines were re-parsed from the summary: point at the summary in `lines`.
    exc = replace(child.exc, index=wrapper.index, header=wrapper.header) if child else None
    if exc is None and signal is None and earlier:
        exc = _pick_root(_earlier_chain(lines, earlier, rank))
    host = fields.get("host", "").strip() or None
    return Root(exc or wrapper, rank, exit_code, signal, host, fields.get("time"))


def _summary_fields(lines: list[str], start: int) -> tuple[dict[str, str], list[str]]:
    """The Root Cause block's fields and the child's traceback lines (dedented)."""
    fields: dict[str, str] = {}
    block: list[str] = []
    in_root = False
    for raw in lines[start : start + 400]:
        text = split_prefix(raw)[1]
        if text.startswith("Root Cause"):
            in_root = True
        elif in_root and text.startswith("====="):
            break
        elif in_root and "traceback" in fields and not _FIELD.match(text):
            block.append(text.strip() if not text.startswith("    ") else text[2:])
        elif in_root and (found := _FIELD.match(text)):
            fields[found.group(1)] = found.group(2).strip()
    if fields.get("traceback", "").startswith(HEADER):
        block.insert(0, HEADER)
    else:
        block = []
    return fields, block


def _earlier_chain(
    lines: list[str], chains: list[list[ExcLine]], rank: int | None
) -> list[ExcLine]:
    """The failed rank's own traceback if its lines carry a prefix, else the last real one."""
    if rank is not None:
        own = [c for c in chains if split_prefix(lines[c[-1].index])[0] == str(rank)]
        if own:
            return own[-1]
    for chain in reversed(chains):
        if classify_exception(chain[0].exc_type, chain[0].message)[1] >= Tier.ERROR:
            return chain
    return chains[-1]


def _int_prefix(text: str | None) -> int | None:
    found = re.match(r"\s*(-?\d+)", text or "")
    return int(found.group(1)) if found else None
