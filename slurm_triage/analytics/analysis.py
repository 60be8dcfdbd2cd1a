"""One call from parsed accounting to every number and table the report shows.

`analyse` is pure (frames in, a frozen Analysis out); `report` renders it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import datetime

import numpy as np
import polars as pl

from slurm_triage.analytics import metrics, model, node_events, runs
from slurm_triage.analytics.attribution_join import attribute, unnumbered_runs
from slurm_triage.analytics.ingest import Accounting
from slurm_triage.analytics.node_events import NodeEvents
from slurm_triage.analytics.simulate import simulate
from slurm_triage.analytics.stats import RateInterval

# r_f when the data cannot give one: RSC-1's 6.50 per 1000 node-days (Kokolis et al.).
PAPER_RF = 6.5e-3
ETTR_INTERVALS_MIN = (5.0, 15.0, 30.0, 60.0)
SIMULATED_GPUS = (1024, 4096, 16_384, 65_536, 131_072)
# The ETTR-vs-interval view: intervals from 1 minute to a day, at the largest power-of-two
# job size inside the closed form's valid regime and at a quarter and a sixteenth of it.
INTERVAL_VIEW_MIN = (1.0, 1440.0)
INTERVAL_VIEW_FRACTIONS = (16, 4, 1)
# How many distinct node-event reasons the report lists.
TOP_REASONS = 12
SIM_WORK_DAYS = 3.0
# A measured r_f drives the model curves only from this many failures on (the exact 95%
# interval is then within about a factor of 2.4); below it the paper's rate is used.
MIN_FAILURES_FOR_MODEL = 5
# Skip a simulated point whose runs would need more attempts than this on average.
SIM_MAX_ATTEMPTS = 3000


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """Knobs of the analysis; the defaults are the paper's."""

    min_gpus: int = metrics.PAPER_MIN_GPUS
    gpus_per_node: int = model.DEFAULT_GPUS_PER_NODE
    # Count a row without a gres/gpu count as NNodes x gpus_per_node GPUs: for a cluster of
    # whole GPU nodes whose AccountingStorageTRES lacks gres/gpu (Slurm's default).
    gpus_from_nodes: bool = False
    assume: runs.RunAssumptions = field(default_factory=runs.RunAssumptions)
    ckpt_write_s: float = 0.0
    queue_min: float = 0.0
    rf_per_node_day: float | None = None
    simulate_runs: int = 200
    seed: int = 0
    confidence: float = 0.95


@dataclass(frozen=True)
class Attempts:
    """The ended attempts every metric reads (attributed, node events joined), and what
    the node events explained (one row per attempt, node_events.JOINED_SCHEMA)."""

    done: pl.DataFrame
    joined: pl.DataFrame
    events: NodeEvents | None
    unreadable_node_lists: int = 0  # attempts whose NodeList hostlist refused
    in_progress: pl.Series | None = None  # job ids with an attempt still active


@dataclass(frozen=True)
class EventsSummary:
    """What the node events did: where from, how many, how many attempts they explained,
    the most frequent reasons, and the REQUEUED attempts still unexplained."""

    source: str | None
    read: int
    out_of_service: int
    unparsable: int
    explained_failures: int  # REQUEUED/FAILED attempts made failures by an event
    hinted_node_fails: int  # NODE_FAIL attempts whose cause an event named
    reasons: pl.DataFrame
    unattributed_requeued: int
    unattributed_requeued_gpu_hours: float
    unreadable_node_lists: int = 0


@dataclass(frozen=True)
class Summary:
    """Everything computed from the cube of attempts: all the plots need (the job-run
    tables, which take longest, are in Analysis)."""

    source: str
    options: ReportOptions
    rows: int
    bad_lines: int
    steps: int
    columns: str
    ended_rows: int
    gpu_rows: int  # rows whose AllocTRES gave a GPU count (0: GPUs not accounted)
    unnumbered_runs: int  # runs at the --since edge whose attempts could not be numbered
    first_submit: datetime | None
    first_end: datetime | None
    last_end: datetime | None
    gpu_hours: float
    events: EventsSummary
    failure_sources: pl.DataFrame
    rf_by_cause: pl.DataFrame
    state_mix: pl.DataFrame
    taxonomy: pl.DataFrame
    domains: pl.DataFrame
    failure_share: metrics.FailureShare
    rf: RateInterval
    model_rf: float
    model_rf_source: str
    mttf: pl.DataFrame
    goodput: pl.DataFrame
    over_time: pl.DataFrame
    ettr_curves: pl.DataFrame
    ettr_simulated: pl.DataFrame
    ettr_intervals: pl.DataFrame
    ettr_optimum: pl.DataFrame


