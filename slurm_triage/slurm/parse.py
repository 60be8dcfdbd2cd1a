"""Pure parsers of Slurm 22.05-25.11 client output: `scontrol show job` (text, and JSON
from 24.05 on), `sacct`, and the node list as JSON (`sinfo --json` on 22.05, `scontrol
--json show nodes` from 23.02 on).

They take text and return model objects or raise SlurmOutputError; no I/O here, so they
are fuzzed directly (issue 8) and tested on output recorded from both Slurm generations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from slurm_triage import hostlist
from slurm_triage.job_state import SHOWN_FLAG_ORDER
from slurm_triage.slurm.errors import (
    JobNotFound,
    SlurmError,
    SlurmOutputError,
    SlurmUnavailable,
)
from slurm_triage.slurm.model import ArrayAndHetIds, JobInfo, JobState, NodeInfo
from slurm_triage.slurm.runner import error_class_for

MAX_OUTPUT_BYTES = 64 * 1024 * 1024

# In `scontrol show job` (multi-line form) each of these ends its line and may contain
# spaces and '=' (they are user-controlled), so the rest of the line is its value.
_FREE_TEXT_KEYS = frozenset(
    {
        "JobName",
        "Command",
        "WorkDir",
        "AdminComment",
        "Comment",
        "StdErr",
        "StdIn",
        "StdOut",
        "SystemComment",
    }
)
_KEY_AT = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/]*)=")
# `sacct --delimiter` value: ASCII unit separator, which job names and comments lack.
SACCT_DELIMITER = "\x1f"
SACCT_FIELDS = (
    "JobID",
    # Rows are matched on this: an array task prints JobID 13_1 and a het job part 16+1,
    # while JobIDRaw is the id that `sacct -j`, scontrol and the Epilog use.
    "JobIDRaw",
    "State",
    "ExitCode",
    "NodeList",
    "User",
    "UID",
    "Partition",
    "NNodes",
    "Timelimit",
    "Flags",
    # Not Comment: the job's user sets it, and a newline in it printed a whole forged row
    # (a FAILED job read as NODE_FAIL on another node). AdminComment only admins and we set.
    "AdminComment",
)


def parse_key_values(text: str) -> dict[str, str]:
    """Key=value pairs of multi-line `scontrol show` output; the first occurrence wins, so
    text inside a user's job name or comment cannot override a real field after it."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        matches = list(_KEY_AT.finditer(line))
        for i, match in enumerate(matches):
            key = match.group(1)
            end = (
                len(line)
                if key in _FREE_TEXT_KEYS
                else (matches[i + 1].start() if i + 1 < len(matches) else len(line))
            )
            fields.setdefault(key, line[match.end() : end].strip())
            if key in _FREE_TEXT_KEYS:
                break
    return fields


def _none_if_null(value: str | None) -> str:
    return "" if value in (None, "(null)", "N/A", "None") else str(value)


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _leading_int(value: str | None) -> int:
    """A pending job's `NumNodes=2-4` (min-max) is its minimum; `NumNodes=2` is 2."""
    match = re.match(r"\s*(\d+)", value or "")
    return int(match.group(1)) if match else 0


def parse_exit_code(text: str | None) -> tuple[int, int]:
    """'3:0' -> (3, 0); anything unparsable -> (0, 0) is not safe, so it raises."""
    match = re.fullmatch(r"\s*(\d+):(\d+)\s*", text or "")
    if not match:
        raise SlurmOutputError(f"unparsable ExitCode {text!r}")
    return int(match.group(1)), int(match.group(2))


def parse_time_limit_min(text: str | None) -> int | None:
    """Slurm time limits in minutes, None for unlimited. Formats (sbatch(1)): M, M:S, H:M:S,
    D-H, D-H:M, D-H:M:S; seconds round up."""
    value = _none_if_null(text).strip()
    if value in ("", "UNLIMITED", "Partition_Limit", "INFINITE"):
        return None
    if not re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", value):
        raise SlurmOutputError(f"unparsable time limit {text!r}")
    days = 0
    if "-" in value:
        day_text, value = value.split("-", 1)
        days = int(day_text)
        hms = [int(p) for p in value.split(":")] + [0, 0]
        hours, minutes, seconds = hms[0], hms[1], hms[2]
    else:
        parts = [int(p) for p in value.split(":")]
        hours, minutes, seconds = (
            ([0] * (3 - len(parts)) + parts)
            if len(parts) == 3
            else (0, parts[0], parts[1] if len(parts) == 2 else 0)
        )
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def _nodes(text: str | None) -> tuple[str, ...]:
    try:
        return tuple(hostlist.expand(_none_if_null(text)))
    except hostlist.HostlistError as exc:
        raise SlurmOutputError(str(exc)) from None


