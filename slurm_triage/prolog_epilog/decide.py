"""The decision, once per job end (EpilogSlurmctld, or the epilog of the job's first node):
gather → judge → act → record.

- read what Slurm says of the run that ended (ended_run), then claim it: exactly one
  decision per job end even when deciders race (the journal's `claim(job, restart)`);
- gather its evidence (gather.gather_evidence: I/O) and attribute it (pure); gather what the
  policies read (gather.gather_context: the job view, its earlier decisions, the blamed
  nodes' history);
- judge: lemons and the policy chain give one Decision (pure; `judge`);
- act: the actuator carries it out (dry-run capable);
- record: the journal row and node events, the log line, metrics and notifications.

Time comes from an injected Clock: one wall time for the decision (`decided_at`), a monotonic
clock for its deadlines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import field, replace
from typing import Any

from slurm_triage import actuator, hostlist
from slurm_triage.attribution import Attribution, attribute
from slurm_triage.clock import SYSTEM_CLOCK, Clock
from slurm_triage.config import Config
from slurm_triage.evidence import KernelEvent, fact_to_dict
from slurm_triage.frozen import Frozen
from slurm_triage.journal import Journal, JournalError, NodeEvent
from slurm_triage.logs import get_logger
from slurm_triage.observe import hooks as observe
from slurm_triage.policies import Decision, PolicyInput, default_chain
from slurm_triage.policies.drain_words import lemon_reason
from slurm_triage.policies.lemons import node_signals
from slurm_triage.policies.reasons import job_drain_reason
from slurm_triage.prolog_epilog.detach import detach
from slurm_triage.prolog_epilog.ended_run import EndedRun, expedited_failure, read_ended_run
from slurm_triage.prolog_epilog.gather import (
    Context,
    Gathered,
    gather_context,
    gather_evidence,
    node_blame,
    on_job_nodes,
    wait_for_root_records,
)
from slurm_triage.prolog_epilog.job_end import JobEnd, slurm_env
from slurm_triage.slurm import JobInfo, SlurmDoor, SlurmError, open_door

__all__ = ["Outcome", "decide", "decide_from_env", "judge", "node_blame", "on_job_nodes"]


class Outcome(Frozen):
    job_id: int
    decided: bool  # False when another decider had already claimed this job end
    attribution: Attribution | None = None
    decision: Decision | None = None
    applied: actuator.Applied | None = None


class Judged(Frozen):
    """The verdict on one job end: its attribution, the policies' decision, the drain
    reason the decision's drains carry."""

    attribution: Attribution
    decision: Decision
    drain_reason: str
    # Lemon nodes are drained with their own reason (`triage: lemon job=N: ...`), which the
    # health check never resumes: a lemon returns only through burn-in or a person.
    lemon_drain_reasons: Mapping[str, str] = field(default_factory=dict)
    # A shared fault (the circuit breaker's reason) counts against no node's history.
    shared_fault: str = ""
    # The drains for a node's own fault, not the job's cause, each with its reason.
    own_drain_reasons: Mapping[str, str] = field(default_factory=dict)


def attribute_end(run: EndedRun, gathered: Gathered) -> Attribution:
    """The attribution of this end's facts (pure), held to the job's window already
    (gather_evidence); what was left out of them is said in its reason."""
    found = attribute(gathered.facts)
    if gathered.notes:
        found = replace(found, reason="; ".join((found.reason, *gathered.notes)))
    return found


def blamed_events(
    end: JobEnd, attribution: Attribution, now: float, shared_fault: str = ""
) -> list[NodeEvent]:
    """This job end's `blamed` events, as recorded in the journal and judged for lemons;
    none for a shared fault (a mount hanging under every node is no node's history)."""
    if shared_fault:
        return []
    multi = len(end.nodes) > 1
    xids = {
        f.node: f.xid
        for f in attribution.evidence
        if isinstance(f, KernelEvent) and f.xid is not None
    }
    return [
        NodeEvent(n, end.job_id, now, "blamed", attribution.cause.value, xids.get(n), multi)
        for n in node_blame(attribution)
    ]


def judge(
    config: Config, run: EndedRun, attribution: Attribution, context: Context, now: float
) -> Judged:
    """Lemons among this job's nodes, then the policy chain (pure)."""
    current = blamed_events(run.end, attribution, now, context.shared_fault)
    signals = node_signals([*context.node_events, *current], config.policy)
    lemons = {n: "; ".join(s.reasons) for n, s in signals.items() if s.lemon and n in run.end.nodes}
    given = PolicyInput(
        cause=attribution.cause,
        domain=attribution.domain,
        blamed=attribution.nodes,
        root_backed=attribution.root_backed,
        job=context.job,
        history=context.history,
        now=now,
        lemons=tuple(lemons),
        lemon_reasons=lemons,
        shared_fault=context.shared_fault,
        own_faults=context.own_faults,
        end_state=run.state.state,
        cancelled_by_uid=run.state.by_uid,
    )
    decision = default_chain(config.policy)(given)
    reason = job_drain_reason(attribution.cause.value, run.end.job_id, attribution.reason)
    lemon_reasons = {n: lemon_reason(run.end.job_id, why) for n, why in lemons.items()}
    own_reasons = {
        n: job_drain_reason(
            cause,
            run.end.job_id,
            f"its own root evidence (the job ended of {attribution.cause.value} elsewhere)",
        )
        for n, cause in context.own_faults.items()
    }
    return Judged(attribution, decision, reason, lemon_reasons, context.shared_fault, own_reasons)


