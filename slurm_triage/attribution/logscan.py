"""Scan the tail of a job's stdout/stderr for known signatures and the root exception.

Bounded by construction: `read_tail` seeks to the last `max_bytes` of a file of any size and
never reads more; decoding replaces invalid UTF-8; NUL runs (the hole a crashed node leaves
in a file on NFS or Lustre) are dropped; a line longer than `max_line_chars` keeps its head
and its tail. `scan_lines` is pure: lines in, facts out.

Bounded in work too, per scan rather than per line, since the decision reads a user's 1 MiB
as SlurmUser: srun's task ranges (`tasks 0-65534`) are compared with the few task ids the
log asks about, never expanded, and the host lists of one scan (`Node failure on
n[00001-16384]`) are expanded once per distinct text and to MAX_SCAN_NAMES names in all;
`scan_log` says when that budget left lists unread (`LogScan.lists_cut`).

Timestamps: a hit takes the time printed on its own line or on one of the three lines before
it (Python logging's `2024-11-21 10:00:00,123`, glog's `E1121 10:00:00.123456` as PyTorch's
C++ side prints it, torchrun's `2024-11-21_10:00:05`). Naive times are read in `tz`.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
from collections.abc import Iterable

from slurm_triage import hostlist
from slurm_triage.attribution import matcher, tracebacks
from slurm_triage.attribution.signatures import (
    BY_NAME,
    CANCELLED_AFTER_FAILURE,
    TASK_FAILURE_LINES,
    Signature,
)
from slurm_triage.attribution.tail import (  # noqa: F401 (this module's public names)
    DEFAULT_TAIL_BYTES,
    MAX_LINE_CHARS,
    LogReadError,
    decode_tail,
    read_tail,
)
from slurm_triage.attribution.tiers import Tier
from slurm_triage.attribution.yearless import yearless_epoch
from slurm_triage.evidence import Fact, LogHit, RootException, Source
from slurm_triage.frozen import Frozen

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
# The host lists of one scan are expanded to this many names in all, whatever their number:
# a 4,096-GPU job's lines name 512 nodes, the biggest jobs' a few thousand. Each distinct
# list is expanded once however often it repeats (srun prints `Node failure on ...` per step).
MAX_SCAN_NAMES = 16384


class LogScan(Frozen):
    """What one scan of a log found, and the work it took: `names_expanded` host names made
    from the log's host lists (at most MAX_SCAN_NAMES), `lists_cut` distinct host lists left
    unread or read in part once that budget was spent, `task_ids_mapped` task ids given a
    node (only those the log's own lines ask about)."""

    facts: tuple[Fact, ...]
    names_expanded: int = 0
    lists_cut: int = 0
    task_ids_mapped: int = 0

    def cut_short(self) -> bool:
        """Whether a host list went unread: nodes only it named have no hit of their own."""
        return self.lists_cut > 0


def scan_log(
    lines: list[str],
    *,
    node: str | None,
    source: Source = Source.USER,
    year: int | None = None,
    tz: tzinfo | None = UTC,
    since: float | None = None,
) -> LogScan:
    """Signature hits (one fact per signature and node, with its count) and the root
    exception, with the work the scan did; see the module's docstring for its bounds.
    `since`: when the run that ended started (the decision's); the lines of earlier runs
    of a requeued job, appended to the same file, are not read (this_runs_lines)."""
    year = year or datetime.now(tz).year
    if since is not None:
        lines = this_runs_lines(lines, since, year, tz)
    root = tracebacks.find_root(lines)
    failed_at = root.exc.header if root is not None else None
    groups = _group_hits(lines, failed_at)
    root_stream = _root_stream(root, lines)
    wanted = {g.rank for g in groups if g.rank} | ({root_stream} - {""})
    places, tasks_mapped = stream_hosts(lines, wanted)
    names = _NameBudget(MAX_SCAN_NAMES)
    facts: list[Fact] = list(_hits(groups, lines, node, places, source, year, tz, names))
    if root is not None:
        rank_node = places.get(root_stream) if root_stream else None
        facts.append(_root_fact(root, lines, rank_node or node, source, year, tz))
    return LogScan(tuple(facts), names.spent, names.cut, tasks_mapped)


# A log line's own stamp starts within this many characters of its text, after srun's and
# torch's prefixes (`[2026-...`, `INFO 2026-...`, `[INFO] 2026-...`): a date further on is
# the program's words (a checkpoint's name).
_STAMP_STARTS_BY = 12
# Log stamps come from the nodes' clocks and the program's formatter, the run's start from
# the controller's: an earlier run's line is one stamped at least this long before it.
RUN_START_SLACK_S = 60.0


def this_runs_lines(lines: list[str], since: float, year: int, tz: tzinfo | None) -> list[str]:
    """The lines from the first one stamped at `since` or later (less RUN_START_SLACK_S)
    after the last one stamped before it; all of them when no line is stamped before, or
    none after (no boundary shows).

    A requeued job's output is appended to with `--open-mode=append` or JobFileAppend=1, so
    its tail may hold an earlier run's failure. A traceback has no time of its own for the
    job's window to drop it by, and the earliest real error is the root (tracebacks), so
    the earlier run's error would be read as this run's. A log whose every stamp is older
    than the run (stamps in another zone than the controller's, a node clock far behind)
    shows no boundary and is read whole, as before: nothing of this run is lost. The
    unstamped lines between the two runs' stamps are the earlier run's last words (its
    failure's traceback) or this run's first, before it logged: they are left unread."""
    floor = since - RUN_START_SLACK_S
    first_of_run: int | None = None
    for i in range(len(lines) - 1, -1, -1):
        when = _line_stamp(lines[i], year, tz)
        if when is None:
            continue
        if when >= floor:
            first_of_run = i
        else:
            return lines if first_of_run is None else lines[first_of_run:]
    return lines


def _line_stamp(line: str, year: int, tz: tzinfo | None) -> float | None:
    """The time a log line is stamped with at its start, else None."""
    text = tracebacks.split_prefix(line[:200])[1][: _STAMP_STARTS_BY + 40]
    if (found := _ISO.search(text)) is not None:
        return _iso_time(found, tz) if found.start() <= _STAMP_STARTS_BY else None
    if (found := _GLOG.search(text)) is not None and found.start() <= _STAMP_STARTS_BY:
        return _glog_time(found, year, tz)
    return None


def scan_lines(
    lines: list[str],
    *,
    node: str | None,
    source: Source = Source.USER,
    year: int | None = None,
    tz: tzinfo | None = UTC,
) -> list[Fact]:
    """Signature hits (one fact per signature and node, with its count) and the root exception."""
    return list(scan_log(lines, node=node, source=source, year=year, tz=tz).facts)


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


class _Group:
    """The lines that hit one signature and name the same place: a host list's text
    (`named`), else a task's stream (`rank`, `_stream`), else neither. A list is expanded
    once per group, not once per line; its hit takes the time and excerpt of its last line."""

    __slots__ = ("count", "last", "match", "named", "rank", "sig")

    def __init__(self, sig: Signature, named: str, rank: str) -> None:
        self.sig, self.named, self.rank, self.count = sig, named, rank, 0

    def add(self, sig: Signature, index: int, match: re.Match[str]) -> None:
        self.sig, self.last, self.match = sig, index, match
        self.count += 1


def _group_hits(lines: list[str], failed_at: int | None) -> list[_Group]:
    """Every signature hit in `lines`, grouped by signature and the place it names, in the
    order of their first lines."""
    starts = _line_starts(lines)
    groups: dict[tuple[str, str, str], _Group] = {}
    first_failure = len(lines) if failed_at is None else failed_at
    for start, sig, match in matcher.scan_text("\n".join(lines)):
        index = _index_of(starts, start)
        if sig.role in _TASK_FAILURE_ROLES or sig.name in TASK_FAILURE_LINES:
            first_failure = min(first_failure, index)
        elif sig is BY_NAME["slurm.cancelled"] and index > first_failure:
            sig = CANCELLED_AFTER_FAILURE
        named = match.groupdict().get("host") or ""
        rank = "" if named else _stream(lines[index])
        key = (sig.name, named, rank)
        if key not in groups:
            groups[key] = _Group(sig, named, rank)
        groups[key].add(sig, index, match)
    return list(groups.values())


def _hits(
    groups: list[_Group],
    lines: list[str],
    node: str | None,
    stream_nodes: dict[str, str],
    source: Source,
    year: int,
    tz: tzinfo | None,
    names: _NameBudget,
) -> list[LogHit]:
    """One hit per signature and node: host lists get the budget in the order they first
    appear (the earliest failure is the root cause); a node's hit counts every line that
    named it and takes the time and excerpt of the last one, as one line at a time would."""
    places = {
        id(g): names.hosts(g.named) if g.named else [_rank_node(g.rank, stream_nodes, node)]
        for g in groups
    }
    found: dict[tuple[str, str | None], LogHit] = {}
    for group in sorted(groups, key=lambda g: g.last):
        if not places[id(group)]:
            continue
        sig, line = group.sig, group.match.string
        when, excerpt = _time_near(lines, group.last, year, tz), _excerpt(line, group.match)
        for where in places[id(group)]:
            key = (sig.name, where)
            count = found[key].count + group.count if key in found else group.count
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


# A line's stream: srun's task id (`srun --label`'s `3: `, the id of srun's own `task 3:
# Exited` lines), else torch's global rank (`[rank3]:`, from the excepthook that
# init_process_group installs, whatever the launcher). torchrun's `--tee` prefix `[default3]:`
# is a local rank, the same on every node: it names no node.
_STREAM = re.compile(r"(\d{1,9}): |\[rank(\d{1,9})\]:")
# torchrun's failure entry (torch/distributed/elastic/multiprocessing/errors, one per failed
# rank in each node's ChildFailedError summary): `  host      : node2` on the line before
# `  rank      : 5 (local_rank: 1)`. The rank is global, the host the node that ran it.
_TORCHRUN_HOST = re.compile(r"\s*host\s*: ?([\w.-]+)\s*$")
_TORCHRUN_RANK = re.compile(r"\s*rank\s*: ?(\d{1,9}) \(local_rank: \d+\)")
# Words only torchrun (or a launcher built on it) writes: it numbers ranks itself.
_TORCHRUN_WORDS = ("(local_rank: ", "torch/distributed/run.py", "torch.distributed.elastic")
_TORCHRUN_TEE = re.compile(r"(?:\d{1,9}: )?\[default\d{1,9}\]:")
# Searched from the first `NCCL INFO ` of a line only: `NCCL INFO .*\bnranks` retried at
# each of a hostile line's thousand `NCCL INFO `s, quadratic (6 s a MiB).
_NCCL_WORLD = re.compile(r"\bnranks (\d{1,9})\b")


def _stream(line: str) -> str:
    """`3` for a line of srun's task 3, `[rank3]` for one of torch's rank 3, else ""."""
    found = _STREAM.match(line)
    if found is None:
        return ""
    return found.group(1) or f"[rank{found.group(2)}]"


def _root_stream(root: tracebacks.Root | None, lines: list[str]) -> str:
    """The stream that names the root exception's node: its traceback's own prefix, or
    torchrun's global rank when the root is read from a ChildFailedError summary."""
    if root is None or root.rank is None or not 0 <= root.exc.index < len(lines):
        return ""
    line = lines[root.exc.index]
    if "ChildFailedError" in line:
        return f"[rank{root.rank}]"
    stream = _stream(line)
    number = stream[5:-1] if stream.startswith("[rank") else stream
    return stream if number == str(root.rank) else ""


def stream_hosts(lines: list[str], wanted: Iterable[str]) -> tuple[dict[str, str], int]:
    """The node of each wanted stream (`_stream`), and how many of srun's task ids that took.

    srun's task lines place its own task ids, and torch's ranks only where srun started one
    task per rank (`_srun_tasks_are_ranks`); else torchrun's failure entries place the ranks
    they name. Any other rank has no node: `srun -N8 --ntasks-per-node=1 torchrun
    --nproc-per-node=4` runs rank 5 on srun's task 1, and task 5's node is a healthy one that
    would be excluded in the faulty one's place."""
    labels = {s for s in wanted if s.isdigit()}
    ranks = {s[5:-1] for s in wanted if s.startswith("[rank")}
    by_torchrun = torchrun_hosts(lines, ranks) if ranks else {}
    left = ranks - by_torchrun.keys()
    via_srun = left if left and _srun_tasks_are_ranks(lines, left) else set()
    tasks = task_hosts(lines, labels | via_srun)
    places = {s: tasks[s] for s in labels if s in tasks}
    places.update((f"[rank{r}]", host) for r, host in by_torchrun.items())
    places.update((f"[rank{r}]", tasks[r]) for r in via_srun if r in tasks)
    return places, len(tasks)


def torchrun_hosts(lines: list[str], ranks: set[str]) -> dict[str, str]:
    """Rank → node for the wanted `ranks`, from torchrun's failure entries; a rank that two
    entries place on different nodes (an elastic restart moved it) is placed on neither."""
    hosts: dict[str, str] = {}
    torn: set[str] = set()
    for index, line in enumerate(lines):
        if "(local_rank: " not in line or index == 0:
            continue
        stream, text = tracebacks.split_prefix(line)
        found = _TORCHRUN_RANK.match(text)
        above, text_above = tracebacks.split_prefix(lines[index - 1])
        named = _TORCHRUN_HOST.match(text_above) if above == stream else None
        host = _short_host(named.group(1)) if named else None
        if found is None or host is None or found.group(1) not in ranks:
            continue
        rank = found.group(1)
        if hosts.setdefault(rank, host) != host:
            torn.add(rank)
    return {rank: host for rank, host in hosts.items() if rank not in torn}


def _srun_tasks_are_ranks(lines: list[str], ranks: set[str]) -> bool:
    """Whether torch's rank N ran as srun's task N: srun started every rank itself (`srun
    -n32 python train.py`, the rank taken from SLURM_PROCID). Only what the log shows says
    so: no torchrun, srun's task ids reach the highest rank the log prints, and srun ran two
    tasks on one node or NCCL's largest communicator has as many ranks as srun had tasks."""
    top_rank, top_task, world, shared = max(int(r) for r in ranks), -1, 0, False
    first_task: dict[str, int] = {}
    for line in lines:
        if line.startswith("[rank") and (rank := _STREAM.match(line)):
            top_rank = max(top_rank, int(rank.group(2)))
        elif line.startswith("srun: error: ") and (task := _SRUN_TASKS.match(line)):
            host = task.group(1).lower()
            for low, high in _task_ranges(task.group(2)):
                top_task = max(top_task, high)
                shared = shared or high > low or first_task.setdefault(host, low) != low
        elif _TORCHRUN_TEE.match(line) or any(word in line for word in _TORCHRUN_WORDS):
            return False
        info = line.find("NCCL INFO ") if "nranks " in line else -1
        if info >= 0 and (size := _NCCL_WORLD.search(line, info)):
            world = max(world, int(size.group(1)))
    return top_task >= top_rank and (shared or world == top_task + 1)


_SRUN_TASKS = re.compile(r"^srun: error: ([\w.-]+): tasks? ([\d,-]+): ")
# One srun line naming more task ids than this is not srun's (the biggest jobs have 10^4-10^5).
MAX_TASK_IDS = 65536


def task_hosts(lines: list[str], wanted: Iterable[str]) -> dict[str, str]:
    """Task id → node for the `wanted` task ids, from srun's own lines (`srun: error: node2:
    task 1: Exited ...`): the only place a merged batch log says where `[rank1]:` or `1: `
    lines came from. The first line naming a task wins. Ranges are compared with the wanted
    ids, never expanded: `tasks 0-65534` costs what `task 3` does."""
    todo = sorted({int(t) for t in wanted if t.isdigit() and str(int(t)) == t})
    hosts: dict[int, str] = {}
    for line in lines:
        if not todo:
            break
        found = _SRUN_TASKS.match(line) if line.startswith("srun: error: ") else None
        if found is None:
            continue
        host = _short_host(found.group(1)) or ""
        for low, high in _task_ranges(found.group(2)):
            first, last = bisect.bisect_left(todo, low), bisect.bisect_right(todo, high)
            hosts.update((task, host) for task in todo[first:last])
            del todo[first:last]
    return {str(task): host for task, host in hosts.items() if host}


def _task_ranges(text: str) -> list[tuple[int, int]]:
    """`0-3,7` -> [(0, 3), (7, 7)]; [] when the text is not a list of at most MAX_TASK_IDS
    ids (then the line names no task)."""
    ranges: list[tuple[int, int]] = []
    count = 0
    for part in text.split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return []
        try:
            low, high = int(first), int(last or first)
        except ValueError:  # over int()'s 4300 digits
            return []
        if high < low or count + high - low >= MAX_TASK_IDS:
            return []
        count += high - low + 1
        ranges.append((low, high))
    return ranges


def _rank_node(stream: str, stream_nodes: dict[str, str], node: str | None) -> str | None:
    """The node of a line of `stream` (`_stream`) as `stream_hosts` placed it, else the
    log's own node (None for a multi-node job's merged log: no node rather than a guess)."""
    return stream_nodes.get(stream, node) if stream else node


class _NameBudget:
    """The host names one scan may still make from host lists, what it made, and how many
    lists it left unread or read in part."""

    def __init__(self, limit: int) -> None:
        self.left, self.spent, self.cut = limit, 0, 0

    def hosts(self, text: str) -> list[str]:
        """A host group's node names: one name, or a Slurm hostlist (`node[03-04]`); text
        that is no hostlist is one name."""
        if "[" not in text and "," not in text:
            return [n for n in (_short_host(text),) if n]
        if not self.left:  # not even read: checking a list's text costs a pass over it
            self.cut += 1
            return []
        try:
            names = hostlist.iter_names(text)
        except hostlist.HostlistError:
            return [n for n in (_short_host(text),) if n]
        made = list(itertools.islice(names, self.left))
        self.left -= len(made)
        self.spent += len(made)
        if next(names, None) is not None:
            self.cut += 1
        return [n for n in (_short_host(name) for name in dict.fromkeys(made)) if n]


def _root_fact(
    root: tracebacks.Root,
    lines: list[str],
    node: str | None,
    source: Source,
    year: int,
    tz: tzinfo | None,
) -> RootException:
    when = _parse_time(root.time_text, year, tz) if root.time_text else None
    if when is None and 0 <= root.exc.header < len(lines):
        when = _logged_time(lines, root.exc.header, year, tz)
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


# A traceback has no time of its own, and its exception line is the program's text (a path
# holding `2024-11-21_10:00:00` is no stamp). Python's logging (`logger.exception`,
# `exc_info=True`), loguru and glog print an error record's line and its traceback at once:
# that line's time is the exception's. Any other line before a traceback (a progress line
# from 15 minutes earlier) only says that the exception came later, and its time would drop
# from the job's window the very failure that ended the job: such a traceback keeps no time.
_ERROR_RECORD = re.compile(r"\b(?:ERROR|CRITICAL|FATAL)\b|^[EF]\d{4} \d")
# Lines of other tasks that may land between a record and its traceback in merged output.
_RECORD_LOOKBACK = 20


def _logged_time(lines: list[str], header: int, year: int, tz: tzinfo | None) -> float | None:
    """The time of the error record printed just before the traceback at `header` in the same
    task's lines, else None."""
    stream = tracebacks.split_prefix(lines[header])[0]
    for i in range(header - 1, max(-1, header - 1 - _RECORD_LOOKBACK), -1):
        key, text = tracebacks.split_prefix(lines[i][:200])
        if key == stream:
            return _parse_time(text, year, tz) if _ERROR_RECORD.search(text) else None
    return None


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
    if found := _ISO.search(text):
        return _iso_time(found, tz)
    if found := _GLOG.search(text):
        return _glog_time(found, year, tz)
    return None


def _iso_time(found: re.Match[str], tz: tzinfo | None) -> float | None:
    try:
        y, mo, d, h, mi, s = (int(g) for g in found.groups()[:6])
        frac = float(f"0.{found.group(7)}") if found.group(7) else 0.0
        zone = _zone(found.group(8)) or tz
        return _epoch(datetime(y, mo, d, h, mi, s), zone) + frac
    except ValueError:  # 2024-13-45: looks like a time, is not one
        return None


def _glog_time(found: re.Match[str], year: int, tz: tzinfo | None) -> float | None:
    mo, d, h, mi, s = (int(g) for g in found.groups()[:5])
    frac = float(f"0.{found.group(6)}") if found.group(6) else 0.0
    when = yearless_epoch(year, mo, d, (h, mi, s, 0), tz)
    return when + frac if when is not None else None


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
