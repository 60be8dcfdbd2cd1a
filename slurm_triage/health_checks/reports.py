"""What a health run leaves behind on the node: its last report, and its log lines.

`<state_dir>/health/<node>.last.json` holds the last run's report (every check's status,
reason and evidence) for `slurm-triage check` and for a person on the node.
"""

from __future__ import annotations

import json
from pathlib import Path

from slurm_triage.atomic import write_atomically
from slurm_triage.config import Config
from slurm_triage.health_checks.result import RunReport
from slurm_triage.logs import get_logger


def save_report(config: Config, report: RunReport) -> None:
    """Keep the last report per node; a state directory that cannot be written is logged."""
    log = get_logger(node=report.node)
    try:
        path = Path(config.paths.state_dir) / "health" / f"{report.node}.last.json"
        write_atomically(path, json.dumps(report.to_dict()))
    except OSError as exc:
        log.warning("health_report_unwritten", error=str(exc))


def log_report(report: RunReport) -> None:
    log = get_logger(node=report.node, mode=report.mode)
    for r in report.results:
        if r.status.value in ("FAIL", "UNKNOWN", "WARN"):
            log.warning(
                "health_check_" + r.status.value.lower(),
                check=r.check,
                reason=r.reason,
                severity=r.severity.value,
                action=r.action.value,
            )
    log.info(
        "health_run_done",
        checks=len(report.results),
        failures=len(report.failures),
        seconds=round(report.seconds, 3),
        stopped_early=report.stopped_early,
    )
