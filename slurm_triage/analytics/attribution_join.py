"""Attributions joined onto parsed attempts: our decisions from AdminComment and from the
decisions journal, then each row's cause and domain.

A row's AdminComment may hold our decision, `{"triage":{"cause":...,"n":1}}`; `n` is the
attempt the decision is about (a comment set after a requeue lands on the next row), and
without `n` the comment is about its own row. A second source of attributions (the
journal) joins the same way: a frame with columns job_raw, attempt, cause; it wins over
AdminComment. Success is success: a COMPLETED row is `completed` whatever a decision says.
"""

from __future__ import annotations

import polars as pl

from slurm_triage.analytics import causes

ATTRIBUTION_SCHEMA: dict[str, pl.DataType] = {
    "job_raw": pl.Int64(),
    "attempt": pl.Int32(),
    "cause": pl.String(),
}


def _attempt_number() -> pl.Expr:
    """1, 2, ... along each job's rows, on rows sorted by job_raw: O(n), no window."""
    job = pl.col("job_raw")
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    first = pl.when(job != job.shift(1).fill_null(-1)).then(index).forward_fill()
    return (index - first + 1).cast(pl.Int32).alias("attempt")


def attribute(attempts: pl.DataFrame, attributions: pl.LazyFrame | None = None) -> pl.DataFrame:
    """Add `cause` and `domain` to parsed attempts, joining both sources of attributions;
    success is success, so a COMPLETED row is `completed` whatever a decision says."""
    frame = attempts.with_columns(causes.default_cause_expr("state").alias("cause"))
    decided = _decisions(frame, attributions)
    if decided.height:
        values = decided["cause"].cast(causes.CAUSE_DTYPE)
        frame = frame.with_columns(frame["cause"].scatter(decided["row"], values))
        frame = frame.with_columns(
            pl.when(pl.col("state") == "COMPLETED")
            .then(pl.lit("completed", causes.CAUSE_DTYPE))
            .otherwise(pl.col("cause"))
            .alias("cause")
        )
    return frame.with_columns(
        causes.domain_expr("cause").alias("domain"),
        causes.failure_source_expr().alias("failure_source"),
    )


def _decisions(frame: pl.DataFrame, attributions: pl.LazyFrame | None) -> pl.DataFrame:
    """(row, cause) for every row a decision is about; the journal's win. Attempt numbers
    are only computed for jobs with more than one row (a single row is attempt 1), and only
    decisions about another attempt than their own row's, or the journal's, are joined."""
    job = pl.col("job_raw")
    indexed = frame.with_row_index("row").with_columns(
        ((job == job.shift(1)) | (job == job.shift(-1))).fill_null(False).alias("_multi")
    )
    chains = indexed.filter("_multi").select("row", "job_raw", _attempt_number())
    own, elsewhere = _comment_decisions(indexed, chains)
    keyed = pl.concat([_journal(attributions), elsewhere], how="vertical_relaxed")
    named = keyed["job_raw"].unique().implode()
    singles = indexed.filter(~pl.col("_multi") & job.is_in(named)).select(
        "row", "job_raw", pl.lit(1, pl.Int32).alias("attempt")
    )
    targets = pl.concat([chains.filter(job.is_in(named)), singles])
    joined = targets.join(keyed, on=["job_raw", "attempt"], how="inner")
    return (
        pl.concat([joined.select("row", "cause", "priority"), own], how="vertical_relaxed")
        .filter(pl.col("cause").is_in(causes.CAUSE_IDS))
        .sort("priority")
        .unique("row", keep="first")
        .select("row", "cause")
    )


def _comment_decisions(
    indexed: pl.DataFrame, chains: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """AdminComment decisions: (row, cause) of those about their own row, and
    (job_raw, attempt, cause) of those about another attempt of the same job."""
    comments = (
        indexed.filter(pl.col("comment_cause").is_not_null())
        .join(chains.select("row", "attempt"), on="row", how="left")
        .with_columns(pl.col("attempt").fill_null(1), pl.lit(1).alias("priority"))
    )
    target = pl.coalesce("comment_n", "attempt")
    cause = pl.col("comment_cause").alias("cause")
    own = comments.filter(target == pl.col("attempt")).select("row", cause, "priority")
    elsewhere = comments.filter(target != pl.col("attempt")).select(
        "job_raw", target.alias("attempt"), cause, "priority"
    )
    return own, elsewhere


def _journal(attributions: pl.LazyFrame | None) -> pl.DataFrame:
    """The second source's decisions, typed, with the priority that makes them win."""
    if attributions is None:
        frame = pl.DataFrame(schema=ATTRIBUTION_SCHEMA)
    else:
        schema = pl.Schema(ATTRIBUTION_SCHEMA)
        frame = attributions.select(list(ATTRIBUTION_SCHEMA)).cast(schema).collect()
    return frame.with_columns(pl.lit(0).alias("priority"))
