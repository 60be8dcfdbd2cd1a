"""A job end's Decision carried out through the Slurm door (dry-run capable).

Order is Slurm's: requeue first (before it, updates fail with "Job has already finished"),
then the exclusions and the begin time on the now-pending job, then drains, then the
AdminComment summary. Each step's failure is recorded and the next steps still run, whatever
it is (a SlurmError, or an OSError such as E2BIG from an absurd argument list): the decision
is always journalled, so budgets keep counting. A drain never overrides a node someone else
took out (drained, DOWN or FAIL with an admin's reason); one with no reason, or with a reason
Slurm writes itself for a node fault ("Epilog error", which our Epilog causes on purpose:
epilog.node_fault; "Not responding", "Kill task failed" ...), is relabelled with ours
(policies.reasons.may_replace_drain), so it is repaired and proven before it returns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import field

from slurm_triage.frozen import Frozen
from slurm_triage.logs import get_logger
from slurm_triage.policies.drain_words import read_reason
from slurm_triage.policies.model import Decision, Verdict
from slurm_triage.policies.reasons import is_ours, may_replace_drain
from slurm_triage.slurm import InvalidJobState, JobState, SlurmDoor, SlurmError


class Applied(Frozen):
    """What actually happened in Slurm."""

    requeued: bool = False
    held: bool = False
    excluded: tuple[str, ...] = ()
    drained: tuple[str, ...] = ()
    skipped_drains: tuple[str, ...] = ()
    errors: tuple[str, ...] = field(default=())
    dry_run: bool = False
    # When the job became pending again by our hand (requeue, or release of Slurm's held
    # requeue): the end of the requeue latency in the metrics. None when we did not.
    requeued_at: float | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, object]:
        return {
            "requeued": self.requeued,
            "held": self.held,
            "excluded": list(self.excluded),
            "drained": list(self.drained),
            "skipped_drains": list(self.skipped_drains),
            "errors": list(self.errors),
            "dry_run": self.dry_run,
        }


def admin_comment(cause: str, nodes: tuple[str, ...], decision: Decision, attempt: int) -> str:
    """The compact summary kept in Slurm's accounting with the job (cause first: analytics
    reads it by that prefix). A job held because a node it requires (-w) failed says so in
    words too, for whoever releases it: `scontrol show job` is where they will look."""
    summary: dict[str, object] = {
        "cause": cause,
        "nodes": list(nodes),
        "action": decision.verdict.value,
        "n": attempt,
    }
    if decision.exclude:
        summary["excluded"] = list(decision.exclude)
    if decision.required_failed:
        required = ",".join(decision.required_failed)
        summary["required"] = list(decision.required_failed)
        summary["why"] = (
            f"required node {required} failed ({cause}); held, not excluded: change "
            "--nodelist or release once the node is back"
        )
    return json.dumps({"triage": summary}, separators=(",", ":"))


def accounted_comment(
    cause: str, nodes: tuple[str, ...], decision: Decision, attempt: int, earlier: tuple[str, ...]
) -> str:
    """The summary for a job that has ended (slurmctld refuses updates then), written to
    accounting with sacctmgr, which lowercases the value and turns quotes into backticks:
    so `key=value` words with no quotes, readable in `sacct -o AdminComment`. A clean end
    after requeues tells the story: `triage: completed after 1 requeue; earlier:
    gpu_unavailable on node2`."""
    if cause == "completed":
        requeues = attempt - 1
        runs = "requeue" if requeues == 1 else "requeues"
        return f"triage: completed after {requeues} {runs}; earlier: {'; '.join(earlier)}"
    words = [f"triage: cause={cause}", f"action={decision.verdict.value}"]
    if nodes:
        words.append(f"nodes={','.join(nodes)}")
    words.append(f"n={attempt}")
    if decision.required_failed:
        words.append(f"required={','.join(decision.required_failed)}")
    return " ".join(words)


def carry_out(
    door: SlurmDoor,
    job_id: int,
    decision: Decision,
    *,
    cause: str,
    blamed: tuple[str, ...],
    restart: int,
    drain_reason: str,
    dry_run: bool,
    already_requeued: bool = False,
    held_by_slurm: bool = False,
    restarted_by_slurm: bool = False,
    earlier: tuple[str, ...] = (),
    lemon_drain_reasons: Mapping[str, str] | None = None,
    own_drain_reasons: Mapping[str, str] | None = None,
) -> Applied:
    """Act on the decision; `already_requeued` when Slurm requeued the job itself (its
    Prolog failed, or an expedited requeue), so only the exclusions, drains and summary
    remain to do. `held_by_slurm`: Slurm requeued it held (an expedited requeue with no
    failed Epilog): a requeue releases it, a hold leaves it, anything else cancels it, since
    a job we would not requeue must not sit in the queue for ever. `restarted_by_slurm`: Slurm
    restarted it at once (an expedited requeue after our Epilog failed): it may be running
    again already, so no exclusion or begin time is set; the nodes Slurm drained keep it
    away. `earlier`: the job's earlier runs' ends ("gpu_unavailable on node2"), for the
    AdminComment of a clean end after requeues. `lemon_drain_reasons`: the lemon nodes
    among the drains, each with its own reason; a lemon drained already for an earlier
    fault of ours is relabelled, so a passing health check cannot resume it.
    `own_drain_reasons`: the drains for a node's own fault, not the job's cause, each with
    its reason (Slurm's `Epilog error` drain of such a node is relabelled with it)."""
    log = get_logger(job_id=job_id)
    if dry_run:
        log.info(
            "decision_dry_run",
            verdict=decision.verdict.value,
            exclude=list(decision.exclude),
            drain=list(decision.drain),
        )
        return Applied(dry_run=True)
    errors: list[str] = []
    requeued = held = False
    requeued_at: float | None = None
    excluded: tuple[str, ...] = ()
    if decision.verdict in (Verdict.REQUEUE, Verdict.HOLD):
        hold = decision.verdict is Verdict.HOLD
        if not already_requeued:
            requeued = _step(errors, "requeue", lambda: door.requeue(job_id, hold=hold))
            held = hold and requeued
            requeued_at = time.time() if requeued and not hold else None
        else:
            requeued = True
            held = hold and not held_by_slurm and _step(errors, "hold", lambda: _hold(door, job_id))
        if requeued and decision.exclude and not restarted_by_slurm:
            result: list[tuple[str, ...]] = []
            if _step(
                errors,
                "exclude",
                lambda: result.append(door.set_excluded_nodes(job_id, decision.exclude)),
            ):
                excluded = result[0]
        if requeued and decision.begin_delay_s > 0 and not restarted_by_slurm:
            _step(errors, "begin_time", lambda: door.set_begin_time(job_id, decision.begin_delay_s))
        released = held_by_slurm and decision.verdict is Verdict.REQUEUE
        if released and _step(errors, "release", lambda: door.release(job_id)):
            requeued_at = time.time()
        held = held or (held_by_slurm and decision.verdict is Verdict.HOLD)
    elif held_by_slurm:
        _step(errors, "cancel", lambda: door.cancel(job_id))
    reasons = {**(own_drain_reasons or {}), **(lemon_drain_reasons or {})}
    lemons = frozenset(lemon_drain_reasons or ())
    drained, skipped = _drain(door, decision.drain, drain_reason, reasons, lemons, errors)
    # Clean ends are the large majority and need no note, unless this run came after
    # requeues: the AdminComment then still shows the last failure's, so it tells the story.
    if cause != "completed" or earlier:
        # The attempt the decision is about, numbered as the analytics number a job's rows
        # (restart count + 1), whichever row the comment lands on: the next one after a
        # requeue (ours or Slurm's), its own otherwise.
        attempt = restart + 1
        summary = admin_comment(cause, blamed, decision, attempt)
        ended = accounted_comment(cause, blamed, decision, attempt, earlier)
        shown = summary if cause != "completed" else ended
        _comment(door, job_id, shown, ended, requeued, held, errors)
    for error in errors:
        log.error("decision_step_failed", error=error)
    return Applied(
        requeued and not held,
        held,
        excluded,
        drained,
        skipped,
        tuple(errors),
        requeued_at=requeued_at,
    )


def _hold(door: SlurmDoor, job_id: int) -> None:
    """Hold a job Slurm requeued itself: pending (waiting for a required node, say), it is
    held; started again already (an expedited restart), it is requeued held, since a job we
    hold (its budget spent, its required node failed) must not run on."""
    job = door.job(job_id)
    if job.state in (JobState.RUNNING, JobState.CONFIGURING):
        door.requeue(job_id, hold=True)
    elif not job.state.finished:
        door.hold(job_id)


def _comment(
    door: SlurmDoor,
    job_id: int,
    summary: str,
    ended: str,
    requeued: bool,
    held: bool,
    errors: list[str],
) -> None:
    """The summary in AdminComment. slurmctld refuses it once a job has ended (COMPLETING
    included): then the ended form goes to the run's record in accounting. A held job has no
    eligible time, so slurmctld does not send its record (nor the comment) to accounting
    until it is released (seen on 22.05: sacct shows the REQUEUED record without it): the
    ended form goes there too, so `sacct -o AdminComment` tells why it waits. A requeued job
    is the same until it starts again (its REQUEUED record is written before our comment, its
    next one only once it is eligible, so one cancelled while it waits is never written
    again: seen on 22.05), so the failed run's record gets the ended form as well."""
    try:
        door.set_admin_comment(job_id, summary)
        if held or requeued:
            door.set_accounted_admin_comment(job_id, ended)
    except InvalidJobState:
        if requeued:
            errors.append("admin_comment: job already finished")
            return
        try:
            door.set_accounted_admin_comment(job_id, ended)
        except Exception as exc:
            errors.append(f"admin_comment: {_describe(exc)}")
    except Exception as exc:
        errors.append(f"admin_comment: {_describe(exc)}")


def _drain(
    door: SlurmDoor,
    nodes: tuple[str, ...],
    reason: str,
    node_reasons: Mapping[str, str],
    lemons: frozenset[str],
    errors: list[str],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    drained, skipped = [], []
    for node in nodes:
        try:
            current = door.node(node)
            # Out of service (drained, DOWN or FAIL) by us or an admin: leave it as it is.
            if not may_replace_drain(current) and not (
                node in lemons and _relabel_as_lemon(current.reason)
            ):
                skipped.append(node)
                continue
            door.drain(node, node_reasons.get(node, reason))
            drained.append(node)
        except Exception as exc:
            errors.append(f"drain {node}: {_describe(exc)}")
    return tuple(drained), tuple(skipped)


def _relabel_as_lemon(reason: str) -> bool:
    """A node drained already by our own check or decision becomes a lemon drain; one in
    repair, burn-in or RMA keeps its reason, and an admin's drain is never touched."""
    return is_ours(reason) and not read_reason(reason).keeps_node_out


def _step(errors: list[str], what: str, action: object) -> bool:
    try:
        action()  # type: ignore[operator]
        return True
    except Exception as exc:
        errors.append(f"{what}: {_describe(exc)}")
        return False


def _describe(exc: Exception) -> str:
    """A SlurmError's own one line; anything else with its type, on one line."""
    text = str(exc) if isinstance(exc, SlurmError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:300]
