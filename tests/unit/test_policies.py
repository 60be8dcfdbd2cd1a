"""Policies: pure steps over an immutable job history, composed with |."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_triage.config import PolicyConfig
from slurm_triage.policies import (
    Decision,
    Family,
    JobView,
    PastDecision,
    PolicyInput,
    Verdict,
    default_chain,
    policy,
    rules,
)
from slurm_triage.prolog_epilog.gather import job_view, read_cluster
from slurm_triage.slurm import SlurmUnavailable
from slurm_triage.taxonomy import Cause, Domain, info
from slurm_triage.testing import FakeDoor, job_info, node_infos

CONFIG = PolicyConfig()
NODES = tuple(f"node{i}" for i in range(1, 9))


def job(**changes: object) -> JobView:
    base = JobView(
        job_id=7,
        user="alice",
        partition="gpu",
        num_nodes=2,
        requeue=True,
        batch=True,
        restart_count=0,
        excluded_nodes=(),
        comment="",
        usable_partition_nodes=NODES,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def given(
    cause: Cause = Cause.GPU_UNAVAILABLE,
    blamed: tuple[str, ...] = ("node2",),
    root_backed: bool = True,
    history: tuple[PastDecision, ...] = (),
    **job_changes: object,
) -> PolicyInput:
    return PolicyInput(
        cause=cause,
        domain=info(cause).domain,
        blamed=blamed,
        root_backed=root_backed,
        job=job(**job_changes),
        history=history,
        now=1000.0,
    )


def past(cause: Cause, n: int, verdict: str = "requeue") -> tuple[PastDecision, ...]:
    fam = (
        Family.NODE_FAILURE
        if info(cause).domain in (Domain.HARDWARE, Domain.INFRASTRUCTURE)
        else Family.OTHER
    )
    if cause is Cause.UNKNOWN:
        fam = Family.UNKNOWN
    return tuple(PastDecision(i, cause, fam, verdict, 900.0 + i) for i in range(n))


def test_hardware_fault_requeues_excluding_and_drains_the_node() -> None:
    """XID 79 on node2, root-backed: requeue with node2 excluded, drain node2."""
    d = default_chain(CONFIG)(given())
    assert (d.verdict, d.exclude, d.drain) == (Verdict.REQUEUE, ("node2",), ("node2",))
    assert d.begin_delay_s == 0


def test_user_evidence_alone_never_drains() -> None:
    """Blame from the job's own records can exclude for this job but never drain."""
    d = default_chain(CONFIG)(given(root_backed=False))
    assert d.exclude == ("node2",) and d.drain == ()
    assert any("only the job's own evidence" in r for r in d.reasons)


@pytest.mark.parametrize(
    "cause",
    [
        Cause.USER_CODE,
        Cause.CUDA_OOM,
        Cause.SEGFAULT,
        Cause.CANCELLED,
        Cause.COMPLETED,
        Cause.STORAGE_FULL,
    ],
)
def test_user_and_scheduler_causes_are_recorded_only(cause: Cause) -> None:
    """A user bug (KeyError), OOM or cancellation is not requeued."""
    d = default_chain(CONFIG)(given(cause=cause, blamed=()))
    assert d.verdict is Verdict.RECORD_ONLY and d.exclude == () and d.drain == ()


def test_no_requeue_and_non_batch_jobs_are_only_recorded() -> None:
    """Jobs that did not ask to be requeued are recorded, nodes still drained on root proof."""
    for changes in ({"requeue": False}, {"batch": False}):
        d = default_chain(CONFIG)(given(**changes))
        assert d.verdict is Verdict.RECORD_ONLY and d.exclude == ()
        assert d.drain == ("node2",)


