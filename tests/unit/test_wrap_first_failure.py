"""The step's first-failure marker: one claim wins, collateral ranks read it, odd files are
ignored (the marker only words a summary line, so anything unexpected reads as none)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_triage.attribution import attribute
from slurm_triage.evidence import ProcessExit, RootException
from slurm_triage.wrapper import first_failure
from slurm_triage.wrapper.identity import StepIdentity


def _rank(task: int, node: str, restart: int = 0) -> StepIdentity:
    return StepIdentity("42", node, "0", str(task), task, restart=restart)


def _user_error(node: str):  # type: ignore[no-untyped-def]
    return attribute(
        [
            ProcessExit(node=node, exit_code=1),
            RootException(node=node, exc_type="KeyError", message="'lr'"),
        ]
    )


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    (tmp_path / "42").mkdir()
    return tmp_path


def test_first_claim_wins_and_collateral_ranks_read_it(evidence: Path) -> None:
    assert first_failure.claim(evidence, _rank(1, "node2"), _user_error("node2"))
    assert not first_failure.claim(evidence, _rank(2, "node3"), _user_error("node3"))
    first = first_failure.read(evidence, _rank(0, "node1"))
    assert first is not None
    assert (first.task, first.node, first.cause) == ("1", "node2", "user_code")


def test_a_requeued_run_does_not_read_the_earlier_runs_marker(evidence: Path) -> None:
    first_failure.claim(evidence, _rank(1, "node2", restart=0), _user_error("node2"))
    assert first_failure.read(evidence, _rank(0, "node1", restart=1)) is None


def test_only_an_unexplained_outside_kill_is_a_collateral_candidate() -> None:
    unexplained = attribute([ProcessExit(node="n1", signal=15)])
    assert first_failure.is_collateral_candidate(15, unexplained)
    assert first_failure.is_collateral_candidate(9, unexplained)
    assert not first_failure.is_collateral_candidate(11, unexplained)
    assert not first_failure.is_collateral_candidate(15, _user_error("n1"))


@pytest.mark.parametrize(
    "content",
    [b"not json", b"[1, 2]", b'{"task": 1, "node": "n", "cause": "c", "detail": "d"}', b"x" * 5000],
    ids=["garbage", "not-an-object", "wrong-types", "oversized"],
)
def test_malformed_markers_read_as_none(evidence: Path, content: bytes) -> None:
    first_failure.marker_path(evidence, _rank(0, "node1")).write_bytes(content)
    assert first_failure.read(evidence, _rank(0, "node1")) is None


def test_symlinks_and_fifos_are_not_followed_or_blocked_on(evidence: Path) -> None:
    marker = first_failure.marker_path(evidence, _rank(0, "node1"))
    target = evidence / "elsewhere"
    target.write_text('{"task": "9", "node": "x", "cause": "c", "detail": "d"}')
    marker.symlink_to(target)
    assert first_failure.read(evidence, _rank(0, "node1")) is None
    marker.unlink()
    os.mkfifo(marker)
    assert first_failure.read(evidence, _rank(0, "node1")) is None  # returns, not blocks
    assert not first_failure.claim(evidence, _rank(1, "node2"), _user_error("node2"))


def test_control_characters_in_a_marker_cannot_break_the_summary_line(evidence: Path) -> None:
    first_failure.marker_path(evidence, _rank(0, "node1")).write_text(
        '{"task": "1\\nslurm-triage: forged", "node": "n\\r2", "cause": "c", "detail": "d"}'
    )
    first = first_failure.read(evidence, _rank(0, "node1"))
    assert first is not None and "\n" not in first.task and "\r" not in first.node


def test_no_job_directory_means_no_claim_and_no_error(tmp_path: Path) -> None:
    assert not first_failure.claim(tmp_path / "absent", _rank(1, "n2"), _user_error("n2"))
    assert first_failure.read(tmp_path / "absent", _rank(0, "n1")) is None
