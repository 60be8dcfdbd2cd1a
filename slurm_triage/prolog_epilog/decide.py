"""The decision, once per job end: merge all nodes' evidence, attribute, ask the policy, act.

Runs as EpilogSlurmctld (or in the epilog of the job's first node). Exactly one decision
per job end even when deciders race: the journal's `claim(job, restart)` admits one. Gather
(I/O) is apart from judging (attribute + policy chain, pure) and from acting (actuator).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import dataclass, replace
from typing import Any

from slurm_triage import actuator, hostlist
from slurm_triage.attribution import Attribution, attribute, decode_tail, job_window, scan_lines
from slurm_triage.config import Config
from slurm_triage.evidence import (
    Fact,
    KernelEvent,
    ProcessExit,
    SlurmState,
    Source,
    fact_to_dict,
    parse_job_state,
    store,
)
from slurm_triage.journal import Journal, JournalError, NodeEvent
from slurm_triage.logs import get_logger
from slurm_triage.observe import hooks as observe
from slurm_triage.policies import Decision, JobView, PastDecision, PolicyInput, default_chain
from slurm_triage.policies import family as cause_family
from slurm_triage.policies.lemons import node_signals
from slurm_triage.policies.reasons import job_drain_reason
from slurm_triage.prolog_epilog.detach import detach
from slurm_triage.slurm import JobInfo, JobState, SlurmDoor, SlurmError, open_door
from slurm_triage.taxonomy import Action, Domain, info, parse_cause

# Slurm 25.11's reason for an expedited requeue it held (no Epilog failed); the state shows
# REQUEUE_HOLD, or PENDING once the job has been updated.
SLURM_HELD_REQUEUE_REASON = "job_requeued_in_held_state"
WINDOW_BEFORE_S = 600.0
CLOCK_SLACK_S = 5.0
_RUNNING_AGAIN = frozenset(
    {
        JobState.PENDING,
        JobState.CONFIGURING,
        JobState.RUNNING,
        JobState.REQUEUED,
        JobState.REQUEUE_HOLD,
        JobState.SUSPENDED,
        JobState.EXPEDITING,  # 25.11: pending after an expedited requeue, until it starts
    }
)
# While EpilogSlurmctld runs, slurmctld shows COMPLETING; the reason says how it ended.
_REASON_STATE = {
    "NonZeroExitCode": "FAILED",
    "RaisedSignal": "FAILED",
    "JobLaunchFailure": "FAILED",
    "NodeDown": "NODE_FAIL",
    "NodeFail": "NODE_FAIL",
    "TimeLimit": "TIMEOUT",
    "Preempted": "PREEMPTED",
    "OutOfMemory": "OUT_OF_MEMORY",
}


@dataclass(frozen=True)
class Ending:
    """One job end as the decider sees it."""

    job_id: int
    restart: int
    nodes: tuple[str, ...]
    uid: int
    # None when Slurm did not say (SLURM_JOB_EXIT_CODE2 is EpilogSlurmctld's alone): the
    # controller's ExitCode is read then.
    exit_code: int | None
    exit_signal: int | None
    ended_at: float
    # When the run that ended started: records older than this belong to earlier runs of a
    # requeued job (same job id, same directory) and must not be read as this run's.
    started_at: float | None = None

    @classmethod
    def from_env(cls, env: dict[str, str], now: float) -> Ending:
        exit2 = env.get("SLURM_JOB_EXIT_CODE2")
        code, _, sig = (exit2 or "").partition(":")
        nodes = hostlist.expand(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", ""))
        return cls(
            job_id=int(env["SLURM_JOB_ID"]),
            restart=int(env.get("SLURM_JOB_RESTART_COUNT") or 0),
            nodes=tuple(nodes),
            uid=int(env.get("SLURM_JOB_UID", "-1")),
            exit_code=int(code or 0) if exit2 else None,
            exit_signal=int(sig or 0) if exit2 else None,
            ended_at=now,
        )


@dataclass(frozen=True)
class Outcome:
    job_id: int
    decided: bool  # False when another decider had already claimed this job end
    attribution: Attribution | None = None
    decision: Decision | None = None
    applied: actuator.Applied | None = None


def final_state(door: SlurmDoor, job: JobInfo, wait_s: float) -> str:
    """The job's end state ("CANCELLED by 0" style): from the controller once final, else
    from accounting (slurmctld shows COMPLETING while EpilogSlurmctld runs), else from the
    controller's reason."""
    if job.state.finished:
        return job.state.value
    if job.state is JobState.COMPLETING:
        # 24.05+ (scontrol --json) shows the state under COMPLETING: no need to wait for
        # accounting, except for a cancel, where accounting says who cancelled.
        if job.base_state is JobState.PENDING:
            return "REQUEUED"  # Slurm requeued the run that ended (its Prolog failed, ...)
        if job.base_state.finished and job.base_state is not JobState.CANCELLED:
            return job.base_state.value
    deadline = time.monotonic() + wait_s
    while True:
        try:
            accounted = door.accounted_job(job.job_id)
            if accounted.state is JobState.REQUEUED:
                return "REQUEUED"  # Slurm requeued this run itself
            if accounted.state.finished:
                return accounted.state_text or accounted.state.value
        except SlurmError:
            pass
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    # "NonZeroExitCode", "RaisedSignal:9(Killed)", "NodeDown ..."
    fallback = _REASON_STATE.get(re.split(r"[ :]", job.state_reason, maxsplit=1)[0], "")
    if fallback:
        return fallback
    return "COMPLETED" if (job.exit_code, job.exit_signal) == (0, 0) else "FAILED"


