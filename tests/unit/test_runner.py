"""Running Slurm commands: hard deadlines, bounded retries, errors classified by stderr.

The commands are real executables (shell scripts standing in for scontrol on PATH), so
the deadline is proven against real processes, grandchildren included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_triage.config import SlurmConfig
from slurm_triage.slurm import (
    InvalidJobState,
    JobNotFound,
    NotRequeueable,
    SlurmCommandError,
    SlurmTimeout,
    SlurmUnavailable,
    open_door,
)
from slurm_triage.slurm.runner import Runner
from tests.conftest import FIXTURES


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d


def test_hung_scontrol_is_cut_off_at_deadline(bin_dir: Path) -> None:
    """A scontrol that sleeps forever is killed at the deadline with a clear SlurmTimeout."""
    _fake(bin_dir, "scontrol", "sleep 300")
    door = open_door(SlurmConfig(bin_dir=str(bin_dir), timeout_s=1.0, backend="cli"))
    started = time.monotonic()
    with pytest.raises(SlurmTimeout, match="did not finish within 1s"):
        door.job(5)
    assert time.monotonic() - started < 3.0


def test_grandchild_holding_pipes_does_not_extend_deadline(bin_dir: Path) -> None:
    """A grandchild that keeps stdout open is killed with the process group."""
    _fake(bin_dir, "scontrol", "sleep 300 &\nsleep 300")
    runner = Runner(timeout_s=0.5, resolve=lambda n: str(bin_dir / n))
    started = time.monotonic()
    with pytest.raises(SlurmTimeout):
        runner.run(["scontrol", "ping"])
    assert time.monotonic() - started < 3.0


def test_transient_failure_is_retried_with_exact_waits(bin_dir: Path) -> None:
    """'Unable to contact slurm controller' twice, then success: three attempts, waits
    0.5 s then 1.0 s (exponential), taken from the injected sleep."""
    counter = bin_dir / "count"
    _fake(
        bin_dir,
        "scontrol",
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}\n"
        'if [ $n -lt 3 ]; then echo "Unable to contact slurm controller (connect failure)"'
        " >&2; exit 1; fi\necho ok",
    )
    waits: list[float] = []
    runner = Runner(
        timeout_s=30,
        attempts=3,
        retry_wait_s=0.5,
        sleep=waits.append,
        resolve=lambda n: str(bin_dir / n),
    )
    assert runner.run(["scontrol", "ping"]).stdout.strip() == "ok"
    assert waits == [0.5, 1.0]
    assert counter.read_text().strip() == "3"


@pytest.mark.parametrize("attempts", [1, 3])
def test_retries_are_bounded(bin_dir: Path, attempts: int) -> None:
    """A controller that stays down raises SlurmUnavailable after `attempts` tries."""
    counter = bin_dir / "count"
    _fake(
        bin_dir,
        "scontrol",
        f"echo x >> {counter}\necho 'Unable to contact slurm controller' >&2; exit 1",
    )
    runner = Runner(
        timeout_s=30, attempts=attempts, sleep=lambda s: None, resolve=lambda n: str(bin_dir / n)
    )
    with pytest.raises(SlurmUnavailable):
        runner.run(["scontrol", "ping"])
    assert len(counter.read_text().splitlines()) == attempts


def test_a_command_that_succeeds_at_once_imports_no_retry_machinery(bin_dir: Path) -> None:
    """tenacity (and concurrent.futures under it) is imported for a retry only: a command
    that succeeds at once, as most do, does without it (every decision pays its imports)."""
    _fake(bin_dir, "scontrol", "echo ok")
    code = (
        "import sys\nfrom slurm_triage.slurm.runner import Runner\n"
        f"runner = Runner(resolve=lambda name: {str(bin_dir)!r} + '/' + name)\n"
        "assert runner.run(['scontrol', 'ping']).stdout.strip() == 'ok'\n"
        "print([m for m in ('tenacity', 'concurrent.futures') if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize(
    ("stderr", "error"),
    [
        ("slurm_load_jobs error: Invalid job id specified", JobNotFound),
        ("Requested operation is presently disabled for job 5", NotRequeueable),
        ("Job has already finished for job 5", InvalidJobState),
        ("something odd happened", SlurmCommandError),
    ],
)
def test_definite_errors_are_classified_and_not_retried(
    bin_dir: Path, stderr: str, error: type
) -> None:
    """Slurm's definite refusals map to our classes at once, without retries."""
    counter = bin_dir / "count"
    _fake(bin_dir, "scontrol", f"echo x >> {counter}\necho '{stderr}' >&2; exit 1")
    runner = Runner(attempts=3, sleep=lambda s: None, resolve=lambda n: str(bin_dir / n))
    with pytest.raises(error) as err:
        runner.run(["scontrol", "requeue", "5"])
    assert type(err.value) is error
    assert len(counter.read_text().splitlines()) == 1


def test_missing_command_is_unavailable(tmp_path: Path) -> None:
    """No Slurm installed: a clear SlurmUnavailable, not FileNotFoundError."""
    door = open_door(SlurmConfig(bin_dir=str(tmp_path), attempts=1, backend="cli"))
    with pytest.raises(SlurmUnavailable, match="command not found"):
        door.nodes()


def test_cli_door_merges_user_exclusions(bin_dir: Path) -> None:
    """set_excluded_nodes keeps the user's own ExcNodeList and sends the merged hostlist."""
    log = bin_dir / "calls"
    # A real record (recorded on Slurm 22.05) for job 7 whose user excluded node[3-4].
    record = (FIXTURES / "slurm" / "scontrol_show_job_running.txt").read_text()
    record = record.replace("JobId=2 ", "JobId=7 ", 1).replace(
        "ExcNodeList=node3\n", "ExcNodeList=node[3-4]\n", 1
    )
    (bin_dir / "job7.txt").write_text(record)
    _fake(
        bin_dir,
        "scontrol",
        f'echo "$@" >> {log}\nif [ "$1" = show ]; then cat {bin_dir}/job7.txt; fi\n'
        # The door asks the version once: 22.05 reads jobs in the text form.
        'if [ "$1" = --version ]; then echo "slurm 22.05.8"; fi',
    )
    door = open_door(SlurmConfig(bin_dir=str(bin_dir), backend="cli"))
    assert door.set_excluded_nodes(7, ["node2", "node3"]) == ("node3", "node4", "node2")
    assert log.read_text().splitlines()[-1] == "update JobId=7 ExcNodeList=node[2-4]"


def test_slurm_error_exit_code_is_3() -> None:
    """Slurm trouble is exit status 3, distinct from bad input (2)."""
    assert SlurmTimeout("x").exit_code == 3


def test_env_is_passed_to_commands(bin_dir: Path) -> None:
    """The door runs commands with the environment it was given (SLURM_CONF)."""
    _fake(bin_dir, "scontrol", 'echo "slurm $SLURM_CONF"')
    env = dict(os.environ, SLURM_CONF="22.05.1")
    door = open_door(SlurmConfig(bin_dir=str(bin_dir), backend="cli"), env=env)
    assert door.slurm_version() == "22.05.1"
