"""Parsers of real Slurm output recorded from the dev clusters: 22.05 (tests/fixtures/slurm
and its 22.05/) and 25.11 (25.11/), plus the node JSON shape of each data_parser version."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slurm_triage.slurm import parse
from slurm_triage.slurm.errors import JobNotFound, SlurmOutputError
from slurm_triage.slurm.model import JobState
from slurm_triage.slurm.parse import (
    SACCT_DELIMITER,
    SACCT_FIELDS,
    parse_exit_code,
    parse_key_values,
    parse_sacct_job,
    parse_scontrol_het_parts,
    parse_scontrol_het_parts_json,
    parse_scontrol_job,
    parse_scontrol_nodes_json,
    parse_sinfo_json,
    parse_time_limit_min,
    parse_version,
    version_tuple,
)
from tests.conftest import FIXTURES

SLURM = FIXTURES / "slurm"


def test_scontrol_job_fields() -> None:
    """A running job recorded from scontrol parses to the right state, nodes and limits."""
    job = parse_scontrol_job((SLURM / "scontrol_show_job_running.txt").read_text(), 2)
    assert job.state is JobState.RUNNING
    assert job.nodes == ("node1", "node2")
    assert job.excluded_nodes == ("node3",)
    assert job.restart_count == 0
    assert job.requeue and job.batch
    assert (job.user, job.uid, job.partition, job.num_nodes) == ("root", 0, "gpu", 2)
    assert job.time_limit_min == 1 * 1440 + 2 * 60 + 4
    assert json.loads(job.admin_comment)["triage"]["cause"] == "gpu_unavailable"


def test_scontrol_job_required_nodes() -> None:
    """A job submitted with -w node1,node2 shows ReqNodeList=node[1-2]: expanded; none is ()."""
    job = parse_scontrol_job((SLURM / "scontrol_show_job_required_nodes.txt").read_text(), 3)
    assert job.required_nodes == ("node1", "node2")
    assert job.excluded_nodes == ()
    assert (job.user, job.nodes) == ("alice", ("node1", "node2"))
    running = parse_scontrol_job((SLURM / "scontrol_show_job_running.txt").read_text(), 2)
    assert running.required_nodes == ()


def test_user_text_cannot_spoof_fields() -> None:
    """A job name or comment containing 'JobState=...' or 'ExcNodeList=...' changes nothing."""
    job = parse_scontrol_job((SLURM / "scontrol_show_job_running.txt").read_text(), 2)
    assert job.state is JobState.RUNNING  # the job name says JobState=COMPLETED
    assert job.restart_count == 0  # ... and Restarts=9
    assert job.excluded_nodes == ("node3",)  # the comment says ExcNodeList=node9
    assert job.comment == "x ExcNodeList=node9 AdminComment=evil"
    assert "evil" not in job.admin_comment


def test_key_values_first_occurrence_wins() -> None:
    """A key repeated later in the record does not override the first one."""
    fields = parse_key_values("JobId=1 JobName=a B=2\n   JobState=RUNNING\n   JobState=FAILED")
    assert fields["JobName"] == "a B=2"
    assert fields["JobState"] == "RUNNING"
    assert "B" not in fields


def test_scontrol_wrong_job_is_error() -> None:
    """Output for another job id is not silently taken for the asked one."""
    with pytest.raises(SlurmOutputError):
        parse_scontrol_job((SLURM / "scontrol_show_job_running.txt").read_text(), 3)


def test_sacct_failed_job() -> None:
    """A failed job's exit code comes from sacct's ExitCode column."""
    job = parse_sacct_job((SLURM / "sacct_failed_exit5.txt").read_text(), 3)
    assert (job.state, job.exit_code, job.exit_signal) == (JobState.FAILED, 5, 0)
    assert job.nodes == ("node1",) and job.restart_count == 0 and job.source == "sacct"


def test_sacct_requeued_job_counts_restarts() -> None:
    """Each REQUEUED row of `sacct -D` is one restart; the last row is the current state."""
    job = parse_sacct_job((SLURM / "sacct_requeued_then_cancelled.txt").read_text(), 2)
    assert job.state is JobState.CANCELLED
    assert job.restart_count == 1
    assert job.nodes == ()  # "None assigned"
    assert json.loads(job.admin_comment)["triage"]["n"] == 1


def test_sinfo_json_nodes_and_filter() -> None:
    """sinfo --json (22.05) gives base state plus flags, filtered to the asked names."""
    text = (SLURM / "sinfo.json").read_text()
    nodes = parse_sinfo_json(text)
    assert [n.name for n in nodes] == ["node1", "node2", "node3"]
    assert parse_sinfo_json(text, ["node3"])[0].name == "node3"
    assert parse_sinfo_json(text, ["nodeX"]) == ()


def test_sinfo_json_drained_node_and_newer_format() -> None:
    """A drained idle node is IDLE + DRAIN in 22.05's form and in 23.02's list form."""
    old = {
        "nodes": [
            {
                "name": "n1",
                "state": "idle",
                "state_flags": ["DRAIN"],
                "reason": "triage: x",
                "reason_set_by_user": "root",
                "reason_changed_at": 5,
            }
        ]
    }
    new = {
        "nodes": [
            {
                "name": "n1",
                "state": ["IDLE", "DRAIN"],
                "reason": "triage: x",
                "reason_changed_at": {"set": True, "number": 5},
            }
        ]
    }
    for doc in (old, new):
        (node,) = parse_sinfo_json(json.dumps(doc))
        assert node.state == "IDLE" and node.drained and node.reason == "triage: x"
        assert node.reason_time == 5 and node.label == "IDLE+DRAIN"


@pytest.mark.parametrize("text", ["", "not json", "{}", '{"nodes": [{"state": "idle"}]}'])
def test_sinfo_garbage_is_our_error(text: str) -> None:
    """Garbage from sinfo raises SlurmOutputError, nothing else."""
    with pytest.raises(SlurmOutputError):
        parse_sinfo_json(text)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("UNLIMITED", None),
        ("30", 30),
        ("30:30", 31),
        ("1:00:00", 60),
        ("2-0", 2880),
        ("2-1:30", 2970),
        ("2-01:30:05", 2971),
        ("00:05:00", 5),
    ],
)
def test_time_limits(text: str, minutes: int | None) -> None:
    """Every Slurm time-limit format converts to minutes (seconds round up)."""
    assert parse_time_limit_min(text) == minutes


def test_exit_code_and_version() -> None:
    """ExitCode 'code:signal' and the version line parse; garbage raises."""
    assert parse_exit_code("0:9") == (0, 9)
    assert parse_version("slurm-wlm 22.05.8\n") == "22.05.8"
    with pytest.raises(SlurmOutputError):
        parse_exit_code("x")
    with pytest.raises(SlurmOutputError):
        parse_time_limit_min("soon")


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("CANCELLED by 0", JobState.CANCELLED),
        ("NF", JobState.NODE_FAIL),
        ("out_of_memory", JobState.OUT_OF_MEMORY),
        ("WEIRD", JobState.UNKNOWN),
    ],
)
def test_job_state_spellings(text: str, state: JobState) -> None:
    """Slurm's state spellings map onto the closed enum, with UNKNOWN for the rest."""
    assert JobState.parse(text) is state


