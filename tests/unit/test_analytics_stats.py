"""Exact Poisson intervals, checked against published Garwood (chi-square) values."""

from __future__ import annotations

import math

import pytest

from slurm_triage.analytics import stats


@pytest.mark.parametrize(
    ("events", "low", "high"),
    [(0, 0.0, 3.6889), (1, 0.0253, 5.5716), (10, 4.7954, 18.3904), (100, 81.3640, 121.6268)],
)
def test_interval_matches_chi_square_tables(events: int, low: float, high: float) -> None:
    """95% limits equal chi2(0.025, 2k)/2 and chi2(0.975, 2k+2)/2 to four decimals."""
    got = stats.poisson_mean_interval(events, 0.95)
    assert got[0] == pytest.approx(low, abs=1e-4)
    assert got[1] == pytest.approx(high, abs=1e-4)


@pytest.mark.parametrize(("k", "mu"), [(0, 0.5), (3, 2.0), (20, 25.0), (7, 30.0)])
def test_poisson_cdf_equals_the_direct_sum(k: int, mu: float) -> None:
    """The incomplete-gamma CDF agrees with summing the probability mass function."""
    direct = sum(math.exp(-mu + i * math.log(mu) - math.lgamma(i + 1)) for i in range(k + 1))
    assert stats.poisson_cdf(k, mu) == pytest.approx(direct, rel=1e-10)


def test_interval_has_the_promised_coverage_at_its_ends() -> None:
    """At the upper limit P(X <= k) is 2.5%; at the lower limit P(X >= k) is 2.5%."""
    low, high = stats.poisson_mean_interval(42, 0.95)
    assert stats.poisson_cdf(42, high) == pytest.approx(0.025, abs=1e-9)
    assert 1 - stats.poisson_cdf(41, low) == pytest.approx(0.025, abs=1e-9)


def test_large_counts_are_fast_and_near_normal() -> None:
    """A million events: the interval is about rate +- 1.96 sqrt(k)."""
    low, high = stats.poisson_mean_interval(1_000_000)
    assert low == pytest.approx(1_000_000 - 1.96 * 1000, rel=1e-4)
    assert high == pytest.approx(1_000_000 + 1.96 * 1000, rel=1e-4)


def test_rate_interval_scales_by_exposure() -> None:
    """Rate and limits are counts divided by node-days."""
    interval = stats.rate_interval(10, 1000.0)
    assert interval.rate == pytest.approx(0.01)
    assert interval.low == pytest.approx(0.0047954, rel=1e-4)


def test_no_exposure_gives_not_a_number() -> None:
    """Without node-days there is no rate, not a rate of zero."""
    assert math.isnan(stats.rate_interval(0, 0.0).rate)
