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


@pytest.fixture(scope="session", autouse=True)
def every_failed_end_has_an_admin_comment(devcluster):  # type: ignore[no-untyped-def]
    """Issue 17: `sacct -o AdminComment` tells every end but a plain clean one. After the
    session's tests, every job whose run the journal decided as ended other than COMPLETED
    (by every test of the session, the load test's 200 jobs included) has one in accounting."""
    import subprocess
    import time

    from tests.integration.slurmtest import env, journal

    yield
    path = devcluster.state_dir / "journal.sqlite"
    if not path.exists():
        return
    rows = journal(devcluster).decisions(limit=1_000_000)
    failed = sorted({r.job_id for r in rows if r.state not in (None, "COMPLETED") and r.applied})
    if not failed:
        return
    missing: list[str] = []
    for _ in range(20):  # accounting may take a moment after the last decision
        done = subprocess.run(
            [
                "sacct",
                "-X",
                "-n",
                "-P",
                "-o",
                "JobIDRaw,AdminComment",
                "-j",
                ",".join(map(str, failed)),
            ],  # noqa: E501
            env=env(devcluster),
            capture_output=True,
            text=True,
            timeout=60,
        )
        out = done.stdout
        comments = dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
        missing = [str(j) for j in failed if not comments.get(str(j), "").strip()]
        if not missing:
            return
        time.sleep(1)
    raise AssertionError(
        f"no AdminComment in accounting for failed job(s) {', '.join(missing)}"
        f" (sacct exit {done.returncode}: {done.stderr.strip()[:500]!r})"
    )
