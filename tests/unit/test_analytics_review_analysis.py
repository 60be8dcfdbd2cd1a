"""The report's numbers where accounting is thin or cut: no GPU counts, failures with no
run time, the --since window edge, runs still going, node lists hostlist refuses."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import polars as pl
import pytest

from slurm_triage.analytics import analysis, fetch, ingest, node_events, report
from slurm_triage.analytics.sacct_layout import SACCT_FIELDS
from slurm_triage.slurm.model import NodeEvent, NodeEventLog

OPTIONS = analysis.ReportOptions(simulate_runs=0)
SINCE = datetime(2025, 3, 1, 5, 0, 0)


def _row(job: int, state: str, tres: str, *, nodes: int = 32, elapsed: int = 86400) -> str:
    return (
        f"{job}|{job}|{state}|0:0|2025-03-01T00:00:00|2025-03-01T00:10:00|2025-03-02T00:10:00|"
        f"{elapsed}|{nodes}|{tres}|gpu[001-032]|gpu|alice|"
    )


def _accounting(rows: list[str]) -> ingest.Accounting:
    return ingest.read_sacct_text("\n".join(rows) + "\n")


def test_no_gpu_count_in_accounting_is_a_warning_that_says_what_to_set() -> None:
    """Slurm's default AccountingStorageTRES has no gres/gpu: every job then counts 0
    GPUs and node failures vanish; the report says so and what to set."""
    untracked = "billing=2048,cpu=2048,mem=16T,node=32"
    rows = [_row(900, "NODE_FAIL", untracked)] + [
        _row(901 + i, "COMPLETED", untracked) for i in range(3)
    ]
    result = analysis.analyse(_accounting(rows), OPTIONS)
    assert result.rf.events == 0 and result.gpu_rows == 0
    text = report.summary_text(result)
    assert "WARNING: no row has a GPU count" in text
    assert "AccountingStorageTRES=gres/gpu" in text and "--gpus-from-nodes" in text
    tracked = analysis.analyse(_accounting([_row(1, "COMPLETED", "gres/gpu=8")]), OPTIONS)
    assert "WARNING" not in report.summary_text(tracked)


def test_gpus_from_nodes_counts_whole_nodes_where_no_gpu_count_was_kept() -> None:
    """--gpus-from-nodes: NNodes x --gpus-per-node for rows without gres/gpu; a row with
    a count keeps it."""
    rows = [
        _row(900, "NODE_FAIL", "billing=2048,cpu=2048,node=32"),
        _row(901, "COMPLETED", "billing=8,gres/gpu=2,node=1", nodes=1),
    ]
    options = dataclasses.replace(OPTIONS, gpus_per_node=8, gpus_from_nodes=True)
    result = analysis.analyse(_accounting(rows), options)
    assert result.rf.events == 1
    assert result.gpu_hours == pytest.approx((32 * 8 + 2) * 24.0)
    assert "taken as NNodes x 8" in report.summary_text(result)


def test_failures_with_no_run_time_leave_the_model_on_the_papers_rate() -> None:
    """Failures over 0 node-days give no finite rate: the model curves do not take it
    (it used to end the report with a ValueError)."""
    rows = [_row(700 + i, "NODE_FAIL", "gres/gpu=256", elapsed=0) for i in range(6)]
    result = analysis.analyse(_accounting(rows), OPTIONS)
    assert result.rf.events == 6
    assert result.model_rf == analysis.PAPER_RF
    assert "n/a per 1000 node-days" in report.summary_text(result)


def _edge_rows(restarts: bool) -> list[str]:
    """Job 600's attempt 1 ended before the window (not in the file) and our decision
    about it (n=1) sits on attempt 2, which was then preempted; attempt 3 completed."""
    decision = (
        '{"triage":{"cause":"gpu_memory","nodes":["gpu007"],"action":"requeue_exclude","n":1}}'  # noqa: E501
    )
    first = (
        "600|600|PREEMPTED|0:0|2025-03-01T00:00:00|2025-03-01T00:00:00|2025-03-01T10:00:00|36000|"
        f"32|gres/gpu=256|gpu[001-032]|gpu|alice|{'1|' if restarts else ''}{decision}"
    )
    second = (
        "600|600|COMPLETED|0:0|2025-03-01T10:00:00|2025-03-01T10:00:00|2025-03-01T20:00:00|36000|"
        f"32|gres/gpu=256|gpu[001-032]|gpu|alice|{'2|' if restarts else ''}"
    )
    return [first, second]


def test_restarts_number_attempts_as_our_decisions_do() -> None:
    """With Slurm's Restarts (24.11 on) a row is attempt Restarts + 1 wherever the file
    starts: the decision about attempt 1 lands on no row here, the journal's about
    attempt 2 on the preempted row."""
    columns = ",".join((*SACCT_FIELDS[:-1], "Restarts", SACCT_FIELDS[-1]))
    accounting = ingest.read_sacct_text("\n".join(_edge_rows(True)) + "\n", columns=columns)
    assert accounting.attempts["restarts"].to_list() == [1, 2]
    result = analysis.analyse(accounting, OPTIONS)
    assert result.rf.events == 0
    journal = pl.LazyFrame({"job_raw": [600], "attempt": [2], "cause": ["pcie"]})
    attempts = analysis.ended_attempts(accounting, journal)
    assert attempts.done["cause"].cast(str).to_list() == ["pcie", "completed"]


def test_without_restarts_a_chain_cut_at_the_window_is_not_numbered() -> None:
    """From sacct -S, a job first submitted before the window may have lost attempts:
    its rows are not numbered, so the decision about attempt 1 does not land on the
    preempted row, and the report says how many runs that was."""
    accounting = dataclasses.replace(
        ingest.read_sacct_text("\n".join(_edge_rows(False)) + "\n"), window_start=SINCE
    )
    result = analysis.analyse(accounting, OPTIONS)
    assert result.rf.events == 0 and result.unnumbered_runs == 1
    assert "1 job runs began before the window" in report.summary_text(result)
    whole = analysis.analyse(ingest.read_sacct_text("\n".join(_edge_rows(False)) + "\n"))
    assert whole.rf.events == 1  # a whole file (no window) is numbered by position


def test_the_report_asks_sacct_for_restarts_where_it_has_them() -> None:
    assert fetch.report_fields("22.05.8") == SACCT_FIELDS
    assert fetch.report_fields("24.05.1") == SACCT_FIELDS
    fields = fetch.report_fields("25.11.7")
    assert fields[-1] == "AdminComment" and fields[-2] == "Restarts"
    assert fields[:-2] == SACCT_FIELDS[:-1]


def test_a_run_still_going_is_left_out_of_the_job_runs() -> None:
    """A requeue chain whose last attempt is running has not ended: it is no finished run
    of one attempt with ETTR 0.75; it is counted apart."""
    rows = [
        "300|300|REQUEUED|0:0|2025-03-01T00:00:00|2025-03-01T00:00:00|2025-03-01T02:00:00|7200|"
        "512|gres/gpu=4096|gpu[001-512]|gpu|alice|",
        "300|300|RUNNING|0:0|2025-03-01T02:00:00|2025-03-01T02:05:00|Unknown|900000|512|"
        "gres/gpu=4096|gpu[001-512]|gpu|alice|",
        _row(301, "COMPLETED", "gres/gpu=8", nodes=1),
    ]
    result = analysis.analyse(_accounting(rows), OPTIONS)
    assert result.runs_in_progress == 1 and result.job_runs == 1
    assert result.largest_runs["job_raw"].to_list() == ["301"]
    assert result.ended_rows == 2  # the ended attempt still counts in the rates
    assert "1 job runs still pending or running left out" in report.summary_text(result)


def test_a_node_list_hostlist_refuses_is_not_joined_and_is_counted() -> None:
    """A reversed range passes the ingest's pattern but not hostlist: that attempt joins
    no event and is counted, the report does not end in a traceback."""
    rows = [
        "1|1|FAILED|1:0|2025-03-01T00:00:00|2025-03-01T00:00:00|2025-03-01T10:00:00|36000|32|"
        "gres/gpu=256|gpu[040-001]|gpu|alice|",
        "2|2|FAILED|1:0|2025-03-01T00:00:00|2025-03-01T00:00:00|2025-03-01T10:00:00|36000|32|"
        "gres/gpu=256|gpu[033-064]|gpu|alice|",
    ]
    start = datetime(2025, 3, 1, 10, 0, 0) - timedelta(minutes=1)
    log = NodeEventLog((NodeEvent("gpu040", start, None, "DOWN*", "Not responding", ""),))
    events = node_events.from_log(log, "test")
    result = analysis.analyse(_accounting(rows), OPTIONS, None, events)
    assert result.events.unreadable_node_lists == 1
    assert result.events.explained_failures == 1
    assert "1 attempts' NodeList unreadable" in report.summary_text(result)
