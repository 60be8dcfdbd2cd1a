"""The one bounded wait of the dev cluster, the demo and the restart benchmark."""

from __future__ import annotations

import pytest

from slurm_triage.devcluster.waiting import wait_until
from slurm_triage.errors import TriageError


def test_returns_what_the_probe_found_once_it_finds_it() -> None:
    answers = iter([None, 0, "job 7"])
    assert wait_until(lambda: next(answers), 5, "a job", interval_s=0.001) == "job 7"


def test_times_out_with_the_callers_error_and_hint() -> None:
    with pytest.raises(TimeoutError, match=r"waiting for slurmctld \(last log line: x\)"):
        wait_until(lambda: False, 0.01, "slurmctld", interval_s=0.001, error=TimeoutError,
                   hint=lambda: " (last log line: x)")  # fmt: skip
    with pytest.raises(TriageError, match="timed out after 0s waiting for a node"):
        wait_until(lambda: None, 0, "a node")
