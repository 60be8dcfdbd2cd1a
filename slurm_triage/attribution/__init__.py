"""Failure attribution: evidence in, one `Attribution` out (cause, action, nodes, confidence).

The public surface: `attribute()` (pure), `Attribution`, `Window`/`job_window()`; the
readers that turn files into facts (`scan_file` for job logs, `parse_kernel_file` for kernel
logs) and their pure cores; the data tables (`SIGNATURES`, `XID_CATALOGUE`). Standard
library only, so the wrapper and the epilog can import it on every job.

Each name is imported from its module on first use (PEP 562): the Prolog's kernel-log
check needs `attribution.kernel` and `attribution.xid`, not the engine and its signature
tables (tens of milliseconds on every job start).
"""

from __future__ import annotations

import sys

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from slurm_triage.attribution.engine import Attribution, Window, attribute, job_window
    from slurm_triage.attribution.kernel import (
        normalise_bdf,
        parse_kernel_file,
        parse_kernel_lines,
    )
    from slurm_triage.attribution.logscan import (
        DEFAULT_TAIL_BYTES,
        LogReadError,
        decode_tail,
        read_tail,
        scan_file,
        scan_lines,
    )
    from slurm_triage.attribution.signatures import SIGNATURES, Signature
    from slurm_triage.attribution.tiers import Tier
    from slurm_triage.attribution.xid import XID_CATALOGUE, XidInfo
    from slurm_triage.attribution.xid import lookup as lookup_xid

_HOME = {
    "Attribution": "engine",
    "Window": "engine",
    "attribute": "engine",
    "job_window": "engine",
    "normalise_bdf": "kernel",
    "parse_kernel_file": "kernel",
    "parse_kernel_lines": "kernel",
    "DEFAULT_TAIL_BYTES": "tail",
    "LogReadError": "tail",
    "decode_tail": "tail",
    "read_tail": "tail",
    "scan_file": "logscan",
    "scan_lines": "logscan",
    "SIGNATURES": "signatures",
    "Signature": "signatures",
    "Tier": "tiers",
    "XID_CATALOGUE": "xid",
    "XidInfo": "xid",
    "lookup_xid": "xid",
}
_RENAMED = {"lookup_xid": "lookup"}

__all__ = [
    "DEFAULT_TAIL_BYTES",
    "SIGNATURES",
    "XID_CATALOGUE",
    "Attribution",
    "LogReadError",
    "Tier",
    "Signature",
    "Window",
    "XidInfo",
    "attribute",
    "decode_tail",
    "job_window",
    "lookup_xid",
    "normalise_bdf",
    "parse_kernel_file",
    "parse_kernel_lines",
    "read_tail",
    "scan_file",
    "scan_lines",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # __import__, not importlib.import_module: the importlib package (with warnings) is no
    # import of classify's path (issue 20).
    home = f"{__name__}.{_HOME[name]}"
    __import__(home)
    module = sys.modules[home]
    value = getattr(module, _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
