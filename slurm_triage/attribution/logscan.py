"""Scan the tail of a job's stdout/stderr for known signatures and the root exception.

Bounded by construction: `read_tail` seeks to the last `max_bytes` of a file of any size and
never reads more; decoding replaces invalid UTF-8; NUL runs (the hole a crashed node leaves
in a file on NFS or Lustre) are dropped; a line longer than `max_line_chars` keeps its head
and its tail. `scan_lines` is pure: lines in, facts out.

Timestamps: a hit takes the time printed on its own line or on one of the three lines before
it (Python logging's `2024-11-21 10:00:00,123`, glog's `E1121 10:00:00.123456` as PyTorch's
C++ side prints it, torchrun's `2024-11-21_10:00:05`). Naive times are read in `tz`.
"""

from __future__ import annotations

import bisect
import os
import re

from slurm_triage import hostlist
from slurm_triage.attribution import matcher, tracebacks
from slurm_triage.attribution.signatures import (
    BY_NAME,
    CANCELLED_AFTER_FAILURE,
    TASK_FAILURE_LINES,
)
from slurm_triage.attribution.tail import (  # noqa: F401 (this module's public names)
    DEFAULT_TAIL_BYTES,
    MAX_LINE_CHARS,
    LogReadError,
    decode_tail,
    read_tail,
)
from slurm_triage.attribution.tiers import Tier
from slurm_triage.evidence import Fact, LogHit, RootException, Source

# datetime's classes from its C core: datetime.py defines all of them in Python first and
# then replaces them with these (~1.5 ms of every classify, issue 20). mypy reads datetime's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import UTC, datetime, tzinfo
else:
    try:
        from _datetime import UTC, datetime, tzinfo
    except ImportError:  # an interpreter without the C core
        from datetime import UTC, datetime, tzinfo

MAX_EXCERPT_CHARS = 300
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T_](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?"
)
_GLOG = re.compile(r"\b[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")
_TIME_LOOKBACK = 3
# A hostlist in one line names at most this many nodes (the biggest jobs have a few thousand).
MAX_NAMED_NODES = 16384


def scan_lines(
    lines: list[str],
    *,
    node: str | None,
    source: Source = Source.USER,
    year: int | None = None,
    tz: tzinfo | None = UTC,
) -> list[Fact]:
    """Signature hits (one fact per signature and node, with its count) and the root exception."""
    year = year or datetime.now(UTC).year
    root = tracebacks.find_root(lines)
    failed_at = root.exc.header if root is not None else None
    tasks = task_hosts(lines)
    facts: list[Fact] = list(_hits(lines, node, tasks, source, year, tz, failed_at))
    if root is not None:
        rank_node = tasks.get(str(root.rank)) if root.rank is not None else None
        facts.append(_root_fact(root, lines, rank_node or node, source, year, tz))
    return facts


def scan_file(
    path: str | os.PathLike[str],
    *,
    node: str | None,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    source: Source = Source.USER,
    year: int | None = None,
    tz: tzinfo | None = UTC,
) -> list[Fact]:
    """`scan_lines` over the tail of the file at `path`; LogReadError if it cannot be read."""
    data, whole = read_tail(os.fspath(path), tail_bytes)
    return scan_lines(
        decode_tail(data, whole_file=whole), node=node, source=source, year=year, tz=tz
    )


# Lines that show a task failed by itself: a cancel banner after one of them is collateral.
_TASK_FAILURE_ROLES = (Tier.ERROR, Tier.INFRA, Tier.SYMPTOM)


def _hits(
    lines: list[str],
    node: str | None,
    tasks: dict[str, str],
    source: Source,
    year: int,
    tz: tzinfo | None,
    failed_at: int | None = None,
) -> list[LogHit]:
    text = "\n".join(lines)
    starts = _line_starts(lines)
    found: dict[tuple[str, str | None], LogHit] = {}
    first_failure = len(lines) if failed_at is None else failed_at
    for start, sig, match in matcher.scan_text(text):
        line = match.string
        index = _index_of(starts, start)
        if sig.role in _TASK_FAILURE_ROLES or sig.name in TASK_FAILURE_LINES:
            first_failure = min(first_failure, index)
        elif sig is BY_NAME["slurm.cancelled"] and index > first_failure:
            sig = CANCELLED_AFTER_FAILURE
        named = match.groupdict().get("host")
        when, excerpt = _time_near(lines, index, year, tz), _excerpt(line, match)
        for where in _hosts(named) if named else (_line_node(lines[index], tasks, node),):
            key = (sig.name, where)
            count = found[key].count + 1 if key in found else 1
            found[key] = LogHit(
                node=where,
                time=when,
                source=source,
                signature=sig.name,
                cause=sig.cause,
                excerpt=excerpt,
                count=count,
            )
    return sorted(found.values(), key=lambda h: (h.signature, h.node or ""))


