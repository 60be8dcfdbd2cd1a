"""A log line that cannot be written never ends the program that logs it: a Prolog or Epilog
that exits non-zero drains its node, and a decision must not skip its actions for a log."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from slurm_triage import logs
from slurm_triage.config import LoggingConfig, MetricsConfig
from slurm_triage.logs import get_logger, setup_logging
from tests.unit.test_cli import (  # the guard: no real Slurm, no host writes
    BIN,
    _no_real_slurm_no_host_writes,  # noqa: F401
    _run,
)

# A real device that refuses every write with ENOSPC, as a full disk does.
FULL = "/dev/full"
needs_dev_full = pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full")


class _Refusing(io.StringIO):
    """A stream that refuses writes the way a file on a full disk does."""

    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


def _events(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@needs_dev_full
def test_a_log_file_on_a_full_disk_falls_back_to_stderr_and_counts() -> None:
    """The file opens but refuses each line: nothing is raised, the first refused line
    is announced on stderr with `log_write_failed`, every line follows it there, and each
    refusal is counted."""
    stderr = io.StringIO()
    setup_logging(LoggingConfig(destination="file", file=FULL, format="json"), stream=stderr)
    get_logger().info("first")
    get_logger().warning("second")
    events = _events(stderr)
    assert [e["event"] for e in events] == ["log_write_failed", "first", "second"]
    assert events[0]["reason"] == "No space left on device"
    assert logs.write_failures() == 2


def test_a_stream_that_refuses_every_line_loses_them_quietly() -> None:
    """stderr itself failing (no fallback left): the lines are lost and counted, never
    raised."""
    setup_logging(LoggingConfig(destination="stderr", format="json"), stream=_Refusing())
    get_logger().error("lost")
    assert logs.write_failures() == 1


@needs_dev_full
@pytest.mark.parametrize(
    "program",
    [
        "slurm-triage-prolog",
        "slurm-triage-epilog",
        "slurm-triage-epilog-slurmctld",
        "slurm-triage-healthcheck",
    ],
)
def test_slurm_conf_programs_exit_0_when_their_log_file_is_full(
    program: str, tmp_path: Path
) -> None:
    """A healthy node whose log disk is full: each program finishes, exits 0 (no drain),
    and its lines, the last saying how many were refused, go to stderr instead."""
    config = tmp_path / "c.toml"
    (tmp_path / "evidence").mkdir()
    (tmp_path / "kern.log").write_text("")
    config.write_text(
        f'[logging]\ndestination = "file"\nfile = "{FULL}"\n'
        f'[paths]\nstate_dir = "{tmp_path}/state"\nevidence_dir = "{tmp_path}/evidence"\n'
        f'[slurm]\nbin_dir = "{tmp_path}/no-slurm"\nattempts = 1\n'
        f'[decision]\njournal = "{tmp_path}/journal.sqlite"\nwait_for_nodes_s = 0\n'
        f'[health]\nexpected_gpus = 0\nkernel_log = "{tmp_path}/kern.log"\n'
    )
    result = _run(
        [str(BIN / program)],
        {
            "SLURM_TRIAGE_CONFIG": str(config),
            "SLURM_TRIAGE__AGENT__SOCKET": str(tmp_path / "agent.sock"),
            "SLURM_TRIAGE__DECIDER__SOCKET": str(tmp_path / "decider.sock"),
            "SLURM_JOB_ID": "42",
            "SLURMD_NODENAME": "node2",
        },
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert lines[0]["event"] == "log_write_failed"
    assert lines[-1]["event"] == "role_done" and lines[-1]["log_write_failures"] >= 1


@needs_dev_full
@pytest.mark.skipif(os.geteuid() != 0, reason="root records need root")
def test_a_decision_whose_log_line_fails_still_acts_and_reports(tmp_path: Path) -> None:
    """EpilogSlurmctld with its log disk full: the node is still drained, the journal row
    written, and what follows the decision's log line (the controller's metrics) done."""
    from dataclasses import replace

    from tests.unit.test_decide import Cluster, xid79

    cluster = Cluster(tmp_path)
    textfile = tmp_path / "metrics" / "controller.prom"
    cluster.config = replace(
        cluster.config, metrics=MetricsConfig(controller_textfile=str(textfile))
    )
    setup_logging(LoggingConfig(destination="file", file=FULL), stream=_Refusing())
    cluster.root_record("node1")
    cluster.root_record("node2", xid79("node2"))
    cluster.end()
    assert cluster.door.node("node2").reason.startswith("triage: gpu_unavailable")
    assert cluster.row().drained == ("node2",)
    assert textfile.exists()
    assert logs.write_failures() >= 1