def _user_and_uid(text: str) -> tuple[str, int | None]:
    match = re.fullmatch(r"(.*?)\((\d+)\)", text or "")
    return (match.group(1), int(match.group(2))) if match else (text, None)


# `scontrol show job` prints a job as lines in a fixed order (22.05: src/api/job_info.c
# slurm_sprint_job_info; 23.02+: src/scontrol/info_job.c): `JobId=` at column 0, then each
# line three spaces and a key. User text (JobName, WCKey, Command, WorkDir, Comment, Extra,
# StdOut, ...) is printed raw, newlines included, so a job named `x\n   UserId=root(0) ...`
# prints a line that looks like Slurm's. So: Slurm's lines come in this order, each at most
# once (a repeat or a step back is user text imitating Slurm, and the record is refused);
# the fields we read are taken from their own line only; a line that does not look like
# Slurm's belongs to the free text before it; two records claiming the job are refused.
_LINE_ORDER = (
    "JobId", "SLUID", "HetJobIdSet", "UserId", "Priority", "JobState", "Requeue",
    "DerivedExitCode", "RunTime", "SubmitTime", "AccrueTime", "ResizeTime", "StartTime",
    "CronJob", "CrontabSpec", "PreemptEligibleTime", "SuspendTime", "Partition",
    "ReqNodeList", "NodeList", "BatchFeatures", "BatchHost", "StepMgrEnabled", "FedOrigin",
    "NumNodes", "TRES", "ReqTRES", "AllocTRES", "Socks/Node", "JOB_GRES", "MinCPUsNode",
    "Features", "ClusterFeatures", "Prefer", "Reservation", "OverSubscribe", "Command",
    "SubmitLine", "WorkDir", "AdminComment", "SystemComment", "Comment", "Extra", "StdErr",
    "StdIn", "StdOut",
)  # fmt: skip
# 25.11's line of job flags (after StdOut) starts with whichever flag is set first.
_FLAG_LINE_KEYS = (
    "GresAllowTaskSharing", "GresEnforceBind", "GresOneTaskPerSharing",
    "KillOnInvalidDependent", "SpreadJob", "ExpeditedRequeue",
)  # fmt: skip
_LINE_RANK = {key: rank for rank, key in enumerate(_LINE_ORDER)} | {
    key: len(_LINE_ORDER) for key in _FLAG_LINE_KEYS
}
_EXPEDITED = re.compile(r"(?:^| )ExpeditedRequeue=Yes(?: |$)")
# Printed for every job by every Slurm since 22.05; a record without them was cut short.
_REQUIRED_LINES = frozenset(
    {"JobId", "UserId", "JobState", "Requeue", "RunTime", "StartTime", "Partition",
     "ReqNodeList", "NodeList", "NumNodes", "Command", "WorkDir"}
)  # fmt: skip
# The whole rest of the line (and any continuation) is the value.
_WHOLE_LINE_KEYS = ("AdminComment", "Comment", "StdErr", "StdOut")
# What we read from each of Slurm's lines; user text on a line only ever comes after these
# (Reason before Dependency, which has no spaces).
_LINE_FIELDS = {
    # Line 1 (job_info.c / info_job.c, 22.05 to 25.11): "JobId=%u ", then "ArrayJobId=%u
    # ArrayTaskId=%s " (the task id, or the pending tasks as a range) or "HetJobId=%u
    # HetJobOffset=%u ", then JobName (user text), so a name cannot pose as these.
    "JobId": re.compile(
        r"JobId=(?P<JobId>\d+)(?: ArrayJobId=(?P<ArrayJobId>\d+) ArrayTaskId=(?P<ArrayTaskId>\S+)"
        r"| HetJobId=(?P<HetJobId>\d+) HetJobOffset=(?P<HetJobOffset>\d+))?(?: |\Z)"
    ),
    "UserId": re.compile(r"UserId=(?P<UserId>\S*) GroupId="),
    "JobState": re.compile(
        r"JobState=(?P<JobState>\S+)(?: Reason=(?P<Reason>.*?))?(?: Dependency=\S*)?\s*\Z",
        re.DOTALL,
    ),
    # Slurm's numbers only (versions add or drop keys such as Reboot=): each read on its own.
    "Requeue": re.compile(
        r"(?=.*\bRestarts=(?P<Restarts>\d+))(?=.*\bBatchFlag=(?P<BatchFlag>\d+))"
        r"(?=.*\bExitCode=(?P<ExitCode>\d+:\d+))Requeue=(?P<Requeue>\d+)"
    ),
    "RunTime": re.compile(r"RunTime=\S+ TimeLimit=(?P<TimeLimit>\S+)"),
    "StartTime": re.compile(r"StartTime=(?P<StartTime>\S+)"),
    "Partition": re.compile(r"Partition=(?P<Partition>\S*)"),
    "ReqNodeList": re.compile(r"ReqNodeList=(?P<ReqNodeList>\S*) ExcNodeList=(?P<ExcNodeList>\S*)"),
    "NodeList": re.compile(r"NodeList=(?P<NodeList>\S*)"),
    # job_info.c (22.05) / info_job.c (23.02+) Line 14: "BatchFeatures=%s", then
    # " BatchHost=%s" only while batch_host is set: a pending `sbatch --batch=` job, or one
    # requeued (batch_requeue_fini frees batch_host), prints BatchFeatures alone. Batch
    # features are node feature names joined by & and | (job_scheduler.c
    # _valid_batch_features checks each against the job's constraint), so no spaces.
    "BatchFeatures": re.compile(r"BatchFeatures=\S*(?: BatchHost=(?P<BatchHost>\S*))?\s*\Z"),
    "BatchHost": re.compile(r"BatchHost=(?P<BatchHost>\S*)"),
    "NumNodes": re.compile(r"NumNodes=(?P<NumNodes>\S+)"),
}
_SLURM_LINE = re.compile(r"   ([A-Za-z][A-Za-z0-9_/:]*)=")