def test_no_user_text_is_asked_of_sacct() -> None:
    """sacct prints free text raw: with the job's Comment asked for, `--comment $'x\\n3<US>
    NODE_FAIL<US>...'` printed a forged row after the real one, and a FAILED job read as
    NODE_FAIL on node2 (a root-sourced state in the decision). No field the job's user sets
    is asked for, so every printed line is Slurm's own."""
    user_text = {"Comment", "JobName", "WorkDir", "Constraints", "Reservation", "WCKey"}
    assert not user_text & set(SACCT_FIELDS)


# --- Output recorded on both Slurm generations (tests/fixtures/slurm/22.05 and 25.11) ---

V22 = SLURM / "22.05"
V25 = SLURM / "25.11"


@pytest.mark.parametrize(
    ("fixture", "label", "reason", "responding"),
    [
        (
            "drained_idle",
            "IDLE+DRAIN",
            "triage: gpu.xid 79 on GPU 3 (bus 0000:3b:00.0) Key=val",
            True,
        ),
        ("draining_allocated", "ALLOCATED+DRAIN", "triage: draining while allocated", True),
        ("down", "DOWN", "triage: node down test", False),
        ("just_resumed", "IDLE+NOT_RESPONDING", "", False),
    ],
)
def test_node_states_read_alike_on_22_05_and_25_11(
    fixture: str, label: str, reason: str, responding: bool
) -> None:
    """The same node3 (drained idle, draining with a job, down, just resumed) reads the same
    from 22.05's `sinfo --json` and 25.11's `scontrol --json show node node3`."""
    old = parse_sinfo_json((V22 / f"sinfo_{fixture}.json").read_text(), ["node3"])
    new = parse_scontrol_nodes_json((V25 / f"scontrol_show_node_{fixture}.json").read_text())
    for (node,) in (old, new):
        assert (node.name, node.label, node.reason) == ("node3", label, reason)
        assert node.drained is ("DRAIN" in label)
        assert node.responding is responding
        assert node.partitions == ("gpu",)
        assert (node.reason_user, node.reason_time is not None) == (
            ("root", True) if reason else ("", False)
        )


