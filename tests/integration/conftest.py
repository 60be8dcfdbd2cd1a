"""Fixtures of the integration tests: jobs run as the unprivileged job user, as on real sites."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_triage.devcluster.config_files import JOB_USER


@pytest.fixture
def job_dir() -> Iterator[Path]:
    """A working directory the job user owns (pytest's tmp_path is root's, mode 0700), under
    /tmp so every node's job can reach it; the test may write its scripts there as root."""
    path = Path(tempfile.mkdtemp(prefix="triage-job-", dir="/tmp"))
    shutil.chown(path, JOB_USER, JOB_USER)
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
