"""The decision's I/O before judging: the facts of one job end (Slurm's, root's records, the
job's records, the tail of its output), and the context the policies need (the job as they
see it, its earlier decisions, the blamed nodes' recent history). Judging is pure
(decide.judge); nothing here decides.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from slurm_triage.attribution import Attribution, Window, decode_tail, job_window, logscan
from slurm_triage.attribution.engine import root_window
from slurm_triage.clock import Clock
from slurm_triage.config import Config
from slurm_triage.evidence import (
    CheckStatus,
    Fact,
    HealthCheck,
    ProcessExit,
    SlurmState,
    Source,
    store,
)
from slurm_triage.frozen import Frozen, field
from slurm_triage.journal import Journal, NodeEvent
from slurm_triage.logs import get_logger
from slurm_triage.policies import JobView, PastDecision
from slurm_triage.policies import family as cause_family
from slurm_triage.policies.breaker import shared_fault_reason
from slurm_triage.policies.lemons import FRESH_START, since_return
from slurm_triage.policies.rules import drains_blamed_nodes
from slurm_triage.prolog_epilog.ended_run import EndedRun
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.prolog_epilog.own_fault import checks_alone, own_fault
from slurm_triage.slurm import JobInfo, NodeInfo, SlurmDoor, SlurmError
from slurm_triage.taxonomy import Action, Domain, info, parse_cause

OUTPUT_TAIL_BYTES = 1 << 20


def wait_for_root_records(config: Config, end: JobEnd, clock: Clock) -> tuple[str, ...]:
    """Wait (bounded) until every node's epilog wrote its record; return the missing nodes."""
    deadline = clock.monotonic() + config.decision.wait_for_nodes_s
    missing = list(end.nodes)
    while missing:
        missing = [
            n
            for n in missing
            if not store.root_record_present(
                config.paths.evidence_dir, end.job_id, n, end.records_since
            )
        ]
        if not missing or clock.monotonic() >= deadline:
            break
        clock.sleep(0.1)
    return tuple(missing)


def output_facts(
    job: JobInfo,
    uid: int,
    deadline: float,
    clock: Clock,
    since: float | None = None,
    nodes: tuple[str, ...] | None = None,
) -> tuple[list[Fact], list[str]]:
    """Signatures in the tail of the batch script's output (jobs without the wrapper too):
    the job's own words, so USER facts. srun merges every task's output into this file, so a
    line of a multi-node job names its node only through srun's own lines (`srun: error:
    node2: task 1: ...`, `[rank1]:` mapped by them); the batch host is right only for a
    single-node job. The notes say what the scan's bound left unread (logscan.MAX_SCAN_NAMES
    host names named by the output's host lists). `since`: when the run that ended started;
    an earlier run's lines appended to the same file are not read (logscan.this_runs_lines).
    `nodes`: the run's (a het job's: every component's), when more than the job's own."""
    facts: list[Fact] = []
    notes: list[str] = []
    for path in dict.fromkeys(p for p in (job.std_out, job.std_err) if p.startswith("/")):
        try:
            left = min(store.OUTPUT_READ_TIMEOUT_S, deadline - clock.monotonic())
            data = store.read_user_tail(path, uid, OUTPUT_TAIL_BYTES, timeout_s=max(0.1, left))
        except store.UnsafeEvidence as exc:
            get_logger(job_id=job.job_id).info("job_output_unread", detail=str(exc))
            continue
        lines = decode_tail(data, whole_file=len(data) < OUTPUT_TAIL_BYTES)
        single = len(nodes if nodes is not None else job.nodes) <= 1
        node = job.batch_host or None if single else None
        # Python's logging, glog and slurmstepd's `CANCELLED AT` write naive local times:
        # read them in this process's zone (the controller's, the cluster's), as `classify`
        # does. Read as UTC, they moved by the zone's offset, out of the job's window.
        year = time.localtime(clock.time()).tm_year
        scan = logscan.scan_log(
            lines, node=node, source=Source.USER, year=year, tz=None, since=since
        )
        facts += scan.facts
        if scan.cut_short():
            notes.append(
                f"job output: {scan.lists_cut} host list(s) past {logscan.MAX_SCAN_NAMES} names "
                "not read"
            )
    return facts, notes


class Gathered(Frozen):
    """The facts of one job end, and what was left out of them (said in the decision).
    `reached`: those of `facts` from root's records of the run before its window, which a
    hang reached back to (gather_evidence): they count for the job's cause, not for draining
    a node the cause does not blame (own_faults judges each node on its window)."""

    facts: list[Fact]
    notes: tuple[str, ...] = ()
    reached: tuple[Fact, ...] = ()

    @property
    def windowed(self) -> list[Fact]:
        """`facts` less `reached`."""
        reached = {id(f) for f in self.reached}
        return [f for f in self.facts if id(f) not in reached]


