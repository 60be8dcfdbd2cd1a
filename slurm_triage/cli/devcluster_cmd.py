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
        "EpilogSlurmctld and HealthCheckProgram; slurmctld and slurmdbd run as the "
        "unprivileged user 'slurm', test jobs as 'triage-job'. --slurm 22.05 (default) "
        "installs Debian's slurm-wlm, slurmdbd, munge and mariadb-server if missing (root); "
        "--slurm 25.11 runs /opt/slurm-25.11, unpacked from $SLURM_TRIAGE_SLURM_BUNDLE "
        "(default ../shared/slurm beside the checkout) when absent. All state lives under "
        "$SLURM_TRIAGE_DEVCLUSTER_DIR (default /var/tmp/slurm-triage-devcluster, with "
        "-25.11 appended for 25.11); ports from $SLURM_TRIAGE_DEVCLUSTER_PORT (default "
        "16800; 25.11 adds 100). $SLURM_TRIAGE_DEVCLUSTER_SLURM sets the default release.",
    )
    actions = parser.add_subparsers(dest="devcluster_action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser("up", help="bring the cluster up (idempotent)")
    _release_option(up)
    up.add_argument(
        "--backend",
        choices=("auto", "cli", "pyslurm"),
        default=None,
        help="slurm.backend of the cluster's hooks (default $SLURM_TRIAGE_DEVCLUSTER_BACKEND, "
        "else auto); pyslurm installs the bundle's wheel beside Slurm 25.11",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up after this long (default 60)",
    )
    up.set_defaults(handler=_up)
    down = actions.add_parser("down", help="stop every daemon and remove the state directory")
    _release_option(down)
    down.set_defaults(handler=_down)
    status = actions.add_parser("status", help="which daemons run; exit 1 if any is down")
    _release_option(status)
    status.set_defaults(handler=_status)
    env = actions.add_parser("env", help="print the shell exports that point Slurm clients at it")
    _release_option(env)
    env.set_defaults(handler=_env)


def _release_option(parser: argparse.ArgumentParser) -> None:
    from slurm_triage.devcluster.config_files import SLURM_PREFIXES

    parser.add_argument(
        "--slurm",
        choices=list(SLURM_PREFIXES),
        default=None,
        help="which Slurm release (default $SLURM_TRIAGE_DEVCLUSTER_SLURM, else 22.05)",
    )


def _up(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.devcluster import cluster

    layout = cluster.up(cluster.default_layout(args.slurm, args.backend), timeout_s=args.timeout)
    print(f"dev cluster (Slurm {layout.slurm}) up under {layout.root}")
    print(f"use it with: export SLURM_CONF={layout.slurm_conf}")
    return 0


def _down(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.devcluster import cluster

    cluster.down(cluster.default_layout(args.slurm))
    print("dev cluster down")
    return 0


def _status(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.devcluster import cluster

    statuses = cluster.daemon_status(cluster.default_layout(args.slurm))
    for s in statuses:
        print(f"{s.name:<14} {'running' if s.alive else 'stopped':<8} pid {s.pid or '-'}")
    return 0 if all(s.alive for s in statuses) else 1


def _env(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.devcluster import cluster

    layout = cluster.default_layout(args.slurm)
    if layout.slurm_prefix is not None:
        print(f'export PATH="{layout.slurm_path}$PATH"')
    print(f"export SLURM_CONF={layout.slurm_conf}")
    print(f"export SLURM_TRIAGE_CONFIG={layout.triage_conf}")
    return 0
