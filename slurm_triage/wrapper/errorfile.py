"""The per-rank error file: a trainer's uncaught exception as JSON, read back by the wrapper.

torch.distributed.elastic's idea: the parent names one file per rank in an environment
variable (SLURM_TRIAGE_ERROR_FILE) and the child writes its uncaught exception there, so the
root exception is known exactly instead of scraped from a log. The trainer side
(`record_exceptions`) never masks the user's exception: any failure to write is swallowed.
The first writer wins (a launcher's workers all inherit the same path), and the file is
created complete or not at all (temp file + link). Standard library only.
"""

from __future__ import annotations

import functools
import math
import os
import stat
import sys
import time
from collections.abc import Callable
from types import TracebackType

from slurm_triage.frozen import Frozen

ERROR_FILE_ENV = "SLURM_TRIAGE_ERROR_FILE"
HEARTBEAT_ENV = "SLURM_TRIAGE_HEARTBEAT"
SCHEMA = "slurm-triage/error-file"
VERSION = 1
MAX_ERROR_FILE_BYTES = 64 * 1024
MAX_TYPE_CHARS = 200
MAX_MESSAGE_CHARS = 2000
MAX_TRACEBACK_CHARS = 8000
_KEYS = {"schema", "version", "type", "message", "traceback", "time", "pid"}

# typing's flag without importing typing (issue 20: a wrapper imports this module for its
# reader); mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar, overload

    F = TypeVar("F", bound=Callable[..., Any])


class ErrorFileError(ValueError):
    """An error file exists but is not one we wrote; the message is one line."""


class ErrorReport(Frozen):
    """What a rank recorded about the exception that ended it."""

    exc_type: str
    message: str
    traceback: str
    time: float | None
    pid: int | None


if TYPE_CHECKING:

    @overload
    def record_exceptions(func: None = None) -> Callable[[F], F]: ...
    @overload
    def record_exceptions(func: F) -> F: ...


def record_exceptions(func: F | None = None) -> Any:
    """Record uncaught exceptions in $SLURM_TRIAGE_ERROR_FILE (a no-op without the variable).

    `record_exceptions()` installs a sys.excepthook that chains the previous one (and returns
    a decorator, so `@record_exceptions()` works too); `@record_exceptions` on `main` records
    what escapes it and re-raises. SystemExit is not an error and is never recorded.
    """
    # traceback is imported here, by the trainer, not by every wrapper that imports this
    # module for its reader (issue 20), nor while an exception is being handled.
    import traceback  # noqa: F401

    if func is None:
        _install_hook()
        return _decorate
    return _decorate(func)


def _decorate(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BaseException as exc:
            if not isinstance(exc, SystemExit | GeneratorExit):
                write_error_file(exc)
            raise

    return wrapper  # type: ignore[return-value]


def _install_hook() -> None:
    previous = sys.excepthook
    if getattr(previous, "_slurm_triage", False):
        return

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if not isinstance(exc, SystemExit):
            write_error_file(exc)
        previous(exc_type, exc, tb)

    hook._slurm_triage = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def type_name(cls: type) -> str:
    """`KeyError` for builtins, else `module.QualName` (`torch.OutOfMemoryError`)."""
    module = getattr(cls, "__module__", "") or ""
    qualname = getattr(cls, "__qualname__", cls.__name__)
    return qualname if module in ("builtins", "__main__") else f"{module}.{qualname}"


def error_document(exc: BaseException, when: float | None = None) -> bytes:
    """The JSON we write for `exc`, every field capped so the file stays small."""
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    doc = {
        "schema": SCHEMA,
        "version": VERSION,
        "type": type_name(type(exc))[:MAX_TYPE_CHARS],
        "message": _safe_str(exc)[:MAX_MESSAGE_CHARS],
        "traceback": text[-MAX_TRACEBACK_CHARS:],
        "time": time.time() if when is None else when,
        "pid": os.getpid(),
    }
    import json  # the trainer's side, after its exception: the wrapper never writes one

    return json.dumps(doc, ensure_ascii=True).encode()


def write_error_file(exc: BaseException, path: str | None = None) -> bool:
    """Write `exc` to `path` (default: $SLURM_TRIAGE_ERROR_FILE) unless a file is there yet."""
    target = path or os.environ.get(ERROR_FILE_ENV, "")
    if not target:
        return False
    try:
        return _publish(target, error_document(exc))
    except Exception:  # the user's exception matters, ours does not
        return False


def _publish(target: str, data: bytes) -> bool:
    directory = os.path.dirname(target) or "."
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, target)  # atomic, and fails if another rank was first
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not cost us the type
        return "<unprintable>"


def read_error_file(path: str, max_bytes: int = MAX_ERROR_FILE_BYTES) -> ErrorReport | None:
    """The report at `path`; None when there is none; ErrorFileError when it is not ours."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ErrorFileError(f"{path}: cannot open: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ErrorFileError(f"{path}: not a regular file")
        if info.st_size > max_bytes:
            raise ErrorFileError(f"{path}: {info.st_size} bytes, over the {max_bytes} cap")
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    return parse_error_document(data, path)


def parse_error_document(data: bytes, where: str = "error file") -> ErrorReport:
    """Strictly parse what `error_document` wrote; ErrorFileError naming the first problem."""
    import json  # only when the command left an error file (issue 20)

    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_reject)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ErrorFileError(f"{where}: not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("version") != VERSION:
        raise ErrorFileError(f"{where}: not a {SCHEMA} version {VERSION} document")
    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        raise ErrorFileError(f"{where}: unknown key {unknown[0]!r}")
    exc_type = doc.get("type")
    if not isinstance(exc_type, str) or not exc_type.strip():
        raise ErrorFileError(f"{where}: 'type' must be a non-empty string")
    message, text = doc.get("message", ""), doc.get("traceback", "")
    if not isinstance(message, str) or not isinstance(text, str):
        raise ErrorFileError(f"{where}: 'message' and 'traceback' must be strings")
    when, pid = doc.get("time"), doc.get("pid")
    if when is not None and (type(when) not in (int, float) or not math.isfinite(when)):
        raise ErrorFileError(f"{where}: 'time' must be a number")
    if pid is not None and type(pid) is not int:
        raise ErrorFileError(f"{where}: 'pid' must be an integer")
    return ErrorReport(
        exc_type=exc_type[:MAX_TYPE_CHARS],
        message=message[:MAX_MESSAGE_CHARS],
        traceback=text[-MAX_TRACEBACK_CHARS:],
        time=float(when) if when is not None and when >= 0 else None,
        pid=pid,
    )


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")
