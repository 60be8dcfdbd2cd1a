"""The bounded tail of a log file, decoded tolerantly: what the job-log scan
(`logscan`) and the kernel-log reader (`kernel`) both read.

Standard library only and no signature tables, so the Prolog's kernel-log check reads its
file without importing the job-log scanner.
"""

from __future__ import annotations

import os
import re
import stat

from slurm_triage.errors import TriageError

DEFAULT_TAIL_BYTES = 4 << 20
MAX_LINE_CHARS = 8192
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class LogReadError(TriageError):
    """A log file could not be read; one line naming the file and why."""


def read_tail(
    path: str | os.PathLike[str],
    max_bytes: int = DEFAULT_TAIL_BYTES,
    *,
    follow_symlinks: bool = True,
) -> tuple[bytes, bool]:
    """The last `max_bytes` of a regular file, and whether that is the whole file.

    Opened non-blocking so a FIFO planted as a log cannot hang us, then refused like any
    non-regular file; root reading a user's files passes `follow_symlinks=False`.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise LogReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise LogReadError(f"{path}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        try:
            start = max(0, info.st_size - max_bytes)
            handle.seek(start)
            return handle.read(max_bytes), start == 0
        except OSError as exc:
            raise LogReadError(f"cannot read {path}: {exc.strerror or exc}") from None


def decode_tail(
    data: bytes, *, whole_file: bool, max_line_chars: int = MAX_LINE_CHARS
) -> list[str]:
    """Bytes → lines: tolerant decoding, ANSI codes and NULs removed, long lines shortened.

    When the tail starts mid-file its first, partial line is dropped (unless it is the only
    one: a single 50 MB line still yields its end).
    """
    data = data.replace(b"\x00", b"")
    if not whole_file:
        cut = data.find(b"\n")
        if 0 <= cut < len(data) - 1:
            data = data[cut + 1 :]
    text = data.decode("utf-8", errors="replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    # \r too: progress bars redraw with it and would otherwise make one endless line.
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    half = max_line_chars // 2
    return [ln if len(ln) <= max_line_chars else f"{ln[:half]} ... {ln[-half:]}" for ln in lines]
