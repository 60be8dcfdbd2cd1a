"""Bounded reads of one line and the peer's uid, for both ends of a local socket.

The per-job clients (the Prolog's, EpilogSlurmctld's) import it before anything else, so
it imports only what Python's own start has (sys, time) and the C modules under `socket`
and `json` (_socket; _json through slurm_triage.json_codec): `socket` and `json` import
enum, selectors and re, each ~10 ms on a loaded node (issue 20). A socket.socket is a
_socket.socket.
"""

from __future__ import annotations

import _socket
import sys
import time

from slurm_triage.json_codec import loads_with

TYPE_CHECKING = False  # typing's flag without importing typing; mypy takes it as true
if TYPE_CHECKING:
    from collections.abc import Mapping

_loads = loads_with()  # json.loads

# struct ucred (socket(7) SO_PEERCRED): pid, uid, gid, three native C ints.
_UCRED_SIZE = 12


class ProtocolError(ValueError):
    """Bytes that are not a message we accept; the message is one line, holding no input."""


class Refused(ProtocolError):
    """A well-formed error answer: the server did not do what was asked, and says why."""


def client_settings(
    env: Mapping[str, str],
    server: str,
    socket_var: tuple[str, str],
    connect_var: tuple[str, float],
    wait_var: tuple[str, float],
) -> tuple[str, float, float]:
    """A client's socket path and its two waits (s), each from its environment variable
    (name, default) when set; ValueError for a wait that is not a number above 0."""
    path = env.get(socket_var[0]) or socket_var[1]
    connect = float(env.get(connect_var[0]) or connect_var[1])
    wait = float(env.get(wait_var[0]) or wait_var[1])
    if not (0 < connect < float("inf") and 0 < wait < float("inf")):
        raise ValueError(f"{server} waits must be numbers above 0")
    return path, connect, wait


def answer_json(line: bytes, version: int, server: str) -> dict[str, object]:
    """An answer line as the JSON object of protocol `version`; Refused for an error answer,
    ProtocolError for anything else."""
    try:
        data = _loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("answer is not one JSON line") from None
    if not isinstance(data, dict) or data.get("v") != version:
        raise ProtocolError("answer is not of this protocol version")
    if isinstance(data.get("error"), str):
        raise Refused(f"{server} refused: {data['error'][:300]}")
    return data


def peer_uid(conn: _socket.socket) -> int:
    """The process at the other end's uid, from the kernel (SO_PEERCRED), not its bytes."""
    raw = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _UCRED_SIZE)
    return int.from_bytes(raw[4:8], sys.byteorder, signed=True)


def read_request(conn: _socket.socket, timeout_s: float, max_bytes: int) -> bytes:
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


def send_then_read(
    conn: _socket.socket, request: bytes, reader: LineReader, wait_s: float
) -> bytes:
    """Send a client's request and read the first answer line. A server that answers before
    reading (busy, a refused peer) and closes can make the send fail (EPIPE, ECONNRESET)
    while its answer waits to be read: that answer is returned, and the send's error is
    raised only when no whole line came."""
    try:
        conn.sendall(request)
    except (BrokenPipeError, ConnectionResetError) as exc:
        try:
            return reader.line(wait_s)
        except (OSError, ProtocolError):
            raise exc from None
    return reader.line(wait_s)


class LineReader:
    """The answer lines of one connection, each read within its own wait (a client may
    wait longer for a second line than for the first); bytes past a line are kept for the
    next one."""

    def __init__(self, conn: _socket.socket, max_bytes: int) -> None:
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
