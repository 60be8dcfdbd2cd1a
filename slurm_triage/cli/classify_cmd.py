"""`slurm-triage classify`: say why a job ended, from its state, exit status, logs and evidence.

Every input becomes facts (job logs and kernel logs are read from the end, `--tail-bytes` at
most), then the pure `attribute()` decides. Values are validated here rather than by
argparse so that a bad one is a single `slurm-triage: error: ...` line with exit status 2.
"""

from __future__ import annotations

import os
import re
import time

from slurm_triage.cli.plain_args import PlainArgs, read_options
from slurm_triage.errors import TriageError

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

_NODE_PATH = re.compile(r"^(?P<node>[A-Za-z0-9][A-Za-z0-9_.-]*)=(?P<path>.+)$")
_MAX_TAIL_BYTES = 1 << 30

HELP = "say why a job ended: cause, blamed nodes, confidence and what to do"
DESCRIPTION = """\
Attribute one cause from the failure taxonomy to a finished job. Give what you have: the
Slurm state, the exit code or signal, the job's stdout/stderr (one per node with NODE=),
the nodes' kernel logs (dmesg, /dev/kmsg, journalctl or syslog) and evidence records
written by the wrapper or the epilog. Logs are read from the end, at most --tail-bytes."""
EPILOG = """\
examples:
  slurm-triage classify --state FAILED --exit-code 1 --log slurm-123.out
  slurm-triage classify --state FAILED --log node01=n1.out --log node02=n2.out \\
      --kernel-log node02=/var/log/kern.log --json
exit status: 0 classified, 2 bad input (missing file, bad state or signal)."""


