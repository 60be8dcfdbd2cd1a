"""The modes: prolog (fast screen before a job), periodic (cron / HealthCheckProgram), CLI.

They differ only in what they select and what they do with a failure:
- prolog: fast set, stop at the first hard failure, drain, exit non-zero (Slurm requeues
  the job elsewhere); a low-severity failure drains after the jobs and lets this one run;
- periodic: every check; drain on failure, resume nodes we drained once everything passes.
Each run's report is written to `<state_dir>/health/<node>.last.json` and, when configured,
counted in the node's metrics (slurm_triage.observe).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_triage.actuator import carry_out_node, clear_failing_mark, mark_failing
from slurm_triage.config import Config
from slurm_triage.gpu_ids import JobScope, job_scope
from slurm_triage.health_checks import registry
from slurm_triage.health_checks.result import RunReport, Severity
from slurm_triage.health_checks.runner import Run, node_name
from slurm_triage.logs import get_logger
from slurm_triage.observe import hooks as observe
from slurm_triage.policies.breaker import has_failing_mark
from slurm_triage.policies.nodes import NodeDecision, NodeOutcome, decide_node
from slurm_triage.slurm import SlurmDoor, SlurmError, open_door


@dataclass(frozen=True)
class ServiceResult:
    report: RunReport
    decision: NodeDecision

    @property
    def hard_failure(self) -> bool:
        return any(r.severity is Severity.HIGH for r in self.report.failures)


def run_checks(
    config: Config,
    *,
    mode: str,
    only: list[str] | None = None,
    everything: bool = False,
    node: str | None = None,
    job: JobScope | None = None,
    save_state: bool = True,
) -> RunReport:
    specs = registry.select(only, everything)
    prolog = mode == "prolog"
    return Run(
        config,
        specs,
        mode=mode,
        node=node_name(node),
        stop_on_hard_failure=prolog,
        deadline_s=config.health.prolog_deadline_s if prolog else None,
        job=job,
        save_state=save_state,
    ).execute()


def act(
    config: Config,
    report: RunReport,
    *,
    may_resume: bool,
    dry_run: bool,
    door: SlurmDoor | None = None,
) -> NodeDecision:
    """Decide and carry out drain/resume for this node; Slurm trouble is an outcome.

    Before a drain the node marks its failure in its Slurm node Comment and waits
    `breaker_settle_s`, so nodes failing the same check together see each other and the
    circuit breaker can hold all of them back, not only the ones after the first few. A dry
    run (`--dry-run`, `policy.act = false`, or the deprecated `health.drain = false`)
    decides, marks nothing and changes nothing."""
    log = get_logger(node=report.node)
    dry = dry_run or not config.policy.act or not config.health.drain
    try:
        door = door or open_door(config.slurm)
        cluster = door.nodes() if report.failures else ()
        node = next((n for n in cluster if n.name == report.node), None) or door.node(report.node)
        decision = decide_node(
            report, node, cluster, config.health, may_resume=may_resume, now=time.time()
        )
        if decision.outcome is NodeOutcome.BREAKER_OPEN and not dry and decision.check:
            # Failing too: say so, so the nodes still settling count this one as well.
            mark_failing(door, report.node, decision.check, time.time())
        elif decision.outcome is NodeOutcome.DRAIN and not dry and decision.check:
            decision = _settle_then_decide(config, report, door, decision.check, may_resume)
        elif not report.failures and has_failing_mark(node.comment) and not dry:
            clear_failing_mark(door, report.node)
    except SlurmError as exc:
        log.error("health_slurm_unreachable", error=str(exc))
        return NodeDecision(NodeOutcome.SLURM_ERROR, report.node, detail=str(exc))
    done = carry_out_node(decision, door, dry_run=dry)
    observe.after_health_action(config, report, done, dry_run=dry_run)  # metrics, webhook
    return done


def _settle_then_decide(
    config: Config, report: RunReport, door: SlurmDoor, check: str, may_resume: bool
) -> NodeDecision:
    mark_failing(door, report.node, check, time.time())
    time.sleep(config.health.breaker_settle_s)
    cluster = door.nodes()
    node = next(n for n in cluster if n.name == report.node)
    return decide_node(report, node, cluster, config.health, may_resume=may_resume, now=time.time())


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def record(config: Config, report: RunReport) -> None:
    """Keep the last report per node, and count it in the node's metrics when configured."""
    log = get_logger(node=report.node)
    try:
        path = Path(config.paths.state_dir) / "health" / f"{report.node}.last.json"
        write_atomically(path, json.dumps(report.to_dict()))
    except OSError as exc:
        log.warning("health_report_unwritten", error=str(exc))
    observe.after_health_report(config, report)


