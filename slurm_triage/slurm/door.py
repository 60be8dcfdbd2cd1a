"""The one narrow door to Slurm: what every other part of slurm-triage may ask of it.

Two backends implement it: the Slurm command line (always available) and pyslurm (where
it is installed and built for the running Slurm). `open_door()` picks one.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from slurm_triage.slurm.model import JobInfo, NodeEventLog, NodeInfo, ReservationInfo


class SlurmDoor(abc.ABC):
    """Operations on jobs and nodes. Every call is bounded by the backend's deadline and
    raises only `SlurmError` subclasses; none returns a silent failure value.

    A job is named by its own SLURM_JOB_ID everywhere (one per array task and per het job
    component), and each job operation addresses in Slurm exactly that job: an array task
    by `A_T`, never by the number it may share with its array, and a het job's requeue,
    hold, release and cancel by its leader (JobInfo.record_spec, whole_job_spec)."""

    name: str

    @abc.abstractmethod
    def job(self, job_id: int) -> JobInfo:
        """The job from slurmctld, or from accounting (sacct) once slurmctld forgot it."""

    @abc.abstractmethod
    def accounted_job(self, job_id: int) -> JobInfo:
        """The job as Slurm's accounting (slurmdbd) recorded it; its restart count is the
        number of REQUEUED records, and the requeue flag is not recorded there."""

    @abc.abstractmethod
    def nodes(self, names: Iterable[str] | None = None) -> tuple[NodeInfo, ...]:
        """The named nodes (all nodes when None); unknown names raise NodeNotFound."""

    def node(self, name: str) -> NodeInfo:
        return self.nodes([name])[0]

    @abc.abstractmethod
    def node_events(self, since: datetime, until: datetime | None = None) -> NodeEventLog:
        """Slurm accounting's node events (down, drained, failing ...) that overlap
        [since, until] (until None: now), in local time as Slurm keeps them; the
        reliability report joins them with requeued attempts."""

    @abc.abstractmethod
    def accounting_text(
        self, since: datetime, until: datetime | None, fields: Sequence[str]
    ) -> str:
        """Slurm accounting's job allocations between since and until (None: now), every
        user's, each requeued run its own record, as sacct's parsable text: one record a
        line, `fields` in order joined by `|`, no header. The reliability report and the
        replay parse it themselves (analytics.ingest: millions of rows, free text that may
        hold `|`); a field name that is not a plain word is refused."""

    @abc.abstractmethod
    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        """Requeue a running or just-ended batch job; held jobs wait for `scontrol release`.
        An array task alone; a het job whole (Slurm requeues no component alone)."""

    @abc.abstractmethod
    def hold(self, job_id: int) -> None:
        """Hold a pending job (`scontrol hold`): it stays pending until released. An array
        task alone; a het job whole."""

    @abc.abstractmethod
    def release(self, job_id: int) -> None:
        """Release a held job (`scontrol release`): it may start again. An array task
        alone; a het job whole."""

    @abc.abstractmethod
    def cancel(self, job_id: int) -> None:
        """Cancel a job (`scancel`): pending, it never starts; running, it is ended. An
        array task alone; a het job whole (slurmctld cancels no pending component alone).
        A job that already ended, or that slurmctld no longer knows, is no error: scancel
        exits 0 for both when it sends SIGKILL (scancel.c, 22.05 and 25.11), and every
        door does the same."""

    @abc.abstractmethod
    def set_excluded_nodes(
        self, job_id: int, nodes: Iterable[str], *, merge: bool = True
    ) -> tuple[str, ...]:
        """Set a pending job's ExcNodeList; with merge, keep what is already excluded (the
        user's own --exclude). Returns the resulting list. This job's record only (an
        array task, a het job component), as for the begin time and AdminComments."""

    @abc.abstractmethod
    def set_begin_time(self, job_id: int, delay_s: float) -> None:
        """Let a pending job start no earlier than delay_s from now (Slurm's BeginTime)."""

    @abc.abstractmethod
    def set_admin_comment(self, job_id: int, text: str) -> None:
        """Replace the job's AdminComment (kept in accounting with slurmdbd)."""

    @abc.abstractmethod
    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        """Replace the AdminComment of the job's latest run in accounting (slurmdbd), for a
        job slurmctld no longer lets us update (it has ended). `sacctmgr` lowercases the
        value and turns quotes into backticks: write text that survives that."""

    @abc.abstractmethod
    def drain(self, node: str, reason: str) -> None:
        """Drain a node: running jobs finish, no new ones start; reason is required."""

    @abc.abstractmethod
    def set_node_comment(self, node: str, text: str) -> None:
        """Set a node's free-text Comment (no effect on scheduling; "" clears it)."""

    @abc.abstractmethod
    def resume(self, node: str) -> None:
        """Return a drained or down node to service."""

    @abc.abstractmethod
    def reboot(self, node: str, reason: str) -> None:
        """Drain the node with `reason`, then `scontrol reboot Reason=...` (no ASAP, no
        nextstate): REBOOT_REQUESTED; RebootProgram runs when its jobs have ended (DOWN +
        DRAIN + REBOOT_ISSUED, " : reboot issued" appended to the reason); when slurmd
        registers with a newer boot time the node is IDLE and still drained, the reason
        unchanged, on 22.05 and 25.11 alike (no next state: DRAIN kept). A node whose
        reboot is already pending is skipped by slurmctld without an error. Needs
        RebootProgram in slurm.conf."""

    @abc.abstractmethod
    def reservations(self) -> tuple[ReservationInfo, ...]:
        """Every advance reservation slurmctld knows (active or not)."""

    @abc.abstractmethod
    def create_reservation(
        self, name: str, node: str, duration_s: int, users: Sequence[str]
    ) -> None:
        """A maintenance reservation of one node from now (Flags=MAINT,IGNORE_JOBS): only
        jobs of `users` submitted with `--reservation=name` run there; duration rounds up
        to whole minutes. A taken name or an overlapping reservation is refused."""

    @abc.abstractmethod
    def delete_reservation(self, name: str) -> None:
        """Delete a reservation; unknown: ReservationNotFound; with jobs running in it:
        refused ("Requested reservation is in use")."""

    @abc.abstractmethod
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
        """Submit `command` as a batch job on `node` alone, inside `reservation`; returns
        the job id. The job is not requeued if the node fails: its end is the result."""

    @abc.abstractmethod
    def set_node_weight(self, node: str, weight: int) -> None:
        """Set a node's scheduling Weight (nodes of lower weight are allocated first)."""

    @abc.abstractmethod
    def set_node_features(self, node: str, available: Sequence[str], active: Sequence[str]) -> None:
        """Replace a node's available and active features (active must be a subset of
        available); jobs may then ask `--constraint=!feature`."""

    @abc.abstractmethod
    def slurm_version(self) -> str:
        """The running Slurm's version, e.g. '22.05.8'."""


def _accounted(job: JobInfo) -> bool:
    return job.source in ("sacct", "pyslurm-db")


class KnownJobs:
    """The jobs a door has read, by id, for how Slurm names them (JobInfo.record_spec,
    whole_job_spec). A job's array task and het job ids are fixed when it is submitted, so
    the read a decision starts from serves every operation after it; an operation on a job
    not read yet reads it once (`read`). Only those ids are used from what is kept. A door
    serves one decision, hook or command (the decider opens one per decision), far shorter
    than the time before slurmctld gives a job id out again (MaxJobId wrapping, or a new
    cluster's state)."""

    def __init__(self, read: Callable[[int], JobInfo]) -> None:
        self._read = read
        self._jobs: dict[int, JobInfo] = {}

    def remember(self, job: JobInfo) -> JobInfo:
        """Keep `job`, unless it is accounting's and slurmctld's record is kept: while a job
        ends, slurmdbd may hold a row of it not yet complete (seen on 22.05: no array task,
        user root), and a name taken from it (the bare array id) would act on every task."""
        known = self._jobs.get(job.job_id)
        if known is None or not _accounted(job) or _accounted(known):
            self._jobs[job.job_id] = job
        return job

    def __call__(self, job_id: int) -> JobInfo:
        known = self._jobs.get(job_id)
        return known if known is not None else self.remember(self._read(job_id))
