"""`slurm-triage devcluster up|down|status`: a real three-node Slurm on this host."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "devcluster",
        help="run a real 3-node Slurm cluster on this host (tests, demos)",
        description="Start slurmctld, slurmdbd (MariaDB) and three slurmd (node1..node3, "
        "8 fake GPUs each) on this one host, with slurm-triage wired in as Prolog, Epilog, "
        "EpilogSlurmctld and HealthCheckProgram. Installs Debian's slurm-wlm, slurmdbd, "
        "munge and mariadb-server if missing (root). All state lives under "
        "$SLURM_TRIAGE_DEVCLUSTER_DIR (default /var/tmp/slurm-triage-devcluster); "
        "ports from $SLURM_TRIAGE_DEVCLUSTER_PORT (default 16800).",
    )
    actions = parser.add_subparsers(dest="devcluster_action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser("up", help="bring the cluster up (idempotent)")
    up.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up after this long (default 60)",
    )
    up.set_defaults(handler=_up)
    actions.add_parser(
        "down", help="stop every daemon and remove the state directory"
    ).set_defaults(handler=_down)
    actions.add_parser("status", help="which daemons run; exit 1 if any is down").set_defaults(
        handler=_status
    )
    actions.add_parser(
        "env", help="print the shell exports that point Slurm clients at it"
    ).set_defaults(handler=_env)


def _up(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.devcluster import cluster

    layout = cluster.up(timeout_s=args.timeout)
    print(f"dev cluster up under {layout.root}")
    print(f"use it with: export SLURM_CONF={layout.slurm_conf}")
    return 0


def _down(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.devcluster import cluster

    cluster.down()
    print("dev cluster down")
    return 0


def _status(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.devcluster import cluster

    statuses = cluster.daemon_status(cluster.default_layout())
    for s in statuses:
        print(f"{s.name:<14} {'running' if s.alive else 'stopped':<8} pid {s.pid or '-'}")
    return 0 if all(s.alive for s in statuses) else 1


def _env(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.devcluster import cluster

    layout = cluster.default_layout()
    print(f"export SLURM_CONF={layout.slurm_conf}")
    print(f"export SLURM_TRIAGE_CONFIG={layout.triage_conf}")
    return 0