def parse_scontrol_job(text: str, job_id: int) -> JobInfo:
    """One job from `scontrol show job N` (multi-line form), safe against job fields that
    imitate Slurm's own lines (see _LINE_ORDER)."""
    if len(text) > MAX_OUTPUT_BYTES:
        raise SlurmOutputError("scontrol output too large")
    mine = [r for r in _scontrol_records(text) if _record_job_id(r) == job_id]
    if not mine:
        raise SlurmOutputError(f"scontrol show job {job_id}: no record for job {job_id}")
    if len(mine) > 1:
        raise SlurmOutputError(
            f"scontrol show job {job_id}: {len(mine)} records claim the job: a job field "
            "(name, comment, work dir, ...) imitates scontrol's output"
        )
    return _job_from_fields(_record_fields(mine[0], job_id), job_id)


def parse_scontrol_het_parts(text: str, leader: int) -> tuple[JobInfo, ...]:
    """Every component of het job `leader` from `scontrol show job LEADER` (one record per
    component, job_mgr.c pack_one_job), by offset."""
    if len(text) > MAX_OUTPUT_BYTES:
        raise SlurmOutputError("scontrol output too large")
    parts = [
        parse_scontrol_job(text, job_id)
        for job_id in dict.fromkeys(_record_job_id(r) for r in _scontrol_records(text))
    ]
    return _het_parts(parts, leader)


def _het_parts(parts: list[JobInfo], leader: int) -> tuple[JobInfo, ...]:
    mine = sorted((p for p in parts if p.het_job_id == leader), key=lambda p: p.het_job_offset or 0)
    if not mine:
        raise SlurmOutputError(f"scontrol show job {leader}: no component of het job {leader}")
    return tuple(mine)


