"""Find the root exception of a log tail's Python tracebacks.

Python prints a chain as separate tracebacks joined by "The above exception was the direct
cause of the following exception:" (`raise ... from`) or "During handling of the above
exception, another exception occurred:"; the first exception of the chain is where it
started. Several ranks may write to one log, each line prefixed `[rank3]:` (torchrun) or
`3: ` (srun --label), interleaved: we split the lines into one stream per prefix first.

torchrun ends with a `ChildFailedError` whose summary names the "Root Cause (first observed
failure)": rank, exitcode, error_file and the child's traceback (or "Signal 9 (SIGKILL)
received by PID n"); that block, not the wrapper exception, is the root.

A merged multi-node log holds many tracebacks: the rank that failed first, then every other
rank's NCCL or c10d error and each surviving node's torchrun, ended by srun's SIGTERM
(`SignalException`). The earliest real error (`_Scan.real`: a KeyError, a CUDA OOM, an ECC
error) is the root; without one, the last traceback that is not such a teardown.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable

from slurm_triage.attribution.matcher import classify_exception, classify_exceptions
from slurm_triage.attribution.tiers import Tier
from slurm_triage.frozen import Frozen, replace
from slurm_triage.taxonomy import Cause

HEADER = "Traceback (most recent call last):"
# torch's ExceptionWrapper.reraise (torch/_utils.py): "Caught KeyError in DataLoader worker
# process 0." and, on the next lines, the worker's own traceback under this header.
_ORIGINAL = "Original Traceback (most recent call last):"
_CHAIN_MARKERS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
# `srun --label` puts its task id before torch's own `[rank9]:`: both go, and the task id
# (the one srun's `task 1: Exited` lines name) keys the stream.
_PREFIX = re.compile(r"^(?:\[(?:rank|default)(\d+)\]: ?|(\d+): (?:\[(?:rank|default)\d+\]: ?)?)")
# torch's own global rank on a line, after srun's label if any.
_TORCH_RANK = re.compile(r"^(?:\d+: )?\[rank(\d+)\]:")
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
# What a launcher prints when it is torn down (srun's SIGTERM after another task failed):
# never the root while the log holds another traceback.
_TEARDOWN = frozenset({"SignalException"})
_WRAPPER = "ChildFailedError"
# A torchrun summary is read this many lines at most, and never past the next traceback.
_MAX_SUMMARY_LINES = 400
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
    """The root exception of a log: the exception, and torchrun's summary fields if any."""

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
    return found.group(1) or found.group(2), line[found.end() :]


def find_root(lines: list[str]) -> Root | None:
    """The root exception of `lines`, or None when they hold no traceback.

    What ended a rank is the last traceback of its stream (torch's `[rankN]:`, which its
    excepthook prints for the exception the rank died of, or srun's `N: ` label): one it
    printed earlier and survived (a retried upload, a skipped sample) is not its end. Of
    those ends the earliest real error wins (the earliest failure is the root cause): in
    a merged multi-node log the rank that failed first is followed by every other rank's
    NCCL error and each node's torchrun teardown. Otherwise, the root of the last
    traceback that is not a teardown (`SignalException`), unless teardown is all there
    is: unprefixed output says nothing of which process printed what, and a traceback
    printed and survived there (`traceback.print_exc()`, a thread's), or an earlier run's
    in a file appended to, is followed by the one the job died of. Work: one needle scan
    classifies every exception, and a torchrun summary is read a few times at most, never
    past the next traceback."""
    chains = sorted(_chains(lines), key=lambda chain: chain[-1].index)
    if not chains:
        return None
    scan = _Scan(lines, chains)
    kept = [c for c in chains if _short(scan.pick_root(c).exc_type) not in _TEARDOWN] or chains
    last = _root_of(scan, kept[-1], kept[:-1])
    first = _earliest_real(scan, _rank_ends(lines, kept))
    if first is None or (scan.real(last.exc) and first.exc.index >= last.exc.index):
        return last
    return _with_summary(scan, first, kept)


