"""The Slurm door over the command line: scontrol, sinfo, sacct. Works with Slurm 22.05-25.11.

Reads use machine-readable forms where the installed Slurm has working ones: nodes come from
`scontrol --json show nodes` from 23.02 on and from `sinfo --json` on 22.05 (which has no
`scontrol --json`, while 23.02+ sinfo prints another document); jobs from `sacct -P` and
from `scontrol --json show job` on 24.05+ and the text form before, with a parser that is
safe against user-controlled text (see parse.parse_scontrol_job). The version deciding
this is the client's (`scontrol --version`, asked once per door): the clients print the
documents we parse. Every command runs with SLURM_TIME_FORMAT=standard (runner.PINNED_ENV):
the parsers read ISO local time whatever the caller's environment asks for.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Iterable, Sequence
from datetime import datetime

from slurm_triage import hostlist
from slurm_triage.logs import get_logger
from slurm_triage.slurm import arguments, events, parse, reservations
from slurm_triage.slurm.arguments import MAX_REASON_CHARS
from slurm_triage.slurm.door import KnownJobs, SlurmDoor
from slurm_triage.slurm.errors import (
    JobNotFound,
    NodeNotFound,
    SlurmCommandError,
    SlurmOutputError,
)
from slurm_triage.slurm.model import JobInfo, NodeEventLog, NodeInfo, ReservationInfo
from slurm_triage.slurm.runner import Runner

log = get_logger(component="slurm.cli")

# `scontrol --json` (data_parser v0.0.39) and `sinfo --json`'s {"sinfo": [...]} both
# arrived in 23.02.
SCONTROL_JSON_SINCE = (23, 2)
# Jobs as JSON from data_parser v0.0.41 (24.05), the first to print the expanded output
# paths (`stdout_expanded`); before, the text form is parsed.
SCONTROL_JOB_JSON_SINCE = (24, 5)
# sacct -S/-E take local time in this form on every release.
SACCT_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"


def _resolver(bin_dir: str, env: dict[str, str] | None):  # type: ignore[no-untyped-def]
    path = (env or os.environ).get("PATH")

    def resolve(name: str) -> str:
        if bin_dir:
            return os.path.join(bin_dir, name)
        found = shutil.which(name, path=path) or shutil.which(name, path="/usr/bin:/usr/sbin")
        return found or name

    return resolve


def accounting_argv(since: datetime, until: datetime | None, fields: Sequence[str]) -> list[str]:
    """The sacct command of `accounting_text`: every user (-a), each requeue its own row
    (-D), allocations only (-X), parsable with `|`, no header."""
    if not fields or not all(re.fullmatch(r"[A-Za-z]+", f) for f in fields):
        raise SlurmCommandError(f"sacct: field names must be plain words, got {list(fields)!r}")
    argv = ["sacct", "-a", "-D", "-X", "-n", "-P", "--delimiter=|"]
    argv += ["-S", since.strftime(SACCT_TIME_FORMAT)]
    argv += ["-E", until.strftime(SACCT_TIME_FORMAT) if until else "now"]
    return [*argv, "-o", ",".join(fields)]


class CliDoor(SlurmDoor):
    """Every operation is one or two Slurm client commands under the runner's deadline.
    A job operation names the job as Slurm must see it (JobInfo.record_spec or
    whole_job_spec), from this door's last read of the job, else from a read first."""

    name = "cli"

    def __init__(self, runner: Runner, bin_dir: str = "") -> None:
        self._runner = runner
        self._version = ""
        self._known = KnownJobs(self.job)
        runner.resolve = _resolver(bin_dir, runner.env)

    def job(self, job_id: int) -> JobInfo:
        try:
            if parse.version_tuple(self.slurm_version()) >= SCONTROL_JOB_JSON_SINCE:
                return self._known.remember(
                    self._runner.read(
                        ["scontrol", "--json", "show", "job", str(job_id)],
                        lambda text: parse.parse_scontrol_job_json(text, job_id),
                    )
                )
            result = self._runner.run(["scontrol", "show", "job", str(job_id)])
            return self._known.remember(parse.parse_scontrol_job(result.stdout, job_id))
        except JobNotFound:
            # slurmctld forgot it (MinJobAge passed); accounting still knows.
            return self.accounted_job(job_id)

    def accounted_job(self, job_id: int) -> JobInfo:
        result = self._runner.run(
            [
                "sacct",
                "-j",
                str(job_id),
                "-D",
                "-X",
                "-n",
                "-P",
                f"--delimiter={parse.SACCT_DELIMITER}",
                "-o",
                ",".join(parse.SACCT_FIELDS),
            ]
        )
        if not result.stdout.strip():
            raise JobNotFound(f"job {job_id}: not known to slurmctld or accounting")
        return self._known.remember(parse.parse_sacct_job(result.stdout, job_id))

    def nodes(self, names: Iterable[str] | None = None) -> tuple[NodeInfo, ...]:
        wanted = list(dict.fromkeys(names)) if names is not None else None
        if wanted == []:
            return ()
        if parse.version_tuple(self.slurm_version()) >= SCONTROL_JSON_SINCE:
            # `show node LIST` answers only the known names of LIST (rc 0), so a missing
            # one is found below, as with sinfo.
            argv = ["scontrol", "--json", "show", "nodes"]
            if wanted:
                argv[-1:] = ["node", hostlist.compress(wanted)]
            found = self._runner.read(
                argv, lambda text: parse.parse_scontrol_nodes_json(text, wanted)
            )
        else:
            argv = ["sinfo", "--json"]
            if wanted:
                argv += ["-n", hostlist.compress(wanted)]
            # 22.05's sinfo prints a failed load as "errors" with exit status 0: read
            # within the attempt, so that it is retried as scontrol's exit status 1 is.
            found = self._runner.read(argv, lambda text: parse.parse_sinfo_json(text, wanted))
        if wanted is not None and len(found) != len(wanted):
            missing = sorted(set(wanted) - {n.name for n in found})
            raise NodeNotFound(f"unknown node(s): {','.join(missing)}")
        return found

    def node_events(self, since: datetime, until: datetime | None = None) -> NodeEventLog:
        # Times in ISO local time: the runner gives every command SLURM_TIME_FORMAT=standard.
        text = self._runner.run(events.sacctmgr_event_argv(since, until)).stdout
        header = text.split("\n", 1)[0].strip()
        if header != "|".join(events.EVENT_FIELDS):
            raise SlurmOutputError(
                f"sacctmgr show event: expected the header {'|'.join(events.EVENT_FIELDS)}, "
                f"got {header[:80]!r}"
            )
        return events.parse_sacctmgr_events(text)

    def accounting_text(
        self, since: datetime, until: datetime | None, fields: Sequence[str]
    ) -> str:
        return self._runner.run(accounting_argv(since, until, fields)).stdout

    # scontrol requeue/hold/release, scancel and `scontrol update JobId=` take `A_T` and
    # `L+O` on 22.05 and 25.11 (job_requeue2, update_job_str, job_str_signal); requeue takes
    # no `L+O`, whence whole_job_spec (the leader) for the whole-job operations.
    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        spec = self._known(job_id).whole_job_spec
        self._runner.run(["scontrol", "requeuehold" if hold else "requeue", spec])
        log.info("job_requeued", job_id=job_id, slurm_job=spec, hold=hold)

    def hold(self, job_id: int) -> None:
        spec = self._known(job_id).whole_job_spec
        self._runner.run(["scontrol", "hold", spec])
        log.info("job_held", job_id=job_id, slurm_job=spec)

    def release(self, job_id: int) -> None:
        spec = self._known(job_id).whole_job_spec
        self._runner.run(["scontrol", "release", spec])
        log.info("job_released", job_id=job_id, slurm_job=spec)

    def cancel(self, job_id: int) -> None:
        try:
            spec = self._known(job_id).whole_job_spec
        except JobNotFound:  # scancel exits 0 for it too
            log.info("job_cancel_unknown", job_id=job_id)
            return
        # 22.05's scancel of an array task's own number, when it is not the array's, signals
        # nothing and exits 0 (job_str_signal, fixed in 23.02.6): `A_T` works on both.
        self._runner.run(["scancel", spec])
        log.info("job_cancelled", job_id=job_id, slurm_job=spec)

    def set_excluded_nodes(
        self, job_id: int, nodes: Iterable[str], *, merge: bool = True
    ) -> tuple[str, ...]:
        wanted = list(dict.fromkeys(nodes))
        leader = self._known(job_id).het_job_id
        if leader is not None:
            # A het job is started, and requeued, whole: any component may land on the node
            # next time. Each keeps its own exclusions (a leader's ExcNodeList= would replace
            # every component's with the leader's).
            merged = {p.job_id: self._exclude(p, wanted, merge) for p in self.het_parts(leader)}
            return merged[job_id]
        return self._exclude(self.job(job_id) if merge else self._known(job_id), wanted, merge)

    def _exclude(self, job: JobInfo, wanted: list[str], merge: bool) -> tuple[str, ...]:
        if merge:
            wanted = list(dict.fromkeys([*job.excluded_nodes, *wanted]))
        value = hostlist.compress(wanted) if wanted else ""
        self._update_job(job.record_spec, f"ExcNodeList={value}")
        log.info("job_excluded_nodes_set", job_id=job.job_id, excluded=value)
        return tuple(wanted)

    def het_parts(self, leader: int) -> tuple[JobInfo, ...]:
        """Every component of het job `leader`, by offset, as slurmctld shows them now."""
        if parse.version_tuple(self.slurm_version()) >= SCONTROL_JOB_JSON_SINCE:
            parts = self._runner.read(
                ["scontrol", "--json", "show", "job", str(leader)],
                lambda text: parse.parse_scontrol_het_parts_json(text, leader),
            )
        else:
            result = self._runner.run(["scontrol", "show", "job", str(leader)])
            parts = parse.parse_scontrol_het_parts(result.stdout, leader)
        for part in parts:
            self._known.remember(part)
        return parts

    def set_begin_time(self, job_id: int, delay_s: float) -> None:
        seconds = max(0, int(round(delay_s)))
        # A het job starts whole: its leader's number updates every component.
        self._update_job(self._known(job_id).whole_job_spec, f"StartTime=now+{seconds}")

    def set_admin_comment(self, job_id: int, text: str) -> None:
        if "\n" in text:
            raise SlurmCommandError("AdminComment must be one line")
        self._update_job(self._known(job_id).record_spec, f"AdminComment={text}")

    def _update_job(self, spec: str, change: str) -> None:
        """`scontrol update JobId=SPEC ...`: `spec` is how Slurm must name the record(s)."""
        self._runner.run(["scontrol", "update", f"JobId={spec}", change])

    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        if "\n" in text:
            raise SlurmCommandError("AdminComment must be one line")
        # JobID=N selects every task of array N and every component of het job N as well
        # (as_mysql_jobacct_process.c); `A_T` and `L+O` select the one record.
        spec = self._known(job_id).record_spec
        # sacctmgr answers "Nothing modified" with rc 1 when accounting has no such record
        # (yet): NotYetAccounted, retried within the operation's deadline like a controller
        # that does not answer.
        self._runner.run(
            [
                "sacctmgr",
                "-i",
                "modify",
                "job",
                "where",
                f"JobID={spec}",
                "set",
                f"AdminComment={text}",
            ]
        )

    def drain(self, node: str, reason: str) -> None:
        reason = " ".join(reason.split())[:MAX_REASON_CHARS]
        if not reason:
            raise SlurmCommandError("a drain needs a reason")
        self._runner.run(
            ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]
        )
        log.info("node_drained", node=node, reason=reason)

    def set_node_comment(self, node: str, text: str) -> None:
        self._runner.run(
            [
                "scontrol",
                "update",
                f"NodeName={node}",
                f"Comment={' '.join(text.split())[:MAX_REASON_CHARS]}",
            ]
        )

    def resume(self, node: str) -> None:
        self._runner.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        log.info("node_resumed", node=node)

    def reboot(self, node: str, reason: str) -> None:
        # Drained first, then a plain reboot (neither ASAP nor nextstate=): slurmctld reboots
        # a drained node once it is idle, and without a next state it keeps DRAIN when slurmd
        # registers (node_mgr.c validate_node_specs), so the node stays out until its burn-in.
        # ASAP sets next state RESUME on 22.05 (proc_req.c), and nextstate=DOWN clears DRAIN,
        # so ReturnToService=2 returned the node at its next ping answer, unproven.
        name = arguments.node_name(node)
        text = arguments.one_line(reason)
        self.drain(name, text)
        # scontrol reads ASAP, nextstate= and Reason= only among the first three words
        # after `reboot` (scontrol.c _process_reboot_command), the node list last.
        self._runner.run(["scontrol", "reboot", f"Reason={text}", name])
        log.info("node_reboot_requested", node=node, reason=text)

    def reservations(self) -> tuple[ReservationInfo, ...]:
        # Times as ISO local time: the runner pins SLURM_TIME_FORMAT=standard.
        text = self._runner.run(["scontrol", "show", "reservation"]).stdout
        return reservations.parse_scontrol_reservations(text)

    def create_reservation(
        self, name: str, node: str, duration_s: int, users: Sequence[str]
    ) -> None:
        self._runner.run(
            [
                "scontrol",
                "create",
                "reservation",
                f"ReservationName={arguments.plain_name(name, 'reservation name')}",
                f"Nodes={arguments.node_name(node)}",
                "StartTime=now",
                f"Duration={arguments.duration_min(duration_s)}",
                f"Users={arguments.user_list(users)}",
                "Flags=MAINT,IGNORE_JOBS",
            ]
        )
        log.info("reservation_created", reservation=name, node=node)

    def delete_reservation(self, name: str) -> None:
        name = arguments.plain_name(name, "reservation name")
        self._runner.run(["scontrol", "delete", f"ReservationName={name}"])
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
        if isinstance(command, str) or not command:
            raise SlurmCommandError("a burn-in needs a command (a list of words)")
        if isinstance(time_limit_min, bool) or not (
            isinstance(time_limit_min, int) and time_limit_min > 0
        ):
            raise SlurmCommandError(f"invalid time limit: {time_limit_min!r} min")
        argv = [
            "sbatch",
            "--parsable",
            f"--reservation={arguments.plain_name(reservation, 'reservation name')}",
            f"--nodelist={arguments.node_name(node)}",
            "--nodes=1",
            "--exclusive",
            # A node that fails during its burn-in has failed it: no second run elsewhere.
            "--no-requeue",
            f"--job-name={arguments.plain_name(job_name, 'job name')}",
            f"--output={arguments.path_text(output, 'output path')}",
            f"--time={time_limit_min}",
            f"--wrap={shlex.join(command)}",
        ]
        job_id = parse_sbatch_parsable(self._runner.run(argv).stdout)
        log.info("burn_in_submitted", node=node, reservation=reservation, job_id=job_id)
        return job_id

    def set_node_weight(self, node: str, weight: int) -> None:
        node, weight = arguments.node_name(node), arguments.weight(weight)
        self._runner.run(["scontrol", "update", f"NodeName={node}", f"Weight={weight}"])
        log.info("node_weight_set", node=node, weight=weight)

    def set_node_features(self, node: str, available: Sequence[str], active: Sequence[str]) -> None:
        node = arguments.node_name(node)
        available_text = arguments.feature_list(available)
        active_text = arguments.feature_list(active)
        arguments.active_subset(available, active)
        self._runner.run(
            [
                "scontrol",
                "update",
                f"NodeName={node}",
                f"AvailableFeatures={available_text}",
                f"ActiveFeatures={active_text}",
            ]
        )
        log.info("node_features_set", node=node, available=available_text, active=active_text)

    def slurm_version(self) -> str:
        """The Slurm clients' version, asked once per door (the output formats are theirs)."""
        if not self._version:
            self._version = parse.parse_version(self._runner.run(["scontrol", "--version"]).stdout)
        return self._version


_SBATCH_JOB_ID = re.compile(r"\s*(\d+)(?:;\S*)?\s*\Z")


def parse_sbatch_parsable(text: str) -> int:
    """`sbatch --parsable` prints `<job id>` or `<job id>;<cluster>` (sbatch.c)."""
    match = _SBATCH_JOB_ID.match(text)
    if not match:
        raise SlurmOutputError(f"sbatch --parsable: no job id in {text.strip()[:80]!r}")
    return int(match.group(1))
