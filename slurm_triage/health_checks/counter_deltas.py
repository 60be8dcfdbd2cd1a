"""What a cumulative counter is judged against between two runs, across counter resets.

The counters the checks watch (ECC aggregate, NVLink errors, PCIe replays, InfiniBand port
counters, PCIe AER totals) only grow, except when they restart from zero: a reboot, a
driver reload, an openibd restart, an ECC counter clear. A value below the last one saved
is such a reset, and everything counted since it is new: judged against 0, not against the
old value, which would hide every rise until the counter passed the old value again.
"""

from __future__ import annotations


def judged_against(now: int, before: int | None) -> int | None:
    """The value `now` must exceed to have risen: `before`, or 0 after a reset (now <
    before); None when there was no earlier value (nothing to compare)."""
    if before is None:
        return None
    return 0 if now < before else before
