"""The Slurm door over pyslurm (Slurm's C API), used where pyslurm matches the running Slurm.

`pyslurm_setup.load()` finds, checks and probes pyslurm before this door is built. C calls
cannot be interrupted, so each runs in a worker thread that the caller stops waiting for at
the deadline; transient failures (controller unreachable) are retried within the same
budget, as the command-line door does.

Written against pyslurm 25.11 (its .pyx is the reference for every attribute used here):
`Job.allocated_nodes`, `Job.excluded_nodes`/`required_nodes` are hostlist strings or None,
`Job.time_limit` is minutes or None (unlimited), `db.Job.nodelist` is "None assigned"
before a start and `db.Job.time_limit` is "PartitionLimit" when the job took its
partition's. What pyslurm 25.11 cannot do goes through the command-line door it is given:
- clearing a text field: pyslurm sends "" as "no change" (a NULL pointer), so an empty
  ExcNodeList, AdminComment or node Comment is written with scontrol;
- an exact exit code: pyslurm folds codes of 128 and above into 0-127 (137, a SIGKILLed
  child, reads as 9), so a failed job's exit code comes from scontrol or sacct;
- the expedited-requeue flag (`sbatch --requeue=expedite`): pyslurm has no accessor for
  it, so where slurmctld allows it (SlurmctldParameters=enable_expedited_requeue, asked
  once per door) a requeueable job's flag is read with scontrol.
- node events: pyslurm 25.11's only reader is the deprecated `slurmdb_events.get()`
  (deprecated.pyx), which returns a dict keyed by the event's start time, so the events
  of several nodes that went down in the same second (a switch taking a rack with it)
  overwrite one another, and it filters neither event type nor cluster; they are read
  with `sacctmgr show event`.
- accounting for the report (`accounting_text`): `db.Jobs.load()` builds a Python object per
  job, while the report reads sacct's parsable text as it streams (millions of rows): sacct.
- reboots: pyslurm 25.11 has no reboot call (`scontrol reboot`);
- creating a reservation and submitting the burn-in job: `Reservation.create()` judges its
  success by `slurm_errno()` (left over from any earlier call in the process), not by what
  slurm_create_reservation returned, and `sbatch --wrap` has no pyslurm counterpart; both
  go through scontrol and sbatch. Reading and deleting reservations is pyslurm's;
- weight 0 and empty feature lists: pyslurm sends 0 and "" as "no change".
- one array task or het job record where pyslurm's call names a whole array or het job:
  `Job.cancel()` sends the bare number (slurm_kill_job), which slurmctld reads as every
  task of the array when it is the array's id, and `db.Job.modify()` selects by number,
  which takes every task of array N and every component of het job N (sacctmgr's
  selection); an array task's cancel and an array task's or het job's accounted
  AdminComment go through `scancel A_T` and `sacctmgr ... JobID=A_T|L+O`. A het job's hold
  and release too: `Job.modify()` (slurm_update_job) changes the leader alone, where
  `scontrol hold L` holds the whole het job. pyslurm's requeue (slurm_requeue, by number:
  job_requeue_external) and modify act on the one record, as wanted for an array task;
  a het job is requeued by its leader's id.
pyslurm 25.11's `Reservation.flags` is a strict enum.Flag that lacks bits slurmctld sets
(GRES_REQ, TIME_FLOAT, ...): reading it raises ValueError for such a reservation, so the door
reads the bits from that error and names them as scontrol does (_reservation_flag_bits).
"""

from __future__ import annotations

import pwd
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import tenacity

from slurm_triage import hostlist
from slurm_triage.deadline import CallTimedOut, call_with_deadline
from slurm_triage.logs import get_logger
from slurm_triage.slurm import arguments, reservations
from slurm_triage.slurm.arguments import MAX_REASON_CHARS
from slurm_triage.slurm.door import KnownJobs, SlurmDoor
from slurm_triage.slurm.errors import (
    JobNotFound,
    NodeNotFound,
    SlurmCommandError,
    SlurmError,
    SlurmOutputError,
    SlurmTimeout,
    SlurmUnavailable,
)
from slurm_triage.slurm.model import (
    ArrayAndHetIds,
    JobInfo,
    JobState,
    NodeEventLog,
    NodeInfo,
    ReservationInfo,
)
from slurm_triage.slurm.runner import error_class_for