def act(
    config: Config, door: SlurmDoor, run: EndedRun, judged: Judged, context: Context
) -> actuator.Applied:
    """The decision carried out through the actuator (a dry run with policy.act = false)."""
    return actuator.carry_out(
        door,
        run.end.job_id,
        judged.decision,
        cause=judged.attribution.cause.value,
        blamed=judged.attribution.nodes,
        restart=run.end.restart,
        drain_reason=judged.drain_reason,
        lemon_drain_reasons=judged.lemon_drain_reasons,
        own_drain_reasons=judged.own_drain_reasons,
        dry_run=not config.policy.act,
        already_requeued=run.requeued_by_slurm,
        held_by_slurm=run.held_by_slurm,
        restarted_by_slurm=run.restarted_by_slurm,
        earlier=context.earlier,
    )


def decide(
    config: Config,
    end: JobEnd,
    door: SlurmDoor,
    journal: Journal,
    env: dict[str, str],
    job: JobInfo | None = None,
    *,
    clock: Clock = SYSTEM_CLOCK,
    settle: bool = True,
) -> Outcome:
    """Decide one job end; `job` is the controller's view if the caller has just read it.
    A het job is decided once, at its leader's end, over every component's nodes: a
    component's own end is not decided (het_component). `settle`: an expedited failure may
    wait for Slurm to settle it (never in the hook, where it cannot settle)."""
    if _left_to_het_leader(end):
        return Outcome(end.job_id, decided=False)
    run = read_ended_run(
        config, end, door, job or door.job(end.job_id), clock, clock.monotonic(), settle=settle
    )
    # The decision's own time starts once Slurm has settled what it does with the run.
    started = clock.monotonic()
    end = run.end
    log = get_logger(job_id=end.job_id, restart=end.restart)
    owner = f"{os.uname().nodename}:{os.getpid()}"  # gethostname(2), without socket
    started_run = observe.run_start(
        end.start_time, run.job.start_time, end.ended_at, run.requeued_by_slurm
    )
    if not journal.claim(end.job_id, end.restart, owner, started_run):
        log.info("decision_already_taken")
        return Outcome(end.job_id, decided=False)
    # gather
    if not run.completed:
        missing = wait_for_root_records(config, end, clock)
        if missing:
            log.warning("decision_missing_node_evidence", nodes=list(missing))
    # Reading the user's evidence may take at most half of the decision's time.
    gathered = gather_evidence(config, run, started + config.decision.deadline_s / 2, clock)
    if gathered.notes:
        log.warning("decision_evidence_limited", notes=list(gathered.notes))
    attribution = attribute_end(run, gathered)
    decided_at = clock.time()
    context = gather_context(
        config, door, journal, run, attribution, env, decided_at, gathered.windowed
    )
    # judge, act, record
    judged = judge(config, run, attribution, context, decided_at)
    applied = act(config, door, run, judged, context)
    record(config, journal, run, judged, applied, decided_at)
    return Outcome(end.job_id, True, attribution, judged.decision, applied)


def node_events(
    end: JobEnd, judged: Judged, applied: actuator.Applied, now: float
) -> list[NodeEvent]:
    """What this end adds to its nodes' history: blamed, excluded, drained. A dry run
    records what it would have excluded and drained, as if acting."""
    multi = len(end.nodes) > 1
    cause, decision = judged.attribution.cause.value, judged.decision
    events = blamed_events(end, judged.attribution, now, judged.shared_fault)
    events += [
        NodeEvent(n, end.job_id, now, "excluded", None, None, multi)
        for n in applied.excluded or (decision.exclude if applied.dry_run else ())
    ]
    events += [
        NodeEvent(n, end.job_id, now, "drained", cause, None, multi)
        for n in applied.drained or (decision.drain if applied.dry_run else ())
    ]
    return events


def record(
    config: Config,
    journal: Journal,
    run: EndedRun,
    judged: Judged,
    applied: actuator.Applied,
    now: float,
) -> None:
    """The journal row and node events, the decision's log line, then metrics and
    notifications (which never fail the decision)."""
    end, job = run.end, run.job
    attribution, decision = judged.attribution, judged.decision
    started_run = observe.run_start(
        end.start_time, job.start_time, end.ended_at, run.requeued_by_slurm
    )
    observed = observe.journal_columns(
        config,
        ended_at=end.ended_at,
        run_started_at=started_run,
        nodes=end.nodes,
        decision=decision,
        applied=applied,
    )
    journal.record(
        end.job_id,
        end.restart,
        {**_row(run, judged, applied, observed), "decided_at": now},
        node_events(end, judged, applied, now),
    )
    get_logger(job_id=end.job_id, restart=end.restart).info(
        "decision_made",
        cpu_s=round(time.process_time(), 4),  # a measurement of this process, not a clock
        cause=attribution.cause.value,
        nodes=list(attribution.nodes),
        verdict=decision.verdict.value,
        exclude=list(decision.exclude),
        drain=list(applied.drained),
        reasons=list(decision.reasons),
        errors=list(applied.errors),
    )
    observe.after_decision(
        config,
        journal,
        job_id=end.job_id,
        cause=attribution.cause.value,
        reason=judged.drain_reason,
        decision=decision,
        applied=applied,
    )


