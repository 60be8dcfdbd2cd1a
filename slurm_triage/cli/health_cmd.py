"""`slurm-triage check` (node health screen) and `slurm-triage inject` (simulated faults)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from slurm_triage.errors import TriageError


def register(sub: Any) -> None:
    check = sub.add_parser(
        "check",
        help="run node health checks; drain on failure, resume nodes we drained",
        description="Run this node's health checks: the fast pre-job set by default, every "
        "check with --all (what cron, a systemd timer or HealthCheckProgram run). A high-"
        "severity failure drains the node at once, a low-severity one drains it after its "
        "jobs; drain reasons start with 'triage: '. With --all, a node we drained is resumed "
        "when every check passes; a node an admin drained is never touched. Exit status: 0 no "
        "failure, 1 a check failed, 2 bad input, 3 the drain or resume the checks called for "
        "could not be applied (Slurm unreachable or refusing).",
    )
    check.add_argument("--all", action="store_true", help="every check, not just the fast set")
    check.add_argument("--only", nargs="+", metavar="NAME", help="only these checks")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument(
        "--dry-run",
        action="store_true",
        help="report what would be drained or resumed; change nothing",
    )
    check.add_argument("--node", help="node name (default $SLURMD_NODENAME, else hostname)")
    check.add_argument("--list", action="store_true", help="list the checks and exit")
    check.set_defaults(handler=_check)

    inject = sub.add_parser(
        "inject",
        help="inject a fault into the simulated GPU estate (demos, tests)",
        description="Change a simulated node's hardware state the way a real fault would "
        "show up: NVML state, kernel log, sysfs, mounts. Faults: xid=N, ecc=N, remap_pending, "
        "remap_failure, nvlink_down[=LINK], gpu_lost, ib_down, mount_hung, nvml_hang[=S], "
        "nvml_error=CODE, driver_unloaded, boot_hang (the next reboots do not come back), "
        "clear; and the repairs reboot (transient faults "
        "clear, the kernel logs a new boot, persistent faults return) and gpu_reset (one "
        'GPU, --gpu). Needs health.nvml = "simulated" to be seen by the checks.',
    )
    inject.add_argument("--node", required=True, help="simulated node, e.g. node2")
    inject.add_argument("fault", metavar="FAULT[=VALUE]")
    inject.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    inject.add_argument("--port", type=int, default=0, help="HCA index for ib_down")
    inject.add_argument("--mount", default="home", help="mount name for mount_hung")
    inject.add_argument(
        "--persistent",
        action="store_true",
        help="broken hardware: the fault comes back after every reboot and GPU reset "
        "(until `clear`)",
    )
    inject.set_defaults(handler=_inject)


def _check(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.health_checks import registry
    from slurm_triage.health_checks.runner import node_name, run_checks
    from slurm_triage.policies.nodes import NodeOutcome
    from slurm_triage.prolog_epilog.healthcheck import record, reset_if_asked, settle_repair
    from slurm_triage.prolog_epilog.node_action import act
    from slurm_triage.slurm import SlurmError

    if args.list:
        for item in registry.describe():
            print(
                f"{item['check']:<15} {'prolog' if item['prolog'] else '      '}  {item['summary']}"
            )
        return 0
    config = context.config()
    full = args.all and not args.only
    # A full screen does the GPU reset reconcile asked for first, as HealthCheckProgram does.
    repair = reset_if_asked(config, node_name(args.node), dry_run=args.dry_run) if full else None
    try:
        report = run_checks(
            config,
            mode="cli",
            only=args.only,
            everything=args.all,
            node=args.node,
            save_state=not args.dry_run,
        )
    except registry.UnknownCheck as exc:
        raise TriageError(str(exc)) from None
    if not args.dry_run:  # a dry run changes nothing, on this host either
        record(config, report)
    repair = settle_repair(config, repair, report, dry_run=args.dry_run)
    decision = act(config, report, may_resume=args.all and not args.only, dry_run=args.dry_run)
    if args.json:
        print(
            json.dumps(
                {
                    **report.to_dict(),
                    "decision": {
                        "outcome": decision.outcome.value,
                        "reason": decision.reason,
                        "applied": decision.applied,
                        "dry_run": decision.dry_run,
                        "detail": decision.detail,
                    },
                    "gpu_repair": repair.to_dict() if repair else None,
                }
            )
        )
    else:
        _table(report, decision, sys.stdout.isatty())
        if repair is not None:
            print(f"gpu repair: {repair.outcome.value} {repair.reason} {repair.detail}".rstrip())
    if decision.outcome is NodeOutcome.SLURM_ERROR:
        # The node may be serving jobs it should not (or stay drained for nothing): a
        # monitoring system running `check` must see this run did not do its job.
        print(f"slurm-triage: node action not applied: {decision.detail}", file=sys.stderr)
        return SlurmError.exit_code
    return 1 if report.failures else 0


def _table(report: Any, decision: Any, color: bool) -> None:
    paint = {"OK": "32", "WARN": "33", "FAIL": "31", "UNKNOWN": "35", "SKIPPED": "2"}
    print(f"node {report.node}  ({report.mode}, {report.seconds * 1000:.0f} ms)")
    for r in report.results:
        status = r.status.value
        shown = f"\x1b[{paint[status]}m{status:<8}\x1b[0m" if color else f"{status:<8}"
        sev = r.severity.value if r.failed else ""
        print(f"  {r.check:<15} {shown} {sev:<5} {r.reason}")
    if decision.outcome.value != "none":
        done = "done" if decision.applied else "dry run" if decision.dry_run else "not applied"
        print(
            f"node action: {decision.outcome.value} ({done}) {decision.reason} "
            f"{decision.detail}".rstrip()
        )


def _inject(args: argparse.Namespace, context: Any) -> int:
    from pathlib import Path

    from slurm_triage.simulate.estate import InjectError, NodeEstate, inject

    name, _, raw = args.fault.partition("=")
    try:
        value = int(raw) if raw else None
    except ValueError:
        raise TriageError(f"{args.fault}: the value must be a whole number") from None
    root = Path(context.config().health.simulate_root.replace("{node}", args.node))
    try:
        print(
            inject(
                NodeEstate(root, args.node),
                name,
                value,
                gpu=args.gpu,
                port=args.port,
                mount=args.mount,
                persistent=args.persistent,
            )
        )
    except InjectError as exc:
        raise TriageError(str(exc)) from None
    except OSError as exc:
        raise TriageError(f"cannot change the simulated estate under {root}: {exc}") from None
    return 0
