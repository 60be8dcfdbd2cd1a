"""Every node's fault events over the simulated period, drawn once per scenario.

The same plan is replayed under every policy set (common random numbers): the sets differ
only in what they do about the faults, never in which faults happen. A lemon's faults
above the base rate are marked `lemon_extra`: once a repair fixes the lemon, they are
skipped (thinning a Poisson process leaves a Poisson process at the base rate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slurm_triage.twin.scenario import FAULT_KINDS, Scenario


@dataclass(frozen=True)
class FaultPlan:
    """Fault events in time order (parallel arrays) and the lemon nodes."""

    time_s: np.ndarray
    node: np.ndarray
    kind: np.ndarray  # index into FAULT_KINDS
    persistent: np.ndarray
    visible: np.ndarray
    gpu: np.ndarray  # the GPU a GPU-scoped fault hits
    lemon_extra: np.ndarray
    lemons: np.ndarray

    @property
    def count(self) -> int:
        return int(self.time_s.size)


def plan(scenario: Scenario) -> FaultPlan:
    rng = np.random.default_rng([scenario.seed, 19, 2])
    n, horizon_s = scenario.nodes, scenario.days * 86400.0
    lemons = np.sort(rng.choice(n, int(round(scenario.lemon_share * n)), replace=False))
    base = scenario.base_rate_per_day * scenario.days
    extra = base * (scenario.lemon_factor - 1.0)
    per_node = rng.poisson(base, n)
    per_lemon = rng.poisson(extra, lemons.size) if lemons.size else np.zeros(0, np.int64)
    nodes = np.concatenate([np.repeat(np.arange(n), per_node), np.repeat(lemons, per_lemon)])
    lemon_extra = np.concatenate(
        [np.zeros(int(per_node.sum()), bool), np.ones(int(per_lemon.sum()), bool)]
    )
    k = nodes.size
    shares = np.array([f.share for f in FAULT_KINDS])
    kind = rng.choice(len(FAULT_KINDS), k, p=shares / shares.sum())
    persistence = np.array([f.persistent for f in FAULT_KINDS]) * scenario.persistent_scale
    visibility = np.array([f.visible for f in FAULT_KINDS])
    persistent = (rng.uniform(0, 1, k) < persistence[kind]) & ~lemon_extra
    visible = rng.uniform(0, 1, k) < visibility[kind]
    gpu = rng.integers(0, scenario.gpus_per_node, k)
    times = rng.uniform(0.0, horizon_s, k)
    order = np.argsort(times, kind="stable")
    return FaultPlan(
        times[order],
        nodes[order].astype(np.int64),
        kind[order].astype(np.int64),
        persistent[order],
        visible[order],
        gpu[order].astype(np.int64),
        lemon_extra[order],
        lemons.astype(np.int64),
    )
