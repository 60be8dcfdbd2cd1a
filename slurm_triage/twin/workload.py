"""The twin's jobs: when they arrive, how many GPUs they take, how much work they need.

Three sources: the paper's job-size mix (analytics.synth: 1 to 8192 GPUs, lognormal run
times growing slowly with size, capped at the 7-day lifetime) at the scenario's offered
load; the (GPUs, run time) pairs of a site's sacct file, resampled, at the same load; or,
for validation, one stream of jobs per fixed size, each starting when the last finished.
Arrivals are a Poisson process whose rate makes the offered GPU-hours `load` times the
cluster's, so the same scenario keeps the cluster equally busy at any size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slurm_triage.analytics import synth
from slurm_triage.twin.scenario import Scenario, ScenarioError

HOURS_PER_DAY = 24.0


@dataclass(frozen=True)
class Workload:
    """Jobs in arrival order: submit time (s), GPUs, productive work needed (h)."""

    submit_s: np.ndarray
    gpus: np.ndarray
    work_h: np.ndarray
    source: str
    arrivals_per_day: float

    @property
    def count(self) -> int:
        return int(self.submit_s.size)


def build(scenario: Scenario) -> Workload:
    """The scenario's jobs; the same scenario and seed give the same jobs."""
    rng = np.random.default_rng([scenario.seed, 19, 1])
    if scenario.fixed_sizes_gpus:
        gpus = np.asarray(scenario.fixed_sizes_gpus, dtype=np.int64)
        work = np.full(gpus.size, scenario.fixed_work_days * HOURS_PER_DAY)
        return Workload(np.zeros(gpus.size), gpus, work, "fixed sizes", 0.0)
    if scenario.jobs_from:
        sizes, hours, source = _site_mix(Path(scenario.jobs_from), scenario)
        mean_gpu_hours = float(np.mean(sizes * hours))
    else:
        sizes, hours, source = np.empty(0), np.empty(0), "the paper's job mix (analytics.synth)"
        mean_gpu_hours = _paper_mean_gpu_hours(scenario.total_gpus)
    rate = scenario.load * scenario.total_gpus * HOURS_PER_DAY / mean_gpu_hours
    count = int(rng.poisson(rate * scenario.days))
    submit = np.sort(rng.uniform(0.0, scenario.days * 86400.0, count))
    if scenario.jobs_from:
        pick = rng.integers(0, sizes.size, count)
        gpus, work = sizes[pick], hours[pick]
    else:
        gpus, work = _paper_jobs(rng, count, scenario.total_gpus)
    return Workload(submit, gpus.astype(np.int64), work.astype(np.float64), source, rate)


def _paper_sizes(total_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    keep = total_gpus >= synth.SIZES
    probs = synth.SIZE_PROBS[keep]
    return synth.SIZES[keep], probs / probs.sum()


def _paper_jobs(rng: np.random.Generator, count: int, total_gpus: int) -> tuple[np.ndarray, ...]:
    sizes, probs = _paper_sizes(total_gpus)
    gpus = rng.choice(sizes, count, p=probs)
    median = synth.DURATION_MEDIAN_H * gpus.astype(np.float64) ** synth.DURATION_EXPONENT
    hours = np.minimum(
        median * np.exp(rng.normal(0.0, synth.DURATION_SIGMA, count)), synth.MAX_RUN_H
    )
    return gpus, np.maximum(hours, 1.0 / 60.0)


def _paper_mean_gpu_hours(total_gpus: int) -> float:
    """E[GPUs x run time] of the paper's mix, exactly: E[min(X, cap)] of a lognormal X."""
    sizes, probs = _paper_sizes(total_gpus)
    sigma, cap = synth.DURATION_SIGMA, synth.MAX_RUN_H
    total = 0.0
    for size, p in zip(sizes.tolist(), probs.tolist(), strict=True):
        median = synth.DURATION_MEDIAN_H * size**synth.DURATION_EXPONENT
        z = math.log(cap / median) / sigma
        capped = median * math.exp(sigma**2 / 2) * _phi(z - sigma) + cap * (1.0 - _phi(z))
        total += p * size * capped
    return total


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _site_mix(path: Path, scenario: Scenario) -> tuple[np.ndarray, np.ndarray, str]:
    """(GPUs, hours) of the COMPLETED GPU attempts of a sacct file that fit the cluster."""
    from slurm_triage.analytics.ingest import read_sacct_file

    attempts = read_sacct_file(path).attempts
    done = attempts.filter(
        (attempts["state"] == "COMPLETED")
        & (attempts["gpus"] > 0)
        & (attempts["gpus"] <= scenario.total_gpus)
        & (attempts["elapsed_s"] > 0)
    )
    if done.height == 0:
        raise ScenarioError(f"{path}: no COMPLETED GPU job that fits {scenario.total_gpus} GPUs")
    gpus = done["gpus"].to_numpy().astype(np.int64)
    hours = done["elapsed_s"].to_numpy() / 3600.0
    return gpus, np.minimum(hours, synth.MAX_RUN_H), f"{path} ({done.height:,} completed jobs)"
