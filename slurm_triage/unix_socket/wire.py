"""Bounded reads of one line and the peer's uid, for both ends of a local socket.

Standard library only (socket, struct, time): the per-job clients (the Prolog's,
EpilogSlurmctld's) import it before anything else and must stay light.
"""

from __future__ import annotations

import socket
import struct
import time

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (socket(7) SO_PEERCRED)


class ProtocolError(ValueError):
    """Bytes that are not a message we accept; the message is one line, holding no input."""


def peer_uid(conn: socket.socket) -> int:
    """The process at the other end's uid, from the kernel (SO_PEERCRED), not its bytes."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return int(_UCRED.unpack(raw)[1])


def read_request(conn: socket.socket, timeout_s: float, max_bytes: int) -> bytes:
    """One request line without its newline, within `timeout_s` in all; ProtocolError for
    a line past `max_bytes`, a slow or silent client, or a close before the newline."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        if len(data) > max_bytes:
            raise ProtocolError(f"request longer than {max_bytes} bytes")
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProtocolError(f"no whole request within {timeout_s:g}s")
        conn.settimeout(left)
        try:
            chunk = conn.recv(max_bytes + 1 - len(data))
        except TimeoutError:
            raise ProtocolError(f"no whole request within {timeout_s:g}s") from None
        if not chunk:
            raise ProtocolError("connection closed before a whole request")
        data += chunk
    line = data.split(b"\n", 1)[0]
    if len(line) > max_bytes:
        raise ProtocolError(f"request longer than {max_bytes} bytes")
    return line


class LineReader:
    """The answer lines of one connection, each read within its own wait (a client may
    wait longer for a second line than for the first); bytes past a line are kept for the
    next one."""

    def __init__(self, conn: socket.socket, max_bytes: int) -> None:
        self.conn, self.max_bytes = conn, max_bytes
        self._pending = b""

    def line(self, wait_s: float) -> bytes:
        """The next line without its newline; TimeoutError when it is not whole within
        `wait_s`, ProtocolError past `max_bytes` or at EOF."""
        deadline = time.monotonic() + wait_s
        data = self._pending
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.conn.settimeout(left)
            chunk = self.conn.recv(self.max_bytes + 1 - len(data))
            if not chunk:
                raise ProtocolError("connection closed before a whole answer")
            data += chunk
            if b"\n" not in data and len(data) > self.max_bytes:
                raise ProtocolError("answer longer than the protocol allows")
        line, _, self._pending = data.partition(b"\n")
        if len(line) > self.max_bytes:
            raise ProtocolError("answer longer than the protocol allows")
        return line