def _settled(door: SlurmDoor, job: JobInfo, deadline: float) -> JobInfo:
    """The job once Slurm has finished an expedited requeue (restarted it, or requeued it
    held): it stays COMPLETING until every Epilog and EpilogSlurmctld ended. Bounded."""
    while job.state is JobState.COMPLETING and time.monotonic() < deadline:
        time.sleep(0.05)
        job = door.job(job.job_id)
    return job


def wait_for_root_records(config: Config, ending: Ending) -> tuple[str, ...]:
    """Wait (bounded) until every node's epilog wrote its record; return the missing nodes."""
    deadline = time.monotonic() + config.decision.wait_for_nodes_s
    missing = list(ending.nodes)
    while missing:
        missing = [
            n
            for n in missing
            if not store.root_record_present(
                config.paths.evidence_dir, ending.job_id, n, ending.started_at
            )
        ]
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return tuple(missing)


OUTPUT_TAIL_BYTES = 1 << 20


def output_facts(job: JobInfo, uid: int, deadline: float = float("inf")) -> list[Fact]:
    """Signatures in the tail of the batch script's output (jobs without the wrapper too):
    the job's own words, so USER facts. srun merges every task's output into this file, so a
    line of a multi-node job names its node only through srun's own lines (`srun: error:
    node2: task 1: ...`, `[rank1]:` mapped by them); the batch host is right only for a
    single-node job."""
    facts: list[Fact] = []
    for path in dict.fromkeys(p for p in (job.std_out, job.std_err) if p.startswith("/")):
        try:
            left = min(store.OUTPUT_READ_TIMEOUT_S, deadline - time.monotonic())
            data = store.read_user_tail(path, uid, OUTPUT_TAIL_BYTES, timeout_s=max(0.1, left))
        except store.UnsafeEvidence as exc:
            get_logger(job_id=job.job_id).info("job_output_unread", detail=str(exc))
            continue
        lines = decode_tail(data, whole_file=len(data) < OUTPUT_TAIL_BYTES)
        node = job.batch_host or None if len(job.nodes) <= 1 else None
        facts += scan_lines(lines, node=node, source=Source.USER)
    return facts


@dataclass(frozen=True)
class Gathered:
    """The facts of one job end, and what was left out of them (said in the decision)."""

    facts: list[Fact]
    notes: tuple[str, ...] = ()