def _log_report(report: RunReport) -> None:
    log = get_logger(node=report.node, mode=report.mode)
    for r in report.results:
        if r.status.value in ("FAIL", "UNKNOWN", "WARN"):
            log.warning(
                "health_check_" + r.status.value.lower(),
                check=r.check,
                reason=r.reason,
                severity=r.severity.value,
                action=r.action.value,
            )
    log.info(
        "health_run_done",
        checks=len(report.results),
        failures=len(report.failures),
        seconds=round(report.seconds, 3),
        stopped_early=report.stopped_early,
    )


def prolog(config: Config) -> int:
    """Prolog= : the fast screen. Non-zero only for a hard failure on this node."""
    _prepare_job_dir(config)
    # The job's GPUs (SLURM_JOB_GPUS): on a shared node the others are other jobs'.
    report = run_checks(config, mode="prolog", job=job_scope(os.environ))
    _log_report(report)
    record(config, report)
    if not report.failures:
        return 0
    decision = act(config, report, may_resume=False, dry_run=False)
    hard = any(r.severity is Severity.HIGH for r in report.failures)
    if hard:
        _record_for_decision(config, report)
    if decision.outcome is NodeOutcome.BREAKER_OPEN:
        return 0  # a suspected broken check must not turn away every job on the cluster
    return 1 if hard else 0


def _prepare_job_dir(config: Config) -> None:
    """Before the job starts, make `<evidence_dir>/<job>` a directory of the job's user,
    moving aside whatever another user planted there to deny the job its evidence
    (safe_files.prepare_job_dir). Bounded by `health.mount_timeout_s` (the evidence
    directory is a shared mount); never fails the prolog."""
    import os

    from slurm_triage.deadline import call_with_deadline
    from slurm_triage.prolog_epilog.safe_files import prepare_job_dir

    job, uid, gid = (os.environ.get(f"SLURM_JOB_{v}", "") for v in ("ID", "UID", "GID"))
    if not (job.isdigit() and uid.isdigit()):
        return
    try:
        call_with_deadline(
            lambda: prepare_job_dir(
                config.paths.evidence_dir, int(job), int(uid), int(gid) if gid.isdigit() else -1
            ),
            config.health.mount_timeout_s,
            name="prepare-job-dir",
        )
    except Exception as exc:  # the wrapper still creates the directory itself when absent
        get_logger(job_id=int(job)).warning("prolog_job_dir_unprepared", error=str(exc))


def _record_for_decision(config: Config, report: RunReport) -> None:
    """A job turned away by the prolog is requeued by Slurm itself; the decision learns why
    from this root record (`<evidence_dir>/_root/<job>/<node>.prolog.json`)."""
    import os

    from slurm_triage.evidence import EvidenceRecord, Source, record_to_json
    from slurm_triage.prolog_epilog.epilog import health_fact
    from slurm_triage.prolog_epilog.safe_files import write_root_record

    job = os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        return
    facts = tuple(health_fact(r, report.node, report.started) for r in report.failures)
    record = EvidenceRecord(
        job_id=job, node=report.node, step="prolog", collected_by=Source.ROOT, facts=facts
    )
    try:
        write_root_record(
            config.paths.evidence_dir,
            int(job),
            report.node,
            record_to_json(record),
            suffix=".prolog.json",
        )
    except Exception as exc:  # evidence is a bonus here; the drain already happened
        get_logger(node=report.node).warning("prolog_evidence_unwritten", error=str(exc))


def periodic(
    config: Config, *, only: list[str] | None = None, dry_run: bool = False, node: str | None = None
) -> ServiceResult:
    """The full screen (cron, HealthCheckProgram, `slurm-triage check --all`)."""
    report = run_checks(config, mode="cron", only=only, everything=True, node=node)
    _log_report(report)
    record(config, report)
    decision = act(config, report, may_resume=not only, dry_run=dry_run)
    return ServiceResult(report, decision)
