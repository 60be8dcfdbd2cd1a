"""The policies, each a small pure step over (PolicyInput, Decision), and their default chain.

Order matters and is the order below: what the cause asks for (taxonomy defaults, config
overrides), whether someone cancelled the run, whether this job may be requeued at all,
whether it requires a node it would exclude, the requeue budget, backoff, whether the
exclusions still let the job fit, and what to drain (root-backed blame, lemon nodes).
"""

from __future__ import annotations

from dataclasses import replace

from slurm_triage.config import PolicyConfig
from slurm_triage.job_state import JobState
from slurm_triage.policies.model import Decision, Family, Policy, PolicyInput, Verdict, family
from slurm_triage.taxonomy import Action, Cause, Condition, Domain, info

OPT_IN_TOKEN = "triage:requeue"
RESUMABLE_TOKEN = "triage:resumable"


def cause_defaults(config: PolicyConfig) -> Policy:
    """Requeue, exclude or leave ended, as the taxonomy (or the config's lists) say."""

    def step(g: PolicyInput, d: Decision) -> Decision:
        cause_info = info(g.cause)
        name = g.cause.value
        if name in config.never_requeue_causes:
            return d.but(f"{name}: never requeued (policy.never_requeue_causes)")
        wants = (
            name in config.requeue_causes
            if config.requeue_causes
            else cause_info.action is not Action.NONE
        )
        if not wants:
            if cause_info.domain is Domain.NONE:
                return d.but(f"{name}: nothing to do")
            return d.but(f"{name}: {cause_info.domain.value} cause, not requeued")
        if cause_info.condition is Condition.IF_RESUMABLE and RESUMABLE_TOKEN not in g.job.comment:
            return d.but(f"{name}: requeued only for resumable jobs (--comment {RESUMABLE_TOKEN})")
        exclude = g.blamed if cause_info.action is Action.REQUEUE_EXCLUDE else ()
        verdict = Verdict.HOLD if cause_info.action is Action.HOLD else Verdict.REQUEUE
        what = f"requeue excluding {','.join(exclude)}" if exclude else verdict.value
        return d.but(f"{name}: {what}", verdict=verdict, exclude=exclude)

    return Policy("cause_defaults", step)


def cancelled(config: PolicyConfig) -> Policy:
    """Leave ended a run Slurm ended as CANCELLED, whatever its cause: someone cancelled it.

    A root hardware fact (tier 60) outranks the cancel in attribution, and a post-job check
    fails after a cancel as after any end, so the cause may be a node's fault: its blame,
    drains and node history stand, but requeueing would bring back a job its user killed,
    often after resubmitting it. Slurm's own ends are other states (NODE_FAIL, PREEMPTED,
    TIMEOUT, REQUEUED), so CANCELLED is scancel's: the user, an admin or their tools. A
    CANCELLED whose uid accounting did not give (slurmdbd slow or down) is such a cancel
    too, never the job's failure. A site that requeues cancels (`requeue_causes` lists
    `cancelled`) has said a cancel is no bar.
    """

    def step(g: PolicyInput, d: Decision) -> Decision:
        if g.end_state is not JobState.CANCELLED or d.verdict is Verdict.RECORD_ONLY:
            return d
        if Cause.CANCELLED.value in config.requeue_causes:
            return d
        who = f"uid {g.cancelled_by_uid}" if g.cancelled_by_uid is not None else "an unknown uid"
        return d.but(
            f"cancelled by {who}: not requeued ({g.cause.value} recorded)",
            verdict=Verdict.RECORD_ONLY,
            exclude=(),
        )

    return Policy("cancelled", step)


def eligibility(config: PolicyConfig) -> Policy:
    """Only batch jobs that asked to be requeued, not opted out (and opted in if required)."""

    def step(g: PolicyInput, d: Decision) -> Decision:
        if d.verdict is Verdict.RECORD_ONLY:
            return d
        job = g.job
        why = ""
        if not job.batch:
            why = "not a batch job: recorded only"
        elif not job.requeue:
            why = "job did not ask to be requeued (--no-requeue): recorded only"
        elif job.user in config.opt_out_users:
            why = f"user {job.user} opted out: recorded only"
        elif job.partition in config.opt_out_partitions:
            why = f"partition {job.partition} opted out: recorded only"
        elif config.opt_in and OPT_IN_TOKEN not in job.comment:
            why = f"site is opt-in and the job did not opt in ({OPT_IN_TOKEN}): recorded only"
        if why:
            return d.but(why, verdict=Verdict.RECORD_ONLY, exclude=())
        return d

    return Policy("eligibility", step)