def gather(
    config: Config,
    ending: Ending,
    state_text: str,
    job: JobInfo | None = None,
    deadline: float = float("inf"),
) -> Gathered:
    """All facts for this job end: Slurm's own, root's records, the job's records and the
    tail of its output file. Facts naming a node outside the job are dropped. When the
    user's records are over their budget (or `deadline`, a time.monotonic() value, passes
    while reading them), none of them count: the decision is taken on root evidence alone."""
    state, by_uid = parse_job_state(state_text)
    facts: list[Fact] = [
        SlurmState(time=ending.ended_at, source=Source.ROOT, state=state, by_uid=by_uid),
        ProcessExit(
            time=ending.ended_at,
            source=Source.ROOT,
            exit_code=ending.exit_code,
            signal=ending.exit_signal or None,
        ),
    ]
    since = ending.started_at
    roots = store.read_root_records(
        config.paths.evidence_dir, ending.job_id, ending.nodes, newer_than=since
    )
    users = store.read_user_records(
        config.paths.evidence_dir,
        ending.job_id,
        ending.uid,
        nodes=ending.nodes,
        newer_than=since,
        budget=store.RecordBudget(deadline=deadline),
    )
    notes: list[str] = []
    kept_users = users.records
    if users.over_budget:
        kept_users = ()
        notes.append(f"user evidence ignored ({users.over_budget}): decided on root evidence")
    for record in (*roots.records, *kept_users):
        facts += record.facts
    if job is not None and not users.over_budget:
        facts += output_facts(job, ending.uid, deadline)
    facts, foreign = on_job_nodes(facts, ending.nodes)
    if foreign:
        notes.append(f"facts naming nodes outside the job dropped: {', '.join(foreign[:5])}")
    return Gathered(facts, tuple(notes))


def on_job_nodes(facts: list[Fact], nodes: tuple[str, ...]) -> tuple[list[Fact], list[str]]:
    """Facts about this job's nodes (named as Slurm names them), and the foreign names.

    A user's record or log may name any node: left in, it would put arbitrary names into
    exclusion lists, AdminComment and other nodes' histories.
    """
    spelling = {n.lower(): n for n in nodes}
    kept: list[Fact] = []
    foreign: dict[str, None] = {}
    for fact in facts:
        if fact.node is None:
            kept.append(fact)
        elif (name := spelling.get(fact.node.lower())) is not None:
            kept.append(fact if name == fact.node else replace(fact, node=name))
        else:
            foreign[fact.node[:64]] = None
    return kept, list(foreign)


def _earlier_ends(journal: Journal, job_id: int, restart: int) -> tuple[str, ...]:
    """The job's earlier runs' ends as the journal has them, oldest first:
    ("gpu_unavailable on node2", ...)."""
    rows = sorted(
        (r for r in journal.decisions(job_id=job_id) if r.restart < restart and r.cause),
        key=lambda r: r.restart,
    )
    return tuple(f"{r.cause} on {','.join(r.blamed)}" if r.blamed else str(r.cause) for r in rows)


def _history(journal: Journal, job_id: int, restart: int) -> tuple[PastDecision, ...]:
    past = []
    for row in journal.decisions(job_id=job_id):
        if row.restart >= restart or not row.cause:
            continue
        cause = parse_cause(row.cause)
        past.append(
            PastDecision(
                row.restart,
                cause,
                cause_family(cause, info(cause).domain),
                row.action or "",
                row.decided_at or 0.0,
            )
        )
    return tuple(sorted(past, key=lambda p: p.restart))


def _may_exclude(attribution: Attribution) -> bool:
    """Whether the policies may exclude nodes: only then is the partition's node list read."""
    return bool(attribution.nodes) and info(attribution.cause).action is Action.REQUEUE_EXCLUDE


