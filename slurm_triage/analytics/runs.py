"""Job runs: the requeue chain of one logical job (all rows sharing JobIDRaw), with the
paper's split of its wallclock into queue, productive and unproductive time.

Accounting does not say when a job checkpointed, so unproductive time is estimated the way
the paper estimates goodput loss, from an assumed checkpoint interval and restart cost:
- every attempt after the first spends min(its run time, u0) restarting;
- every interrupted attempt (REQUEUED, PREEMPTED, NODE_FAIL, or a failure) loses
  min(its run time, dt_cp / 2) of work since the last checkpoint.
Queue time of an attempt is from when it was queued to when it started: Start - max(Submit,
the previous attempt's End), with Start = End - elapsed (and End itself for one cancelled
before it started). Slurm gives a requeued row its requeue time as Submit, but accounting
may keep the first Submit on every attempt, which without the max would count the earlier
attempts' run time as queue time again. Achieved ETTR = productive / (queue + run time).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from slurm_triage.analytics import causes
from slurm_triage.analytics.metrics import bucket_expr

INTERRUPTED_STATES = ("REQUEUED", "PREEMPTED", "NODE_FAIL")
LONG_RUN_HOURS = 24.0


@dataclass(frozen=True, kw_only=True)
class RunAssumptions:
    """What accounting cannot tell: checkpoint interval and restart overhead, in minutes."""

    ckpt_interval_min: float = 60.0
    restart_min: float = 5.0

    def __post_init__(self) -> None:
        if not self.ckpt_interval_min > 0 or not self.restart_min >= 0:
            raise ValueError("ckpt_interval_min must be > 0 and restart_min >= 0")


def job_runs(done: pl.DataFrame, assume: RunAssumptions) -> pl.DataFrame:
    """One row per job run: attempts, GPUs, queue/run/productive/unproductive seconds, ETTR.

    `done` is metrics.ended(...) of ingest's frame, sorted by job_raw, so a run is a slice
    of consecutive rows and its totals are differences of cumulative sums at the slices'
    ends: linear time, no hash table over millions of job ids.
    """
    if not done["job_raw"].is_sorted():
        done = done.sort("job_raw", maintain_order=True)
    per = _per_attempt(done, assume)
    runs = _slice_totals(per, ("queue_s", "run_s", "unproductive_s", "restart_s"))
    start = runs["_end"] - runs["attempts"].cast(pl.Int64) + 1
    first, last = per["gpus"].gather(start), per["gpus"].gather(runs["_end"])
    unproductive = (
        # Every attempt but the first pays the restart overhead.
        pl.col("unproductive_s") + pl.col("restart_s") - pl.lit(per["restart_s"].gather(start))
    )
    return (
        runs.select(
            "job_raw",
            "attempts",
            "queue_s",
            "run_s",
            # A chain's last (or first) attempt may have been cancelled before it got GPUs.
            pl.max_horizontal(pl.lit(first), pl.lit(last)).alias("gpus"),
            pl.min_horizontal(unproductive, pl.col("run_s")).alias("unproductive_s"),
        )
        .with_columns(
            (pl.col("run_s") - pl.col("unproductive_s")).alias("productive_s"),
            (pl.col("queue_s") + pl.col("run_s")).alias("wall_s"),
            bucket_expr().alias("bucket"),
        )
        .with_columns(
            pl.when(pl.col("wall_s") > 0)
            .then(pl.col("productive_s") / pl.col("wall_s"))
            .alias("ettr")
        )
    )


def _slice_totals(per: pl.DataFrame, sums: tuple[str, ...]) -> pl.DataFrame:
    """Per run of equal job_raw: its last row index `_end`, its row count `attempts`, and
    the totals of `sums`, as differences of cumulative sums at the runs' last rows."""
    is_last = (pl.col("job_raw") != pl.col("job_raw").shift(-1)).fill_null(True)
    ends = per.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_end"),
        *(pl.col(c).cum_sum() for c in sums),
    ).filter(is_last)
    return ends.select(
        "job_raw",
        "_end",
        (pl.col("_end") - pl.col("_end").shift(1).fill_null(-1)).cast(pl.UInt32).alias("attempts"),
        *((pl.col(c) - pl.col(c).shift(1).fill_null(0)).alias(c) for c in sums),
    )


def _per_attempt(done: pl.DataFrame, assume: RunAssumptions) -> pl.DataFrame:
    """Per attempt (rows sorted by job, a job's in order): queue and run seconds, work lost
    if interrupted, restart cost if it is not the first attempt (subtracted per run)."""
    elapsed = pl.col("elapsed_s").cast(pl.Float64)
    job = pl.col("job_raw")
    previous_end = pl.when(job == job.shift(1)).then(pl.col("end").shift(1))
    queued_from = pl.max_horizontal(pl.col("submit"), previous_end)
    waited = (pl.col("end") - queued_from).dt.total_seconds() - pl.col("elapsed_s")
    interrupted = pl.col("state").is_in(INTERRUPTED_STATES) | causes.is_failure_expr()
    lost = pl.when(interrupted).then(
        pl.min_horizontal(elapsed, pl.lit(assume.ckpt_interval_min * 30.0))
    )
    return done.select(
        "job_raw",
        "gpus",
        waited.clip(lower_bound=0).fill_null(0).alias("queue_s"),
        pl.col("elapsed_s").alias("run_s"),
        lost.fill_null(0.0).alias("unproductive_s"),
        pl.min_horizontal(elapsed, pl.lit(assume.restart_min * 60.0)).alias("restart_s"),
    )


def ettr_by_size(runs: pl.DataFrame) -> pl.DataFrame:
    """Per GPU bucket: runs, their wallclock-weighted mean GPUs, hours of queue/productive/
    unproductive time, the GPU-time weighted ETTR, and the median ETTR of runs of a day or
    more (the paper's view; a median over millions of short runs would cost a sort and say
    little)."""
    weight = pl.col("gpus") * pl.col("wall_s")
    long = pl.col("wall_s") >= LONG_RUN_HOURS * 3600
    weighted = (pl.col("ettr") * weight).sum() / weight.sum()
    return (
        runs.filter(pl.col("ettr").is_not_null() & (pl.col("gpus") > 0))
        .group_by("bucket")
        .agg(
            pl.len().alias("runs"),
            (weight.sum() / pl.col("wall_s").sum()).alias("mean_gpus"),
            (pl.col("queue_s").sum() / 3600).alias("queue_hours"),
            (pl.col("productive_s").sum() / 3600).alias("productive_hours"),
            (pl.col("unproductive_s").sum() / 3600).alias("unproductive_hours"),
            weighted.alias("weighted_ettr"),
            long.sum().alias("long_runs"),
            pl.col("ettr").filter(long).median().alias("long_median_ettr"),
        )
        .sort("bucket")
    )


def largest_runs(runs: pl.DataFrame, n: int = 10) -> pl.DataFrame:
    """The n runs with the most GPU time, with their time split in hours."""
    return (
        runs.with_columns((pl.col("gpus") * pl.col("wall_s") / 3600).alias("gpu_wall_hours"))
        .top_k(n, by="gpu_wall_hours")
        .sort("gpu_wall_hours", descending=True)
        .select(
            "job_raw",
            "gpus",
            "attempts",
            (pl.col("queue_s") / 3600).alias("queue_hours"),
            (pl.col("productive_s") / 3600).alias("productive_hours"),
            (pl.col("unproductive_s") / 3600).alias("unproductive_hours"),
            "ettr",
        )
    )
