"""Reading sacct output: real recorded Slurm 22.05 text, header or not, `|` inside
AdminComment, attributions joined from AdminComment and from a second source."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from slurm_triage.analytics import attribution_join, ingest
from slurm_triage.analytics.ingest import IngestError
from tests.conftest import FIXTURES

# Recorded on the dev cluster (slurm-wlm 22.05.8-4+deb12u3), 2026-11-21, with
# `sacct -a -D -X -P --delimiter='|' -o JobID,JobIDRaw,State,ExitCode,Submit,Start,End,
# ElapsedRaw,NNodes,AllocTRES,NodeList,Partition,User,AdminComment -S 2026-11-21`.
# Job 3 was requeued (`scontrol requeue`) with our decision and a `|` in its AdminComment,
# then got a second decision and was cancelled; job 7 was cancelled while pending; job 5
# had no GPUs.
RECORDED_WITH_HEADER = """\
JobID|JobIDRaw|State|ExitCode|Submit|Start|End|ElapsedRaw|NNodes|AllocTRES|NodeList|Partition|User|AdminComment
1|1|COMPLETED|0:0|2026-11-21T23:03:38|2026-11-21T23:03:38|2026-11-21T23:03:41|3|1|billing=1,cpu=1,gres/gpu=8,mem=100M,node=1|node1|gpu|root|
2|2|FAILED|5:0|2026-11-21T23:03:38|2026-11-21T23:03:38|2026-11-21T23:03:40|2|1|billing=1,cpu=1,gres/gpu=2,mem=100M,node=1|node2|gpu|root|
3|3|REQUEUED|0:0|2026-11-21T23:03:38|2026-11-21T23:03:41|2026-11-21T23:03:48|7|2|billing=2,cpu=2,gres/gpu=16,mem=200M,node=2|node[1,3]|gpu|root|{"triage":{"cause":"gpu_unavailable","nodes":["node3"],"action":"requeue_exclude","n":1},"note":"a|b"}
4|4|TIMEOUT|0:0|2026-11-21T23:03:38|2026-11-21T23:03:38|2026-11-21T23:05:04|86|1|billing=1,cpu=1,gres/gpu=1,mem=100M,node=1|node2|gpu|root|
5|5|COMPLETED|0:0|2026-11-21T23:03:38|2026-11-21T23:03:38|2026-11-21T23:03:42|4|1|billing=1,cpu=1,mem=100M,node=1|node2|gpu|root|
3|3|CANCELLED by 0|0:0|2026-11-21T23:03:48|2026-11-21T23:04:00|2026-11-21T23:05:19|79|2|billing=2,cpu=2,gres/gpu=16,mem=200M,node=2|node[1,3]|gpu|root|{"triage":{"cause":"user_code","nodes":[],"action":"none","n":2}}
7|7|CANCELLED by 0|0:0|2026-11-21T23:05:16|None|2026-11-21T23:05:19|0|3||None assigned|gpu|root|
"""  # noqa: E501
# The same cluster a moment later with -n (no header), after an array job 8 ran: array
# tasks keep JobID 8_1/8_2 but have their own JobIDRaw.
RECORDED_NO_HEADER = (
    RECORDED_WITH_HEADER.split("\n", 1)[1]
    + "8_1|9|COMPLETED|0:0|2026-11-21T23:05:37|2026-11-21T23:05:37|2026-11-21T23:05:39|2|1|"
    "billing=1,cpu=1,gres/gpu=4,mem=100M,node=1|node1|gpu|root|\n"
    "8_2|8|COMPLETED|0:0|2026-11-21T23:05:37|2026-11-21T23:05:37|2026-11-21T23:05:39|2|1|"
    "billing=1,cpu=1,gres/gpu=4,mem=100M,node=1|node1|gpu|root|\n"
)


def _write(tmp_path: Path, text: str | bytes, name: str = "sacct.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _read(tmp_path: Path, text: str | bytes) -> pl.DataFrame:
    return attribution_join.attribute(ingest.read_sacct_file(_write(tmp_path, text)).attempts)


def test_recorded_output_with_header_is_typed(tmp_path: Path) -> None:
    """Every row of real sacct output becomes one attempt with states, GPUs and times."""
    frame = _read(tmp_path, RECORDED_WITH_HEADER)
    assert frame["job_raw"].to_list() == [1, 2, 3, 3, 4, 5, 7]
    assert frame["state"].cast(pl.String).to_list() == [
        "COMPLETED",
        "FAILED",
        "REQUEUED",
        "CANCELLED",
        "TIMEOUT",
        "COMPLETED",
        "CANCELLED",
    ]
    assert frame["gpus"].to_list() == [8, 2, 16, 16, 1, 0, 0]
    assert frame["nnodes"].to_list() == [1, 1, 2, 2, 1, 1, 3]
    assert frame["elapsed_s"].to_list() == [3, 2, 7, 79, 86, 4, 0]


def test_header_and_no_header_read_the_same_rows(tmp_path: Path) -> None:
    """With -n (no header) the default column order applies and gives the same frame."""
    with_header = _read(tmp_path, RECORDED_WITH_HEADER)
    without = _read(tmp_path, RECORDED_NO_HEADER).filter(pl.col("job_raw") < 8)
    assert with_header.equals(without)


def test_array_tasks_are_separate_jobs_by_jobidraw(tmp_path: Path) -> None:
    """Array tasks 8_1 and 8_2 are different job runs (JobIDRaw 9 and 8)."""
    frame = _read(tmp_path, RECORDED_NO_HEADER)
    assert sorted(frame.filter(pl.col("job_raw") >= 8)["job_raw"].to_list()) == [8, 9]


def test_pipe_inside_admincomment_keeps_columns_aligned(tmp_path: Path) -> None:
    """A `|` after the triage object: the cause is read and no other column shifts."""
    frame = _read(tmp_path, RECORDED_WITH_HEADER)
    requeued = frame.filter(pl.col("state") == "REQUEUED").row(0, named=True)
    assert requeued["cause"] == "gpu_unavailable"
    assert requeued["domain"] == "hardware"
    assert requeued["gpus"] == 16


def test_pipes_before_the_triage_object_are_glued_back(tmp_path: Path) -> None:
    """Free text with several `|` ahead of our JSON still yields its cause and n."""
    line = (
        "11|11|FAILED|1:0|2026-01-01T00:00:00|2026-01-01T00:10:00|2026-01-01T01:10:00|3600|1|"
        'billing=8,gres/gpu=8,node=1|n1|p|u|ops|note|x {"triage":{"cause":"gpu_memory","n":1}}\n'
    )
    frame = _read(tmp_path, line)
    assert frame["cause"].to_list() == ["gpu_memory"]
    assert frame["comment_n"].to_list() == [1]


def test_a_decision_about_an_earlier_attempt_lands_on_that_attempt(tmp_path: Path) -> None:
    """A comment with n=1 found on attempt 2 attributes attempt 1 (the door writes the
    AdminComment after the requeue, so it lands on the new row)."""
    fixture = (FIXTURES / "slurm" / "sacct_requeued_then_cancelled.txt").read_text()
    comment = fixture.strip().splitlines()[0].split("\x1f")[-1]
    text = (
        "2|2|REQUEUED|0:0|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T02:00:10|7200|2|"
        "gres/gpu=16,node=2|node[1-2]|gpu|root|\n"
        "2|2|CANCELLED by 0|0:0|2026-01-01T02:00:10|None|2026-01-01T02:05:00|0|2||"
        f"None assigned|gpu|root|{comment}\n"
    )
    frame = _read(tmp_path, text)
    assert frame["cause"].cast(pl.String).to_list() == ["gpu_unavailable", "cancelled"]


def test_completed_rows_stay_completed_whatever_the_comment(tmp_path: Path) -> None:
    """Success is success: a COMPLETED row with a hardware comment counts as completed."""
    line = (
        "5|5|COMPLETED|0:0|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|3600|1|"
        'gres/gpu=8|n1|p|u|{"triage":{"cause":"gpu_memory","n":1}}\n'
    )
    assert _read(tmp_path, line)["cause"].to_list() == ["completed"]


def test_unknown_cause_ids_fall_back_to_the_state(tmp_path: Path) -> None:
    """A cause id outside the taxonomy is ignored: NODE_FAIL stays node_failure."""
    line = (
        "6|6|NODE_FAIL|0:0|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|3600|1|"
        'gres/gpu=8|n1|p|u|{"triage":{"cause":"cosmic_rays","n":1}}\n'
    )
    assert _read(tmp_path, line)["cause"].to_list() == ["node_failure"]


def test_journal_attributions_join_and_win_over_admincomment(tmp_path: Path) -> None:
    """A second source keyed by (job_raw, attempt) overrides AdminComment's cause."""
    accounting = ingest.read_sacct_file(_write(tmp_path, RECORDED_WITH_HEADER))
    journal = pl.LazyFrame(
        {"job_raw": [3, 2], "attempt": [1, 1], "cause": ["infiniband", "cuda_oom"]}
    )
    frame = attribution_join.attribute(accounting.attempts, journal)
    causes = dict(zip(frame["job_raw"], frame["cause"].cast(pl.String), strict=False))
    assert causes[2] == "cuda_oom"
    first_of_3 = frame.filter(pl.col("job_raw") == 3)["cause"].cast(pl.String).to_list()
    assert first_of_3 == ["infiniband", "user_code"]


