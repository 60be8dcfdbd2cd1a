"""What a cumulative counter is judged against between two runs, across counter resets.

The counters the checks watch (ECC aggregate, NVLink errors, PCIe replays, InfiniBand port
counters, PCIe AER totals) only grow, except when they restart lower: a reboot, a driver
reload, an openibd restart, an ECC counter clear, a replaced board. A value below the last
one saved is such a restart, and is judged as a counter seen for the first time: what it
holds now was counted some time since the restart, when is unknown (each check's first-sight
rule: the AER and ECC counts only warn). Judged against 0 instead, the boot-time AER noise
of a node the repair flow just rebooted drained it again at its first Prolog. The runner
saves the lower value as the new baseline, so a later rise from it is judged as any rise.
"""

from __future__ import annotations


def judged_against(now: int, before: int | None) -> int | None:
    """The value `now` must exceed to have risen: `before`; None when there is nothing to
    compare with: no earlier value, or a restart (now < before) that makes it a first sight."""
    if before is None or now < before:
        return None
    return before
