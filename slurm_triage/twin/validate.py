"""The twin against the model: uniform nodes, no policy, one job stream per size.

With every node failing at r_f per node-day, nothing persisting, no lemons, no user errors
and no queue after a failure, a job on N nodes must see failures at N * r_f (MTTF
1/(N_nodes r_f)), and its ETTR must be what the closed form (analytics.model) and the
project's Monte Carlo (analytics.simulate) say. The defaults are the paper's validation
setup (hourly checkpoints, 5-minute restarts, no checkpoint write time) at RSC-2's r_f,
where the closed form holds up to 16k GPUs (MTTF 0.21 day there, above its 0.1-day bound);
at RSC-1's 6.5e-3, 16k-GPU jobs leave that regime and only the Monte Carlo still applies.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from slurm_triage.analytics import model, simulate, stats
from slurm_triage.twin import policysets, run
from slurm_triage.twin.measure import BUCKET_LABELS, bucket_of
from slurm_triage.twin.scenario import Scenario

SIZES_GPUS = (1024, 2048, 4096, 8192, 16384)
TOLERANCE = 0.02  # the bound on the ETTR gap


@dataclass(frozen=True)
class Row:
    gpus: int
    nodes: int
    failures: int
    mttf_model_h: float
    mttf_twin_h: float
    mttf_low_h: float  # 95% exact Poisson interval of the twin's MTTF
    mttf_high_h: float
    ettr_closed_form: float
    closed_form_valid: bool
    ettr_monte_carlo: float
    ettr_twin: float

    @property
    def gap_closed_form(self) -> float:
        return self.ettr_twin / self.ettr_closed_form - 1.0

    @property
    def gap_monte_carlo(self) -> float:
        return self.ettr_twin / self.ettr_monte_carlo - 1.0

    @property
    def mttf_in_interval(self) -> bool:
        return self.mttf_low_h <= self.mttf_model_h <= self.mttf_high_h

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "gap_closed_form": self.gap_closed_form,
            "gap_monte_carlo": self.gap_monte_carlo,
            "mttf_in_interval": self.mttf_in_interval,
        }


@dataclass(frozen=True)
class Validation:
    scenario: Scenario
    rows: tuple[Row, ...]
    seconds: float

    def passed(self, tolerance: float = TOLERANCE) -> bool:
        """Every size: ETTR within `tolerance` of the Monte Carlo, and of the closed form
        where it is valid; the model's MTTF inside the twin's 95% interval."""
        return all(
            abs(r.gap_monte_carlo) <= tolerance
            and (abs(r.gap_closed_form) <= tolerance or not r.closed_form_valid)
            and r.mttf_in_interval
            for r in self.rows
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "rf_per_node_day": self.scenario.rf_per_node_day,
            "restart_min": self.scenario.restart_min,
            "ckpt_interval_min": self.scenario.ckpt_interval_min,
            "ckpt_write_s": self.scenario.ckpt_write_s,
            "days": self.scenario.days,
            "nodes": self.scenario.nodes,
            "tolerance": TOLERANCE,
            "passed": self.passed(),
            "rows": [r.to_dict() for r in self.rows],
            "seconds": round(self.seconds, 2),
        }


def scenario(
    *,
    sizes_gpus: tuple[int, ...] = SIZES_GPUS,
    rf_per_node_day: float = 2.34e-3,
    restart_min: float = 5.0,
    ckpt_interval_min: float = 60.0,
    ckpt_write_s: float = 0.0,
    days: float = 60.0,
    work_days: float = 5.0,
    gpus_per_node: int = 8,
    seed: int = 0,
) -> Scenario:
    """The validation cluster: the streams' nodes plus 5% spares (a node that failed is
    down for its reboot; the job restarts at once on a spare)."""
    busy = sum(math.ceil(g / gpus_per_node) for g in sizes_gpus)
    return Scenario(
        nodes=busy + max(8, math.ceil(0.05 * busy)),
        gpus_per_node=gpus_per_node,
        days=days,
        warmup_days=0.0,
        seed=seed,
        rf_per_node_day=rf_per_node_day,
        lemon_share=0.0,
        persistent_scale=0.0,
        load=0.0,
        fixed_sizes_gpus=sizes_gpus,
        fixed_work_days=work_days,
        user_failure_share=0.0,
        restart_min=restart_min,
        ckpt_interval_min=ckpt_interval_min,
        ckpt_write_s=ckpt_write_s,
        resubmit_delay_h=0.0,
        requeue_delay_s=0.0,
        sched_interval_s=0.0,
        admin_drain_failures=10**9,
        preemption=False,
    )


def validate(setup: Scenario, *, mc_runs: int = 2000) -> Validation:
    """Run the twin with no policy on `setup` (from scenario()) and set each size's
    figures beside the model's."""
    result = run.compare(setup, [policysets.builtin("none")])
    twin = result.results[0]
    by_bucket = {b["bucket"]: b for b in twin.figures["buckets"]}
    rows = []
    for gpus in setup.fixed_sizes_gpus:
        bucket = by_bucket[BUCKET_LABELS[bucket_of(gpus)]]
        nodes = math.ceil(gpus / setup.gpus_per_node)
        job = model.JobRun(
            n_nodes=nodes,
            rf_per_node_day=setup.rf_per_node_day,
            restart_min=setup.restart_min,
            ckpt_interval_min=setup.ckpt_interval_min,
            ckpt_write_s=setup.ckpt_write_s,
        )
        mc = simulate.simulate(
            job, work_days=setup.fixed_work_days, runs=mc_runs, seed=setup.seed, queue="fixed"
        )
        hours, failures = _exposure(twin.figures, bucket)
        interval = stats.rate_interval(failures, hours)
        rows.append(
            Row(
                gpus=gpus,
                nodes=nodes,
                failures=failures,
                mttf_model_h=model.mttf_hours(nodes, setup.rf_per_node_day),
                mttf_twin_h=hours / failures if failures else math.inf,
                mttf_low_h=1.0 / interval.high if interval.high > 0 else 0.0,
                mttf_high_h=1.0 / interval.low if interval.low > 0 else math.inf,
                ettr_closed_form=model.expected_ettr(job),
                closed_form_valid=model.closed_form_valid(job),
                ettr_monte_carlo=mc.mean,
                ettr_twin=float(bucket["ettr"]),
            )
        )
    return Validation(setup, tuple(rows), result.seconds)


def _exposure(figures: dict[str, Any], bucket: dict[str, Any]) -> tuple[float, int]:
    """A size's attempt hours and failures (one size per bucket in validation)."""
    del figures
    failures = int(bucket["failed_attempts"])
    hours = float(bucket["mttf_h"] * failures) if failures else 0.0
    return hours, failures
