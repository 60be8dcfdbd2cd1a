"""`slurm-triage wrap -- CMD ...`: supervise a training process under srun."""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any, NoReturn

from slurm_triage.errors import TriageError

DESCRIPTION = """\
Run CMD as a child in its own process group and exit exactly as it did (same exit code,
or death by the same signal), so srun, slurmstepd and sacct see what they would have seen
without the wrapper. Put it in sbatch scripts as `srun slurm-triage wrap -- python train.py`.

While CMD runs: SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2 and SIGCONT are forwarded to its
group (SIGKILL follows a SIGTERM after --kill-grace seconds); stdout and stderr pass through
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
        help="SIGKILL the command this long after SIGTERM; keep it below Slurm's KillWait "
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