@dataclass(frozen=True)
class Analysis(Summary):
    """Everything the report shows; tables are small polars frames."""

    job_runs: int
    runs_in_progress: int  # left out of the job runs: an attempt still pending or running
    ettr_by_size: pl.DataFrame
    largest_runs: pl.DataFrame


def analyse(
    accounting: Accounting,
    options: ReportOptions | None = None,
    attributions: pl.LazyFrame | None = None,
    events: NodeEvents | None = None,
) -> Analysis:
    """Attribute, join node events, then compute every metric of the report."""
    options = options or ReportOptions()
    attempts = ended_attempts(accounting, attributions, events, node_gpus(options))
    return complete(summarise(accounting, attempts, options), run_tables(attempts, options))


def node_gpus(options: ReportOptions) -> int | None:
    """GPUs per node to count rows without a GPU count by, when asked to."""
    return options.gpus_per_node if options.gpus_from_nodes else None


def ended_attempts(
    accounting: Accounting,
    attributions: pl.LazyFrame | None,
    events: NodeEvents | None = None,
    gpus_per_node: int | None = None,
) -> Attempts:
    """The attributed attempts that have an outcome, node events joined: what every
    metric reads. With `gpus_per_node`, a row without a GPU count has NNodes x that."""
    attempts = accounting.attempts
    if gpus_per_node is not None:
        counted = pl.col("nnodes") * gpus_per_node
        gpus = pl.when(pl.col("gpus") == 0).then(counted).otherwise(pl.col("gpus"))
        attempts = attempts.with_columns(gpus.cast(pl.Int32).alias("gpus"))
    attributed = attribute(attempts, attributions, accounting.window_start)
    active = attributed.filter(pl.col("state") == "ACTIVE")["job_raw"].unique()
    done, joined, unreadable = node_events.join(metrics.ended(attributed), events)
    return Attempts(done, joined, events, unreadable, active)


def summarise(accounting: Accounting, attempts: Attempts, options: ReportOptions) -> Summary:
    """Every metric but the job runs, from one aggregation of the attempts."""
    done = attempts.done
    table = metrics.cube(done, options.min_gpus, options.assume.ckpt_interval_min)
    rf = metrics.failure_rate(table, options.confidence)
    model_rf, rf_source = _model_rf(options, rf, table)
    ends = pl.col("end")
    span = done.select(pl.col("submit").min(), ends.min().alias("a"), ends.max().alias("b")).row(0)
    layout = accounting.layout
    return Summary(
        source=accounting.source,
        options=options,
        rows=accounting.attempts.height,
        bad_lines=accounting.bad_lines,
        steps=accounting.steps,
        columns=layout.describe() if layout is not None else "",
        ended_rows=done.height,
        gpu_rows=int((accounting.attempts["gpus"] > 0).sum()),
        unnumbered_runs=unnumbered_runs(accounting.attempts, accounting.window_start),
        first_submit=span[0],
        first_end=span[1],
        last_end=span[2],
        gpu_hours=float(table["gpu_hours"].sum()),
        events=_events_summary(attempts),
        failure_sources=metrics.failure_sources(table),
        rf_by_cause=metrics.rf_by_cause(table, options.confidence),
        state_mix=metrics.state_mix(table),
        taxonomy=metrics.taxonomy(table),
        domains=metrics.domains(table),
        failure_share=metrics.failure_share(table),
        rf=rf,
        model_rf=model_rf,
        model_rf_source=rf_source,
        mttf=metrics.mttf_by_size(table, model_rf, options.confidence),
        goodput=metrics.goodput_loss(table),
        over_time=metrics.over_time(table, span[1], span[2]),
        ettr_curves=ettr_curves(model_rf, options),
        ettr_simulated=ettr_simulated(model_rf, options),
        ettr_intervals=ettr_intervals(model_rf, options),
        ettr_optimum=ettr_optimum(model_rf, options),
    )