def gather_evidence(config: Config, run: EndedRun, deadline: float, clock: Clock) -> Gathered:
    """All facts for this job end: Slurm's own, root's records, the job's records and the
    tail of its output file. Facts naming a node outside the job are dropped. The records'
    budget scales with the job's node count (store.RecordBudget.for_job). When they are
    over it (or `deadline`, a monotonic time, passes while reading them), none of them
    count, since those read are only the first names of an arbitrary cut; the output file,
    scanned first under its own bounds, still counts, and the notes say what was ignored."""
    end = run.end
    facts: list[Fact] = [
        SlurmState(
            time=end.ended_at, source=Source.ROOT, state=run.state.state, by_uid=run.state.by_uid
        ),
        ProcessExit(
            time=end.ended_at,
            source=Source.ROOT,
            exit_code=end.exit_code,
            signal=end.exit_signal or None,
        ),
    ]
    since = end.records_since
    roots = store.read_root_records(
        config.paths.evidence_dir, end.job_id, end.nodes, newer_than=since
    )
    # The output scan first: records that use up the deadline must not cost it its read.
    found, notes = output_facts(
        run.job, end.uid, deadline, clock, since=end.records_since, nodes=end.nodes
    )
    users = store.read_user_records(
        config.paths.evidence_dir,
        end.job_id,
        end.uid,
        nodes=end.nodes,
        newer_than=since,
        budget=store.RecordBudget.for_job(len(end.nodes), deadline=deadline),
    )
    kept_users = users.records
    if users.over_budget:
        kept_users = ()
        notes.append(
            f"user records ignored ({users.over_budget}): decided on root evidence and the "
            "job's output"
        )
    # Root's records hold what each node's Epilog found within the job's window by that
    # node's own clock (epilog.collect): a node whose clock runs minutes ahead of the
    # controller's still has its XID counted, as its Epilog counted it. Everything else is
    # held to the window by the controller's clock (rule 5), and the Epilogs' records of
    # the run before the window (epilog.earlier_record) to the span a watchdog's hung
    # collective reaches back to (root_window), within this run.
    window = job_window(end.ended_at)
    others: list[Fact] = [f for record in kept_users for f in record.facts] + found
    others = [f for f in others if f.time is None or window.contains(f.time)]
    reach = root_window(window, others)
    # The ended run's start: EpilogSlurmctld's (25.11), else the controller's, which is the
    # next run's once Slurm requeued the job itself (records_since is then the window's).
    run_start = end.start_time if end.start_time is not None else end.records_since
    reached: list[Fact] = []
    for record in roots.records:
        if record.step != store.EARLIER_STEP:
            facts += record.facts
        elif reach != window:
            reached += [f for f in record.facts if _reached(f, reach, run_start)]
    facts += others
    facts, foreign = on_job_nodes(facts, end.nodes)
    reached, _ = on_job_nodes(reached, end.nodes)
    if foreign:
        notes.append(f"facts naming nodes outside the job dropped: {', '.join(foreign[:5])}")
    return Gathered(facts + reached, tuple(notes), tuple(reached))


def _reached(fact: Fact, reach: Window, run_start: float | None) -> bool:
    return (
        fact.time is not None
        and reach.contains(fact.time)
        and (run_start is None or fact.time >= run_start)
    )


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


def node_blame(attribution: Attribution) -> tuple[str, ...]:
    """The nodes this job end counts against in their history (lemon signals): only a
    node fault (hardware or infrastructure) that root-collected evidence backs; a user's
    bug on a node, or a user's claim, never counts against the node."""
    node_fault = attribution.domain in (Domain.HARDWARE, Domain.INFRASTRUCTURE)
    return attribution.nodes if node_fault and attribution.root_backed else ()


class Context(Frozen):
    """What the policies read besides the attribution."""

    job: JobView
    history: tuple[PastDecision, ...]
    earlier: tuple[str, ...]  # earlier runs' ends: "gpu_unavailable on node2", oldest first
    # The journal's node events within the lemon window, each node's since it last came
    # back from repair; read only when this end blames nodes (only then can a lemon be found).
    node_events: tuple[NodeEvent, ...] = ()
    # The circuit breaker's reason when the blamed nodes' failed check is a shared fault
    # (policies.breaker.shared_fault_reason); "" when not.
    shared_fault: str = ""
    # Other nodes' own drain-cause faults (own_faults): node -> cause.
    own_faults: dict[str, str] = field(default_factory=dict)