def test_scontrol_nodes_json_all_and_filtered() -> None:
    """25.11's `scontrol --json show nodes` lists every node, sorted, or the asked ones (node1
    ran another test's job when it was recorded)."""
    text = (V25 / "scontrol_show_nodes.json").read_text()
    assert [(n.name, n.label) for n in parse_scontrol_nodes_json(text)] == [
        ("node1", "MIXED"),
        ("node2", "IDLE"),
        ("node3", "IDLE"),
    ]
    assert [n.name for n in parse_scontrol_nodes_json(text, ["node3", "node1", "nodeX"])] == [
        "node3",
        "node1",
    ]


def test_comment_is_read_from_both_documents() -> None:
    """A node Comment set with scontrol comes back from both generations' JSON."""
    old = parse_sinfo_json((V22 / "sinfo_draining_allocated.json").read_text(), ["node3"])
    new = parse_scontrol_nodes_json(
        (V25 / "scontrol_show_node_draining_allocated.json").read_text()
    )
    assert old[0].comment == new[0].comment == '{"triage": "note"}'


def test_sinfo_json_of_23_02_on_is_refused_clearly() -> None:
    """25.11's `sinfo --json` is `{"sinfo": [...]}`: a one-line SlurmOutputError, which is
    why the door asks scontrol from 23.02 on."""
    with pytest.raises(SlurmOutputError, match="not the expected JSON document"):
        parse_sinfo_json((V25 / "sinfo.json").read_text())