def _scontrol_records(text: str) -> list[list[tuple[str, str]]]:
    """Records as (line key, line text) lists; a line not shaped like Slurm's is appended
    to the one before (it is the rest of a value holding a newline)."""
    records: list[list[tuple[str, str]]] = []
    for line in text.split("\n"):
        match = _SLURM_LINE.match(line)
        if line.startswith("JobId="):
            records.append([("JobId", line)])
        elif records and match:
            records[-1].append((match.group(1), line[3:]))
        elif records:
            key, body = records[-1][-1]
            records[-1][-1] = (key, f"{body}\n{line}")
        elif line.strip():
            raise SlurmOutputError("scontrol show job: output does not start with JobId=")
    return records


def _record_job_id(record: list[tuple[str, str]]) -> int:
    match = _LINE_FIELDS["JobId"].match(record[0][1])
    return int(match["JobId"]) if match else -1


def _record_fields(record: list[tuple[str, str]], job_id: int) -> dict[str, str]:
    fields: dict[str, str] = {}
    last = -1
    for key, body in record:
        rank = _LINE_RANK.get(key)
        if rank is None:
            continue  # a line of a newer Slurm, or of user text: nothing we read
        if rank <= last:
            raise SlurmOutputError(
                f"scontrol show job {job_id}: a second or misplaced {key}= line: a job field "
                "(name, comment, work dir, ...) imitates scontrol's output"
            )
        last = rank
        if key in _FLAG_LINE_KEYS:
            if _EXPEDITED.search(body.strip()):
                fields["ExpeditedRequeue"] = "Yes"
        elif key in _WHOLE_LINE_KEYS:
            fields[key] = body[len(key) + 1 :].strip()
        elif key in _LINE_FIELDS:
            match = _LINE_FIELDS[key].match(body)
            if not match:
                raise SlurmOutputError(f"scontrol show job {job_id}: unexpected {key}= line")
            fields.update({k: v.strip() for k, v in match.groupdict().items() if v is not None})
    missing = _REQUIRED_LINES - {key for key, _ in record}
    if missing:
        raise SlurmOutputError(f"scontrol show job {job_id}: no {', '.join(sorted(missing))}")
    return fields


def _job_from_fields(fields: dict[str, str], job_id: int) -> JobInfo:
    if "JobState" not in fields:
        raise SlurmOutputError(f"scontrol show job {job_id}: no JobState field")
    exit_code, exit_signal = parse_exit_code(fields.get("ExitCode", "0:0"))
    user, uid = _user_and_uid(fields.get("UserId", ""))
    return JobInfo(
        job_id=job_id,
        state=JobState.parse(fields["JobState"]),
        base_state=JobState.parse(fields["JobState"]).shown_base,
        state_reason=_none_if_null(fields.get("Reason")),
        exit_code=exit_code,
        exit_signal=exit_signal,
        nodes=_nodes(fields.get("NodeList")),
        excluded_nodes=_nodes(fields.get("ExcNodeList")),
        required_nodes=_nodes(fields.get("ReqNodeList")),
        restart_count=_int(fields.get("Restarts")),
        requeue=fields.get("Requeue") == "1",
        # 1 for a batch job; Slurm counts it up when it requeues the job itself (2, ...).
        batch=_int(fields.get("BatchFlag")) >= 1,
        user=user,
        uid=uid,
        partition=_none_if_null(fields.get("Partition")),
        num_nodes=_leading_int(fields.get("NumNodes")),
        time_limit_min=parse_time_limit_min(fields.get("TimeLimit")),
        admin_comment=_none_if_null(fields.get("AdminComment")),
        comment=_none_if_null(fields.get("Comment")),
        source="scontrol",
        std_out=_none_if_null(fields.get("StdOut")),
        # 25.11 prints `StdErr=` (empty) when stderr goes to the StdOut file; 22.05-25.05
        # printed the StdOut path there.
        std_err=_none_if_null(fields.get("StdErr")) or _none_if_null(fields.get("StdOut")),
        batch_host=_none_if_null(fields.get("BatchHost")),
        start_time=parse_timestamp(fields.get("StartTime")),
        expedited_requeue=fields.get("ExpeditedRequeue") == "Yes",
        **_array_and_het(
            fields.get("ArrayJobId"),
            fields.get("ArrayTaskId"),
            fields.get("HetJobId"),
            fields.get("HetJobOffset"),
        ),
    )


