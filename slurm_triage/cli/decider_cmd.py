"""`slurm-triage decider`: run the resident decider (SlurmUser on the slurmctld host, under
systemd; docs/decider.md)."""

from __future__ import annotations

import argparse
from typing import Any

DESCRIPTION = """\
Run the decider in the foreground: a daemon on the slurmctld host, run as SlurmUser, that
keeps the configuration, logging and the decision code loaded and makes the once-per-job
decision when slurm-triage-epilog-slurmctld asks over the Unix socket decider.socket (mode
0600; peers served: root, the decider's own uid and decider.allowed_uids). It answers
`accepted` at once, then decides (or answers `detached` for an expedited requeue, whose
hook must return at once, and decides on). EpilogSlurmctld decides itself, as before,
when the decider is down, busy, refuses the request or does not accept it in time; once
the decider accepted, EpilogSlurmctld never decides. Runs until SIGTERM or SIGINT, then
lets the decisions in flight finish; contrib/slurm-triage-decider.service runs it under
systemd (Type=notify). Exit status: 0 stopped, 2 bad configuration or no socket to be had
(another decider serves it, the path is not a socket, others may write its directory)."""


def register(sub: Any) -> None:
    decider = sub.add_parser(
        "decider",
        help="run the decider EpilogSlurmctld asks first (SlurmUser daemon, Unix socket)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    decider.add_argument(
        "--socket",
        metavar="PATH",
        help="listen here instead of decider.socket (EpilogSlurmctld then needs "
        "SLURM_TRIAGE__DECIDER__SOCKET=PATH in its environment)",
    )
    decider.set_defaults(handler=_decider)


def _decider(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.decider.server import run_decider
    from slurm_triage.logs import setup_logging
    from slurm_triage.prolog_epilog.decide import decide_from_env
    from slurm_triage.prolog_epilog.ended_run import settle_bound_s

    config = context.config()
    setup_logging(config.logging, program="slurm-triage-decider")
    return run_decider(config, decide_from_env, args.socket, settle_s=settle_bound_s(config))
