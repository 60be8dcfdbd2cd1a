"""`slurm-triage wrap`: the child's exit is the wrapper's exit, signals included."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WRAP = [sys.executable, "-m", "slurm_triage", "wrap", "--"]


@pytest.mark.parametrize("code", [0, 1, 3, 42, 127, 255])
def test_exit_code_passes_through(code: int) -> None:
    """The wrapper exits with the child's exit code."""
    assert subprocess.run([*WRAP, "sh", "-c", f"exit {code}"], timeout=30).returncode == code


@pytest.mark.parametrize(
    "sig",
    [signal.SIGSEGV, signal.SIGABRT, signal.SIGKILL, signal.SIGTERM, signal.SIGBUS, signal.SIGFPE],
)
def test_signal_death_passes_through(sig: signal.Signals) -> None:
    """When the child dies of a signal, the wrapper dies of the same signal."""
    result = subprocess.run([*WRAP, "sh", "-c", f"kill -{sig.name[3:]} $$"], timeout=30)
    assert result.returncode == -sig


def test_sigusr1_is_forwarded_to_child(tmp_path: Path) -> None:
    """SIGUSR1 sent to the wrapper (Slurm's --signal=B:USR1) reaches the child's handler."""
    marker = tmp_path / "got"
    child = (
        f"import signal,sys,time\n"
        f"signal.signal(signal.SIGUSR1, lambda *a: (open({str(marker)!r},'w').write('1'),"
        f" sys.exit(0)))\nprint('ready', flush=True)\ntime.sleep(30)\nsys.exit(9)"
    )
    proc = subprocess.Popen([*WRAP, sys.executable, "-c", child], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=20) == 0
    assert marker.read_text() == "1"


def test_sigterm_then_sigkill_after_grace() -> None:
    """A child that ignores SIGTERM is SIGKILLed after the grace period."""
    child = "trap '' TERM; echo ready; sleep 60"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slurm_triage",
            "wrap",
            "--kill-grace",
            "0.5",
            "--",
            "sh",
            "-c",
            child,
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGKILL
    assert time.monotonic() - started < 10


def test_missing_command_is_one_line_error() -> None:
    """A command that does not exist is a one-line error, exit 2."""
    result = subprocess.run(
        [*WRAP, "/nonexistent/train.py"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
