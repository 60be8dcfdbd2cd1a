"""Reliability metrics over attributed attempts (the output of ingest.attribute).

Millions of rows are aggregated once, into a small `cube` keyed by (state, cause, size
bucket, large?, period); every table of the report is then a cheap pure function of the
cube. Only ended attempts count (a running or pending row has no outcome yet).
Definitions, as in docs/analytics.md:

- GPU-hours of an attempt: gpus * ElapsedRaw / 3600; node-days: NNodes * ElapsedRaw / 86400.
- A failure (causes.is_failure_expr): NODE_FAIL, or ended otherwise than COMPLETED with an
  attribution that blames a node for a hardware or infrastructure reason, or a REQUEUED or
  FAILED attempt that a node event on one of its nodes explains (node_events.join); each
  counted once, under its source.
- r_f (the paper's): failures of attempts on more than `min_gpus` GPUs (128 in the paper)
  divided by those attempts' node-days; exact Poisson interval.
- Measured MTTF of a size bucket: its attempts' run hours / its failures.
- Goodput lost (the paper's estimate): each failed or preempted attempt loses
  min(run time, half a checkpoint interval) on all its GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from slurm_triage.analytics import causes
from slurm_triage.analytics.stats import RateInterval, rate_interval

PAPER_MIN_GPUS = 128
# Upper bounds of the size buckets (GPUs); 0 is CPU-only jobs.
BUCKET_BREAKS = (0, 1, 8, 64, 256, 1024, 4096)
BUCKET_LABELS = ("0", "1", "2-8", "9-64", "65-256", "257-1024", "1025-4096", ">4096")
BUCKET_DTYPE = pl.Enum(BUCKET_LABELS)
# Periods of the failures-over-time view: days for spans up to this many days, else weeks.
DAILY_UP_TO_DAYS = 90
_SUMS = ("count", "gpu_hours", "run_hours", "node_days", "lost_gpu_hours")
# A period that the data covers less than this much of is partial (a day in 100 000: the
# last second of the data lies inside its period, not at its end).
PARTIAL_BELOW = 0.99


def bucket_expr(gpus: str = "gpus") -> pl.Expr:
    """The size bucket of a GPU count, as an Enum ordered small to large (a sum of
    comparisons and a gather: much cheaper than `cut` on millions of rows)."""
    index = pl.sum_horizontal([(pl.col(gpus) > b).cast(pl.UInt32) for b in BUCKET_BREAKS])
    return pl.lit(pl.Series(BUCKET_LABELS, dtype=BUCKET_DTYPE)).gather(index)


def ended(attempts: pl.DataFrame) -> pl.DataFrame:
    """The attempts that have an outcome (state is not ACTIVE)."""
    return attempts.filter(pl.col("state") != "ACTIVE")


def period_of(done: pl.DataFrame) -> str:
    """'1d' or '1w': the bucket width of the over-time view for this span of end times."""
    span = done.select(pl.col("end").max() - pl.col("end").min()).item()
    return "1d" if span is None or span.days <= DAILY_UP_TO_DAYS else "1w"


def cube(
    done: pl.DataFrame,
    min_gpus: int = PAPER_MIN_GPUS,
    ckpt_interval_min: float = 60.0,
    every: str | None = None,
) -> pl.DataFrame:
    """Sums per (state, cause, failure_source, bucket, large, period): count, gpu_hours,
    run_hours, node_days, lost_gpu_hours; plus `domain` and `failure` of each key."""
    every = every or period_of(done)
    elapsed = pl.col("elapsed_s").cast(pl.Float64)
    half_s = ckpt_interval_min * 30.0
    keys = [
        pl.col("state"),
        pl.col("cause"),
        pl.col("failure_source"),
        bucket_expr().alias("bucket"),
        (pl.col("gpus") > min_gpus).alias("large"),
        pl.col("end").dt.truncate(every).alias("period"),
    ]
    table = done.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("count"),
        (pl.col("gpus") * elapsed).sum().truediv(3600.0).alias("gpu_hours"),
        elapsed.sum().truediv(3600.0).alias("run_hours"),
        (pl.col("nnodes") * elapsed).sum().truediv(86400.0).alias("node_days"),
        (pl.col("gpus") * pl.min_horizontal(elapsed, pl.lit(half_s)))
        .sum()
        .truediv(3600.0)
        .alias("lost_gpu_hours"),
    )
    return table.with_columns(
        causes.domain_expr("cause").alias("domain"),
        causes.is_failure_expr().alias("failure"),
        pl.lit(every).alias("every"),
    )


def _sum_by(table: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return table.group_by(keys).agg(pl.col(c).sum() for c in _SUMS)


def _with_shares(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(
        pl.exclude("run_hours", "node_days", "lost_gpu_hours"),
        (pl.col("count") / pl.col("count").sum()).fill_nan(0.0).alias("count_share"),
        (pl.col("gpu_hours") / pl.col("gpu_hours").sum()).fill_nan(0.0).alias("gpu_hours_share"),
    )


def state_mix(table: pl.DataFrame) -> pl.DataFrame:
    """Attempts and GPU-hours per ended state, every state listed (zeros included)."""
    states = pl.DataFrame({"state": causes.ENDED_STATES}, schema={"state": causes.STATE_DTYPE})
    mixed = states.join(_sum_by(table, ["state"]), on="state", how="left").fill_null(0)
    return _with_shares(mixed)


def taxonomy(table: pl.DataFrame) -> pl.DataFrame:
    """Attempts and GPU-hours per cause (with its domain), largest GPU-hours first."""
    return _with_shares(_sum_by(table, ["cause", "domain"])).sort(
        "gpu_hours", "count", descending=True
    )


def domains(table: pl.DataFrame) -> pl.DataFrame:
    """The taxonomy rolled up by domain: the paper's "x% of jobs, y% of GPU runtime"."""
    return _with_shares(_sum_by(table, ["domain"])).sort("gpu_hours", descending=True)


