"""Time, injected: wall time for records, a monotonic clock for deadlines, sleep for bounded
waits. The decision takes a Clock so tests set every time it reads and every wait it makes,
with no patching of the time module."""

from __future__ import annotations

import time as _time
from collections.abc import Callable

from slurm_triage.frozen import Frozen


class Clock(Frozen):
    time: Callable[[], float] = _time.time
    monotonic: Callable[[], float] = _time.monotonic
    sleep: Callable[[float], None] = _time.sleep


SYSTEM_CLOCK = Clock()
