"""The actuator carries a Decision out through the door in Slurm's order, and keeps going."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from slurm_triage import actuator
from slurm_triage.actuator import Applied
from slurm_triage.policies import Decision, Verdict
from slurm_triage.slurm import InvalidJobState, JobState, SlurmUnavailable
from slurm_triage.testing import Call, FakeDoor, job_info, node_infos

JOB = 7
REASON = "triage: gpu_unavailable job=7: XID 79"


@pytest.fixture
def door() -> FakeDoor:
    fake = FakeDoor([job_info(JOB)], node_infos(4))
    fake.end_job(JOB, "FAILED", exit_code=1)  # COMPLETING, as at EpilogSlurmctld time
    return fake


def carry_out(door: FakeDoor, decision: Decision, **kw: object) -> Applied:
    args: dict[str, object] = {
        "cause": "gpu_unavailable",
        "blamed": ("node2",),
        "restart": 0,
        "drain_reason": REASON,
        "dry_run": False,
    }
    args.update(kw)
    return actuator.carry_out(door, JOB, decision, **args)  # type: ignore[arg-type]


REQUEUE_ALL = Decision(
    Verdict.REQUEUE, exclude=("node2",), drain=("node2",), begin_delay_s=120.0, reasons=("r",)
)


def test_steps_run_in_slurms_order(door: FakeDoor) -> None:
    """Requeue, then exclusion and begin time on the pending job, then drain, then summary."""
    applied = carry_out(door, REQUEUE_ALL, restart=2)
    assert door.mutations() == [
        Call("requeue", (JOB,), {"hold": False}),
        Call("set_excluded_nodes", (JOB, ("node2",)), {"merge": True}),
        Call("set_begin_time", (JOB, 120.0)),
        Call("drain", ("node2", REASON)),
        Call(
            "set_admin_comment",
            (
                JOB,
                '{"triage":{"cause":"gpu_unavailable","nodes":["node2"],"action":"requeue",'
                '"n":3,"excluded":["node2"]}}',
            ),
        ),
        Call(
            "set_accounted_admin_comment",
            (JOB, "triage: cause=gpu_unavailable action=requeue nodes=node2 n=3"),
        ),
    ]
    assert applied == Applied(requeued=True, excluded=("node2",), drained=("node2",))
    assert applied.ok and door.node("node2").reason == REASON


def test_hold_requeues_held_and_still_excludes(door: FakeDoor) -> None:
    """A held requeue is a requeue for the exclusion; Applied says held, not requeued."""
    applied = carry_out(door, Decision(Verdict.HOLD, exclude=("node2",)))
    assert door.calls_to("requeue") == [Call("requeue", (JOB,), {"hold": True})]
    assert (applied.requeued, applied.held, applied.excluded) == (False, True, ("node2",))
    assert door.job(JOB).excluded_nodes == ("node2",)


def test_a_held_jobs_summary_also_goes_to_accounting(door: FakeDoor) -> None:
    """A held job has no eligible time, so slurmctld sends neither its record nor its
    AdminComment to accounting until release (seen on the dev cluster): the summary is
    written there as well, so `sacct -o AdminComment` says why the job waits."""
    carry_out(door, Decision(Verdict.HOLD), cause="unknown")
    assert door.methods()[-2:] == ["set_admin_comment", "set_accounted_admin_comment"]
    assert door.accounting[JOB].admin_comment.startswith("triage: cause=unknown action=hold")


def test_hold_for_a_failed_required_node_says_which_and_why(door: FakeDoor) -> None:
    """Held because required node2 failed: AdminComment names node2 and the cause, in the
    triage object (cause still first, as analytics reads it) and in words."""
    decision = Decision(Verdict.HOLD, drain=("node2",), required_failed=("node2",))
    applied = carry_out(door, decision)
    assert (applied.held, applied.excluded, applied.drained) == (True, (), ("node2",))
    text = door.job(JOB).admin_comment
    assert text.startswith('{"triage":{"cause":"gpu_unavailable",')
    summary = json.loads(text)["triage"]
    assert (summary["action"], summary["required"]) == ("hold", ["node2"])
    assert summary["why"].startswith("required node node2 failed (gpu_unavailable)")
    assert "excluded" not in summary


def test_already_requeued_by_slurm_skips_the_requeue(door: FakeDoor) -> None:
    """Slurm requeued the job itself: exclusion and summary only, counted as requeued."""
    door.requeue(JOB)
    door.calls.clear()
    applied = carry_out(door, Decision(Verdict.REQUEUE, exclude=("node2",)), already_requeued=True)
    assert door.methods() == [
        "set_excluded_nodes", "set_admin_comment", "set_accounted_admin_comment"
    ]  # fmt: skip
    assert applied.requeued and applied.excluded == ("node2",)


def test_failed_requeue_means_no_exclusion_or_begin_time(door: FakeDoor) -> None:
    """Without a requeue the job is not pending: ExcNodeList and StartTime are not touched;
    the drain and the summary still happen and the error is kept."""
    door.fail("requeue", SlurmUnavailable("scontrol requeue 7: Socket timed out"))
    applied = carry_out(door, REQUEUE_ALL)
    # Not requeued, the job has ended: slurmctld refuses the summary, accounting takes it.
    assert door.methods() == [
        "requeue", "nodes", "drain", "set_admin_comment", "set_accounted_admin_comment"
    ]  # fmt: skip
    assert applied.errors == ("requeue: scontrol requeue 7: Socket timed out",)
    assert not applied.ok and not applied.requeued and applied.excluded == ()
    # `n` names the attempt the decision is about (restart 0: the first), requeued or not.
    assert json.loads(door.calls_to("set_admin_comment")[0].args[1])["triage"]["n"] == 1


def test_every_step_failure_is_recorded_and_the_rest_still_runs(door: FakeDoor) -> None:
    """An OSError (E2BIG) from the exclusion and a refused begin time do not stop the drain
    and the summary; each error is one line naming its step."""
    door.fail("set_excluded_nodes", OSError(7, "Argument list too long"))
    door.fail("set_begin_time", SlurmUnavailable("scontrol update: Connection refused"))
    applied = carry_out(door, REQUEUE_ALL)
    assert applied.errors == (
        "exclude: OSError: [Errno 7] Argument list too long",
        "begin_time: scontrol update: Connection refused",
    )
    assert applied.requeued and applied.drained == ("node2",) and applied.excluded == ()
    assert door.methods()[-2:] == ["set_admin_comment", "set_accounted_admin_comment"]


def test_drains_skip_drained_nodes_and_keep_going_past_unknown_ones(door: FakeDoor) -> None:
    """An admin's drain and our earlier one are left as they are; an unknown node is an
    error for that node only."""
    door.drain_as_admin("node1", "bad fan")
    door.drain("node3", "triage: earlier")
    door.calls.clear()
    decision = Decision(Verdict.RECORD_ONLY, drain=("node1", "node9", "node3", "node4"))
    applied = carry_out(door, decision)
    assert [c.args for c in door.calls_to("drain")] == [("node4", REASON)]
    assert applied.drained == ("node4",) and applied.skipped_drains == ("node1", "node3")
    assert len(applied.errors) == 1 and applied.errors[0].startswith("drain node9: ")
    assert door.node("node1").reason == "bad fan" and door.admin_drains_touched == []


def test_slurms_epilog_error_drain_on_a_node_we_drain_gets_our_reason(door: FakeDoor) -> None:
    """Our Epilog failed on purpose on node2 (root evidence of a node fault), so Slurm drained
    it as "Epilog error": the decision that drains node2 relabels it with the cause. Another
    node whose Epilog failed and that we do not drain keeps Slurm's word."""
    door.fail_epilog("node2")
    door.fail_epilog("node3")
    applied = carry_out(door, Decision(Verdict.RECORD_ONLY, drain=("node2",)))
    assert applied.drained == ("node2",) and applied.skipped_drains == ()
    assert door.node("node2").reason == REASON and door.node("node2").drained
    assert door.node("node3").reason == "Epilog error"


