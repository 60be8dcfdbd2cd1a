"""The agent's socket: bound safely, peers known by SO_PEERCRED, requests read bounded, and
systemd told when it is ready (sd_notify's READY=1, for Type=notify).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct
import time
from pathlib import Path

from slurm_triage.agent.protocol import MAX_REQUEST_BYTES, ProtocolError
from slurm_triage.errors import TriageError

LISTEN_BACKLOG = 64
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (socket(7))


class AgentError(TriageError):
    """The agent cannot start; the message is one line for the operator (exit 2)."""


class Listener:
    """The agent's listening socket and the identity (device, inode) of its file."""

    def __init__(self, path: str, sock: socket.socket) -> None:
        self.path, self.sock = path, sock
        found = os.lstat(path)
        self._identity = (found.st_dev, found.st_ino)

    def close(self) -> None:
        """Stop listening and remove the socket file, unless it is no longer the one we
        bound (another agent started on the path since)."""
        self.sock.close()
        with contextlib.suppress(OSError):
            found = os.lstat(self.path)
            if (found.st_dev, found.st_ino) == self._identity:
                os.unlink(self.path)


def bind_socket(path: str) -> Listener:
    """Listen on `path`, mode 0600, owned by this (root) process. The directory must be
    ours and writable by no one else (systemd's RuntimeDirectory is), so nobody can swap
    the socket; a stale socket file is replaced, a live agent's is not, anything else at
    the path is an AgentError."""
    where = Path(path)
    if not where.is_absolute():
        raise AgentError(f"agent.socket = {path!r}: must be an absolute path")
    try:
        where.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        parent = os.stat(where.parent)
        found: os.stat_result | None = os.lstat(where)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise AgentError(f"{where.parent}: {exc.strerror or exc}") from None
    if parent.st_uid != os.geteuid() or parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise AgentError(
            f"{where.parent}: must be owned by uid {os.geteuid()} and writable by no one else"
        )
    if found is not None:
        if not stat.S_ISSOCK(found.st_mode):
            raise AgentError(f"{path}: exists and is not a socket")
        if _answers(path):
            raise AgentError(f"{path}: another agent is serving it")
        where.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # the file is born 0600: no moment where others may connect
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise AgentError(f"{path}: cannot listen: {exc.strerror or exc}") from None
    finally:
        os.umask(umask)
    os.chmod(path, 0o600)
    sock.listen(LISTEN_BACKLOG)
    return Listener(path, sock)


def _answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def peer_uid(conn: socket.socket) -> int:
    """The connecting process's uid, from the kernel (SO_PEERCRED), not from its bytes."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return int(_UCRED.unpack(raw)[1])


def read_request(conn: socket.socket, timeout_s: float) -> bytes:
    """One request line without its newline, within `timeout_s` in all; ProtocolError for
    a line past MAX_REQUEST_BYTES, a slow or silent client, or a close before the newline."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        if len(data) > MAX_REQUEST_BYTES:
            raise ProtocolError(f"request longer than {MAX_REQUEST_BYTES} bytes")
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProtocolError(f"no whole request within {timeout_s:g}s")
        conn.settimeout(left)
        try:
            chunk = conn.recv(MAX_REQUEST_BYTES + 1 - len(data))
        except TimeoutError:
            raise ProtocolError(f"no whole request within {timeout_s:g}s") from None
        if not chunk:
            raise ProtocolError("connection closed before a whole request")
        data += chunk
    line = data.split(b"\n", 1)[0]
    if len(line) > MAX_REQUEST_BYTES:
        raise ProtocolError(f"request longer than {MAX_REQUEST_BYTES} bytes")
    return line


def notify_ready() -> None:
    """Tell systemd (Type=notify) that the socket is listening; nothing without systemd."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
        out.connect(address)
        out.sendall(b"READY=1")