def _node_doc(**fields: object) -> str:
    return json.dumps({"nodes": [{"name": "n1", **fields}]})


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(  # 22.05 sinfo --json
            {"state": "idle", "state_flags": ["DRAIN"], "reason_changed_at": 5,
             "reason_set_by_user": "root", "partitions": ["gpu"]},
            id="22.05",
        ),
        pytest.param(  # data_parser v0.0.39 (23.02): UINT64 time, CSV_LIST partitions
            {"state": ["IDLE", "DRAIN"], "reason_changed_at": 5, "reason_set_by_user": "root",
             "partitions": ["gpu"]},
            id="v0.0.39",
        ),
        pytest.param(  # v0.0.40-v0.0.44 (23.11-25.11): TIMESTAMP_NO_VAL as a struct
            {"state": ["IDLE", "DRAIN"],
             "reason_changed_at": {"set": True, "infinite": False, "number": 5},
             "reason_set_by_user": "root", "partitions": ["gpu"]},
            id="v0.0.40+",
        ),
        pytest.param(  # data_parser's "+complex" mode: a plain int; partitions as CSV text
            {"state": ["IDLE", "DRAIN"], "reason_changed_at": 5, "reason_set_by_user": "root",
             "partitions": "gpu"},
            id="complex-mode",
        ),
    ],
)  # fmt: skip
def test_node_json_shapes_of_every_version(fields: dict[str, object]) -> None:
    """Each shape data_parser v0.0.39-v0.0.44 (and 22.05's sinfo) prints reads as one node."""
    (node,) = parse_scontrol_nodes_json(_node_doc(reason="triage: x", **fields))
    assert (node.state, node.label, node.drained) == ("IDLE", "IDLE+DRAIN", True)
    assert (node.reason, node.reason_user, node.reason_time) == ("triage: x", "root", 5)
    assert node.partitions == ("gpu",)


@pytest.mark.parametrize(
    "stamp",
    [
        0,
        None,
        {"set": True, "infinite": False, "number": 0},
        {"set": False, "infinite": False, "number": 0},
        {"set": False, "infinite": True, "number": 0},
        "Infinity",  # data_parser's "+complex" mode
    ],
)
def test_unset_reason_time_is_none(stamp: object) -> None:
    """No reason time in any version's spelling (0, null, unset or infinite) is None."""
    (node,) = parse_scontrol_nodes_json(_node_doc(state=["IDLE"], reason_changed_at=stamp))
    assert node.reason_time is None and node.reason_user == ""


@pytest.mark.parametrize(
    "text",
    [
        _node_doc(state=[]),
        _node_doc(state=[None]),
        _node_doc(state=["IDLE"], reason=5),
        json.dumps({"nodes": [{"state": ["IDLE"], "name": ""}]}),
        json.dumps({"nodes": {"name": "n1"}}),
        json.dumps({"nodes": ["n1"]}),
    ],
)
def test_malformed_node_entries_are_our_error(text: str) -> None:
    """An empty state list, a non-text field or a nameless node raises SlurmOutputError."""
    with pytest.raises(SlurmOutputError):
        parse_scontrol_nodes_json(text)


@pytest.mark.parametrize("version", ["22.05", "25.11"])
@pytest.mark.parametrize(
    ("fixture", "job_id", "state", "nodes", "excluded", "required", "restarts", "exit_code"),
    [
        ("running", None, JobState.RUNNING, ("node3",), (), ("node3",), 0, 0),
        ("completed", None, JobState.COMPLETED, ("node3",), (), ("node3",), 0, 0),
        ("failed_exit3", None, JobState.FAILED, ("node3",), (), ("node3",), 0, 3),
        ("requeued_node_failure", None, JobState.PENDING, (), (), ("node3",), 1, 0),
        ("requeued_excluded", None, JobState.PENDING, (), ("node1", "node2"), ("node3",), 1, 0),
        ("pending_user_text", None, JobState.PENDING, (), ("node1", "node2"), ("node3",), 0, 0),
        ("array_task", "task1", JobState.RUNNING, ("node3",), (), ("node3",), 0, 0),
    ],
)  # fmt: skip
def test_scontrol_job_on_both_generations(
    version: str,
    fixture: str,
    job_id: str | None,
    state: JobState,
    nodes: tuple[str, ...],
    excluded: tuple[str, ...],
    required: tuple[str, ...],
    restarts: int,
    exit_code: int,
) -> None:
    """Each recorded `scontrol show job` reads to the same facts on 22.05 and 25.11."""
    text = (SLURM / version / f"scontrol_show_job_{fixture}.txt").read_text()
    job = parse_scontrol_job(text, _first_job_id(text))
    assert (job.state, job.nodes, job.excluded_nodes, job.required_nodes) == (
        state,
        nodes,
        excluded,
        required,
    )
    assert (job.restart_count, job.exit_code, job.user, job.partition) == (
        restarts,
        exit_code,
        "root",
        "gpu",
    )
    assert job.batch and job.num_nodes == 1
    # 25.11 prints `StdErr=` empty when stderr shares the StdOut file; 22.05 printed the path.
    assert job.std_err == job.std_out and job.std_out.endswith(".out")


