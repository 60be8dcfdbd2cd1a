"""Calls that cannot be interrupted are waited for only up to their deadline."""

from __future__ import annotations

import threading
import time

import pytest

from slurm_triage.deadline import CallTimedOut, call_with_deadline


def test_result_and_exception_pass_through() -> None:
    """The call's value is returned and its exception re-raised in the caller."""
    assert call_with_deadline(lambda: 42, 1.0) == 42
    with pytest.raises(KeyError):
        call_with_deadline(lambda: {}["x"], 1.0)


def test_a_stuck_call_is_abandoned_at_the_deadline() -> None:
    """A call that never returns costs the caller the deadline, not forever."""
    never = threading.Event()
    started = time.monotonic()
    with pytest.raises(CallTimedOut, match="stuck did not finish within 0.2s"):
        call_with_deadline(never.wait, 0.2, "stuck")
    assert time.monotonic() - started < 1.0
    never.set()
