"""Which signals slurmstepd has already delivered to our child (so we must not forward them).

slurmstepd signals a step through its process-tracking plugin: proctrack/cgroup and
proctrack/linuxproc signal every process of the step (our child included), proctrack/pgid
only the tasks' process group (which our child, in a group of its own, is not in). So under
a non-pgid plugin, a signal whose sender is a slurmstepd has reached the child already,
whether the wrapper is srun's task itself or runs under `srun bash -c "..."`. The plugin is
read from slurm.conf ($SLURM_CONF, else /etc/slurm/slurm.conf); unreadable means Slurm's
default, proctrack/cgroup.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
DEFAULT_PROCTRACK = "proctrack/cgroup"
MAX_CONF_BYTES = 1 << 20


def stepd_delivers_to_child(env: Mapping[str, str]) -> Callable[[int], bool] | None:
    """A test on a signal's sender pid: True when the child already has that signal.

    None when no sender's signals reach the child by themselves (outside Slurm, or with
    proctrack/pgid): then everything is forwarded.
    """
    if not env.get("SLURM_JOB_ID"):
        return None
    if proctrack_type(_read(env.get("SLURM_CONF") or DEFAULT_SLURM_CONF)) == "proctrack/pgid":
        return None
    return is_slurmstepd


def is_slurmstepd(pid: int) -> bool:
    """True when `pid` is a slurmstepd (pid 0, the kernel, is not)."""
    return pid > 0 and _comm(pid) == "slurmstepd"


def proctrack_type(slurm_conf: str) -> str:
    """ProctrackType from slurm.conf text (the last setting wins), else Slurm's default."""
    found = DEFAULT_PROCTRACK
    # Line by line, as slurmctld reads it (no `re` on a rank's path, issue 20).
    for line in slurm_conf.split("\n"):
        key, equals, value = line.partition("=")
        words = value.split()
        if equals and words and key.strip().lower() == "proctracktype":
            found = words[0].lower()
    return found


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_CONF_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
