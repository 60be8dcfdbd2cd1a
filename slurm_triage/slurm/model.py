"""What the Slurm door returns: frozen facts about jobs and nodes, backend-independent."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TypedDict

from slurm_triage.frozen import Frozen
from slurm_triage.job_state import JobState
from slurm_triage.slurm.errors import SlurmCommandError


class ArrayAndHetIds(TypedDict):
    """JobInfo's array task and het job fields, as a reader of Slurm's output fills them in
    (`JobInfo(..., **ids)`)."""

    array_job_id: int | None
    array_task_id: int | None
    het_job_id: int | None
    het_job_offset: int | None


class JobInfo(Frozen):
    """One job as Slurm sees it now (from slurmctld, or from accounting once it is gone).

    `exit_code`/`exit_signal` follow Slurm's `ExitCode=code:signal`. `time_limit_min` is
    None for UNLIMITED. `excluded_nodes` and `required_nodes` (sbatch -w/--nodelist: an
    exclusion naming one of them leaves the job pending for ever with BadConstraints) are
    expanded names. `source` says where the facts came from ("scontrol", "sacct" or
    "pyslurm"), since accounting lags the controller.
    """

    job_id: int
    state: JobState
    state_reason: str
    exit_code: int
    exit_signal: int
    nodes: tuple[str, ...]
    excluded_nodes: tuple[str, ...]
    restart_count: int
    requeue: bool
    batch: bool
    user: str
    uid: int | None
    partition: str
    num_nodes: int
    time_limit_min: int | None
    admin_comment: str
    comment: str
    source: str
    state_text: str = ""  # Slurm's own words, e.g. "CANCELLED by 0" (accounting)
    std_out: str = ""  # the batch script's output file, as slurmctld expanded it
    std_err: str = ""
    batch_host: str = ""
    start_time: float | None = None  # epoch seconds this run started (None: not started)
    required_nodes: tuple[str, ...] = ()  # ReqNodeList; accounting does not keep it
    # sbatch --requeue=expedite (Slurm 25.11+, `ExpeditedRequeue=Yes`): Slurm itself requeues
    # the job at once when one of its node Epilogs failed, and requeues it held otherwise.
    expedited_requeue: bool = False
    # The base state under Slurm's flags where the source reports it (`scontrol --json`,
    # 24.05+): while a job is COMPLETING, COMPLETED for a clean end, CANCELLED, FAILED, ...,
    # or PENDING when Slurm has already requeued the run that ended (its Prolog failed, a
    # node failed). The text form and pyslurm show a flag in its place: UNKNOWN then.
    base_state: JobState = JobState.UNKNOWN
    # An array task (sbatch --array): the array's id and this task's index (ArrayJobId=,
    # ArrayTaskId=; sacct's JobID `A_T`), both None for any other job. A record of tasks
    # still pending together has the array's id and no task id.
    array_job_id: int | None = None
    array_task_id: int | None = None
    # A heterogeneous job's component: its leader's job id and its offset (HetJobId=,
    # HetJobOffset=; sacct's `L+O`; the leader is offset 0), both None for any other job.
    het_job_id: int | None = None
    het_job_offset: int | None = None

    @property
    def record_spec(self) -> str:
        """How Slurm's commands name this job's own record and no other: `A_T` for an array
        task, `L+O` for a het job component, else the number. A number alone is the whole
        array when it is the array's id, which one task always has as its own (the last to
        start keeps the array's record: job_mgr.c job_array_post_sched), and every
        component when it is a het leader's (job_requeue2, update_job_str, job_str_signal,
        and sacctmgr's job selection, 22.05 to 25.11). Raises SlurmCommandError for a record
        of an array's pending tasks, which no such name covers."""
        if self.array_job_id is not None:
            if self.array_task_id is None:
                raise SlurmCommandError(
                    f"job {self.job_id} holds pending tasks of array {self.array_job_id}, "
                    "not one task: act on them with scontrol"
                )
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.het_job_id is not None:
            return f"{self.het_job_id}+{self.het_job_offset or 0}"
        return str(self.job_id)

    @property
    def whole_job_spec(self) -> str:
        """What Slurm requeues, holds, releases and cancels as one job: a het job's leader
        for any component (Slurm requeues a het job whole and refuses a component, "Job not
        heterogeneous job leader"; a pending component cannot be cancelled alone), else the
        record itself."""
        if self.het_job_id is not None:
            return str(self.het_job_id)
        return self.record_spec


class NodeFlag(enum.StrEnum):
    """The node state flags we act on; others are kept as text in NodeInfo.other_flags."""

    DRAIN = "DRAIN"
    NOT_RESPONDING = "NOT_RESPONDING"
    MAINTENANCE = "MAINTENANCE"
    REBOOT_REQUESTED = "REBOOT_REQUESTED"  # `scontrol reboot` asked, not yet sent to slurmd
    REBOOT_ISSUED = "REBOOT_ISSUED"  # sent: the node shows DOWN until slurmd registers again
    POWERED_DOWN = "POWERED_DOWN"
    COMPLETING = "COMPLETING"
    FAIL = "FAIL"