def _events_summary(attempts: Attempts) -> EventsSummary:
    events, joined, done = attempts.events, attempts.joined, attempts.done
    count, hours = node_events.unattributed_requeues(done)
    sources = done["failure_source"].gather(joined["row"]) if joined.height else None
    explained = int((sources == "node_event").sum()) if sources is not None else 0
    reasons = (
        joined.group_by("reason", "hint")
        .agg(pl.len().alias("attempts"))
        .sort("attempts", "reason", descending=[True, False])
        .head(TOP_REASONS)
    )
    return EventsSummary(
        source=events.source if events else None,
        read=events.read if events else 0,
        out_of_service=events.out_of_service if events else 0,
        unparsable=events.unparsable if events else 0,
        explained_failures=explained,
        hinted_node_fails=joined.height - explained,
        reasons=reasons,
        unattributed_requeued=count,
        unattributed_requeued_gpu_hours=hours,
        unreadable_node_lists=attempts.unreadable_node_lists,
    )


def run_tables(attempts: Attempts, options: ReportOptions) -> dict[str, object]:
    """The job-run part: how many runs, achieved ETTR by size, the largest runs. A run with
    an attempt still pending or running has not ended: it is left out and counted."""
    done = attempts.done
    in_progress = attempts.in_progress
    if in_progress is not None and in_progress.len():
        done = done.filter(~pl.col("job_raw").is_in(in_progress.implode()))
    job_runs = runs.job_runs(done, options.assume)
    return {
        "job_runs": job_runs.height,
        "runs_in_progress": 0 if in_progress is None else in_progress.len(),
        "ettr_by_size": runs.ettr_by_size(job_runs),
        "largest_runs": _labelled(runs.largest_runs(job_runs), done),
    }


def _labelled(largest: pl.DataFrame, done: pl.DataFrame) -> pl.DataFrame:
    """The largest runs named as sacct named them: JobIDRaw, or the JobID text (13_1)
    where the key had to be made from it."""
    if "job_label" not in done.columns:
        return largest.with_columns(pl.col("job_raw").cast(pl.String))
    labels = (
        done.filter(pl.col("job_raw").is_in(largest["job_raw"].implode()))
        .filter(pl.col("job_label").is_not_null())
        .unique("job_raw")
        .select("job_raw", "job_label")
    )
    named = largest.join(labels, on="job_raw", how="left", maintain_order="left")
    job = pl.coalesce("job_label", pl.col("job_raw").cast(pl.String)).alias("job_raw")
    return named.with_columns(job).drop("job_label")


def complete(summary: Summary, tables: dict[str, object]) -> Analysis:
    """The Analysis from its two parts."""
    parts = {f.name: getattr(summary, f.name) for f in fields(Summary)}
    return Analysis(**parts, **tables)  # type: ignore[arg-type]


def _model_rf(options: ReportOptions, rf: RateInterval, table: pl.DataFrame) -> tuple[float, str]:
    """The r_f the model curves use: given, else measured on large jobs, else measured on
    all jobs, else the paper's; the source is shown next to every curve."""
    if options.rf_per_node_day is not None:
        return options.rf_per_node_day, "given with --rf"
    if _usable(rf):
        return rf.rate, f"measured on jobs > {options.min_gpus} GPUs"
    everyone = metrics.all_sizes_rate(table)
    if _usable(everyone):
        return everyone.rate, "measured on all GPU jobs (too few failures of large jobs)"
    return PAPER_RF, "Kokolis et al. RSC-1 (too few failures with run time in this data)"


def _usable(rate: RateInterval) -> bool:
    """Enough failures, over some exposure: failures of attempts that ran 0 s have none,
    and their rate is NaN (or infinite), which no model can take."""
    finite = math.isfinite(rate.rate) and rate.rate > 0
    return rate.events >= MIN_FAILURES_FOR_MODEL and finite


