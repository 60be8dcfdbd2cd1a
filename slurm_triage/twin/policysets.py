"""The policy sets the twin compares, and how a site names its own variants.

- `none`: nothing requeues a job; its user resubmits it after a delay (a new job, at the
  back of the queue).
- `native`: Slurm's own: batch jobs submitted with --requeue are requeued after NODE_FAIL,
  on any node, up to MaxBatchRequeue, then held (JobHeldAdmin); other failures are left to
  the user, as with `none`.
- `triage`: ours: every failure is decided by `policies.default_chain` and carried out by
  `actuator.carry_out` through the simulated door (requeue with exclusion, budgets,
  backoff, drains on root evidence, lemons); our Prolog screens nodes; our periodic health
  check drains (circuit breaker included) and, with repair on, resumes the nodes we drained
  once they pass again.

Every set runs on the same cluster with the same faults and jobs, and the site's own
periodic checks and operators (scenario.py) are there in all of them. A variant of
`triage` is `NAME=KEY=VALUE[,KEY=VALUE...]` (replay.settings: [policy] keys, breaker_*
keys, lemons/repair/prolog=on|off).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from slurm_triage.config import HealthConfig, PolicyConfig
from slurm_triage.replay.settings import changes, variant
from slurm_triage.twin.scenario import ScenarioError


class Kind(enum.StrEnum):
    NONE = "none"
    NATIVE = "native"
    TRIAGE = "triage"


@dataclass(frozen=True)
class PolicySet:
    name: str
    kind: Kind
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    repair: bool = True  # our health check resumes the nodes we drained once they pass
    prolog: bool = True  # our Prolog screens each node before a job starts there

    def describe(self) -> str:
        if self.kind is Kind.NONE:
            return "no requeue: users resubmit failed jobs"
        if self.kind is Kind.NATIVE:
            return "Slurm's --requeue after NODE_FAIL, no exclusion, MaxBatchRequeue"
        changed = changes(self.policy, self.health, repair=self.repair, prolog=self.prolog)
        return "slurm-triage" + (f" ({', '.join(changed)})" if changed else "")


def builtin(
    name: str, policy: PolicyConfig | None = None, health: HealthConfig | None = None
) -> PolicySet:
    """`none`, `native` or `triage` (with the given [policy] and [health], else the
    defaults)."""
    try:
        kind = Kind(name)
    except ValueError:
        raise ScenarioError(
            f"unknown policy set {name!r}; expected none, native, triage or a --variant name"
        ) from None
    return PolicySet(name, kind, policy or PolicyConfig(), health or HealthConfig())


def parse(
    names: str,
    variants: list[str],
    base: PolicyConfig | None = None,
    health: HealthConfig | None = None,
) -> list[PolicySet]:
    """The sets of `--policies a,b,c` (built-ins or variant names) with `--variant`s; a
    variant not named in --policies is appended. `base` and `health` (the site's config)
    are what `triage` runs with and what variants change."""
    defined: list[PolicySet] = []
    for text in variants:
        v = variant(text, base, health, reserved=(*tuple(Kind), *(d.name for d in defined)))
        defined.append(PolicySet(v.name, Kind.TRIAGE, v.policy, v.health, v.repair, v.prolog))
    by_name = {v.name: v for v in defined}
    chosen: list[PolicySet] = []
    for raw in (n.strip() for n in names.split(",")):
        if raw:
            chosen.append(by_name[raw] if raw in by_name else builtin(raw, base, health))
    chosen += [v for v in defined if v not in chosen]
    if not chosen:
        raise ScenarioError("no policy set to simulate")
    if len({c.name for c in chosen}) != len(chosen):
        raise ScenarioError("a policy set is named twice")
    return chosen
