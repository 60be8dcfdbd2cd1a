"""Logging: JSON lines with constant event names in production, console text on a TTY."""

from __future__ import annotations

import io
import json
import re
import syslog
from pathlib import Path

import pytest

from slurm_triage.config import LoggingConfig
from slurm_triage.logs import get_logger, setup_logging, setup_stderr_logging


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_file_destination_writes_json_lines(tmp_path: Path) -> None:
    """With destination = file, each event is one JSON object with its fields."""
    log_file = tmp_path / "sub" / "triage.log"
    setup_logging(LoggingConfig(destination="file", file=str(log_file)), program="prog")
    get_logger(job_id=7).info("node_drained", node="node2", reason="triage: x")
    record = json.loads(log_file.read_text().splitlines()[-1])
    assert record["event"] == "node_drained"
    assert (record["node"], record["job_id"], record["program"]) == ("node2", 7, "prog")
    assert record["level"] == "info" and "timestamp" in record


def test_auto_format_is_json_off_a_tty_and_console_on_one() -> None:
    """format = auto renders JSON to a pipe and readable text to a terminal."""
    pipe = io.StringIO()
    setup_logging(LoggingConfig(), stream=pipe)
    get_logger().info("check_passed", check="gpu.count")
    assert json.loads(pipe.getvalue())["check"] == "gpu.count"
    tty = _Tty()
    setup_logging(LoggingConfig(), stream=tty)
    get_logger().info("check_passed", check="gpu.count")
    text = re.sub(r"\x1b\[[0-9;]*m", "", tty.getvalue())
    assert "check_passed" in text and "check=gpu.count" in text
    assert not text.lstrip().startswith("{")


@pytest.mark.parametrize("stream_type", [io.StringIO, _Tty])
def test_stderr_logging_before_the_config_is_the_configs_default(
    stream_type: type[io.StringIO],
) -> None:
    """The CLI's logging before it reads a config writes what LoggingConfig(level=...) with
    the rest at defaults would: the same levels, JSON to a pipe, console text to a tty."""
    lines = []
    for setup in (
        lambda s: setup_logging(LoggingConfig(level="warning"), stream=s),
        lambda s: setup_stderr_logging("warning", stream=s),
    ):
        stream = stream_type()
        setup(stream)
        get_logger(job_id=3).info("quiet")
        get_logger(job_id=3).warning("loud", node="n1")
        lines.append(re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z?", "T", stream.getvalue()))
    assert lines[0] == lines[1] and "loud" in lines[0] and "quiet" not in lines[0]


def test_level_filters_lower_events() -> None:
    """Events below the configured level are dropped."""
    pipe = io.StringIO()
    setup_logging(LoggingConfig(level="warning", format="json"), stream=pipe)
    get_logger().info("quiet")
    get_logger().warning("loud")
    events = [json.loads(line)["event"] for line in pipe.getvalue().splitlines()]
    assert events == ["loud"]


def test_unwritable_log_file_falls_back_to_stderr_with_a_warning(tmp_path: Path) -> None:
    """A log file that cannot be opened is reported, and logging continues on the stream."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    pipe = io.StringIO()
    setup_logging(LoggingConfig(destination="file", file=str(blocker / "x.log")), stream=pipe)
    get_logger().info("after")
    events = [json.loads(line)["event"] for line in pipe.getvalue().splitlines()]
    assert events == ["log_file_unwritable", "after"]


def test_a_job_outputs_logger_falls_back_to_syslog_not_the_job_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17.5: the wrapper runs as the job's user, who cannot write the site's log file;
    its stderr is the researcher's job log, so the trouble (and what follows) goes to
    syslog, not into the job's output."""
    sent: list[tuple[int, str]] = []
    monkeypatch.setattr(syslog, "openlog", lambda *a: None)
    monkeypatch.setattr(
        syslog, "syslog", lambda priority, message: sent.append((priority, message))
    )
    blocker = tmp_path / "file"
    blocker.write_text("")
    job_log = io.StringIO()
    config = LoggingConfig(destination="file", file=str(blocker / "x.log"))
    setup_logging(config, stream=job_log, job_output=True)
    get_logger().warning("wrapper_nvml_unavailable", reason="x")
    assert job_log.getvalue() == ""
    events = [json.loads(message) for _, message in sent]
    assert [e["event"] for e in events] == ["log_file_unwritable", "wrapper_nvml_unavailable"]
    assert events[0]["using"] == "syslog"


def test_wrap_with_an_unwritable_log_file_keeps_the_job_output_clean(tmp_path: Path) -> None:
    """End to end: `slurm-triage wrap` under a site config that logs to a file it cannot
    write prints the command's output and its own human summary line, and no log lines."""
    import os
    import subprocess
    import sys

    blocker = tmp_path / "file"
    blocker.write_text("")
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    config = tmp_path / "c.toml"
    config.write_text(
        f'[logging]\ndestination = "file"\nfile = "{blocker}/x.log"\n'
        f'[paths]\nevidence_dir = "{evidence}"\n[wrapper]\nwatch_nvml = false\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "slurm_triage", "wrap", "--", "sh", "-c", "echo hi; exit 3"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SLURM_TRIAGE_CONFIG": str(config)},
    )
    assert (result.returncode, result.stdout) == (3, "hi\n")
    assert "log_file_unwritable" not in result.stderr
    assert not any(line.lstrip().startswith("{") for line in result.stderr.splitlines())


def test_a_logger_made_before_setup_follows_the_configuration() -> None:
    """Module-level loggers (`log = get_logger(component=...)` at import) are made before
    `setup_logging`; their lines must still go where the configuration says, as JSON."""
    early = get_logger(component="slurm.cli")
    pipe = io.StringIO()
    setup_logging(LoggingConfig(level="info", format="json"), stream=pipe)
    early.info("node_drained", node="node2")
    (line,) = pipe.getvalue().splitlines()
    record = json.loads(line)
    assert (record["event"], record["component"], record["node"]) == (
        "node_drained",
        "slurm.cli",
        "node2",
    )
    quiet = io.StringIO()
    setup_logging(LoggingConfig(level="warning", format="json"), stream=quiet)
    early.info("node_resumed", node="node2")
    assert quiet.getvalue() == ""


def _structlog_line(bound: dict[str, object], event: str, fields: dict[str, object]) -> str:
    """The line structlog's own chain (the one logs.py used before issue 20) renders."""
    import structlog

    out = io.StringIO()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks,
            lambda _l, _m, e: {**e, "program": e.get("program", "prog")},
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        logger_factory=structlog.PrintLoggerFactory(file=out),
    )
    structlog.get_logger(**bound).warning(event, **fields)
    structlog.reset_defaults()
    return out.getvalue()


