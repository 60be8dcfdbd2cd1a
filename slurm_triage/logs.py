"""Structured logging: constant event names with key/value fields.

JSON lines in production (a file, syslog, or stderr when it is not a terminal); readable
console lines on a TTY. Configured once per process by `setup_logging(config.logging)`;
`get_logger()` works before that too (console to stderr), so early errors are never lost.
"""

from __future__ import annotations

import logging
import os
import sys
import syslog
from typing import Any, TextIO

import structlog

from slurm_triage.config import LoggingConfig

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
_SYSLOG_PRIORITY = {
    "debug": syslog.LOG_DEBUG,
    "info": syslog.LOG_INFO,
    "warning": syslog.LOG_WARNING,
    "error": syslog.LOG_ERR,
    "critical": syslog.LOG_CRIT,
    "exception": syslog.LOG_ERR,
}


class SyslogLogger:
    """A structlog-wrappable logger that sends each rendered line to syslog."""

    def __init__(self, ident: str, facility: str) -> None:
        syslog.openlog(ident, syslog.LOG_PID, getattr(syslog, f"LOG_{facility.upper()}"))

    def _emit(self, level: str, message: str) -> None:
        syslog.syslog(_SYSLOG_PRIORITY.get(level, syslog.LOG_INFO), message)

    def msg(self, message: str) -> None:
        self._emit("info", message)

    def __getattr__(self, level: str) -> Any:
        return lambda message: self._emit(level, message)


class SyslogLoggerFactory:
    def __init__(self, ident: str, facility: str) -> None:
        self._logger = SyslogLogger(ident, facility)

    def __call__(self, *args: Any) -> SyslogLogger:
        return self._logger


def _open_log_file(path: str) -> TextIO:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    return open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives for the process)


def setup_logging(
    config: LoggingConfig,
    program: str = "slurm-triage",
    stream: TextIO | None = None,
    *,
    job_output: bool = False,
) -> None:
    """Configure structlog for this process. When the log file cannot be opened, fall back
    to stderr, or, for a process whose stderr is a job's output (`job_output`: the wrapper,
    running as the job's user, who cannot write the site's log file), to syslog, so our
    own log trouble never lands in the researcher's job log."""
    stream = stream or sys.stderr
    fallback_reason = fallback = None
    factory: Any
    if config.destination == "syslog":
        factory = SyslogLoggerFactory(program, config.syslog_facility)
        use_json = config.format != "console"
    elif config.destination == "file":
        try:
            factory = structlog.PrintLoggerFactory(file=_open_log_file(config.file))
        except OSError as exc:
            fallback_reason = f"{config.file}: {exc.strerror}"
            if job_output:
                fallback = "syslog"
                factory = SyslogLoggerFactory(program, config.syslog_facility)
            else:
                fallback = "stderr"
                factory = structlog.PrintLoggerFactory(file=stream)
        use_json = config.format != "console"
    else:
        factory = structlog.PrintLoggerFactory(file=stream)
        use_json = config.format == "json" or (config.format == "auto" and not _isatty(stream))
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if use_json:
        processors += [
            structlog.processors.dict_tracebacks,
            _add_program(program),
            structlog.processors.JSONRenderer(sort_keys=False),
        ]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=_isatty(stream)))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[config.level]),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
    if fallback_reason:
        get_logger().warning("log_file_unwritable", reason=fallback_reason, using=fallback)


def _add_program(program: str) -> Any:
    def processor(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("program", program)
        return event

    return processor


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def get_logger(**bound: Any) -> Any:
    """A structlog logger; bind constant context (job id, node) as keyword fields.

    Lazy: it takes the configuration in force when it logs, not the one when it was made,
    so a module-level logger (made at import, before `setup_logging`) still writes JSON to
    the configured file rather than console text to stdout."""
    return structlog.get_logger(**bound)
