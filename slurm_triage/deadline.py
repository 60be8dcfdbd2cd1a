"""Call something that cannot be interrupted (a C library: pyslurm, NVML) under a deadline.

The call runs in a daemon thread; the caller stops waiting at the deadline and gets
`CallTimedOut`. The thread itself cannot be killed and is abandoned: that is the price of
never hanging a Prolog on a wedged driver or controller.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CallTimedOut(Exception):
    """The call did not return within its deadline (it may still be running, in `worker`)."""

    def __init__(self, message: str, worker: threading.Thread | None = None) -> None:
        super().__init__(message)
        self.worker = worker


def call_with_deadline(fn: Callable[[], T], timeout_s: float, name: str = "bounded-call") -> T:
    """fn()'s result or its exception, re-raised here; CallTimedOut past timeout_s."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    worker = threading.Thread(target=target, name=name, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise CallTimedOut(f"{name} did not finish within {timeout_s:g}s", worker)
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
