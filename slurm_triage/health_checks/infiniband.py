"""`ib.ports`: the node's InfiniBand ports ACTIVE / LinkUp at the expected rate, error
counters not rising. Reads sysfs (`<sysfs_root>/class/infiniband/<dev>/ports/<n>/`,
signatures.md §3.1; Linux Documentation/ABI/stable/sysfs-class-infiniband).

Which ports. `health.ib_ports` names them ("mlx5_0:1"), any link layer: every one must be up.
Unset, the check takes the ports of the compute fabric as a real H100 node shows them: those
whose `link_layer` is InfiniBand, of a physical function (not an SR-IOV virtual function,
whose PCI device has `physfn`), that were up at baseline: ACTIVE/LinkUp in any earlier run
on this node (kept with the counters, `ib_baseline`) or now, or with `link_downed` above 0
(the counter starts at 0 when the driver loads, so such a port trained since boot and lost
its link: a port that never came up cannot go down). So a RoCE storage port or a
BlueField's Ethernet ports (link_layer Ethernet), the uncabled second port of a dual-port
card (Polling since boot) and VFs nobody assigned are not checked unless named; a port that
was up once and is down now, or gone from sysfs, fails. A port that has never been up since
the state began is not noticed without `ib_ports`: name the ports where that matters.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_triage.config import HealthConfig
from slurm_triage.health_checks.counter_deltas import judged_against
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
BASELINE_KEY = "ib_baseline"
INFINIBAND = "InfiniBand"


@dataclass(frozen=True)
class PortFacts:
    port: str  # "mlx5_0:1"
    present: bool
    state: str = ""
    phys_state: str = ""
    rate_gbps: float | None = None
    counters: Mapping[str, int] | None = None
    link_layer: str = ""  # "InfiniBand", "Ethernet" (RoCE); "" when sysfs does not say
    virtual_function: bool = False
    pci_bus_id: str | None = None  # the HCA's PCI function, e.g. "0000:1a:00.0"

    @property
    def up(self) -> bool:
        return self.state.endswith("ACTIVE") and self.phys_state.endswith("LinkUp")

    @property
    def was_up(self) -> bool:
        """Up now, or up since the driver loaded (its link went down since)."""
        return self.up or (self.counters or {}).get("link_downed", 0) > 0

    @property
    def fabric(self) -> bool:
        """A port of the InfiniBand fabric on a physical function: checked by default."""
        return self.link_layer == INFINIBAND and not self.virtual_function


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def read_ports(sysfs_root: str, expected: Sequence[str]) -> tuple[PortFacts, ...]:
    """Facts for each expected port, or for every port found when none are configured."""
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
        pci = base / dev / "device"
        facts.append(
            PortFacts(
                name,
                True,
                _read(port / "state"),
                _read(port / "phys_state"),
                float(rate.group(1)) if rate else None,
                counters,
                _read(port / "link_layer"),
                (pci / "physfn").exists(),
                os.path.basename(os.path.realpath(pci)) if pci.exists() else None,
            )
        )
    return tuple(facts)


def baseline(ports: Iterable[PortFacts], before: Iterable[str]) -> list[str]:
    """The fabric ports up at baseline: those up before, and those up now."""
    return sorted(set(before) | {p.port for p in ports if p.present and p.fabric and p.was_up})


def _selected(
    ports: Sequence[PortFacts], config: HealthConfig, previous: Mapping[str, Any]
) -> tuple[list[PortFacts], list[PortFacts]]:
    """The ports to check and the ports left alone (see the module docstring)."""
    if config.ib_ports:
        return list(ports), []
    was_up = set(previous.get(BASELINE_KEY, []))
    seen = {p.port for p in ports}
    # A port read as absent was asked for by name; a baseline port absent from sysfs is gone.
    gone = [p for p in ports if not p.present]
    gone += [PortFacts(name, present=False) for name in sorted(was_up - seen)]
    checked = [p for p in ports if p.present and p.fabric and (p.was_up or p.port in was_up)]
    ignored = [p for p in ports if p.present and p not in checked]
    return gone + checked, ignored


def _describe(p: PortFacts) -> str:
    kind = "VF" if p.virtual_function else p.link_layer or "?"
    return f"{p.port} {kind} {p.state or '?'}/{p.phys_state or '?'}"


def check_ports(
    ports: Sequence[PortFacts], config: HealthConfig, previous: Mapping[str, Any], **_: Any
) -> CheckResult:
    name = "ib.ports"
    checked, ignored = _selected(ports, config, previous)
    not_checked = [_describe(p) for p in ignored]
    if not checked:
        found = f" ({len(ignored)} not checked: {', '.join(not_checked)})" if ignored else ""
        return skipped(name, f"no InfiniBand port configured or up at baseline{found}")
    last = previous.get("ib", {})
    trend: CheckResult | None = None
    for p in checked:
        if not p.present:
            return fail(name, f"{p.port} missing", Severity.HIGH, Action.DRAIN_NOW, port=p.port)
        if not p.up:
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
            was = judged_against(value, before.get(counter))
            if was is not None and value > was:
                if counter in _FATAL_COUNTERS:
                    return fail(
                        name,
                        f"{p.port} {counter} rose {was}->{value}",
                        Severity.HIGH,
                        Action.DRAIN_NOW,
                        port=p.port,
                    )
                trend = trend or warn(name, f"{p.port} {counter} rose {was}->{value}", port=p.port)
    return trend or ok(
        name,
        f"{len(checked)} port(s) ACTIVE/LinkUp",
        ports=[p.port for p in checked],
        not_checked=not_checked,
    )


def counters(ports: Sequence[PortFacts]) -> dict[str, dict[str, int]]:
    return {p.port: dict(p.counters) for p in ports if p.present and p.counters}
