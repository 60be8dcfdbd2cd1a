"""Policies: pure callables over an immutable job history returning a Decision.

`default_chain(config.policy)` is what the decision runs; sites compose their own from the
steps in `rules` with `|`.
"""

from slurm_triage.policies.model import (
    Decision,
    Family,
    JobView,
    PastDecision,
    Policy,
    PolicyInput,
    Verdict,
    family,
    policy,
)
from slurm_triage.policies.rules import default_chain

__all__ = [
    "Decision",
    "Family",
    "JobView",
    "PastDecision",
    "Policy",
    "PolicyInput",
    "Verdict",
    "default_chain",
    "family",
    "policy",
]
