"""A small progress bar on stderr, drawn only when stderr is a terminal (no dependency).

Logs and pipes never see carriage returns: off a TTY every call is a no-op.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

WIDTH = 30
MIN_REDRAW_S = 0.1


class ProgressBar:
    """`bar(done, total)` redraws; `bar.close()` ends the line. Usable as a callback."""

    def __init__(self, label: str, stream: TextIO | None = None, unit: str = "") -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = bool(getattr(self._stream, "isatty", lambda: False)())
        self._label = label
        self._unit = unit
        self._drawn_at = 0.0
        self._started = time.monotonic()
        self._shown = False

    @property
    def enabled(self) -> bool:
        return self._enabled

    def __call__(self, done: int, total: int) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._drawn_at < MIN_REDRAW_S and done < total:
            return
        self._drawn_at = now
        fraction = min(done / total, 1.0) if total > 0 else 1.0
        filled = int(WIDTH * fraction)
        bar = "#" * filled + "-" * (WIDTH - filled)
        elapsed = now - self._started
        self._stream.write(
            f"\r{self._label} [{bar}] {fraction:4.0%} {done:,}{self._unit} {elapsed:5.1f}s"
        )
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._enabled and self._shown:
            self._stream.write("\n")
            self._stream.flush()


class Phases:
    """`with phases("plots"):` writes one line per phase of a long command on stderr, its
    name and how long it took, so nothing sits silent after the bar reached 100%. Off a
    terminal it writes nothing, like the bar."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = bool(getattr(self._stream, "isatty", lambda: False)())

    @property
    def enabled(self) -> bool:
        return self._enabled

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        if self._enabled:
            self._stream.write(f"{name} ...")
            self._stream.flush()
        try:
            yield
        finally:
            if self._enabled:
                self._stream.write(f" {time.monotonic() - started:.1f}s\n")
                self._stream.flush()
