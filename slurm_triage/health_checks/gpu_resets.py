"""When each GPU on this node was last reset by its own health check (prolog_epilog.gpu_repair),
in a node-local ledger `<state_dir>/health/<node>.gpu-resets.json`: {bus id: epoch seconds}.

A reset leaves the XID lines that asked for it in the kernel log (the driver writes no line
that says "reset"; only a reboot starts a new log with its banner). gpu.xid reads the ledger
so that an XID a reset repairs, logged on that GPU before its reset, no longer fails the
node; XIDs that ask for more than a reset still count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from slurm_triage.atomic import write_atomically
from slurm_triage.gpu_ids import canonical_bus_id
from slurm_triage.logs import get_logger


def ledger_path(state_dir: str, node: str) -> Path:
    return Path(state_dir) / "health" / f"{node}.gpu-resets.json"


def gpu_key(bus_id: str | None) -> str | None:
    """One form for sysfs's `0000:3a:00.0`, NVML's `00000000:3A:00.0` and the XID line's
    `0000:3a:00` (no function: a GPU is function 0)."""
    if not bus_id:
        return None
    return canonical_bus_id(bus_id if "." in bus_id else f"{bus_id}.0")


def read_resets(path: Path) -> dict[str, float]:
    """The ledger; empty when missing or unreadable (logged): then no XID is forgiven."""
    try:
        data = json.loads(path.read_text())
        return {str(k): float(v) for k, v in data["resets"].items() if gpu_key(str(k))}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        get_logger().warning("gpu_reset_ledger_unreadable", path=str(path), error=str(exc)[:200])
        return {}


def record_resets(path: Path, bus_ids: Iterable[str], when: float) -> None:
    """Add these GPUs' resets at `when` (root's own file; one writer: the health check)."""
    resets: Mapping[str, float] = read_resets(path)
    updated = dict(resets)
    for bus in bus_ids:
        key = gpu_key(bus)
        if key:
            updated[key] = when
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"resets": updated}, indent=1, sort_keys=True))
