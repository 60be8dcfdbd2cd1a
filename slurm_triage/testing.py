"""Test helpers shipped with slurm-triage: `FakeDoor`, an in-memory Slurm behind the door.

    door = FakeDoor(jobs=[job_info(7, nodes=("node1", "node2"))], nodes=node_infos(4))
    door.end_job(7, "FAILED", exit_code=1)        # as EpilogSlurmctld sees it: COMPLETING
    door.fail("requeue", SlurmCommandError("scontrol requeue 7: Socket timed out"))
    ...
    assert door.methods() == ["job", "accounted_job", "requeue", "set_admin_comment"]

It behaves like Slurm where our decisions depend on it, with the error classes the command
line backend raises: a job submitted with --no-requeue (or not a batch job) refuses a
requeue with `NotRequeueable`; a finished job refuses updates with `InvalidJobState`;
exclusions and begin times need a pending job; excluded nodes merge with the user's own;
excluding a node the job requires (`required_nodes`, sbatch -w) is taken and leaves the job
pending with reason BadConstraints, as Slurm does; a job operation reaches what Slurm's
name for the job reaches (the door names an array task `A_T` and a het job by its leader:
a bare number that is an array's id would be every task of it, as in slurmctld); a drain
needs a reason and replaces whatever reason was there, as `scontrol update State=DRAIN`
does. It does not protect an
admin's drain (Slurm would not either): it records every drain, resume or relabel of a
node an admin drained (a reason without our `triage: ` prefix) in `admin_drains_touched`,
which a test asserts empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from slurm_triage.policies.reasons import DRAIN_PREFIX, may_replace_drain
from slurm_triage.slurm import arguments
from slurm_triage.slurm.cli_backend import accounting_argv
from slurm_triage.slurm.door import SlurmDoor
from slurm_triage.slurm.errors import (
    InvalidJobState,
    JobNotFound,
    NodeNotFound,
    NotRequeueable,
    NotYetAccounted,
    ReservationNotFound,
    SlurmCommandError,
)
from slurm_triage.slurm.events import iter_overlapping
from slurm_triage.slurm.model import (
    JobInfo,
    JobState,
    NodeEvent,
    NodeEventLog,
    NodeFlag,
    NodeInfo,
    ReservationInfo,
)

__all__ = ["MUTATING", "Call", "FakeDoor", "job_info", "node_info", "node_infos"]

MUTATING = frozenset(
    {
        "requeue",
        "hold",
        "release",
        "cancel",
        "set_excluded_nodes",
        "set_begin_time",
        "set_admin_comment",
        "set_accounted_admin_comment",
        "drain",
        "set_node_comment",
        "resume",
        "reboot",
        "create_reservation",
        "delete_reservation",
        "submit_burn_in",
        "set_node_weight",
        "set_node_features",
    }
)
# What slurmctld's reason says while a job that ended this way is COMPLETING.
_ENDING_REASON = {
    JobState.FAILED: "NonZeroExitCode",
    JobState.NODE_FAIL: "NodeDown",
    JobState.TIMEOUT: "TimeLimit",
    JobState.PREEMPTED: "Preempted",
    JobState.OUT_OF_MEMORY: "OutOfMemory",
}


def job_info(job_id: int, **changes: Any) -> JobInfo:
    """A running two-node batch job of alice's in partition gpu that allows requeue."""
    base = JobInfo(
        job_id=job_id,
        state=JobState.RUNNING,
        state_reason="None",
        exit_code=0,
        exit_signal=0,
        nodes=("node1", "node2"),
        excluded_nodes=(),
        restart_count=0,
        requeue=True,
        batch=True,
        user="alice",
        uid=4242,
        partition="gpu",
        num_nodes=2,
        time_limit_min=60,
        admin_comment="",
        comment="",
        source="fake",
    )
    return replace(base, **changes)


def node_info(name: str, **changes: Any) -> NodeInfo:
    """An idle node of partition gpu, not drained."""
    base = NodeInfo(name, "IDLE", frozenset(), "", "", None, ("gpu",))
    return replace(base, **changes)


def node_infos(count: int, prefix: str = "node") -> list[NodeInfo]:
    return [node_info(f"{prefix}{i}") for i in range(1, count + 1)]


