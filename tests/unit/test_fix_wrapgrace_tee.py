"""Tee files in a shared tee_dir: another user's job directory, or a link planted where a tee
file goes, is refused with one line, and the job runs on un-teed (as record.py refuses a job
directory of evidence that is not ours)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from slurm_triage.wrapper.files import open_tees
from slurm_triage.wrapper.identity import StepIdentity
from tests.unit.conftest import JOB_USER
from tests.unit.test_wrap import WRAP, wrap_env

RANK = StepIdentity(job_id="77", node="nodeA", step="0", task="3", rank=3)


def _open(tee: Path) -> tuple[tuple[int | None, int | None], list[str]]:
    said: list[str] = []
    fds = open_tees(str(tee), RANK, said.append)
    for fd in fds:
        if fd is not None:
            os.close(fd)
    return fds, said


def test_a_job_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    """The next job's directory made first by someone else (a 1777 tee_dir): no tee file is
    made in it, where its owner could read the job's output; one line says why. (The tests
    run as root, so a directory of the job user's stands for another user's.)"""
    squatted = tmp_path / "77"
    squatted.mkdir(mode=0o777)
    os.chown(squatted, JOB_USER, JOB_USER)
    fds, said = _open(tmp_path)
    assert fds == (None, None)
    assert list(squatted.iterdir()) == []
    assert said == [
        f"slurm-triage: cannot tee output to {squatted}: it belongs to uid {JOB_USER}, "
        "not to us; not teeing"
    ]


def test_a_job_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """A link in place of the job directory leads nowhere: nothing is written where it points."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "77").symlink_to(elsewhere)
    fds, said = _open(tmp_path)
    assert fds == (None, None)
    assert list(elsewhere.iterdir()) == []
    assert len(said) == 1 and "not a directory" in said[0]


def test_a_link_planted_as_a_tee_file_is_not_followed(tmp_path: Path) -> None:
    """`nodeA.0.3.out -> a victim's file`: the output is not appended to the victim's file."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (tmp_path / "tee" / "77").mkdir(parents=True)
    (tmp_path / "tee" / "77" / "nodeA.0.3.err").symlink_to(victim)
    fds, said = _open(tmp_path / "tee")
    assert fds == (None, None)
    assert victim.read_text() == "mine\n"
    assert len(said) == 1
    assert said[0].endswith("nodeA.0.3.err: Too many levels of symbolic links; not teeing")


def test_the_job_runs_on_without_a_tee_with_its_output_and_status(tmp_path: Path) -> None:
    """Refusing the tee costs one line on stderr; the command's output and exit are its own."""
    tee = tmp_path / "tee"
    (tee / "77").mkdir(parents=True)
    os.chown(tee / "77", JOB_USER, JOB_USER)
    result = subprocess.run(
        [*WRAP, "--tee-dir", str(tee), "--", "sh", "-c", "echo hi; exit 3"],
        env=wrap_env(tmp_path, SLURM_PROCID="3"),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 3 and result.stdout == b"hi\n"
    refused = f"cannot tee output to {tee / '77'}: it belongs to uid {JOB_USER}, not to us"
    assert result.stderr.splitlines()[0] == f"slurm-triage: {refused}; not teeing".encode()
    assert list((tee / "77").iterdir()) == []
