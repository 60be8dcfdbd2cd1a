"""Run a training command as a child and end exactly as it ended.

The wrapper must be invisible to srun, slurmstepd and sacct: same exit code, and when the
child dies of a signal the wrapper dies of that signal too (`exit_like`). Signals sent to
the wrapper (SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGCONT) go on to the child's
process group; after a SIGTERM that we forwarded (or sent: terminate()) the group gets
SIGKILL once the grace period is over. A SIGTERM that slurmstepd gave the child itself arms
no SIGKILL: Slurm sends its own after KillWait or GraceTime, and we must not be stricter.
When the child has exited, whatever is left of its group, and any descendant that escaped
it with setsid (we are their subreaper), is killed and reaped, so no orphan outlives the
step and no zombie is left behind.

Signals are taken synchronously: the main thread blocks them (helper threads inherit the
mask) and waits in sigtimedwait(), which also says who sent each one. That matters under
Slurm: slurmstepd signals every process of a step itself (proctrack/cgroup and linuxproc),
so the child already has what slurmstepd sent us, and forwarding it would deliver it twice
(a trainer would checkpoint twice, or die of the second SIGUSR1 while exiting from the
first). Those are not forwarded; signals from anyone else are. The child is started with
posix_spawn, with the signal mask and dispositions we were started with.
"""

from __future__ import annotations

import contextlib
import os
import resource
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from slurm_triage.frozen import Frozen
from slurm_triage.wrapper.plain_signal import signal
from slurm_triage.wrapper.reap import (
    become_subreaper,
    has_children,
    kill_descendants,
    signal_group,
)
from slurm_triage.wrapper.terminal import give_terminal, take_terminal

FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)
# Blocked in the main thread and every helper thread; the main loop waits for them.
MAIN_THREAD_SIGNALS = (*FORWARDED_SIGNALS, signal.SIGCHLD)
# What subprocess resets in a child (Python ignores SIGPIPE; an ignored signal survives exec).
_CHILD_DEFAULTS = (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED_SIGNALS)
REAP_TIMEOUT_S = 5.0


class SpawnError(Exception):
    """The command could not be started (not found, not executable, ...)."""

    def __init__(self, argv0: str, error: OSError) -> None:
        self.argv0, self.error = argv0, error
        super().__init__(self.message)

    @property
    def message(self) -> str:
        if isinstance(self.error, FileNotFoundError):
            return f"{self.argv0}: command not found"
        if isinstance(self.error, PermissionError):
            return f"{self.argv0}: permission denied"
        return f"{self.argv0}: cannot run: {self.error.strerror or self.error}"


