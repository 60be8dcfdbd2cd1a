"""`slurm-triage burn-in`: what a repaired node's burn-in job runs on it (issue 16).

`nodes reconcile` submits it as the job `triage-burnin-<node>` in the node's maintenance
reservation. It runs the full health screen, then `dcgmi diag -r <repair.burn_in_dcgm_level>`
when dcgmi is on PATH, then the site's `repair.burn_in_command` (an argument list, no shell),
each only if the one before passed. It prints one JSON result, keeps it as root's record
`<evidence_dir>/_root/<job>/<node>.burn-in.json` (with the GPUs' index, PCI bus id and UUID,
for an RMA bundle), and exits 0 only when every part passed; reconcile reads the job's end.
It changes nothing in Slurm.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

EXIT_FAILED = 1


@dataclass(frozen=True)
class Part:
    """One part of the burn-in: its name, whether it passed, and why (one line)."""

    name: str
    passed: bool
    detail: str
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }


def register(sub: Any) -> None:
    p = sub.add_parser(
        "burn-in",
        help="prove a repaired node: health screen, DCGM diag, the site's test (run as a job)",
        description="Run on a node by its burn-in job (slurm-triage nodes reconcile submits "
        "it in the reservation triage_burnin_<node>): the full health screen, `dcgmi diag -r "
        "<repair.burn_in_dcgm_level>` when dcgmi is on PATH, and repair.burn_in_command when "
        "set; each part only when the ones before passed. Prints a JSON result and exits 0 "
        "only when all passed. Changes nothing in Slurm.",
    )
    p.add_argument(
        "--node",
        type=_node,
        help="this node's Slurm name (default: $SLURMD_NODENAME or the host)",
    )
    p.add_argument(
        "--timeout-s",
        type=_seconds,
        default=None,
        help="per external test (default: the job's time limit)",
    )
    p.set_defaults(handler=_burn_in)


def _node(text: str) -> str:
    from slurm_triage.slurm.arguments import node_name
    from slurm_triage.slurm.errors import SlurmCommandError

    try:
        return node_name(text)
    except SlurmCommandError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 7 * 86400:  # NaN fails too
        raise argparse.ArgumentTypeError(f"not a number of seconds above 0: {text[:40]!r}")
    return value


def _burn_in(args: Any, context: Any) -> int:
    from slurm_triage.health_checks.runner import run_checks

    config = context.config()
    node = args.node or os.environ.get("SLURMD_NODENAME") or None
    limit = args.timeout_s or config.repair.burn_in_time_limit_min * 60.0
    started = time.monotonic()
    report = run_checks(config, mode="burn_in", everything=True, node=node, save_state=False)
    node = report.node
    failed = [
        f"{r.check}: {r.reason}"
        for r in report.results
        if r.status.value not in ("OK", "WARN", "SKIPPED")
    ]
    parts = [
        Part("health", not failed, "; ".join(failed)[:500] or "all checks passed", report.seconds)
    ]
    dcgmi = shutil.which("dcgmi") if config.repair.burn_in_dcgm_level else None
    if dcgmi and parts[-1].passed:
        parts.append(
            run_part("dcgm", [dcgmi, "diag", "-r", str(config.repair.burn_in_dcgm_level)], limit)
        )
    if config.repair.burn_in_command and parts[-1].passed:
        parts.append(run_part("site", list(config.repair.burn_in_command), limit))
    passed = all(p.passed for p in parts)
    result = {
        "node": node,
        "job_id": os.environ.get("SLURM_JOB_ID", ""),
        "passed": passed,
        "parts": [p.to_dict() for p in parts],
        "gpus": _gpus(config, node),
        "seconds": round(time.monotonic() - started, 3),
        "report": report.to_dict(),
    }
    _keep(config, node, result)
    print(json.dumps(result))
    return 0 if passed else EXIT_FAILED


def run_part(name: str, argv: Sequence[str], timeout_s: float) -> Part:
    """Run one external test without a shell; exit 0 passes. Its output goes to the job's
    output file; the detail keeps its last line."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Part(name, False, f"timed out after {timeout_s:g} s", time.monotonic() - started)
    except OSError as exc:
        return Part(
            name, False, f"cannot run {argv[0]}: {exc.strerror or exc}", time.monotonic() - started
        )
    # The part's own output, echoed into the burn-in job's log: a log that refuses it (a
    # full disk) loses the echo, never the part's verdict.
    for stream, text in ((sys.stdout, done.stdout), (sys.stderr, done.stderr)):
        with contextlib.suppress(OSError, AttributeError):
            stream.buffer.write(text[-65536:])
    tail = (done.stdout or done.stderr).decode(errors="replace").strip().splitlines()[-1:] or [""]
    detail = f"exit {done.returncode}: {tail[0][:200]}"
    return Part(name, done.returncode == 0, detail, time.monotonic() - started)


def _gpus(config: Any, node: str) -> list[dict[str, Any]]:
    """Index, PCI bus id and UUID of each GPU NVML shows (for an RMA bundle)."""
    from slurm_triage.health_checks.nvml_facts import read_nvml
    from slurm_triage.nvml import nvml_module

    try:
        facts = read_nvml(nvml_module(config.health, node))
    except Exception:  # NVML missing: the health part said so already
        return []
    return [
        {"index": g.index, "bus_id": g.bus_id, "uuid": g.uuid, "error": g.error} for g in facts.gpus
    ]


def _keep(config: Any, node: str, result: dict[str, Any]) -> None:
    """Root's record of the result, where no user can touch it (root only, in a job)."""
    from slurm_triage.cli.rma_bundle import BURN_IN_SUFFIX
    from slurm_triage.evidence.store import UnsafeEvidence, write_root_record

    job = os.environ.get("SLURM_JOB_ID", "")
    if os.geteuid() != 0 or not job.isdigit():
        return
    try:
        write_root_record(
            config.paths.evidence_dir,
            int(job),
            node,
            json.dumps(result).encode(),
            suffix=BURN_IN_SUFFIX,
        )
    except (OSError, UnsafeEvidence) as exc:
        print(f"slurm-triage: burn-in record not kept: {exc}", file=sys.stderr)