class NodeInfo(Frozen):
    """One node: base state (IDLE, ALLOCATED, MIXED, DOWN, ...), flags and the admin reason.

    `weight` is Slurm's scheduling Weight (lower is used first; None when the source does
    not say), `features` the available features and `active_features` the active ones
    (AvailableFeatures=/ActiveFeatures=), `boot_time` when slurmd last reported a boot
    (epoch seconds; a newer one after `scontrol reboot` means the reboot happened)."""

    name: str
    state: str
    flags: frozenset[str]
    reason: str
    reason_user: str
    reason_time: int | None
    partitions: tuple[str, ...] = ()
    comment: str = ""
    weight: int | None = None
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    boot_time: int | None = None

    @property
    def drained(self) -> bool:
        """Drain requested (DRAINING while jobs run, DRAINED when idle)."""
        return NodeFlag.DRAIN in self.flags

    @property
    def failed(self) -> bool:
        """Set to FAIL (`scontrol update state=FAIL`): a flag over the base state in Slurm's
        JSON (["IDLE", "FAIL"], node_mgr.c), the compact state FAIL/FAILG in text."""
        return NodeFlag.FAIL in self.flags or self.state in ("FAIL", "FAILG")

    @property
    def responding(self) -> bool:
        return (
            self.state not in ("DOWN", "UNKNOWN", "FUTURE")
            and NodeFlag.NOT_RESPONDING not in self.flags
        )

    @property
    def label(self) -> str:
        """Slurm's compact form, e.g. IDLE+DRAIN."""
        return "+".join([self.state, *sorted(self.flags)])

    @property
    def reboot_pending(self) -> bool:
        """A reboot was asked (`scontrol reboot`) and slurmd has not registered since:
        slurmctld skips a second request for such a node (proc_req.c)."""
        return bool({NodeFlag.REBOOT_REQUESTED, NodeFlag.REBOOT_ISSUED} & self.flags)

    @property
    def taken_out(self) -> bool:
        """Drained, DOWN or FAIL: slurmctld starts no job there, and its reason says who took
        it out (an admin, Slurm, or us)."""
        return self.drained or self.state == "DOWN" or self.failed

    @property
    def powered_down(self) -> bool:
        """Off by power saving (POWERED_DOWN) and not being powered up: its next boot is a
        fresh one, which a job placed there (or `scontrol power up`) starts."""
        return "POWERED_DOWN" in self.flags and "POWERING_UP" not in self.flags

    @property
    def power_changing(self) -> bool:
        """A power down asked (POWER_DOWN) or under way (POWERING_DOWN), or a power up under
        way (POWERING_UP): slurmctld skips `scontrol reboot` for the first two with no error
        (proc_req.c, 22.05 and 25.11); the flag names are node_state_flag_string's and
        data_parser's alike."""
        return bool({"POWER_DOWN", "POWERING_DOWN", "POWERING_UP"} & self.flags)


class ReservationInfo(Frozen):
    """One advance reservation (`scontrol show reservation`): its nodes (expanded), its
    window in epoch seconds (None: not given), Slurm's flags (MAINT, IGNORE_JOBS,
    SPEC_NODES, ...) and the users allowed in it. A node in an active reservation runs only
    jobs submitted with `--reservation=<name>` by those users."""

    name: str
    nodes: tuple[str, ...]
    start_time: int | None
    end_time: int | None
    flags: frozenset[str]
    users: tuple[str, ...]

    def active(self, now: float) -> bool:
        """Slurm's State=ACTIVE: start <= now <= end (reservation_info.c)."""
        return (
            self.start_time is not None
            and self.end_time is not None
            and self.start_time <= now <= self.end_time
        )

    @property
    def maintenance(self) -> bool:
        """Flags=MAINT: a maintenance reservation (its nodes carry the MAINTENANCE flag)."""
        return "MAINT" in self.flags


# Node states, as `sacctmgr show event` prints them (node_state_string_compact in Slurm's
# src/common/slurm_protocol_defs.c, 22.05 to 25.11), in which slurmctld keeps a node out of
# service: the base word before a one-character flag (`DOWN*`: not responding, `DRAIN@`:
# reboot requested, `DRNG`: draining with jobs, `FAILG`: failing with jobs, `INVAL`: the
# node registered with less than slurm.conf says, e.g. a GPU missing).
_OUT_OF_SERVICE = frozenset({"DOWN", "DRAIN", "DRNG", "FAIL", "FAILG", "INVAL"})
_STATE_FLAG_SUFFIXES = "*$^@#%~!"


class NodeEvent(Frozen):
    """One node event of Slurm's accounting (`sacctmgr show event`): slurmctld recorded the
    node leaving normal service at `start`, in `state` with `reason`, until `end` (None
    while the event is open). Times are naive local time, as Slurm prints them."""

    node: str
    start: datetime
    end: datetime | None
    state: str  # compact, e.g. DOWN*, DRAIN, DRNG, FAIL
    reason: str
    user: str  # who set it, "name(uid)"; 22.05 cuts it at 19 characters; "" when unknown
    cluster: str = ""

    @property
    def base_state(self) -> str:
        """The state word without its flag character: DOWN* -> DOWN."""
        return self.state.rstrip(_STATE_FLAG_SUFFIXES).upper()

    def takes_node_out(self) -> bool:
        """Whether slurmctld kept the node from running jobs (down, drained, failing or
        registered invalid); power saving, maintenance and reboots alone do not count."""
        return self.base_state in _OUT_OF_SERVICE


class NodeEventLog(Frozen):
    """What one read of Slurm's node events gave: the node events, how many lines could
    not be read (reported, never dropped silently), and how many cluster events (no node,
    e.g. a change of the cluster's TRES) were passed over."""

    events: tuple[NodeEvent, ...]
    unparsable: int = 0
    cluster_events: int = 0