def _array_and_het(
    array_job: str | None, array_task: str | None, het_job: str | None, het_offset: str | None
) -> ArrayAndHetIds:
    """JobInfo's array and het job fields from Slurm's words: a task id that is no number
    ("2-3", "0-7%2") is a record of tasks still pending together, which has none."""
    task = array_task if array_task and array_task.isdigit() else None
    return {
        "array_job_id": int(array_job) if array_job else None,
        "array_task_id": int(task) if array_job and task else None,
        "het_job_id": int(het_job) if het_job else None,
        "het_job_offset": int(het_offset) if het_job and het_offset else None,
    }


# sacct's JobID (slurmdb_get_job_id_str, 22.05 and 25.11): `A_T` for an array task, `A_[2-3]`
# for tasks still pending together, `L+O` for a het job component, else the job's number.
_SACCT_JOB_ID = re.compile(r"\d+(?:_(?:(?P<task>\d+)|\[[^\]]*\])|\+(?P<offset>\d+))?\Z")


def _sacct_array_and_het(job_id_text: str) -> ArrayAndHetIds:
    text = job_id_text.strip()
    match = _SACCT_JOB_ID.match(text)
    if not match:
        raise SlurmOutputError(f"sacct: unparsable JobID {text[:40]!r}")
    leading = text.split("_")[0].split("+")[0]
    return _array_and_het(
        leading if "_" in text else None,
        match["task"],
        leading if match["offset"] is not None else None,
        match["offset"],
    )


# Why one job has several records under `sacct -D` (job_mgr.c and as_mysql_job.c
# as_mysql_job_complete, 22.05 and 25.11): a requeue closes the run's record and the next
# run gets a new one. The closed record reads REQUEUED (scontrol requeue/requeuehold,
# RequeueExit, a node that failed its reconfiguration: the JOB_REQUEUE flag), NODE_FAIL
# (slurmctld requeued the job for a failed node) or PREEMPTED (PreemptMode=REQUEUE); on 25.11
# a job requeued while completing or after it ended keeps the state it ended in (FAILED,
# TIMEOUT, ...: _job_requeue_op logs no second completion), and REVOKED is a federated job
# that another cluster ran and requeued. BOOT_FAIL ends a job that cannot be requeued
# (_job_fail), so it is only ever the last row. The one record that is no run's end is
# RESIZING: job_pre_resize_acctg closes the record when a running job changes size (scontrol
# update NumNodes=, a node excised from a --no-kill job, a job expanded into another) and
# job_post_resize_acctg opens the next one for the same run. So every row before the last
# is one restart, except a RESIZING row.
_NOT_A_RESTART = "RESIZING"


def parse_sacct_job(text: str, job_id: int) -> JobInfo:
    """A job from `sacct -D -X -n -P --delimiter=US -o SACCT_FIELDS`, matched on JobIDRaw:
    the last row is the current run, and each earlier row is a run that was requeued, one
    restart each (REQUEUED after `scontrol requeue`, NODE_FAIL when slurmctld requeued it
    for a failed node, ...), except the RESIZING rows of a job that changed size (see
    _NOT_A_RESTART)."""
    rows = [
        dict(zip(SACCT_FIELDS, line.split(SACCT_DELIMITER, len(SACCT_FIELDS) - 1), strict=True))
        for line in text.splitlines()
        if line.count(SACCT_DELIMITER) >= len(SACCT_FIELDS) - 1
    ]
    rows = [r for r in rows if r["JobIDRaw"].strip() == str(job_id)]
    if not rows:
        raise SlurmOutputError(f"sacct: no record for job {job_id}")
    row = rows[-1]
    exit_code, exit_signal = parse_exit_code(row["ExitCode"])
    return JobInfo(
        job_id=job_id,
        state=JobState.parse(row["State"]),
        state_reason="",
        exit_code=exit_code,
        exit_signal=exit_signal,
        nodes=_nodes(row["NodeList"] if row["NodeList"] != "None assigned" else ""),
        excluded_nodes=(),
        restart_count=sum(r["State"].strip() != _NOT_A_RESTART for r in rows[:-1]),
        requeue=False,  # accounting does not record the flag; callers must not assume it
        batch=True,
        user=row["User"],
        uid=_int(row["UID"], -1) if row["UID"] else None,
        partition=row["Partition"],
        num_nodes=_int(row["NNodes"]),
        time_limit_min=parse_time_limit_min(row["Timelimit"]),
        admin_comment=row["AdminComment"].strip(),
        comment="",  # not asked of sacct (see SACCT_FIELDS); scontrol's record has it
        source="sacct",
        state_text=row["State"].strip(),
        **_sacct_array_and_het(row["JobID"]),
    )


