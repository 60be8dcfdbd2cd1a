"""What the twin simulates: the cluster, its faults, the job mix, detection, repair.

One frozen `Scenario` with units in the names; every value is checked at construction and a
bad one is a one-line ScenarioError (exit 2). The defaults are the paper's cluster (Kokolis
et al. 2024, RSC-1: 2,000 nodes of 8 GPUs, r_f 6.5 per 1000 node-days, lemons 1.2% of
nodes, hourly checkpoints, 5-minute restarts); the rest are modelling assumptions, said
where they are set and in docs/twin.md.

Faults: every node has a Poisson process of fault events; `rf_per_node_day` is the
cluster-wide mean, so with lemons the other nodes run at rf / (1 - share + share * factor).
Each fault has a cause drawn from FAULT_KINDS (shares: analytics.synth's failure mix, the
paper's top contributors, with NODE_FAIL's share). A fault kills the job(s) on the node
(a GPU fault only the job holding that GPU); with probability `persistent` it stays until
the node is repaired, killing every job that starts there (a black hole). Periodic health
checks and the Prolog see a persistent fault with probability `visible`; the attribution
backs it with root-collected evidence with probability `root`. A lemon's extra faults are
intermittent: they kill jobs and then pass every check, which is what makes it a lemon.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from slurm_triage.errors import TriageError
from slurm_triage.taxonomy import Cause


class ScenarioError(TriageError):
    """A scenario value is out of range; the message names it and what it accepts."""


@dataclass(frozen=True)
class FaultKind:
    """How one cause of fault behaves in the twin (modelling assumptions)."""

    cause: Cause
    share: float  # of fault events
    scope: Literal["gpu", "node"]  # a GPU fault kills only the job holding that GPU
    persistent: float  # probability the fault stays until the node is repaired
    visible: float  # probability health checks and the Prolog see it while it stays
    root: float  # probability root-collected evidence backs the attribution
    check: str = ""  # the health check (health_checks.registry) that sees it


# Shares: analytics.synth.FAILURE_CAUSES (the paper's top contributors: IB, mounts, GPU
# memory, PCIe) scaled to 65%, and NODE_FAIL's 35% (synth.NODE_FAIL_SHARE). A NODE_FAIL
# takes the node down for a reboot (Slurm's own state: root evidence, nothing persists).
FAULT_KINDS: tuple[FaultKind, ...] = (
    FaultKind(Cause.NODE_FAILURE, 0.350, "node", 0.0, 1.0, 1.0),
    FaultKind(Cause.INFINIBAND, 0.163, "node", 0.5, 0.8, 0.8, "ib.ports"),
    FaultKind(Cause.FILESYSTEM, 0.130, "node", 0.3, 0.9, 0.8, "fs.mounts"),
    FaultKind(Cause.GPU_MEMORY, 0.117, "gpu", 0.5, 0.6, 0.9, "gpu.row_remap"),
    FaultKind(Cause.PCIE, 0.078, "gpu", 0.5, 0.5, 0.8, "pcie.aer"),
    FaultKind(Cause.GPU_UNAVAILABLE, 0.065, "gpu", 0.7, 0.9, 0.95, "gpu.lost"),
    FaultKind(Cause.GPU_NVLINK, 0.032, "gpu", 0.5, 0.7, 0.9, "gpu.nvlink"),
    FaultKind(Cause.HOST_HARDWARE, 0.026, "node", 0.3, 0.3, 0.8, "host.memory"),
    FaultKind(Cause.GPU_DRIVER, 0.026, "gpu", 0.2, 0.5, 0.8, "gpu.xid"),
    FaultKind(Cause.HEALTH_CHECK, 0.013, "node", 0.5, 1.0, 1.0, "gpu.ecc"),
)
# The user causes of jobs that fail on their own (analytics.synth.USER_CAUSES' main ones).
USER_CAUSES = (Cause.USER_CODE, Cause.CUDA_OOM, Cause.SEGFAULT, Cause.CUDA_USER_ERROR)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One simulated cluster and period. Times carry their unit in the name."""

    nodes: int = 2000
    gpus_per_node: int = 8
    days: float = 30.0
    # Runs first started before this are left out of ETTR and goodput (the cluster fills).
    warmup_days: float = 2.0
    seed: int = 0
    # Faults: cluster-wide fault events per node-day; lemons as in the paper. The factor
    # makes lemons carry 71% of faults, so removing them takes the failure rate of 512+ GPU
    # jobs from 14% to about 4% (the paper's figures): 0.012 F / (0.988 + 0.012 F) = 0.71.
    rf_per_node_day: float = 6.5e-3
    lemon_share: float = 0.012
    lemon_factor: float = 200.0
    persistent_scale: float = 1.0  # multiplies FAULT_KINDS' persistence (0: all transient)
    # Workload: the paper's job-size mix (analytics.synth) at this offered GPU load, or the
    # sizes and run times of a site's sacct file; single job sizes for validation.
    load: float = 0.85
    jobs_from: str = ""
    fixed_sizes_gpus: tuple[int, ...] = ()  # one job stream per size, back to back
    fixed_work_days: float = 5.0
    user_failure_share: float = 0.15  # attempts a user error ends (paper: FAILED 24%)
    # The job's own recovery: restart overhead u0, checkpoint interval and write time.
    restart_min: float = 5.0
    ckpt_interval_min: float = 60.0
    ckpt_write_s: float = 0.0
    # Detection. Attribution names the right cause and node with this probability (else
    # `unknown`, or `nccl_timeout` for a multi-node job, blaming nobody); of those, a
    # multi-node job's blame lands on another of its nodes with `misblame` (a cascade
    # misread); a user's error reads as a root-backed hardware fault with
    # `user_misattribution`. Root evidence: FaultKind.root.
    attribution_accuracy: float = 0.9
    misblame: float = 0.03
    user_misattribution: float = 0.002
    prolog_catch: float = 0.9  # of visible persistent faults, at a job's start (triage)
    check_interval_min: float = 5.0  # periodic health checks (every policy set)
    blackhole_min: float = 3.0  # a job on a broken node dies this long after it starts
    # Nodes: reboot after a NODE_FAIL; reset of a node drained with no fault left; repair of
    # a persistent fault; RMA of a node drained as a lemon, which fixes it with lemon_fix.
    reboot_h: float = 1.0
    reset_h: float = 2.0
    repair_h: float = 24.0
    rma_h: float = 120.0
    lemon_fix: float = 0.85
    # Operators: every admin_review_h they drain nodes that failed admin_drain_failures
    # jobs since the last review; with repair off they return our drained nodes after
    # admin_return_h; held jobs are resubmitted after hold_release_h.
    admin_review_h: float = 24.0
    admin_drain_failures: int = 3
    admin_return_h: float = 72.0
    hold_release_h: float = 12.0
    # Users resubmit a job that failed and was not requeued after this mean delay.
    resubmit_delay_h: float = 2.0
    # Slurm: requeue delay (120 s: cred_expire's default), MaxBatchRequeue, scheduler.
    requeue_delay_s: float = 120.0
    max_batch_requeue: int = 5
    sched_interval_s: float = 30.0
    backfill_depth: int = 100
    # A job requeued after a failure keeps its priority and may preempt (requeue) jobs of
    # lower priority that have run this long (the paper's "preemptible after 2 h"); 0
    # turns preemption off. Preempted jobs lose their work since the last checkpoint.
    preempt_after_h: float = 2.0
    preemption: bool = True
    sample_interval_h: float = 1.0

    def __post_init__(self) -> None:
        _check(self)

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def base_rate_per_day(self) -> float:
        """Fault rate of a node that is not a lemon."""
        return self.rf_per_node_day / (
            1.0 - self.lemon_share + self.lemon_share * self.lemon_factor
        )

    def but(self, **changes: object) -> Scenario:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