def required_nodes(config: PolicyConfig) -> Policy:
    """Hold, excluding nothing, a job that would exclude a node it requires (-w/--nodelist).

    Slurm never starts a job whose ExcNodeList names a node of its ReqNodeList (Reason
    BadConstraints), so requeueing it that way loses it silently. Held, it waits for a
    person to change its node list or release it once the node is back. Nothing else is
    excluded either: the person must change the job anyway, an exclusion on a held job is
    not checked against the partition (must_fit judges requeues only) and would be one more
    constraint to find and undo; the other blamed nodes are named in the AdminComment, and
    drained anyway where root's evidence says so (the drains step, independent of the job).
    """
    del config  # no keys: excluding a required node is never right

    def step(g: PolicyInput, d: Decision) -> Decision:
        if d.verdict is Verdict.RECORD_ONLY or not d.exclude:
            return d
        required = tuple(n for n in d.exclude if n in g.job.required_nodes)
        if not required:
            return d
        what = f"required node{'s' if len(required) > 1 else ''} {','.join(required)}"
        others = [n for n in d.exclude if n not in required]
        also = f"; not excluding {','.join(others)} either" if others else ""
        return d.but(
            f"{what} failed ({g.cause.value}): the job asked for it with -w/--nodelist, so it "
            f"is held, not requeued excluding it{also}",
            verdict=Verdict.HOLD,
            exclude=(),
            required_failed=required,
        )

    return Policy("required_nodes", step)


def requeue_budget(config: PolicyConfig) -> Policy:
    """Hold a job that used up its requeues, in total or for this family of causes."""
    limits = {
        Family.NODE_FAILURE: config.max_node_failure_requeues,
        Family.PREEMPTION: config.max_preemption_requeues,
        Family.UNKNOWN: config.max_unknown_requeues,
    }

    def step(g: PolicyInput, d: Decision) -> Decision:
        if d.verdict is not Verdict.REQUEUE:
            return d
        ours = [p for p in g.history if p.verdict in (Verdict.REQUEUE, Verdict.HOLD)]
        fam = family(g.cause, g.domain)
        # The total guards against crash loops: a preemption or a resumable time limit is
        # no failure, and a run that goes on through them (a week of daily limits) is kept
        # to its own family's budget only, and its restarts are not failures spent.
        if fam is not Family.PREEMPTION:
            resumed = sum(1 for p in g.history if p.family is Family.PREEMPTION)
            failures = sum(1 for p in ours if p.family is not Family.PREEMPTION)
            total = max(g.job.restart_count - resumed, failures)
            if total >= config.max_requeues:
                return d.but(
                    f"requeue budget spent ({total} of {config.max_requeues}): held",
                    verdict=Verdict.HOLD,
                    budget_spent="total",
                )
        limit = limits.get(fam)
        used = sum(1 for p in ours if p.family is fam)
        if limit is not None and used >= limit:
            return d.but(
                f"{fam.value} requeue budget spent ({used} of {limit}): held",
                verdict=Verdict.HOLD,
                budget_spent=fam.value,
            )
        return d

    return Policy("requeue_budget", step)


def backoff(config: PolicyConfig) -> Policy:
    """The n-th requeue for the same cause waits base * 2^(n-2), capped (the first: none)."""

    def step(g: PolicyInput, d: Decision) -> Decision:
        if d.verdict is not Verdict.REQUEUE or config.backoff_base_s <= 0:
            return d
        same = sum(1 for p in g.history if p.cause is g.cause and p.verdict == Verdict.REQUEUE)
        if same == 0:
            return d
        delay = min(config.backoff_base_s * 2 ** (same - 1), config.backoff_max_s)
        return d.but(
            f"{same} earlier requeue(s) for {g.cause.value}: start in {delay:g}s",
            begin_delay_s=delay,
        )

    return Policy("backoff", step)


