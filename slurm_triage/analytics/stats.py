"""Exact (Garwood) confidence intervals for a Poisson count, in pure Python.

scipy is not a dependency, so the chi-square quantiles of the textbook form are found by
bisection on the Poisson CDF, written as the regularized incomplete gamma function:
P(X <= k; mu) = Q(k + 1, mu). Q is evaluated with the series or the continued fraction of
Numerical Recipes (ch. 6.2), whichever converges there, with math.lgamma for the prefactor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

_EPS = 1e-15
_MAX_TERMS = 1_000_000
_TINY = 1e-300


@dataclass(frozen=True)
class RateInterval:
    """A rate `events / exposure` with its exact two-sided interval at `confidence`."""

    events: int
    exposure: float
    rate: float
    low: float
    high: float
    confidence: float


def regularized_gamma_p(a: float, x: float) -> float:
    """P(a, x), the regularized lower incomplete gamma function, for a > 0, x >= 0."""
    if a <= 0 or x < 0:
        raise ValueError("need a > 0 and x >= 0")
    if x == 0:
        return 0.0
    if x < a + 1.0:
        return _gamma_series(a, x)
    return 1.0 - _gamma_continued_fraction(a, x)


def _gamma_series(a: float, x: float) -> float:
    term = total = 1.0 / a
    n = a
    for _ in range(_MAX_TERMS):
        n += 1.0
        term *= x / n
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gamma_continued_fraction(a: float, x: float) -> float:
    """Q(a, x) by the modified Lentz method; converges fast for x >= a + 1."""
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_TERMS):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def poisson_cdf(k: int, mu: float) -> float:
    """P(X <= k) for X ~ Poisson(mu)."""
    if k < 0:
        return 0.0
    if mu <= 0:
        return 1.0
    return 1.0 - regularized_gamma_p(k + 1.0, mu)


def _bisect(f: Callable[[float], float], low: float, high: float) -> float:
    """Root of an increasing function on [low, high], to relative precision ~1e-12."""
    for _ in range(200):
        mid = 0.5 * (low + high)
        if f(mid) > 0:
            high = mid
        else:
            low = mid
        if high - low <= 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


def poisson_mean_interval(events: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval for a Poisson mean after observing `events` (Garwood 1936)."""
    if events < 0:
        raise ValueError("events must be >= 0")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    tail = (1.0 - confidence) / 2.0
    top = events + 20.0 * math.sqrt(events + 1.0) + 20.0
    # Upper: the mean under which seeing <= events has probability `tail`.
    high = _bisect(lambda mu: tail - poisson_cdf(events, mu), 0.0, top)
    if events == 0:
        return 0.0, high
    # Lower: the mean under which seeing >= events has probability `tail`.
    low = _bisect(lambda mu: (1.0 - poisson_cdf(events - 1, mu)) - tail, 0.0, top)
    return low, high


def rate_interval(events: int, exposure: float, confidence: float = 0.95) -> RateInterval:
    """events/exposure with its exact interval; NaNs when there is no exposure."""
    if exposure <= 0:
        nan = math.nan
        return RateInterval(events, exposure, nan, nan, nan, confidence)
    low, high = poisson_mean_interval(events, confidence)
    return RateInterval(
        events, exposure, events / exposure, low / exposure, high / exposure, confidence
    )
