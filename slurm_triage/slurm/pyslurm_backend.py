"""The Slurm door over pyslurm (Slurm's C API), used where pyslurm matches the running Slurm.

pyslurm's versions track Slurm's (pyslurm 25.11.x is built for Slurm 25.11), and a build
for another Slurm refuses to load or misreads structures, so `check_compatible()` compares
major.minor before anything else. C calls cannot be interrupted, so each runs in a worker
thread that the caller stops waiting for at the deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from slurm_triage import hostlist
from slurm_triage.deadline import CallTimedOut, call_with_deadline
from slurm_triage.slurm.door import SlurmDoor
from slurm_triage.slurm.errors import (
    BackendMismatch,
    JobNotFound,
    NodeNotFound,
    SlurmCommandError,
    SlurmError,
    SlurmTimeout,
)
from slurm_triage.slurm.model import JobInfo, JobState, NodeInfo

T = TypeVar("T")


def import_pyslurm() -> Any:
    try:
        import pyslurm  # type: ignore[import-not-found]
    except ImportError as exc:
        raise BackendMismatch(f"pyslurm is not importable: {exc}") from None
    return pyslurm


def major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise BackendMismatch(f"unparsable version {version!r}") from None


def check_compatible(pyslurm_version: str, slurm_version: str) -> None:
    """Raise BackendMismatch unless pyslurm was built for this Slurm's major.minor."""
    if major_minor(pyslurm_version) != major_minor(slurm_version):
        raise BackendMismatch(
            f"pyslurm {pyslurm_version} is built for Slurm "
            f"{'.'.join(map(str, major_minor(pyslurm_version)))}, but this cluster runs Slurm "
            f"{slurm_version}; using the command-line backend instead"
        )


class PyslurmDoor(SlurmDoor):
    name = "pyslurm"

    def __init__(self, pyslurm: Any, timeout_s: float) -> None:
        self._ps = pyslurm
        self._timeout_s = timeout_s

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return call_with_deadline(fn, self._timeout_s, f"pyslurm {what}")
        except CallTimedOut as exc:
            raise SlurmTimeout(str(exc)) from None
        except Exception as exc:
            raise self._translate(what, exc) from None

    def _translate(self, what: str, exc: BaseException) -> SlurmError:
        if isinstance(exc, SlurmError):
            return exc
        text = str(exc)
        if "Invalid job id" in text:
            return JobNotFound(f"pyslurm {what}: {text}")
        if "Invalid node name" in text:
            return NodeNotFound(f"pyslurm {what}: {text}")
        return SlurmCommandError(f"pyslurm {what}: {type(exc).__name__}: {text}")

    def job(self, job_id: int) -> JobInfo:
        raw = self._call("job", lambda: self._ps.Job.load(job_id))
        excluded = tuple(hostlist.expand(",".join(raw.excluded_nodes or [])))
        return _job(
            job_id, raw, "pyslurm", excluded, bool(raw.is_requeueable), bool(raw.is_batch_job)
        )

    def accounted_job(self, job_id: int) -> JobInfo:
        raw = self._call("accounted_job", lambda: self._ps.db.Job.load(job_id))
        # Accounting keeps neither the exclusions nor the requeue flag.
        return _job(job_id, raw, "pyslurm-db", (), False, True)

    def nodes(self, names: Iterable[str] | None = None) -> tuple[NodeInfo, ...]:
        loaded = self._call("nodes", self._ps.Nodes.load)
        by_name = {name: _node(n) for name, n in loaded.items()}
        wanted = sorted(by_name) if names is None else list(dict.fromkeys(names))
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise NodeNotFound(f"unknown node(s): {','.join(missing)}")
        return tuple(by_name[n] for n in wanted)

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        self._call("requeue", lambda: self._ps.Job(job_id).requeue(hold=hold))

    def set_excluded_nodes(
        self, job_id: int, nodes: Iterable[str], *, merge: bool = True
    ) -> tuple[str, ...]:
        wanted = list(dict.fromkeys(nodes))
        if merge:
            wanted = list(dict.fromkeys([*self.job(job_id).excluded_nodes, *wanted]))
        change = self._ps.JobSubmitDescription(excluded_nodes=wanted)
        self._call("exclude", lambda: self._ps.Job(job_id).modify(change))
        return tuple(wanted)

    def set_begin_time(self, job_id: int, delay_s: float) -> None:
        change = self._ps.JobSubmitDescription(begin_time=f"now+{max(0, int(delay_s))}")
        self._call("begin_time", lambda: self._ps.Job(job_id).modify(change))

    def set_admin_comment(self, job_id: int, text: str) -> None:
        change = self._ps.JobSubmitDescription(admin_comment=text)
        self._call("admin_comment", lambda: self._ps.Job(job_id).modify(change))

    def drain(self, node: str, reason: str) -> None:
        change = self._ps.Node(state="DRAIN", reason=reason)
        self._call("drain", lambda: self._ps.Node(node).modify(change))

    def set_node_comment(self, node: str, text: str) -> None:
        change = self._ps.Node(comment=text)
        self._call("node_comment", lambda: self._ps.Node(node).modify(change))

    def resume(self, node: str) -> None:
        change = self._ps.Node(state="RESUME")
        self._call("resume", lambda: self._ps.Node(node).modify(change))

    def slurm_version(self) -> str:
        return ".".join(str(p) for p in self._ps.__version__.split(".")[:2])


def _job(
    job_id: int, raw: Any, source: str, excluded: tuple[str, ...], requeue: bool, batch: bool
) -> JobInfo:
    return JobInfo(
        job_id=job_id,
        state=JobState.parse(raw.state),
        state_reason=raw.state_reason or "",
        exit_code=raw.exit_code or 0,
        exit_signal=raw.exit_code_signal or 0,
        nodes=tuple(hostlist.expand(raw.nodes or "")),
        excluded_nodes=excluded,
        restart_count=raw.requeue_count or 0,
        requeue=requeue,
        batch=batch,
        user=raw.user_name or "",
        uid=raw.user_id,
        partition=raw.partition or "",
        num_nodes=raw.num_nodes or 0,
        time_limit_min=raw.time_limit,
        admin_comment=raw.admin_comment or "",
        comment=raw.comment or "",
        source=source,
        # A hostlist or None; getattr: accounting's db.Job has no such attribute.
        required_nodes=tuple(hostlist.expand(getattr(raw, "required_nodes", None) or "")),
    )


def _node(raw: Any) -> NodeInfo:
    # pyslurm renders the state like scontrol: "IDLE+DRAIN".
    base, *flags = str(raw.state or "UNKNOWN").upper().split("+")
    return NodeInfo(
        name=raw.name,
        state=base,
        flags=frozenset(flags),
        reason=raw.reason or "",
        reason_user=getattr(raw, "reason_user", "") or "",
        reason_time=getattr(raw, "reason_time", None),
        partitions=tuple(getattr(raw, "partitions", None) or ()),
        comment=getattr(raw, "comment", None) or "",
    )
