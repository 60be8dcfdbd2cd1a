"""Run a training command as a child and end exactly as it ended.

The wrapper must be invisible to srun, slurmstepd and sacct: same exit code, and when the
child dies of a signal the wrapper dies of that signal too (`exit_like`). Slurm's signals
(preemption and time-limit warnings via --signal, scancel's SIGTERM) go to the child's
process group; after a SIGTERM the group gets SIGKILL once the grace period (< Slurm's
KillWait) is over. When the child has exited, whatever is left of its group, and any
descendant that escaped it with setsid (we are their subreaper), is killed and reaped, so
no orphan outlives the step and no zombie is left behind.

The main thread sleeps in select() on a wake-up pipe that the C-level signal handler
writes to (`signal.set_wakeup_fd`), so a signal is forwarded within microseconds and a
child's exit (SIGCHLD) is noticed at once; a periodic tick drives the watchers.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)
# Signals only the main thread may take: helper threads block these.
MAIN_THREAD_SIGNALS = (*FORWARDED_SIGNALS, signal.SIGCHLD)
_PR_SET_CHILD_SUBREAPER = 36
REAP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ChildExit:
    """How the child ended: exactly one of exit_code / signal_number is meaningful."""

    exit_code: int | None
    signal_number: int | None
    core_dumped: bool = False

    @classmethod
    def from_returncode(cls, returncode: int) -> ChildExit:
        return cls(None, -returncode) if returncode < 0 else cls(returncode, None)

    @classmethod
    def from_status(cls, status: int) -> ChildExit:
        """From a raw wait() status, keeping the core-dump flag subprocess drops."""
        if os.WIFSIGNALED(status):
            return cls(None, os.WTERMSIG(status), os.WCOREDUMP(status))
        return cls(os.WEXITSTATUS(status), None)

    @property
    def failed(self) -> bool:
        return self.signal_number is not None or self.exit_code != 0


class Supervisor:
    """Starts the child in its own process group, forwards our signals to it, reaps it.

    It owns every child of this process (it reaps with waitpid(-1) and makes the process a
    child subreaper), so it belongs in the wrapper process, not in a library caller's.
    Use as a context manager: signal handlers are installed on entry (before the child
    exists, so no signal is lost during the spawn) and the previous ones restored on exit.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        kill_grace_s: float = 25.0,
        env: Mapping[str, str] | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if kill_grace_s < 0:
            raise ValueError("kill_grace_s must be >= 0")
        self._argv = list(argv)
        self._grace_s = kill_grace_s
        self._env = dict(env) if env is not None else None
        self._stdout, self._stderr = stdout, stderr
        self._clock = clock
        self._child: subprocess.Popen[bytes] | None = None
        self._exit: ChildExit | None = None
        self._pending: list[int] = []
        self._kill_at: float | None = None
        self._killed = False
        self._previous: dict[int, Any] = {}
        self._wake: tuple[int, int] | None = None
        self._previous_wakeup = -1

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def __enter__(self) -> Supervisor:
        self._wake = os.pipe()
        for fd in self._wake:
            os.set_blocking(fd, False)
        self._previous_wakeup = signal.set_wakeup_fd(self._wake[1], warn_on_full_buffer=False)
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in FORWARDED_SIGNALS}
        self._previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, _ignore)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._previous_wakeup)
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
        if self._child is not None and self._exit is None:
            self._kill_everything()  # we are leaving on an error: take the child with us

    def start(self) -> int:
        """Spawn the child; FileNotFoundError / PermissionError when it cannot be run."""
        _become_subreaper()
        # close_fds=False: our own fds are non-inheritable anyway, and what our parent
        # passed on purpose (srun's PMI_FD for MPI) must reach the command as without us.
        self._child = subprocess.Popen(
            self._argv,
            process_group=0,
            env=self._env,
            stdout=self._stdout,
            stderr=self._stderr,
            close_fds=False,
        )
        for sig in self._pending:
            self._deliver(sig)
        self._pending.clear()
        return self._child.pid

    def terminate(self) -> None:
        """SIGTERM the child's group now and SIGKILL it after the grace period."""
        self._deliver(signal.SIGTERM)

    def wait(self, tick_s: float, on_tick: Callable[[], None] = lambda: None) -> ChildExit:
        """Block until the child exits (forwarding signals meanwhile); then clean up its group."""
        if self._child is None or self._wake is None:
            raise RuntimeError("start() the child first")
        while self._exit is None:
            timeout = tick_s
            if self._kill_at is not None:
                timeout = max(0.0, min(timeout, self._kill_at - self._clock()))
            select.select([self._wake[0]], [], [], timeout)
            _drain(self._wake[0])
            self._reap_ready()
            if self._exit is None:
                self._escalate()
                on_tick()
        self._kill_everything()
        assert self._exit is not None
        return self._exit

    # -- signals --------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._child is None:
            self._pending.append(signum)  # arrived during the spawn: deliver right after
        elif self._exit is None:
            self._deliver(signum)

    def _deliver(self, signum: int) -> None:
        if self._child is None or self._exit is not None:
            return
        _signal_group(self._child.pid, signum)
        if signum == signal.SIGTERM and self._kill_at is None and not self._killed:
            self._kill_at = self._clock() + self._grace_s

    def _escalate(self) -> None:
        if self._kill_at is not None and self._clock() >= self._kill_at and self._child:
            _signal_group(self._child.pid, signal.SIGKILL)
            # Once is enough: a process stuck in D state dies when the kernel lets it, and
            # re-arming would spin this loop at a zero timeout until then.
            self._kill_at = None
            self._killed = True

    # -- reaping --------------------------------------------------------------------------
    def _reap_ready(self) -> None:
        """Collect every exited child: ours (its status), and orphans we inherited."""
        assert self._child is not None
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self._child.pid:
                self._exit = ChildExit.from_status(status)
                # Tell Popen, which did not reap it itself, so it never waits again.
                self._child.returncode = os.waitstatus_to_exitcode(status)

    def _kill_everything(self) -> None:
        """SIGKILL the child's group and every descendant we adopted, then reap them all."""
        assert self._child is not None
        _signal_group(self._child.pid, signal.SIGKILL)
        if self._exit is None:
            _signal_process(self._child.pid, signal.SIGKILL)
        for pid in _descendants(os.getpid()):
            _signal_process(pid, signal.SIGKILL)
        deadline = self._clock() + REAP_TIMEOUT_S
        while self._clock() < deadline:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == self._child.pid and self._exit is None:
                self._exit = ChildExit.from_status(status)
                self._child.returncode = os.waitstatus_to_exitcode(status)
            if pid == 0:
                time.sleep(0.005)


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """SIGCHLD needs a Python handler for the wake-up fd to see it; the loop does the work."""


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while os.read(fd, 512):
            pass


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _signal_process(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _become_subreaper() -> None:
    """Adopt the orphans of the child's descendants (setsid'd helpers), so we can end them."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: killing the child's group is all we can do


def _descendants(root: int) -> list[int]:
    """Pids of every live descendant of `root`, from /proc (psutil would cost an import)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[0] != b"Z":
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


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