def test_crash_loop_becomes_a_hold_after_the_budget() -> None:
    """The paper's 35-requeue NODE_FAIL crash loop: held once the family budget is spent."""
    verdicts = []
    history: tuple[PastDecision, ...] = ()
    for n in range(35):
        d = default_chain(CONFIG)(given(cause=Cause.NODE_FAILURE, history=history, restart_count=n))
        verdicts.append(d.verdict)
        if d.verdict is Verdict.HOLD:
            break
        history = (
            *history,
            PastDecision(n, Cause.NODE_FAILURE, Family.NODE_FAILURE, d.verdict.value, 1000.0 + n),
        )
    assert verdicts.count(Verdict.REQUEUE) == CONFIG.max_node_failure_requeues
    assert verdicts[-1] is Verdict.HOLD


def test_total_budget_counts_slurms_restarts_too() -> None:
    """A job already requeued max_requeues times (by anyone) is held."""
    d = default_chain(CONFIG)(given(restart_count=CONFIG.max_requeues))
    assert d.verdict is Verdict.HOLD and any("requeue budget spent" in r for r in d.reasons)


@pytest.mark.parametrize("cause", [Cause.PREEMPTED, Cause.TIMEOUT])
def test_preemptions_and_resumable_limits_have_their_own_budget_only(cause: Cause) -> None:
    """A run that goes on through preemptions or daily time limits (triage:resumable) is
    requeued until the preemption budget (50), not held by the total (10) on its 10th."""
    resumable = {"comment": "triage:resumable", "blamed": (), "cause": cause}
    runs = CONFIG.max_preemption_requeues
    history = tuple(
        PastDecision(i, cause, Family.PREEMPTION, "requeue", 1000.0 + i) for i in range(runs - 1)
    )
    d = default_chain(CONFIG)(given(history=history, restart_count=runs - 1, **resumable))
    assert d.verdict is Verdict.REQUEUE, d.reasons
    spent = (*history, PastDecision(runs - 1, cause, Family.PREEMPTION, "requeue", 2000.0))
    d = default_chain(CONFIG)(given(history=spent, restart_count=runs, **resumable))
    assert (d.verdict, d.budget_spent) == (Verdict.HOLD, "preemption")


def test_restarts_after_preemptions_do_not_spend_the_failure_budget() -> None:
    """12 restarts, all preemptions: a first hardware failure is still requeued. 22 restarts
    of which 12 preemptions leave 10 failures (2 ours, 8 Slurm's own): held on the total."""
    preempted = tuple(
        PastDecision(i, Cause.PREEMPTED, Family.PREEMPTION, "requeue", 1000.0 + i)
        for i in range(12)
    )
    d = default_chain(CONFIG)(given(history=preempted, restart_count=12))
    assert d.verdict is Verdict.REQUEUE, d.reasons
    failed = tuple(
        PastDecision(i, Cause.NODE_FAILURE, Family.NODE_FAILURE, "requeue", 1000.0 + i)
        for i in range(2)
    )
    d = default_chain(CONFIG)(given(history=failed + preempted, restart_count=22))
    assert (d.verdict, d.budget_spent) == (Verdict.HOLD, "total"), d.reasons


def test_unknown_is_requeued_once() -> None:
    """An unexplained failure is requeued once, then held."""
    first = default_chain(CONFIG)(given(cause=Cause.UNKNOWN, blamed=()))
    assert first.verdict is Verdict.REQUEUE
    second = default_chain(CONFIG)(
        given(cause=Cause.UNKNOWN, blamed=(), history=past(Cause.UNKNOWN, 1))
    )
    assert second.verdict is Verdict.HOLD


def test_backoff_doubles_per_repeat_of_the_same_cause() -> None:
    """Requeues for the same cause wait 0, base, 2*base, 4*base ... up to the maximum."""
    config = replace(CONFIG, max_node_failure_requeues=100, max_requeues=100)
    delays = [
        default_chain(config)(
            given(cause=Cause.NCCL_TIMEOUT, blamed=(), history=past(Cause.NCCL_TIMEOUT, n))
        ).begin_delay_s
        for n in range(7)
    ]
    assert delays == [0, 60, 120, 240, 480, 960, 1800]


