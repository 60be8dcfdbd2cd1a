"""Run the twin: one scenario, its workload and faults drawn once, every policy set over
them (in parallel worker processes when asked), our structured log quiet meanwhile.

The health actuator logs every drain and resume as a warning, as it should on a node; in a
simulation of thousands of drains those lines would drown the report, and every figure
they carry is counted in the result anyway.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from slurm_triage.logs import quiet
from slurm_triage.twin import faults as faults_mod
from slurm_triage.twin import workload as workload_mod
from slurm_triage.twin.engine import Inputs, Twin
from slurm_triage.twin.measure import TwinResult
from slurm_triage.twin.policysets import PolicySet
from slurm_triage.twin.scenario import Scenario


@dataclass(frozen=True)
class Comparison:
    """Every policy set's result on one scenario."""

    scenario: Scenario
    workload_source: str
    jobs: int
    fault_events: int
    lemons: int
    results: tuple[TwinResult, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "scenario": asdict(self.scenario),
            "workload": {"source": self.workload_source, "jobs": self.jobs},
            "fault_events": self.fault_events,
            "lemons": self.lemons,
            "policies": [r.to_dict() for r in self.results],
            "seconds": round(self.seconds, 2),
        }


def inputs(scenario: Scenario) -> Inputs:
    return Inputs(scenario, workload_mod.build(scenario), faults_mod.plan(scenario))


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Drop our log lines below CRITICAL for the duration, then restore the setup."""
    with quiet("critical"):
        yield


def run_one(made: Inputs, policy_set: PolicySet) -> TwinResult:
    with quiet_logs():
        return Twin(made, policy_set).run()


def _worker(args: tuple[Scenario, PolicySet]) -> TwinResult:
    scenario, policy_set = args
    return run_one(inputs(scenario), policy_set)


def compare(scenario: Scenario, sets: Sequence[PolicySet], workers: int = 1) -> Comparison:
    """Run every set on the scenario; `workers` > 1 runs them in that many processes
    (each draws the same workload and faults from the seed)."""
    started = time.perf_counter()
    made = inputs(scenario)
    if workers > 1 and len(sets) > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(sets))) as pool:
            results = tuple(pool.map(_worker, [(scenario, ps) for ps in sets]))
    else:
        results = tuple(run_one(made, ps) for ps in sets)
    return Comparison(
        scenario,
        made.workload.source,
        made.workload.count,
        made.faults.count,
        int(made.faults.lemons.size),
        results,
        time.perf_counter() - started,
    )