def test_typed_only_gpu_tres_are_summed(tmp_path: Path) -> None:
    """A site accounting only typed GPUs gets the sum of the typed counts."""
    line = (
        "7|7|COMPLETED|0:0|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|3600|1|"
        "billing=8,gres/gpu:a100=4,gres/gpu:h100=2,node=1|n1|p|u|\n"
    )
    assert _read(tmp_path, line)["gpus"].to_list() == [6]


def test_rows_sort_by_job_and_keep_their_order_within_a_job(tmp_path: Path) -> None:
    """Out-of-order job ids are sorted; a job's rows keep sacct's chronological order."""
    frame = _read(tmp_path, RECORDED_WITH_HEADER)
    assert frame["job_raw"].is_sorted()
    assert frame.filter(pl.col("job_raw") == 3)["state"].cast(pl.String).to_list() == [
        "REQUEUED",
        "CANCELLED",
    ]


def test_running_jobs_are_kept_as_active(tmp_path: Path) -> None:
    """A row still RUNNING (End=Unknown) is read, as ACTIVE, with no end time."""
    line = (
        "9|9|RUNNING|0:0|2026-01-01T00:00:00|2026-01-01T00:00:00|Unknown|60|1|gres/gpu=8|n1|p|u|\n"
    )
    frame = _read(tmp_path, line)
    assert frame["state"].to_list() == ["ACTIVE"]
    assert frame["end"].to_list() == [None]