class _Scan:
    """One log's lines and what every root choice asks of them: each exception's
    classification (one needle scan for all: a merged log of a big job holds thousands of
    tracebacks, and a user's 1 MiB of distinct ones would cost a second one at a time), and
    where each torchrun summary ends at the latest (the next traceback's start)."""

    def __init__(self, lines: list[str], chains: list[list[ExcLine]]) -> None:
        self.lines = lines
        self.known = classify_exceptions([(e.exc_type, e.message) for c in chains for e in c])
        self.starts = sorted(chain[0].header for chain in chains)

    def classify(self, exc: ExcLine) -> tuple[Cause, Tier, str]:
        found = self.known.get((exc.exc_type, exc.message))
        return found if found is not None else classify_exception(exc.exc_type, exc.message)

    def real(self, exc: ExcLine) -> bool:
        """An error of the job itself (a signature or type of tier ERROR or above: a
        KeyError, a CUDA OOM, an ECC error), not what a rank prints because something else
        failed (an NCCL or c10d error, a signal, torchrun's wrapper) nor background."""
        return _short(exc.exc_type) not in _BENIGN and self.classify(exc)[1] >= Tier.ERROR

    def pick_root(self, chain: list[ExcLine]) -> ExcLine:
        return _pick_root(chain, self.classify)

    def summary_stop(self, index: int) -> int:
        """Where the summary after line `index` ends at the latest."""
        at = bisect.bisect_right(self.starts, index)
        return self.starts[at] if at < len(self.starts) else index + 1 + _MAX_SUMMARY_LINES


def _root_of(scan: _Scan, chain: list[ExcLine], earlier: list[list[ExcLine]]) -> Root:
    """One traceback's root; a torchrun summary's is the failure it names."""
    root = scan.pick_root(chain)
    if _short(root.exc_type) != _WRAPPER:
        return _plain_root(scan.lines, root)
    return _child_failed(scan, chain[-1], earlier)


def _plain_root(lines: list[str], exc: ExcLine) -> Root:
    stream = split_prefix(lines[exc.index])[0]
    return Root(exc, rank=int(stream) if stream.isdigit() else None)


def _rank_ends(lines: list[str], chains: list[list[ExcLine]]) -> list[list[ExcLine]]:
    """The last traceback of each rank's or task's stream (a prefixed one), in file order."""
    last: dict[str, list[ExcLine]] = {}
    for chain in chains:
        if stream := _stream_of(lines, chain):
            last[stream] = chain
    return sorted(last.values(), key=lambda chain: chain[-1].index)


def _earliest_real(scan: _Scan, chains: list[list[ExcLine]]) -> Root | None:
    """The first traceback (in file order) whose root is a real error; a torchrun summary
    counts through the child traceback it quotes (its fallback to an earlier traceback
    would name one already looked at)."""
    for chain in chains:
        root = scan.pick_root(chain)
        if _short(root.exc_type) == _WRAPPER:
            found = _child_failed(scan, chain[-1], [])
            if found.exc is not chain[-1] and scan.real(found.exc):
                return found
        elif scan.real(root):
            return _plain_root(scan.lines, root)
    return None


def _with_summary(scan: _Scan, root: Root, chains: list[list[ExcLine]]) -> Root:
    """`root` with host, exit code and time from a later torchrun summary naming its rank:
    a merged log's `[rank5]:` lines say nothing of the node they came from. Only torch's
    own prefix gives the global rank a summary names (srun's `5: ` is srun's task id)."""
    own = _TORCH_RANK.match(scan.lines[root.exc.index])
    if own is None or root.host is not None:
        return root
    rank = int(own.group(1))
    for chain in chains:
        wrapper = chain[-1]
        if wrapper.index <= root.exc.index or _short(wrapper.exc_type) != _WRAPPER:
            continue
        fields, _ = _summary_fields(scan.lines, wrapper.index + 1, scan.summary_stop(wrapper.index))
        host = fields.get("host", "").strip()
        if host and _int_prefix(fields.get("rank")) == rank:
            exit_code = _int_prefix(fields.get("exitcode"))
            return replace(root, host=host, exit_code=exit_code, time_text=fields.get("time"))
    return root