@dataclass(frozen=True)
class Call:
    """One call through the door, as made (failed ones too)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


class FakeDoor(SlurmDoor):
    """An in-memory Slurm: `jobs` is what slurmctld shows, `accounting` what sacct shows
    where it differs (set by `end_job`), `node_table` the nodes, `events` the node events
    slurmdbd keeps; `calls` every call in order."""

    name = "fake"

    def __init__(
        self,
        jobs: Iterable[JobInfo] = (),
        nodes: Iterable[NodeInfo] = (),
        *,
        version: str = "22.05.8",
        actor: str = "slurm",
        actor_uid: int = 64030,  # Debian's slurm user
        events: Iterable[NodeEvent] = (),
        clock: Callable[[], datetime] = datetime.now,
        reservations: Iterable[ReservationInfo] = (),
        reboot_program: bool = True,
    ) -> None:
        self.jobs: dict[int, JobInfo] = {j.job_id: j for j in jobs}
        self.events: list[NodeEvent] = list(events)
        # Accounting's job records as sacct prints them (field name -> text), for
        # accounting_text; times in sacct's ISO form, End "Unknown" while running.
        self.sacct_records: list[Mapping[str, str]] = []
        self.accounting: dict[int, JobInfo] = {}
        self.node_table: dict[str, NodeInfo] = {n.name: n for n in nodes}
        # Taken out by someone else (drained, DOWN or FAIL with an admin's reason) until
        # resumed, whatever reason we may have written over it.
        self._admin_drained = {
            n.name
            for n in self.node_table.values()
            if n.taken_out and not n.reason.startswith(DRAIN_PREFIX) and not may_replace_drain(n)
        }
        self.calls: list[Call] = []
        self.admin_drains_touched: list[Call] = []
        self.version = version
        self.actor = actor  # the user our updates run as (reason_user of our drains)
        self.actor_uid = actor_uid
        self.clock = clock  # local time, as slurmdbd's node events are printed
        self._faults: dict[str, list[tuple[Exception, int | None]]] = {}
        self.reservation_table: dict[str, ReservationInfo] = {r.name: r for r in reservations}
        self.job_reservation: dict[int, str] = {}  # job id -> --reservation it asked for
        self.reboot_program = reboot_program  # slurm.conf RebootProgram= is set
        self._next_job_id = 1 + max(self.jobs, default=1000)

    # -- test controls (not part of the door) ------------------------------------------

    def fail(self, method: str, error: Exception, *, times: int | None = 1) -> None:
        """Make the next `times` calls of `method` raise `error` (None: every call); a
        SlurmError subclass as the CLI backend would raise it, or e.g. an OSError."""
        if method not in SlurmDoor.__abstractmethods__:  # node() is nodes([name])
            valid = ", ".join(sorted(SlurmDoor.__abstractmethods__))
            raise ValueError(f"no door method {method!r} (valid: {valid})")
        self._faults.setdefault(method, []).append((error, times))

    def end_job(
        self,
        job_id: int,
        state: JobState | str,
        *,
        exit_code: int = 0,
        signal: int = 0,
        state_text: str = "",
        shows_base_state: bool = False,
    ) -> None:
        """The job's run ended: slurmctld shows COMPLETING with the ending's reason (as
        while EpilogSlurmctld runs), accounting the final state, e.g. 'CANCELLED by 0'.
        `shows_base_state`: as `scontrol --json` (24.05+), the state under COMPLETING is
        known too; the text form shows COMPLETING alone."""
        final = JobState.parse(str(state))
        job = replace(self.jobs[job_id], exit_code=exit_code, exit_signal=signal)
        self.accounting[job_id] = replace(
            _accounted(job), state=final, state_text=state_text or final.value
        )
        reason = _ENDING_REASON.get(final, "None")
        self.jobs[job_id] = replace(
            job,
            state=JobState.COMPLETING,
            state_reason=reason,
            base_state=final if shows_base_state else JobState.UNKNOWN,
        )

    def requeue_after_prolog_failure(self, job_id: int, *, shows_base_state: bool) -> None:
        """Slurm requeued the job itself (a Prolog failed) before EpilogSlurmctld runs: the
        controller shows COMPLETING with 0:0 and the next run's restart count; accounting
        has the run that ended as REQUEUED (NODE_FAIL on 22.05)."""
        job = self.jobs[job_id]
        self.accounting[job_id] = replace(
            _accounted(job), state=JobState.REQUEUED, state_text="REQUEUED"
        )
        self.jobs[job_id] = replace(
            job,
            state=JobState.COMPLETING,
            base_state=JobState.PENDING if shows_base_state else JobState.UNKNOWN,
            state_reason="None",
            restart_count=job.restart_count + 1,
        )

    def finish_expedited_requeue(self, job_id: int, *, epilog_failed: bool) -> None:
        """Slurm 25.11 ends an expedited requeue once every Epilog and EpilogSlurmctld ended:
        restarted at once when an Epilog failed (pending here), else requeued held."""
        job = self.jobs[job_id]
        self.accounting[job_id] = replace(
            _accounted(job), state=JobState.REQUEUED, state_text="REQUEUED"
        )
        self.jobs[job_id] = replace(
            job,
            state=JobState.PENDING if epilog_failed else JobState.REQUEUE_HOLD,
            state_reason="None" if epilog_failed else "job_requeued_in_held_state",
            restart_count=job.restart_count + 1,
            start_time=None,
        )

    def drain_as_admin(self, node: str, reason: str, user: str = "admin", uid: int = 1000) -> None:
        """An operator's drain, done outside slurm-triage (not recorded as a call)."""
        self._record_down(self.node_table[node], reason, f"{user}({uid})")
        self.node_table[node] = _drained(self.node_table[node], reason, user)
        self._admin_drained.add(node)

    def fail_epilog(self, node: str) -> None:
        """A node's Epilog exited non-zero: slurmctld drains it as SlurmUser with its fixed
        reason (not an operator's drain; not recorded as a call)."""
        self._record_down(self.node_table[node], "Epilog error", "slurm(64030)")
        self.node_table[node] = _drained(self.node_table[node], "Epilog error", "slurm")

    def issue_reboot(self, node: str) -> None:
        """slurmctld sends a requested reboot (the node has no jobs left): DOWN + DRAIN +
        REBOOT_ISSUED, " : reboot issued" appended to the reason by SlurmUser
        (controller.c, set_node_reason)."""
        current = self.node_table[node]
        if NodeFlag.REBOOT_REQUESTED not in current.flags:
            raise ValueError(f"{node}: no reboot requested")
        if current.state in ("ALLOCATED", "MIXED"):
            raise ValueError(f"{node}: slurmctld waits for its jobs to end")
        flags = (current.flags - {NodeFlag.REBOOT_REQUESTED}) | {NodeFlag.REBOOT_ISSUED}
        self.node_table[node] = replace(
            current,
            state="DOWN",
            flags=flags,
            reason=_appended(current.reason, "reboot issued"),
            reason_user="slurm",
        )

    def complete_reboot(self, node: str, boot_time: int | None = None) -> None:
        """slurmd registered after the reboot, which asked no next state: IDLE, DRAIN kept,
        the reboot flags cleared, the reason unchanged, a newer boot time (node_mgr.c
        validate_node_specs). Issues the reboot first if it was only requested. A node
        whose reboot timed out boots late the same way."""
        if NodeFlag.REBOOT_REQUESTED in self.node_table[node].flags:
            self.issue_reboot(node)
        current = self.node_table[node]
        timed_out = current.reason.endswith(": reboot timed out")
        if NodeFlag.REBOOT_ISSUED not in current.flags and not timed_out:
            raise ValueError(f"{node}: no reboot issued")
        booted = boot_time or max(int(self.clock().timestamp()), (current.boot_time or 0) + 1)
        self.node_table[node] = replace(
            current, state="IDLE", flags=current.flags - {NodeFlag.REBOOT_ISSUED}, boot_time=booted
        )

    def time_out_reboot(self, node: str) -> None:
        """The node did not come back within ResumeTimeout (25.11's check_node_timers):
        DOWN, REBOOT_ISSUED cleared, DRAIN kept, " : reboot timed out" appended. Issues the
        reboot first if it was only requested."""
        if NodeFlag.REBOOT_REQUESTED in self.node_table[node].flags:
            self.issue_reboot(node)
        current = self.node_table[node]
        self.node_table[node] = replace(
            current,
            state="DOWN",
            flags=current.flags - {NodeFlag.REBOOT_ISSUED},
            reason=_appended(current.reason, "reboot timed out"),
            reason_user="slurm",
        )

    def usable_by(self, node: str, reservation: str | None = None) -> bool:
        """Whether slurmctld would start a job (of `reservation`, or of none) on the node:
        in service, and a node in an active reservation only for that reservation's jobs."""
        info = self.node_table[node]
        if not info.responding or info.drained or info.reboot_pending:
            return False
        now = self.clock().timestamp()
        holding = {
            r.name for r in self.reservation_table.values() if node in r.nodes and r.active(now)
        }
        return reservation in holding if reservation or holding else True

    def start_job(self, job_id: int) -> None:
        """The scheduler starts a pending job on its required nodes, if they are usable by
        it (its reservation); ValueError if slurmctld would not."""
        job = self.jobs[job_id]
        reservation = self.job_reservation.get(job_id)
        if job.state is not JobState.PENDING or not all(
            self.usable_by(n, reservation) for n in job.required_nodes
        ):
            raise ValueError(f"job {job_id} cannot start now")
        self.jobs[job_id] = replace(
            job, state=JobState.RUNNING, state_reason="None", nodes=job.required_nodes
        )
        for name in job.required_nodes:
            self.node_table[name] = replace(self.node_table[name], state="ALLOCATED")

    def methods(self) -> list[str]:
        return [c.method for c in self.calls]

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def mutations(self) -> list[Call]:
        """The calls that would change something in Slurm."""
        return [c for c in self.calls if c.method in MUTATING]

    # -- the door ------------------------------------------------------------------------

    def job(self, job_id: int) -> JobInfo:
        self._enter("job", job_id)
        if job_id in self.jobs:
            return self.jobs[job_id]
        return self._accounted(job_id)  # slurmctld forgot it; accounting may know

    def accounted_job(self, job_id: int) -> JobInfo:
        self._enter("accounted_job", job_id)
        return self._accounted(job_id)

    def nodes(self, names: Iterable[str] | None = None) -> tuple[NodeInfo, ...]:
        wanted = None if names is None else list(dict.fromkeys(names))
        self._enter("nodes", None if wanted is None else tuple(wanted))
        if wanted is None:
            return tuple(self.node_table.values())
        missing = [n for n in wanted if n not in self.node_table]
        if missing:
            raise NodeNotFound(f"unknown node(s): {','.join(sorted(missing))}")
        return tuple(self.node_table[n] for n in wanted)

    def node_events(self, since: datetime, until: datetime | None = None) -> NodeEventLog:
        self._enter("node_events", since, until)
        # The same selection slurmdbd makes, whatever the order of since and until.
        found = sorted(iter_overlapping(tuple(self.events), since, until), key=_event_order)
        return NodeEventLog(tuple(found))

    def accounting_text(
        self, since: datetime, until: datetime | None, fields: Sequence[str]
    ) -> str:
        self._enter("accounting_text", since, until, tuple(fields))
        accounting_argv(since, until, fields)  # the command line's refusal of odd fields
        end_of_window = until or self.clock()
        lines = [
            "|".join(record.get(f, "") for f in fields) + "\n"
            for record in self.sacct_records
            if _overlaps(record, since, end_of_window)
        ]
        return "".join(lines)

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        self._enter("requeue", job_id, hold=hold)
        verb = "requeuehold" if hold else "requeue"
        spec = self._controller_job(job_id, f"scontrol {verb} {job_id}").whole_job_spec
        command = f"scontrol {verb} {spec}"
        if "+" in spec:  # job_requeue2 reads a number, optionally `_task`
            raise JobNotFound(f"{command}: Invalid job id specified")
        addressed = self._addressed(spec, command)
        named = self.jobs.get(int(spec)) if spec.isdigit() else None
        if named is not None and named.het_job_id not in (None, named.job_id):
            raise SlurmCommandError(f"{command}: Job not heterogeneous job leader")
        _each(addressed, lambda job: self._requeue_one(job, hold, command))

    def _requeue_one(self, job: JobInfo, hold: bool, command: str) -> None:
        job_id = job.job_id
        if not (job.batch and job.requeue):
            raise NotRequeueable(
                f"{command}: Requested operation is presently disabled for job {job_id}"
            )
        if job.state is JobState.PENDING:
            raise InvalidJobState(f"{command}: Job is pending execution")
        self.jobs[job_id] = replace(
            job,
            state=JobState.PENDING,
            state_reason="JobHeldAdmin" if hold else "BeginTime",
            restart_count=job.restart_count + 1,
            start_time=None,
        )
        # slurmctld sends the next run's record only once the job is eligible (a held one
        # never is; a requeued one waits for its begin time): until then `sacct -X` shows the
        # ended run as REQUEUED, and `sacctmgr modify job` changes that record (seen on 22.05,
        # also for a job cancelled while it waited: no later record is written).
        if job_id in self.accounting:
            self.accounting[job_id] = replace(self.accounting[job_id], state=JobState.REQUEUED)

    def hold(self, job_id: int) -> None:
        self._enter("hold", job_id)
        spec = self._controller_job(job_id, f"scontrol hold {job_id}").whole_job_spec
        for job in self._addressed(spec, f"scontrol hold {spec}"):
            # Slurm answers 0 for a job past pending too (it only zeroes its priority).
            if job.state is JobState.PENDING:
                self.jobs[job.job_id] = replace(job, state_reason="JobHeldAdmin")

    def release(self, job_id: int) -> None:
        self._enter("release", job_id)
        spec = self._controller_job(job_id, f"scontrol release {job_id}").whole_job_spec
        command = f"scontrol release {spec}"
        _each(self._addressed(spec, command), lambda job: self._release_one(job, command))

    def _release_one(self, job: JobInfo, command: str) -> None:
        if job.state not in (JobState.PENDING, JobState.REQUEUE_HOLD):
            raise InvalidJobState(f"{command}: Job is no longer pending execution")
        self.jobs[job.job_id] = replace(job, state=JobState.PENDING, state_reason="None")

    def cancel(self, job_id: int) -> None:
        self._enter("cancel", job_id)
        known = self.jobs.get(job_id)
        if known is None:
            return  # scancel exits 0 for an ended or unknown job when it sends SIGKILL
        spec = known.whole_job_spec
        if (
            spec == str(job_id)
            and known.array_job_id not in (None, job_id)
            and self._before((23, 2, 6))
        ):
            # 22.05's job_str_signal looks for tasks of an array with this number, finds
            # none and answers "already done": nothing is signalled, scancel exits 0.
            return
        command = f"scancel {spec}"
        named = self.jobs.get(int(spec)) if spec.isdigit() else None
        if (
            named is not None
            and named.het_job_id not in (None, named.job_id)
            and named.state is JobState.PENDING
        ):
            raise SlurmCommandError(
                f"{command}: Operation not permitted on individual component of heterogeneous job"
            )
        for job in self._addressed(spec, command):
            if not job.state.finished:
                self.jobs[job.job_id] = replace(job, state=JobState.CANCELLED, state_reason="None")

    def set_excluded_nodes(
        self, job_id: int, nodes: Iterable[str], *, merge: bool = True
    ) -> tuple[str, ...]:
        wanted = list(dict.fromkeys(nodes))
        self._enter("set_excluded_nodes", job_id, tuple(wanted), merge=merge)
        leader = self._controller_job(job_id, f"scontrol update JobId={job_id} ...").het_job_id
        if leader is not None:
            # As the CLI door: every component (`L+O` each), each with its own exclusions.
            parts = sorted(
                (j for j in self.jobs.values() if j.het_job_id == leader),
                key=lambda j: j.het_job_offset or 0,
            )
            merged = {p.job_id: self._exclude(p.job_id, wanted, merge) for p in parts}
            return merged[job_id]
        return self._exclude(job_id, wanted, merge)

    def _exclude(self, job_id: int, wanted: list[str], merge: bool) -> tuple[str, ...]:
        job = self._pending_job(job_id, "ExcNodeList")
        unknown = [n for n in wanted if n not in self.node_table]
        if unknown:
            raise NodeNotFound(f"scontrol update JobId={job_id} ...: Invalid node name specified")
        if merge:
            wanted = list(dict.fromkeys([*job.excluded_nodes, *wanted]))

        def exclude(record: JobInfo) -> JobInfo:
            record = replace(record, excluded_nodes=tuple(wanted))
            if set(wanted) & set(record.required_nodes):
                # Slurm takes the update, and the job can then never start.
                record = replace(record, state_reason="BadConstraints")
            return record

        self._update(job_id, "ExcNodeList", exclude)
        return tuple(wanted)

    def set_begin_time(self, job_id: int, delay_s: float) -> None:
        self._enter("set_begin_time", job_id, delay_s)
        self._pending_job(job_id, "StartTime")
        # A het job's by its leader's number: every component (update_job_str).
        whole = self._controller_job(job_id, f"scontrol update JobId={job_id} ...").whole_job_spec
        for record in self._addressed(whole, f"scontrol update JobId={whole} StartTime=..."):
            self._update(record.job_id, "StartTime", lambda record: record)

    def set_admin_comment(self, job_id: int, text: str) -> None:
        self._enter("set_admin_comment", job_id, text)
        if "\n" in text:
            raise SlurmCommandError("AdminComment must be one line")
        self._controller_job(job_id, f"scontrol update JobId={job_id} ...")
        self._update(job_id, "AdminComment", lambda record: replace(record, admin_comment=text))

    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        """As sacctmgr: the latest run's record in accounting; its value lowercased and its
        quotes turned into backticks (strip_quotes in sacctmgr/common.c). `JobID=N` selects
        job N, every task of array N and every component of het job N; `A_T` and `L+O` one
        record (as_mysql_jobacct_process.c, 22.05 and 25.11)."""
        self._enter("set_accounted_admin_comment", job_id, text)
        if "\n" in text:
            raise SlurmCommandError("AdminComment must be one line")
        if job_id not in self.accounting:
            raise NotYetAccounted(f"sacctmgr modify job {job_id}: Nothing modified")
        spec = self.accounting[job_id].record_spec
        mangled = text.lower().replace('"', "`").replace("'", "`")
        for record in list(self.accounting.values()):
            if _accounting_selects(spec, record):
                self.accounting[record.job_id] = replace(record, admin_comment=mangled)

    def drain(self, node: str, reason: str) -> None:
        self._enter("drain", node, reason)
        current = self._node(node)
        reason = " ".join(reason.split())
        if not reason:
            raise SlurmCommandError("a drain needs a reason")
        self._watch_admin_drain(current)
        self._record_down(current, reason, f"{self.actor}({self.actor_uid})")
        self.node_table[node] = _drained(current, reason, self.actor)

    def set_node_comment(self, node: str, text: str) -> None:
        self._enter("set_node_comment", node, text)
        self.node_table[node] = replace(self._node(node), comment=" ".join(text.split()))

    def resume(self, node: str) -> None:
        self._enter("resume", node)
        current = self._node(node)
        if not current.drained and current.state not in ("DOWN", "FAIL"):
            raise SlurmCommandError(
                f"scontrol update NodeName={node} ...: Invalid node state specified"
            )
        self._watch_admin_drain(current)
        self._admin_drained.discard(node)
        self._close_event(node)
        # State=RESUME clears DRAIN, FAIL and a pending reboot, and a node powering down is
        # taken as powered down (node_mgr.c update_node, 22.05 and 25.11).
        flags = current.flags - {NodeFlag.DRAIN, NodeFlag.FAIL, *_REBOOT_FLAGS}
        if "POWERING_DOWN" in flags:
            flags = (flags - {"POWERING_DOWN"}) | {NodeFlag.POWERED_DOWN}
        state = "IDLE" if current.state in ("DOWN", "FAIL") else current.state
        self.node_table[node] = replace(
            current, state=state, flags=flags, reason="", reason_user="", reason_time=None
        )

    def reboot(self, node: str, reason: str) -> None:
        self._enter("reboot", node, reason)
        current = self._node(node)
        reason = arguments.one_line(reason)
        if not self.reboot_program:
            raise SlurmCommandError("scontrol reboot: RebootProgram isn't defined")
        if current.reboot_pending:
            return  # slurmctld skips it ("Skipping reboot of nodes ..."), rc 0
        self._watch_admin_drain(current)
        self._record_down(current, reason, f"{self.actor}({self.actor_uid})")
        drained = replace(
            _drained(current, reason, self.actor), reason_time=int(self.clock().timestamp())
        )
        # The CLI door's drain goes through; slurmctld skips the reboot itself with rc 0 for
        # a node powered down or powering down (proc_req.c, 22.05 and 25.11).
        skipped = bool(_POWER_DOWN_FLAGS & current.flags)
        flags = drained.flags if skipped else drained.flags | {NodeFlag.REBOOT_REQUESTED}
        self.node_table[node] = replace(drained, flags=flags)

    def reservations(self) -> tuple[ReservationInfo, ...]:
        self._enter("reservations")
        return tuple(self.reservation_table[n] for n in sorted(self.reservation_table))

    def create_reservation(
        self, name: str, node: str, duration_s: int, users: Sequence[str]
    ) -> None:
        self._enter("create_reservation", name, node, duration_s, tuple(users))
        arguments.plain_name(name, "reservation name")
        user_text = arguments.user_list(users)
        minutes = arguments.duration_min(duration_s)
        if node not in self.node_table:
            raise NodeNotFound("Error creating the reservation: Invalid node name specified")
        if name in self.reservation_table:
            raise SlurmCommandError("Error creating the reservation: Duplicate reservation name")
        start = int(self.clock().timestamp())
        # MAINT may overlap other reservations; Nodes= adds SPEC_NODES (reservation.c).
        self.reservation_table[name] = ReservationInfo(
            name=name,
            nodes=(node,),
            start_time=start,
            end_time=start + minutes * 60,
            flags=frozenset({"MAINT", "IGNORE_JOBS", "SPEC_NODES"}),
            users=tuple(user_text.split(",")),
        )
        current = self.node_table[node]
        self.node_table[node] = replace(current, flags=current.flags | {NodeFlag.MAINTENANCE})

    def delete_reservation(self, name: str) -> None:
        self._enter("delete_reservation", name)
        command = f"delete_reservation ReservationName={name}"
        if name not in self.reservation_table:
            raise ReservationNotFound(f"{command}: Requested reservation is invalid")
        running = [
            j
            for j, r in self.job_reservation.items()
            if r == name and self.jobs[j].state in (JobState.RUNNING, JobState.COMPLETING)
        ]
        if running:
            raise SlurmCommandError(f"{command}: Requested reservation is in use")
        for node in self.reservation_table.pop(name).nodes:
            current = self.node_table[node]
            self.node_table[node] = replace(current, flags=current.flags - {NodeFlag.MAINTENANCE})

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
        self._enter(
            "submit_burn_in",
            node,
            reservation,
            tuple(command),
            job_name=job_name,
            output=output,
            time_limit_min=time_limit_min,
        )
        failed = "sbatch: error: Batch job submission failed"
        if reservation not in self.reservation_table:
            raise ReservationNotFound(f"{failed}: Requested reservation is invalid")
        if node not in self.node_table:
            raise NodeNotFound(f"{failed}: Invalid node name specified")
        if node not in self.reservation_table[reservation].nodes:
            raise SlurmCommandError(f"{failed}: Requested node configuration is not available")
        job_id = self._next_job_id
        self._next_job_id += 1
        self.jobs[job_id] = job_info(
            job_id,
            state=JobState.PENDING,
            state_reason="None",
            nodes=(),
            required_nodes=(node,),
            num_nodes=1,
            requeue=False,
            user=self.actor,
            uid=self.actor_uid,
            time_limit_min=time_limit_min,
            std_out=output,
            std_err=output,
            partition=(self.node_table[node].partitions or ("",))[0],
        )
        self.job_reservation[job_id] = reservation
        return job_id

    def set_node_weight(self, node: str, weight: int) -> None:
        self._enter("set_node_weight", node, weight)
        current = self._node(node)
        self.node_table[node] = replace(current, weight=arguments.weight(weight))

    def set_node_features(self, node: str, available: Sequence[str], active: Sequence[str]) -> None:
        self._enter("set_node_features", node, tuple(available), tuple(active))
        current = self._node(node)
        arguments.feature_list(available)
        arguments.feature_list(active)
        arguments.active_subset(available, active)
        self.node_table[node] = replace(
            current,
            features=tuple(dict.fromkeys(available)),
            active_features=tuple(dict.fromkeys(active)),
        )

    def slurm_version(self) -> str:
        self._enter("slurm_version")
        return self.version

    # -- internals -----------------------------------------------------------------------

    def _enter(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Record the call, then raise its injected fault, if one is pending."""
        call = Call(method, args, kwargs)
        self.calls.append(call)
        faults = self._faults.get(method)
        if not faults:
            return
        error, times = faults[0]
        if times is not None:
            if times <= 1:
                faults.pop(0)
            else:
                faults[0] = (error, times - 1)
        raise error

    def _accounted(self, job_id: int) -> JobInfo:
        if job_id in self.accounting:
            return self.accounting[job_id]
        if job_id in self.jobs:
            return _accounted(self.jobs[job_id])
        raise JobNotFound(f"job {job_id}: not known to slurmctld or accounting")

    def _controller_job(self, job_id: int, command: str) -> JobInfo:
        if job_id not in self.jobs:
            raise JobNotFound(f"{command}: Invalid job id specified")
        return self.jobs[job_id]

    def _addressed(self, spec: str, command: str) -> list[JobInfo]:
        """The jobs slurmctld acts on for a job spec (job_mgr.c job_requeue2, update_job_str,
        job_str_signal; 22.05 and 25.11): `A_T` that array task, `L+O` that het job
        component, a number its own job, except that the number an array task shares with
        its array is every task of the array, and a het leader's every component."""
        match = re.fullmatch(r"(\d+)(?:_(\d+)|\+(\d+))?", spec)
        number = int(match[1]) if match else 0
        named = self.jobs.get(number)
        if match is None:
            found = []
        elif match[2] is not None:
            task = (number, int(match[2]))
            found = [j for j in self.jobs.values() if (j.array_job_id, j.array_task_id) == task]
        elif match[3] is not None:
            part = (number, int(match[3]))
            found = [j for j in self.jobs.values() if (j.het_job_id, j.het_job_offset) == part]
        elif named is not None and named.het_job_id == number:
            found = [j for j in self.jobs.values() if j.het_job_id == number]
        elif named is not None and named.array_job_id == number:
            found = [j for j in self.jobs.values() if j.array_job_id == number]
        else:
            found = [named] if named is not None else []
        if not found:
            raise JobNotFound(f"{command}: Invalid job id specified")
        return found

    def _update(self, job_id: int, what: str, change: Callable[[JobInfo], JobInfo]) -> None:
        """`scontrol update JobId=<the job's record_spec> <what>=...`: each record the spec
        addresses changed, each refused alone as slurmctld does (a finished job takes no
        update; exclusions and begin times need a pending one), the first refusal raised."""
        spec = self._controller_job(job_id, f"scontrol update JobId={job_id} ...").record_spec
        command = f"scontrol update JobId={spec} {what}=..."

        def one(record: JobInfo) -> None:
            # slurmctld judges the base state (IS_JOB_FINISHED): a COMPLETING job has ended,
            # unless Slurm already requeued it (PENDING under COMPLETING).
            ended = (
                record.state is JobState.COMPLETING and record.base_state is not JobState.PENDING
            )
            if record.state.finished or ended:
                raise InvalidJobState(f"{command}: Job has already finished")
            if what != "AdminComment" and record.state not in (
                JobState.PENDING,
                JobState.REQUEUE_HOLD,
            ):
                raise SlurmCommandError(f"{command}: Job is no longer pending execution")
            self.jobs[record.job_id] = change(record)

        _each(self._addressed(spec, command), one)

    def _before(self, release: tuple[int, int, int]) -> bool:
        """Whether this Slurm's version is older than `release` (major, minor, micro)."""
        parts = tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])
        return parts < release

    def _pending_job(self, job_id: int, what: str) -> JobInfo:
        command = f"scontrol update JobId={job_id} {what}=..."
        job = self._controller_job(job_id, command)
        if job.state.finished or job.state is JobState.COMPLETING:
            raise InvalidJobState(f"{command}: Job has already finished")
        if job.state not in (JobState.PENDING, JobState.REQUEUE_HOLD):
            raise SlurmCommandError(f"{command}: Job is no longer pending execution")
        return job

    def _node(self, name: str) -> NodeInfo:
        if name not in self.node_table:
            raise NodeNotFound(f"scontrol update NodeName={name} ...: Invalid node name specified")
        return self.node_table[name]

    def _record_down(self, node: NodeInfo, reason: str, user: str) -> None:
        """slurmdbd's node event for a drain (as_mysql_node_down): nothing when the open
        event has the same state and reason, else it is closed and a new one opened."""
        busy = node.state in ("ALLOCATED", "MIXED") or NodeFlag.COMPLETING in node.flags
        state = "DRNG" if busy else "DRAIN"
        open_now = [e for e in self.events if e.node == node.name and e.end is None]
        if open_now and (open_now[-1].state, open_now[-1].reason) == (state, reason):
            return
        now = self.clock()
        self._close_event(node.name, now)
        self.events.append(NodeEvent(node.name, now, None, state, reason, user))

    def _close_event(self, node: str, when: datetime | None = None) -> None:
        """A node back in service (as_mysql_node_up) ends its open event."""
        when = when or self.clock()
        self.events = [
            replace(e, end=when) if e.node == node and e.end is None else e for e in self.events
        ]

    def _watch_admin_drain(self, node: NodeInfo) -> None:
        if node.name in self._admin_drained:
            self.admin_drains_touched.append(self.calls[-1])