def test_broken_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    """Lines that are not job rows are dropped and reported; blank lines are not errors."""
    text = RECORDED_WITH_HEADER + "\nthis is not sacct\n12|x|FAILED\n"
    accounting = ingest.read_sacct_file(_write(tmp_path, text))
    assert accounting.attempts.height == 7
    assert accounting.bad_lines == 2


def test_invalid_utf8_in_a_comment_is_tolerated(tmp_path: Path) -> None:
    """A stray non-UTF-8 byte falls back to lossy decoding instead of failing."""
    line = (
        b"4|4|FAILED|1:0|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|3600|1|"
        b'gres/gpu=8|n1|p|u|caf\xe9 {"triage":{"cause":"pcie","n":1}}\n'
    )
    assert _read(tmp_path, line)["cause"].to_list() == ["pcie"]


def test_in_memory_text_reads_like_a_file(tmp_path: Path) -> None:
    """What the Slurm door returns (a string) parses exactly like the saved file."""
    from_text = ingest.read_sacct_text(RECORDED_NO_HEADER).attempts
    from_file = ingest.read_sacct_file(_write(tmp_path, RECORDED_NO_HEADER)).attempts
    assert from_text.equals(from_file)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "no sacct job rows"),
        (b"\x00\x01\x02 random bytes\nmore|junk\n", "not sacct output"),
        (b"JobID|State|End\n1|COMPLETED|x\n", "header lacks"),
        (b"JobID|JobIDRaw|State|Submit|End|NNodes\n1|1|COMPLETED|x|y|1\n", "ElapsedRaw or"),
        (b"JobID|JobIDRaw|State|Submit|End|ElapsedRaw|NNodes\n", "no sacct job rows"),
    ],
)
def test_garbage_is_a_one_line_error(tmp_path: Path, content: bytes, message: str) -> None:
    """Empty, binary or wrongly-headed input raises IngestError naming the file."""
    path = _write(tmp_path, content)
    with pytest.raises(IngestError, match=message) as raised:
        ingest.read_sacct_file(path)
    assert str(path) in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_doors_own_unit_separator_format_is_refused(tmp_path: Path) -> None:
    """The door's recorded `--delimiter=\\x1f` output is a different format: refused."""
    fixture = (FIXTURES / "slurm" / "sacct_failed_exit5.txt").read_bytes()
    with pytest.raises(IngestError, match="not sacct output"):
        ingest.read_sacct_file(_write(tmp_path, fixture))


