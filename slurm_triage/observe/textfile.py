"""Files the metrics live in: written whole and atomically, under a bounded lock.

node_exporter's textfile collector reads `*.prom` files at every scrape, so a half-written
file must never be seen: we write a hidden temporary file in the same directory (its name
does not end in `.prom`), make it 0644 (node_exporter runs as its own user), fsync and
rename it over the old one. Writers of one file (concurrent decisions, a Prolog beside a
health check) are serialised with an flock taken for at most `LOCK_WAIT_S`: an older
snapshot renamed over a newer one would make counters go back, which Prometheus reads as a
reset. Past the wait we give up (`MetricsBusy`) rather than hold up a Prolog.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

LOCK_WAIT_S = 1.0


class MetricsBusy(OSError):
    """Another process held the lock for longer than we may wait."""


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace `path` with `text` in one rename; the file gets `mode` whatever the umask."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, mode)
    except FileExistsError:
        # Left by a killed writer with our pid, or planted (a link to another file): never
        # written through, only removed (a sticky directory refuses another user's).
        os.unlink(tmp)
        fd = os.open(tmp, flags, mode)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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
