"""The RMA evidence bundle (issue 16): one JSON file a person attaches to the vendor ticket.

Written by `nodes reconcile` when it sends a node to RMA, to
`<evidence_dir>/_root/rma/<node>-<UTC time>.json` (root's area: no user can plant or replace
it), and printed by `slurm-triage nodes NODE --bundle`. It holds what the controller knows:
the node as Slurm shows it, the GPUs (index, PCI bus id, UUID, serial) from the node's last
burn-in record, the job ends that blamed it with their XIDs and failed checks (the decision's
evidence, with times), and the repair history (every lifecycle step).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from slurm_triage.config import Config
from slurm_triage.journal import Journal
from slurm_triage.policies.lifecycle import LifecycleDecision
from slurm_triage.slurm import SlurmDoor, SlurmError

BUNDLE_VERSION = 1
BURN_IN_SUFFIX = ".burn-in.json"
_FACT_KINDS = ("kernel_event", "nvml", "health_check")


def build_bundle(
    config: Config, journal: Journal, door: SlurmDoor, node: str, why: str, now: float
) -> dict[str, Any]:
    """The bundle's content (reads Slurm, the journal and root's burn-in records)."""
    try:
        info: dict[str, Any] = _node_dict(door, node)
    except SlurmError as exc:
        info = {"name": node, "error": str(exc)[:300]}
    steps = journal.lifecycle_events(node=node)
    decisions = journal.decisions(node=node, limit=200)
    burn_in_jobs = [s.job_id for s in steps if s.job_id is not None]
    return {
        "bundle_version": BUNDLE_VERSION,
        "node": node,
        "written_at": now,
        "why": why,
        "slurm": info,
        "gpus": _gpus(config, node, burn_in_jobs),
        "jobs_affected": [
            {
                "job_id": d.job_id,
                "restart": d.restart,
                "decided_at": d.decided_at,
                "cause": d.cause,
                "action": d.action,
                "blamed": list(d.blamed),
                "evidence": _evidence_on(d.evidence, node),
            }
            for d in decisions
            if node in d.blamed
        ],
        "burn_in_evidence": _burn_in_facts(config, node, burn_in_jobs),
        "repair_history": [s.to_dict() for s in steps],
    }


def write_bundle(
    config: Config, journal: Journal, door: SlurmDoor, decision: LifecycleDecision, now: float
) -> tuple[str, str]:
    """Write the bundle; (its path, "") or ("", why it could not be written)."""
    from slurm_triage.evidence.store.root_records import write_root_file
    from slurm_triage.evidence.store.safe_io import UnsafeEvidence

    bundle = build_bundle(config, journal, door, decision.node, decision.reason, now)
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")
    data = json.dumps(bundle, indent=1, sort_keys=True).encode()
    try:
        path = write_root_file(
            config.paths.evidence_dir, "rma", f"{decision.node}-{stamp}.json", data
        )
    except (OSError, UnsafeEvidence, ValueError) as exc:
        return "", f"rma bundle not written: {exc}"
    return path, ""


def _node_dict(door: SlurmDoor, node: str) -> dict[str, Any]:
    n = door.node(node)
    return {
        "name": n.name,
        "state": n.label,
        "reason": n.reason,
        "reason_user": n.reason_user,
        "reason_time": n.reason_time,
        "partitions": list(n.partitions),
        "features": list(n.features),
        "boot_time": n.boot_time,
    }


def _evidence_on(evidence: Any, node: str) -> list[Any]:
    """The decision's facts on this node that a vendor asks for: kernel events (XIDs, with
    their lines and times), NVML conditions, failed checks."""
    facts = evidence.get("facts", []) if isinstance(evidence, dict) else []
    return [
        f
        for f in facts
        if isinstance(f, dict) and f.get("node") == node and f.get("kind") in _FACT_KINDS
    ][:100]


def _burn_in_facts(config: Config, node: str, jobs: list[int]) -> list[Any]:
    """What root recorded on the node for its burn-in jobs: the failed checks and kernel
    events, with their times and PCI ids. A burn-in on a broken node usually fails in the
    Prolog's screen, before the burn-in command runs, so this is often the only record."""
    from slurm_triage.evidence.store.root_records import read_root_file

    found: list[Any] = []
    for job_id in sorted(set(jobs)):
        for suffix in (".prolog.json", ".json"):
            data = read_root_file(config.paths.evidence_dir, str(job_id), f"{node}{suffix}")
            try:
                record = json.loads(data) if data is not None else None
            except ValueError:
                continue
            facts = record.get("facts") if isinstance(record, dict) else None
            if isinstance(facts, list):
                found.extend(
                    {"job_id": job_id, **f}
                    for f in facts
                    if isinstance(f, dict)
                    and f.get("node") == node
                    and f.get("kind") in _FACT_KINDS
                    and f.get("status", "FAIL") != "OK"
                )
    return found[:200]


def _gpus(config: Config, node: str, jobs: list[int]) -> list[Any]:
    """The GPUs of the node's newest burn-in record that has them (root's, size-capped)."""
    from slurm_triage.evidence.store.root_records import read_root_file

    for job_id in reversed(jobs):
        data = read_root_file(config.paths.evidence_dir, str(job_id), f"{node}{BURN_IN_SUFFIX}")
        if data is None:
            continue
        try:
            record = json.loads(data)
        except ValueError:
            continue
        gpus = record.get("gpus") if isinstance(record, dict) else None
        if isinstance(gpus, list) and gpus:
            return gpus[:64]
    return []
