"""What the Slurm door returns: frozen facts about jobs and nodes, backend-independent."""

from __future__ import annotations

import enum
from datetime import datetime

from slurm_triage.frozen import Frozen
from slurm_triage.job_state import JobState


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
