"""How accounting rows map onto the taxonomy: states, default causes, domains, failures.

The taxonomy (slurm_triage.taxonomy, shared/TAXONOMY.md) is the contract; this module only
derives from it what the analytics needs, as plain data and polars expressions.
"""

from __future__ import annotations

import polars as pl

from slurm_triage.slurm.model import JobState
from slurm_triage.taxonomy import CAUSES, Cause, Domain

# The paper's state mix, then the rest: OTHER (BOOT_FAIL, DEADLINE, ...) and ACTIVE
# (pending, running: not ended, so left out of every metric).
ENDED_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "REQUEUED",
    "OTHER",
)
STATES = (*ENDED_STATES, "ACTIVE")
_REQUEUED_LIKE = {JobState.REQUEUED, JobState.REQUEUE_HOLD, JobState.REQUEUE_FED}
_ACTIVE = {
    JobState.PENDING,
    JobState.CONFIGURING,
    JobState.RUNNING,
    JobState.SUSPENDED,
    JobState.COMPLETING,
    JobState.EXPEDITING,
    JobState.RESIZING,
    JobState.SIGNALING,
    JobState.STAGE_OUT,
    JobState.STOPPED,
}

CAUSE_IDS = tuple(c.value for c in Cause)
DOMAIN_IDS = tuple(d.value for d in Domain)

# Without an attribution a row's cause is what its state alone says (TAXONOMY.md's
# "typical evidence" column); a FAILED or REQUEUED row with no evidence is `unknown`.
DEFAULT_CAUSE = {
    "COMPLETED": Cause.COMPLETED,
    "FAILED": Cause.UNKNOWN,
    "CANCELLED": Cause.CANCELLED,
    "TIMEOUT": Cause.TIMEOUT,
    "NODE_FAIL": Cause.NODE_FAILURE,
    "PREEMPTED": Cause.PREEMPTED,
    "OUT_OF_MEMORY": Cause.HOST_OOM,
    "REQUEUED": Cause.UNKNOWN,
    "OTHER": Cause.UNKNOWN,
    "ACTIVE": Cause.UNKNOWN,
}

# The paper counts a failure when a job ends NODE_FAIL, or FAILED while a critical node
# health check fired. Our equivalent of "a critical health check fired" is an attribution
# that blames a node for a hardware or infrastructure reason: GPU, PCIe, IB, host, mounts,
# driver, a failed health check. User-domain causes blame nodes too but are not failures.
FAILURE_CAUSES = tuple(
    info.cause.value
    for info in CAUSES.values()
    if info.blames_nodes and info.domain in (Domain.HARDWARE, Domain.INFRASTRUCTURE)
)


# Where a failure was seen, each failure counted once, in this order: Slurm's own NODE_FAIL
# state; our attribution (AdminComment or the journal) blaming a node; a node event of
# Slurm's accounting (down, drained) on one of the attempt's nodes when it ended.
FAILURE_SOURCES = ("none", "node_fail", "attribution", "node_event")
SOURCE_DTYPE = pl.Enum(FAILURE_SOURCES)
# Causes that a node event on the attempt's node overrides (TAXONOMY rule 1: hardware
# evidence beats the symptoms it causes): no attribution, Slurm's bare node_failure, and
# the cascades a dead node leaves on the other ranks. A user or scheduler cause stands.
SYMPTOM_CAUSES = ("unknown", "node_failure", "nccl_timeout", "network", "hang")


def state_name(state: JobState) -> str:
    """Our state bucket for one of Slurm's job states."""
    if state.value in ENDED_STATES:
        return state.value
    if state in _REQUEUED_LIKE:
        return "REQUEUED"
    if state in _ACTIVE:
        return "ACTIVE"
    return "OTHER"


def _lookup(keys: tuple[str, ...], table: dict[str, str], dtype: pl.DataType) -> pl.Series:
    """Values of `table` in the order of `keys`, to gather by an Enum's physical codes."""
    return pl.Series([table[k] for k in keys], dtype=dtype)


CAUSE_DTYPE = pl.Enum(CAUSE_IDS)
DOMAIN_DTYPE = pl.Enum(DOMAIN_IDS)
STATE_DTYPE = pl.Enum(STATES)


def default_cause_expr(state_column: str) -> pl.Expr:
    """The cause a row gets from its state alone (a gather by the Enum's codes: fast)."""
    table = {state: cause.value for state, cause in DEFAULT_CAUSE.items()}
    lookup = _lookup(STATES, table, CAUSE_DTYPE)
    return pl.lit(lookup).gather(pl.col(state_column).to_physical())


def domain_expr(cause_column: str) -> pl.Expr:
    """The taxonomy domain of each row's cause."""
    table = {info.cause.value: info.domain.value for info in CAUSES.values()}
    lookup = _lookup(CAUSE_IDS, table, DOMAIN_DTYPE)
    return pl.lit(lookup).gather(pl.col(cause_column).to_physical())


def blames_node_expr() -> pl.Expr:
    """Whether each row's cause blames a node for a hardware or infrastructure reason."""
    blames = pl.Series([c in FAILURE_CAUSES for c in CAUSE_IDS], dtype=pl.Boolean)
    return pl.lit(blames).gather(pl.col("cause").to_physical())


def failure_source_expr() -> pl.Expr:
    """Where the paper's failure was seen, from state and cause: NODE_FAIL, or not
    COMPLETED with a node-blaming infrastructure cause; `none` otherwise (node events are
    joined later, by node_events.join)."""
    attributed = (pl.col("state") != "COMPLETED") & blames_node_expr()
    return (
        pl.when(pl.col("state") == "NODE_FAIL")
        .then(pl.lit("node_fail", SOURCE_DTYPE))
        .when(attributed)
        .then(pl.lit("attribution", SOURCE_DTYPE))
        .otherwise(pl.lit("none", SOURCE_DTYPE))
    )


def is_failure_expr() -> pl.Expr:
    """The paper's failure, from any source (the `failure_source` column)."""
    return pl.col("failure_source") != "none"
