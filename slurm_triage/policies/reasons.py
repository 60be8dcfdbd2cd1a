"""Drain reasons: ours carry one prefix, and we touch no drain but our own.

mej/nhc's rule: every reason we write starts with `DRAIN_PREFIX`, and a node whose reason
lacks it was drained by someone else (an admin, Slurm), so we never resume or relabel it.
The one exception is Slurm's own "Epilog error", which our node Epilog causes on purpose
(prolog_epilog.epilog.node_fault): the decision relabels it with the real cause.
"""

from __future__ import annotations

from slurm_triage.taxonomy import DRAIN_PREFIX  # defined there: the analytics read it too

# What slurmctld writes when a node's Epilog exits non-zero (22.05 through 25.11).
SLURM_EPILOG_DRAIN_REASON = "Epilog error"


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


def may_replace_drain(drained: bool, reason: str) -> bool:
    """Whether a job end's drain may be written on a node in this state: an undrained node,
    or one Slurm drained because our Epilog failed on purpose. A node drained already (by us
    or an admin) is left as it is."""
    return not drained or reason == SLURM_EPILOG_DRAIN_REASON
