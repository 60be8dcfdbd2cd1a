"""Logging: JSON lines with constant event names in production, console text on a TTY."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from slurm_triage.config import LoggingConfig
from slurm_triage.logs import get_logger, setup_logging


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
