"""The door to Slurm: the only code in slurm-triage that talks to Slurm.

    door = open_door(config.slurm)
    job = door.job(123)
    door.requeue(123); door.set_excluded_nodes(123, ["node2"])

`open_door` picks the backend: pyslurm when it is installed and built for the running
Slurm, else the command line (always available). Every call is bounded by
`slurm.timeout_s` and retries transient failures `slurm.attempts` times at most.
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
    SlurmCommandError,
    SlurmError,
    SlurmOutputError,
    SlurmTimeout,
    SlurmUnavailable,
)
from slurm_triage.slurm.model import JobInfo, JobState, NodeFlag, NodeInfo
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
    """The door for this host, per config (`slurm.backend`: auto, cli or pyslurm)."""
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
    from slurm_triage.slurm import pyslurm_backend

    try:
        pyslurm = pyslurm_backend.import_pyslurm()
        pyslurm_backend.check_compatible(pyslurm.__version__, cli.slurm_version())
    except BackendMismatch as exc:
        if choice == "pyslurm":
            raise
        get_logger().debug("slurm_backend_fallback", backend="cli", reason=str(exc))
        return cli
    except SlurmError as exc:
        if choice == "pyslurm":
            raise BackendMismatch(f"cannot check the Slurm version for pyslurm: {exc}") from None
        return cli
    return pyslurm_backend.PyslurmDoor(pyslurm, runner.timeout_s)