def _job_view(door: SlurmDoor, job: JobInfo, env: dict[str, str], *, needs_nodes: bool) -> JobView:
    """The job as the policies see it. The partition's usable nodes (a cluster-wide sinfo)
    are read only when `needs_nodes`: when nothing can be excluded the must-fit rule has no
    use for them."""
    usable: tuple[str, ...] = ()
    try:
        if needs_nodes:
            usable = tuple(
                n.name
                for n in door.nodes()
                if job.partition in n.partitions and n.responding and not n.drained
            )
    except SlurmError:
        usable = ()
    return JobView(
        job_id=job.job_id,
        user=job.user,
        partition=job.partition,
        # While a job is COMPLETING, slurmctld's node count drops as each node finishes its
        # Epilog; the node list keeps the whole allocation the restart must fit.
        num_nodes=max(job.num_nodes, len(job.nodes), 1),
        requeue=job.requeue,
        batch=job.batch,
        restart_count=job.restart_count,
        excluded_nodes=job.excluded_nodes,
        comment=job.comment,
        usable_partition_nodes=usable,
        opted_in=env.get("SLURM_TRIAGE_REQUEUE") == "1",
        required_nodes=job.required_nodes,
    )


def node_blame(attribution: Attribution) -> tuple[str, ...]:
    """The nodes this job end counts against in their history (lemon signals): only a
    node fault (hardware or infrastructure) that root-collected evidence backs; a user's
    bug on a node, or a user's claim, never counts against the node."""
    node_fault = attribution.domain in (Domain.HARDWARE, Domain.INFRASTRUCTURE)
    return attribution.nodes if node_fault and attribution.root_backed else ()


def _blamed_events(ending: Ending, attribution: Attribution, now: float) -> list[NodeEvent]:
    """This job end's `blamed` events, as recorded in the journal and judged for lemons."""
    multi = len(ending.nodes) > 1
    xids = {
        f.node: f.xid
        for f in attribution.evidence
        if isinstance(f, KernelEvent) and f.xid is not None
    }
    return [
        NodeEvent(n, ending.job_id, now, "blamed", attribution.cause.value, xids.get(n), multi)
        for n in node_blame(attribution)
    ]


def _node_events(
    ending: Ending, attribution: Attribution, decision: Decision, applied: actuator.Applied
) -> list[NodeEvent]:
    multi = len(ending.nodes) > 1
    now = time.time()
    events = _blamed_events(ending, attribution, now)
    events += [
        NodeEvent(n, ending.job_id, now, "excluded", None, None, multi)
        for n in applied.excluded or (decision.exclude if applied.dry_run else ())
    ]
    # A dry run records what it would have excluded and drained, as if acting.
    events += [
        NodeEvent(n, ending.job_id, now, "drained", attribution.cause.value, None, multi)
        for n in applied.drained or (decision.drain if applied.dry_run else ())
    ]
    return events


def _lemons(
    journal: Journal, config: Config, ending: Ending, attribution: Attribution
) -> dict[str, str]:
    now = time.time()
    since = now - config.policy.lemon_window_days * 86400
    current = _blamed_events(ending, attribution, now)
    signals = node_signals([*journal.node_events(since), *current], config.policy)
    return {n: "; ".join(s.reasons) for n, s in signals.items() if s.lemon and n in ending.nodes}