def test_summary_of_an_ended_job_goes_to_accounting(door: FakeDoor) -> None:
    """Issue 17.3: slurmctld refuses AdminComment once a job has ended (COMPLETING
    included), so a job left ended gets its summary in accounting (sacctmgr), in words that
    survive sacctmgr's lowercasing and quote mangling; for a requeued job (it should be
    pending) the refusal is an error."""
    applied = carry_out(door, Decision(Verdict.RECORD_ONLY), cause="segfault", blamed=("node1",))
    assert applied.ok and door.methods() == ["set_admin_comment", "set_accounted_admin_comment"]
    text = "triage: cause=segfault action=record_only nodes=node1 n=1"
    assert door.calls_to("set_accounted_admin_comment")[0].args == (JOB, text)
    assert door.accounting[JOB].admin_comment == text  # unchanged by the mangling
    door.fail("set_admin_comment", InvalidJobState("Job has already finished"))
    door.jobs[JOB] = job_info(JOB, state=JobState.RUNNING)
    applied = carry_out(door, Decision(Verdict.REQUEUE))
    assert applied.errors == ("admin_comment: job already finished",)


def test_a_clean_end_after_requeues_tells_the_story(door: FakeDoor) -> None:
    """A job that completes after a requeue still carried the failure's AdminComment; now
    its record says it completed, after what."""
    door.end_job(JOB, "COMPLETED")
    applied = carry_out(
        door, Decision(), cause="completed", blamed=(), restart=1,
        earlier=("gpu_unavailable on node2",),
    )  # fmt: skip
    assert applied.ok
    assert door.accounting[JOB].admin_comment == (
        "triage: completed after 1 requeue; earlier: gpu_unavailable on node2"
    )


