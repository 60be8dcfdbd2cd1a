"""The door to Slurm: the only code in slurm-triage that talks to Slurm.

    door = open_door(config.slurm)
    job = door.job(123)
    door.requeue(123); door.set_excluded_nodes(123, ["node2"])

`open_door` picks the backend: pyslurm when it is installed, built for the running Slurm
and loads here (probed in a child first), else the command line (always available).
Every call is bounded by `slurm.timeout_s` and retries transient failures
`slurm.attempts` times at most.
"""

from __future__ import annotations

from slurm_triage.config import SlurmConfig
from slurm_triage.logs import get_logger
from slurm_triage.slurm.cli_backend import CliDoor
from slurm_triage.slurm.door import SlurmDoor
from slurm_triage.slurm.errors import (
    BackendMismatch,
    InvalidJobState,
    JobNotFound,
    NodeNotFound,
    NotRequeueable,
    NotYetAccounted,
    ReservationNotFound,
    SlurmCommandError,
    SlurmError,
    SlurmOutputError,
    SlurmTimeout,
    SlurmUnavailable,
)
from slurm_triage.slurm.model import JobInfo, JobState, NodeFlag, NodeInfo, ReservationInfo
from slurm_triage.slurm.runner import Runner

__all__ = [
    "BackendMismatch",
    "CliDoor",
    "InvalidJobState",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "NodeFlag",
    "NodeInfo",
    "NodeNotFound",
    "NotRequeueable",
    "NotYetAccounted",
    "ReservationInfo",
    "ReservationNotFound",
    "SlurmCommandError",
    "SlurmDoor",
    "SlurmError",
    "SlurmOutputError",
    "SlurmTimeout",
    "SlurmUnavailable",
    "open_door",
]


def open_door(
    config: SlurmConfig | None = None,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    backend: str | None = None,
) -> SlurmDoor:
    """The door for this host, per config (`slurm.backend`: auto, cli or pyslurm).

    `env` is the environment of the Slurm commands, and its SLURM_CONF is the slurm.conf
    pyslurm initialises libslurm with (once per process: a later door naming another one
    cannot use pyslurm). pyslurm is used only after a child interpreter has loaded it
    (libslurm ends a process that finds no slurm.conf); auto falls back to the command
    line wherever it cannot be used, pyslurm raises BackendMismatch saying why."""
    config = config or SlurmConfig()
    runner = Runner(
        timeout_s=timeout_s or config.timeout_s,
        attempts=config.attempts,
        retry_wait_s=config.retry_wait_s,
        env=env,
    )
    cli = CliDoor(runner, bin_dir=config.bin_dir)
    choice = backend or config.backend
    if choice == "cli":
        return cli
    from slurm_triage.slurm import pyslurm_backend, pyslurm_setup

    try:
        pyslurm = pyslurm_setup.load(cli.slurm_version, env=env, timeout_s=runner.timeout_s)
    except BackendMismatch as exc:
        if choice == "pyslurm":
            raise
        get_logger().debug("slurm_backend_fallback", backend="cli", reason=str(exc))
        return cli
    return pyslurm_backend.PyslurmDoor(
        pyslurm,
        cli=cli,
        timeout_s=runner.timeout_s,
        attempts=config.attempts,
        retry_wait_s=config.retry_wait_s,
    )