T = TypeVar("T")
log = get_logger(component="slurm.pyslurm")

# pyslurm's own messages (not slurm_strerror texts), then Slurm's words via the runner's table.
_PYSLURM_ERRORS: tuple[tuple[re.Pattern[str], type[SlurmError]], ...] = (
    (re.compile(r"Job \d+ does not exist on Cluster"), JobNotFound),
    (re.compile(r"Node '.*' does not exist"), NodeNotFound),
    (
        re.compile(
            r"onnection to slurmdbd|from slurmdbd|Unable to connect to database|"
            r"Database connection is not open|Rate limit exceeded",
            re.I,
        ),
        SlurmUnavailable,
    ),
)


class PyslurmDoor(SlurmDoor):
    name = "pyslurm"

    def __init__(
        self,
        pyslurm: Any,
        *,
        cli: SlurmDoor,
        timeout_s: float,
        attempts: int = 3,
        retry_wait_s: float = 0.5,
    ) -> None:
        self._ps = pyslurm
        self._cli = cli
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._retry_wait_s = retry_wait_s
        self._expedite_allowed: bool | None = None  # asked of slurmctld on first need
        self._known = KnownJobs(self._loaded_job)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """fn() under the deadline, retried while Slurm is unreachable; only SlurmErrors."""
        deadline = time.monotonic() + self._timeout_s

        def attempt() -> T:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SlurmTimeout(f"pyslurm {what}: no time left within {self._timeout_s:g}s")
            try:
                return call_with_deadline(fn, left, f"pyslurm {what}")
            except CallTimedOut:
                raise SlurmTimeout(
                    f"pyslurm {what} did not finish within {self._timeout_s:g}s"
                ) from None
            except SlurmError:
                raise
            except Exception as exc:
                raise translate(what, exc) from None

        def wait(state: tenacity.RetryCallState) -> float:
            backoff = self._retry_wait_s * (2 ** (state.attempt_number - 1))
            return max(0.0, min(backoff, deadline - time.monotonic() - 0.05))

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self._attempts),
            wait=wait,
            retry=tenacity.retry_if_exception_type(SlurmUnavailable),
            reraise=True,
        )
        return retrying(attempt)

    def _loaded_job(self, job_id: int) -> JobInfo:
        """slurmctld's record of the job as pyslurm reads it (JobNotFound once forgotten).

        pyslurm 25.11's `Job.load(n)` takes the first record slurm_load_job returns, and for
        the number an array task shares with its array that is every task's: it may read a
        sibling, or fail looking that number up among their steps (`KeyError`, seen on the
        dev cluster). Such a job is read through the CLI door."""
        try:
            raw = self._call("job", lambda: self._ps.Job.load(job_id))
        except SlurmOutputError:
            return self._known.remember(self._cli.job(job_id))
        if getattr(raw, "id", job_id) != job_id:
            return self._known.remember(self._cli.job(job_id))
        return self._known.remember(self._call("job", lambda: _job(job_id, raw)))

    def job(self, job_id: int) -> JobInfo:
        try:
            info = self._loaded_job(job_id)
        except JobNotFound:
            # slurmctld forgot it (MinJobAge passed); accounting still knows.
            return self.accounted_job(job_id)
        need_exit = _exit_uncertain(info)
        need_flag = info.requeue and self._expedite_possible()
        if not (need_exit or need_flag):
            return info
        told = self._cli.job(job_id)
        if need_exit:
            info = replace(info, exit_code=told.exit_code, exit_signal=told.exit_signal)
        # The flag is the job's for life, so a read a moment later is as good.
        return replace(info, expedited_requeue=told.expedited_requeue)

    def accounted_job(self, job_id: int) -> JobInfo:
        def load() -> JobInfo:
            cluster = self._ps.settings.LOCAL_CLUSTER
            return _accounted(job_id, self._ps.db.Job.load(job_id, cluster=cluster))

        try:
            info = self._known.remember(self._call("accounted_job", load))
        except JobNotFound:
            raise JobNotFound(f"job {job_id}: not known to slurmctld or accounting") from None
        if not _exit_uncertain(info):
            return info
        told = self._cli.accounted_job(job_id)
        return replace(info, exit_code=told.exit_code, exit_signal=told.exit_signal)

    def _expedite_possible(self) -> bool:
        """Whether slurmctld accepts `--requeue=expedite` (sbatch refuses it otherwise)."""
        if self._expedite_allowed is None:
            params = self._call(
                "config", lambda: dict(self._ps.slurmctld.Config.load().slurmctld_parameters or {})
            )
            self._expedite_allowed = any(
                key.lower() == "enable_expedited_requeue" for key in params
            )
        return self._expedite_allowed

    def nodes(self, names: Iterable[str] | None = None) -> tuple[NodeInfo, ...]:
        def load() -> dict[str, NodeInfo]:
            return {node.name: _node(node) for node in self._ps.Nodes.load().values()}

        by_name = self._call("nodes", load)
        wanted = sorted(by_name) if names is None else list(dict.fromkeys(names))
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise NodeNotFound(f"unknown node(s): {','.join(missing)}")
        return tuple(by_name[n] for n in wanted)

    def node_events(self, since: datetime, until: datetime | None = None) -> NodeEventLog:
        # pyslurm's slurmdb_events keys events by start time and loses simultaneous ones.
        return self._cli.node_events(since, until)

    def accounting_text(
        self, since: datetime, until: datetime | None, fields: Sequence[str]
    ) -> str:
        # pyslurm's db.Jobs gives job objects, not the text the report parses.
        return self._cli.accounting_text(since, until, fields)

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        # slurm_requeue by number requeues that record alone (job_requeue_external), an
        # array task too; a het job only by its leader, and then whole.
        target = self._known(job_id).het_job_id or job_id
        self._call("requeue", lambda: self._ps.Job(target).requeue(hold=hold))
        log.info("job_requeued", job_id=job_id, slurm_job=target, hold=hold)

    def hold(self, job_id: int) -> None:
        if self._known(job_id).het_job_id is not None:
            self._cli.hold(job_id)  # pyslurm would hold the leader alone
            return
        self._call("hold", lambda: self._ps.Job(job_id).hold())
        log.info("job_held", job_id=job_id)

    def release(self, job_id: int) -> None:
        if self._known(job_id).het_job_id is not None:
            self._cli.release(job_id)  # pyslurm would release the leader alone
            return
        self._call("release", lambda: self._ps.Job(job_id).release())
        log.info("job_released", job_id=job_id)

    def cancel(self, job_id: int) -> None:
        try:
            # An unknown job fails its read, and scancel exits 0 for it too (scancel.c).
            job = self._known(job_id)
        except JobNotFound:
            log.info("job_cancel_unknown", job_id=job_id)
            return
        if job.array_job_id is not None:
            # slurm_kill_job sends the bare number: the whole array for the array's own id.
            self._cli.cancel(job_id)
            return
        # pyslurm's cancel (SIGKILL, as scancel) passes over a job that already ended; a het
        # job's leader cancels every component.
        target = job.het_job_id or job_id
        try:
            self._call("cancel", lambda: self._ps.Job(target).cancel())
        except JobNotFound:
            log.info("job_cancel_unknown", job_id=job_id)
            return
        log.info("job_cancelled", job_id=job_id, slurm_job=target)

    def set_excluded_nodes(
        self, job_id: int, nodes: Iterable[str], *, merge: bool = True
    ) -> tuple[str, ...]:
        if self._known(job_id).het_job_id is not None:
            # Every component, each with its own exclusions: pyslurm updates one record.
            return self._cli.set_excluded_nodes(job_id, nodes, merge=merge)
        wanted = list(dict.fromkeys(nodes))
        if merge:  # the user's own --exclude stays
            current = self._call(
                "exclude", lambda: _hostnames(self._ps.Job.load(job_id).excluded_nodes)
            )
            wanted = list(dict.fromkeys([*current, *wanted]))
        if not wanted:
            return self._cli.set_excluded_nodes(job_id, [], merge=False)
        value = hostlist.compress(wanted)
        self._modify_job("exclude", job_id, excluded_nodes=value)
        log.info("job_excluded_nodes_set", job_id=job_id, excluded=value)
        return tuple(wanted)

    def set_begin_time(self, job_id: int, delay_s: float) -> None:
        if self._known(job_id).het_job_id is not None:
            self._cli.set_begin_time(job_id, delay_s)  # every component, by its leader
            return
        # An epoch, not "now+N": pyslurm passes digits through, and 0 would mean "unset".
        begin = int(time.time()) + max(0, int(round(delay_s)))
        self._modify_job("begin_time", job_id, begin_time=begin)

    def set_admin_comment(self, job_id: int, text: str) -> None:
        if "\n" in text:
            raise SlurmCommandError("AdminComment must be one line")
        if not text:
            self._cli.set_admin_comment(job_id, "")
            return
        self._modify_job("admin_comment", job_id, admin_comment=text)

    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        if "\n" in text:
            raise SlurmCommandError("AdminComment must be one line")
        try:
            job = self._known(job_id)
        except JobNotFound:
            job = self.accounted_job(job_id)  # slurmctld forgot it
        if job.record_spec != str(job_id):
            # db.Job.modify selects by number: every task of array N, every part of het job N.
            self._cli.set_accounted_admin_comment(job_id, text)
            return

        def modify() -> None:
            self._ps.db.Job(job_id).modify(self._ps.db.Job(admin_comment=text))

        self._call("accounted_admin_comment", modify)

    def _modify_job(self, what: str, job_id: int, **change: Any) -> None:
        def modify() -> None:
            self._ps.Job(job_id).modify(self._ps.JobSubmitDescription(**change))

        self._call(what, modify)

    def drain(self, node: str, reason: str) -> None:
        reason = " ".join(reason.split())[:MAX_REASON_CHARS]
        if not reason:
            raise SlurmCommandError("a drain needs a reason")
        self._modify_node("drain", node, state="DRAIN", reason=reason)
        log.info("node_drained", node=node, reason=reason)

    def set_node_comment(self, node: str, text: str) -> None:
        text = " ".join(text.split())[:MAX_REASON_CHARS]
        if not text:
            self._cli.set_node_comment(node, "")
            return
        self._modify_node("node_comment", node, comment=text)

    def resume(self, node: str) -> None:
        self._modify_node("resume", node, state="RESUME")
        log.info("node_resumed", node=node)

    def reboot(self, node: str, reason: str) -> None:
        self._cli.reboot(node, reason)  # pyslurm 25.11 has no reboot call

    def reservations(self) -> tuple[ReservationInfo, ...]:
        def load() -> tuple[ReservationInfo, ...]:
            found = [_reservation(r) for r in self._ps.Reservations.load().values()]
            return tuple(sorted(found, key=lambda r: r.name))

        try:
            return self._call("reservations", load)
        except _UnreadableFlags as exc:
            # Never a reservation dropped or read without its flags: scontrol prints them.
            log.warning("pyslurm_reservation_flags_unreadable", reason=str(exc))
            return self._cli.reservations()

    def create_reservation(
        self, name: str, node: str, duration_s: int, users: Sequence[str]
    ) -> None:
        self._cli.create_reservation(name, node, duration_s, users)

    def delete_reservation(self, name: str) -> None:
        name = arguments.plain_name(name, "reservation name")
        self._call("delete_reservation", lambda: self._ps.Reservation(name).delete())
        log.info("reservation_deleted", reservation=name)

    def submit_burn_in(
        self,
        node: str,
        reservation: str,
        command: Sequence[str],
        *,
        job_name: str,
        output: str,
        time_limit_min: int,
    ) -> int:
        return self._cli.submit_burn_in(
            node,
            reservation,
            command,
            job_name=job_name,
            output=output,
            time_limit_min=time_limit_min,
        )

    def set_node_weight(self, node: str, weight: int) -> None:
        node, weight = arguments.node_name(node), arguments.weight(weight)
        if weight == 0:
            self._cli.set_node_weight(node, 0)
            return
        self._modify_node("node_weight", node, weight=weight)
        log.info("node_weight_set", node=node, weight=weight)

    def set_node_features(self, node: str, available: Sequence[str], active: Sequence[str]) -> None:
        node = arguments.node_name(node)
        available_text = arguments.feature_list(available)
        active_text = arguments.feature_list(active)
        arguments.active_subset(available, active)
        if not (available_text and active_text):
            self._cli.set_node_features(node, available, active)
            return
        self._modify_node(
            "node_features",
            node,
            available_features=available_text.split(","),
            active_features=active_text.split(","),
        )
        log.info("node_features_set", node=node, available=available_text, active=active_text)

    def _modify_node(self, what: str, node: str, **change: Any) -> None:
        def modify() -> None:
            self._ps.Node(node).modify(self._ps.Node(**change))

        self._call(what, modify)

    def slurm_version(self) -> str:
        """slurmctld's version (its configuration's SLURM_VERSION), e.g. '25.11.7'."""
        return self._call("slurm_version", lambda: str(self._ps.slurmctld.Config.load().version))


