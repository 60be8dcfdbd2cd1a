"""The agent's background reads of the Prolog's facts (health_checks.fact_cache).

One thread: it reads every fact the Prolog's checks need when it starts, then every
`every_s`, and at once when woken (an XID was seen, NVML was taken back after a GPU
reset), so that a job start finds fresh facts and only evaluates its checks. Reads are one
after another, each under health.check_timeout_s (FactSources), so a hung source delays the
others by that much at most; a Prolog that finds a fact too old reads it itself meanwhile.
A read that raises is a log line: the next one is tried at the next turn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from slurm_triage.logs import get_logger


class FactRefresher(threading.Thread):
    """Calls `refresh` now, every `every_s`, and when woken, until stopped."""

    def __init__(self, refresh: Callable[[], None], every_s: float, node: str) -> None:
        super().__init__(name="slurm-triage-agent-facts", daemon=True)
        self._refresh, self._every_s = refresh, every_s
        self._wake = threading.Event()
        self._stopping = False
        self._log = get_logger(component="agent.facts", node=node)

    def wake(self) -> None:
        """Read again now (or as soon as the read under way ends)."""
        self._wake.set()

    def stop(self, timeout_s: float = 3.0) -> None:
        self._stopping = True
        self._wake.set()
        if self.is_alive():
            self.join(timeout_s)

    def run(self) -> None:
        while not self._stopping:
            started = time.monotonic()
            try:
                self._refresh()
                # What each turn costs the node (a screen's reads): for a site sizing the age.
                self._log.debug("agent_facts_read", seconds=round(time.monotonic() - started, 4))
            except Exception as exc:  # our bug: Prologs read for themselves meanwhile
                self._log.warning(
                    "agent_facts_refresh_failed", error=f"{type(exc).__name__}: {exc}"
                )
            self._wake.wait(self._every_s)
            self._wake.clear()
