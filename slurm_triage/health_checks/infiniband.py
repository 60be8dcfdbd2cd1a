"""`ib.ports`: every expected HCA port ACTIVE / LinkUp at the expected rate, error counters
not rising. Reads sysfs (`<sysfs_root>/class/infiniband/<dev>/ports/<n>/`, signatures.md §3.1)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_triage.config import HealthConfig
from slurm_triage.health_checks.result import Action, CheckResult, Severity, fail, ok, skipped, warn

COUNTERS = (
    "link_downed",
    "symbol_error",
    "port_rcv_errors",
    "link_error_recovery",
    "local_link_integrity_errors",
)
# A link that went down is a failed job in waiting; the others are signal-quality trends.
_FATAL_COUNTERS = ("link_downed",)


@dataclass(frozen=True)
class PortFacts:
    port: str  # "mlx5_0:1"
    present: bool
    state: str = ""
    phys_state: str = ""
    rate_gbps: float | None = None
    counters: Mapping[str, int] | None = None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def read_ports(sysfs_root: str, expected: Sequence[str]) -> tuple[PortFacts, ...]:
    """Facts for each expected port, or every port found when none are configured."""
    base = Path(sysfs_root) / "class/infiniband"
    names = list(expected) or sorted(
        f"{d.name}:{p.name}" for d in base.glob("*") for p in (d / "ports").glob("*")
    )
    facts = []
    for name in names:
        dev, _, num = name.partition(":")
        port = base / dev / "ports" / (num or "1")
        if not port.is_dir():
            facts.append(PortFacts(name, present=False))
            continue
        rate = re.match(r"([\d.]+) Gb/sec", _read(port / "rate"))
        counters = {c: v for c in COUNTERS if (v := _int(_read(port / "counters" / c))) is not None}
        facts.append(
            PortFacts(
                name,
                True,
                _read(port / "state"),
                _read(port / "phys_state"),
                float(rate.group(1)) if rate else None,
                counters,
            )
        )
    return tuple(facts)


def check_ports(
    ports: Sequence[PortFacts], config: HealthConfig, previous: Mapping[str, Any], **_: Any
) -> CheckResult:
    name = "ib.ports"
    if not ports:
        return skipped(name, "no InfiniBand ports configured or found")
    last = previous.get("ib", {})
    trend: CheckResult | None = None
    for p in ports:
        if not p.present:
            return fail(name, f"{p.port} missing", Severity.HIGH, Action.DRAIN_NOW, port=p.port)
        if not p.state.endswith("ACTIVE") or not p.phys_state.endswith("LinkUp"):
            return fail(
                name,
                f"{p.port} {p.state or '?'} / {p.phys_state or '?'}",
                Severity.HIGH,
                Action.DRAIN_NOW,
                port=p.port,
                state=p.state,
                phys_state=p.phys_state,
            )
        if config.ib_rate_gbps and (p.rate_gbps or 0) < config.ib_rate_gbps:
            return fail(
                name,
                f"{p.port} at {p.rate_gbps} Gb/s, expected {config.ib_rate_gbps:g}",
                Severity.HIGH,
                Action.DRAIN_NOW,
                port=p.port,
                rate_gbps=p.rate_gbps,
            )
        before = last.get(p.port, {})
        for counter, value in (p.counters or {}).items():
            if counter in before and value > before[counter]:
                if counter in _FATAL_COUNTERS:
                    return fail(
                        name,
                        f"{p.port} {counter} rose {before[counter]}->{value}",
                        Severity.HIGH,
                        Action.DRAIN_NOW,
                        port=p.port,
                    )
                trend = trend or warn(
                    name, f"{p.port} {counter} rose {before[counter]}->{value}", port=p.port
                )
    return trend or ok(name, f"{len(ports)} port(s) ACTIVE/LinkUp")


def counters(ports: Sequence[PortFacts]) -> dict[str, dict[str, int]]:
    return {p.port: dict(p.counters) for p in ports if p.present and p.counters}
