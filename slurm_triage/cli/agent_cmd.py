"""`slurm-triage agent`: run the resident node agent (root, under systemd; docs/agent.md)."""

from __future__ import annotations

import argparse
from typing import Any

from slurm_triage.errors import TriageError

DESCRIPTION = """\
Run the node agent in the foreground: a root daemon that keeps the configuration, logging
and NVML open, watches NVML XID events, reads the screen's facts in the background every
agent.facts_refresh_s, and runs the Prolog's health screen on facts at most
agent.facts_max_age_s old (the GPUs' processes and the host are read for each job; an XID
drops the rest; 0 reads every fact for every job) when slurm-triage-prolog asks over the
Unix socket agent.socket (mode 0600; peers served: root and agent.allowed_uids). The Prolog
asks the agent first and runs the screen itself, reading every fact, when the agent is
down, busy, refuses or does not answer in time. At its start and at each refresh the agent
writes the config file's parsed copy again if the file has changed (slurm-triage config
cache), which the jobs' ranks read instead of parsing TOML. Runs until SIGTERM or SIGINT;
contrib/slurm-triage-agent.service runs it under systemd (Type=notify). Exit status: 0
stopped, 2 bad configuration or node name, or no socket to be had (another agent serves
it, the path is not a socket, others may write its directory)."""


def register(sub: Any) -> None:
    agent = sub.add_parser(
        "agent",
        help="run the node agent the Prolog asks first (root daemon, Unix socket, NVML open)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    agent.add_argument(
        "--node",
        help="this node's Slurm name (default $SLURMD_NODENAME, else the short hostname); "
        "requests for another node are refused",
    )
    agent.set_defaults(handler=_agent)


def _agent(args: argparse.Namespace, context: Any) -> int:
    # The failure path (node_action: the door, the policies) loads now, not at the first
    # failing screen.
    import slurm_triage.prolog_epilog.node_action  # noqa: F401
    from slurm_triage.agent.protocol import ENV_RULES
    from slurm_triage.agent.server import run_agent
    from slurm_triage.health_checks.runner import node_name
    from slurm_triage.logs import setup_logging
    from slurm_triage.prolog_epilog.prolog import prolog

    node = node_name(args.node)
    if not ENV_RULES["SLURMD_NODENAME"](node):
        raise TriageError(f"--node {node!r}: not a Slurm node name (letters, digits, . _ -)")
    config = context.config()
    setup_logging(config.logging, program="slurm-triage-agent")
    return run_agent(config, prolog, node)
