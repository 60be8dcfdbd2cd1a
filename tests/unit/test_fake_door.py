"""FakeDoor (slurm_triage.testing) answers like Slurm, with the CLI backend's error classes."""

from __future__ import annotations

import pytest

from slurm_triage.slurm import (
    InvalidJobState,
    JobNotFound,
    JobState,
    NodeNotFound,
    NotRequeueable,
    SlurmCommandError,
    SlurmError,
    SlurmUnavailable,
)
from slurm_triage.slurm.runner import CommandResult, classify_failure
from slurm_triage.testing import Call, FakeDoor, job_info, node_infos


def door(**job: object) -> FakeDoor:
    return FakeDoor([job_info(7, **job)], node_infos(4))


def _refusal(action: object) -> SlurmError:
    with pytest.raises(SlurmError) as caught:
        action()  # type: ignore[operator]
    return caught.value


def _pending(d: FakeDoor) -> FakeDoor:
    d.end_job(7, "FAILED", exit_code=1)
    d.requeue(7)
    return d


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: door(requeue=False).requeue(7), NotRequeueable),
        (lambda: door(batch=False).requeue(7, hold=True), NotRequeueable),
        (lambda: door(state=JobState.PENDING).requeue(7), InvalidJobState),
        (lambda: door().requeue(8), JobNotFound),
        (lambda: door(state=JobState.FAILED).set_excluded_nodes(7, ["node2"]), InvalidJobState),
        (lambda: door(state=JobState.FAILED).set_admin_comment(7, "x"), InvalidJobState),
        (lambda: door().set_excluded_nodes(7, ["node2"]), SlurmCommandError),
        (lambda: door().drain("node9", "triage: x"), NodeNotFound),
        (lambda: door().resume("node1"), SlurmCommandError),
    ],
)
def test_refusals_have_the_class_the_cli_backend_gives_slurms_words(
    make: object, expected: type[SlurmError]
) -> None:
    """Each refusal is the class the CLI backend derives from the same scontrol message."""
    error = _refusal(make)
    assert type(error) is expected
    cli = classify_failure(CommandResult(("scontrol",), 1, "", f"scontrol: error: {error}", 0.0))
    assert type(cli) is expected


def test_ended_job_shows_completing_and_accounting_the_final_state() -> None:
    """At EpilogSlurmctld time slurmctld says COMPLETING with a reason, sacct the end state."""
    d = door()
    d.end_job(7, "CANCELLED", state_text="CANCELLED by 0")
    assert (d.job(7).state, d.job(7).state_reason) == (JobState.COMPLETING, "None")
    accounted = d.accounted_job(7)
    assert (accounted.state, accounted.state_text, accounted.requeue) == (
        JobState.CANCELLED,
        "CANCELLED by 0",
        False,
    )
    d.end_job(7, "FAILED", exit_code=2)
    assert d.job(7).state_reason == "NonZeroExitCode" and d.job(7).exit_code == 2


def test_requeue_makes_the_job_pending_with_one_more_restart() -> None:
    """A requeued job is pending again, its restart count one higher, held when asked."""
    d = door(restart_count=2)
    d.end_job(7, "FAILED", exit_code=1)
    d.requeue(7, hold=True)
    job = d.job(7)
    assert (job.state, job.restart_count, job.state_reason) == (
        JobState.PENDING,
        3,
        "JobHeldAdmin",
    )
    # Not yet eligible (held, or waiting for its begin time): accounting keeps the ended
    # run's record, now REQUEUED, and that is the record `sacctmgr modify job` changes.
    assert d.accounted_job(7).state is JobState.REQUEUED
    d2 = door(restart_count=2)
    d2.end_job(7, "FAILED", exit_code=1)
    d2.requeue(7)
    assert d2.accounted_job(7).state is JobState.REQUEUED
    d2.set_accounted_admin_comment(7, "triage: cause=unknown action=requeue")
    assert d2.accounted_job(7).admin_comment == "triage: cause=unknown action=requeue"


def test_exclusions_merge_with_the_users_own() -> None:
    """set_excluded_nodes keeps the user's --exclude unless merge=False."""
    d = _pending(door(excluded_nodes=("node4",)))
    assert d.set_excluded_nodes(7, ["node2", "node2"]) == ("node4", "node2")
    assert d.job(7).excluded_nodes == ("node4", "node2")
    assert d.set_excluded_nodes(7, ["node3"], merge=False) == ("node3",)


def test_excluding_a_required_node_leaves_the_job_bad_constraints() -> None:
    """Like Slurm, excluding a node of the job's -w list is taken and the job can never
    start (BadConstraints); accounting does not keep the required nodes."""
    d = _pending(door(required_nodes=("node1", "node2")))
    d.set_excluded_nodes(7, ["node3"])
    assert d.job(7).state_reason == "BeginTime"
    d.set_excluded_nodes(7, ["node2"])
    assert d.job(7).state_reason == "BadConstraints"
    assert d.accounted_job(7).required_nodes == ()


def test_forgotten_job_comes_from_accounting() -> None:
    """A job slurmctld forgot is read from accounting; an unknown one is JobNotFound."""
    d = door()
    d.end_job(7, "TIMEOUT")
    del d.jobs[7]
    assert d.job(7).source == "sacct" and d.job(7).state is JobState.TIMEOUT
    with pytest.raises(JobNotFound):
        d.accounted_job(99)


def test_drain_records_reason_and_who_and_replaces_an_existing_one() -> None:
    """Like scontrol: a drain needs a reason, stores it on one line, and replaces an
    admin's reason (which FakeDoor reports in admin_drains_touched)."""
    d = door()
    with pytest.raises(SlurmCommandError):
        d.drain("node1", "  ")
    d.drain("node1", "triage: gpu_unavailable\n job=7")
    node = d.node("node1")
    assert node.drained and node.reason == "triage: gpu_unavailable job=7"
    assert node.reason_user == "slurm" and d.admin_drains_touched == []
    d.drain_as_admin("node2", "fan replacement")
    d.drain("node2", "triage: thermal")
    d.resume("node2")
    assert [c.method for c in d.admin_drains_touched] == ["drain", "resume"]
    assert not d.node("node2").drained and d.node("node2").reason == ""


def test_nodes_unknown_name_raises_and_none_lists_all() -> None:
    d = door()
    assert [n.name for n in d.nodes()] == ["node1", "node2", "node3", "node4"]
    with pytest.raises(NodeNotFound):
        d.nodes(["node1", "nodeX"])


def test_injected_faults_fire_in_order_then_stop_and_every_call_is_recorded() -> None:
    """fail() makes the next calls raise; failed calls are recorded like the others."""
    d = door()
    d.fail("slurm_version", SlurmUnavailable("scontrol --version: Socket timed out"), times=2)
    d.fail("slurm_version", OSError(7, "Argument list too long"))
    with pytest.raises(SlurmUnavailable):
        d.slurm_version()
    with pytest.raises(SlurmUnavailable):
        d.slurm_version()
    with pytest.raises(OSError):
        d.slurm_version()
    assert d.slurm_version() == "22.05.8"
    assert d.calls == [Call("slurm_version")] * 4 and d.mutations() == []
    d.fail("drain", SlurmUnavailable("down"), times=None)
    for _ in range(3):
        with pytest.raises(SlurmUnavailable):
            d.drain("node1", "triage: x")
    assert not d.node("node1").drained
    with pytest.raises(ValueError, match="no door method"):
        d.fail("requeu", SlurmUnavailable("typo"))