def parse_sinfo_json(text: str, names: Iterable[str] | None = None) -> tuple[NodeInfo, ...]:
    """Nodes from 22.05's `sinfo --json` (`{"nodes": [...]}`), filtered to names (22.05's
    sinfo ignores `-n` with --json). From 23.02 on sinfo prints `{"sinfo": [...]}`, one entry
    per node and partition: read those with parse_scontrol_nodes_json instead."""
    return _parse_nodes_document(text, names, "sinfo --json")


def parse_scontrol_nodes_json(
    text: str, names: Iterable[str] | None = None
) -> tuple[NodeInfo, ...]:
    """Nodes from `scontrol --json show nodes` or `show node LIST` (23.02+: `{"nodes":
    [...]}`, data_parser v0.0.39 to v0.0.44), filtered to names; unknown names are simply
    absent from Slurm's answer."""
    return _parse_nodes_document(text, names, "scontrol --json show nodes")


def _parse_nodes_document(
    text: str, names: Iterable[str] | None, command: str
) -> tuple[NodeInfo, ...]:
    if len(text) > MAX_OUTPUT_BYTES:
        raise SlurmOutputError(f"{command}: output too large")
    try:
        data = json.loads(text)
        _raise_reported_errors(data, command)
        raw_nodes: list[dict[str, Any]] = data["nodes"]
        if not isinstance(raw_nodes, list):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):
        raise SlurmOutputError(f"{command}: not the expected JSON document") from None
    by_name: dict[str, NodeInfo] = {}
    for raw in raw_nodes:
        try:
            node = _node_from_json(raw)
        except (KeyError, TypeError, AttributeError, ValueError):
            raise SlurmOutputError(f"{command}: a node entry lacks name/state") from None
        by_name.setdefault(node.name, node)
    if names is None:
        return tuple(by_name[n] for n in sorted(by_name))
    return tuple(by_name[n] for n in names if n in by_name)


def _raise_reported_errors(data: Any, command: str) -> None:
    """Raise the failure a JSON document reports in its "errors" list, as the command's own
    failure. 22.05's `sinfo --json` prints a failed load this way with exit status 0
    (src/sinfo/data.c dump_data returns SLURM_SUCCESS whatever the handler did), in
    openapi/v0.0.38's shape, `{"error": slurm_strerror(rc), "errno": rc}`
    (plugins/openapi/v0.0.38/nodes.c); slurm_load_node's rc is SLURM_ERROR whatever the
    cause, so an unreachable controller reads "Unspecified error", errno -1. 23.02+'s
    data_parser prints `{"description", "error_number", "error", "source"}` (OPENAPI_ERROR
    in parsers.c). Slurm's words map through the runner's table, as a client's stderr does;
    anything else is SlurmUnavailable (the controller's trouble, retried), as on 25.11,
    where scontrol exits 1 with "slurm_load_node error: Unable to contact slurm
    controller"."""
    errors = data.get("errors") if isinstance(data, dict) else None
    if not errors:
        return
    texts = [_error_text(entry) for entry in errors] if isinstance(errors, list) else [""]
    if not all(texts):
        raise SlurmOutputError(f"{command}: not the expected JSON document (errors)")
    message = f"{command}: {'; '.join(texts)}"[:300]
    error: type[SlurmError] = error_class_for(message) or SlurmUnavailable
    raise error(message)


def _error_text(entry: Any) -> str:
    """One entry of "errors" as a line: its words and Slurm's error number; "" if it has none."""
    if not isinstance(entry, dict):
        return ""
    words = [entry.get(k) for k in ("description", "error")]
    text = " / ".join(dict.fromkeys(w.strip() for w in words if isinstance(w, str) and w.strip()))
    number = entry.get("errno", entry.get("error_number"))
    if text and isinstance(number, int) and not isinstance(number, bool):
        text += f" (errno {number})"
    return text


