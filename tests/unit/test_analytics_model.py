"""The closed-form failure and ETTR model against the numbers of Kokolis et al. (2024).

Paper assumptions reproduced here (shared/reference/paper-and-peers.md, A5/A6): r_f = 6.50
failures per 1000 node-days (RSC-1), 8 GPUs per node, restart overhead u0 = 5 min, no
checkpoint write time (w_cp = 0) and no queue wait (q = 0).
"""

from __future__ import annotations

import math

import pytest

from slurm_triage.analytics import model

RSC1_RF = 6.5e-3


def _job(gpus: int, interval_min: float, **kw: float) -> model.JobRun:
    return model.JobRun(
        n_nodes=model.nodes_for_gpus(gpus, 8),
        rf_per_node_day=kw.pop("rf", RSC1_RF),
        restart_min=kw.pop("restart_min", 5.0),
        ckpt_interval_min=interval_min,
        **kw,
    )


@pytest.mark.parametrize(
    ("gpus", "hours"),
    [(16_384, 1.80), (131_072, 0.225), (1024, 28.85)],
)
def test_mttf_matches_the_papers_projection(gpus: int, hours: float) -> None:
    """MTTF = 1/(N_nodes r_f): 1.80 h at 16,384 GPUs, 0.23 h at 131,072 (paper's figures)."""
    nodes = model.nodes_for_gpus(gpus, 8)
    assert model.mttf_hours(nodes, RSC1_RF) == pytest.approx(hours, abs=0.005)


def test_mttf_halves_when_the_job_doubles() -> None:
    """MTTF is inversely proportional to the node count."""
    assert model.mttf_hours(200, 1e-3) == pytest.approx(model.mttf_hours(100, 1e-3) / 2)


def test_a_job_smaller_than_a_node_occupies_a_whole_node() -> None:
    """Node count rounds up: one GPU dies with its node, 9 GPUs span two nodes."""
    assert model.nodes_for_gpus(1, 8) == 1
    assert model.nodes_for_gpus(9, 8) == 2
    assert model.nodes_for_gpus(16_384, 8) == 2048


@pytest.mark.parametrize(("interval_min", "expected"), [(60.0, 0.68), (5.0, 0.93)])
def test_ettr_matches_the_papers_16k_gpu_numbers(interval_min: float, expected: float) -> None:
    """E[ETTR] at 16k GPUs, u0 = 5 min, w = q = 0: 0.68 hourly and 0.93 every 5 minutes."""
    assert model.expected_ettr(_job(16_384, interval_min)) == pytest.approx(expected, abs=0.005)


def test_checkpoint_write_time_divides_ettr() -> None:
    """w_cp enters as the factor 1/(1 + w/dt): a 6-minute write each hour costs 1/1.1."""
    base = model.expected_ettr(_job(1024, 60))
    slow = model.expected_ettr(_job(1024, 60, ckpt_write_s=360))
    assert slow == pytest.approx(base / 1.1)


def test_queue_time_per_interruption_divides_by_one_plus_rate_times_q() -> None:
    """q enters as 1/(1 + N r_f q): more failures, more waits in the queue."""
    job = _job(16_384, 60, queue_min=30)
    lam_q = job.failures_per_day * 30 / 1440
    assert model.expected_ettr(job) == pytest.approx(
        model.expected_ettr(_job(16_384, 60)) / (1 + lam_q)
    )


def test_validity_is_an_mttf_of_at_least_a_tenth_of_a_day() -> None:
    """The closed form is flagged valid only while 1/(N r_f) >= 0.1 day."""
    assert model.closed_form_valid(_job(8192, 60))  # MTTF 0.15 day
    assert not model.closed_form_valid(_job(16_384, 60))  # MTTF 0.075 day


def test_closed_form_goes_negative_far_outside_its_regime() -> None:
    """Not clamped: at 64k GPUs with hourly checkpoints the first-order form breaks."""
    assert model.expected_ettr(_job(65_536, 60)) < 0


def test_young_daly_interval_is_sqrt_two_w_over_rate() -> None:
    """sqrt(2 w / (N r_f)): 30 s writes at 16k GPUs give about 10.4 minutes."""
    interval = model.young_daly_interval_min(2048, RSC1_RF, 30.0)
    expected = math.sqrt(2 * (30 / 86400) / (2048 * RSC1_RF)) * 1440
    assert interval == pytest.approx(expected)
    assert interval == pytest.approx(10.4, abs=0.05)


def test_closed_form_maximum_is_near_young_daly_and_beats_its_neighbours() -> None:
    """The exact maximiser of the closed form is within 10% of Young/Daly and no worse
    than intervals 20% shorter or longer."""
    probe = _job(16_384, 1.0, ckpt_write_s=30)
    best = model.best_interval_min(probe)
    young = model.young_daly_interval_min(probe.n_nodes, RSC1_RF, 30)
    assert best == pytest.approx(young, rel=0.1)
    at_best = model.expected_ettr(_job(16_384, best, ckpt_write_s=30))
    for factor in (0.8, 1.2):
        assert at_best >= model.expected_ettr(_job(16_384, best * factor, ckpt_write_s=30))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_nodes": 0},
        {"rf_per_node_day": -1e-3},
        {"ckpt_interval_min": 0},
        {"restart_min": -1},
        {"ckpt_write_s": float("nan")},
    ],
)
def test_job_parameters_are_checked_at_construction(kwargs: dict[str, float]) -> None:
    """Non-positive sizes, rates or intervals, and negative overheads are refused."""
    values = {"n_nodes": 2, "rf_per_node_day": 1e-3, "restart_min": 5, "ckpt_interval_min": 60}
    with pytest.raises(ValueError):
        model.JobRun(**{**values, **kwargs})