def decide(
    config: Config,
    ending: Ending,
    door: SlurmDoor,
    journal: Journal,
    env: dict[str, str],
    job: JobInfo | None = None,
) -> Outcome:
    """Decide one job end; `job` is the controller's view if the caller has just read it."""
    started = time.monotonic()
    job = job or door.job(ending.job_id)
    if job.expedited_requeue and job.state is JobState.COMPLETING:
        job = _settled(door, job, started + config.decision.deadline_s / 4)
    # An expedited requeue with no failed Epilog: Slurm requeued it held, for us to release
    # (requeue), leave (hold) or end (record only).
    held_by_slurm = job.expedited_requeue and (
        job.state is JobState.REQUEUE_HOLD or job.state_reason == SLURM_HELD_REQUEUE_REASON
    )
    if ending.exit_code is None:
        ending = replace(ending, exit_code=job.exit_code, exit_signal=job.exit_signal)
    # At EpilogSlurmctld time a job that just ended is COMPLETING (or already finished).
    # If Slurm requeued it before asking us (its Prolog turned it away, RequeueExit), it is
    # pending or running again, or accounting already says REQUEUED; Slurm then reports the
    # new restart count, so the journal key must use the run that ended, the one before.
    # An expedited requeue is decided after the hook that read the ended run's restart count
    # (detached): a higher count now means Slurm requeued that run, whatever the next run is
    # doing by now (it may even have finished).
    requeued_since = job.expedited_requeue and job.restart_count > ending.restart
    state_text = (
        "REQUEUED"
        if job.state in _RUNNING_AGAIN or requeued_since
        # Where the controller shows only COMPLETING (before 24.05), even a clean exit is
        # asked of accounting: when Slurm requeues a job itself (its Prolog failed) it still
        # shows 0:0 and no reason at this point.
        else final_state(door, job, min(5.0, config.decision.wait_for_nodes_s))
    )
    requeued_by_slurm = state_text == "REQUEUED"
    if requeued_by_slurm:
        # Its next start may already be set; the window of the run that ended will do. A
        # Prolog-failure requeue reports the next run's count already; an expedited one not.
        ending = replace(
            ending,
            restart=ending.restart if requeued_since else max(0, job.restart_count - 1),
            started_at=ending.ended_at - WINDOW_BEFORE_S,
        )
    elif job.start_time is not None and job.start_time <= ending.ended_at:
        ending = replace(ending, started_at=job.start_time - CLOCK_SLACK_S)
    log = get_logger(job_id=ending.job_id, restart=ending.restart)
    # Reading the user's evidence may take at most half of the decision's time.
    read_deadline = started + config.decision.deadline_s / 2
    owner = f"{socket.gethostname()}:{os.getpid()}"
    if not journal.claim(ending.job_id, ending.restart, owner):
        log.info("decision_already_taken")
        return Outcome(ending.job_id, decided=False)
    if state_text != "COMPLETED":
        missing = wait_for_root_records(config, ending)
        if missing:
            log.warning("decision_missing_node_evidence", nodes=list(missing))
    gathered = gather(config, ending, state_text, job, deadline=read_deadline)
    attribution = attribute(gathered.facts, window=job_window(ending.ended_at))
    if gathered.notes:
        log.warning("decision_evidence_limited", notes=list(gathered.notes))
        attribution = replace(attribution, reason="; ".join((attribution.reason, *gathered.notes)))
    lemons = _lemons(journal, config, ending, attribution) if node_blame(attribution) else {}
    given = PolicyInput(
        cause=attribution.cause,
        domain=attribution.domain,
        blamed=attribution.nodes,
        root_backed=attribution.root_backed,
        job=_job_view(door, job, env, needs_nodes=_may_exclude(attribution)),
        history=_history(journal, ending.job_id, ending.restart),
        now=time.time(),
        lemons=tuple(lemons),
        lemon_reasons=lemons,
    )
    decision = default_chain(config.policy)(given)
    reason = job_drain_reason(attribution.cause.value, ending.job_id, attribution.reason)
    applied = actuator.carry_out(
        door,
        ending.job_id,
        decision,
        cause=attribution.cause.value,
        blamed=attribution.nodes,
        restart=ending.restart,
        drain_reason=reason,
        dry_run=not config.policy.act,
        already_requeued=requeued_by_slurm,
        held_by_slurm=held_by_slurm,
        restarted_by_slurm=job.expedited_requeue and requeued_by_slurm and not held_by_slurm,
        earlier=_earlier_ends(journal, ending.job_id, ending.restart),
    )
    started_run = observe.run_start(env, job.start_time, ending.ended_at, requeued_by_slurm)
    observed = observe.journal_columns(
        config,
        ended_at=ending.ended_at,
        run_started_at=started_run,
        nodes=ending.nodes,
        decision=decision,
        applied=applied,
    )
    _record(journal, ending, job, state_text, attribution, decision, applied, observed)
    log.info(
        "decision_made",
        cpu_s=round(time.process_time(), 4),
        cause=attribution.cause.value,
        nodes=list(attribution.nodes),
        verdict=decision.verdict.value,
        exclude=list(decision.exclude),
        drain=list(applied.drained),
        reasons=list(decision.reasons),
        errors=list(applied.errors),
    )
    # Notifications and the controller's metrics textfile; never fails the decision.
    observe.after_decision(
        config,
        journal,
        job_id=ending.job_id,
        cause=attribution.cause.value,
        reason=reason,
        decision=decision,
        applied=applied,
    )
    return Outcome(ending.job_id, True, attribution, decision, applied)


