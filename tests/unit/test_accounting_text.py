"""The door's accounting read for the reliability report (`accounting_text`): the sacct the
command-line door runs, the FakeDoor's selection, and the report's fetch going through it."""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path

import pytest

from slurm_triage.analytics.sacct_layout import SACCT_FIELDS
from slurm_triage.config import SlurmConfig
from slurm_triage.slurm.cli_backend import CliDoor
from slurm_triage.slurm.errors import SlurmCommandError
from slurm_triage.slurm.runner import Runner
from slurm_triage.testing import FakeDoor

ROW = "1|1|REQUEUED|0:0|2026-01-02T00:00:00|2026-01-02T00:00:00|2026-01-02T01:00:00|3600|32|"


def _fake_sacct(bin_dir: Path, text: str) -> Path:
    """A sacct that logs its argv (one per line) and prints `text`."""
    (bin_dir / "sacct.out").write_text(text)
    log = bin_dir / "sacct.argv"
    script = bin_dir / "sacct"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {shlex.quote(str(log))}\n'
        f"cat {shlex.quote(str(bin_dir / 'sacct.out'))}\n"
    )
    script.chmod(0o755)
    return log


def test_the_command_line_door_asks_sacct_for_every_users_allocations(tmp_path: Path) -> None:
    """Every user (-a), each requeue its own row (-D), allocations only (-X), parsable with
    `|` and no header, the window in sacct's ISO local time (until None: now), the fields in
    the order given; the text comes back as sacct printed it."""
    log = _fake_sacct(tmp_path, ROW + "\n")
    door = CliDoor(Runner(timeout_s=5, attempts=1), bin_dir=str(tmp_path))
    text = door.accounting_text(datetime(2026, 1, 1), None, ("JobIDRaw", "State"))
    assert text == ROW + "\n"
    assert log.read_text().splitlines() == [
        "-a", "-D", "-X", "-n", "-P", "--delimiter=|",
        "-S", "2026-01-01T00:00:00", "-E", "now", "-o", "JobIDRaw,State",
    ]  # fmt: skip
    door.accounting_text(datetime(2026, 1, 1), datetime(2026, 2, 1, 6, 30), ("JobID",))
    argv = log.read_text().splitlines()
    assert argv[argv.index("-E") + 1] == "2026-02-01T06:30:00"


@pytest.mark.parametrize("fields", [(), ("State", "-j1"), ("State,User",), ("Job ID",)])
def test_a_field_that_is_not_a_plain_word_is_refused(
    tmp_path: Path, fields: tuple[str, ...]
) -> None:
    """No field list, or a name that could be another option or field list, is refused
    before sacct runs, by the command line and the FakeDoor alike."""
    log = _fake_sacct(tmp_path, "")
    door = CliDoor(Runner(timeout_s=5, attempts=1), bin_dir=str(tmp_path))
    with pytest.raises(SlurmCommandError, match="plain words"):
        door.accounting_text(datetime(2026, 1, 1), None, fields)
    assert not log.exists()
    with pytest.raises(SlurmCommandError, match="plain words"):
        FakeDoor().accounting_text(datetime(2026, 1, 1), None, fields)


def test_the_fake_door_prints_the_records_that_overlap_the_window() -> None:
    """As sacct -S/-E without a state: records whose run overlaps the window, a running one
    (End Unknown) included, each field in the order asked, empty where it has none."""
    door = FakeDoor(clock=lambda: datetime(2026, 1, 10))
    door.sacct_records = [
        {"JobIDRaw": "1", "State": "COMPLETED", "Start": "2025-12-01T00:00:00",
         "End": "2025-12-01T01:00:00"},
        {"JobIDRaw": "2", "State": "FAILED", "Start": "2026-01-02T00:00:00",
         "End": "2026-01-02T01:00:00"},
        {"JobIDRaw": "3", "State": "RUNNING", "Start": "2025-12-31T00:00:00", "End": "Unknown"},
        {"JobIDRaw": "4", "State": "PENDING", "Submit": "2026-01-20T00:00:00", "Start": "Unknown",
         "End": "Unknown"},
    ]  # fmt: skip
    since, until = datetime(2026, 1, 1), datetime(2026, 1, 5)
    text = door.accounting_text(since, until, ("JobIDRaw", "State", "AdminComment"))
    assert text == "2|FAILED|\n3|RUNNING|\n"
    assert door.accounting_text(since, None, ("JobIDRaw",)) == "2\n3\n"
    assert door.methods() == ["accounting_text", "accounting_text"]


def test_the_report_fetches_accounting_through_the_door(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report --since` asks the door for SACCT_FIELDS over the period, with the report's
    generous deadline; it runs no sacct of its own."""
    from slurm_triage.analytics import fetch

    door = FakeDoor(clock=lambda: datetime(2026, 1, 10))
    door.sacct_records = [dict(zip(SACCT_FIELDS, ROW.split("|"), strict=False))]
    opened: list[float | None] = []

    def open_door(config: SlurmConfig, *, timeout_s: float | None = None) -> FakeDoor:
        opened.append(timeout_s)
        return door

    monkeypatch.setattr("slurm_triage.slurm.open_door", open_door)
    text = fetch.fetch_sacct(SlurmConfig(), datetime(2026, 1, 1), None)
    assert text == ROW + "|" * (len(SACCT_FIELDS) - ROW.count("|") - 1) + "\n"
    assert opened == [fetch.SACCT_TIMEOUT_MIN_S]
    assert door.calls[0].args == (datetime(2026, 1, 1), None, SACCT_FIELDS)