def _row(
    run: EndedRun, judged: Judged, applied: actuator.Applied, observed: dict[str, Any]
) -> dict[str, Any]:
    end, job, attribution, decision = run.end, run.job, judged.attribution, judged.decision
    return {
        "state": run.state.text,
        "exit_code": end.exit_code,
        "exit_signal": end.exit_signal,
        "user": job.user,
        "partition": job.partition,
        "num_nodes": job.num_nodes,
        "nodes": list(end.nodes),
        "cause": attribution.cause.value,
        "domain": attribution.domain.value,
        "confidence": attribution.confidence,
        "root_backed": int(attribution.root_backed),
        "blamed": list(attribution.nodes),
        "action": decision.verdict.value,
        "excluded": list(applied.excluded),
        "drained": list(applied.drained),
        "begin_delay_s": decision.begin_delay_s,
        "reasons": list(decision.reasons),
        "applied": int(applied.ok and not applied.dry_run),
        "outcome": "dry_run"
        if applied.dry_run
        else ("ok" if applied.ok else "; ".join(applied.errors)[:1000]),
        "evidence": [fact_to_dict(f) for f in attribution.evidence][:200],
        **observed,  # what the metrics read (observe.hooks.journal_columns)
    }


def decide_from_env(
    config: Config,
    env: dict[str, str] | None = None,
    door: SlurmDoor | None = None,
    *,
    clock: Clock = SYSTEM_CLOCK,
    detached: Callable[[], None] | None = None,
) -> Outcome | None:
    """Entry for EpilogSlurmctld / the first node's epilog: never raises our own errors.
    The failed run of an expedited-requeue job is decided in a detached process (detach.py),
    and this returns None at once. The decider (docs/decider.md), which must not fork its
    threads, passes `detached` instead: it is called when the hook must return at once
    (the decider answers EpilogSlurmctld), and the decision then goes on in this thread."""
    env = dict(os.environ) if env is None else env
    log = get_logger(job_id=slurm_env(env, "job_id") or None)
    try:
        end = JobEnd.from_env(env, clock.time())
        if _left_to_het_leader(end):  # before any read of the job: none is needed
            return None
        door = door or open_door(config.slurm)
        job = door.job(end.job_id)  # read once: the decision starts from it
        if expedited_failure(job, end):
            if detached is not None:
                detached()
                return _decide_with_journal(config, end, door, env, job, clock)
            _decide_detached(config, end, door, env, job, clock)
            return None
        return _decide_with_journal(config, end, door, env, job, clock)
    except (JournalError, SlurmError) as exc:
        log.error("decision_failed", error=str(exc))
    except (KeyError, ValueError, hostlist.HostlistError) as exc:
        log.error("decision_bad_environment", error=f"{type(exc).__name__}: {exc}")
    return None


def _left_to_het_leader(end: JobEnd) -> bool:
    """Whether this end is a het job component's, decided with its leader's (and said so)."""
    if end.het_component:
        get_logger(job_id=end.job_id).info("decision_left_to_het_leader", leader=end.het_job_id)
    return end.het_component


def _decide_with_journal(
    config: Config,
    end: JobEnd,
    door: SlurmDoor,
    env: dict[str, str],
    job: JobInfo,
    clock: Clock,
    settle: bool = True,
) -> Outcome:
    journal = Journal(config.decision.journal, config.decision.journal_busy_timeout_s)
    try:
        return decide(config, end, door, journal, env, job, clock=clock, settle=settle)
    finally:
        journal.close()


def _decide_detached(
    config: Config, end: JobEnd, door: SlurmDoor, env: dict[str, str], job: JobInfo, clock: Clock
) -> None:
    """Returns at once in the hook; the detached process decides, then ends right there
    (never returning into the hook's code)."""
    log = get_logger(job_id=end.job_id)
    try:
        if detach():
            log.info("decision_detached", why="an expedited requeue waits for this hook")
            return
    except OSError as exc:  # cannot fork: decide here, leaving the requeue to Slurm
        log.warning("decision_not_detached", error=str(exc))
        _decide_with_journal(config, end, door, env, job, clock, settle=False)
        return
    import logging  # for its shutdown only, in the detached process

    status = 0
    try:
        _decide_with_journal(config, end, door, env, job, clock)
    except BaseException as exc:  # nobody is left to report to but the log
        log.error("decision_failed", error=f"{type(exc).__name__}: {exc}")
        status = 1
    finally:
        logging.shutdown()
        os._exit(status)