def _stream_of(lines: list[str], chain: list[ExcLine]) -> str:
    """The stream (`split_prefix`'s key) a traceback was written to."""
    return split_prefix(lines[chain[-1].index])[0]


def _short(exc_type: str) -> str:
    return exc_type.rsplit(".", 1)[-1]


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
        if i < len(stream) and stream[i][1].rstrip() == _ORIGINAL:
            # torch re-raises a DataLoader worker's error in the main process with the
            # worker's traceback in its message: that one is where the chain started.
            original, i = _exception_after(stream, i + 1, stream[i][0])
            if original is not None:
                chains[-1].insert(len(chains[-1]) - 1, original)
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


def _pick_root(
    chain: list[ExcLine], classify: Callable[[ExcLine], tuple[Cause, Tier, str]]
) -> ExcLine:
    """The first exception that names a real error; else the first that is not benign."""
    for exc in chain:
        cause, role, why = classify(exc)
        if role >= Tier.ERROR and not (cause is Cause.USER_CODE and why.startswith("exception")):
            return exc
    for exc in chain:
        if _short(exc.exc_type) not in _BENIGN:
            return exc
    return chain[0]


def _child_failed(scan: _Scan, wrapper: ExcLine, earlier: list[list[ExcLine]]) -> Root:
    lines = scan.lines
    fields, block = _summary_fields(lines, wrapper.index + 1, scan.summary_stop(wrapper.index))
    rank = _int_prefix(fields.get("rank"))
    exit_code = _int_prefix(fields.get("exitcode"))
    found = _SIGNAL.search(fields.get("traceback", ""))
    signal = int(found.group(1)) if found else None
    if signal is None and exit_code is not None and exit_code < 0:
        signal = -exit_code
    child = _child_root(block) if block else None
    # The child's lines were re-parsed from the summary: point at the summary in `lines`.
    exc = replace(child.exc, index=wrapper.index, header=wrapper.header) if child else None
    if exc is None and signal is None and earlier:
        exc = scan.pick_root(_earlier_chain(scan, earlier, rank))
    host = fields.get("host", "").strip() or None
    return Root(exc or wrapper, rank, exit_code, signal, host, fields.get("time"))


def _child_root(block: list[str]) -> Root | None:
    """The root of the one child traceback a summary quotes: one process's, so its last
    chain, and a summary inside it (torchrun under torchrun) is not read again."""
    chains = _chains(block)
    if not chains:
        return None
    last = max(chains, key=lambda chain: chain[-1].index)
    return _plain_root(block, _pick_root(last, lambda e: classify_exception(e.exc_type, e.message)))


def _summary_fields(lines: list[str], start: int, stop: int) -> tuple[dict[str, str], list[str]]:
    """The Root Cause block's fields and the child's traceback lines (dedented), read from
    `start` to at most `stop` (the next traceback) and _MAX_SUMMARY_LINES lines."""
    fields: dict[str, str] = {}
    block: list[str] = []
    in_root = False
    for raw in lines[start : min(stop, start + _MAX_SUMMARY_LINES)]:
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


def _earlier_chain(scan: _Scan, chains: list[list[ExcLine]], rank: int | None) -> list[ExcLine]:
    """The failed rank's own traceback if its lines carry a prefix, else the last real one."""
    if rank is not None:
        own = [c for c in chains if _stream_of(scan.lines, c) == str(rank)]
        if own:
            return own[-1]
    for chain in reversed(chains):
        if scan.classify(chain[0])[1] >= Tier.ERROR:
            return chain
    return chains[-1]


def _int_prefix(text: str | None) -> int | None:
    found = re.match(r"\s*(-?\d+)", text or "")
    return int(found.group(1)) if found else None
