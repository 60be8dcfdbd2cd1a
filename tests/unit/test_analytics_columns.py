"""Accounting as sites really have it (issue 18, item 2): JobID or JobIDRaw, Elapsed or
ElapsedRaw, with or without header and AdminComment, `|` in admins' text anywhere, and step
rows skipped before parsing and counted as steps, not as unparsable lines."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from slurm_triage.analytics import analysis, ingest
from slurm_triage.analytics.ingest import IngestError

# `sacct -a -D -P -o JobID,State,Submit,Start,End,Elapsed,NNodes,AllocTRES,NodeList` as
# Slurm prints it without -X: each job row is followed by its steps. Job 41 was requeued
# (two rows), array task 50_2 ran a day and more.
PLAIN = """\
JobID|State|Submit|Start|End|Elapsed|NNodes|AllocTRES|NodeList
41|REQUEUED|2026-01-01T00:00:00|2026-01-01T00:10:00|2026-01-01T02:10:00|02:00:00|32|billing=256,gres/gpu=256,node=32|node[1-32]
41.batch|CANCELLED|2026-01-01T00:10:00|2026-01-01T00:10:00|2026-01-01T02:10:00|02:00:00|1|cpu=12,mem=1G,node=1|node1
41.extern|COMPLETED|2026-01-01T00:10:00|2026-01-01T00:10:00|2026-01-01T02:10:00|02:00:00|32|cpu=384,node=32|node[1-32]
41.0|CANCELLED|2026-01-01T00:10:01|2026-01-01T00:10:01|2026-01-01T02:10:00|01:59:59|32|cpu=384,node=32|node[1-32]
41|COMPLETED|2026-01-01T00:00:00|2026-01-01T03:10:00|2026-01-01T05:10:00|02:00:00|32|billing=256,gres/gpu=256,node=32|node[1-32]
41.batch|COMPLETED|2026-01-01T03:10:00|2026-01-01T03:10:00|2026-01-01T05:10:00|02:00:00|1|cpu=12,mem=1G,node=1|node1
50_2|FAILED|2026-01-01T00:00:00|2026-01-01T00:00:05|2026-01-02T02:03:09|1-02:03:04|1|billing=8,gres/gpu=8,node=1|node40
50_2.batch|FAILED|2026-01-01T00:00:05|2026-01-01T00:00:05|2026-01-02T02:03:09|1-02:03:04|1|cpu=12,node=1|node40
50_3|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:05|2026-01-01T00:01:05|00:01:00|1|billing=8,gres/gpu=8,node=1|node41
44|FAILED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|01:00:00|1|billing=8,gres/gpu=8,node=1|node42
44.batch|FAILED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|01:00:00|1|cpu=12,node=1|node42
"""  # noqa: E501


def _read(tmp_path: Path, text: str, columns: str | None = None) -> ingest.Accounting:
    path = tmp_path / "sacct.txt"
    path.write_text(text)
    return ingest.read_sacct_file(path, columns=columns)


def test_plain_sacct_reads_every_job_row_and_counts_steps(tmp_path: Path) -> None:
    """JobID, Elapsed, steps: five job rows, six steps, nothing broken."""
    accounting = _read(tmp_path, PLAIN)
    assert accounting.attempts.height == 5
    assert accounting.steps == 6
    assert accounting.bad_lines == 0
    frame = accounting.attempts
    assert sorted(frame["elapsed_s"].to_list()) == [60, 3600, 7200, 7200, 93784]
    assert frame.filter(pl.col("job_label").is_not_null())["job_label"].sort().to_list() == [
        "50_2",
        "50_3",
    ]
    named = frame.filter(pl.col("job_raw") == 44).row(0, named=True)
    assert (named["state"], named["gpus"], named["nnodes"]) == ("FAILED", 8, 1)
    assert named["nodelist"] == "node42"


def test_array_tasks_without_jobidraw_are_separate_runs(tmp_path: Path) -> None:
    """50_2 and 50_3 are two runs keyed apart from each other and from any real job id;
    job 41's two rows are one run of two attempts."""
    result = analysis.analyse(_read(tmp_path, PLAIN), analysis.ReportOptions(simulate_runs=0))
    assert result.job_runs == 4
    frame = _read(tmp_path, PLAIN).attempts
    keys = frame.filter(pl.col("job_label").is_not_null())["job_raw"].to_list()
    assert len(set(keys)) == 2 and all(k < 0 for k in keys)
    assert frame.filter(pl.col("job_raw") == 41).height == 2