def gather_context(
    config: Config,
    door: SlurmDoor,
    journal: Journal,
    run: EndedRun,
    attribution: Attribution,
    env: Mapping[str, str],
    now: float,
    facts: Sequence[Fact] = (),
) -> Context:
    """The job view (the partition's nodes read only when nodes may be excluded), the job's
    earlier decisions, the recent node events when nodes are blamed, and the faults that the
    job's other nodes' own root evidence shows (`facts`: this end's)."""
    end = run.end
    rows = sorted(
        (r for r in journal.decisions(job_id=end.job_id) if r.restart < end.restart and r.cause),
        key=lambda r: r.restart,
    )
    history = []
    for row in rows:
        cause = parse_cause(row.cause or "")
        family = cause_family(cause, info(cause).domain)
        history.append(
            PastDecision(row.restart, cause, family, row.action or "", row.decided_at or 0.0)
        )
    earlier = tuple(
        f"{r.cause} on {','.join(r.blamed)}" if r.blamed else str(r.cause) for r in rows
    )
    events: tuple[NodeEvent, ...] = ()
    if node_blame(attribution):
        since = now - config.policy.lemon_window_days * 86400
        # A node back from repair starts its history again, as reconcile reads it.
        returned = journal.last_applied(FRESH_START, since)
        events = tuple(since_return(journal.node_events(since), returned))
    may_exclude = bool(attribution.nodes) and (
        info(attribution.cause).action is Action.REQUEUE_EXCLUDE
    )
    checks = checks_alone(facts, attribution.cause, attribution.nodes)
    drains = drains_blamed_nodes(config.policy, attribution.cause, attribution.root_backed)
    # The cluster's nodes (a cluster-wide sinfo) only when nodes may be excluded (the
    # must-fit rule) or drained for a failed check (the circuit breaker).
    cluster = read_cluster(door) if may_exclude or (checks and drains) else ()
    view = job_view(run.job, env, cluster=cluster, allocation=run.end.nodes)
    shared = ""
    if checks and drains and cluster:
        blamed, health = attribution.nodes, config.health
        reasons = (shared_fault_reason(c, blamed, cluster, health, now) for c in checks)
        shared = next((why for why in reasons if why), "")
    own = {} if shared else own_faults(config, run, attribution, facts)
    return Context(view, tuple(history), earlier, events, shared, own)


def own_faults(
    config: Config, run: EndedRun, attribution: Attribution, facts: Sequence[Fact]
) -> dict[str, str]:
    """The job's nodes not blamed for its cause whose own root evidence would drain them,
    judged node by node as their Epilogs judge it (epilog.node_fault): a row remap failing
    on node2 while node1's XID 79 ended the job. Slurm drained them already when their
    Epilog failed (`Epilog error`); the decision drains them with their own reason."""
    if not run.end.failed:
        return {}
    suspects: dict[str, list[Fact]] = {}
    for f in facts:
        if f.source is Source.ROOT and f.node and f.node not in attribution.nodes:
            suspects.setdefault(f.node, []).append(f)
    found: dict[str, str] = {}
    for node, theirs in suspects.items():
        if all(isinstance(f, HealthCheck) and f.status is not CheckStatus.FAIL for f in theirs):
            continue  # passing checks only: nothing to judge (most nodes of a large job)
        # Windowed already, by the node's own Epilog (gather_evidence).
        if (cause := own_fault(config.policy, node, theirs)) is not None:
            found[node] = cause.value
    return found


def read_cluster(door: SlurmDoor) -> tuple[NodeInfo, ...] | None:
    """Every node (a cluster-wide sinfo); None when Slurm could not be asked."""
    try:
        return door.nodes()
    except SlurmError:
        return None


def job_view(
    job: JobInfo,
    env: Mapping[str, str],
    *,
    cluster: Sequence[NodeInfo] | None,
    allocation: tuple[str, ...] = (),
) -> JobView:
    """The job as the policies see it. `cluster`: the nodes read for it (read_cluster; ()
    when nothing can be excluded, so the must-fit rule has no use for them; None when
    Slurm could not be read). `allocation`: the run's nodes as EpilogSlurmctld was told
    them (SLURM_JOB_NODELIST), the whole allocation whatever slurmctld shows by then."""
    usable: tuple[str, ...] | None = None  # unknown, not empty: must_fit keeps the exclusion
    if cluster is not None:
        usable = tuple(
            n.name
            for n in cluster
            if job.partition in n.partitions and n.responding and not n.drained
        )
    return JobView(
        job_id=job.job_id,
        user=job.user,
        partition=job.partition,
        # While a job is COMPLETING, slurmctld's node count drops as each node finishes its
        # Epilog, and on a loaded 22.05 its node list did too (a 3-node job read as fitting
        # on 2 nodes); the environment's node list is the whole allocation.
        num_nodes=max(job.num_nodes, len(job.nodes), len(allocation), 1),
        requeue=job.requeue,
        batch=job.batch,
        restart_count=job.restart_count,
        excluded_nodes=job.excluded_nodes,
        comment=job.comment,
        usable_partition_nodes=usable,
        required_nodes=job.required_nodes,
    )
