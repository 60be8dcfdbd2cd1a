"""Run one Slurm command under a hard deadline, with a bounded tenacity retry.

A hung scontrol (slurmctld wedged, a stuck NFS home, a fake that sleeps) must never hang a
Prolog or Epilog: each attempt runs in its own process group, which is SIGKILLed when the
deadline passes, so even a grandchild holding our pipes cannot keep us waiting.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from slurm_triage.frozen import Frozen
from slurm_triage.slurm.errors import (
    InvalidJobState,
    JobNotFound,
    NodeNotFound,
    NotRequeueable,
    NotYetAccounted,
    ReservationNotFound,
    SlurmCommandError,
    SlurmTimeout,
    SlurmUnavailable,
)

if TYPE_CHECKING:
    import tenacity

T = TypeVar("T")

# Slurm's clients print times as SLURM_TIME_FORMAT says (an admin's profile may set
# `relative`, "5 Jan 10:00", or a strftime format: src/common/parse_time.c
# slurm_make_time_str), and the door's parsers read `standard`, ISO local time, every
# release's default. So every command gets it, whatever the caller's environment holds.
PINNED_ENV = {"SLURM_TIME_FORMAT": "standard"}

# stderr text of Slurm 22.05+ clients mapped to our error classes; first match wins.
_ERROR_PATTERNS: tuple[
    tuple[re.Pattern[str], type[SlurmCommandError] | type[SlurmUnavailable]], ...
] = (
    (re.compile(r"Invalid job id|Invalid job array|job id .* not found", re.I), JobNotFound),
    # A `modify job` that selected no record: 22.05's sacctmgr prints " Nothing modified"
    # (rc 1; slurmdbd answers SLURM_NO_CHANGE_IN_DATA with success and an empty list), 25.11's
    # " Error with request: Data has not changed since time specified" (slurmdbd passes the
    # errno on: proc_req.c _modify_job), pyslurm that text or "Nothing was modified".
    (
        re.compile(
            r"^\s*Nothing (?:was )?modified\s*$|Data has not changed since time specified", re.M
        ),
        NotYetAccounted,
    ),
    (re.compile(r"Invalid node name|Node .* not found", re.I), NodeNotFound),
    # ESLURM_RESERVATION_INVALID (slurm_errno.c, 22.05-25.11): an unknown name to delete
    # or to submit into; pyslurm's own "Reservation 'x' doesn't exist" for a load.
    (
        re.compile(r"Requested reservation is invalid|Reservation '.*' doesn't exist", re.I),
        ReservationNotFound,
    ),
    (
        re.compile(r"Requested operation is presently disabled|Only batch jobs", re.I),
        NotRequeueable,
    ),
    (
        re.compile(
            r"already finished|already completing|Job is pending execution|"
            r"Job/step already completing|Requested operation not supported on this job "
            r"state",
            re.I,
        ),
        InvalidJobState,
    ),
    (
        re.compile(
            r"Unable to contact slurm controller|Socket timed out|Connection refused|"
            r"Zero Bytes were transmitted|Communication connection failure|"
            r"Unable to establish Slurm connection|Slurm backup controller in standby|"
            r"slurmdbd: Connection|Transport endpoint is not connected|"
            r"Could not establish a configuration source",
            re.I,
        ),
        SlurmUnavailable,
    ),
)


class CommandResult(Frozen):
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass
class Runner:
    """Runs Slurm client commands for one operation budget.

    `timeout_s` bounds the whole operation, retries and waits included; `attempts` bounds
    the retries of transient failures (controller unreachable). `sleep` and `clock` are
    injectable so tests can assert exact waits.
    """

    timeout_s: float = 10.0
    attempts: int = 3
    retry_wait_s: float = 0.5
    env: dict[str, str] | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    resolve: Callable[[str], str] = field(default=lambda name: name)

    def run(self, argv: Sequence[str], *, check: bool = True) -> CommandResult:
        """Run argv; raise our error class on failure, SlurmTimeout past the deadline."""
        return self._run(argv, check, _result)

    def read(self, argv: Sequence[str], parse: Callable[[str], T]) -> T:
        """Run argv and parse its stdout within the same attempt, so a document that
        reports the command's own failure with exit status 0 (22.05's `sinfo --json`: the
        parser raises SlurmUnavailable) is retried as a non-zero exit would be."""
        return self._run(argv, True, lambda result: parse(result.stdout))

    def child_env(self) -> dict[str, str]:
        """The environment of each command: `env` (None: this process's) with PINNED_ENV."""
        return {**(self.env if self.env is not None else os.environ), **PINNED_ENV}

    def _run(self, argv: Sequence[str], check: bool, then: Callable[[CommandResult], T]) -> T:
        deadline = self.clock() + self.timeout_s
        command = [self.resolve(argv[0]), *argv[1:]]

        def remaining() -> float:
            return deadline - self.clock()

        def once() -> T:
            return then(self._attempt(command, remaining, check))

        try:
            return once()
        except SlurmUnavailable as exc:
            if self.attempts <= 1:
                raise
            first_failure: SlurmUnavailable | None = exc
        # tenacity (and concurrent.futures under it, ~7 ms) is imported for a retry only:
        # most commands succeed at once (issue 20). The first attempt's failure is handed
        # to it as its attempt 1, so waits and bounds are the same as retrying from the start.
        import tenacity

        def attempt() -> T:
            nonlocal first_failure
            if first_failure is not None:
                failed, first_failure = first_failure, None
                raise failed
            return once()

        def wait(state: tenacity.RetryCallState) -> float:
            backoff = self.retry_wait_s * (2 ** (state.attempt_number - 1))
            return max(0.0, min(backoff, remaining() - 0.05))

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=wait,
            retry=tenacity.retry_if_exception_type(SlurmUnavailable),
            sleep=self.sleep,
            reraise=True,
        )
        return retrying(attempt)

    def _attempt(
        self, command: list[str], remaining: Callable[[], float], check: bool
    ) -> CommandResult:
        budget = remaining()
        if budget <= 0:
            raise SlurmTimeout(f"{_show(command)}: no time left within {self.timeout_s:g}s")
        result = run_bounded(command, budget, self.child_env())
        if result is None:
            raise SlurmTimeout(
                f"{_show(command)} did not finish within {self.timeout_s:g}s and was killed"
            )
        if check and result.returncode != 0:
            raise classify_failure(result)
        return result


