"""The actuator: the only code that changes Slurm state, always through the Slurm door.

`jobs.carry_out` carries a job end's Decision out (requeue, hold, release, cancel, exclusions,
begin time, drains, AdminComment); `nodes.carry_out_node` a health run's NodeDecision (drain,
resume) and `nodes.mark_failing` the circuit breaker's node Comment; `commands` a person's
own `slurm-triage slurm ACTION`; `repair` a node's repair (reboot, GPU reset request,
burn-in reservation and job, RMA, suspect weight and feature: issue 16). Both carry-outs
and the repairs are dry-run capable: with `policy.act = false` they change nothing and say
so in what they return, so the dry run is recorded.
Policies (slurm_triage.policies) decide; nothing else in slurm_triage calls the door's
mutating methods (tests/unit/test_architecture.py checks it).

Each name is imported from its module on first use (PEP 562): every EpilogSlurmctld needs
`jobs`, not the node side (`nodes`, and with it the node policy and the health checks'
result types) (issue 20).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurm_triage.actuator.jobs import (
        Applied,
        accounted_comment,
        admin_comment,
        carry_out,
    )
    from slurm_triage.actuator.nodes import carry_out_node, clear_failing_mark, mark_failing

_HOME = {
    "Applied": "jobs",
    "accounted_comment": "jobs",
    "admin_comment": "jobs",
    "carry_out": "jobs",
    "carry_out_node": "nodes",
    "clear_failing_mark": "nodes",
    "mark_failing": "nodes",
}

__all__ = [
    "Applied",
    "accounted_comment",
    "admin_comment",
    "carry_out",
    "carry_out_node",
    "clear_failing_mark",
    "mark_failing",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
