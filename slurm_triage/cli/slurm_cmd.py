"""`slurm-triage slurm ...`: the door's operations by hand, for operators and debugging."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from slurm_triage.errors import TriageError


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "slurm",
        help="read jobs and nodes, requeue, exclude, drain and resume through Slurm",
        description="The operations slurm-triage performs on Slurm, by hand. They go through "
        "the same door as the epilog (scontrol/sinfo/sacct, or pyslurm where it matches the "
        "running Slurm), with the same deadline and retries.",
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "cli", "pyslurm"),
        help="override slurm.backend from the config",
    )
    ops = parser.add_subparsers(dest="slurm_action", metavar="ACTION")
    ops.required = True

    job = ops.add_parser("job", help="show a job: state, exit code, nodes, restarts, exclusions")
    job.add_argument("job_id", type=_job_id, metavar="JOBID")
    job.add_argument("--json", action="store_true", help="print JSON")
    job.set_defaults(handler=_job)

    nodes = ops.add_parser("nodes", help="show nodes: state, flags and drain reason")
    nodes.add_argument("names", nargs="*", metavar="NODE", help="default: all nodes")
    nodes.add_argument("--json", action="store_true", help="print JSON")
    nodes.set_defaults(handler=_nodes)

    requeue = ops.add_parser("requeue", help="requeue a job (batch jobs that allow it)")
    requeue.add_argument("job_id", type=_job_id, metavar="JOBID")
    requeue.add_argument("--hold", action="store_true", help="requeue held (needs release)")
    requeue.set_defaults(handler=_requeue)

    exclude = ops.add_parser(
        "exclude", help="add nodes to a pending job's excluded nodes (keeps the user's own)"
    )
    exclude.add_argument("job_id", type=_job_id, metavar="JOBID")
    exclude.add_argument("nodes", nargs="+", metavar="NODE")
    exclude.add_argument(
        "--replace",
        action="store_true",
        help="replace the excluded list instead of merging with it",
    )
    exclude.set_defaults(handler=_exclude)

    comment = ops.add_parser("admin-comment", help="set a job's AdminComment")
    comment.add_argument("job_id", type=_job_id, metavar="JOBID")
    comment.add_argument("text")
    comment.set_defaults(handler=_admin_comment)

    drain = ops.add_parser("drain", help="drain a node with a reason")
    drain.add_argument("node", metavar="NODE")
    drain.add_argument("reason")
    drain.set_defaults(handler=_drain)

    resume = ops.add_parser("resume", help="return a drained node to service")
    resume.add_argument("node", metavar="NODE")
    resume.set_defaults(handler=_resume)


def _job_id(text: str) -> int:
    """A job's own SLURM_JOB_ID, an array task's too (the door names it to Slurm as `A_T`
    itself): `A_T` is refused, since A alone is the whole array."""
    if not text.isdigit() or int(text) <= 0:
        hint = " (an array task by its own job id: squeue -o %A)" if "_" in text else ""
        raise argparse.ArgumentTypeError(f"not a job id: {text[:40]!r}{hint}")
    return int(text)


def _door(args: argparse.Namespace, context: Any) -> Any:
    from slurm_triage.slurm import open_door

    return open_door(context.config().slurm, backend=args.backend)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
        if hasattr(value, "drained"):
            out["drained"] = value.drained
        return out
    if isinstance(value, frozenset | set | tuple | list):
        return (
            sorted(_plain(v) for v in value)
            if isinstance(value, frozenset | set)
            else [_plain(v) for v in value]
        )
    return value


def _job(args: argparse.Namespace, context: Any) -> int:
    job = _door(args, context).job(args.job_id)
    if args.json:
        print(json.dumps(_plain(job)))
        return 0
    from slurm_triage import hostlist

    rows = [
        ("job", job.job_id),
        ("state", job.state.value),
        ("reason", job.state_reason or "-"),
        ("exit", f"{job.exit_code}:{job.exit_signal}"),
        ("nodes", hostlist.compress(job.nodes) or "-"),
        ("excluded", hostlist.compress(job.excluded_nodes) or "-"),
        ("restarts", job.restart_count),
        ("requeue", "yes" if job.requeue else "no"),
        ("user", job.user),
        ("partition", job.partition),
        ("time limit", f"{job.time_limit_min} min" if job.time_limit_min else "unlimited"),
        ("admin comment", job.admin_comment or "-"),
        ("source", job.source),
    ]
    if job.array_job_id is not None:
        task = job.array_task_id if job.array_task_id is not None else "(pending tasks)"
        rows.insert(1, ("array task", f"{job.array_job_id}_{task}"))
    elif job.het_job_id is not None:
        rows.insert(1, ("het job part", f"{job.het_job_id}+{job.het_job_offset}"))
    for key, value in rows:
        print(f"{key:>14}: {value}")
    return 0


def _nodes(args: argparse.Namespace, context: Any) -> int:
    nodes = _door(args, context).nodes(args.names or None)
    if args.json:
        print(json.dumps([_plain(n) for n in nodes]))
        return 0
    width = max([4, *(len(n.name) for n in nodes)])
    print(f"{'NODE':<{width}}  {'STATE':<24}  REASON")
    for n in nodes:
        print(f"{n.name:<{width}}  {n.label:<24}  {n.reason or '-'}")
    return 0


def _requeue(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.actuator import commands

    commands.requeue(_door(args, context), args.job_id, hold=args.hold)
    print(f"job {args.job_id} requeued{' (held)' if args.hold else ''}")
    return 0


def _exclude(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage import hostlist
    from slurm_triage.actuator import commands

    try:
        names = [n for expr in args.nodes for n in hostlist.expand(expr)]
    except hostlist.HostlistError as exc:
        raise TriageError(str(exc)) from None
    result = commands.exclude(_door(args, context), args.job_id, names, merge=not args.replace)
    print(f"job {args.job_id} excludes {hostlist.compress(result) or 'no nodes'}")
    return 0


def _admin_comment(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.actuator import commands

    commands.set_admin_comment(_door(args, context), args.job_id, args.text)
    print(f"job {args.job_id} AdminComment set")
    return 0


def _drain(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.actuator import commands

    commands.drain(_door(args, context), args.node, args.reason)
    print(f"{args.node} drained: {args.reason}")
    return 0


def _resume(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.actuator import commands

    commands.resume(_door(args, context), args.node)
    print(f"{args.node} resumed")
    return 0