_SRUN_TASKS = re.compile(r"^srun: error: ([\w.-]+): tasks? ([\d,-]+): ")
MAX_TASK_IDS = 65536


def task_hosts(lines: list[str]) -> dict[str, str]:
    """Task id → node, from srun's own lines (`srun: error: node2: task 1: Exited ...`): the
    only place a merged batch log says where `[rank1]:` or `1: ` lines came from."""
    hosts: dict[str, str] = {}
    for line in lines:
        if not line.startswith("srun: error: "):
            continue
        found = _SRUN_TASKS.match(line)
        if found is None:
            continue
        host = _short_host(found.group(1))
        for task in _task_ids(found.group(2)):
            hosts.setdefault(str(task), host or "")
    return {task: host for task, host in hosts.items() if host}


def _task_ids(text: str) -> list[int]:
    ids: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return []
        low, high = int(first), int(last or first)
        if high < low or len(ids) + high - low >= MAX_TASK_IDS:
            return []
        ids.extend(range(low, high + 1))
    return ids


def _line_node(line: str, tasks: dict[str, str], node: str | None) -> str | None:
    """A `[rank3]:`-prefixed line was written by task 3: its node if srun named it."""
    rank = tracebacks.split_prefix(line)[0]
    return tasks.get(rank, node) if rank else node


def _hosts(text: str) -> list[str]:
    """A host group's node names: one name, or a Slurm hostlist (`node[03-04]`)."""
    try:
        names = hostlist.expand(text) if "[" in text or "," in text else [text]
    except hostlist.HostlistError:
        names = [text]
    return [n for n in (_short_host(name) for name in names[:MAX_NAMED_NODES]) if n]


def _root_fact(
    root: tracebacks.Root,
    lines: list[str],
    node: str | None,
    source: Source,
    year: int,
    tz: tzinfo | None,
) -> RootException:
    when = _parse_time(root.time_text, year, tz) if root.time_text else None
    if when is None:
        when = _time_near(lines, root.exc.index, year, tz)
    if when is None and 0 <= root.exc.header < len(lines):
        # A traceback has no time of its own; the log line just before it usually has.
        when = _time_near(lines, root.exc.header, year, tz)
    return RootException(
        node=_short_host(root.host) or node,
        time=when,
        source=source,
        exc_type=root.exc.exc_type[:200],
        message=root.exc.message,
        rank=root.rank,
        exit_code=root.exit_code,
        signal=root.signal,
    )


def _line_starts(lines: list[str]) -> list[int]:
    starts, offset = [], 0
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    return starts


def _index_of(starts: list[int], offset: int) -> int:
    return bisect.bisect_right(starts, offset) - 1


def _time_near(lines: list[str], index: int, year: int, tz: tzinfo | None) -> float | None:
    for i in range(index, max(-1, index - _TIME_LOOKBACK - 1), -1):
        when = _parse_time(lines[i][:200], year, tz)
        if when is not None:
            return when
    return None


def _parse_time(text: str, year: int, tz: tzinfo | None) -> float | None:
    """Epoch seconds of the first ISO-like or glog timestamp in `text`, else None."""
    try:
        if found := _ISO.search(text):
            y, mo, d, h, mi, s = (int(g) for g in found.groups()[:6])
            frac = float(f"0.{found.group(7)}") if found.group(7) else 0.0
            zone = _zone(found.group(8)) or tz
            return _epoch(datetime(y, mo, d, h, mi, s), zone) + frac
        if found := _GLOG.search(text):
            mo, d, h, mi, s = (int(g) for g in found.groups()[:5])
            frac = float(f"0.{found.group(6)}") if found.group(6) else 0.0
            return _epoch(datetime(year, mo, d, h, mi, s), tz) + frac
    except ValueError:  # 2024-13-45: looks like a time, is not one
        return None
    return None


def _zone(text: str | None) -> tzinfo | None:
    if not text:
        return None
    if text == "Z":
        return UTC
    return datetime.strptime(text.replace(":", ""), "%z").tzinfo


def _epoch(moment: datetime, tz: tzinfo | None) -> float:
    """Naive `moment` read in `tz` (None: the local zone) as epoch seconds."""
    return moment.replace(tzinfo=tz).timestamp() if tz is not None else moment.timestamp()


def _excerpt(line: str, match: re.Match[str]) -> str:
    line = line.strip()
    if len(line) <= MAX_EXCERPT_CHARS:
        return line
    start = max(0, min(match.start(), len(line) - MAX_EXCERPT_CHARS))
    return line[start : start + MAX_EXCERPT_CHARS]


def _short_host(host: str | None) -> str | None:
    """Slurm node names are short: `node02.cluster.local` → `node02`."""
    return host.split(".", 1)[0] or None if host else None
