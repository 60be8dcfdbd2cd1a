"""The real-world corpus: error texts in the formats public tools really print, one test each.

Every case must be classified exactly as labelled (cause and blamed nodes); there is no
overall percentage, so no single case can regress unnoticed. See tests/realworld/README.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_triage.attribution import attribute
from slurm_triage.taxonomy import Cause, info
from tests.conftest import load_by_path

REALWORLD = Path(__file__).resolve().parents[1] / "realworld"


CASES = load_by_path("realworld_cases", REALWORLD / "cases.py").load_cases(REALWORLD)


def test_realworld_corpus_is_big_and_every_case_is_sourced_and_argued():
    """At least 100 cases; each names its public source, argues its label, uses a real cause."""
    assert len(CASES) >= 100
    for case in CASES:
        assert str(case.spec["source"]).strip(), f"{case.name}: empty source"
        assert str(case.spec["why"]).strip(), f"{case.name}: empty why"
        cause = Cause(case.cause)
        if not info(cause).blames_nodes:
            assert case.nodes == (), f"{case.name}: {cause} blames no nodes"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_realworld_case(case):
    """Cause and blamed nodes exactly as labelled."""
    result = attribute(case.facts(), window=case.window())
    got = (result.cause.value, list(result.nodes))
    want = (case.cause, list(case.nodes))
    assert got == want, f"{case.spec['description']}\nreason: {result.reason}"