def test_completed_jobs_get_no_summary(door: FakeDoor) -> None:
    """The large majority, completed jobs, cost Slurm nothing."""
    applied = carry_out(door, Decision(), cause="completed", blamed=())
    assert door.calls == [] and applied == Applied()


def test_dry_run_touches_nothing(door: FakeDoor) -> None:
    """dry_run: not a single door call, reads included."""
    applied = carry_out(door, REQUEUE_ALL, dry_run=True)
    assert door.calls == [] and applied == Applied(dry_run=True)


def test_a_summary_slurm_could_not_take_is_an_error(door: FakeDoor) -> None:
    """slurmctld unreachable for the AdminComment: the decision stands, the error is kept."""
    door.fail("set_admin_comment", SlurmUnavailable("scontrol update: Socket timed out"))
    applied = carry_out(door, Decision(Verdict.RECORD_ONLY), cause="segfault", blamed=())
    assert applied.errors == ("admin_comment: scontrol update: Socket timed out",)
    assert applied.to_dict()["errors"] == ["admin_comment: scontrol update: Socket timed out"]


def test_hold_of_a_job_slurm_requeued_holds_the_pending_job(door: FakeDoor) -> None:
    """Slurm requeued the job itself (a failed Epilog with --requeue=expedite, or its
    Prolog) and it waits for its failed required node: it is held (`scontrol hold`), never
    requeued held (Slurm refuses that for a pending job) and never left to wait for ever."""
    door.requeue(JOB)
    door.calls.clear()
    decision = Decision(Verdict.HOLD, drain=("node2",), required_failed=("node2",))
    applied = carry_out(door, decision, already_requeued=True)
    assert door.calls_to("hold") == [Call("hold", (JOB,))]
    assert "requeue" not in door.methods()
    assert (applied.held, applied.requeued) == (True, False)
    assert door.job(JOB).state_reason == "JobHeldAdmin"


def test_hold_of_a_job_slurm_restarted_requeues_it_held(door: FakeDoor) -> None:
    """An expedited restart may already run again when we decide to hold (its budget is
    spent): it is requeued held, so a crash loop stops there."""
    door.requeue(JOB)
    door.jobs[JOB] = replace(door.jobs[JOB], state=JobState.RUNNING)
    door.accounting[JOB] = door.jobs[JOB]  # a started run has its record in accounting
    door.calls.clear()
    applied = carry_out(
        door, Decision(Verdict.HOLD), already_requeued=True, restarted_by_slurm=True
    )
    assert door.calls_to("requeue") == [Call("requeue", (JOB,), {"hold": True})]
    assert applied.held and not applied.errors


def test_a_failed_held_requeue_is_not_reported_held(door: FakeDoor) -> None:
    """Holding failed: Applied says neither held nor requeued, and keeps the error."""
    door.fail("requeue", SlurmUnavailable("scontrol requeuehold 7: Socket timed out"))
    applied = carry_out(door, Decision(Verdict.HOLD))
    assert (applied.held, applied.requeued) == (False, False)
    assert applied.errors == ("requeue: scontrol requeuehold 7: Socket timed out",)
