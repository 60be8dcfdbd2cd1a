"""`slurm-triage wrap -- CMD ...`: supervise a training process under srun."""

from __future__ import annotations

import contextlib
import os

from slurm_triage.cli.plain_args import PlainArgs
from slurm_triage.errors import TriageError

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any, NoReturn

DESCRIPTION = """\
Run CMD as a child in its own process group and exit exactly as it did (same exit code,
or death by the same signal), so srun, slurmstepd and sacct see what they would have seen
without the wrapper. Put it in sbatch scripts as `srun slurm-triage wrap -- python train.py`.

While CMD runs: SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2 and SIGCONT are forwarded to its
group (SIGKILL follows a SIGTERM it passed on after --kill-grace seconds; one slurmstepd
gave CMD itself is left to Slurm's KillWait/GraceTime); stdout and stderr pass through
byte for byte while the last --tail-bytes of each are kept; NVML XID/ECC events of the
step's GPUs are watched; with --hang-timeout, no output and no touch of
$SLURM_TRIAGE_HEARTBEAT for that long ends CMD as a hang. CMD may write its uncaught
exception to $SLURM_TRIAGE_ERROR_FILE (slurm_triage.wrapper.record_exceptions()).

When CMD has exited, one evidence record per rank goes to
<paths.evidence_dir>/<job>/<node>.<step>[.<task>].json and, if CMD failed, a one-line
attribution is printed on stderr. Problems of the wrapper's own (a bad config file, an
unwritable evidence directory) are one line on stderr and never change the exit status: a
bad config file means the command runs with the built-in defaults."""


def register(sub: Any) -> None:
    import argparse

    parser = sub.add_parser(
        "wrap",
        help="run a job step's command and exit exactly as it did (srun ... wrap -- CMD)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kill-grace",
        type=float,
        metavar="SECONDS",
        help="SIGKILL the command this long after a SIGTERM the wrapper passed on or sent (not "
        "one slurmstepd gave it: Slurm's KillWait governs that); keep it below KillWait "
        "(default: wrapper.kill_grace_s, 25)",
    )
    parser.add_argument(
        "--hang-timeout",
        type=float,
        metavar="SECONDS",
        help="end the command as hung after this long with no output and no heartbeat; "
        "0 turns it off (default: wrapper.hang_timeout_s, 0)",
    )
    parser.add_argument(
        "--tail-bytes",
        type=int,
        metavar="BYTES",
        help="bytes of the end of stdout and of stderr kept for attribution "
        "(default: wrapper.tail_bytes, 1 MiB)",
    )
    parser.add_argument(
        "--tee-dir",
        metavar="DIR",
        help="also copy output to DIR/<job>/<node>.<step>.<task>.{out,err} "
        "(default: wrapper.tee_dir, off)",
    )
    parser.add_argument(
        "--no-nvml",
        dest="watch_nvml",
        action="store_const",
        const=False,
        help="do not watch NVML events (default: wrapper.watch_nvml, on)",
    )
    parser.add_argument(
        "--keep-on-xid",
        dest="end_on_fatal_xid",
        action="store_const",
        const=False,
        help="do not end the command when NVML reports a node-fatal XID or a lost GPU on its "
        "GPUs (default: wrapper.end_on_fatal_xid, on: end it at once, so the requeue "
        "starts in seconds instead of after the NCCL timeout)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]")
    parser.set_defaults(handler=_wrap)


# What parse_without_argparse reads: wrap's options that take a value (its dest and type, as
# register gives them to argparse) and those that take none (store_const False).
_VALUED = {
    "--kill-grace": ("kill_grace", float),
    "--hang-timeout": ("hang_timeout", float),
    "--tail-bytes": ("tail_bytes", int),
    "--tee-dir": ("tee_dir", str),
}
_FLAGS = {"--no-nvml": "watch_nvml", "--keep-on-xid": "end_on_fatal_xid"}


