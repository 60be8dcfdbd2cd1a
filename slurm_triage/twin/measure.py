"""What one twin run measures, and its result as plain data (JSON-able).

ETTR of a job run (Kokolis et al.: productive time over wallclock) is taken from its first
start to its completion, or to the end of the period for a run still going (its progress
so far counted): the first queue wait is the scheduler's doing, not reliability's, and is
reported apart (`first_wait_h`); every wait after an interruption counts. A size bucket's
ETTR is GPU-time weighted (sum of GPUs x productive hours over sum of GPUs x wallclock
hours). Runs first started during the warm-up, and runs a user's error ended, are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Upper bounds (GPUs) of the twin's size buckets: the paper's scales up to 16k GPUs.
BUCKET_BOUNDS = (8, 64, 256, 1024, 2048, 4096, 8192, 16384, math.inf)
BUCKET_LABELS = (
    "1-8",
    "9-64",
    "65-256",
    "257-1024",
    "1025-2048",
    "2049-4096",
    "4097-8192",
    "8193-16384",
    ">16384",
)
LARGE_GPUS = 512  # the paper's "large job" for the lemon figure (14% -> 4%)


def bucket_of(gpus: int) -> int:
    for i, bound in enumerate(BUCKET_BOUNDS):
        if gpus <= bound:
            return i
    return len(BUCKET_BOUNDS) - 1


@dataclass
class Bucket:
    runs: int = 0
    gpu_productive_h: float = 0.0
    gpu_wall_h: float = 0.0
    first_wait_h: float = 0.0
    attempts: int = 0
    failed_attempts: int = 0  # ended by an infrastructure failure
    attempt_hours: float = 0.0  # wallclock of attempts (for the measured MTTF)

    def to_dict(self, label: str) -> dict[str, Any]:
        return {
            "bucket": label,
            "runs": self.runs,
            "ettr": _ratio(self.gpu_productive_h, self.gpu_wall_h),
            "first_wait_h": _ratio(self.first_wait_h, self.runs),
            "attempts": self.attempts,
            "failed_attempts": self.failed_attempts,
            "mttf_h": _ratio(self.attempt_hours, self.failed_attempts),
        }


@dataclass
class Measure:
    """Counters and sums filled while the twin runs."""

    buckets: list[Bucket] = field(default_factory=lambda: [Bucket() for _ in BUCKET_LABELS])
    large_attempts: int = 0
    large_failed: int = 0
    large_runs: int = 0
    large_runs_failed: int = 0
    faults: int = 0
    job_failures: int = 0  # attempts ended by a fault (infrastructure)
    user_failures: int = 0
    completed_runs: int = 0
    requeues_slurm: int = 0
    requeues_ours: int = 0
    holds: int = 0
    preemptions: int = 0
    preempted_gpu_h_lost: float = 0.0
    resubmissions: int = 0
    prolog_catches: int = 0
    breaker_trips: int = 0
    drains: dict[str, int] = field(default_factory=dict)
    false_drains: int = 0
    lemons_drained: set[int] = field(default_factory=set)
    lemons_fixed: int = 0
    decisions: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    productive_gpu_h: float = 0.0
    allocated_gpu_h: float = 0.0
    series: list[tuple[float, int, int, int, int]] = field(default_factory=list)

    def drain(self, why: str, false: bool) -> None:
        self.drains[why] = self.drains.get(why, 0) + 1
        self.false_drains += int(false)


@dataclass(frozen=True)
class TwinResult:
    """One policy set's run: JSON-able figures (to_dict) and the series for plots."""

    policy: str
    description: str
    figures: dict[str, Any]
    series: list[tuple[float, int, int, int, int]]
    seconds: float

    def ettr_by_bucket(self) -> dict[str, float | None]:
        return {b["bucket"]: b["ettr"] for b in self.figures["buckets"] if b["runs"]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "description": self.description,
            **self.figures,
            "series": [
                {"hour": h, "drained": d, "down": w, "running_gpus": g, "queued": q}
                for h, d, w, g, q in self.series
            ],
            "seconds": round(self.seconds, 2),
        }


def figures(m: Measure, capacity_gpu_h: float, lemons: int) -> dict[str, Any]:
    """The JSON-able figures of a finished run."""
    return {
        "buckets": [b.to_dict(BUCKET_LABELS[i]) for i, b in enumerate(m.buckets) if b.runs],
        "goodput": _ratio(m.productive_gpu_h, capacity_gpu_h),
        "utilisation": _ratio(m.allocated_gpu_h, capacity_gpu_h),
        "large_jobs": {
            "min_gpus": LARGE_GPUS,
            "attempts": m.large_attempts,
            "failed_attempts": m.large_failed,
            "attempt_failure_rate": _ratio(m.large_failed, m.large_attempts),
            "runs": m.large_runs,
            "runs_with_failure": m.large_runs_failed,
            "run_failure_rate": _ratio(m.large_runs_failed, m.large_runs),
        },
        "faults": m.faults,
        "job_failures": m.job_failures,
        "user_failures": m.user_failures,
        "completed_runs": m.completed_runs,
        "requeues": {"slurm": m.requeues_slurm, "ours": m.requeues_ours},
        "holds": m.holds,
        "preemptions": m.preemptions,
        "preempted_gpu_h_lost": m.preempted_gpu_h_lost,
        "resubmissions": m.resubmissions,
        "prolog_catches": m.prolog_catches,
        "breaker_trips": m.breaker_trips,
        "drains": dict(sorted(m.drains.items())),
        "false_drains": m.false_drains,
        "lemons": {"nodes": lemons, "drained": len(m.lemons_drained), "fixed": m.lemons_fixed},
        "decisions": m.decisions,
        "verdicts": dict(sorted(m.verdicts.items())),
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None