def test_exclusion_that_cannot_fit_is_dropped_or_held() -> None:
    """Excluding node2 leaves 2 usable nodes for a 3-node job: requeue without it, or hold."""
    small = {"usable_partition_nodes": ("node1", "node2", "node3"), "num_nodes": 3}
    d = default_chain(CONFIG)(given(**small))
    assert d.verdict is Verdict.REQUEUE and d.exclude == ()
    assert any("requeued without exclusion" in r for r in d.reasons)
    held = default_chain(replace(CONFIG, cant_fit="hold"))(given(**small))
    assert held.verdict is Verdict.HOLD and held.exclude == ()


def test_an_unreadable_partition_keeps_the_exclusion() -> None:
    """sinfo failed (usable nodes unknown): the exclusion stands, in either cant_fit mode, and
    the reason says it was not checked; it is not read as a partition with no nodes."""
    for mode in ("requeue_without_exclusion", "hold"):
        d = default_chain(replace(CONFIG, cant_fit=mode))(given(usable_partition_nodes=None))
        assert (d.verdict, d.exclude) == (Verdict.REQUEUE, ("node2",))
        assert any("nodes could not be read: excluding node2 unchecked" in r for r in d.reasons)


def test_a_failed_sinfo_reads_as_an_unknown_partition_not_an_empty_one() -> None:
    """gather: the door's node read failing gives None (unknown), where it gave () and the
    must-fit rule dropped the exclusion of the node that had just failed."""
    door = FakeDoor([job_info(7, nodes=("node1", "node2"))], node_infos(8))
    door.fail("nodes", SlurmUnavailable("sinfo: Socket timed out on send/recv operation"))
    cluster = read_cluster(door)
    assert cluster is None
    view = job_view(door.job(7), {}, cluster=cluster, allocation=("node1", "node2"))
    assert view.usable_partition_nodes is None
    healthy = FakeDoor([job_info(7, nodes=("node1", "node2"))], node_infos(8))
    view = job_view(healthy.job(7), {}, cluster=read_cluster(healthy))
    assert len(view.usable_partition_nodes or ()) == 8


def test_users_own_exclusions_count_for_fit() -> None:
    """The user's --exclude already removes nodes: ours must still leave enough."""
    d = default_chain(CONFIG)(
        given(usable_partition_nodes=("node1", "node2", "node3"), excluded_nodes=("node3",))
    )
    assert d.exclude == ()


def test_a_required_node_is_never_excluded_the_job_is_held() -> None:
    """XID 79 on node2 of a job submitted with -w node1,node2: excluding node2 would leave it
    pending for ever (BadConstraints), so it is held, excluding nothing, and node2 drained."""
    d = default_chain(CONFIG)(given(required_nodes=("node1", "node2")))
    assert (d.verdict, d.exclude, d.drain) == (Verdict.HOLD, (), ("node2",))
    assert d.required_failed == ("node2",)
    assert any(r.startswith("required node node2 failed (gpu_unavailable)") for r in d.reasons)


def test_other_blamed_nodes_of_a_held_required_node_job_are_not_excluded_either() -> None:
    """node2 required, node3 not, both blamed: held, nothing excluded, the reason says so;
    a job whose -w list has none of the blamed nodes is requeued excluding them as usual."""
    g = given(blamed=("node2", "node3"), num_nodes=3, required_nodes=("node1", "node2"))
    d = default_chain(CONFIG)(g)
    assert (d.verdict, d.exclude, d.required_failed) == (Verdict.HOLD, (), ("node2",))
    assert any("not excluding node3 either" in r for r in d.reasons)
    other = default_chain(CONFIG)(given(required_nodes=("node1", "node4")))
    assert (other.verdict, other.exclude, other.required_failed) == (
        Verdict.REQUEUE,
        ("node2",),
        (),
    )


def test_a_required_node_blamed_without_exclusion_changes_nothing() -> None:
    """A requeue that excludes nothing (NCCL timeout) or a job only recorded is left alone."""
    nccl = given(cause=Cause.NCCL_TIMEOUT, blamed=(), required_nodes=("node1", "node2"))
    assert default_chain(CONFIG)(nccl).verdict is Verdict.REQUEUE
    no_requeue = given(requeue=False, required_nodes=("node2",))
    d = default_chain(CONFIG)(no_requeue)
    assert (d.verdict, d.required_failed) == (Verdict.RECORD_ONLY, ())


