"""Facts of a sacct file's raw lines, which the scan cannot give: how many step rows it had
(the scan drops them (ingest), so they are the lines it did not return), and whether its
last line was cut off.

sacct without -X prints each job's steps (`13.batch`, `13.extern`, `13.0`) right after the
job's row, so a file whose first MiB holds no step row has none, and its lines are not
counted at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slurm_triage.analytics.sacct_layout import SacctLayout

_COUNT_CHUNK = 1 << 24
_TAIL_BYTES = 1 << 16


def count_steps(source: Path | bytes, head: bytes, layout: SacctLayout, rows: int) -> int:
    """Step rows: the lines the scan did not return. sacct prints a job's steps right
    after it, so a file whose first MiB has none has none, and its lines are not counted
    (that pass costs a few tenths of a second on a 4M-job file)."""
    if isinstance(source, Path) and not _has_steps(head, layout):
        return 0
    return _line_count(source) - int(layout.has_header) - rows


def _has_steps(head: bytes, layout: SacctLayout) -> bool:
    lines = head.split(b"\n")[int(layout.has_header) : -1]
    return any(is_step_line(line, layout) for line in lines)


def is_step_line(line: bytes, layout: SacctLayout) -> bool:
    """Whether one line of sacct text is a step row: its job id field holds a dot."""
    at = layout.names.index(layout.id_field)
    fields = line.split(b"|")
    if layout.needs_field_count and layout.glue_at is not None and at > layout.glue_at:
        at_line = len(fields) - (len(layout.names) - at)
    else:
        at_line = at
    return 0 <= at_line < len(fields) and b"." in fields[at_line]


def _line_count(source: Path | bytes) -> int:
    """Lines as the CSV reader counts them (a last line without a newline is one)."""
    if isinstance(source, bytes):
        return source.count(b"\n") + int(bool(source) and not source.endswith(b"\n"))
    count, last = 0, 10
    buffer = bytearray(_COUNT_CHUNK)
    with source.open("rb") as fh:
        # numpy compares a chunk at memory speed: half the time of bytes.count.
        while size := fh.readinto(buffer):
            chunk = np.frombuffer(buffer, np.uint8, size)
            count += int(np.count_nonzero(chunk == 10))
            last = int(chunk[-1])
    return count + int(last != 10)


def cut_off_row(source: Path | bytes, layout: SacctLayout) -> bool:
    """Whether the input's last line has no newline and is a job row: sacct ends every
    line with one, so that line was cut (a copy or a write interrupted), and its last
    field may be a prefix of the real one (`gpu[033-0`, `3` of `32`)."""
    if isinstance(source, bytes):
        tail = source[-_TAIL_BYTES:]
    else:
        try:
            with source.open("rb") as fh:
                fh.seek(max(fh.seek(0, 2) - _TAIL_BYTES, 0))
                tail = fh.read()
        except OSError:
            return False
    if not tail or tail.endswith(b"\n"):
        return False
    return not is_step_line(tail.rsplit(b"\n", 1)[-1], layout)
