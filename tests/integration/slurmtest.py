"""Helpers for integration tests: submit real jobs and wait on real states, bounded."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from slurm_triage.devcluster import cluster
from slurm_triage.devcluster.config_files import JOB_USER, ClusterLayout
from slurm_triage.journal import Journal
from slurm_triage.journal.store import DecisionRow

T = TypeVar("T")


def env(layout: ClusterLayout) -> dict[str, str]:
    return cluster.client_env(layout)


def run(
    layout: ClusterLayout, *argv: str, node: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """A command with the cluster's environment, as root; `node`: as that node's slurm.conf
    programs see it ($SLURMD_NODENAME)."""
    e = env(layout) | ({"SLURMD_NODENAME": node} if node else {})
    return subprocess.run(list(argv), env=e, capture_output=True, text=True, timeout=timeout)


@contextmanager
def triage_config(
    layout: ClusterLayout, extra: str, replace: dict[str, str] | None = None
) -> Iterator[None]:
    """The cluster's slurm-triage config with `extra` appended (and `replace`'s texts
    replaced) while the block runs; as it was afterwards. Every program reads it anew."""
    conf = layout.triage_conf
    before = conf.read_text()
    text = before
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    conf.write_text(text + extra)
    try:
        yield
    finally:
        conf.write_text(before)


def as_job_user(argv: list[str]) -> list[str]:
    """The command run as the unprivileged job user (its environment kept)."""
    return ["runuser", "-u", JOB_USER, "--", *argv]


def sbatch(layout: ClusterLayout, *args: str, workdir: str | None = None) -> int:
    """Submit a batch job as the unprivileged job user (in the cluster's jobs directory
    unless told); returns its id."""
    workdir = workdir or str(layout.jobs_dir)
    result = subprocess.run(
        as_job_user(["sbatch", "--parsable", f"--chdir={workdir}", *args]),
        env=env(layout),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(result.stdout.strip().split(";")[0])


def scontrol(layout: ClusterLayout, *args: str) -> str:
    result = subprocess.run(
        ["scontrol", *args], env=env(layout), capture_output=True, text=True, timeout=30, check=True
    )
    return result.stdout


def scancel(layout: ClusterLayout, job_id: int) -> None:
    subprocess.run(
        ["scancel", str(job_id)], env=env(layout), capture_output=True, timeout=30, check=True
    )


def wait_for(
    probe: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.25
) -> T:
    """Poll probe until it returns a truthy value; fail the test with `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def log_tail(layout: ClusterLayout, name: str, keep: int, *only: str) -> list[str]:
    """The last `keep` lines of the cluster's log `name` (those holding any of `only`, when
    given), for a failing test's message; ["(none)"] when there is no such log."""
    path = layout.log / name
    if not path.exists():
        return ["(none)"]
    lines = path.read_text(errors="replace").splitlines()
    return [line for line in lines if not only or any(o in line for o in only)][-keep:]


def journal(layout: ClusterLayout) -> Journal:
    return Journal(layout.state_dir / "journal.sqlite")


def decision_for(
    layout: ClusterLayout, job_id: int, restart: int = 0, timeout: float = 60
) -> DecisionRow:
    """The journal's decision for one run of a job, once it is there."""

    def found() -> DecisionRow | None:
        rows = [r for r in journal(layout).decisions(job_id=job_id) if r.restart == restart]
        return rows[0] if rows else None

    return wait_for(found, timeout, f"decision for job {job_id} run {restart}")