def translate(what: str, exc: BaseException) -> SlurmError:
    """One of our error classes for an exception out of pyslurm (RPCError carries
    slurm_strerror's text; ValueError and friends are refusals of our input)."""
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    message = f"pyslurm {what}: {text}"
    for pattern, error in _PYSLURM_ERRORS:
        if pattern.search(text):
            return error(message)
    found = error_class_for(text)
    if found is not None:
        return found(message)
    if isinstance(exc, AttributeError | TypeError | KeyError):
        # pyslurm's objects changed shape: this door does not match the installed pyslurm.
        return SlurmOutputError(f"pyslurm {what}: unexpected data ({type(exc).__name__}: {text})")
    return SlurmCommandError(message)


def _exit_uncertain(info: JobInfo) -> bool:
    """pyslurm reports an exit status s >= 128 as s - 128 with no signal: only 0:0 on a job
    that did not fail, and N:S with a signal, are certain."""
    return info.exit_signal == 0 and (info.exit_code != 0 or info.state is JobState.FAILED)


def _text(value: Any) -> str:
    return "" if value in (None, "None", "(null)", "N/A") else str(value)


def _hostnames(value: Any) -> tuple[str, ...]:
    text = _text(value)
    if text == "None assigned":
        return ()
    try:
        return tuple(hostlist.expand(text))
    except hostlist.HostlistError as exc:
        raise SlurmOutputError(f"pyslurm: {exc}") from None