class ChildExit(Frozen):
    """How the child ended: exactly one of exit_code / signal_number is meaningful."""

    exit_code: int | None
    signal_number: int | None
    core_dumped: bool = False

    @classmethod
    def from_returncode(cls, returncode: int) -> ChildExit:
        return cls(None, -returncode) if returncode < 0 else cls(returncode, None)

    @classmethod
    def from_status(cls, status: int) -> ChildExit:
        """From a raw wait() status, keeping the core-dump flag."""
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
    Use as a context manager, entered before any helper thread starts: the signals are
    blocked on entry (none is lost during the spawn: it waits, pending) and unblocked on
    exit. `already_delivered(sender_pid)` says whether the child has a signal already
    (slurmstepd's, see the module doc); those are not forwarded, and a SIGTERM among them
    arms no SIGKILL.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        kill_grace_s: float = 25.0,
        env: Mapping[str, str] | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        already_delivered: Callable[[int], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if kill_grace_s < 0:
            raise ValueError("kill_grace_s must be >= 0")
        self._argv = list(argv)
        self._grace_s = kill_grace_s
        self._env = dict(os.environ if env is None else env)
        self._stdout, self._stderr = stdout, stderr
        self._already_delivered = already_delivered
        self._clock = clock
        self.pid: int | None = None
        self._exit: ChildExit | None = None
        self._kill_at: float | None = None
        self._killed = False
        self._mask: set[int] = set()  # the mask we were started with
        self._terminal: int | None = None
        self.skipped = 0  # signals not forwarded because the child had them from slurmstepd

    def __enter__(self) -> Supervisor:
        self._mask = {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)}
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.pid is not None and self._exit is None:
            take_terminal(self._terminal)
            self._kill_everything()  # we are leaving on an error: take the child with us
        # What arrived after the child's end was for the child; do not let it hit us now.
        while signal.sigtimedwait(FORWARDED_SIGNALS, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)

    def start(self) -> int:
        """Spawn the child; SpawnError when it cannot be run."""
        become_subreaper()
        actions = [
            (os.POSIX_SPAWN_DUP2, fd, target)
            for fd, target in ((self._stdout, 1), (self._stderr, 2))
            if fd is not None
        ]
        try:
            # Our own fds are close-on-exec; what our parent passed on purpose (srun's
            # PMI_FD for MPI) reaches the command as it would without us.
            self.pid = os.posix_spawnp(
                self._argv[0],
                self._argv,
                self._env,
                file_actions=actions,
                setpgroup=0,
                setsigmask=self._mask,
                setsigdef=_CHILD_DEFAULTS,
            )
        except OSError as exc:
            raise SpawnError(self._argv[0], exc) from None
        self._terminal = give_terminal(self.pid)
        return self.pid

    def terminate(self) -> None:
        """SIGTERM the child's group now and SIGKILL it after the grace period."""
        self._deliver(signal.SIGTERM, forward=True)

    def wait(self, tick_s: float, on_tick: Callable[[], None] = lambda: None) -> ChildExit:
        """Block until the child exits (forwarding signals meanwhile); then clean up its group."""
        if self.pid is None:
            raise RuntimeError("start() the child first")
        while self._exit is None:
            timeout = tick_s
            if self._kill_at is not None:
                timeout = max(0.0, min(timeout, self._kill_at - self._clock()))
            info = signal.sigtimedwait(MAIN_THREAD_SIGNALS, timeout)
            while info is not None:
                self._on_signal(info)
                info = signal.sigtimedwait(MAIN_THREAD_SIGNALS, 0)
            self._reap_ready()
            if self._exit is None:
                self._escalate()
                on_tick()
        take_terminal(self._terminal)
        self._kill_everything()
        return self._exit

    # -- signals --------------------------------------------------------------------------
    def _on_signal(self, info: signal.struct_siginfo) -> None:
        if info.si_signo == signal.SIGCHLD or self._exit is not None:
            return  # reaping follows; after the child's end there is nobody to forward to
        check = self._already_delivered
        forward = check is None or not check(info.si_pid)
        if not forward:
            self.skipped += 1
        self._deliver(info.si_signo, forward)

    def _deliver(self, signum: int, forward: bool) -> None:
        if self.pid is None or self._exit is not None:
            return
        if not forward:
            # slurmstepd's SIGTERM (time limit, scancel, preemption) reached the child by the
            # same path its SIGKILL will, after KillWait or the partition's GraceTime, which
            # sites raise so that jobs can checkpoint: a SIGKILL of ours would cut that short
            # (and `scancel --signal=TERM` is followed by no SIGKILL at all).
            return
        signal_group(self.pid, signum)
        # A SIGTERM only we passed on has no SIGKILL of Slurm's behind it that reaches the
        # child (a user's kill, proctrack/pgid, our own terminate()): the grace bounds it.
        if signum == signal.SIGTERM and self._kill_at is None and not self._killed:
            self._kill_at = self._clock() + self._grace_s

    def _escalate(self) -> None:
        if self._kill_at is not None and self._clock() >= self._kill_at and self.pid:
            signal_group(self.pid, signal.SIGKILL)
            # Once is enough: a process stuck in D state dies when the kernel lets it, and
            # re-arming would spin this loop at a zero timeout until then.
            self._kill_at = None
            self._killed = True

    # -- reaping --------------------------------------------------------------------------
    def _reap_ready(self) -> None:
        """Collect every exited child: ours (its status), and orphans we adopted."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self._exit = ChildExit.from_status(status)

    def _kill_everything(self) -> None:
        """SIGKILL the child's group and every descendant we adopted, then reap them all."""
        assert self.pid is not None
        signal_group(self.pid, signal.SIGKILL)
        if self._exit is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if has_children():  # else nothing to find: spare the scan of all of /proc
            kill_descendants(os.getpid())
        deadline = self._clock() + REAP_TIMEOUT_S
        while self._clock() < deadline:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == self.pid and self._exit is None:
                self._exit = ChildExit.from_status(status)
            if pid == 0:
                time.sleep(0.005)


def exit_like(child: ChildExit) -> int:
    """Return the child's exit code, or kill ourselves with the child's signal."""
    if child.signal_number is None:
        return child.exit_code or 0
    sig = child.signal_number
    # The child already dumped core if it was going to; the wrapper must not add its own.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    if sig in (signal.SIGTERM, signal.SIGKILL):
        wait_for_readers((1, 2))
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these cannot have handlers
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    # Only signals whose default action is to ignore (SIGCHLD, SIGURG, ...) get here.
    return 128 + sig


# srun stops copying a step's output as soon as a task is reported dead of SIGTERM or
# SIGKILL (slurm_step_launch_wait_finish: "Force Terminated", then client_io_handler_abort),
# so a rank's last lines still in slurmstepd's pipe are lost: the summary of a rank that srun
# ended along with the failing one was missing from the job log. Before dying of those two
# signals, the wrapper lets the reader take what is in its stdout and stderr pipes first.
DRAIN_TIMEOUT_S = 1.0
# Past the pipe, slurmstepd still passes the bytes on to srun, which writes them; our death
# reaches srun on another connection.
DRAIN_SETTLE_S = 0.05


def wait_for_readers(
    fds: Sequence[int],
    timeout_s: float = DRAIN_TIMEOUT_S,
    settle_s: float = DRAIN_SETTLE_S,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait (at most `timeout_s`) until every pipe among `fds` has been read empty, then
    `settle_s`; files, terminals and closed descriptors are not waited for. False when a
    pipe was still holding data at the timeout."""
    pipes = [fd for fd in fds if _is_pipe(fd)]
    if not pipes:
        return True
    deadline = clock() + timeout_s
    while any(_unread(fd) for fd in pipes):
        if clock() >= deadline:
            return False
        time.sleep(0.005)
    time.sleep(settle_s)
    return True


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe; 0 where the ioctl is refused (nothing is waited for)."""
    import fcntl
    import termios  # FIONREAD's number differs between architectures

    buffer = bytearray(4)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buffer)
    except OSError:
        return 0
    return int.from_bytes(buffer, "little", signed=True)
