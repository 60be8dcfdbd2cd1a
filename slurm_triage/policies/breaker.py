"""The circuit breaker of health drains, with Slurm as the shared state.

When a check already drained more than `breaker_max_share` of the cluster (and at least
`breaker_min_nodes`) within `breaker_window_s`, the check itself or the fabric is the likelier
fault, so we stop draining for it and say so. Before draining, a node writes
`triage-failing <check> <time>` into its Slurm node Comment and settles a few seconds
(prolog_epilog.node_action); nodes marked that way count as failing too, so a check failing
on every node at once drains nothing. The mark is the Comment's last three words: text an
admin keeps there stays before it, and clearing the mark leaves that text as it was. Pure:
the cluster's nodes and the time are given.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from slurm_triage.config import HealthConfig
from slurm_triage.frozen import replace
from slurm_triage.policies.reasons import DRAIN_PREFIX
from slurm_triage.slurm.model import NodeInfo

FAILING_MARK = "triage-failing"


def failing_mark(check: str, now: float) -> str:
    """What a node writes in its Slurm node Comment before draining for `check`."""
    return f"{FAILING_MARK} {check} {int(now)}"


def split_failing_mark(comment: str) -> tuple[str, str]:
    """A node Comment as (someone else's text, our failing mark): the mark is its last three
    words `triage-failing <check> <digits>`, or, as earlier builds wrote it, a Comment that
    starts with `triage-failing` is ours whole. Either part may be ''."""
    words = comment.split()
    if len(words) >= 3 and words[-3] == FAILING_MARK and words[-1].isdigit():
        return " ".join(words[:-3]), " ".join(words[-3:])
    if words[:1] == [FAILING_MARK]:
        return "", " ".join(words)
    return " ".join(words), ""


def has_failing_mark(comment: str) -> bool:
    """Whether a node Comment holds our failing mark (any check, any time)."""
    return bool(split_failing_mark(comment)[1])


def marked_failing(node: NodeInfo, check: str, now: float, window_s: float) -> bool:
    """Whether `node` marked itself failing `check` within the window."""
    words = split_failing_mark(node.comment)[1].split()
    if len(words) != 3 or words[1] != check:
        return False
    return words[2].isdigit() and now - int(words[2]) <= window_s


def breaker_reason(
    check: str, node: str, cluster: Sequence[NodeInfo], config: HealthConfig, now: float
) -> str:
    """A reason when draining `node` for `check` would exceed the breaker's limit, else ''.

    Counts the other nodes drained for the same check within the window, and those that
    marked the same failure in their node Comment (failing now, not yet drained)."""
    tag = f"{DRAIN_PREFIX}{check} "
    window = config.breaker_window_s
    same = [
        n.name
        for n in cluster
        if n.name != node
        and (
            (
                n.drained
                and n.reason.startswith(tag)
                and (n.reason_time is None or now - n.reason_time <= window)
            )
            or marked_failing(n, check, now, window)
        )
    ]
    limit = max(config.breaker_min_nodes, config.breaker_max_share * len(cluster))
    if len(same) + 1 > limit:
        return (
            f"{check} failing on {len(same) + 1} of {len(cluster)} nodes within "
            f"{window:g}s (limit {limit:g}): suspected check or fabric fault, not draining"
        )
    return ""


def shared_fault_reason(
    check: str,
    blamed: Collection[str],
    cluster: Sequence[NodeInfo],
    config: HealthConfig,
    now: float,
) -> str:
    """breaker_reason for one job end that blames `blamed` on a failed `check` (the post-job
    checks of their Epilogs): each of them counts as failing now, with the cluster's other
    nodes drained for or marked failing the same check. A shared filesystem hanging under a
    512-node job fails its mount check on all 512: the mount is at fault, not 512 nodes."""
    if not blamed or not cluster:
        return ""
    failing = failing_mark(check, now)
    marked = [replace(n, comment=failing) if n.name in blamed else n for n in cluster]
    return breaker_reason(check, next(iter(blamed)), marked, config, now)
