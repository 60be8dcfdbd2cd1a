"""A person's own changes to Slurm: `slurm-triage slurm ACTION` and the dev cluster's reset.

They decide nothing (the person did), but they change Slurm state, and every change goes
through the actuator: one place to read, log and test what slurm-triage may do to a
cluster. Slurm's refusals are the door's SlurmErrors, left to the caller (exit 3).
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_triage.slurm.door import SlurmDoor


def requeue(door: SlurmDoor, job_id: int, *, hold: bool) -> None:
    door.requeue(job_id, hold=hold)


def exclude(door: SlurmDoor, job_id: int, nodes: Sequence[str], *, merge: bool) -> tuple[str, ...]:
    """The job's excluded nodes afterwards (merged with its own unless `merge` is false)."""
    return door.set_excluded_nodes(job_id, nodes, merge=merge)


def set_admin_comment(door: SlurmDoor, job_id: int, text: str) -> None:
    door.set_admin_comment(job_id, text)


def drain(door: SlurmDoor, node: str, reason: str) -> None:
    door.drain(node, reason)


def resume(door: SlurmDoor, node: str) -> None:
    door.resume(node)


def reset_node(door: SlurmDoor, node: str) -> None:
    """The dev cluster's demo starts again: resume the node if drained, clear its Comment."""
    if door.node(node).drained:
        door.resume(node)
    door.set_node_comment(node, "")