def test_opt_out_and_opt_in() -> None:
    """Opted-out users/partitions are recorded only; an opt-in site needs the job's token."""
    assert (
        default_chain(replace(CONFIG, opt_out_users=("alice",)))(given()).verdict
        is Verdict.RECORD_ONLY
    )
    assert (
        default_chain(replace(CONFIG, opt_out_partitions=("gpu",)))(given()).verdict
        is Verdict.RECORD_ONLY
    )
    opt_in = replace(CONFIG, opt_in=True)
    assert default_chain(opt_in)(given()).verdict is Verdict.RECORD_ONLY
    assert default_chain(opt_in)(given(comment="x triage:requeue")).verdict is Verdict.REQUEUE


def test_timeout_requeued_only_when_resumable() -> None:
    """TIMEOUT is requeued only for jobs marked resumable."""
    assert (
        default_chain(CONFIG)(given(cause=Cause.TIMEOUT, blamed=())).verdict is Verdict.RECORD_ONLY
    )
    assert (
        default_chain(CONFIG)(
            given(cause=Cause.TIMEOUT, blamed=(), comment="triage:resumable")
        ).verdict
        is Verdict.REQUEUE
    )


def test_config_overrides_the_taxonomy() -> None:
    """never_requeue_causes and requeue_causes replace the taxonomy's defaults."""
    assert (
        default_chain(replace(CONFIG, never_requeue_causes=("gpu_unavailable",)))(given()).verdict
        is Verdict.RECORD_ONLY
    )
    only_oom = replace(CONFIG, requeue_causes=("cuda_oom",))
    assert (
        default_chain(only_oom)(given(cause=Cause.CUDA_OOM, blamed=())).verdict is Verdict.REQUEUE
    )
    assert default_chain(only_oom)(given()).verdict is Verdict.RECORD_ONLY


def test_lemon_nodes_of_the_job_are_drained_with_the_reason() -> None:
    """A lemon node of this job is drained even when the cause itself drains nothing."""
    g = replace(
        given(cause=Cause.NCCL_TIMEOUT, blamed=()),
        lemons=("node5",),
        lemon_reasons={"node5": "4 failed jobs blamed it in 7d"},
    )
    d = default_chain(CONFIG)(g)
    assert d.drain == ("node5",) and any("lemon" in r and "4 failed jobs" in r for r in d.reasons)


def test_act_false_plans_the_same_drains() -> None:
    """policy.act = false is a dry run: the chain plans the drains it would make (the
    actuator leaves them undone, and the decision records them)."""
    dry = default_chain(replace(CONFIG, act=False))(given())
    assert dry.drain == ("node2",) == default_chain(CONFIG)(given()).drain
    assert dry.reasons == default_chain(CONFIG)(given()).reasons


def test_policies_compose_left_to_right() -> None:
    """`a | b` runs a then b; a site policy can be appended to the default chain."""

    @policy
    def never_on_fridays(g: PolicyInput, d: Decision) -> Decision:
        return d.but("site rule", verdict=Verdict.HOLD) if d.verdict is Verdict.REQUEUE else d

    chain = default_chain(CONFIG) | never_on_fridays
    d = chain(given())
    assert d.verdict is Verdict.HOLD and d.reasons[-1] == "site rule"
    assert "never_on_fridays" in repr(chain)
    assert rules.cause_defaults(CONFIG)(given()).verdict is Verdict.REQUEUE


def test_a_completed_job_has_nothing_to_do() -> None:
    """Issue 17.6: the reason for a clean end reads "completed: nothing to do", not
    "completed: none cause, not requeued"."""
    d = default_chain(CONFIG)(given(cause=Cause.COMPLETED, blamed=()))
    assert d.reasons == ("completed: nothing to do",)
    user = default_chain(CONFIG)(given(cause=Cause.USER_CODE, blamed=()))
    assert user.reasons == ("user_code: user cause, not requeued",)
