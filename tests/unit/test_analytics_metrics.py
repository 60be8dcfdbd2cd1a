"""Metrics on small hand-made accounting: the failure definition, r_f, MTTF per size,
state mix and taxonomy by count and GPU-hours, goodput lost, job runs and their ETTR."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import polars as pl
import pytest

from slurm_triage.analytics import attribution_join, ingest, metrics, runs

T0 = datetime(2026, 1, 1)


def _line(
    job: int,
    state: str,
    gpus: int,
    hours: float,
    *,
    cause: str = "",
    n: int = 1,
    queue_h: float = 0.0,
    submit_h: float = 0.0,
) -> str:
    """One sacct row: submitted at T0 + submit_h, queued queue_h, ran `hours`."""
    nodes = max(1, math.ceil(gpus / 8))
    submit = T0 + timedelta(hours=submit_h)
    start = submit + timedelta(hours=queue_h)
    end = start + timedelta(hours=hours)
    fmt = "%Y-%m-%dT%H:%M:%S"
    comment = f'{{"triage":{{"cause":"{cause}","n":{n}}}}}' if cause else ""
    return (
        f"{job}|{job}|{state}|0:0|{submit:{fmt}}|{start:{fmt}}|{end:{fmt}}|{round(hours * 3600)}|"
        f"{nodes}|billing=1,gres/gpu={gpus},node={nodes}|n1|p|u|{comment}"
    )


def _done(*lines: str) -> pl.DataFrame:
    attempts = ingest.read_sacct_text("\n".join(lines) + "\n").attempts
    return metrics.ended(attribution_join.attribute(attempts))


def _cube(*lines: str, **kw: object) -> pl.DataFrame:
    return metrics.cube(_done(*lines), **kw)  # type: ignore[arg-type]


def test_failure_is_node_fail_or_a_node_blaming_infra_attribution() -> None:
    """NODE_FAIL and hardware/infrastructure node causes count; user causes, network-wide
    causes and success do not."""
    table = _cube(
        _line(1, "NODE_FAIL", 256, 1),
        _line(2, "FAILED", 256, 1, cause="gpu_memory"),
        _line(3, "REQUEUED", 256, 1, cause="filesystem"),
        _line(4, "FAILED", 256, 1, cause="user_code"),
        _line(5, "FAILED", 256, 1, cause="nccl_timeout"),
        _line(6, "COMPLETED", 256, 1, cause="gpu_memory"),
        _line(7, "FAILED", 256, 1),
    )
    assert metrics.failure_share(table).attempts == 3


def test_rf_is_failures_per_node_day_of_jobs_over_the_threshold() -> None:
    """r_f counts only jobs on more than 128 GPUs: 2 failures in 32 nodes x 2 days."""
    table = _cube(
        _line(1, "NODE_FAIL", 256, 24),
        _line(2, "COMPLETED", 256, 24),
        _line(3, "FAILED", 256, 0, cause="pcie"),
        _line(4, "NODE_FAIL", 128, 24),  # 128 is not more than 128
        _line(5, "NODE_FAIL", 8, 24),
    )
    rf = metrics.failure_rate(table)
    assert rf.events == 2
    assert rf.exposure == pytest.approx(64.0)
    assert rf.rate == pytest.approx(2 / 64)
    assert rf.low < rf.rate < rf.high


def test_threshold_is_a_parameter() -> None:
    """With min_gpus=0 every GPU job is in the population."""
    lines = (_line(1, "NODE_FAIL", 8, 24), _line(2, "COMPLETED", 256, 24))
    assert metrics.failure_rate(_cube(*lines, min_gpus=0)).events == 1
    assert metrics.failure_rate(_cube(*lines)).events == 0


def test_mttf_by_size_is_run_hours_per_failure_with_the_model_alongside() -> None:
    """Bucket 257-1024: 3 failures in 60 run hours is an MTTF of 20 h; the model uses the
    bucket's node-days."""
    lines = [_line(i, "NODE_FAIL" if i < 3 else "COMPLETED", 512, 12) for i in range(5)]
    table = metrics.mttf_by_size(_cube(*lines), rf_per_node_day=0.01)
    row = table.filter(pl.col("bucket") == "257-1024").row(0, named=True)
    assert row["failures"] == 3
    assert row["mttf_hours"] == pytest.approx(20.0)
    assert row["mttf_low_hours"] < 20.0 < row["mttf_high_hours"]
    assert row["mean_gpus"] == pytest.approx(512)
    assert row["model_mttf_hours"] == pytest.approx(24 / (64 * 0.01))


