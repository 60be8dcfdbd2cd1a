"""Run a test's body as another user: a forked child drops to the uid (no supplementary
groups, gid = uid) and says what came of it in one line. Needs root."""

from __future__ import annotations

import os
from collections.abc import Callable


def run_as(uid: int, body: Callable[[], str]) -> str:
    """What `body` returned in a child that became `uid`, or the error it raised as
    `Type: message`."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                said = body()
            except Exception as exc:
                said = f"{type(exc).__name__}: {exc}"
            os.write(write_end, said.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(child, 0)
    return said