def _first_job_id(text: str) -> int:
    return int(text.split()[0].removeprefix("JobId="))


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_pending_job_user_text_changes_nothing(version: str) -> None:
    """A name with `JobState=COMPLETED Restarts=9` and a comment with `ExcNodeList=node9` and
    a newline (unindented) read as text on both generations; the limits and reason are Slurm's."""
    text = (SLURM / version / "scontrol_show_job_pending_user_text.txt").read_text()
    job = parse_scontrol_job(text, _first_job_id(text))
    assert job.comment == "x ExcNodeList=node9 AdminComment=evil\nJobState=FAILED Reason=forged"
    assert (job.admin_comment, job.time_limit_min) == ("", 1 * 1440 + 2 * 60 + 4)
    assert job.state_reason.startswith("ReqNodeNotAvail")


def test_25_11_forged_indented_line_is_refused() -> None:
    """25.11 prints the comment (and SubmitLine) raw: a newline followed by Slurm's own
    indentation and `JobState=FAILED` is a misplaced line, so the record is refused."""
    text = (V25 / "scontrol_show_job_forged_line.txt").read_text()
    with pytest.raises(SlurmOutputError, match="misplaced JobState"):
        parse_scontrol_job(text, 7)


def test_25_11_name_with_newline_and_held_job() -> None:
    """A held job whose name holds a newline and `JobState=COMPLETED ExitCode=9:0` (also in
    SubmitLine) reads as PENDING/JobHeldUser; `NumNodes=1-1` is 1 node."""
    job = parse_scontrol_job((V25 / "scontrol_show_job_held_name_newline.txt").read_text(), 24)
    assert (job.state, job.state_reason, job.exit_code) == (JobState.PENDING, "JobHeldUser", 0)
    assert (job.nodes, job.num_nodes, job.comment) == (
        (),
        1,
        "ReqNodeList=node9 ExcNodeList=node8",
    )
    assert job.required_nodes == ("node3",) and job.excluded_nodes == ()


@pytest.mark.parametrize(("version", "ids"), [("22.05", (6, 9, 10)), ("25.11", (13, 14, 15))])
def test_array_records_are_told_apart_by_raw_id(version: str, ids: tuple[int, ...]) -> None:
    """`scontrol show job ARRAY` prints every task; each is read by its own JobId."""
    text = (SLURM / version / "scontrol_show_job_array.txt").read_text()
    outs = {parse_scontrol_job(text, i).std_out.rsplit("-", 1)[1] for i in ids}
    assert outs == {f"{ids[0]}_2.out", f"{ids[0]}_0.out", f"{ids[0]}_1.out"}


@pytest.mark.parametrize(("version", "leader"), [("22.05", 7), ("25.11", 16)])
def test_het_job_components(version: str, leader: int) -> None:
    """Both components of a het job read by their raw ids (Slurm excludes each one's nodes
    from the other)."""
    text = (SLURM / version / "scontrol_show_job_het.txt").read_text()
    first, second = parse_scontrol_job(text, leader), parse_scontrol_job(text, leader + 1)
    assert (first.nodes, first.excluded_nodes) == (("node3",), ("node1",))
    assert (second.nodes, second.excluded_nodes) == (("node1",), ("node3",))