def test_state_mix_by_count_and_gpu_hours() -> None:
    """One big NODE_FAIL among small successes: few jobs, most of the GPU-hours."""
    table = _cube(
        _line(1, "NODE_FAIL", 1024, 10),
        *(_line(i, "COMPLETED", 1, 10) for i in range(2, 11)),
    )
    mix = {r["state"]: r for r in metrics.state_mix(table).iter_rows(named=True)}
    assert mix["NODE_FAIL"]["count_share"] == pytest.approx(0.1)
    assert mix["NODE_FAIL"]["gpu_hours_share"] == pytest.approx(1024 / 1033)
    assert mix["PREEMPTED"]["count"] == 0
    assert set(mix) >= {"COMPLETED", "FAILED", "OUT_OF_MEMORY", "REQUEUED", "TIMEOUT"}


def test_taxonomy_reports_the_papers_jobs_versus_gpu_runtime_view() -> None:
    """Hardware causes: a small share of jobs and a large share of GPU time, by domain."""
    table = _cube(
        _line(1, "FAILED", 2048, 5, cause="infiniband"),
        *(_line(i, "FAILED", 1, 5, cause="user_code") for i in range(2, 101)),
    )
    domains = {r["domain"]: r for r in metrics.domains(table).iter_rows(named=True)}
    assert domains["hardware"]["count_share"] == pytest.approx(0.01)
    assert domains["hardware"]["gpu_hours_share"] == pytest.approx(2048 / (2048 + 99))
    taxonomy = metrics.taxonomy(table)
    assert taxonomy["cause"].cast(pl.String).to_list()[0] == "infiniband"


def test_goodput_lost_is_half_an_interval_per_failure_at_most() -> None:
    """A failure loses min(run, dt/2) on all GPUs; preemption likewise, counted apart."""
    table = _cube(
        _line(1, "NODE_FAIL", 16, 10),
        _line(2, "NODE_FAIL", 16, 0.25),
        _line(3, "PREEMPTED", 8, 10),
        ckpt_interval_min=60,
    )
    lost = {r["reason"]: r for r in metrics.goodput_loss(table).iter_rows(named=True)}
    assert lost["failures"]["lost_gpu_hours"] == pytest.approx(16 * 0.5 + 16 * 0.25)
    assert lost["preemption"]["lost_gpu_hours"] == pytest.approx(8 * 0.5)


def test_failures_over_time_are_daily_for_short_spans() -> None:
    """Two days of data: one row per day, r_f per day from the large jobs."""
    table = _cube(
        _line(1, "NODE_FAIL", 256, 12),
        _line(2, "COMPLETED", 256, 12, submit_h=24),
        _line(3, "NODE_FAIL", 8, 1, submit_h=30),
    )
    over = metrics.over_time(table)
    assert over["every"].to_list() == ["1d", "1d"]
    assert over["failures"].to_list() == [1, 1]
    assert over["large_failures"].to_list() == [1, 0]
    assert over["rf"][0] == pytest.approx(1 / 16)


def test_a_job_run_splits_wallclock_into_queue_productive_and_unproductive() -> None:
    """Requeue chain: 1 h queue, 10 h run ending NODE_FAIL (loses 30 min), 0.5 h queue,
    10 h run that completes (pays a 5 min restart)."""
    done = _done(
        _line(1, "NODE_FAIL", 64, 10, queue_h=1),
        _line(1, "COMPLETED", 64, 10, queue_h=0.5, submit_h=11),
    )
    run = runs.job_runs(done, runs.RunAssumptions(ckpt_interval_min=60, restart_min=5)).row(
        0, named=True
    )
    assert run["attempts"] == 2
    assert run["gpus"] == 64
    assert run["queue_s"] == pytest.approx(1.5 * 3600)
    assert run["unproductive_s"] == pytest.approx(30 * 60 + 5 * 60)
    assert run["ettr"] == pytest.approx((20 - 35 / 60) / 21.5)


def test_a_pending_cancellation_is_pure_queue_time() -> None:
    """A job cancelled before it started has queue time, no run time, ETTR 0."""
    line = (
        "7|7|CANCELLED by 0|0:0|2026-01-01T00:00:00|None|2026-01-01T02:00:00|0|3||"
        "None assigned|p|u|"
    )
    run = runs.job_runs(_done(line), runs.RunAssumptions()).row(0, named=True)
    assert run["queue_s"] == 7200
    assert run["ettr"] == 0.0


def test_ettr_by_size_weights_by_gpu_time() -> None:
    """Runs in one bucket: the GPU-time weighted ETTR leans to the longer run."""
    done = _done(
        _line(1, "COMPLETED", 512, 30, queue_h=10),
        _line(2, "COMPLETED", 512, 1, queue_h=1),
    )
    table = runs.ettr_by_size(runs.job_runs(done, runs.RunAssumptions()))
    row = table.row(0, named=True)
    assert row["runs"] == 2
    assert row["weighted_ettr"] == pytest.approx((30 + 1) / (40 + 2))
    assert row["long_runs"] == 1
    assert row["long_median_ettr"] == pytest.approx(30 / 40)