def _minutes(value: Any) -> int | None:
    # None: unlimited or unset; "PartitionLimit" (accounting): the partition's, unknown here.
    return value if isinstance(value, int) and value > 0 else None


def _job(job_id: int, raw: Any) -> JobInfo:
    return JobInfo(
        job_id=job_id,
        state=JobState.parse(raw.state),
        base_state=JobState.parse(raw.state).shown_base,
        # scontrol prints "job requeued in held state" as job_requeued_in_held_state.
        state_reason=re.sub(r"\s", "_", _text(raw.state_reason)),
        exit_code=raw.exit_code or 0,
        exit_signal=raw.exit_code_signal or 0,
        nodes=_hostnames(raw.allocated_nodes),
        excluded_nodes=_hostnames(raw.excluded_nodes),
        required_nodes=_hostnames(raw.required_nodes),
        restart_count=raw.requeue_count or 0,
        requeue=bool(raw.is_requeueable),
        batch=bool(raw.is_batch_job),
        user=_text(raw.user_name),
        uid=raw.user_id,
        partition=_text(raw.partition),
        num_nodes=raw.num_nodes or 0,
        time_limit_min=_minutes(raw.time_limit),
        admin_comment=_text(raw.admin_comment),
        comment=_text(raw.comment),
        source="pyslurm",
        std_out=_text(raw.standard_output),
        # No --error: stderr goes to the output file (scontrol prints that path or nothing).
        std_err=_text(raw.standard_error) or _text(raw.standard_output),
        batch_host=_text(raw.batch_host),
        start_time=float(raw.start_time) if raw.start_time else None,
        **_array_and_het(raw),
    )


