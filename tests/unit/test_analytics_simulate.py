"""The Monte Carlo simulator against the closed form: agreement where the paper says the
form is valid, disagreement where it is not, and the speed the issue asks for."""

from __future__ import annotations

import time

import numpy as np
import pytest

from slurm_triage.analytics import model
from slurm_triage.analytics.simulate import HopelessRun, simulate

RSC1_RF = 6.5e-3


def _job(gpus: int, interval_min: float, **kw: float) -> model.JobRun:
    return model.JobRun(
        n_nodes=model.nodes_for_gpus(gpus, 8),
        rf_per_node_day=RSC1_RF,
        restart_min=kw.pop("restart_min", 5.0),
        ckpt_interval_min=interval_min,
        **kw,
    )


@pytest.mark.parametrize(
    ("gpus", "interval_min", "extra"),
    [
        (1024, 60.0, {}),
        (4096, 60.0, {}),
        (8192, 60.0, {}),
        (8192, 30.0, {"ckpt_write_s": 60.0}),
        (4096, 30.0, {"queue_min": 20.0}),
        (2048, 15.0, {"restart_min": 20.0, "ckpt_write_s": 10.0, "queue_min": 5.0}),
    ],
)
def test_simulation_agrees_with_closed_form_in_the_valid_regime(
    gpus: int, interval_min: float, extra: dict[str, float]
) -> None:
    """Where MTTF >= 0.1 day, the mean simulated ETTR is within 5% of the closed form."""
    job = _job(gpus, interval_min, **extra)
    assert model.closed_form_valid(job)
    result = simulate(job, work_days=30, runs=2000, seed=7)
    assert result.mean == pytest.approx(model.expected_ettr(job), rel=0.05)


@pytest.mark.parametrize(("gpus", "interval_min"), [(32_768, 60.0), (65_536, 60.0)])
def test_closed_form_breaks_outside_its_regime(gpus: int, interval_min: float) -> None:
    """Far below an MTTF of 0.1 day the closed form is off by more than 5%, pessimistic."""
    job = _job(gpus, interval_min)
    assert not model.closed_form_valid(job)
    result = simulate(job, work_days=5, runs=300, seed=3)
    assert model.expected_ettr(job) < result.mean * 0.95


def test_ten_thousand_month_long_16k_gpu_runs_take_seconds() -> None:
    """The issue's scale: 10,000 runs of a 30-day 16,384-GPU job, vectorised."""
    started = time.monotonic()
    result = simulate(_job(16_384, 60.0), work_days=30, runs=10_000, seed=1)
    assert time.monotonic() - started < 10.0
    assert result.runs == 10_000
    # About 13 failures a day over ~42 days of wallclock.
    assert 450 < result.mean_failures < 650


def test_same_seed_same_runs() -> None:
    """Runs are reproducible from the seed and differ across seeds."""
    job = _job(8192, 60.0)
    a = simulate(job, work_days=5, runs=200, seed=11)
    b = simulate(job, work_days=5, runs=200, seed=11)
    c = simulate(job, work_days=5, runs=200, seed=12)
    assert np.array_equal(a.ettr, b.ettr)
    assert not np.array_equal(a.ettr, c.ettr)


def test_without_failures_only_the_first_start_costs() -> None:
    """With failures vanishingly rare, ETTR is work / (work + one u0 + the writes)."""
    job = model.JobRun(
        n_nodes=1, rf_per_node_day=1e-12, restart_min=60, ckpt_interval_min=60, ckpt_write_s=360
    )
    result = simulate(job, work_days=1, runs=10, seed=0, queue="fixed")
    # 24 chunks of an hour, 23 writes of 6 minutes, one hour of start-up.
    assert result.mean == pytest.approx(24 / (24 + 1 + 23 * 0.1))
    assert result.mean_failures == 0


def test_fixed_queue_waits_add_q_per_attempt() -> None:
    """With a fixed queue wait, wallclock = the same runs plus q per attempt."""
    base = dict(n_nodes=256, rf_per_node_day=RSC1_RF, restart_min=5, ckpt_interval_min=60)
    free = simulate(model.JobRun(**base), work_days=2, runs=50, seed=5, queue="fixed")
    queued = simulate(
        model.JobRun(**base, queue_min=30), work_days=2, runs=50, seed=5, queue="fixed"
    )
    attempts = free.failures + 1
    extra_days = queued.wall_days - free.wall_days
    assert np.allclose(extra_days, attempts * 30 / 1440)


def test_hopeless_jobs_are_refused_not_looped_forever() -> None:
    """A chunk that almost never completes between failures raises HopelessRun."""
    job = _job(1_048_576, 120.0)
    with pytest.raises(HopelessRun):
        simulate(job, work_days=1, runs=10, seed=0)
