"""The moment of a stamp written without its year (syslog's `Nov 24 15:30:39`, glog's
`E1124 15:30:39.408271`): the caller's year, the reference moment's in the stamp's own zone,
except that a stamp which would then lie more than AHEAD_S past this host's clock was written
the year before (a line of 31 December read on 1 January).
"""

from __future__ import annotations

import time

# datetime's classes from its C core, as logscan takes them (issue 20: datetime.py costs a
# classify ~1.5 ms). mypy reads datetime's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import datetime, tzinfo
else:
    try:
        from _datetime import datetime, tzinfo
    except ImportError:  # an interpreter without the C core
        from datetime import datetime, tzinfo

# A stamp may run this far ahead of this host's clock (another node's clock, skewed) and
# still be this year's.
AHEAD_S = 86400.0


def yearless_epoch(
    year: int, month: int, day: int, clock: tuple[int, int, int, int], tz: tzinfo | None
) -> float | None:
    """Epoch seconds of month-day `clock` (hour, minute, second, microsecond) in `year`, or
    in the year before when that would be more than AHEAD_S in the future; `tz` None is this
    host's zone. None when no such day exists (30 February, 29 February of a common year)."""
    stamp = _epoch(year, month, day, clock, tz)
    if stamp is None or stamp <= time.time() + AHEAD_S:
        return stamp
    return _epoch(year - 1, month, day, clock, tz)


def _epoch(
    year: int, month: int, day: int, clock: tuple[int, int, int, int], tz: tzinfo | None
) -> float | None:
    try:
        moment = datetime(year, month, day, *clock)
    except ValueError:
        return None
    return moment.replace(tzinfo=tz).timestamp() if tz is not None else moment.timestamp()
