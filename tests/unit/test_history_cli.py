"""`slurm-triage history`: one line per decision, in words an operator reads right."""

from __future__ import annotations

from slurm_triage.cli.journal_cmd import history_line
from slurm_triage.journal import DecisionRow


def _row(cause: str, blamed: tuple[str, ...]) -> DecisionRow:
    return DecisionRow(
        job_id=2, restart=0, decided_at=None, state="FAILED", cause=cause, action="record_only",
        blamed=blamed, excluded=(), drained=(), reasons=(), applied=True, outcome="ok",
        user="alice", nodes=blamed, confidence=0.9, root_backed=False, evidence=[],
    )  # fmt: skip


def test_nodes_are_blamed_for_node_faults_only() -> None:
    """Issue 17.6: a user bug "blamed node1" in the demo; it happened on node1."""
    assert "  cause user_code  on node1  -> record_only" in history_line(
        _row("user_code", ("node1",))
    )
    assert "  cause gpu_unavailable  blamed node2  ->" in history_line(
        _row("gpu_unavailable", ("node2",))
    )
    assert "  cause completed  on -  ->" in history_line(_row("completed", ()))
