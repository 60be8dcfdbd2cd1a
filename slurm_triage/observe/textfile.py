"""Files the metrics live in: written whole and atomically, under a bounded lock.

node_exporter's textfile collector reads `*.prom` files at every scrape, so a half-written
file must never be seen: slurm_triage.atomic writes a hidden temporary file in the same
directory (its name does not end in `.prom`), 0644 (node_exporter runs as its own user),
and renames it over the old one. Writers of one file (concurrent decisions, a Prolog beside a
health check) are serialised with an flock taken for at most `LOCK_WAIT_S`: an older
snapshot renamed over a newer one would make counters go back, which Prometheus reads as a
reset. Past the wait we give up (`MetricsBusy`) rather than hold up a Prolog.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_WAIT_S = 1.0


class MetricsBusy(OSError):
    """Another process held the lock for longer than we may wait."""


@contextmanager
def locked(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold an exclusive flock on `<path>.lock` (created 0600) while the body runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise MetricsBusy(
                        f"{lock}: held by another process for over {wait_s:g}s"
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
