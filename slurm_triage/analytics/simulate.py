"""Monte Carlo simulator of job runs, vectorised over runs with numpy.

It checks the closed form of `model.expected_ettr` and shows where it breaks. One run needs
`work_days` of productive time; its life is a sequence of attempts, each of which:
1. waits in the queue (exponential with mean q, or exactly q; the nodes are not held, so
   nothing fails while queued);
2. pays the restart overhead u0 (on the first start too: initialisation is unproductive);
3. computes in chunks of dt_cp, each followed by a checkpoint write of w_cp (none after
   the last chunk);
4. dies at the first failure of a Poisson process of rate N_nodes*r_f running from the
   start of step 2, losing everything since the last completed checkpoint write.
ETTR = work_days / wallclock. Each loop iteration advances every unfinished run by one
attempt, so the loop runs as often as the unluckiest run fails, not once per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from slurm_triage.analytics.model import JobRun

# A chunk whose attempt succeeds with probability below 1/this is hopeless: the expected
# number of attempts per chunk, exp(rate*(u0 + dt + w)), would make the loop endless.
MAX_EXPECTED_ATTEMPTS_PER_CHUNK = 1e4
MAX_ITERATIONS = 5_000_000


class HopelessRun(ValueError):
    """The job would (almost) never finish: failures come faster than one checkpoint."""


@dataclass(frozen=True)
class SimResult:
    """ETTR of `runs` simulated job runs, with per-run arrays for plots and tests."""

    runs: int
    work_days: float
    ettr: np.ndarray
    failures: np.ndarray
    wall_days: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.ettr.mean())

    @property
    def sem(self) -> float:
        """Standard error of the mean ETTR."""
        return float(self.ettr.std(ddof=1) / math.sqrt(self.runs)) if self.runs > 1 else 0.0

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.ettr, q))

    @property
    def mean_failures(self) -> float:
        return float(self.failures.mean())

    def summary(self) -> dict[str, float]:
        return {
            "runs": self.runs,
            "work_days": self.work_days,
            "mean": self.mean,
            "sem": self.sem,
            "p05": self.quantile(0.05),
            "p50": self.quantile(0.5),
            "p95": self.quantile(0.95),
            "mean_failures": self.mean_failures,
        }


def simulate(
    job: JobRun,
    *,
    work_days: float,
    runs: int,
    seed: int | None = None,
    queue: Literal["exponential", "fixed"] = "exponential",
) -> SimResult:
    """Simulate `runs` independent job runs; raises HopelessRun when they cannot finish."""
    if runs <= 0 or not work_days > 0:
        raise ValueError("runs and work_days must be positive")
    _check_feasible(job)
    rng = np.random.default_rng(seed)
    remaining = np.full(runs, float(work_days))
    wall = np.zeros(runs)
    failures = np.zeros(runs, dtype=np.int64)
    active = np.arange(runs)
    for _ in range(MAX_ITERATIONS):
        if active.size == 0:
            break
        wall[active] += _queue_waits(rng, job.queue_days, active.size, queue)
        finished, elapsed, progress = _attempt(job, remaining[active], rng)
        wall[active] += elapsed
        remaining[active] -= progress
        failures[active[~finished]] += 1
        active = active[~finished]
    else:
        raise HopelessRun(f"runs did not finish within {MAX_ITERATIONS} attempts")
    return SimResult(runs, float(work_days), work_days / wall, failures, wall)


def _check_feasible(job: JobRun) -> None:
    chunk = job.restart_days + job.interval_days + job.write_days
    if job.failures_per_day * chunk > math.log(MAX_EXPECTED_ATTEMPTS_PER_CHUNK):
        raise HopelessRun(
            f"MTTF {job.mttf_days * 1440:.3g} min is far below one restart plus one "
            "checkpoint interval: the job would essentially never finish"
        )


def _queue_waits(rng: np.random.Generator, mean_days: float, n: int, kind: str) -> np.ndarray:
    if mean_days <= 0:
        return np.zeros(n)
    if kind == "fixed":
        return np.full(n, mean_days)
    return rng.exponential(mean_days, n)


def _attempt(
    job: JobRun, remaining: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One attempt of each run: (finished?, wallclock spent, checkpointed work gained)."""
    dt, w, u0 = job.interval_days, job.write_days, job.restart_days
    writes = np.maximum(np.ceil(remaining / dt - 1e-12) - 1.0, 0.0)
    needed = u0 + remaining + w * writes
    fail_at = rng.exponential(1.0 / job.failures_per_day, remaining.size)
    finished = fail_at >= needed
    elapsed = np.where(finished, needed, fail_at)
    # Chunks whose write completed before the failure are kept; a failure can never
    # land after the last write, since that would mean the attempt had finished.
    saved = np.floor(np.maximum(fail_at - u0, 0.0) / (dt + w)) * dt
    progress = np.where(finished, remaining, np.minimum(saved, remaining))
    return finished, elapsed, progress
