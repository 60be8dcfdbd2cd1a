"""Cheap watching while the child runs: progress (hang detection) and memory (peak RSS).

Both are polled from the supervisor's main loop at its tick, never per output chunk.
`HangDetector` is pure: it is fed readings (a clock, the pumps' byte counters, the heartbeat
file's mtime) and says when the child has made no progress for the configured time.
"""

from __future__ import annotations

import os

from slurm_triage.frozen import Frozen

TYPE_CHECKING = False  # typing's flag without importing typing; mypy takes it as true
if TYPE_CHECKING:
    from typing import Any

# Never poll more often than this, nor less often (a 30-minute timeout still ticks at 5 s).
MIN_TICK_S = 0.05
MAX_TICK_S = 5.0
RSS_INTERVAL_S = 5.0


def tick_for(hang_timeout_s: float) -> float:
    """The main loop's wake-up interval: a quarter of the hang timeout, within bounds."""
    if hang_timeout_s <= 0:
        return MAX_TICK_S
    return min(MAX_TICK_S, max(MIN_TICK_S, hang_timeout_s / 4))


def heartbeat_mtime(path: str) -> int | None:
    """The heartbeat file's mtime in ns, or None when it is missing or unreadable."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class HangDetector:
    """Declares a hang when neither output nor heartbeat changed for `timeout_s` seconds."""

    def __init__(self, timeout_s: float, now: float) -> None:
        if timeout_s <= 0:
            raise ValueError("hang timeout must be > 0 (0 means off: make no detector)")
        self.timeout_s = timeout_s
        self._last_progress = now
        self._last_reading: tuple[int, int | None] = (0, None)

    def observe(self, now: float, output_bytes: int, heartbeat_ns: int | None) -> float | None:
        """Seconds without progress once that reaches the timeout, else None."""
        reading = (output_bytes, heartbeat_ns)
        if reading != self._last_reading:
            self._last_reading = reading
            self._last_progress = now
            return None
        idle = now - self._last_progress
        return idle if idle >= self.timeout_s else None


class Usage(Frozen):
    """Resource figures of one wrapped run (bytes and CPU seconds)."""

    peak_tree_rss_bytes: int
    child_max_rss_bytes: int
    child_cpu_s: float
    wrapper_cpu_s: float
    wrapper_max_rss_bytes: int


class TreeRss:
    """Peak of the summed RSS of the child and its descendants, sampled every few seconds."""

    def __init__(self, pid: int, interval_s: float = RSS_INTERVAL_S) -> None:
        self._pid = pid
        self._interval_s = interval_s
        self._next = 0.0
        self.peak = 0
        self._psutil: Any = None

    def maybe_sample(self, now: float) -> None:
        if now < self._next:
            return
        self._next = now + self._interval_s
        self.peak = max(self.peak, self._sample())

    def _sample(self) -> int:
        if self._psutil is None:
            import psutil  # only once the first sample is due: start-up stays fast

            self._psutil = psutil
        ps = self._psutil
        try:
            root = ps.Process(self._pid)
            procs = [root, *root.children(recursive=True)]
        except ps.Error:
            return 0
        total = 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except ps.Error:
                continue  # it exited between the listing and the read
        return total


def usage_now(tree_peak: int) -> Usage:
    """Resource figures from getrusage, once the child has been reaped."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(
        peak_tree_rss_bytes=tree_peak,
        child_max_rss_bytes=children.ru_maxrss * 1024,  # Linux reports KiB
        child_cpu_s=children.ru_utime + children.ru_stime,
        wrapper_cpu_s=me.ru_utime + me.ru_stime,
        wrapper_max_rss_bytes=me.ru_maxrss * 1024,
    )
