"""Structured logging: constant event names with key/value fields.

JSON lines in production (a file, syslog, or stderr when it is not a terminal); readable
console lines on a TTY. Configured once per process by `setup_logging(config.logging)`;
`get_logger()` works before that too, so early errors are never lost.

The JSON path is our own few lines, not structlog: importing structlog imports asyncio
(structlog/__init__ -> structlog.stdlib), tens of milliseconds that every Prolog, Epilog,
EpilogSlurmctld and wrapped rank would pay for nothing. The lines are the ones structlog's
chain (add_log_level, TimeStamper(fmt="iso", utc=True), dict_tracebacks, JSONRenderer)
made: the bound keys, the call's keys, `event`, `level`, `timestamp`, `program`, in that
order (tests/unit/test_logs.py compares them with structlog's). structlog is imported only
where it earns its cost: console rendering on a terminal, an exception's traceback, and a
process that never called `setup_logging` (tests, where structlog.testing.capture_logs
sees every event).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from _thread import allocate_lock  # threading.Lock itself, without threading (issue 20)
from collections.abc import Callable, Iterator

from slurm_triage.json_codec import dumps_with

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from slurm_triage.config import LoggingConfig

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
# syslog's priority names for ours: the module is loaded by a process that logs there only
# (a shared library to load, on every rank, issue 20).
_SYSLOG_PRIORITY = {
    "debug": "LOG_DEBUG",
    "info": "LOG_INFO",
    "warning": "LOG_WARNING",
    "error": "LOG_ERR",
    "critical": "LOG_CRIT",
}

# (level name, rendered line) -> None: where one configured process's lines go.
Writer = Callable[[str, str], None]


class _Sink:
    """The configuration in force: the lowest level written, how a line is rendered, where
    it goes."""

    def __init__(
        self,
        min_level: int,
        program: str,
        writer: Writer,
        console_colors: bool | None,
        fallback: Callable[[], Writer] | None = None,
    ):
        self.min_level, self.program, self.writer = min_level, program, writer
        # None: JSON lines; else console text, with or without colours.
        self.console_colors = console_colors
        self._console: Any = None
        # Where a line goes that `writer` failed to write (made on the first failure), and
        # how many lines failed: see `write`.
        self._fallback = fallback
        self._spare: Writer | None = None
        self._failure_lock = allocate_lock()
        self.failures = 0

    def write(self, level: str, line: str) -> None:
        """Write one rendered line; never raises. A Prolog or Epilog that exits non-zero
        drains its node, and a decision whose log line raised would skip its notifications,
        so a line the destination refuses (a full disk, an I/O error, a closed stderr) is
        counted and written to the fallback instead (stderr, or syslog for a process whose
        stderr is a job's output), the first one after a `log_write_failed` line; when
        the fallback fails too, the line is lost, and counted."""
        try:
            self.writer(level, line)
        except Exception as exc:  # whatever a stream raises: our log must not end our program
            self._write_failed(level, line, exc)

    def _write_failed(self, level: str, line: str, exc: Exception) -> None:
        with self._failure_lock:
            self.failures += 1
            first = self.failures == 1
        if self._fallback is None:
            return
        try:
            spare = self._spare = self._spare or self._fallback()
            if first:
                reason = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
                note = {"reason": reason, "event": "log_write_failed", "level": "warning"}
                note["timestamp"] = _utc_timestamp(time.time_ns())
                spare("warning", self.render("warning", note))
            spare(level, line)
        except Exception:  # noqa: S110 (nowhere left to say it: counted above)
            pass

    def render(self, level: str, event_dict: dict[str, Any]) -> str:
        """One event as the configured line: console text, or a JSON object."""
        if self.console_colors is not None:
            return str(self.console()(None, level, event_dict))
        if "exc_info" in event_dict:
            from structlog.processors import dict_tracebacks

            event_dict = dict(dict_tracebacks(None, level, event_dict))
        event_dict.setdefault("program", self.program)
        return _dumps(event_dict)

    def console(self) -> Any:
        """structlog's ConsoleRenderer, imported on the first console line (a terminal)."""
        if self._console is None:
            from structlog.dev import ConsoleRenderer

            self._console = ConsoleRenderer(colors=bool(self.console_colors))
        return self._console


_sink: _Sink | None = None
_floor = 0  # quiet(): events below this level are dropped whatever the configuration


def _stream_writer(stream: TextIO) -> Writer:
    lock = allocate_lock()

    def write(_level: str, line: str) -> None:
        with lock:
            stream.write(line + "\n")
            stream.flush()

    return write


def _syslog_writer(ident: str, facility: str) -> Writer:
    import syslog

    syslog.openlog(ident, syslog.LOG_PID, getattr(syslog, f"LOG_{facility.upper()}"))
    priority = {level: getattr(syslog, name) for level, name in _SYSLOG_PRIORITY.items()}

    def write(level: str, line: str) -> None:
        syslog.syslog(priority.get(level, syslog.LOG_INFO), line)

    return write


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
    """Configure logging for this process. When the log file cannot be opened, fall back
    to stderr, or, for a process whose stderr is a job's output (`job_output`: the wrapper,
    running as the job's user, who cannot write the site's log file), to syslog, so our
    own log trouble never lands in the researcher's job log."""
    global _sink
    stream = stream or sys.stderr
    fallback_reason = fallback = None
    writer: Writer
    # Where the lines go that the log file refuses once open (a full disk): made only then,
    # so that no process opens syslog for nothing.
    spare: Callable[[], Writer] | None = None
    if config.destination == "syslog":
        writer = _syslog_writer(program, config.syslog_facility)
        use_json = config.format != "console"
    elif config.destination == "file":
        if job_output:
            spare = lambda: _syslog_writer(program, config.syslog_facility)  # noqa: E731
        else:
            spare = lambda: _stream_writer(stream)  # noqa: E731
        try:
            writer = _stream_writer(_open_log_file(config.file))
        except OSError as exc:
            spare = None
            fallback_reason = f"{config.file}: {exc.strerror}"
            if job_output:
                fallback = "syslog"
                writer = _syslog_writer(program, config.syslog_facility)
            else:
                fallback = "stderr"
                writer = _stream_writer(stream)
        use_json = config.format != "console"
    else:
        writer = _stream_writer(stream)
        use_json = config.format == "json" or (config.format == "auto" and not _isatty(stream))
    console_colors = None if use_json else _isatty(stream)
    _sink = _Sink(_LEVELS[config.level], program, writer, console_colors, spare)
    if fallback_reason:
        get_logger().warning("log_file_unwritable", reason=fallback_reason, using=fallback)


def setup_stderr_logging(
    level: str = "warning", program: str = "slurm-triage", stream: TextIO | None = None
) -> None:
    """What `setup_logging(LoggingConfig(level=level))` sets up (stderr, JSON lines unless
    it is a terminal), without the config module: the CLI's logging before a command reads
    its config, which `classify` and the other offline commands never do (issue 20)."""
    global _sink
    stream = stream or sys.stderr
    use_json = not _isatty(stream)  # format = "auto"
    _sink = _Sink(_LEVELS[level], program, _stream_writer(stream), None if use_json else True)


def reset_logging() -> None:
    """Back to the unconfigured state (tests: each starts as a fresh process would)."""
    global _sink, _floor
    _sink, _floor = None, 0


def write_failures() -> int:
    """How many lines this process's configured destination refused since `setup_logging`
    (each written to the fallback, or lost): a program says it in its last line."""
    return _sink.failures if _sink is not None else 0


@contextlib.contextmanager
def quiet(level: str = "critical") -> Iterator[None]:
    """Drop events below `level` for the duration (the twin runs our decision code
    millions of times and must not log each decision)."""
    global _floor
    saved, _floor = _floor, _LEVELS[level]
    try:
        yield
    finally:
        _floor = saved


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _json_default(obj: Any) -> Any:
    """What structlog's JSONRenderer does with a value json cannot serialise."""
    try:
        return obj.__structlog__()
    except AttributeError:
        return repr(obj)


def _emit(level: str, bound: dict[str, Any], event: str, fields: dict[str, Any]) -> None:
    if _LEVELS[level] < _floor:
        return
    sink = _sink
    if sink is None:
        import structlog

        getattr(structlog.get_logger(**bound), level)(event, **fields)
        return
    if _LEVELS[level] < sink.min_level:
        return
    event_dict = {**bound, **fields}
    event_dict["event"] = event
    event_dict["level"] = level
    event_dict["timestamp"] = _utc_timestamp(time.time_ns())
    sink.write(level, sink.render(level, event_dict))


# json.dumps(..., default=_json_default), without importing json (issue 20).
_dumps = dumps_with(default=_json_default)


def _utc_timestamp(ns: int) -> str:
    """datetime.now(tz=UTC).isoformat() with Z for +00:00 (structlog's TimeStamper(fmt="iso",
    utc=True)): microseconds floored, left out when 0. From time, since importing datetime
    costs every per-job process ~2 ms (issue 20)."""
    seconds, micros = divmod(ns // 1000, 1_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{text}.{micros:06d}Z" if micros else f"{text}Z"


class Logger:
    """A logger with constant context; each call takes the configuration in force then."""

    __slots__ = ("_bound",)

    def __init__(self, bound: dict[str, Any]) -> None:
        self._bound = bound

    def bind(self, **fields: Any) -> Logger:
        return Logger({**self._bound, **fields})

    def debug(self, event: str, **fields: Any) -> None:
        _emit("debug", self._bound, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        _emit("info", self._bound, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        _emit("warning", self._bound, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        _emit("error", self._bound, event, fields)

    def critical(self, event: str, **fields: Any) -> None:
        _emit("critical", self._bound, event, fields)


def get_logger(**bound: Any) -> Any:
    """A logger; bind constant context (job id, node) as keyword fields.

    Lazy: it takes the configuration in force when it logs, not the one when it was made,
    so a module-level logger (made at import, before `setup_logging`) still writes JSON to
    the configured file rather than console text to stdout."""
    return Logger(bound)
