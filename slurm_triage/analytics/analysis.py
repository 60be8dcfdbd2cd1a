"""One call from parsed accounting to every number and table the report shows.

`analyse` is pure (frames in, a frozen Analysis out); `report` renders it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import datetime

import numpy as np
import polars as pl

from slurm_triage.analytics import metrics, model, runs
from slurm_triage.analytics.ingest import Accounting, attribute
from slurm_triage.analytics.simulate import simulate
from slurm_triage.analytics.stats import RateInterval

# r_f when the data cannot give one: RSC-1's 6.50 per 1000 node-days (Kokolis et al.).
PAPER_RF = 6.5e-3
ETTR_INTERVALS_MIN = (5.0, 15.0, 30.0, 60.0)
SIMULATED_GPUS = (1024, 4096, 16_384, 65_536, 131_072)
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
    assume: runs.RunAssumptions = field(default_factory=runs.RunAssumptions)
    ckpt_write_s: float = 0.0
    queue_min: float = 0.0
    rf_per_node_day: float | None = None
    simulate_runs: int = 200
    seed: int = 0
    confidence: float = 0.95


@dataclass(frozen=True)
class Summary:
    """Everything computed from the cube of attempts: all the plots need (the job-run
    tables, which take longest, are in Analysis)."""

    source: str
    options: ReportOptions
    rows: int
    bad_lines: int
    ended_rows: int
    first_submit: datetime | None
    last_end: datetime | None
    gpu_hours: float
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


@dataclass(frozen=True)
class Analysis(Summary):
    """Everything the report shows; tables are small polars frames."""

    job_runs: int
    ettr_by_size: pl.DataFrame
    largest_runs: pl.DataFrame


def analyse(
    accounting: Accounting,
    options: ReportOptions | None = None,
    attributions: pl.LazyFrame | None = None,
) -> Analysis:
    """Attribute, then compute every metric of the report."""
    options = options or ReportOptions()
    done = ended_attempts(accounting, attributions)
    return complete(summarise(accounting, done, options), run_tables(done, options))


def ended_attempts(accounting: Accounting, attributions: pl.LazyFrame | None) -> pl.DataFrame:
    """The attributed attempts that have an outcome: what every metric reads."""
    return metrics.ended(attribute(accounting.attempts, attributions))


def summarise(accounting: Accounting, done: pl.DataFrame, options: ReportOptions) -> Summary:
    """Every metric but the job runs, from one aggregation of the attempts."""
    table = metrics.cube(done, options.min_gpus, options.assume.ckpt_interval_min)
    rf = metrics.failure_rate(table, options.confidence)
    model_rf, rf_source = _model_rf(options, rf, table)
    span = done.select(pl.col("submit").min(), pl.col("end").max()).row(0)
    return Summary(
        source=accounting.source,
        options=options,
        rows=accounting.attempts.height,
        bad_lines=accounting.bad_lines,
        ended_rows=done.height,
        first_submit=span[0],
        last_end=span[1],
        gpu_hours=float(table["gpu_hours"].sum()),
        state_mix=metrics.state_mix(table),
        taxonomy=metrics.taxonomy(table),
        domains=metrics.domains(table),
        failure_share=metrics.failure_share(table),
        rf=rf,
        model_rf=model_rf,
        model_rf_source=rf_source,
        mttf=metrics.mttf_by_size(table, model_rf, options.confidence),
        goodput=metrics.goodput_loss(table),
        over_time=metrics.over_time(table),
        ettr_curves=ettr_curves(model_rf, options),
        ettr_simulated=ettr_simulated(model_rf, options),
    )


def run_tables(done: pl.DataFrame, options: ReportOptions) -> dict[str, object]:
    """The job-run part: how many runs, achieved ETTR by size, the largest runs."""
    job_runs = runs.job_runs(done, options.assume)
    return {
        "job_runs": job_runs.height,
        "ettr_by_size": runs.ettr_by_size(job_runs),
        "largest_runs": runs.largest_runs(job_runs),
    }


def complete(summary: Summary, tables: dict[str, object]) -> Analysis:
    """The Analysis from its two parts."""
    parts = {f.name: getattr(summary, f.name) for f in fields(Summary)}
    return Analysis(**parts, **tables)  # type: ignore[arg-type]


def _model_rf(options: ReportOptions, rf: RateInterval, table: pl.DataFrame) -> tuple[float, str]:
    """The r_f the model curves use: given, else measured on large jobs, else measured on
    all jobs, else the paper's; the source is shown next to every curve."""
    if options.rf_per_node_day is not None:
        return options.rf_per_node_day, "given with --rf"
    if rf.events >= MIN_FAILURES_FOR_MODEL:
        return rf.rate, f"measured on jobs > {options.min_gpus} GPUs"
    everyone = metrics.all_sizes_rate(table)
    if everyone.events >= MIN_FAILURES_FOR_MODEL:
        return everyone.rate, "measured on all GPU jobs (too few failures of large jobs)"
    return PAPER_RF, "Kokolis et al. RSC-1 (too few failures in this data)"


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
    """Closed-form E[ETTR] from 8 to 131,072 GPUs for each checkpoint interval."""
    sizes = np.logspace(math.log10(8), math.log10(131_072), 60)
    rows = [
        (float(g), interval, model.expected_ettr(_job(g, interval, rf, options)))
        for interval in ETTR_INTERVALS_MIN
        for g in sizes
    ]
    return pl.DataFrame(rows, schema=["gpus", "ckpt_interval_min", "ettr"], orient="row")


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
