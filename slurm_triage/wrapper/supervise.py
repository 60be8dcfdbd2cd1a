"""Run a training command as a child and end exactly as it ended.

The wrapper must be invisible to srun, slurmstepd and sacct: same exit code, and when the
child dies of a signal the wrapper dies of that signal too. Slurm's signals (preemption
and time-limit warnings via --signal, scancel's SIGTERM) go to the child's process group;
after a SIGTERM the group gets SIGKILL once the grace period (< Slurm's KillWait) is over.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)


@dataclass(frozen=True)
class ChildExit:
    """How the child ended: exactly one of exit_code / signal_number is meaningful."""

    exit_code: int | None
    signal_number: int | None

    @classmethod
    def from_returncode(cls, returncode: int) -> ChildExit:
        return cls(None, -returncode) if returncode < 0 else cls(returncode, None)


class Supervisor:
    """Starts the child in its own process group and forwards our signals to that group."""

    def __init__(self, argv: Sequence[str], *, kill_grace_s: float = 25.0) -> None:
        self._argv = list(argv)
        self._grace_s = kill_grace_s
        self._child: subprocess.Popen[bytes] | None = None
        self._kill_timer: threading.Timer | None = None

    def run(self) -> ChildExit:
        previous = {sig: signal.signal(sig, self._forward) for sig in FORWARDED_SIGNALS}
        try:
            self._child = subprocess.Popen(self._argv, process_group=0)
            returncode = self._child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self._kill_timer:
                self._kill_timer.cancel()
        self._reap_group()
        return ChildExit.from_returncode(returncode)

    def _forward(self, signum: int, _frame: object) -> None:
        child = self._child
        if child is None or child.returncode is not None:
            return
        _signal_group(child.pid, signum)
        if signum == signal.SIGTERM and self._kill_timer is None:
            self._kill_timer = threading.Timer(
                self._grace_s, _signal_group, args=(child.pid, signal.SIGKILL)
            )
            self._kill_timer.daemon = True
            self._kill_timer.start()

    def _reap_group(self) -> None:
        # Grandchildren left in the child's group (dataloader workers) must not outlive us.
        if self._child is not None:
            _signal_group(self._child.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def exit_like(child: ChildExit) -> int:
    """Return the child's exit code, or kill ourselves with the child's signal."""
    if child.signal_number is None:
        return child.exit_code or 0
    sig = child.signal_number
    # The child already dumped core if it was going to; the wrapper must not add its own.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these cannot have handlers
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    # Only signals whose default action is to ignore (SIGCHLD, SIGURG, ...) get here.
    return 128 + sig
