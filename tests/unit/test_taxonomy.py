"""The taxonomy as data matches the contract in shared/TAXONOMY.md."""

from __future__ import annotations

import pytest

from slurm_triage.taxonomy import CAUSES, Action, Cause, Condition, Domain, info, parse_cause

# The contract's table, transcribed by hand: (cause, domain, default action).
CONTRACT = [
    ("completed", "none", "none"),
    ("gpu_unavailable", "hardware", "requeue_exclude"),
    ("gpu_memory", "hardware", "requeue_exclude"),
    ("gpu_nvlink", "hardware", "requeue_exclude"),
    ("gpu_driver", "infrastructure", "requeue_exclude"),
    ("pcie", "hardware", "requeue_exclude"),
    ("infiniband", "hardware", "requeue_exclude"),
    ("thermal", "hardware", "requeue_exclude"),
    ("host_hardware", "hardware", "requeue_exclude"),
    ("node_failure", "hardware", "requeue_exclude"),
    ("filesystem", "infrastructure", "requeue_exclude"),
    ("network", "infrastructure", "requeue"),
    ("nccl_timeout", "infrastructure", "requeue"),
    ("health_check", "infrastructure", "requeue_exclude"),
    ("hang", "unknown", "requeue"),
    ("preempted", "scheduler", "requeue"),
    ("timeout", "scheduler", "requeue"),
    ("cancelled", "scheduler", "none"),
    ("cuda_oom", "user", "none"),
    ("host_oom", "user", "none"),
    ("cuda_user_error", "user", "none"),
    ("storage_full", "user", "none"),
    ("segfault", "user", "none"),
    ("user_code", "user", "none"),
    ("unknown", "unknown", "requeue"),
]


def test_every_contract_id_exists_with_its_domain_and_action():
    """Each id of the contract is a Cause with the contract's domain and default action."""
    assert {c.value for c in Cause} == {row[0] for row in CONTRACT}
    for cause_id, domain, action in CONTRACT:
        row = info(Cause(cause_id))
        assert (row.domain.value, row.action.value) == (domain, action), cause_id


def test_table_has_one_row_per_cause():
    """No cause is missing from the table and none is there twice."""
    assert set(CAUSES) == set(Cause)
    assert all(CAUSES[c].cause is c for c in Cause)


def test_timeout_requeues_only_if_resumable():
    """timeout's default is 'requeue if the job is resumable, else none'."""
    row = info(Cause.TIMEOUT)
    assert row.condition is Condition.IF_RESUMABLE
    assert row.action_for(resumable=True, restart_count=3) is Action.REQUEUE
    assert row.action_for(resumable=False, restart_count=0) is Action.NONE
    assert row.action_text == "requeue if the job is resumable, else none"


def test_unknown_requeues_once():
    """unknown's default is 'requeue once': the second failure is left ended."""
    row = info(Cause.UNKNOWN)
    assert row.action_for(resumable=False, restart_count=0) is Action.REQUEUE
    assert row.action_for(resumable=True, restart_count=1) is Action.NONE
    assert row.action_text == "requeue once"


def test_unconditional_actions_ignore_resumability():
    """A plain default action does not depend on resumability or restarts."""
    row = info(Cause.GPU_MEMORY)
    assert row.action_for(resumable=False, restart_count=9) is Action.REQUEUE_EXCLUDE


def test_scheduler_and_fabric_causes_blame_no_nodes():
    """Causes that are not a property of a node never name nodes; hardware ones do."""
    nodeless = {c for c in Cause if not info(c).blames_nodes}
    assert {
        Cause.PREEMPTED,
        Cause.TIMEOUT,
        Cause.CANCELLED,
        Cause.NETWORK,
        Cause.NCCL_TIMEOUT,
        Cause.COMPLETED,
        Cause.UNKNOWN,
    } <= nodeless
    assert all(info(c).blames_nodes for c in Cause if info(c).domain is Domain.HARDWARE)


def test_parse_cause_names_valid_ids_on_error():
    """A wrong id is a ValueError that lists the valid ones."""
    assert parse_cause("gpu_memory") is Cause.GPU_MEMORY
    with pytest.raises(ValueError, match="gpu_memory"):
        parse_cause("gpu-memory")
