"""One bounded wait, for everything that waits on the dev cluster: daemons coming up, jobs
reaching a state, the demo's story, the restart benchmark (whose poll interval is its
timing resolution)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from slurm_triage.errors import TriageError

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.1,
    error: type[Exception] = TriageError,
    hint: Callable[[], str] | None = None,
) -> T:
    """Poll `probe` until it returns something truthy and return that; past `timeout_s`
    raise `error` naming `what` (and `hint()`, e.g. a daemon's last log line)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    extra = hint() if hint else ""
    raise error(f"timed out after {timeout_s:.0f}s waiting for {what}{extra}")