def test_steps_are_not_unparsable_and_the_same_jobs_read_without_them(tmp_path: Path) -> None:
    """The file without its step rows reads to the same attempts, with no steps counted."""
    without = "".join(
        line + "\n" for line in PLAIN.splitlines() if "." not in line.split("|", 1)[0]
    )
    bare = _read(tmp_path, without)
    assert bare.steps == 0
    assert bare.attempts.equals(_read(tmp_path, PLAIN).attempts)


def test_jobidraw_elapsedraw_admincomment_in_the_middle(tmp_path: Path) -> None:
    """AdminComment anywhere: its `|` pieces are glued back and the columns after it keep
    their place; our triage cause is read from it."""
    text = (
        "JobIDRaw|AdminComment|State|Submit|End|ElapsedRaw|NNodes|AllocTRES|NodeList\n"
        '7|ops|note {"triage":{"cause":"gpu_memory","n":1}}|FAILED|2026-01-01T00:00:00|'
        "2026-01-01T01:00:00|3600|32|gres/gpu=256,node=32|node[1-32]\n"
        "8||COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|3600|1|gres/gpu=8|node1\n"
    )
    accounting = _read(tmp_path, text)
    first = accounting.attempts.row(0, named=True)
    assert (first["comment_cause"], first["gpus"], first["elapsed_s"]) == ("gpu_memory", 256, 3600)
    assert accounting.bad_lines == 0
    result = analysis.analyse(accounting, analysis.ReportOptions(simulate_runs=0))
    assert result.rf.events == 1


def test_two_free_text_columns_make_extra_pieces_unparsable(tmp_path: Path) -> None:
    """With SystemComment and AdminComment both present, a row with an extra `|` cannot be
    placed: it is counted as unparsable, never guessed (a comment must not forge a state)."""
    text = (
        "JobIDRaw|SystemComment|State|AdminComment|Submit|End|ElapsedRaw|NNodes\n"
        "1|x|NODE_FAIL|COMPLETED||2026-01-01T00:00:00|2026-01-01T01:00:00|3600|1\n"
        "2|ok|COMPLETED||2026-01-01T00:00:00|2026-01-01T01:00:00|3600|1\n"
    )
    accounting = _read(tmp_path, text)
    assert accounting.attempts["job_raw"].to_list() == [2]
    assert accounting.bad_lines == 1


def test_headerless_file_with_its_column_list(tmp_path: Path) -> None:
    """Without a header the -o list names the columns (case and %width as sacct takes
    them); a wrong guess is a one-line error that says what to give."""
    body = PLAIN.split("\n", 1)[1]
    columns = "jobid,state%30,submit,start,end,elapsed,nnodes,alloctres,nodelist"
    assert _read(tmp_path, body, columns).attempts.equals(_read(tmp_path, PLAIN).attempts)
    with pytest.raises(IngestError, match="give --sacct-columns"):
        _read(tmp_path, body)


def test_a_column_list_that_contradicts_the_header_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="does not match the file's header"):
        _read(tmp_path, PLAIN, "JobID,State,Submit,End,Elapsed,NNodes")


@pytest.mark.parametrize(
    ("header", "missing"),
    [
        ("Partition|State|Submit|End|Elapsed|NNodes", "JobIDRaw or JobID"),
        ("JobID|State|Submit|End|NNodes", "ElapsedRaw or Elapsed"),
        ("JobID|State|Submit|End|Elapsed", "NNodes or AllocNodes"),
    ],
)
def test_a_header_without_a_needed_column_names_the_choices(
    tmp_path: Path, header: str, missing: str
) -> None:
    with pytest.raises(IngestError, match=missing):
        _read(tmp_path, header + "\n")


def test_elapsed_that_is_not_a_duration_is_a_broken_line(tmp_path: Path) -> None:
    """secs2time_str prints INVALID for a negative time: such a row is unparsable."""
    text = (
        "JobID|State|Submit|End|Elapsed|NNodes\n"
        "1|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|INVALID|1\n"
        "2|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|59:00|1\n"
        "3|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|00:59:00|1\n"
    )
    accounting = _read(tmp_path, text)
    assert accounting.attempts["elapsed_s"].to_list() == [3540]
    assert accounting.bad_lines == 2


def test_the_report_names_the_columns_and_the_steps(tmp_path: Path) -> None:
    """The summary says which columns were read as what, and how many step rows it
    skipped, apart from unparsable lines."""
    from slurm_triage.analytics import report

    result = analysis.analyse(_read(tmp_path, PLAIN), analysis.ReportOptions(simulate_runs=0))
    text = report.summary_text(result)
    assert "(6 step rows skipped)" in text
    assert "job id from JobID" in text and "run time from Elapsed" in text