def register(sub: Any) -> None:
    import argparse

    parser = sub.add_parser(
        "classify",
        help=HELP,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--state",
        metavar="STATE",
        help="Slurm job state: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, "
        "PREEMPTED, OUT_OF_MEMORY, ... (also 'CANCELLED by UID')",
    )
    parser.add_argument(
        "--exit-code",
        metavar="N",
        help="the job's exit code (0-255, 128+N or -N for signal N), or sacct's EXIT:SIGNAL",
    )
    parser.add_argument("--signal", metavar="SIG", help="signal that ended it: SIGSEGV, SEGV or 11")
    parser.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="[NODE=]PATH",
        help="a job stdout/stderr file, optionally tied to a node (repeatable)",
    )
    parser.add_argument(
        "--kernel-log",
        action="append",
        default=[],
        metavar="[NODE=]PATH",
        help="a node's kernel log (repeatable)",
    )
    parser.add_argument(
        "--evidence",
        action="append",
        default=[],
        metavar="FILE",
        help="an evidence record (JSON, slurm-triage/evidence v1; repeatable)",
    )
    parser.add_argument(
        "--end-time",
        metavar="TIME",
        help="when the job ended (epoch seconds or ISO 8601): only evidence from "
        "10 min before to 5 min after counts",
    )
    parser.add_argument(
        "--tail-bytes",
        metavar="N",
        default=None,
        help="read at most the last N bytes of each log (default 4 MiB)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=_classify)


# What parse_without_argparse reads: the options as register gives them to argparse.
_VALUED = {
    f"--{name.replace('_', '-')}": (name, str)
    for name in ("state", "exit_code", "signal", "end_time", "tail_bytes")
}
_APPENDED = {"--log": "log", "--kernel-log": "kernel_log", "--evidence": "evidence"}
_DEFAULTS = {name: None for name, _ in _VALUED.values()} | {
    "log": [],
    "kernel_log": [],
    "evidence": [],
    "json": False,
}


def parse_without_argparse(argv: list[str]) -> PlainArgs | None:
    """The arguments after `classify` as `slurm-triage`'s parser reads them, when every word
    is one of classify's options written in full (`--opt V`, `--opt=V`, `--json`); None for
    anything else (help, an abbreviation, an unknown option or word, a missing value or one
    that begins with '-'), which the caller leaves to argparse. A researcher's classify on
    a login node, and every corpus case, starts without argparse (issue 20).
    tests/unit/test_classify_args.py runs both over the same argv."""
    values = read_options(
        argv,
        valued=_VALUED,
        appended=_APPENDED,
        flags={"--json": ("json", True)},
        defaults=_DEFAULTS,
    )
    if values is None:
        return None
    return PlainArgs(command="classify", config=None, **values, handler=_classify)


def _classify(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.attribution import attribute, job_window

    end_time = _parse_time(args.end_time) if args.end_time else None
    facts = _collect(args, end_time)
    window = job_window(end_time) if end_time is not None else None
    result = attribute(facts, window=window)
    if args.json:
        # json.dumps's text without the json package (issue 20)
        from slurm_triage.json_codec import dumps_with

        print(dumps_with(ensure_ascii=False)(result.to_dict()))
    else:
        print(_explain(result))
    return 0


def _collect(args: argparse.Namespace, end_time: float | None) -> list[Any]:
    from slurm_triage.attribution import DEFAULT_TAIL_BYTES
    from slurm_triage.attribution.inputs import collect

    tail = _parse_tail_bytes(args.tail_bytes) if args.tail_bytes else DEFAULT_TAIL_BYTES
    year = time.localtime(end_time or time.time()).tm_year
    # Naive times in logs are the cluster's local time, the zone this command runs in.
    return collect(
        state=args.state,
        exit_code=args.exit_code,
        signal=args.signal,
        logs=[_node_and_path(spec) for spec in args.log],
        kernel_logs=[_node_and_path(spec) for spec in args.kernel_log],
        evidence=list(args.evidence),
        tail_bytes=tail,
        year=year,
        tz=None,
    )


def _parse_tail_bytes(text: str) -> int:
    found = re.fullmatch(r"\s*(\d+)\s*([KMG]i?B?)?\s*", text, re.IGNORECASE)
    if found is None:
        raise TriageError(f"bad --tail-bytes {text!r}: expected a size like 4194304 or 4M")
    unit = (found.group(2) or "").upper()[:1]
    value = int(found.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit]
    if not 1 <= value <= _MAX_TAIL_BYTES:
        raise TriageError(f"--tail-bytes must be between 1 and {_MAX_TAIL_BYTES}, got {value}")
    return value


def _parse_time(text: str) -> float:
    bad = TriageError(f"bad --end-time {text!r}: expected epoch seconds or ISO 8601")
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is None:
        from datetime import datetime

        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise bad from None
        seconds = moment.timestamp() if moment.tzinfo else moment.astimezone().timestamp()
    try:
        time.localtime(seconds)  # the year of the logs' naive times is read from it
    except (OverflowError, OSError, ValueError):
        raise bad from None  # nan, inf, or beyond the platform's time_t
    return seconds


def _node_and_path(spec: str) -> tuple[str | None, str]:
    """`node01=/path/x.log` → ("node01", path); a bare path (even one with '=') → (None, path)."""
    found = _NODE_PATH.match(spec)
    if found and not os.path.exists(spec):
        return found.group("node"), found.group("path")
    return None, spec


_ACTIONS = {
    "none": "leave the job ended",
    "requeue": "requeue the job",
    "hold": "requeue the job held, for an operator to look at",
}


def _explain(result: Any) -> str:
    """A few lines for a person: the cause, why, whom it blames and what happens next."""
    lines = [
        f"cause:   {result.cause.value} ({result.domain.value}), "
        f"confidence {result.confidence:.2f}",
        f"why:     {result.reason}",
    ]
    if result.nodes:
        backing = (
            "root-collected evidence: may be drained"
            if result.root_backed
            else "only the job's own evidence: excluded from the job, not drained"
        )
        lines.append(f"blamed:  {', '.join(result.nodes)} ({backing})")
    lines.append(f"action:  {result.action.value}: {_action_words(result)}")
    return "\n".join(lines)


def _action_words(result: Any) -> str:
    nodes = ", ".join(result.nodes)
    if result.action.value == "requeue_exclude":
        words = f"requeue the job without {nodes}" if nodes else "requeue the job"
        if nodes and result.root_backed:
            words += f", and drain {nodes} for a health check"
    else:
        words = _ACTIONS[result.action.value]
    condition = result.condition.value
    if condition == "if_resumable":
        words += " if it is resumable (it checkpoints), else leave it ended"
    elif condition == "once":
        words += " once; if it fails the same way again, leave it ended"
    return words
