"""`slurm-triage replay`: a site's history under other policy settings (slurm_triage.replay;
docs/twin.md).

Inputs as `report` takes them: a saved sacct file or sacct run now, node events from a
file or the Slurm door, the decisions journal. Bad input is one line and exit 2; a Slurm
command failing is exit 3.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from slurm_triage.cli.analytics_args import (
    node_events_from_args,
    number,
    parse_date,
    require_extra,
)
from slurm_triage.errors import TriageError

DESCRIPTION = """\
Re-run a site's history (sacct, Slurm's node events, our decisions journal) through other
policy settings with slurm-triage's own policy chain and actuator, and report what would
have changed: requeues, jobs held, crash loops stopped, nodes drained, lemons, failures
avoided on nodes already drained, GPU-hours saved or put at risk, health-check drains the
circuit breaker would block. The first column is the config in force ([policy] as if
act = true, and the [health] breaker of --config); each --try changes it.

A --try is NAME=KEY=VALUE[,KEY=VALUE...]: KEY is a [policy] key (max_requeues,
max_node_failure_requeues, max_preemption_requeues, max_unknown_requeues, backoff_base_s,
cant_fit, lemon_failed_jobs, lemon_times_drained, drain_causes, act, ...), a breaker key
(breaker_max_share, breaker_min_nodes, breaker_window_s), lemons=on|off or repair=on|off.

examples:
  slurm-triage replay --sacct sacct.txt --events events.txt \\
      --try strict=max_node_failure_requeues=2 --try no-lemons=lemons=off
  slurm-triage replay --since 2026-01-01 --try breaker=breaker_max_share=0.02"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "replay",
        help="re-run a site's history through other policy settings",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sacct", type=Path, metavar="FILE", help="saved sacct -P output")
    source.add_argument("--since", metavar="DATE", help="run sacct (and sacctmgr) since DATE")
    parser.add_argument("--until", metavar="DATE", help="with --since: up to DATE (now)")
    parser.add_argument(
        "--sacct-columns", metavar="LIST", help="the -o list of a --sacct file without header"
    )
    events = parser.add_mutually_exclusive_group()
    events.add_argument(
        "--events", type=Path, metavar="FILE", help="saved `sacctmgr -P show event` output"
    )
    events.add_argument("--no-events", action="store_true", help="with --since: no node events")
    journal = parser.add_mutually_exclusive_group()
    journal.add_argument(
        "--journal",
        type=Path,
        metavar="FILE",
        help="decisions journal (default: decision.journal from the config, if present)",
    )
    journal.add_argument("--no-journal", action="store_true", help="do not read the journal")
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="NAME=KEY=VALUE[,KEY=VALUE]",
        help="a setting to try against the config's",
    )
    parser.add_argument(
        "--repair-h", default="24", metavar="H", help="a node we drain is back after H (24)"
    )
    parser.add_argument(
        "--crash-loop", default="5", metavar="N", help="a crash loop: requeued after N failures"
    )
    parser.add_argument(
        "--cluster-nodes", default="0", metavar="N", help="cluster size for the breaker"
    )
    parser.add_argument("--ckpt-interval-min", default="60", metavar="D", help="assumed dt")
    parser.add_argument("--restart-min", default="5", metavar="U", help="assumed u0")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace, context: Any) -> int:
    require_extra("replay")
    from slurm_triage.replay import history as history_mod
    from slurm_triage.replay import report
    from slurm_triage.replay.replay import replay
    from slurm_triage.replay.settings import settings

    if args.until is not None and args.since is None:
        raise TriageError("--until needs --since")
    if args.no_events and args.since is None:
        raise TriageError("--no-events goes with --since")
    if args.since is not None:
        parse_date(args.since, "--since")
    config = context.config()
    assumptions: dict[str, Any] = {
        "repair_h": float(number(args.repair_h, "--repair-h", strict=False)),
        "crash_loop_requeues": int(number(args.crash_loop, "--crash-loop", integer=True)),
        "cluster_nodes": int(
            number(args.cluster_nodes, "--cluster-nodes", integer=True, strict=False)
        ),
        "ckpt_interval_min": float(number(args.ckpt_interval_min, "--ckpt-interval-min")),
        "restart_min": float(number(args.restart_min, "--restart-min", strict=False)),
    }
    # The settings as they would act (act = true): replay is how a site chooses them.
    acting = dataclasses.replace(config.policy, act=True)
    tried = settings(acting, config.health, args.tries, **assumptions)
    accounting = _accounting(args, context)
    events = node_events_from_args(args, context)
    journal = _journal(args, context)
    history = history_mod.build(accounting, events, journal)
    outcomes = [replay(history, setting) for setting in tried]
    if args.json:
        print(report.to_json(history, outcomes))
    else:
        print(report.summary(history, outcomes, assumptions["crash_loop_requeues"]))
    return 0


def _accounting(args: argparse.Namespace, context: Any) -> Any:
    """Accounting with the NodeLists of failed attempts (the nodes decisions name)."""
    from slurm_triage.analytics import ingest

    if args.sacct is not None:
        return ingest.read_sacct_file(args.sacct, columns=args.sacct_columns)
    if args.sacct_columns is not None:
        raise TriageError("--sacct-columns names the columns of a --sacct file")
    from slurm_triage.analytics.fetch import fetch_sacct

    since = parse_date(args.since, "--since")
    until = parse_date(args.until, "--until") if args.until else None
    text = fetch_sacct(context.config().slurm, since, until)
    return ingest.read_sacct_text(text, source=f"sacct since {args.since}")


def _journal(args: argparse.Namespace, context: Any) -> Path | None:
    if args.no_journal:
        return None
    if args.journal is not None:
        if not args.journal.is_file():
            raise TriageError(f"{args.journal}: no such journal file")
        return Path(args.journal)
    configured = Path(context.config().decision.journal)
    return configured if configured.is_file() else None