def _job(gpus: float, interval: float, rf: float, options: ReportOptions) -> model.JobRun:
    return model.JobRun(
        n_nodes=max(gpus / options.gpus_per_node, 1.0),
        rf_per_node_day=rf,
        restart_min=options.assume.restart_min,
        ckpt_interval_min=interval,
        ckpt_write_s=options.ckpt_write_s,
        queue_min=options.queue_min,
    )


def ettr_curves(rf: float, options: ReportOptions) -> pl.DataFrame:
    """Closed-form E[ETTR] from 8 to 131,072 GPUs for each checkpoint interval, with
    whether the form is valid there (MTTF >= 0.1 day)."""
    sizes = np.logspace(math.log10(8), math.log10(131_072), 60)
    rows = []
    for interval in ETTR_INTERVALS_MIN:
        for g in sizes:
            job = _job(g, interval, rf, options)
            rows.append(
                (float(g), interval, model.expected_ettr(job), model.closed_form_valid(job))
            )
    schema = ["gpus", "ckpt_interval_min", "ettr", "valid"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def ettr_intervals(rf: float, options: ReportOptions) -> pl.DataFrame:
    """Closed-form E[ETTR] against the checkpoint interval at a few job sizes (the write
    time w is what makes checkpointing more often cost something)."""
    low, high = (math.log10(m) for m in INTERVAL_VIEW_MIN)
    intervals = np.logspace(low, high, 80)
    rows = []
    for gpus in interval_view_gpus(rf, options):
        for interval in intervals:
            job = _job(gpus, float(interval), rf, options)
            rows.append(
                (gpus, float(interval), model.expected_ettr(job), model.closed_form_valid(job))
            )
    schema = ["gpus", "ckpt_interval_min", "ettr", "valid"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def interval_view_gpus(rf: float, options: ReportOptions) -> tuple[int, ...]:
    """Job sizes for the interval view where the closed form holds (MTTF >= 0.1 day)."""
    edge = options.gpus_per_node / (model.VALID_MIN_MTTF_DAYS * rf)
    top = 2 ** int(math.floor(math.log2(max(edge, 1.0))))
    sizes = sorted({max(top // f, 1) for f in INTERVAL_VIEW_FRACTIONS})
    return tuple(sizes)


def ettr_optimum(rf: float, options: ReportOptions) -> pl.DataFrame:
    """Young/Daly's interval sqrt(2 w / (N r_f)) and E[ETTR] there, per size of the
    interval view; empty without a write time (w = 0: no optimum, checkpoint always)."""
    schema = ["gpus", "young_daly_min", "ettr", "valid"]
    if options.ckpt_write_s <= 0:
        return pl.DataFrame(schema=dict.fromkeys(schema, pl.Float64))
    rows = []
    for gpus in interval_view_gpus(rf, options):
        nodes = max(gpus / options.gpus_per_node, 1.0)
        best = model.young_daly_interval_min(nodes, rf, options.ckpt_write_s)
        job = _job(gpus, best, rf, options)
        rows.append((float(gpus), best, model.expected_ettr(job), model.closed_form_valid(job)))
    return pl.DataFrame(rows, schema=schema, orient="row")


def ettr_simulated(rf: float, options: ReportOptions) -> pl.DataFrame:
    """Monte Carlo means at a few sizes, skipping points that would take too long."""
    rows = []
    for interval in ETTR_INTERVALS_MIN:
        for gpus in SIMULATED_GPUS:
            job = _job(gpus, interval, rf, options)
            if options.simulate_runs <= 0 or _expected_attempts(job) > SIM_MAX_ATTEMPTS:
                continue
            result = simulate(
                job, work_days=SIM_WORK_DAYS, runs=options.simulate_runs, seed=options.seed
            )
            rows.append((float(gpus), interval, result.mean, model.expected_ettr(job)))
    schema = ["gpus", "ckpt_interval_min", "ettr", "closed_form"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def _expected_attempts(job: model.JobRun) -> float:
    chunk = job.restart_days + job.interval_days + job.write_days
    exponent = min(job.failures_per_day * chunk, 700.0)
    return SIM_WORK_DAYS / job.interval_days * math.exp(exponent)
