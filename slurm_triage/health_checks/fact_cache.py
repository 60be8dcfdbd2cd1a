"""Facts of a node kept between runs of its checks, each for at most `max_age_s`.

The node agent (agent.server) reads the facts the Prolog's screen needs in the background
(FactSources.refresh) and each Prolog it serves evaluates its checks on them (a pure step)
instead of reading NVML, the kernel log, AER, the links and the mounts again for every job
start (45-60 ms, most of the agent's answer: issue 20). A fact older than `max_age_s` is
not used: the run reads it itself, as without the agent, and keeps what it read. What was
read is kept as it came, a failed read (FactError) included: a hung mount probe is then
UNKNOWN for the next job starts at once rather than after each one's own timeout.

`forget()` drops facts at once: the agent calls it when its XID watcher sees an XID and
when NVML is let go for a GPU reset. A read that began before a forget() is not kept (it
may predate what the forget was for).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class FactCache:
    """Fact source name -> (what its read gave, when it was read), thread-safe."""

    def __init__(self, max_age_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s, self._clock = max_age_s, clock
        self._lock = threading.Lock()
        self._facts: dict[str, tuple[Any, float]] = {}
        self._generation = 0  # forget() calls so far
        self._hung: dict[str, threading.Thread] = {}  # reads abandoned at their timeout

    def generation(self) -> int:
        """Taken before a read, handed to keep() after it."""
        with self._lock:
            return self._generation

    def fresh(self, source: str) -> tuple[bool, Any]:
        """(True, what the last read gave) if it is at most max_age_s old, else (False,
        None)."""
        with self._lock:
            kept = self._facts.get(source)
        if kept is None or self._clock() - kept[1] > self.max_age_s:
            return False, None
        return True, kept[0]

    def keep(self, source: str, value: Any, generation: int, read_at: float) -> None:
        """Keep what a read started at `read_at` gave, unless forget() ran since
        `generation` was taken or a newer read is already kept."""
        with self._lock:
            if generation != self._generation:
                return
            kept = self._facts.get(source)
            if kept is None or kept[1] <= read_at:
                self._facts[source] = (value, read_at)

    def forget(self, *sources: str) -> None:
        """Drop the facts of `sources` (none named: all), and every read under way."""
        with self._lock:
            self._generation += 1
            for source in sources or tuple(self._facts):
                self._facts.pop(source, None)

    def now(self) -> float:
        return self._clock()

    def abandoned(self, source: str, worker: threading.Thread) -> None:
        """A read of `source` timed out and goes on in `worker` (an NVML call cannot be
        interrupted)."""
        with self._lock:
            self._hung[source] = worker

    def still_reading(self, source: str) -> bool:
        """An abandoned read of `source` is still running: starting another beside it would
        add one more stuck thread."""
        with self._lock:
            worker = self._hung.get(source)
            if worker is not None and not worker.is_alive():
                del self._hung[source]
                worker = None
        return worker is not None
