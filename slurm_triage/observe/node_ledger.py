"""A compute node's metrics: what its Prolog, Epilog and health checks did, kept in a
small ledger per node, and the metric families that are a pure function of it.

Nodes have no journal, so each node keeps `<state_dir>/metrics/<node>.json` (root's, 0600):
the last status, duration and time of every check, and counters of runs, drains, resumes,
breaker trips, Epilog node faults and notifications. Counters only grow; a ledger that
cannot be read back (corrupt, from another version) is started afresh, which Prometheus
reads as a counter reset. Only the families and label arities below are ever read back,
so a damaged file cannot put arbitrary series into the textfile.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_triage.observe.exposition import Family, Kind, Spec

LEDGER_VERSION = 1
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

CHECK_STATUS = Spec(
    "slurm_triage_health_check_status",
    Kind.GAUGE,
    "1 for the status the check had at its last run on the node, 0 for the others",
    ("node", "check", "status"),
)
CHECK_DURATION = Spec(
    "slurm_triage_health_check_duration_seconds",
    Kind.GAUGE,
    "How long the check took at its last run on the node",
    ("node", "check"),
    unit="seconds",
)
CHECK_LAST_RUN = Spec(
    "slurm_triage_health_check_last_run_timestamp_seconds",
    Kind.GAUGE,
    "When the check last ran on the node (Unix time)",
    ("node", "check"),
    unit="seconds",
)
RUNS = Spec(
    "slurm_triage_node_runs",
    Kind.COUNTER,
    "Runs of slurm-triage on the node by mode: prolog, epilog, cron (periodic health check), cli",
    ("node", "mode"),
)
LAST_RUN = Spec(
    "slurm_triage_node_last_run_timestamp_seconds",
    Kind.GAUGE,
    "When slurm-triage last ran on the node in this mode (Unix time)",
    ("node", "mode"),
    unit="seconds",
)
HEALTH_DRAINS = Spec(
    "slurm_triage_health_drains",
    Kind.COUNTER,
    "Drains of the node by its health checks, by failing check and the action it asked for",
    ("node", "check", "action"),
)
HEALTH_RESUMES = Spec(
    "slurm_triage_health_resumes",
    Kind.COUNTER,
    "Resumes of the node by its health checks (only nodes slurm-triage drained)",
    ("node",),
)
BREAKER_TRIPS = Spec(
    "slurm_triage_health_breaker_trips",
    Kind.COUNTER,
    "Health runs whose drain the circuit breaker held back, by check",
    ("node", "check"),
)
EPILOG_FAULTS = Spec(
    "slurm_triage_epilog_node_faults",
    Kind.COUNTER,
    "Epilogs that failed on purpose so that Slurm drains the node at once, by cause",
    ("node", "cause"),
)
NOTIFICATIONS = Spec(
    "slurm_triage_health_notifications",
    Kind.COUNTER,
    "Webhook notifications from the node's health checks, by kind and delivery outcome",
    ("node", "kind", "outcome"),
)
# Families kept as counters/gauges in the ledger (labels without `node`).
_KEPT = {
    s.name: s
    for s in (
        CHECK_DURATION,
        CHECK_LAST_RUN,
        RUNS,
        LAST_RUN,
        HEALTH_DRAINS,
        HEALTH_RESUMES,
        BREAKER_TRIPS,
        EPILOG_FAULTS,
        NOTIFICATIONS,
    )
}
NODE_SPECS: tuple[Spec, ...] = (CHECK_STATUS, *_KEPT.values())
STATUSES = ("ok", "warn", "fail", "unknown", "skipped")


class LedgerError(ValueError):
    """A node name that cannot name a file."""


@dataclass
class NodeLedger:
    """One node's recorded facts: values by family name and label values (without node)."""

    node: str
    values: dict[str, dict[tuple[str, ...], float]] = field(default_factory=dict)
    check_status: dict[str, str] = field(default_factory=dict)
    # When each check's breaker trip was last notified (one message per breaker window).
    breaker_notified_at: dict[str, float] = field(default_factory=dict)

    def add(self, spec: Spec, labels: tuple[str, ...], amount: float = 1) -> None:
        family = self.values.setdefault(spec.name, {})
        family[labels] = family.get(labels, 0) + amount

    def set(self, spec: Spec, labels: tuple[str, ...], value: float) -> None:
        self.values.setdefault(spec.name, {})[labels] = value

    def get(self, spec: Spec, labels: tuple[str, ...]) -> float:
        return self.values.get(spec.name, {}).get(labels, 0)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": LEDGER_VERSION,
                "node": self.node,
                "values": {
                    name: [[list(k), v] for k, v in sorted(family.items())]
                    for name, family in sorted(self.values.items())
                },
                "check_status": self.check_status,
                "breaker_notified_at": self.breaker_notified_at,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, node: str, text: str) -> NodeLedger:
        """Read a ledger back, keeping only well-formed entries of known families."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION:
            raise ValueError("not a version 1 ledger")
        ledger = cls(node)
        values = data.get("values")
        for name, rows in (values if isinstance(values, dict) else {}).items():
            spec = _KEPT.get(name)
            if spec is None or not isinstance(rows, list):
                continue
            for row in rows:
                labels, value = _entry(row, len(spec.labels) - 1)
                if labels is not None:
                    ledger.set(spec, labels, value)
        ledger.check_status = _str_map(data.get("check_status"), allowed=STATUSES)
        ledger.breaker_notified_at = {
            k: float(v)
            for k, v in _str_keys(data.get("breaker_notified_at")).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        return ledger


def _entry(row: Any, arity: int) -> tuple[tuple[str, ...] | None, float]:
    if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], list)):
        return None, 0
    labels, value = row
    ok = len(labels) == arity and all(isinstance(x, str) and len(x) <= 128 for x in labels)
    if not ok or isinstance(value, bool) or not isinstance(value, int | float):
        return None, 0
    return tuple(labels), float(value)


def _str_keys(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and len(k) <= 128}


def _str_map(value: Any, allowed: Sequence[str]) -> dict[str, str]:
    return {k: v for k, v in _str_keys(value).items() if v in allowed}


def ledger_path(state_dir: str, node: str) -> Path:
    """`<state_dir>/metrics/<node>.json`; the node name must be a plain host name."""
    if not _NODE_NAME.fullmatch(node):
        raise LedgerError(f"node name {node[:64]!r} cannot name a metrics ledger")
    return Path(state_dir) / "metrics" / f"{node}.json"


def read_ledger(path: Path, node: str) -> NodeLedger:
    """The ledger at `path`; a fresh one when it is absent or unreadable."""
    try:
        return NodeLedger.from_json(node, path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NodeLedger(node)
    except (OSError, ValueError, TypeError):
        return NodeLedger(node)


def read_ledgers(state_dir: str) -> list[NodeLedger]:
    """Every node ledger under `<state_dir>/metrics` (a host running several slurmd)."""
    found = []
    for path in sorted((Path(state_dir) / "metrics").glob("*.json")):
        node = path.name[: -len(".json")]
        if _NODE_NAME.fullmatch(node):
            found.append(read_ledger(path, node))
    return found


def node_families(ledgers: Iterable[NodeLedger]) -> list[Family]:
    """The node families for these ledgers (pure)."""
    ledgers = list(ledgers)
    status: dict[tuple[str, ...], float] = {}
    for ledger in ledgers:
        for check, current in ledger.check_status.items():
            for s in STATUSES:
                status[(ledger.node, check, s)] = int(s == current)
    families = [Family(CHECK_STATUS, status)]
    for spec in _KEPT.values():
        samples: dict[tuple[str, ...], float | int] = {}
        for ledger in ledgers:
            for labels, value in ledger.values.get(spec.name, {}).items():
                number = int(value) if spec.kind is Kind.COUNTER else value
                samples[(ledger.node, *labels)] = number
        families.append(Family(spec, samples))
    return families
