"""The node agent's kept facts (health_checks.fact_cache): used while at most max_age_s
old, dropped by forget(), and never refilled by a read that began before a forget() or
that is older than what is kept."""

from __future__ import annotations

from slurm_triage.health_checks.fact_cache import FactCache
from slurm_triage.health_checks.runner import FactError


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_a_fact_is_fresh_up_to_its_maximum_age() -> None:
    clock = Clock()
    kept = FactCache(30.0, clock)
    assert kept.fresh("nvml") == (False, None)
    kept.keep("nvml", "facts", kept.generation(), clock.now)
    clock.now += 30
    assert kept.fresh("nvml") == (True, "facts")
    clock.now += 0.001
    assert kept.fresh("nvml") == (False, None)


def test_a_failed_read_is_kept_as_it_came() -> None:
    """A hung mount probe's error is the next job start's answer too, at once."""
    kept = FactCache(30.0, Clock())
    error = FactError("reading mounts facts timed out after 5s")
    kept.keep("mounts", error, kept.generation(), 50.0)
    assert kept.fresh("mounts") == (True, error)


def test_forget_drops_the_named_sources_or_all() -> None:
    clock = Clock()
    kept = FactCache(30.0, clock)
    for source in ("nvml", "kernel", "mounts"):
        kept.keep(source, source, kept.generation(), clock.now)
    kept.forget("nvml")
    assert [kept.fresh(s)[0] for s in ("nvml", "kernel", "mounts")] == [False, True, True]
    kept.forget()
    assert [kept.fresh(s)[0] for s in ("nvml", "kernel", "mounts")] == [False, False, False]


def test_a_read_that_began_before_a_forget_is_not_kept() -> None:
    """An XID seen while the background read was under way: what it read may predate it."""
    clock = Clock()
    kept = FactCache(30.0, clock)
    generation, started = kept.generation(), clock.now
    kept.forget()
    kept.keep("kernel", "before the XID", generation, started)
    assert kept.fresh("kernel") == (False, None)
    kept.keep("kernel", "after", kept.generation(), clock.now)
    assert kept.fresh("kernel") == (True, "after")


def test_an_older_read_does_not_replace_a_newer_one() -> None:
    """A Prolog's read and the background one overlap: the later-started one stays."""
    clock = Clock()
    kept = FactCache(30.0, clock)
    generation = kept.generation()
    kept.keep("ib", "newer", generation, 60.0)
    kept.keep("ib", "older", generation, 55.0)
    clock.now = 70.0
    assert kept.fresh("ib") == (True, "newer")