@pytest.mark.parametrize(
    ("name", "parse", "ids"),
    [
        ("22.05/scontrol_show_job_het.txt", parse_scontrol_het_parts, (7, 8)),
        ("25.11/scontrol_show_job_het.txt", parse_scontrol_het_parts, (16, 17)),
        ("25.11/scontrol_json_show_job_het.json", parse_scontrol_het_parts_json, (9, 10)),
    ],
)
def test_every_het_job_component_by_offset(name: str, parse: Any, ids: tuple[int, int]) -> None:
    """`scontrol show job LEADER` prints every component; each keeps its own exclusions
    (the JSON one was submitted `--exclude=node3 : --exclude=node1`)."""
    parts = parse((SLURM / name).read_text(), ids[0])
    assert tuple(p.job_id for p in parts) == ids
    assert [(p.het_job_id, p.het_job_offset) for p in parts] == [(ids[0], 0), (ids[0], 1)]
    assert parts[0].excluded_nodes != parts[1].excluded_nodes
    with pytest.raises(SlurmOutputError):
        parse((SLURM / name).read_text(), 12345)


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_sacct_failed_exit_code(version: str) -> None:
    """`exit 3` is FAILED 3:0 in sacct -P on both generations."""
    text = (SLURM / version / "sacct_failed_exit3.txt").read_text()
    job = parse_sacct_job(text, int(text.split(SACCT_DELIMITER)[1]))
    assert (job.state, job.exit_code, job.exit_signal, job.nodes) == (
        JobState.FAILED,
        3,
        0,
        ("node3",),
    )


@pytest.mark.parametrize(("version", "task"), [("22.05", 9), ("25.11", 14)])
def test_sacct_array_task_matched_on_raw_id(version: str, task: int) -> None:
    """An array task prints JobID 13_0 but JobIDRaw 14: asked by its raw id, it is found,
    whether sacct was asked for the task or for the whole array."""
    for name in ("sacct_array_task.txt", "sacct_array.txt"):
        job = parse_sacct_job((SLURM / version / name).read_text(), task)
        assert (job.job_id, job.state, job.restart_count) == (task, JobState.COMPLETED, 0)


@pytest.mark.parametrize(("version", "leader"), [("22.05", 7), ("25.11", 16)])
def test_sacct_het_parts_matched_on_raw_id(version: str, leader: int) -> None:
    """Het job parts print 16+0 and 16+1; raw ids 16 and 17 pick each part's own row."""
    text = (SLURM / version / "sacct_het.txt").read_text()
    assert parse_sacct_job(text, leader).nodes == ("node3",)
    assert parse_sacct_job(text, leader + 1).nodes == ("node1",)


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_sacct_node_failure_requeue_counts_as_restart(version: str) -> None:
    """slurmctld's requeue after a node failure leaves a NODE_FAIL row, not REQUEUED (both
    generations): every row before the last is a restart."""
    text = (SLURM / version / "sacct_node_fail_then_cancelled.txt").read_text()
    job = parse_sacct_job(text, int(text.split(SACCT_DELIMITER)[1]))
    assert (job.state, job.restart_count, job.nodes) == (JobState.CANCELLED, 1, ())


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_sacct_requeued_job_keeps_admin_comment(version: str) -> None:
    """`scontrol requeue` then cancel: one restart, and our AdminComment on the last row."""
    text = (SLURM / version / "sacct_requeued_then_cancelled.txt").read_text()
    job = parse_sacct_job(text, int(text.split(SACCT_DELIMITER)[1]))
    assert (job.state, job.state_text, job.restart_count) == (
        JobState.CANCELLED,
        "CANCELLED by 0",
        1,
    )
    assert json.loads(job.admin_comment)["triage"]["cause"] == "test"


def test_version_tuple() -> None:
    """Versions compare by release: 22.05.8 < 23.02 <= 25.11.7; garbage raises."""
    assert version_tuple("22.05.8") < (23, 2) <= version_tuple("25.11.7")
    assert version_tuple("23.02") == (23, 2)
    with pytest.raises(SlurmOutputError):
        version_tuple("x")


