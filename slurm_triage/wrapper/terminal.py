"""The controlling terminal, for interactive use (`srun --pty slurm-triage wrap -- bash`).

The child runs in its own process group, which is not the terminal's foreground group: a
child reading the terminal would be stopped by SIGTTIN. So when the wrapper holds the
terminal's foreground it hands it to the child's group, and takes it back once the child is
gone. Keys like Ctrl-C then signal the child's group directly, as without the wrapper. In a
batch job stdin is not a terminal and none of this happens.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from slurm_triage.wrapper.plain_signal import signal


def give_terminal(pgid: int, fd: int = 0) -> int | None:
    """Make `pgid` the foreground of the terminal on `fd` if we hold it; our group, or None."""
    try:
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return None
        with _ttou_blocked():
            os.tcsetpgrp(fd, pgid)
    except OSError:
        return None
    if _stopped(pgid):  # it read the terminal before it was its own: let it go on
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGCONT)
    return os.getpgrp()


def take_terminal(pgid: int | None, fd: int = 0) -> None:
    """Give the terminal's foreground back to `pgid` (ours); nothing if we never gave it."""
    if pgid is None:
        return
    # We are in the background now: tcsetpgrp would stop us with SIGTTOU unless blocked.
    with contextlib.suppress(OSError), _ttou_blocked():
        os.tcsetpgrp(fd, pgid)


@contextlib.contextmanager
def _ttou_blocked() -> Iterator[None]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTTOU])
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[:1] == [b"T"]