def _node_from_json(raw: dict[str, Any]) -> NodeInfo:
    """One node entry of either document. The shapes per version (each tested on a sample):
    state: 22.05 "idle" + state_flags ["DRAIN"]; 23.02+ ["IDLE", "DRAIN"] (base state first,
    flags after, in data_parser's flag table order). reason_changed_at: 22.05 and v0.0.39
    (23.02) a plain int, v0.0.40+ (23.11 on) {"set", "infinite", "number"}; 0 or unset means
    no time. reason_set_by_user: null or "" when no reason. partitions: a list (a CSV string
    is accepted too). weight: a plain int; boot_time: as reason_changed_at; features and
    active_features: a CSV string on 22.05, a list from 23.02 (data_parser's CSV_LIST,
    CSV_STRING)."""
    state = raw["state"]
    words = [state] if isinstance(state, str) else list(state)
    words += list(raw.get("state_flags") or [])
    if not words or not all(isinstance(w, str) and w for w in words):
        raise ValueError("no node state")
    base, *flags = [w.upper() for w in words]
    return NodeInfo(
        name=_json_text(raw["name"], required=True),
        state=base,
        flags=frozenset(flags),
        reason=_json_text(raw.get("reason")),
        reason_user=_json_text(raw.get("reason_set_by_user")),
        reason_time=_json_time(raw.get("reason_changed_at")),
        partitions=_json_names(raw.get("partitions")),
        comment=_json_text(raw.get("comment")),
        weight=_json_count(raw.get("weight"), default=None),
        # 22.05: a CSV string ("" for none); 23.02+ (CSV_LIST, CSV_STRING): a list.
        features=_json_names(raw.get("features")),
        active_features=_json_names(raw.get("active_features")),
        boot_time=_json_time(raw.get("boot_time")),
    )


