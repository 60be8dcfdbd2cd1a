"""`slurm-triage history` (decisions from the journal) and `slurm-triage lemons`."""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from typing import Any

from slurm_triage.errors import TriageError


def register(sub: Any) -> None:
    history = sub.add_parser(
        "history",
        help="show the decisions taken on job ends (the journal)",
        description="Show what slurm-triage decided for each job end: the cause it attributed, "
        "the nodes it blamed, whether it requeued, excluded, held or drained, and why. Read "
        "from the journal (decision.journal in the config).",
    )
    history.add_argument("--job", type=_positive_int, metavar="JOBID", help="one job")
    history.add_argument(
        "--node", type=_node_name, metavar="NAME", help="decisions involving this node"
    )
    history.add_argument("--limit", type=_positive_int, default=50, help="rows (default 50)")
    history.add_argument("--json", action="store_true", help="print JSON lines")
    history.set_defaults(handler=_history)

    lemons = sub.add_parser(
        "lemons",
        help="list nodes whose history makes them lemon candidates, and why",
        description="Per node over policy.lemon_window_days: jobs that failed with the node "
        "blamed (multi-node vs single-node), jobs that excluded it, distinct XIDs, times "
        "drained. Nodes over a policy.lemon_* threshold are lemons: the decision drains them "
        "when they are part of a failed job.",
    )
    lemons.add_argument("--all", action="store_true", help="every node with history")
    lemons.add_argument("--json", action="store_true", help="print JSON")
    lemons.set_defaults(handler=_lemons)


# SQLite's integers are signed 64-bit: a larger job id or limit cannot be asked of it.
_MAX_INT = 2**63 - 1


def _positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= _MAX_INT:
        raise argparse.ArgumentTypeError(f"not a positive number up to {_MAX_INT}: {text!r}")
    return int(text)


def _node_name(text: str) -> str:
    """A node name as given; bytes that are not UTF-8 (the shell's $'\\xff') name no node
    the journal can hold, and are refused here rather than by SQLite."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"not a node name (not UTF-8): {text.encode('utf-8', 'surrogateescape')!r}"
        ) from None
    return text


def _journal(context: Any) -> Any:
    from pathlib import Path

    from slurm_triage.journal import Journal

    config = context.config()
    if not Path(config.decision.journal).exists():
        raise TriageError(
            f"no journal at {config.decision.journal} (no decision made yet, "
            "or decision.journal points elsewhere)"
        )
    return Journal(config.decision.journal, config.decision.journal_busy_timeout_s)


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _history(args: argparse.Namespace, context: Any) -> int:
    rows = _journal(context).decisions(job_id=args.job, node=args.node, limit=args.limit)
    if args.json:
        for row in rows:
            print(json.dumps(row.to_dict()))
        return 0
    if not rows:
        print("no decisions recorded" + (f" for job {args.job}" if args.job else ""))
        return 0
    for row in rows:
        print(history_line(row))
        for reason in row.reasons:
            print(f"      - {reason}")
    return 0


def history_line(row: Any) -> str:
    """One decision on one line. Nodes are "blamed" for node faults only; a user's error
    merely happened "on" them."""
    where = "blamed" if _faults_nodes(row.cause or "") else "on"
    return (
        f"{_when(row.decided_at)}  job {row.job_id} run {row.restart}  {row.state or '?'}"
        f"  cause {row.cause}  {where} {','.join(row.blamed) or '-'}  -> {row.action}"
        f"{'  excluded ' + ','.join(row.excluded) if row.excluded else ''}"
        f"{'  drained ' + ','.join(row.drained) if row.drained else ''}"
        f"  [{row.outcome}]"
    )


def _faults_nodes(cause: str) -> bool:
    from slurm_triage.taxonomy import Domain, info, parse_cause

    try:
        return info(parse_cause(cause)).domain in (Domain.HARDWARE, Domain.INFRASTRUCTURE)
    except ValueError:
        return True


def _lemons(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.policies.lemons import FRESH_START, node_signals, since_return

    config = context.config()
    since = time.time() - config.policy.lemon_window_days * 86400
    journal = _journal(context)
    returned = journal.last_applied(FRESH_START, since)
    signals = node_signals(since_return(journal.node_events(since), returned), config.policy)
    shown = [s for s in signals.values() if args.all or s.lemon]
    shown.sort(key=lambda s: (not s.lemon, -s.failed_jobs, s.node))
    if args.json:
        print(json.dumps([s.to_dict() for s in shown]))
        return 0
    if not shown:
        print(f"no lemon candidates in the last {config.policy.lemon_window_days:g} days")
        return 0
    print(
        f"{'NODE':<16} {'LEMON':<5} {'FAILED':>6} {'MULTI':>5} {'SINGLE':>6} {'EXCL':>4} "
        f"{'DRAINED':>7}  XIDS  WHY"
    )
    for s in shown:
        print(
            f"{s.node:<16} {'yes' if s.lemon else 'no':<5} {s.failed_jobs:>6} "
            f"{s.multi_node_failures:>5} {s.single_node_failures:>6} {s.excluded_by_jobs:>4} "
            f"{s.times_drained:>7}  {','.join(map(str, s.xids)) or '-'}  "
            f"{'; '.join(s.reasons)}"
        )
    return 0