@pytest.mark.parametrize(
    ("name", "state", "reason"),
    [
        ("running", JobState.RUNNING, ""),
        ("completing", JobState.COMPLETING, "NonZeroExitCode"),
        ("requeue_held", JobState.PENDING, "job_requeued_in_held_state"),
    ],
)
def test_an_expedited_requeue_job_reads_as_such_on_25_11(
    name: str, state: JobState, reason: str
) -> None:
    """`sbatch --requeue=expedite`: 25.11 prints `ExpeditedRequeue=Yes` on its flags line
    after StdOut, and a held expedited requeue with its own reason."""
    text = (V25 / f"scontrol_show_job_expedited_{name}.txt").read_text()
    job = parse.parse_scontrol_job(text, int(text.split()[0].split("=")[1]))
    assert job.expedited_requeue is True
    assert (job.state, job.state_reason) == (state, reason)


def test_expedite_is_read_only_from_slurms_flags_line() -> None:
    """A plain job (no flags line) is not expedited; the words in a job name are not read."""
    plain = (V25 / "scontrol_show_job_running.txt").read_text()
    assert (
        parse.parse_scontrol_job(plain, int(plain.split()[0].split("=")[1])).expedited_requeue
        is False
    )
    forged = plain.replace("JobName=", "JobName=ExpeditedRequeue=Yes ", 1)
    job_id = int(forged.split()[0].split("=")[1])
    assert parse.parse_scontrol_job(forged, job_id).expedited_requeue is False


def test_a_job_slurm_requeued_itself_is_still_a_batch_job() -> None:
    """Slurm counts BatchFlag up when it requeues a job itself (a failed Prolog): 2 is a
    batch job too (read as not-batch, the decision left such jobs unrequeued)."""
    text = (V25 / "scontrol_show_job_requeued_by_slurm_batchflag2.txt").read_text()
    assert "BatchFlag=2" in text
    assert parse.parse_scontrol_job(text, 131).batch is True


# -- `scontrol --json show job` (24.05+) ------------------------------------------------------


def _json_job(name: str) -> str:
    return (V25 / f"scontrol_json_show_job_{name}.json").read_text()


@pytest.mark.parametrize(
    ("name", "job_id", "shown", "base", "exit_code", "restarts"),
    [
        ("completing_completed", 4, JobState.COMPLETING, JobState.COMPLETED, (0, 0), 0),
        ("completing_failed_exit3", 6, JobState.COMPLETING, JobState.FAILED, (3, 0), 0),
        ("completing_cancelled", 5, JobState.COMPLETING, JobState.CANCELLED, (0, 15), 0),
        # Slurm requeued it itself (its Prolog failed): PENDING under COMPLETING, already the
        # next run's restart count, and 25.11's 0:54 (sacct shows the same for that run).
        ("completing_requeued_by_slurm", 8, JobState.COMPLETING, JobState.PENDING, (0, 54), 1),
    ],
)  # fmt: skip
def test_json_job_keeps_the_state_under_completing(
    name: str,
    job_id: int,
    shown: JobState,
    base: JobState,
    exit_code: tuple[int, int],
    restarts: int,
) -> None:
    """Recorded on 25.11 while EpilogSlurmctld ran: the text form says COMPLETING for all
    four; JSON also says how the run ended, which spares the decision a wait for sacct."""
    job = parse.parse_scontrol_job_json(_json_job(name), job_id)
    assert (job.state, job.base_state) == (shown, base)
    assert ((job.exit_code, job.exit_signal), job.restart_count) == (exit_code, restarts)
    assert (job.user, job.uid, job.partition, job.batch, job.requeue) == (
        "triage-job",
        999,
        "gpu",
        True,
        True,
    )
    assert job.std_out == f"/tmp/exp/o.{job_id}" and job.std_err == job.std_out
    assert job.num_nodes == 1 and job.start_time
    # `-t` unset with a partition limit: {"set": false, "infinite": true} is UNLIMITED.
    assert job.time_limit_min in (None, 525600)


