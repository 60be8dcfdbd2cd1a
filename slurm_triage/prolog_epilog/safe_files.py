"""Reading what a job wrote, and writing what root collected, without trusting the job.

The epilog runs as root and the decision as SlurmUser; both read files in a directory the
job's user owns. So: every open is relative to a directory fd, with O_NOFOLLOW (a symlink
to /etc/shadow is refused, not followed) and O_NONBLOCK (a FIFO cannot hang us); the file
must be a regular file owned by the job's user, under the size cap, valid against our
schema, and name this job and the node its file name says. Anything else is ignored with
one log line. Root's own records live in `<evidence_dir>/_root/<job>/`, which must be
owned by root, so a user can neither plant nor replace them.

Layout:
    <evidence_dir>/<job>/<node>.<step>[.<task>].json     the wrapper's records (user)
    <evidence_dir>/_root/<job>/<node>.json               the epilog's records (root)
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from slurm_triage.deadline import CallTimedOut, call_with_deadline
from slurm_triage.evidence import EvidenceError, EvidenceRecord, Source, parse_record
from slurm_triage.logs import get_logger

ROOT_AREA = "_root"
# The epilog's record, and the prolog's when it turned the job away.
ROOT_SUFFIXES = (".json", ".prolog.json")
MAX_RECORD_BYTES = 1 << 20
MAX_RECORDS_PER_JOB = 4096
_USER_NAME = re.compile(
    r"^(?P<node>[A-Za-z0-9][A-Za-z0-9_.-]{0,127}?)\.(?P<step>[A-Za-z0-9_]+)"
    r"(?:\.(?P<task>\d+))?\.json$"
)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeEvidence(Exception):
    """A file or directory failed a safety check; the message says which and why."""


@dataclass(frozen=True)
class ReadResult:
    records: tuple[EvidenceRecord, ...]
    rejected: tuple[str, ...]  # one line per ignored file or directory
    over_budget: str = ""  # why reading stopped early (the records read are then partial)


@dataclass(frozen=True)
class RecordBudget:
    """What one decision may spend on a job's user records: a user controls their number,
    size and facts (4096 records of 1 MiB with 1000 facts each took minutes and GiBs)."""

    max_records_per_node: int = 256
    max_bytes: int = 32 << 20
    max_facts: int = 20_000
    deadline: float = float("inf")  # time.monotonic() past which reading stops


@contextmanager
def _open_dir(name: str, dir_fd: int | None = None) -> Iterator[int]:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeEvidence(f"{name}: is a symlink") from None
        if exc.errno == errno.ENOTDIR:
            raise UnsafeEvidence(f"{name}: not a directory") from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _check_owner(fd: int, name: str, owners: tuple[int, ...], shared_ok: bool = False) -> None:
    st = os.fstat(fd)
    if st.st_uid not in owners:
        raise UnsafeEvidence(f"{name}: owned by uid {st.st_uid}, expected {owners[0]}")
    if not shared_ok and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeEvidence(f"{name}: writable by group or others")


def _open_owned(name: str, owner: int, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """An fd on a regular file owned by `owner`: never via a symlink, never blocking on a
    FIFO. The caller closes the fd."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeEvidence(f"{name}: is a symlink") from None
        raise UnsafeEvidence(f"{name}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeEvidence(f"{name}: not a regular file")
        if st.st_uid != owner:
            raise UnsafeEvidence(f"{name}: owned by uid {st.st_uid}, not the job's {owner}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_capped(name: str, dir_fd: int, owner: int, cap: int) -> bytes:
    fd, st = _open_owned(name, owner, dir_fd)
    try:
        if st.st_size > cap:
            raise UnsafeEvidence(f"{name}: {st.st_size} bytes, over the {cap} cap")
        data = os.read(fd, cap + 1)
        if len(data) > cap:
            raise UnsafeEvidence(f"{name}: grew past the {cap} byte cap while read")
        return data
    finally:
        os.close(fd)


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
        with _open_dir(evidence_dir) as base, _open_dir(str(job_id), base) as job_fd:
            _check_owner(job_fd, f"{evidence_dir}/{job_id}", (uid, 0))
            names = sorted(os.listdir(job_fd))[: MAX_RECORDS_PER_JOB * 2]
            for name in names:
                match = _USER_NAME.match(name)
                if not match or (node and match["node"] != node):
                    continue
                if nodes is not None and match["node"] not in nodes:
                    continue
                if _older(name, job_fd, newer_than):
                    continue
                if len(records) >= MAX_RECORDS_PER_JOB:
                    rejected.append(f"{name}: more than {MAX_RECORDS_PER_JOB} records")
                    break
                if spent.exhausted(match["node"]):
                    break
                try:
                    data = _read_capped(name, job_fd, uid, cap)
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
    _log_rejections(job_id, rejected)
    return ReadResult(tuple(records), tuple(rejected), spent.why)


class _Spent:
    """What reading has cost so far against a RecordBudget; `why` once it is exhausted."""

    def __init__(self, budget: RecordBudget) -> None:
        self.budget = budget
        self.bytes = self.facts = 0
        self.per_node: dict[str, int] = {}
        self.why = ""

    def add(self, node: str, size: int, facts: int) -> None:
        self.per_node[node] = self.per_node.get(node, 0) + 1
        self.bytes += size
        self.facts += facts

    def exhausted(self, node: str) -> bool:
        b = self.budget
        if self.per_node.get(node, 0) >= b.max_records_per_node:
            self.why = f"more than {b.max_records_per_node} records for node {node}"
        elif self.bytes >= b.max_bytes:
            self.why = f"more than {b.max_bytes} bytes of records"
        elif self.facts >= b.max_facts:
            self.why = f"more than {b.max_facts} facts in records"
        elif time.monotonic() >= b.deadline:
            self.why = "the decision's deadline for reading records passed"
        return bool(self.why)


def _older(name: str, dir_fd: int, newer_than: float | None) -> bool:
    """Whether the entry was last written before `newer_than` (not following symlinks)."""
    if newer_than is None:
        return False
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime < newer_than
    except OSError:
        return False


def _check_names(record: EvidenceRecord, job_id: int, node: str, name: str) -> None:
    if record.job_id != str(job_id):
        raise UnsafeEvidence(f"{name}: names job {record.job_id}, not {job_id}")
    if record.node != node:
        raise UnsafeEvidence(f"{name}: names node {record.node}, not {node}")


def _log_rejections(job_id: int, rejected: list[str]) -> None:
    log = get_logger(job_id=job_id)
    for line in rejected:
        log.warning("evidence_rejected", detail=line)


# Reading the job's output file is bounded as a whole: a stat on a hard NFS mount whose
# server is gone, or on an automount that never comes, blocks in the kernel.
OUTPUT_READ_TIMEOUT_S = 5.0
_MAX_LINK_HOPS = 40
_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TAIL_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def read_user_tail(
    path: str, uid: int, max_bytes: int, *, timeout_s: float = OUTPUT_READ_TIMEOUT_S
) -> bytes:
    """The tail of a job's output file (`--output`, read by the decision as SlurmUser or
    root). The path is the user's choice, so nothing is opened before it is known to be a
    regular file of the job's user (`/dev/watchdog` opened by root arms a reboot); see
    `_tail_now`. Past `timeout_s` (a hung mount) it is UnsafeEvidence "unreadable"."""
    try:
        return call_with_deadline(
            lambda: _tail_now(path, uid, max_bytes), timeout_s, name="read-output-tail"
        )
    except CallTimedOut:
        raise UnsafeEvidence(f"{path}: unreadable: no answer within {timeout_s:g}s") from None


def _tail_now(path: str, uid: int, max_bytes: int) -> bytes:
    """Walk to the parent with O_PATH fds, lstat the file, refuse anything but a regular
    file owned by `uid` without opening it, then open it non-following, non-blocking and
    without a controlling tty, and check with fstat that it is the same file."""
    dir_fd, name = _walk_to_parent(path)
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        _check_user_file(path, before, uid)
        fd = os.open(name, _TAIL_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise UnsafeEvidence(f"{path}: cannot open: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    try:
        after = os.fstat(fd)
        _check_user_file(path, after, uid)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise UnsafeEvidence(f"{path}: replaced while it was opened")
        os.lseek(fd, max(0, after.st_size - max_bytes), os.SEEK_SET)
        return os.read(fd, max_bytes)
    except OSError as exc:
        raise UnsafeEvidence(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def _check_user_file(path: str, st: os.stat_result, uid: int) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeEvidence(f"{path}: is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeEvidence(f"{path}: not a regular file")
    if st.st_uid != uid:
        raise UnsafeEvidence(f"{path}: owned by uid {st.st_uid}, not the job's {uid}")


def _walk_to_parent(path: str) -> tuple[int, str]:
    """An O_PATH fd on the directory holding `path`'s last name, and that name. Each
    directory is lstat'ed and opened O_NOFOLLOW; a symlink on the way is followed only when
    root owns it (a site's `/home -> /data/home`), never a user's; no `..` in the path."""
    parts = path.split("/")
    if not path.startswith("/") or ".." in parts or not parts[-1] or parts[-1] == ".":
        raise UnsafeEvidence(f"{path}: not an absolute path to a file without '..'")
    todo = [p for p in parts[1:] if p not in ("", ".")]
    walked: list[str] = []
    fd = os.open("/", _PATH_DIR)
    hops = 0
    try:
        while len(todo) > 1:
            part = todo.pop(0)
            st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if st.st_uid != 0 or hops > _MAX_LINK_HOPS:
                    raise UnsafeEvidence(f"{path}: {part} is a symlink of uid {st.st_uid}")
                target = os.path.normpath(os.path.join("/", *walked, os.readlink(part, dir_fd=fd)))
                todo = [p for p in target.split("/") if p] + todo
                walked = []
                os.close(fd)
                fd = os.open("/", _PATH_DIR)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeEvidence(f"{path}: {part} is not a directory")
            next_fd = os.open(part, _PATH_DIR, dir_fd=fd)
            os.close(fd)
            fd, walked = next_fd, [*walked, part]
        return fd, todo[0]
    except OSError as exc:
        os.close(fd)
        raise UnsafeEvidence(f"{path}: cannot open: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise


def read_root_records(
    evidence_dir: str,
    job_id: int,
    nodes: list[str] | tuple[str, ...],
    cap: int = MAX_RECORD_BYTES,
    newer_than: float | None = None,
) -> ReadResult:
    """The epilogs' (and failed prologs') records for these nodes, trusted only from root's
    own area; records older than `newer_than` (an earlier run) are skipped."""
    records: list[EvidenceRecord] = []
    rejected: list[str] = []
    try:
        with (
            _open_dir(evidence_dir) as base,
            _open_dir(ROOT_AREA, base) as area,
            _open_dir(str(job_id), area) as job_fd,
        ):
            _check_owner(area, ROOT_AREA, (0,))
            _check_owner(job_fd, f"{ROOT_AREA}/{job_id}", (0,))
            for node in nodes:
                for name in (f"{node}{suffix}" for suffix in ROOT_SUFFIXES):
                    if _older(name, job_fd, newer_than):
                        continue
                    record = _root_record(name, job_fd, cap, job_id, node, rejected)
                    if record is not None:
                        records.append(record)
    except FileNotFoundError:
        pass
    except (UnsafeEvidence, OSError) as exc:
        rejected.append(f"{evidence_dir}/{ROOT_AREA}/{job_id}: {exc}")
    _log_rejections(job_id, rejected)
    return ReadResult(tuple(records), tuple(rejected))


def _root_record(
    name: str, job_fd: int, cap: int, job_id: int, node: str, rejected: list[str]
) -> EvidenceRecord | None:
    try:
        record = parse_record(_read_capped(name, job_fd, 0, cap), max_bytes=cap)
    except UnsafeEvidence as exc:
        if "cannot open" not in str(exc):
            rejected.append(str(exc))
        return None
    except EvidenceError as exc:
        rejected.append(f"{name}: {exc}")
        return None
    if record.collected_by is Source.ROOT and record.job_id == str(job_id) and record.node == node:
        return record
    rejected.append(f"{name}: not a root record for job {job_id}/{node}")
    return None


def root_record_present(
    evidence_dir: str, job_id: int, node: str, newer_than: float | None = None
) -> bool:
    path = os.path.join(evidence_dir, ROOT_AREA, str(job_id), f"{node}.json")
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (newer_than is None or st.st_mtime >= newer_than)


def _ensure_root_dir(name: str, parent_fd: int) -> int:
    with suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        _check_owner(fd, name, (os.geteuid(),))
    except UnsafeEvidence:
        os.close(fd)
        raise
    return fd


def _write_new(name: str, data: bytes, dir_fd: int) -> None:
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o644,
        dir_fd=dir_fd,
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_root_record(
    evidence_dir: str, job_id: int, node: str, data: bytes, suffix: str = ".json"
) -> str:
    """Write root's record atomically where no user can touch it; returns its path."""
    with _open_dir(evidence_dir) as base:
        area = _ensure_root_dir(ROOT_AREA, base)
        try:
            job_fd = _ensure_root_dir(str(job_id), area)
        finally:
            os.close(area)
        tmp = f".{node}.{os.getpid()}.tmp"
        try:
            _write_new(tmp, data, job_fd)
            os.replace(tmp, f"{node}{suffix}", src_dir_fd=job_fd, dst_dir_fd=job_fd)
            os.fsync(job_fd)
        except OSError:
            # A full disk must not leave a partial record behind for the decision to trip on.
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=job_fd)
            raise
        finally:
            os.close(job_fd)
    return os.path.join(evidence_dir, ROOT_AREA, str(job_id), f"{node}{suffix}")


JOB_DIR_MODE = 0o755
_SQUAT_TRIES = 3


def prepare_job_dir(evidence_dir: str, job_id: int, uid: int, gid: int) -> str | None:
    """The Prolog's (root's) `<evidence_dir>/<job>`: a directory of the job's user, 0755,
    before the job starts. In the 1777 evidence directory anyone may have created that name
    first (a directory, a file, a symlink) to deny the job its evidence; whatever is there
    and is not the job user's directory (or root's: another node's prolog, half-way) is
    renamed aside, unfollowed, to `.squatted.<job>.<random>`. Returns that name, or None
    when nothing was squatting. Raises UnsafeEvidence or OSError when it cannot."""
    name = str(job_id)
    moved: str | None = None
    with _open_dir(evidence_dir) as base:
        for _ in range(_SQUAT_TRIES):
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=base, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid in (uid, os.geteuid()):
                break
            if st is not None:
                aside = f".squatted.{job_id}.{secrets.token_hex(4)}"
                with suppress(FileNotFoundError):  # another node's prolog moved it first
                    os.rename(name, aside, src_dir_fd=base, dst_dir_fd=base)
                    moved = aside
                    _log_squat(job_id, st, aside)
            try:
                os.mkdir(name, JOB_DIR_MODE, dir_fd=base)
                break
            except FileExistsError:
                continue  # re-created meanwhile: look again
        else:
            raise UnsafeEvidence(
                f"{evidence_dir}/{name}: still squatted after {_SQUAT_TRIES} tries"
            )
        _give_to_user(name, base, uid, gid)
    return moved


def _give_to_user(name: str, base: int, uid: int, gid: int) -> None:
    """chown/chmod through an fd of the directory itself (never a path that could be swapped)."""
    with _open_dir(name, base) as fd:
        st = os.fstat(fd)
        if st.st_uid not in (uid, os.geteuid()):
            raise UnsafeEvidence(f"{name}: owned by uid {st.st_uid}, expected {uid}")
        try:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, JOB_DIR_MODE)
        except OSError:
            if st.st_uid != uid:  # ours and useless to the user (root_squash): leave no trace
                with suppress(OSError):
                    os.rmdir(name, dir_fd=base)
            raise


def _log_squat(job_id: int, st: os.stat_result, aside: str) -> None:
    kind = (
        "symlink"
        if stat.S_ISLNK(st.st_mode)
        else "directory"
        if stat.S_ISDIR(st.st_mode)
        else "file"
        if stat.S_ISREG(st.st_mode)
        else "special file"
    )
    get_logger(job_id=job_id).warning(
        "evidence_dir_squatted", kind=kind, owner_uid=st.st_uid, moved_to=aside
    )