def test_missing_file_and_directory_are_one_line_errors(tmp_path: Path) -> None:
    """No file, or a directory, is an IngestError (exit 2), not a traceback."""
    with pytest.raises(IngestError, match="no such file"):
        ingest.read_sacct_file(tmp_path / "absent.txt")
    with pytest.raises(IngestError, match="directory"):
        ingest.read_sacct_file(tmp_path)


def test_a_node_fault_only_the_user_claimed_is_unknown_in_analytics(tmp_path: Path) -> None:
    """Issue 12: a user's records must never make a node look like hardware in the
    statistics. Root-collected evidence keeps the cause; user-only evidence reads unknown."""
    from slurm_triage.analytics.fetch import journal_attributions
    from slurm_triage.journal import Journal

    journal = Journal(tmp_path / "journal.sqlite")
    user_claim = [{"kind": "kernel_event", "source": "user", "event": "xid", "xid": 79}]
    root_fact = [{"kind": "kernel_event", "source": "root", "event": "xid", "xid": 79}]
    for job, cause, evidence in (
        (1, "gpu_unavailable", user_claim),
        (2, "gpu_unavailable", root_fact),
        (3, "nccl_timeout", []),
        (4, "user_code", []),
    ):
        assert journal.claim(job, 0, "test")
        journal.record(job, 0, {"cause": cause, "evidence": evidence}, [])
    journal.close()
    causes = dict(
        journal_attributions(tmp_path / "journal.sqlite").select("job_raw", "cause").rows()
    )
    assert causes == {1: "unknown", 2: "gpu_unavailable", 3: "nccl_timeout", 4: "user_code"}


def test_the_plain_form_of_an_ended_jobs_comment_gives_its_cause(tmp_path: Path) -> None:
    """An ended job's AdminComment is written with sacctmgr as plain words (issue 17.3):
    `triage: cause=user_code ...` gives the cause as the JSON form does; a FAILED row
    would otherwise count as an unexplained failure."""
    line = (
        "8|8|FAILED|1:0|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|3600|1|"
        "gres/gpu=8|n1|p|u|triage: cause=user_code action=record_only nodes=n1 n=0\n"
    )
    assert _read(tmp_path, line)["cause"].to_list() == ["user_code"]
