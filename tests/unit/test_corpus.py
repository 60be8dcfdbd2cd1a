"""The labelled corpus: attribution must get every case right, cause and nodes, case by case."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from slurm_triage.attribution import attribute
from slurm_triage.attribution.hang import WATCHDOG_SIGNATURE
from slurm_triage.evidence import LogHit
from slurm_triage.frozen import replace
from slurm_triage.taxonomy import Cause
from tests.conftest import load_by_path

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
REQUIRED_HARD_CASES = {
    "hard:ecc-under-illegal-access",
    "hard:xid79-nccl-cascade",
    "hard:oom-one-rank-nccl-others",
    "hard:benign-oom-retries",
    "hard:xid13-31-user-fault",
    "hard:word-xid",
}


cases_module = load_by_path("corpus_cases", CORPUS / "cases.py")
CASES = cases_module.load_cases(CORPUS)


def test_corpus_is_big_enough_and_covers_every_cause_twice():
    """At least 80 cases, every taxonomy cause at least twice, every listed hard case present."""
    assert len(CASES) >= 80
    counts = Counter(case.cause for case in CASES)
    thin = {c.value: counts.get(c.value, 0) for c in Cause if counts.get(c.value, 0) < 2}
    assert not thin, f"causes with fewer than 2 cases: {thin}"
    tags = {tag for case in CASES for tag in case.spec.get("tags", [])}
    assert tags >= REQUIRED_HARD_CASES, f"missing hard cases: {REQUIRED_HARD_CASES - tags}"


def test_corpus_labels_are_valid_causes():
    """Each case names a real cause id, and node-less causes expect no nodes."""
    from slurm_triage.taxonomy import info

    for case in CASES:
        cause = Cause(case.cause)
        if not info(cause).blames_nodes:
            assert case.nodes == (), f"{case.name}: {cause} blames no nodes"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_case(case):
    """Each case on its own: cause and blamed nodes exactly as labelled (no overall gate that
    would let one case regress while the others carry the average)."""
    result = attribute(case.facts(), window=case.window())
    got = (result.cause.value, list(result.nodes))
    assert got == (case.cause, list(case.nodes)), f"{case.spec['description']}: {result.reason}"


def _tagged(tag: str) -> list:
    return [c for c in CASES if tag in c.spec.get("tags", [])]


@pytest.mark.parametrize("case", _tagged("window:excludes"), ids=lambda c: c.name)
def test_window_excludes_cases_need_the_window(case):
    """Cases whose decisive evidence lies outside the window would be misread without it."""
    with_window = attribute(case.facts(), window=case.window())
    without = attribute(case.facts())
    assert with_window.cause.value == case.cause
    assert without.cause.value != case.cause


@pytest.mark.parametrize("case", _tagged("window:keeps"), ids=lambda c: c.name)
def test_window_keeps_cases_read_the_same_with_the_window(case):
    """Evidence inside the window is kept: the answer is the same with or without it."""
    with_window = attribute(case.facts(), window=case.window())
    without = attribute(case.facts())
    assert with_window.cause.value == case.cause == without.cause.value


@pytest.mark.parametrize("case", _tagged("window:hang"), ids=lambda c: c.name)
def test_window_hang_cases_need_the_watchdogs_reach(case):
    """Cases whose root evidence lies before the window but within 10 minutes of the start
    of the collective a watchdog timed out: misread when the watchdog's line does not say how
    long the collective ran."""
    facts = case.facts()
    silent = [
        replace(f, excerpt=f.excerpt.partition(" ran for ")[0])
        if isinstance(f, LogHit) and f.signature == WATCHDOG_SIGNATURE
        else f
        for f in facts
    ]
    assert len(silent) == len(facts) and silent != facts
    assert attribute(facts, window=case.window()).cause.value == case.cause
    assert attribute(silent, window=case.window()).cause.value != case.cause