def _record(
    journal: Journal,
    ending: Ending,
    job: JobInfo,
    state_text: str,
    attribution: Attribution,
    decision: Decision,
    applied: actuator.Applied,
    observed: dict[str, Any],
) -> None:
    evidence = [fact_to_dict(f) for f in attribution.evidence][:200]
    journal.record(
        ending.job_id,
        ending.restart,
        {
            "state": state_text,
            "exit_code": ending.exit_code,
            "exit_signal": ending.exit_signal,
            "user": job.user,
            "partition": job.partition,
            "num_nodes": job.num_nodes,
            "nodes": list(ending.nodes),
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
            "evidence": evidence,
            **observed,  # what the metrics read (observe.hooks.journal_columns)
        },
        _node_events(ending, attribution, decision, applied),
    )


def decide_from_env(
    config: Config, env: dict[str, str] | None = None, door: SlurmDoor | None = None
) -> Outcome | None:
    """Entry for EpilogSlurmctld / the first node's epilog: never raises our own errors.
    The failed run of an expedited-requeue job is decided in a detached process (detach.py),
    and this returns None at once."""
    env = dict(os.environ) if env is None else env
    log = get_logger(job_id=env.get("SLURM_JOB_ID"))
    try:
        ending = Ending.from_env(env, time.time())
        door = door or open_door(config.slurm)
        job = door.job(ending.job_id)  # read once: the decision starts from it
        if _expedited_failure(job, ending):
            _decide_detached(config, ending, door, env, job)
            return None
        return _decide_with_journal(config, ending, door, env, job)
    except (JournalError, SlurmError) as exc:
        log.error("decision_failed", error=str(exc))
    except (KeyError, ValueError, hostlist.HostlistError) as exc:
        log.error("decision_bad_environment", error=f"{type(exc).__name__}: {exc}")
    return None


def _decide_with_journal(
    config: Config, ending: Ending, door: SlurmDoor, env: dict[str, str], job: JobInfo
) -> Outcome:
    journal = Journal(config.decision.journal, config.decision.journal_busy_timeout_s)
    try:
        return decide(config, ending, door, journal, env, job)
    finally:
        journal.close()


def _expedited_failure(job: JobInfo, ending: Ending) -> bool:
    """A failed run of an `--requeue=expedite` job, still COMPLETING: Slurm restarts or
    holds it only once this hook has ended."""
    code = ending.exit_code if ending.exit_code is not None else job.exit_code
    return job.expedited_requeue and job.state is JobState.COMPLETING and code != 0


def _decide_detached(
    config: Config, ending: Ending, door: SlurmDoor, env: dict[str, str], job: JobInfo
) -> None:
    """Returns at once in the hook; the detached process decides, then ends right there
    (never returning into the hook's code)."""
    log = get_logger(job_id=ending.job_id)
    try:
        if detach():
            log.info("decision_detached", why="an expedited requeue waits for this hook")
            return
    except OSError as exc:  # cannot fork: decide here, as for any other job
        log.warning("decision_not_detached", error=str(exc))
        _decide_with_journal(config, ending, door, env, job)
        return
    status = 0
    try:
        _decide_with_journal(config, ending, door, env, job)
    except BaseException as exc:  # nobody is left to report to but the log
        log.error("decision_failed", error=f"{type(exc).__name__}: {exc}")
        status = 1
    finally:
        logging.shutdown()
        os._exit(status)
