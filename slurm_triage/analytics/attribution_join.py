"""Attributions joined onto parsed attempts: our decisions from AdminComment and from the
decisions journal, then each row's cause and domain.

A row's AdminComment may hold our decision, `{"triage":{"cause":...,"n":1}}`; `n` is the
attempt the decision is about (a comment set after a requeue lands on the next row), and
without `n` the comment is about its own row. A second source of attributions (the
journal) joins the same way: a frame with columns job_raw, attempt, cause; it wins over
AdminComment. Success is success: a COMPLETED row is `completed` whatever a decision says.

Both sources number attempts absolutely (Slurm's restart count + 1). A row carrying
Slurm's Restarts (24.11 on) is numbered by it; without it, by its position in its job's
rows, which is only right when the input holds the whole chain. Accounting fetched from
`window_start` on (`sacct -S`) lacks the attempts that ended before it: a job whose first
row there was submitted before it may have lost earlier ones, so its rows are not
numbered and no decision about an attempt by number is joined to them (own-row comments
without `n` still are); unnumbered_runs counts those jobs for the report.
"""

from __future__ import annotations

from datetime import datetime

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


def _first_submit() -> pl.Expr:
    """Each row's job's first Submit, on rows sorted by job_raw: O(n), no window."""
    job = pl.col("job_raw")
    return pl.when(job != job.shift(1).fill_null(-1)).then(pl.col("submit")).forward_fill()


def _edge_expr(window_start: datetime) -> pl.Expr:
    """Rows of jobs whose first row was submitted before the window: a chain maybe cut."""
    return (_first_submit() < pl.lit(window_start)).fill_null(True)


def unnumbered_runs(attempts: pl.DataFrame, window_start: datetime | None) -> int:
    """Job runs whose attempts cannot be numbered (see the module's docstring)."""
    if window_start is None or "restarts" in attempts.columns or attempts.height == 0:
        return 0
    edge = attempts.select("job_raw", _edge_expr(window_start).alias("_edge"))
    return edge.filter("_edge")["job_raw"].n_unique()


def _numbered(indexed: pl.DataFrame, window_start: datetime | None) -> pl.DataFrame:
    """(row, job_raw, attempt) of every row; attempt null where it cannot be known."""
    if "restarts" in indexed.columns:
        attempt = (pl.col("restarts") + 1).cast(pl.Int32).alias("attempt")
        return indexed.select("row", "job_raw", attempt)
    if window_start is None:
        return indexed.select("row", "job_raw", _attempt_number())
    attempt = pl.when(~_edge_expr(window_start)).then(_attempt_number()).alias("attempt")
    return indexed.select("row", "job_raw", attempt)


def attribute(
    attempts: pl.DataFrame,
    attributions: pl.LazyFrame | None = None,
    window_start: datetime | None = None,
) -> pl.DataFrame:
    """Add `cause` and `domain` to parsed attempts, joining both sources of attributions;
    success is success, so a COMPLETED row is `completed` whatever a decision says.
    `window_start`: the accounting starts there (sacct -S), see the module's docstring."""
    frame = attempts.with_columns(causes.default_cause_expr("state").alias("cause"))
    decided = _decisions(frame, attributions, window_start)
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


def _decisions(
    frame: pl.DataFrame, attributions: pl.LazyFrame | None, window_start: datetime | None
) -> pl.DataFrame:
    """(row, cause) for every row a decision is about; the journal's win. Only decisions
    about another attempt than their own row's, or the journal's, are joined by number."""
    job = pl.col("job_raw")
    indexed = frame.with_row_index("row")
    numbered = _numbered(indexed, window_start)
    own, elsewhere = _comment_decisions(indexed, numbered)
    keyed = pl.concat([_journal(attributions), elsewhere], how="vertical_relaxed")
    named = keyed["job_raw"].unique().implode()
    targets = numbered.filter(job.is_in(named) & pl.col("attempt").is_not_null())
    joined = targets.join(keyed, on=["job_raw", "attempt"], how="inner")
    return (
        pl.concat([joined.select("row", "cause", "priority"), own], how="vertical_relaxed")
        .filter(pl.col("cause").is_in(causes.CAUSE_IDS))
        .sort("priority")
        .unique("row", keep="first")
        .select("row", "cause")
    )


def _comment_decisions(
    indexed: pl.DataFrame, numbered: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """AdminComment decisions: (row, cause) of those about their own row, and
    (job_raw, attempt, cause) of those about another attempt of the same job; one with
    `n` on a row whose number is unknown is about neither for sure, and is left out."""
    comments = (
        indexed.filter(pl.col("comment_cause").is_not_null())
        .join(numbered.select("row", "attempt"), on="row", how="left")
        .with_columns(pl.lit(1).alias("priority"))
    )
    n, attempt = pl.col("comment_n"), pl.col("attempt")
    cause = pl.col("comment_cause").alias("cause")
    own = comments.filter(n.is_null() | (n == attempt)).select("row", cause, "priority")
    elsewhere = comments.filter(n != attempt).select(
        "job_raw", n.alias("attempt"), cause, "priority"
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
