"""Output the command cannot write (a full disk, no stdout at all) is an error said in one
line on stderr with exit 2: not a traceback, and not exit 0 with the output lost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FULL = "/dev/full"


def _config_show(tmp_path: Path, stdout: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_triage", "config", "show"],
        stdout=stdout,  # type: ignore[arg-type]
        stderr=subprocess.PIPE,
        timeout=60,
        env={**os.environ},  # the config conftest names: an empty file
    )


@pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full")
def test_output_to_a_full_disk_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with open(FULL, "w") as full:
        result = _config_show(tmp_path, full)
    assert result.returncode == 2
    assert result.stderr.decode() == (
        "slurm-triage: error: cannot write the output: No space left on device\n"
    )


def test_no_stdout_at_all_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Started with stdout closed (`>&-`): print() would drop the output unseen."""
    result = subprocess.run(
        [sys.executable, "-m", "slurm_triage", "config", "show"],
        stderr=subprocess.PIPE,
        timeout=60,
        env={**os.environ},  # the config conftest names: an empty file
        preexec_fn=lambda: os.close(1),  # noqa: PLW1509 (no threads in the child)
    )
    assert result.returncode == 2
    assert result.stderr.decode() == (
        "slurm-triage: error: cannot write the output: standard output is closed\n"
    )


def test_without_stdout_a_commands_own_error_is_still_its_own(tmp_path: Path) -> None:
    """No stdout, and a command that fails before writing any: its own error, not the
    closed stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "slurm_triage", "config", "cache", "--file", str(tmp_path / "x")],
        stderr=subprocess.PIPE,
        timeout=60,
        env={**os.environ},
        preexec_fn=lambda: os.close(1),  # noqa: PLW1509
    )
    assert result.returncode == 2
    assert result.stderr.decode() == f"slurm-triage: error: {tmp_path / 'x'}: no such config file\n"


def test_output_that_fits_is_written_and_exit_0(tmp_path: Path) -> None:
    result = _config_show(tmp_path, subprocess.PIPE)
    assert result.returncode == 0 and result.stderr == b""
    assert result.stdout.startswith(b"# effective slurm-triage configuration")


def test_an_os_error_that_is_not_the_outputs_is_not_called_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another OSError (a bug, say) is not reported as lost output."""
    from slurm_triage.cli import config_cmd
    from slurm_triage.cli.main import main

    def broken(*_args: object) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(config_cmd, "_show", broken)
    with pytest.raises(OSError, match="Input/output error"):
        main(["config", "show"])
