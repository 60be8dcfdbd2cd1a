"""A requeued job's output appended to (--open-mode=append): the decision reads only the run
that ended, so an earlier run's error is not taken for this run's root."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_triage.attribution import attribute
from slurm_triage.attribution.logscan import RUN_START_SLACK_S, scan_log, this_runs_lines
from slurm_triage.clock import Clock
from slurm_triage.evidence import ProcessExit, RootException, SlurmState, Source
from slurm_triage.job_state import JobState
from slurm_triage.prolog_epilog.gather import output_facts
from slurm_triage.taxonomy import Cause
from slurm_triage.testing import job_info

YEAR = 2026
FIRST_START = datetime(2026, 11, 24, 9, 0, tzinfo=UTC).timestamp()
SECOND_START = datetime(2026, 11, 24, 10, 0, tzinfo=UTC).timestamp()
ENDED = SECOND_START + 1800


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S,000")


# Run 1 died of an ECC error its program printed (no stamp on the traceback) and was
# requeued; run 2, appended to the same file, died of the user's KeyError.
RUN_1 = [
    f"{stamp(FIRST_START + 60)} - INFO - train - step 100 loss 3.4",
    "[rank5]: Traceback (most recent call last):",
    '[rank5]:   File "/home/ana/train.py", line 90, in step',
    "[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
]
RUN_2 = [
    f"{stamp(SECOND_START + 30)} - INFO - train - resumed from step 100",
    f"{stamp(SECOND_START + 1700)} - INFO - train - step 900 loss 2.9",
    "Traceback (most recent call last):",
    '  File "/home/ana/train.py", line 188, in main',
    "KeyError: '<|im_sep|>'",
]


def roots(lines: list[str], since: float | None) -> list[RootException]:
    facts = scan_log(lines, node="node1", year=YEAR, tz=UTC, since=since).facts
    return [f for f in facts if isinstance(f, RootException)]


def test_an_earlier_runs_error_is_not_this_runs_root() -> None:
    (root,) = roots(RUN_1 + RUN_2, since=SECOND_START)
    assert root.exc_type == "KeyError"
    facts = [
        SlurmState(time=ENDED, source=Source.ROOT, state=JobState.FAILED),
        ProcessExit(time=ENDED, source=Source.ROOT, exit_code=1),
        *scan_log(RUN_1 + RUN_2, node="node1", year=YEAR, tz=UTC, since=SECOND_START).facts,
    ]
    assert attribute(facts).cause is Cause.USER_CODE


def test_without_the_runs_start_the_whole_log_is_read() -> None:
    """`classify` knows no run: the earliest real error of the file is its root."""
    (root,) = roots(RUN_1 + RUN_2, since=None)
    assert root.exc_type == "RuntimeError"


def test_a_log_with_no_line_stamped_in_this_run_is_read_whole() -> None:
    """Every stamp older than the run (another zone than the controller's, a clock behind):
    no boundary shows, so nothing of this run may be cut."""
    assert this_runs_lines(RUN_1 + RUN_2[2:], SECOND_START, YEAR, UTC) == RUN_1 + RUN_2[2:]


def test_the_cut_allows_for_clock_skew_and_reads_dates_only_as_stamps() -> None:
    """A line stamped a little before the start (a node's clock behind) is this run's; a
    date in the program's words (a checkpoint's name) is no stamp."""
    skewed = [f"{stamp(SECOND_START - RUN_START_SLACK_S / 2)} - INFO - train - starting"]
    named = ["loading checkpoint /ckpt/run-2026-11-24 09:00:00.pt for step 100 of the run"]
    lines = RUN_1 + skewed + named + RUN_2
    assert this_runs_lines(lines, SECOND_START, YEAR, UTC) == skewed + named + RUN_2
    late_date = [f"{'x' * 50} {stamp(FIRST_START)}"]
    assert this_runs_lines(RUN_2 + late_date, SECOND_START, YEAR, UTC) == RUN_2 + late_date


@pytest.mark.skipif(os.geteuid() != 0, reason="the job's output is chowned")
def test_the_decision_reads_the_run_that_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """output_facts (the decision's read of the job's output) passes the run's start on."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        path = tmp_path / "slurm-7.out"
        path.write_text("\n".join(RUN_1 + RUN_2) + "\n")
        os.chown(path, 4242, 4242)
        job = job_info(7, nodes=("node1",), num_nodes=1, batch_host="node1", std_out=str(path))
        clock = Clock(time=lambda: ENDED)
        facts, _ = output_facts(job, 4242, time.monotonic() + 30, clock, since=SECOND_START)
        (root,) = [f for f in facts if isinstance(f, RootException)]
        assert root.exc_type == "KeyError"
    finally:
        monkeypatch.undo()
        time.tzset()