_POSITIVE = ("days", "rf_per_node_day", "ckpt_interval_min", "fixed_work_days", "lemon_factor")
_NON_NEGATIVE = (
    "warmup_days",
    "restart_min",
    "ckpt_write_s",
    "persistent_scale",
    "check_interval_min",
    "blackhole_min",
    "reboot_h",
    "reset_h",
    "repair_h",
    "rma_h",
    "admin_return_h",
    "hold_release_h",
    "resubmit_delay_h",
    "requeue_delay_s",
    "sched_interval_s",
    "preempt_after_h",
)
_SHARES = (
    "lemon_share",
    "user_failure_share",
    "attribution_accuracy",
    "misblame",
    "user_misattribution",
    "prolog_catch",
    "lemon_fix",
)
MAX_NODES = 65_536


def _check(s: Scenario) -> None:
    if not 1 <= s.nodes <= MAX_NODES:
        raise ScenarioError(f"nodes must be 1 to {MAX_NODES}, not {s.nodes}")
    if not 1 <= s.gpus_per_node <= 64:
        raise ScenarioError(f"gpus per node must be 1 to 64, not {s.gpus_per_node}")
    for name in _POSITIVE:
        value = getattr(s, name)
        if not (math.isfinite(value) and value > 0):
            raise ScenarioError(f"{name} must be a number > 0, not {value!r}")
    for name in _NON_NEGATIVE:
        value = getattr(s, name)
        if not (math.isfinite(value) and value >= 0):
            raise ScenarioError(f"{name} must be a number >= 0, not {value!r}")
    for name in _SHARES:
        value = getattr(s, name)
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ScenarioError(f"{name} must be within [0, 1], not {value!r}")
    if not (math.isfinite(s.load) and 0.0 <= s.load <= 2.0):
        raise ScenarioError(f"load must be within [0, 2], not {s.load!r}")
    if s.warmup_days >= s.days:
        raise ScenarioError(f"warmup_days ({s.warmup_days:g}) must be below days ({s.days:g})")
    if s.rf_per_node_day > 1.0:
        raise ScenarioError(f"rf per node-day must be at most 1, not {s.rf_per_node_day:g}")
    if s.sample_interval_h <= 0 or s.admin_review_h <= 0:
        raise ScenarioError("sample and admin review intervals must be > 0")
    if s.backfill_depth < 1 or s.max_batch_requeue < 0 or s.admin_drain_failures < 1:
        raise ScenarioError("backfill depth and admin drain failures must be >= 1")
    for gpus in s.fixed_sizes_gpus:
        if not 1 <= gpus <= s.total_gpus:
            raise ScenarioError(f"job size {gpus} GPUs does not fit {s.total_gpus} GPUs")
