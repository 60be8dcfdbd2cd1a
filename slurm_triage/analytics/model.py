"""The failure and ETTR model of Kokolis et al. (2024), as pure functions of job parameters.

Pure Python on purpose: `slurm-triage mttf` and `slurm-triage ettr` use only this module,
so they answer in milliseconds without numpy or polars.

Units: r_f is failures per node-day; every other quantity carries its unit in its name.
Internally the formulas work in days, as the paper does.

- MTTF = 1 / (N_nodes * r_f).
- E[ETTR] ~= (1 - N_nodes*r_f*(u0 + dt_cp/2)) / (1 + w_cp/dt_cp), valid while
  1/(N_nodes*r_f) >= 0.1 day; divided by (1 + N_nodes*r_f*q) for a queue wait q after every
  interruption (our derivation, not the paper's; q = 0 gives the paper's form exactly).
- Young/Daly optimal checkpoint interval: sqrt(2*w_cp / (N_nodes*r_f)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_PER_DAY = 1440.0
S_PER_DAY = 86400.0
HOURS_PER_DAY = 24.0
# The paper's bound on its first-order closed form: the job's MTTF is at least 0.1 day.
VALID_MIN_MTTF_DAYS = 0.1
DEFAULT_GPUS_PER_NODE = 8


def nodes_for_gpus(gpus: int, gpus_per_node: int = DEFAULT_GPUS_PER_NODE) -> int:
    """Whole nodes a job of `gpus` GPUs occupies: a 1-GPU job still dies with its node."""
    if gpus <= 0 or gpus_per_node <= 0:
        raise ValueError("gpus and gpus_per_node must be positive")
    return math.ceil(gpus / gpus_per_node)


def failures_per_day(n_nodes: float, rf_per_node_day: float) -> float:
    """Expected failures per day of wallclock for a job on n_nodes (Poisson rate)."""
    _check_positive(n_nodes=n_nodes, rf_per_node_day=rf_per_node_day)
    return n_nodes * rf_per_node_day


def mttf_hours(n_nodes: float, rf_per_node_day: float) -> float:
    """Mean time to failure of a job on n_nodes: 1/(N_nodes*r_f), in hours."""
    return HOURS_PER_DAY / failures_per_day(n_nodes, rf_per_node_day)


@dataclass(frozen=True, kw_only=True)
class JobRun:
    """The parameters of one job run that the ETTR model needs, with units in the names.

    `restart_min` is u0 (init and checkpoint load after every (re)start),
    `ckpt_interval_min` is dt_cp (productive time between checkpoints), `ckpt_write_s`
    is w_cp, and `queue_min` is q, the expected wait in the queue after every interruption.
    """

    n_nodes: float
    rf_per_node_day: float
    restart_min: float
    ckpt_interval_min: float
    ckpt_write_s: float = 0.0
    queue_min: float = 0.0

    def __post_init__(self) -> None:
        _check_positive(
            n_nodes=self.n_nodes,
            rf_per_node_day=self.rf_per_node_day,
            ckpt_interval_min=self.ckpt_interval_min,
        )
        _check_non_negative(
            restart_min=self.restart_min,
            ckpt_write_s=self.ckpt_write_s,
            queue_min=self.queue_min,
        )

    @property
    def failures_per_day(self) -> float:
        return self.n_nodes * self.rf_per_node_day

    @property
    def mttf_days(self) -> float:
        return 1.0 / self.failures_per_day

    @property
    def restart_days(self) -> float:
        return self.restart_min / MIN_PER_DAY

    @property
    def interval_days(self) -> float:
        return self.ckpt_interval_min / MIN_PER_DAY

    @property
    def write_days(self) -> float:
        return self.ckpt_write_s / S_PER_DAY

    @property
    def queue_days(self) -> float:
        return self.queue_min / MIN_PER_DAY


def expected_ettr(job: JobRun) -> float:
    """The closed form E[ETTR]; not clamped, so a negative value shows the form broke down."""
    lam = job.failures_per_day
    lost = lam * (job.restart_days + job.interval_days / 2.0)
    writes = 1.0 + job.write_days / job.interval_days
    queue = 1.0 + lam * job.queue_days
    return (1.0 - lost) / (writes * queue)


def closed_form_valid(job: JobRun) -> bool:
    """Whether the job is in the regime where the paper validated the closed form."""
    return job.mttf_days >= VALID_MIN_MTTF_DAYS


def young_daly_interval_min(n_nodes: float, rf_per_node_day: float, ckpt_write_s: float) -> float:
    """Young/Daly's first-order optimal checkpoint interval sqrt(2*w_cp/rate), in minutes."""
    _check_positive(ckpt_write_s=ckpt_write_s)
    lam = failures_per_day(n_nodes, rf_per_node_day)
    return math.sqrt(2.0 * (ckpt_write_s / S_PER_DAY) / lam) * MIN_PER_DAY


def best_interval_min(job: JobRun) -> float:
    """The interval that maximises the closed form itself, in minutes.

    Setting d/d(dt) of (c*dt - lam*dt^2/2)/(dt + w) to zero, with c = 1 - lam*u0, gives
    dt = -w + sqrt(w^2 + 2*c*w/lam): Young/Daly's sqrt(2w/lam) to first order in w.
    """
    _check_positive(ckpt_write_s=job.ckpt_write_s)
    lam, w = job.failures_per_day, job.write_days
    c = 1.0 - lam * job.restart_days
    if c <= 0:
        raise ValueError("restart overhead alone exceeds the MTTF; no interval helps")
    return (-w + math.sqrt(w * w + 2.0 * c * w / lam)) * MIN_PER_DAY


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, not {value!r}")


def _check_non_negative(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a number >= 0, not {value!r}")