@dataclass(frozen=True)
class FailureShare:
    """Share of attempts and of GPU-hours that ended in a failure (r_f's definition)."""

    attempts: int
    count_share: float
    gpu_hours: float
    gpu_hours_share: float


def failure_share(table: pl.DataFrame) -> FailureShare:
    total = table.select(pl.col("count").sum(), pl.col("gpu_hours").sum()).row(0)
    failed = table.filter("failure").select(pl.col("count").sum(), pl.col("gpu_hours").sum())
    count, hours = int(failed.item(0, 0) or 0), float(failed.item(0, 1) or 0.0)
    return FailureShare(
        attempts=count,
        count_share=count / total[0] if total[0] else math.nan,
        gpu_hours=hours,
        gpu_hours_share=hours / total[1] if total[1] else math.nan,
    )


def failure_rate(table: pl.DataFrame, confidence: float = 0.95) -> RateInterval:
    """r_f in failures per node-day over the large attempts (`large` in the cube)."""
    big = table.filter("large")
    events = int(big.filter("failure")["count"].sum())
    return rate_interval(events, float(big["node_days"].sum()), confidence)


def all_sizes_rate(table: pl.DataFrame, confidence: float = 0.95) -> RateInterval:
    """r_f over every GPU job, for data with no large jobs."""
    gpu = table.filter(pl.col("bucket") != "0")
    events = int(gpu.filter("failure")["count"].sum())
    return rate_interval(events, float(gpu["node_days"].sum()), confidence)


def mttf_by_size(table: pl.DataFrame, rf_per_node_day: float, confidence: float = 0.95):
    """Per GPU bucket: run hours, failures, measured MTTF with its exact interval, and the
    model's MTTF for the same node-days, 24 / (mean nodes * r_f)."""
    per = (
        table.filter(pl.col("bucket") != "0")
        .group_by("bucket")
        .agg(
            pl.col("count").sum().alias("attempts"),
            pl.col("run_hours").sum(),
            pl.col("node_days").sum(),
            pl.col("gpu_hours").sum(),
            pl.col("count").filter("failure").sum().alias("failures"),
        )
        .sort("bucket")
        .with_columns((pl.col("gpu_hours") / pl.col("run_hours")).alias("mean_gpus"))
    )
    extra = [_mttf_row(row, rf_per_node_day, confidence) for row in per.iter_rows(named=True)]
    schema = dict.fromkeys(("mttf_hours", "mttf_low_hours", "mttf_high_hours"), pl.Float64)
    schema["model_mttf_hours"] = pl.Float64
    return pl.concat([per, pl.DataFrame(extra, schema=schema)], how="horizontal")


def _mttf_row(row: dict, rf: float, confidence: float) -> dict[str, float]:
    interval = rate_interval(row["failures"], row["run_hours"], confidence)
    model = row["run_hours"] / (rf * row["node_days"]) if rf > 0 and row["node_days"] else math.nan
    return {
        "mttf_hours": _inverse(interval.rate),
        "mttf_low_hours": _inverse(interval.high),
        "mttf_high_hours": _inverse(interval.low),
        "model_mttf_hours": model,
    }