def test_json_job_user_text_is_only_user_text() -> None:
    """A name `evil\\n   StdOut=/etc/shadow` and a comment `x\\n   JobState=COMPLETED` (the
    text form refuses such a record) are plain strings in JSON: the output path is Slurm's
    expanded one; the expedite flag is read from the job's flags."""
    job = parse.parse_scontrol_job_json(_json_job("running_forged"), 3)
    assert (job.state, job.base_state, job.expedited_requeue) == (
        JobState.RUNNING,
        JobState.RUNNING,
        True,
    )
    assert job.std_out == "/tmp/exp/o.3" and job.comment == "x\n   JobState=COMPLETED"
    assert job.nodes == ("node1", "node2") and job.batch_host == "node1"


def test_json_job_absent_is_job_not_found_and_junk_is_refused() -> None:
    """25.11 answers an unknown id with rc 0 and no jobs: JobNotFound (the door then asks
    accounting). A document of another shape is a SlurmOutputError, never a traceback."""
    with pytest.raises(JobNotFound):
        parse.parse_scontrol_job_json(_json_job("completing_completed"), 99)
    for junk in ('{"jobs": {}}', "[]", "not json", '{"jobs": [{"job_id": 4, "job_state": 7}]}'):
        with pytest.raises(SlurmOutputError):
            parse.parse_scontrol_job_json(junk, 4)
    raw = json.loads(_json_job("completing_completed"))
    raw["jobs"][0]["nodes"] = ["node1"]
    with pytest.raises(SlurmOutputError, match="unexpected shape"):
        parse.parse_scontrol_job_json(json.dumps(raw), 4)


def test_json_job_numbers_of_every_shape() -> None:
    """Counts as plain ints or {"set", "infinite", "number"}; an infinite time limit is
    UNLIMITED (None), an unset one is None too."""
    raw = json.loads(_json_job("completing_completed"))
    job = raw["jobs"][0]
    job["time_limit"] = {"set": True, "infinite": True, "number": 0}
    job["node_count"] = 3
    job["exit_code"] = {"status": ["SIGNALED"], "return_code": 0, "signal": {"id": 9}}
    parsed = parse.parse_scontrol_job_json(json.dumps(raw), 4)
    assert (parsed.time_limit_min, parsed.num_nodes, parsed.exit_signal) == (None, 3, 9)


def test_the_text_form_shows_a_flag_instead_of_the_base_state() -> None:
    """`JobState=COMPLETING` hides how the run ended: base_state UNKNOWN (the decision then
    asks accounting); a plain `JobState=RUNNING` is its own base."""
    completing = parse_scontrol_job(
        (V25 / "scontrol_show_job_expedited_completing.txt").read_text(), 72
    )
    assert (completing.state, completing.base_state) == (JobState.COMPLETING, JobState.UNKNOWN)
    text = (SLURM / "22.05" / "scontrol_show_job_running.txt").read_text()
    running = parse_scontrol_job(text, _first_job_id(text))
    assert running.base_state is JobState.RUNNING


def test_json_reason_reads_as_the_text_forms() -> None:
    """Reason= in the text form is the description when set, spaces as underscores; JSON
    keeps both apart. The decision compares reasons such as 'job_requeued_in_held_state'."""
    raw = json.loads(_json_job("completing_completed"))
    raw["jobs"][0].update(
        state_reason="JobHeldUser", state_description="job requeued in held state"
    )
    job = parse.parse_scontrol_job_json(json.dumps(raw), 4)
    assert job.state_reason == "job_requeued_in_held_state"
    assert parse.parse_scontrol_job_json(_json_job("completing_failed_exit3"), 6).state_reason == (
        "NonZeroExitCode"
    )