def parse_without_argparse(argv: list[str]) -> PlainArgs | None:
    """The arguments after `wrap` as `slurm-triage`'s parser reads them, when they are in
    the plain grammar every sbatch script uses: wrap's options written in full (`--opt V`,
    `--opt=V`, flags), then `--` or the first word that is not an option, which begins the
    command (argparse.REMAINDER: options after it are the command's). None for anything
    else (--help, -h, an abbreviation, an unknown option, a missing or bad value, a value
    that begins with '-', a command without `--` before it that has a word beginning with
    '-'), which the caller leaves to argparse, so help and error messages stay argparse's.
    tests/unit/test_wrap_args.py runs both over the same argv."""
    values: dict[str, Any] = {
        "config": None,
        "kill_grace": None,
        "hang_timeout": None,
        "tail_bytes": None,
        "tee_dir": None,
        "watch_nvml": None,
        "end_on_fatal_xid": None,
    }
    at = 0
    while at < len(argv) and argv[at] != "--" and argv[at].startswith("-"):
        option, equals, value = argv[at].partition("=")
        if option in _FLAGS and not equals:
            values[_FLAGS[option]] = False
            at += 1
            continue
        if option not in _VALUED:
            return None
        if not equals:
            at += 1
            if at == len(argv) or argv[at].startswith("-"):
                return None  # argparse: expected one argument (or a negative number)
            value = argv[at]
        dest, read = _VALUED[option]
        try:
            values[dest] = read(value)
        except ValueError:
            return None  # argparse: invalid float/int value
        at += 1
    command = argv[at:]
    if command[:1] != ["--"]:
        # argparse classifies every word before a `--`, the command's too, and may refuse
        # one (`--k` is ambiguous, `--=x` too): such a command is left to it.
        words = command[: command.index("--")] if "--" in command else command
        if any(word.startswith("-") for word in words):
            return None
    return PlainArgs(**values, command=command, handler=_wrap)


def _wrap(args: argparse.Namespace, context: Any) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise TriageError("wrap needs a command: slurm-triage wrap -- CMD [ARG ...]")
    _check_args(args)
    from slurm_triage.wrapper.run import SetupError, WrapOptions, already_wrapped, run_wrapped
    from slurm_triage.wrapper.supervise import SpawnError, exit_like

    if already_wrapped(os.environ):
        _exec(command)  # an outer wrapper of this same rank does the work
    options = WrapOptions.from_config(
        _config_or_defaults(context),
        kill_grace_s=args.kill_grace,
        hang_timeout_s=args.hang_timeout,
        tail_bytes=args.tail_bytes,
        tee_dir=args.tee_dir,
        watch_nvml=args.watch_nvml,
        end_on_fatal_xid=args.end_on_fatal_xid,
    )
    try:
        child = run_wrapped(command, options)
    except SpawnError as exc:
        raise TriageError(exc.message) from None
    except SetupError as exc:
        # Our bug must not cost the researcher the job: run the command as if unwrapped.
        _say(f"slurm-triage: wrapper failed ({exc}); running the command unwrapped")
        _exec(command)
    return exit_like(child)


def _check_args(args: argparse.Namespace) -> None:
    if args.kill_grace is not None and args.kill_grace < 0:
        raise TriageError("--kill-grace must be >= 0")
    if args.hang_timeout is not None and args.hang_timeout < 0:
        raise TriageError("--hang-timeout must be >= 0 (0 turns it off)")
    if args.tail_bytes is not None and args.tail_bytes < 4096:
        raise TriageError("--tail-bytes must be >= 4096")


def _config_or_defaults(context: Any) -> Any:
    """The config; on any config error one line on stderr and the defaults: a researcher's
    job must never fail because of our configuration."""
    from slurm_triage.config import Config

    context.job_output = True  # our log trouble must not land in the job's output
    try:
        return context.config()
    except Exception as exc:  # ConfigError, or anything else going wrong while loading it
        _say(f"slurm-triage: config error: {exc}; running the command with defaults")
        return Config()


def _say(line: str) -> None:
    """One line straight to fd 2, before any output of the command (no buffer to lose)."""
    with contextlib.suppress(OSError):
        os.write(2, (" ".join(line.split()) + "\n").encode("utf-8", "replace"))


def _exec(command: list[str]) -> NoReturn:
    from slurm_triage.wrapper.supervise import SpawnError

    try:
        os.execvp(command[0], command)
    except OSError as exc:
        raise TriageError(SpawnError(command[0], exc).message) from None