def _result(result: CommandResult) -> CommandResult:
    return result


def _show(command: Sequence[str]) -> str:
    text = " ".join(command[:4])
    return text if len(command) <= 4 else text + " ..."


def error_class_for(
    text: str,
) -> type[SlurmCommandError] | type[SlurmUnavailable] | None:
    """Our error class for Slurm's own words (slurm_strerror's texts, which the clients
    print and pyslurm raises), or None when the text names no known failure."""
    for pattern, error in _ERROR_PATTERNS:
        if pattern.search(text):
            return error
    return None


def classify_failure(result: CommandResult) -> SlurmCommandError | SlurmUnavailable:
    message = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
    first = next((line for line in message if line.strip()), "no output")[:300]
    error = error_class_for(f"{result.stderr}\n{result.stdout}")
    if error is not None:
        return error(f"{_show(result.argv)}: {first}")
    return SlurmCommandError(f"{_show(result.argv)} failed (rc {result.returncode}): {first}")


def run_bounded(
    command: Sequence[str], timeout_s: float, env: dict[str, str] | None
) -> CommandResult | None:
    """Run a command in its own process group; None if it outlived timeout_s (group killed)."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise SlurmUnavailable(f"{command[0]}: command not found (is Slurm installed?)") from None
    except PermissionError:
        raise SlurmUnavailable(f"{command[0]}: permission denied") from None
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None
    return CommandResult(
        argv=tuple(command),
        returncode=proc.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        seconds=time.monotonic() - started,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    # Our pipes may still be held by a process that escaped the group; don't wait on them.
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=2)
