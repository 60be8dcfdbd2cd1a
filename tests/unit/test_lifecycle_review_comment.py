"""The circuit breaker's failing mark never destroys an admin's node Comment: it goes after
the admin's text, the breaker still counts it, and its clear leaves that text as it was."""

from __future__ import annotations

from slurm_triage.actuator.nodes import MarkOutcome, clear_failing_mark, mark_failing
from slurm_triage.config import HealthConfig
from slurm_triage.policies.breaker import breaker_reason, has_failing_mark, marked_failing
from slurm_triage.slurm.arguments import MAX_REASON_CHARS
from slurm_triage.testing import FakeDoor, node_info, node_infos

NOW = 1_700_000_000.0
NOTE = "rack 12, PSU swapped 2026-03-01"


def _door(comment: str = "") -> FakeDoor:
    return FakeDoor(nodes=[node_info("node2", comment=comment), *node_infos(1)])


def test_the_mark_goes_after_an_admins_comment_and_its_clear_restores_it() -> None:
    door = _door(NOTE)
    assert mark_failing(door, "node2", "gpu.lost", NOW) is MarkOutcome.APPENDED
    node = door.node("node2")
    assert node.comment == f"{NOTE} triage-failing gpu.lost {int(NOW)}"
    assert marked_failing(node, "gpu.lost", NOW, 60) and has_failing_mark(node.comment)
    clear_failing_mark(door, "node2")
    assert door.node("node2").comment == NOTE


def test_a_mark_after_an_admins_comment_counts_for_the_breaker() -> None:
    cluster = [node_info(f"n{i}", comment=f"{NOTE} triage-failing fs.mounts {int(NOW)}")
               for i in range(3)]  # fmt: skip
    config = HealthConfig(breaker_min_nodes=2, breaker_max_share=0.0)
    assert breaker_reason("fs.mounts", "node2", cluster, config, NOW)


def test_a_comment_of_our_own_mark_is_replaced_and_cleared() -> None:
    door = _door(f"triage-failing gpu.ecc {int(NOW) - 60}")
    assert mark_failing(door, "node2", "gpu.lost", NOW) is MarkOutcome.MARKED
    assert door.node("node2").comment == f"triage-failing gpu.lost {int(NOW)}"
    clear_failing_mark(door, "node2")
    assert door.node("node2").comment == ""


def test_clearing_with_no_mark_writes_nothing() -> None:
    door = _door(NOTE)
    clear_failing_mark(door, "node2")
    assert door.calls_to("set_node_comment") == []
    assert door.node("node2").comment == NOTE


def test_an_admins_text_too_long_to_keep_a_mark_after_is_left_and_the_mark_skipped() -> None:
    long_note = "x" * (MAX_REASON_CHARS - 10)
    door = _door(long_note)
    assert mark_failing(door, "node2", "gpu.lost", NOW) is MarkOutcome.SKIPPED
    assert door.node("node2").comment == long_note
    assert door.calls_to("set_node_comment") == []
