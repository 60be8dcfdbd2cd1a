"""Fixtures of the unit tests that play a job user's files (the tests run as root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

JOB_USER = 4242  # a job user other than root; their files are chowned to it


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    """`<evidence_dir>/77`, owned by the job user, as the Prolog or the wrapper makes it."""
    d = tmp_path / "77"
    d.mkdir()
    os.chown(d, JOB_USER, JOB_USER)
    return d
