"""`slurm-triage burn-in`'s external parts: run without a shell, pass only on exit 0, a
timeout or a missing program fails with one line (the burn-in job then fails)."""

from __future__ import annotations

import sys

import pytest

from slurm_triage.cli.burn_in_cmd import run_part
from slurm_triage.cli.main import main


def test_a_part_passes_only_on_exit_0() -> None:
    good = run_part("site", [sys.executable, "-c", "print('allreduce ok')"], 30)
    assert good.passed and good.detail == "exit 0: allreduce ok"
    bad = run_part(
        "site", [sys.executable, "-c", "import sys; print('bus bw 3 GB/s'); sys.exit(4)"], 30
    )
    assert not bad.passed and bad.detail == "exit 4: bus bw 3 GB/s"


def test_no_shell_reads_the_arguments() -> None:
    """A `;` is an argument, not a second command."""
    done = run_part(
        "site", [sys.executable, "-c", "import sys; print(sys.argv[1])", "x; exit 0"], 30
    )
    assert done.passed and done.detail.endswith("x; exit 0")


def test_a_timeout_or_a_missing_program_fails() -> None:
    slow = run_part("dcgm", [sys.executable, "-c", "import time; time.sleep(5)"], 0.3)
    assert not slow.passed and "timed out after 0.3 s" in slow.detail
    missing = run_part("dcgm", ["/nonexistent/dcgmi", "diag"], 5)
    assert not missing.passed and missing.detail.startswith("cannot run /nonexistent/dcgmi")


def test_bad_arguments_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """The node name ends up in root's record path and Slurm's argv: one node, no path."""
    for argv in (
        ["--node", "../etc"],
        ["--node", "ALL"],
        ["--node", "node[1-3]"],
        ["--timeout-s", "nan"],
        ["--timeout-s", "0"],
        ["--timeout-s=-5"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["burn-in", *argv])
        assert exit_.value.code == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("slurm-triage burn-in: error: argument"), argv


def test_a_part_whose_echo_the_log_refuses_keeps_its_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The burn-in job's output file on a full disk: the part's output is not echoed, and
    the part still passes (a traceback there failed the burn-in and counted toward RMA)."""

    class Full:
        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

    class Stream:
        buffer = Full()

    monkeypatch.setattr(sys, "stdout", Stream())
    monkeypatch.setattr(sys, "stderr", Stream())
    done = run_part("site", [sys.executable, "-c", "print('allreduce ok')"], 30)
    assert done.passed and "allreduce ok" in done.detail