def test_json_lines_have_structlogs_form() -> None:
    """Issue 20: logs.py renders JSON itself (structlog imports asyncio), and its lines are
    structlog's: the same keys in the same order, the same values, non-JSON values as repr."""
    fields = {"node": "node2", "ids": (1, 2), "path": Path("/x"), "nested": {"a": None}}
    ours = io.StringIO()
    setup_logging(LoggingConfig(format="json"), program="prog", stream=ours)
    get_logger(job_id=7, role="prolog").warning("node_drained", **fields)
    theirs = json.loads(_structlog_line({"job_id": 7, "role": "prolog"}, "node_drained", fields))
    mine = json.loads(ours.getvalue())
    assert list(mine) == list(theirs)
    assert {**mine, "timestamp": ""} == {**theirs, "timestamp": ""}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", mine["timestamp"])


def test_setup_and_json_logging_import_neither_structlog_nor_asyncio() -> None:
    """Issue 20: the slurm.conf programs and the wrapper log JSON without structlog, whose
    import pulls in asyncio (tens of ms on every job start)."""
    import subprocess
    import sys

    code = (
        "import io, sys\n"
        "from slurm_triage.config import LoggingConfig\n"
        "from slurm_triage.logs import get_logger, setup_logging\n"
        "setup_logging(LoggingConfig(format='json'), stream=io.StringIO())\n"
        "get_logger(a=1).info('x', b=2)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('structlog', 'asyncio')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "[]", "")


def test_quiet_drops_events_below_its_level() -> None:
    """quiet() (the twin's runs) drops events below its level, then restores them."""
    from slurm_triage.logs import quiet

    pipe = io.StringIO()
    setup_logging(LoggingConfig(level="debug", format="json"), stream=pipe)
    with quiet("critical"):
        get_logger().error("dropped")
    get_logger().info("kept")
    assert [json.loads(line)["event"] for line in pipe.getvalue().splitlines()] == ["kept"]


@pytest.mark.parametrize(
    "ns",
    [
        0,
        1_700_000_000_000_000_000,  # a whole second: no fraction, as isoformat leaves it out
        1_700_000_000_123_456_789,  # nanoseconds below a microsecond are floored
        1_700_000_000_000_001_000,
        4_102_444_799_999_999_999,  # 2099-12-31T23:59:59.999999
    ],
)
def test_time_stamp_is_datetime_isoformat_in_utc(ns: int) -> None:
    """The JSON lines' time stamp, made without datetime, is what structlog's
    TimeStamper(fmt="iso", utc=True) wrote: datetime's isoformat in UTC, Z for +00:00."""
    from datetime import UTC, datetime

    from slurm_triage.logs import _utc_timestamp

    moment = datetime.fromtimestamp(ns // 1000 / 1_000_000, tz=UTC)
    assert moment.microsecond == (ns // 1000) % 1_000_000
    assert _utc_timestamp(ns) == moment.isoformat().replace("+00:00", "Z")
