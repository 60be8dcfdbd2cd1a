"""Drain reasons: ours carry one prefix, and we touch no drain but our own.

mej/nhc's rule: every reason we write starts with `DRAIN_PREFIX`, and a node whose reason
lacks it was taken out by someone else (an admin, Slurm), so we never resume or relabel it.
That holds for every node out of service, drained, DOWN or FAIL alike: DOWN and FAIL carry
no DRAIN flag, yet Slurm accepts a drain on them (node_mgr.c _valid_node_state_change) and
it would replace an admin's reason (and clear FAIL). The exceptions are an empty reason and
the few that slurmctld or slurmstepd write themselves for a fault of the node
(`SLURM_FAULT_REASONS`): "Epilog error", which our node Epilog causes on purpose
(prolog_epilog.epilog.node_fault), a node that stopped answering or rebooted on its own, a
task it could not kill; a drain of ours relabels them with the real cause, so the node is
repaired and proven before it returns (Slurm's ReturnToService would return some unproven).
"""

from __future__ import annotations

from slurm_triage.slurm.model import NodeInfo
from slurm_triage.taxonomy import DRAIN_PREFIX  # defined there: the analytics read it too

# What slurmctld writes when a node's Epilog exits non-zero (22.05 through 25.11).
SLURM_EPILOG_DRAIN_REASON = "Epilog error"
# The reasons slurmctld and slurmstepd set themselves for a fault of the node, the same at
# slurm-22-05-8-1 and slurm-25-11-7-1: job_mgr.c ("Epilog error"), node_mgr.c
# validate_node_specs ("Prolog error", "Job env setup error": slurmd could not start a job)
# and _node_did_resp ("Node unexpectedly rebooted"), agent.c ("Prolog/Epilog failure"),
# ping_nodes.c ("Not responding"), proc_req.c ("batch job complete failure": slurmd failed a
# batch job). Left to a person, not taken over: the registration mismatches ("Low
# RealMemory ...", "Low CPUs", gres counts: slurm.conf and the hardware disagree),
# "Duplicate jobid" (bookkeeping), "reboot timed out" and "ResumeTimeout reached" (a reboot
# or power up someone else asked that never came back), "reboot requested", "Set in
# slurm.conf".
SLURM_FAULT_REASONS = frozenset(
    {
        SLURM_EPILOG_DRAIN_REASON,
        "Prolog error",
        "Job env setup error",
        "Prolog/Epilog failure",
        "Not responding",
        "Node unexpectedly rebooted",
        "batch job complete failure",
    }
)
# slurmstepd's drain of a task it could not kill (step_terminate_monitor.c): "Kill task
# failed" on 22.05, "Kill task failed (JobId=<id> <step>)" on 25.11.
SLURM_KILL_TASK_FAILED = "Kill task failed"


def is_ours(reason: str) -> bool:
    """Whether a node's drain reason is one we wrote."""
    return reason.startswith(DRAIN_PREFIX)


def check_drain_reason(check: str, why: str) -> str:
    """The reason a health check's failure drains a node with: `triage: gpu.lost GPU 3 ...`."""
    return f"{DRAIN_PREFIX}{check} {why}"


def job_drain_reason(cause: str, job_id: int, why: str) -> str:
    """The reason a job end's decision drains the blamed nodes with:
    `triage: gpu_memory job=123: <the attribution's reason>`."""
    return f"{DRAIN_PREFIX}{cause} job={job_id}: {why}"


def is_slurm_fault(reason: str) -> bool:
    """Whether a node's reason is one Slurm wrote itself for a fault of the node."""
    return reason in SLURM_FAULT_REASONS or (
        reason == SLURM_KILL_TASK_FAILED or reason.startswith(f"{SLURM_KILL_TASK_FAILED} (JobId=")
    )


def may_replace_drain(node: NodeInfo) -> bool:
    """Whether a drain of ours may be written on this node: one in service, or one out of
    service (drained, DOWN or FAIL) with no reason or Slurm's own for a fault of the node.
    A node taken out already, by us or an admin, is left as it is."""
    return not node.taken_out or not node.reason.strip() or is_slurm_fault(node.reason)
