"""The values the door puts into Slurm's argument lists, checked before they get there.

Each value travels as one argv element (`Key=value`), never through a shell, but Slurm
reads some of them again: a node list `ALL` reboots every node, a comma splits a user or
feature list, `node[1-9]` is a hostlist, and a newline in a reason ends up in
`scontrol show node`'s lines. Reasons may carry text a job's user wrote, so they are made
one line and cut, as drains always were. Refusals are SlurmCommandError (one line, exit 3),
raised before any command runs. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from slurm_triage.slurm.errors import SlurmCommandError

# Drain and reboot reasons travel through argv; Slurm stores them on one line.
MAX_REASON_CHARS = 500
# One node as slurm.conf names it: no hostlist brackets, commas or spaces.
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Reservation and job names of our own making.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# A POSIX user name (useradd's), as Users= takes a comma-separated list of them.
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,31}\$?")
# A node feature: what constraint expressions do not use as operators (&|,[]()*!) and
# no space; sites use letters, digits, '_', '.', '-', ':', '=' and '+'.
_FEATURE = re.compile(r"[A-Za-z0-9_.:=+-]{1,128}")


def one_line(text: str, what: str = "a reason") -> str:
    """Whitespace runs (newlines included) as one space, at most MAX_REASON_CHARS."""
    line = " ".join(text.split())[:MAX_REASON_CHARS]
    if not line:
        raise SlurmCommandError(f"{what} must not be empty")
    return line


def node_name(name: str) -> str:
    """One node's name; `ALL` (every node to scontrol reboot) and hostlists are refused."""
    if not _NODE.fullmatch(name) or name.upper() == "ALL":
        raise SlurmCommandError(f"not a single node name: {name[:80]!r}")
    return name


def plain_name(name: str, what: str) -> str:
    """A reservation or job name: letters, digits, '.', '_', '-'."""
    if not _NAME.fullmatch(name):
        raise SlurmCommandError(f"invalid {what}: {name[:80]!r}")
    return name


def user_list(users: Sequence[str]) -> str:
    """Users= value: at least one user name, comma-separated."""
    if isinstance(users, str) or not users:
        raise SlurmCommandError("a reservation needs a list of user names")
    for user in users:
        if not _USER.fullmatch(user):
            raise SlurmCommandError(f"invalid user name: {user[:80]!r}")
    return ",".join(dict.fromkeys(users))


def feature_list(features: Sequence[str]) -> str:
    """AvailableFeatures=/ActiveFeatures= value, comma-separated ("" clears them)."""
    if isinstance(features, str):
        raise SlurmCommandError("features must be a list, not one string")
    for feature in features:
        if not _FEATURE.fullmatch(feature):
            raise SlurmCommandError(f"invalid node feature: {feature[:80]!r}")
    return ",".join(dict.fromkeys(features))


def active_subset(available: Sequence[str], active: Sequence[str]) -> None:
    """slurmctld refuses active features that are not available ones."""
    extra = sorted(set(active) - set(available))
    if extra:
        raise SlurmCommandError(f"active features not among the available ones: {','.join(extra)}")


def weight(value: int) -> int:
    """Weight=: 0 to 0xfffffff0 (scontrol's own bound, update_node.c)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFFFFF0:
        raise SlurmCommandError(f"invalid node weight: {value!r}")
    return value


def path_text(path: str, what: str) -> str:
    """A file path for sbatch: one line, printable, not empty."""
    if not path or len(path) > 4096 or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise SlurmCommandError(f"invalid {what}: {path[:80]!r}")
    return path


def duration_min(duration_s: int) -> int:
    """Duration= in whole minutes, rounded up; at least one."""
    if isinstance(duration_s, bool) or not isinstance(duration_s, int) or duration_s <= 0:
        raise SlurmCommandError(f"invalid duration: {duration_s!r} s")
    return -(-duration_s // 60)