def _json_text(value: Any, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise TypeError("not a string")
    return value


def _json_time(value: Any) -> int | None:
    """A plain int (v0.0.39 and 22.05) or {"set": bool, "infinite": bool, "number": int}."""
    seconds = _json_count(value, default=None)
    return seconds if seconds and seconds > 0 else None


def _json_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    return tuple(str(p) for p in value or () if p)


def parse_timestamp(text: str | None) -> float | None:
    """Slurm's local-time `2026-11-22T00:26:15` as epoch seconds; None for Unknown/None."""
    value = _none_if_null(text).strip()
    if not value or value == "Unknown":
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def version_tuple(version: str) -> tuple[int, int]:
    """'25.11.7' -> (25, 11), for comparing releases."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if not match:
        raise SlurmOutputError(f"unparsable Slurm version {version[:80]!r}")
    return int(match.group(1)), int(match.group(2))


def parse_version(text: str) -> str:
    """'slurm 22.05.8' or 'slurm-wlm 22.05.8' -> '22.05.8'."""
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    if not match:
        raise SlurmOutputError(f"unparsable Slurm version {text.strip()[:80]!r}")
    return match.group(1)


def parse_scontrol_job_json(text: str, job_id: int) -> JobInfo:
    """One job from `scontrol --json show job N` (data_parser v0.0.41+, Slurm 24.05 on:
    the first to print the expanded output paths). JSON keeps every user-controlled field
    in its own string, and the state keeps its base under the COMPLETING flag."""
    if len(text) > MAX_OUTPUT_BYTES:
        raise SlurmOutputError("scontrol --json show job: output too large")
    try:
        data = json.loads(text)
        _raise_reported_errors(data, "scontrol --json show job")
        jobs = data["jobs"]
        if not isinstance(jobs, list):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):
        raise SlurmOutputError("scontrol --json show job: not the expected JSON document") from None
    mine = [j for j in jobs if isinstance(j, dict) and j.get("job_id") == job_id]
    if not mine:
        raise JobNotFound(f"job {job_id}: not known to slurmctld")
    try:
        return _job_from_json(mine[0], job_id)
    except (KeyError, TypeError, AttributeError, ValueError):
        raise SlurmOutputError(
            f"scontrol --json show job {job_id}: a field has an unexpected shape"
        ) from None


def parse_scontrol_het_parts_json(text: str, leader: int) -> tuple[JobInfo, ...]:
    """Every component of het job `leader` from `scontrol --json show job LEADER`."""
    if len(text) > MAX_OUTPUT_BYTES:
        raise SlurmOutputError("scontrol --json show job: output too large")
    try:
        jobs = json.loads(text)["jobs"]
        ids = [j["job_id"] for j in jobs if isinstance(j, dict)]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise SlurmOutputError("scontrol --json show job: not the expected JSON document") from None
    parts = [parse_scontrol_job_json(text, job_id) for job_id in dict.fromkeys(ids)]
    return _het_parts(parts, leader)


def _job_from_json(raw: dict[str, Any], job_id: int) -> JobInfo:
    words = raw["job_state"]
    words = [words] if isinstance(words, str) else list(words)
    if not words or not all(isinstance(w, str) and w for w in words):
        raise ValueError("no job state")
    # The base state comes first, then the flags; the text form shows the first flag set.
    base, flags = JobState.parse(words[0]), {w.upper() for w in words[1:]}
    shown = next((f for f in SHOWN_FLAG_ORDER if f.value in flags), base)
    exit_code, exit_signal = _json_exit(raw.get("exit_code"))
    return JobInfo(
        job_id=job_id,
        state=shown,
        base_state=base,
        # What the text form prints as Reason=: the description when there is one, its
        # spaces as underscores ("RaisedSignal:9(Killed)", "job_requeued_in_held_state"),
        # else the reason.
        state_reason=_json_text(raw.get("state_description")).replace(" ", "_")
        or _none_if_null(_json_text(raw.get("state_reason"))),
        exit_code=exit_code,
        exit_signal=exit_signal,
        nodes=_nodes(_json_text(raw.get("nodes"))),
        excluded_nodes=_nodes(_json_text(raw.get("excluded_nodes"))),
        required_nodes=_nodes(_json_text(raw.get("required_nodes"))),
        restart_count=_json_count(raw.get("restart_cnt")),
        requeue=raw.get("requeue") is True,
        batch=raw.get("batch_flag") is True,
        user=_json_text(raw.get("user_name")),
        uid=_json_count(raw.get("user_id"), default=None),
        partition=_json_text(raw.get("partition")),
        num_nodes=_json_count(raw.get("node_count")),
        time_limit_min=_json_count(raw.get("time_limit"), default=None),  # infinite: None
        admin_comment=_json_text(raw.get("admin_comment")),
        comment=_json_text(raw.get("comment")),
        source="scontrol",
        std_out=_json_text(raw.get("stdout_expanded")),
        # As in the text form, an empty stderr means it goes to the StdOut file.
        std_err=_json_text(raw.get("stderr_expanded")) or _json_text(raw.get("stdout_expanded")),
        batch_host=_json_text(raw.get("batch_host")),
        start_time=_json_time(raw.get("start_time")),
        expedited_requeue="EXPEDITED_REQUEUE" in (raw.get("flags") or ()),
        **_json_array_and_het(raw),
    )


def _json_array_and_het(raw: dict[str, Any]) -> ArrayAndHetIds:
    """data_parser's UINT32_NO_VAL fields (v0.0.41 to v0.0.44): array_job_id and het_job_id
    are 0 for a job that is neither; array_task_id is unset (NO_VAL) for a record of tasks
    still pending together (array_task_string holds them); het_job_offset is 0 for the
    leader."""
    array_job = _json_count(raw.get("array_job_id")) or None
    het_job = _json_count(raw.get("het_job_id")) or None
    task = _json_count(raw.get("array_task_id"), default=None)
    return {
        "array_job_id": array_job,
        "array_task_id": task if array_job is not None else None,
        "het_job_id": het_job,
        "het_job_offset": _json_count(raw.get("het_job_offset")) if het_job else None,
    }


def _json_count(value: Any, default: int | None = 0) -> Any:
    """A plain int or {"set": bool, "infinite": bool, "number": int}; unset -> default."""
    if isinstance(value, dict):
        if not value.get("set") or value.get("infinite"):
            return default
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value


def _json_exit(value: Any) -> tuple[int, int]:
    """data_parser's PROCESS_EXIT_CODE: {"status", "return_code", "signal": {"id", "name"}};
    a job ended by a signal has no return code (ExitCode=0:15 in the text form)."""
    if not isinstance(value, dict):
        return 0, 0
    signal = value.get("signal")
    return (
        _json_count(value.get("return_code")),
        _json_count(signal.get("id") if isinstance(signal, dict) else None),
    )
