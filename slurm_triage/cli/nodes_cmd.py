"""`slurm-triage nodes`: the node lifecycle (issue 16, docs/repair.md).

slurm-triage nodes [--json] [NODE...]        each node's state, since when, why, cycles, jobs
slurm-triage nodes reconcile [--dry-run] [--json] [NODE...]   one pass: decide, act, record
slurm-triage nodes release NODE [--json]     a person returns a node we keep out (RMA)
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import sys
import time
from datetime import UTC, datetime
from typing import Any

from slurm_triage.errors import TriageError

_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


USAGE = """slurm-triage nodes [--json] [NODE ...]
       slurm-triage nodes reconcile [--dry-run] [--json] [NODE ...]
       slurm-triage nodes release [--json] NODE"""


def register(sub: Any) -> None:
    nodes = sub.add_parser(
        "nodes",
        usage=USAGE,
        help="the node lifecycle: state, repairs, burn-in, RMA (reconcile, release)",
        description="Show each node's lifecycle state (healthy, suspect, drained, repairing, "
        "burn_in, rma, admin, unknown), since when, why, its repair cycles within "
        "repair.rma_window_days and the jobs that blamed it.\n\n"
        "`nodes reconcile`: one pass over the nodes: decide each node's next step (repair "
        "by cause, burn-in, return to service, RMA, suspect marks), carry it out and record "
        "it in the journal. Idempotent: run it every minute on the controller (contrib/"
        "slurm-triage-reconcile.timer). It acts only with repair.enabled = true; with "
        "--dry-run or policy.act = false it changes nothing in Slurm. Exit 3 when Slurm "
        "refused a step or could not be read.\n\n"
        "`nodes release NODE`: a person returns a node slurm-triage keeps out (RMA, lemon, "
        "failed burn-in, a repair that needs a person) after fixing it. Recorded in the "
        "journal; its repair cycles start over. With repair.enabled = true it goes through "
        "burn-in first, otherwise it is resumed. Refused for a node we did not take out.\n\n"
        "See docs/repair.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    nodes.add_argument("words", nargs="*", metavar="NODE", help="nodes (or an action, above)")
    nodes.add_argument("--json", action="store_true", help="print one JSON object")
    nodes.add_argument("--dry-run", action="store_true", help="reconcile: change nothing")
    nodes.set_defaults(handler=_dispatch)


def _dispatch(args: argparse.Namespace, context: Any) -> int:
    words = list(args.words)
    action = words[0] if words and words[0] in ("reconcile", "release") else "show"
    names = words[1:] if action != "show" else words
    if args.dry_run and action != "reconcile":
        raise TriageError("--dry-run goes with `nodes reconcile` only")
    if action == "release" and len(names) != 1:
        raise TriageError("`nodes release` takes exactly one NODE")
    nodes = [_node_name(n) for n in names]
    if action == "reconcile":
        return _reconcile(args, context, nodes)
    if action == "release":
        return _release(args, context, nodes[0])
    return _show(args, context, nodes)


def _node_name(text: str) -> str:
    from slurm_triage.slurm.arguments import node_name
    from slurm_triage.slurm.errors import SlurmCommandError

    try:
        return node_name(text)
    except SlurmCommandError as exc:
        raise TriageError(str(exc)) from None


def _open(context: Any, *, create: bool) -> tuple[Any, Any, Any]:
    from pathlib import Path

    from slurm_triage.journal import Journal
    from slurm_triage.slurm import open_door

    config = context.config()
    if not create and not Path(config.decision.journal).exists():
        return config, None, open_door(config.slurm)
    journal = Journal(config.decision.journal, config.decision.journal_busy_timeout_s)
    return config, journal, open_door(config.slurm)


def _show(args: argparse.Namespace, context: Any, names: list[str]) -> int:
    from slurm_triage.policies.lifecycle import burn_in_reservation, lifecycle_state

    config, journal, door = _open(context, create=False)
    now = time.time()
    nodes = door.nodes(names or None)
    reservations = {r.name: r for r in door.reservations()}
    window = now - config.repair.rma_window_days * 86400
    rows = []
    for node in nodes:
        steps = journal.lifecycle_events(node=node.name) if journal else ()
        reservation = reservations.get(burn_in_reservation(node.name))
        state = lifecycle_state(node, reservation, steps, config.repair, now)
        rows.append(_row(node, state.value, steps, journal, window))
    if journal:
        journal.close()
    if args.json:
        print(json.dumps({"nodes": rows, "at": now}))
    else:
        _table(rows)
    return 0


def _row(node: Any, state: str, steps: Any, journal: Any, window: float) -> dict[str, Any]:
    from slurm_triage.policies.lifecycle import LifecycleAction

    same = [s for s in steps if s.state == state]
    since = same[-1].at if same and steps and steps[-1].state == state else node.reason_time
    openings = {
        LifecycleAction.REBOOT.value,
        LifecycleAction.REQUEST_GPU_RESET.value,
        LifecycleAction.START_BURN_IN.value,
    }
    cycles = len(
        {
            s.cycle
            for s in steps
            if s.at >= window and s.applied and s.action in openings and s.cycle
        }
    )
    jobs = (
        [d.job_id for d in journal.decisions(node=node.name, limit=50) if node.name in d.blamed]
        if journal
        else []
    )
    last = steps[-1] if steps else None
    return {
        "node": node.name,
        "state": state,
        "since": since,
        "slurm": node.label,
        "reason": node.reason,
        "why": last.reason if last else "",
        "last_action": last.action if last else "",
        "repair_cycles": cycles,
        "jobs_affected": jobs,
        "history": [s.to_dict() for s in steps[-20:]],
    }


def _when(stamp: float | None) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M") if stamp else "-"


def _table(rows: list[dict[str, Any]]) -> None:
    print(f"{'NODE':<14} {'STATE':<10} {'SINCE (UTC)':<17} {'CYCLES':>6} {'JOBS':>4}  WHY")
    for r in rows:
        why = r["why"] or r["reason"]
        since, jobs = _when(r["since"]), len(r["jobs_affected"])
        print(
            f"{r['node']:<14} {r['state']:<10} {since:<17} {r['repair_cycles']:>6} {jobs:>4}  {why}"
        )


def _reconcile(args: argparse.Namespace, context: Any, names: list[str]) -> int:
    from slurm_triage.cli.reconcile import reconcile
    from slurm_triage.observe import hooks as observe
    from slurm_triage.slurm import SlurmError

    config, journal, door = _open(context, create=True)
    dry = args.dry_run or not config.policy.act
    try:
        steps = reconcile(config, door, journal, dry_run=dry, only=names)
        if config.metrics.controller_textfile:  # the lifecycle series, with the decisions'
            try:
                observe.write_controller_textfile(config, journal)
            except OSError as exc:
                print(f"slurm-triage: metrics textfile not written: {exc}", file=sys.stderr)
    except SlurmError as exc:
        exc.args = (f"Slurm could not be read: {exc}",)
        raise  # exit 3, as documented
    finally:
        journal.close()
    refused = [s for s in steps if s.results and not all(r.ok for r in s.results)]
    if args.json:
        print(
            json.dumps(
                {
                    "dry_run": dry,
                    "repair_enabled": config.repair.enabled,
                    "nodes": [s.to_dict() for s in steps],
                }
            )
        )
    else:
        for s in steps:
            d = s.decision
            if d.action.value == "none" and d.state.value == "healthy":
                continue
            done = (
                "dry run"
                if dry and d.action.value != "none"
                else "done"
                if s.applied
                else "not applied"
                if s.results
                else ""
            )
            print(f"{d.node:<14} {d.state.value:<10} {d.action.value:<18} {done:<11} {d.reason}")
    return 3 if refused else 0


def _release(args: argparse.Namespace, context: Any, node_name: str) -> int:
    from slurm_triage.actuator import commands
    from slurm_triage.journal.records import LifecycleEvent
    from slurm_triage.policies.drain_words import burn_in_pending_reason, read_reason
    from slurm_triage.policies.lifecycle import LifecycleAction
    from slurm_triage.slurm import SlurmError

    config, journal, door = _open(context, create=True)
    try:
        node = door.node(node_name)
        words = read_reason(node.reason)
        if not words.ours or not (node.drained or node.state == "DOWN"):
            raise TriageError(
                f"{node_name} is not kept out by slurm-triage (state {node.label}, "
                f"reason {node.reason!r}): nothing to release"
            )
        who = _person()
        if config.repair.enabled:
            reason = burn_in_pending_reason(words.subject, f"released by {who}")
            commands.drain(door, node_name, reason)
            what = "burn-in next (nodes reconcile starts it)"
        else:
            commands.resume(door, node_name)
            what = "resumed"
        journal.add_lifecycle_events(
            [
                LifecycleEvent(
                    node_name,
                    time.time(),
                    "rma" if words.kind.value == "rma" else "drained",
                    LifecycleAction.RELEASE.value,
                    True,
                    f"released by {who}: {what}",
                    subject=words.subject,
                    actor=who,
                )
            ]
        )
    except SlurmError as exc:
        print(f"slurm-triage: release of {node_name} failed: {exc}", file=sys.stderr)
        return 3
    finally:
        journal.close()
    if args.json:
        print(json.dumps({"node": node_name, "released_by": who, "next": what}))
    else:
        print(f"{node_name}: released by {who}; {what}")
    return 0


def _person() -> str:
    """Who released it: the login behind sudo when there is one, else this uid's name."""
    sudo = os.environ.get("SUDO_USER", "")
    if sudo and set(sudo) <= _NAME_OK:
        return sudo[:32]
    try:
        return pwd.getpwuid(os.getuid()).pw_name[:32]
    except KeyError:
        return f"uid {os.getuid()}"
