"""Failure attribution: evidence in, one `Attribution` out (cause, action, nodes, confidence).

The public surface: `attribute()` (pure), `Attribution`, `Window`/`job_window()`; the
readers that turn files into facts (`scan_file` for job logs, `parse_kernel_file` for kernel
logs) and their pure cores; the data tables (`SIGNATURES`, `XID_CATALOGUE`). Standard
library only, so the wrapper and the epilog can import it on every job.
"""

from slurm_triage.attribution.engine import Attribution, Window, attribute, job_window
from slurm_triage.attribution.kernel import normalise_bdf, parse_kernel_file, parse_kernel_lines
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
