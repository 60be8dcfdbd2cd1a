"""Run the rest of a hook in a process of its own, so Slurm stops waiting for the hook.

slurmctld keeps a job COMPLETING until EpilogSlurmctld exits, and an expedited requeue
(Slurm 25.11) restarts the job only then: a decision that waits there for the job's new
state would wait for itself. The decision of such a job therefore goes on in a detached
grandchild (own session, stdio on /dev/null so Slurm's pipes close) while the hook exits.
"""

from __future__ import annotations

import os


def detach() -> bool:
    """Fork off a detached grandchild. True in the caller (which should return at once);
    False in the grandchild, which must end with os._exit. Raises OSError if fork fails."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)  # the child exits at once: no zombie is left behind
        return True
    try:
        os.setsid()  # out of the hook's process group, which Slurm may kill
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        if null > 2:
            os.close(null)
    except BaseException:
        os._exit(1)
    return False