def _array_and_het(raw: Any) -> ArrayAndHetIds:
    """JobInfo's array and het job fields from a pyslurm 25.11 Job or db.Job. pyslurm reads
    a u32 of 0 as unset (u32_parse's zero_is_noval): array task 0 reads as None, told from
    a record of tasks pending together by its empty `array_tasks_waiting`; the het leader's
    offset 0 reads as None."""
    array_job = raw.array_id
    task = raw.array_task_id
    if array_job is not None and task is None and not raw.array_tasks_waiting:
        task = 0
    het_job = raw.heterogeneous_id
    return {
        "array_job_id": array_job,
        "array_task_id": task if array_job is not None else None,
        "het_job_id": het_job,
        "het_job_offset": (raw.heterogeneous_offset or 0) if het_job is not None else None,
    }


def _accounted(job_id: int, raw: Any) -> JobInfo:
    state = JobState.parse(raw.state)
    return JobInfo(
        job_id=job_id,
        state=state,
        state_reason="",
        exit_code=raw.exit_code or 0,
        exit_signal=raw.exit_code_signal or 0,
        nodes=_hostnames(raw.nodelist),
        excluded_nodes=(),  # accounting keeps neither the exclusions ...
        restart_count=raw.requeue_count or 0,
        requeue=False,  # ... nor the requeue flag; callers must not assume it
        batch=True,
        user=_text(raw.user_name),
        uid=raw.user_id,
        partition=_text(raw.partition),
        num_nodes=raw.num_nodes or 0,
        time_limit_min=_minutes(raw.time_limit),
        admin_comment=_text(raw.admin_comment),
        comment=_text(raw.comment),
        source="pyslurm-db",
        state_text=_state_text(state, raw),
        **_array_and_het(raw),
    )