def _inverse(rate: float) -> float:
    return 1.0 / rate if rate > 0 else math.inf


def goodput_loss(table: pl.DataFrame) -> pl.DataFrame:
    """GPU-hours lost to failures and to preemption, and their share of all GPU-hours."""
    total = float(table["gpu_hours"].sum())
    preempted = (pl.col("state") == "PREEMPTED") & ~pl.col("failure")
    rows = []
    for reason, mask in (("failures", pl.col("failure")), ("preemption", preempted)):
        part = table.filter(mask)
        hours = float(part["lost_gpu_hours"].sum())
        rows.append((reason, int(part["count"].sum()), hours, hours / total if total else None))
    schema = ["reason", "attempts", "lost_gpu_hours", "share_of_gpu_hours"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def failure_sources(table: pl.DataFrame) -> pl.DataFrame:
    """Failures per source (NODE_FAIL rows, our attributions, joined node events), of all
    sizes and of the r_f population, every source listed."""
    sources = pl.DataFrame(
        {"failure_source": causes.FAILURE_SOURCES[1:]},
        schema={"failure_source": causes.SOURCE_DTYPE},
    )
    per = (
        table.filter("failure")
        .group_by("failure_source")
        .agg(
            pl.col("count").sum().alias("failures"),
            pl.col("count").filter("large").sum().alias("large_failures"),
        )
    )
    return sources.join(per, on="failure_source", how="left").fill_null(0)


def rf_by_cause(table: pl.DataFrame, confidence: float = 0.95) -> pl.DataFrame:
    """r_f of the large attempts split by the cause of each failure (the shares add up to
    r_f), with exact intervals: failures per node-day of the whole population."""
    big = table.filter("large")
    exposure = float(big["node_days"].sum())
    per = (
        big.filter("failure")
        .group_by("cause", "domain")
        .agg(pl.col("count").sum().alias("failures"))
        .sort("failures", "cause", descending=[True, False])
    )
    intervals = [rate_interval(int(n), exposure, confidence) for n in per["failures"]]
    return per.with_columns(
        pl.lit(exposure).alias("node_days"),
        pl.Series("rf", [i.rate for i in intervals], pl.Float64),
        pl.Series("rf_low", [i.low for i in intervals], pl.Float64),
        pl.Series("rf_high", [i.high for i in intervals], pl.Float64),
    )


def over_time(
    table: pl.DataFrame, first_end: datetime | None = None, last_end: datetime | None = None
) -> pl.DataFrame:
    """Failures per period by end time and r_f, both of the large attempts (the r_f
    population), with exact intervals; `coverage` is the share of each period inside the
    data (first_end to last_end) and `partial` marks the periods the data only partly
    covers (their counts are not comparable with the others')."""
    large_failure = pl.col("failure") & pl.col("large")
    per = (
        table.filter(pl.col("period").is_not_null())
        .group_by("period")
        .agg(
            pl.col("count").filter("failure").sum().alias("failures"),
            pl.col("node_days").sum(),
            pl.col("count").filter(large_failure).sum().alias("large_failures"),
            pl.col("node_days").filter("large").sum().alias("large_node_days"),
            pl.col("every").first(),
        )
        .sort("period")
    )
    pairs = zip(per["large_failures"], per["large_node_days"], strict=True)
    intervals = [rate_interval(int(e), float(x)) for e, x in pairs]
    spans = zip(per["period"], per["every"], strict=True)
    coverage = [_coverage(start, every, first_end, last_end) for start, every in spans]
    return per.with_columns(
        pl.Series("rf", [i.rate for i in intervals], pl.Float64),
        pl.Series("rf_low", [i.low for i in intervals], pl.Float64),
        pl.Series("rf_high", [i.high for i in intervals], pl.Float64),
        pl.Series("coverage", coverage, pl.Float64),
    ).with_columns((pl.col("coverage") < PARTIAL_BELOW).alias("partial"))


def _coverage(start: datetime, every: str, first: datetime | None, last: datetime | None) -> float:
    """The share of the period [start, start + every) that lies within [first, last]."""
    length = timedelta(days=1 if every == "1d" else 7)
    if first is None or last is None:
        return 1.0
    inside = min(start + length, last) - max(start, first)
    return max(inside / length, 0.0)