def must_fit(config: PolicyConfig) -> Policy:
    """Never exclude so many nodes that the job cannot run in its partition."""

    def step(g: PolicyInput, d: Decision) -> Decision:
        if d.verdict is not Verdict.REQUEUE or not d.exclude:
            return d
        if g.job.usable_partition_nodes is None:
            # Requeuing onto the node that just failed is the worse guess: Slurm keeps a job
            # that cannot fit pending with a reason an operator sees.
            return d.but(
                f"{g.job.partition or 'the partition'}'s nodes could not be read: "
                f"excluding {','.join(d.exclude)} unchecked"
            )
        excluded = set(g.job.excluded_nodes) | set(d.exclude)
        usable = [n for n in g.job.usable_partition_nodes if n not in excluded]
        if len(usable) >= g.job.num_nodes:
            return d
        why = (
            f"excluding {','.join(d.exclude)} leaves {len(usable)} usable node(s) in "
            f"{g.job.partition or 'the partition'} for a {g.job.num_nodes}-node job"
        )
        if config.cant_fit == "hold":
            return d.but(f"{why}: held", verdict=Verdict.HOLD, exclude=())
        return d.but(f"{why}: requeued without exclusion", exclude=())

    return Policy("must_fit", step)


def drains_blamed_nodes(config: PolicyConfig, cause: Cause, root_backed: bool) -> bool:
    """Whether the nodes blamed for `cause` leave service: a drain cause, and blame backed by
    root-collected evidence. The node Epilog asks the same (epilog.node_fault), so it fails
    exactly where the decision would drain. `policy.act` is not asked here: a dry run
    decides the same drains, and the actuator leaves them undone."""
    return root_backed and cause.value in config.drain_causes


def drains(config: PolicyConfig) -> Policy:
    """Drain blamed nodes only on root-collected evidence, and lemon nodes of this job."""

    def step(g: PolicyInput, d: Decision) -> Decision:
        drain: list[str] = []
        if g.blamed and drains_blamed_nodes(config, g.cause, g.root_backed):
            if g.shared_fault:
                d = d.but(f"not draining {','.join(g.blamed)}: {g.shared_fault}")
            else:
                drain += list(g.blamed)
                d = d.but(f"drain {','.join(g.blamed)}: root-collected evidence of {g.cause.value}")
        elif g.blamed and g.cause.value in config.drain_causes:
            d = d.but(f"not draining {','.join(g.blamed)}: only the job's own evidence")
        for node, cause in sorted(g.own_faults.items()):
            # Its Epilog judged it alone and asked Slurm to drain it (`Epilog error`): the
            # job's winning cause is another node's, but this fault is no less real.
            if node not in drain and not g.shared_fault:
                drain.append(node)
                d = d.but(f"drain {node}: its own root-collected evidence of {cause}")
        for node in g.lemons:
            # Said even when the node is drained for this cause: the history is why it
            # should not simply come back after a reset.
            d = d.but(f"drain {node} as a lemon: {g.lemon_reasons.get(node, '')}".rstrip())
            if node not in drain:
                drain.append(node)
        return replace(d, drain=tuple(drain))

    return Policy("drains", step)


def shared_fault(config: PolicyConfig) -> Policy:
    """Exclude no node for a fault the circuit breaker calls shared (a check failing on
    more than its share of the cluster at once): the next nodes would fail it as well."""

    def step(g: PolicyInput, d: Decision) -> Decision:
        if not (g.shared_fault and d.exclude):
            return d
        return d.but(f"not excluding {','.join(d.exclude)}: {g.shared_fault}", exclude=())

    return Policy("shared_fault", step)


def default_chain(config: PolicyConfig) -> Policy:
    return (
        cause_defaults(config)
        | cancelled(config)
        | eligibility(config)
        | shared_fault(config)
        | required_nodes(config)
        | requeue_budget(config)
        | backoff(config)
        | must_fit(config)
        | drains(config)
    )