def _state_text(state: JobState, raw: Any) -> str:
    """sacct's "CANCELLED by UID" (who cancelled tells an admin's cancel from the user's)."""
    if state is not JobState.CANCELLED:
        return state.value
    by = _text(raw.cancelled_by)  # a user name, or the uid when it has no passwd entry
    if by.isdigit():
        return f"CANCELLED by {by}"
    try:
        return f"CANCELLED by {pwd.getpwnam(by).pw_uid}" if by else state.value
    except KeyError:
        return state.value


# Python's enum (3.11 on) refusing a value its strict Flag has no members for: "<flag
# 'ReservationFlags'> invalid value 137438986241\n    given 0b0...\n  allowed 0b0...".
_STRICT_FLAG_VALUE = re.compile(r"invalid value (\d+)\b")
# pyslurm keeps a reservation's reoccurrence apart (Reservation.reoccurrence), its bit
# taken out of the flags (Reservation.from_ptr); scontrol prints it among them.
_REOCCURRENCES = frozenset({"HOURLY", "DAILY", "WEEKLY", "WEEKDAY", "WEEKEND"})


class _UnreadableFlags(SlurmOutputError):
    """pyslurm's ReservationFlags refused a reservation's bits without saying them."""


def _reservation(raw: Any) -> ReservationInfo:
    flags = reservations.flag_names(_reservation_flag_bits(raw))
    reoccurrence = str(getattr(raw, "reoccurrence", None) or "")
    return ReservationInfo(
        name=str(raw.name),
        nodes=_hostnames(raw.nodes),
        start_time=_epoch(raw.start_time),
        end_time=_epoch(raw.end_time),
        flags=flags | ({reoccurrence} & _REOCCURRENCES),
        users=tuple(str(u) for u in raw.users or ()),
    )


def _reservation_flag_bits(raw: Any) -> int:
    """A reservation's RESERVE_FLAG_* bits. pyslurm 25.11 returns them as
    `ReservationFlags(info.flags)` (core/reservation.pyx), a strict enum.Flag without
    members for bits slurmctld sets (GRES_REQ on every reservation whose TRES names a gres,
    TIME_FLOAT, REPLACE, REPLACE_DOWN, FORCE_START): for such a reservation the property
    raises ValueError, whose message holds the value; the C field has no other reader."""
    try:
        return int(raw.flags.value)
    except ValueError as exc:
        match = _STRICT_FLAG_VALUE.search(str(exc))
        if match is None:
            text = " ".join(str(exc).split())[:200]
            raise _UnreadableFlags(f"pyslurm reservation {raw.name}: {text}") from None
        return int(match[1])


def _epoch(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _node(raw: Any) -> NodeInfo:
    # pyslurm renders the state like scontrol: "IDLE+DRAIN".
    base, *flags = _text(raw.state).upper().split("+") if _text(raw.state) else ["UNKNOWN"]
    return NodeInfo(
        name=raw.name,
        state=base,
        flags=frozenset(flags),
        reason=_text(raw.reason),
        reason_user=_text(raw.reason_user),
        reason_time=raw.reason_time,
        partitions=tuple(raw.partitions or ()),
        comment=_text(raw.comment),
        weight=raw.weight if isinstance(raw.weight, int) else None,
        features=tuple(raw.available_features or ()),
        active_features=tuple(raw.active_features or ()),
        boot_time=_epoch(raw.boot_time),
    )
