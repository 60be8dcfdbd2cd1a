"""Prolog= on every node, before each job (root): the fast health screen.

It prepares the job's evidence directory, runs the Prolog's fast set of checks (stopping at
the first hard failure, within `health.prolog_deadline_s`), keeps the report, and on a
failure acts on the node (node_action: drain, circuit breaker). It exits non-zero only for a
hard failure on this node, so Slurm requeues the job elsewhere; a low-severity failure
drains the node after its jobs and lets this one run. A job turned away leaves a root
record saying why, for the decision.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slurm_triage.config import Config
from slurm_triage.deadline import call_with_deadline
from slurm_triage.evidence.store.job_dir import prepare_job_dir
from slurm_triage.gpu_ids import job_scope
from slurm_triage.health_checks.reports import log_report
from slurm_triage.health_checks.result import RunReport, Severity
from slurm_triage.health_checks.runner import run_checks
from slurm_triage.logs import get_logger
from slurm_triage.prolog_epilog.healthcheck import record
from slurm_triage.prolog_epilog.job_end import slurm_env

if TYPE_CHECKING:
    from slurm_triage.evidence import KernelEvent
    from slurm_triage.health_checks.fact_cache import FactCache

# A node that passes (nearly every job start) needs none of what acts on a failure: the
# door to Slurm, the policies and the root record's writer are imported when one is found.


def prolog(
    config: Config,
    env: Mapping[str, str] | None = None,
    *,
    nvml: Any = None,
    nvml_xids: Callable[[], Sequence[KernelEvent]] | None = None,
    kept: FactCache | None = None,
) -> int:
    """Prolog= : the fast screen. Non-zero only for a hard failure on this node.

    `env` is the Prolog's environment (this process's by default; the node agent passes
    the one its client sent), `nvml`, `nvml_xids` and `kept` the agent's NVML held open,
    its event watcher's XIDs and the facts it keeps fresh
    (health_checks.runner.FactSources)."""
    env = os.environ if env is None else env
    _prepare_job_dir(config, env)
    # The job's GPUs (SLURM_JOB_GPUS): on a shared node the others are other jobs'.
    report = run_checks(
        config,
        mode="prolog",
        node=slurm_env(env, "node") or None,
        job=job_scope(env),
        nvml=nvml,
        nvml_xids=nvml_xids,
        kept=kept,
    )
    log_report(report)
    record(config, report)
    if not report.failures:
        return 0
    return _on_failure(config, report, env)


def _on_failure(config: Config, report: RunReport, env: Mapping[str, str]) -> int:
    """Drain or not (node_action, the circuit breaker); turn the job away on a hard failure."""
    from slurm_triage.policies.nodes import NodeOutcome
    from slurm_triage.prolog_epilog.node_action import act

    decision = act(config, report, may_resume=False, dry_run=False)
    hard = any(r.severity is Severity.HIGH for r in report.failures)
    if hard:
        _record_for_decision(config, report, env)
    if decision.outcome is NodeOutcome.BREAKER_OPEN:
        return 0  # a suspected broken check must not turn away every job on the cluster
    return 1 if hard else 0


def _prepare_job_dir(config: Config, env: Mapping[str, str]) -> None:
    """Before the job starts, make `<evidence_dir>/<job>` a directory of the job's user,
    moving aside whatever another user planted there to deny the job its evidence
    (store.prepare_job_dir). Bounded by `health.mount_timeout_s` (the evidence
    directory is a shared mount); never fails the prolog."""
    job, uid, gid = (slurm_env(env, name) for name in ("job_id", "uid", "gid"))
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


def _record_for_decision(config: Config, report: RunReport, env: Mapping[str, str]) -> None:
    """A job turned away by the prolog is requeued by Slurm itself; the decision learns why
    from this root record (`<evidence_dir>/_root/<job>/<node>.prolog.json`)."""
    from slurm_triage.evidence import EvidenceRecord, Source, record_to_json
    from slurm_triage.evidence.store import write_root_record
    from slurm_triage.health_checks.registry import health_fact

    # A het job component's under its leader's id, which the het job's one decision reads.
    job = slurm_env(env, "het_job_id") or slurm_env(env, "job_id")
    if not job.isdigit():
        return
    facts = tuple(health_fact(r, report.node, report.started) for r in report.failures)
    turned_away = EvidenceRecord(
        job_id=job, node=report.node, step="prolog", collected_by=Source.ROOT, facts=facts
    )
    try:
        write_root_record(
            config.paths.evidence_dir,
            int(job),
            report.node,
            record_to_json(turned_away),
            suffix=".prolog.json",
        )
    except Exception as exc:  # evidence is a bonus here; the drain already happened
        get_logger(node=report.node).warning("prolog_evidence_unwritten", error=str(exc))
