"""`slurm-triage wrap -- CMD ...`: supervise a training process under srun."""

from __future__ import annotations

import argparse
from typing import Any

from slurm_triage.errors import TriageError


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "wrap",
        help="run a job step's command and exit exactly as it did (srun ... wrap -- CMD)",
        description="Run CMD as a child in its own process group, forward SIGTERM, SIGINT, "
        "SIGHUP, SIGUSR1, SIGUSR2 and SIGCONT to it, SIGKILL it a grace period after "
        "SIGTERM, and exit with CMD's exit code or die of CMD's signal, so srun and sacct "
        "see what they would have seen without the wrapper. Put it in sbatch scripts as "
        "`srun slurm-triage wrap -- python train.py`.",
    )
    parser.add_argument(
        "--kill-grace",
        type=float,
        default=25.0,
        metavar="SECONDS",
        help="SIGKILL the command this long after SIGTERM (keep it below "
        "Slurm's KillWait; default 25)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]")
    parser.set_defaults(handler=_wrap)


def _wrap(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.wrapper.supervise import Supervisor, exit_like

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise TriageError("wrap needs a command: slurm-triage wrap -- CMD [ARG ...]")
    if args.kill_grace < 0:
        raise TriageError("--kill-grace must be >= 0")
    try:
        child = Supervisor(command, kill_grace_s=args.kill_grace).run()
    except FileNotFoundError:
        raise TriageError(f"{command[0]}: command not found") from None
    except PermissionError:
        raise TriageError(f"{command[0]}: permission denied") from None
    return exit_like(child)