def _each(jobs: Iterable[JobInfo], act: Callable[[JobInfo], None]) -> None:
    """Act on every job; slurmctld answers each task of an array apart, and scontrol exits
    non-zero with the first failure: raised once all were tried."""
    errors: list[Exception] = []
    for job in jobs:
        try:
            act(job)
        except SlurmCommandError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def _accounting_selects(spec: str, record: JobInfo) -> bool:
    """Whether `sacctmgr modify job where JobID=<spec>` changes the record: `A_T` and `L+O`
    name one; a number N is job N, every task of array N and every component of het job N."""
    if "_" in spec or "+" in spec:
        return record.record_spec == spec
    number = int(spec)
    return number in (record.job_id, record.array_job_id, record.het_job_id)


def _accounted(job: JobInfo) -> JobInfo:
    """The job as sacct shows it: no requeue flag, no exclusions or required nodes, no
    controller reason."""
    return replace(
        job,
        requeue=False,
        excluded_nodes=(),
        required_nodes=(),
        state_reason="",
        source="sacct",
    )


def _sacct_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None  # Unknown, None, "": not (yet) known


def _overlaps(record: Mapping[str, str], since: datetime, until: datetime) -> bool:
    """sacct -S/-E without a state: the records whose run (or wait) overlaps the window."""
    began = _sacct_time(record.get("Start", "")) or _sacct_time(record.get("Submit", ""))
    ended = _sacct_time(record.get("End", ""))
    return (began is None or began <= until) and (ended is None or ended >= since)


def _event_order(event: NodeEvent) -> tuple[datetime, str]:
    return (event.start, event.node)


def _appended(reason: str, message: str) -> str:
    """slurmctld's set_node_reason: " : message" added once, or the message alone."""
    if not reason:
        return message
    return reason if f" : {message}" in reason else f"{reason} : {message}"


_REBOOT_FLAGS = frozenset({NodeFlag.REBOOT_REQUESTED, NodeFlag.REBOOT_ISSUED})
_POWER_DOWN_FLAGS = frozenset({"POWER_DOWN", "POWERED_DOWN", "POWERING_DOWN"})


def _drained(node: NodeInfo, reason: str, user: str) -> NodeInfo:
    """State=DRAIN: sets DRAIN and clears FAIL (node_mgr.c update_node)."""
    return replace(
        node,
        flags=(node.flags - {NodeFlag.FAIL}) | {NodeFlag.DRAIN},
        reason=reason,
        reason_user=user,
        reason_time=0,
    )
