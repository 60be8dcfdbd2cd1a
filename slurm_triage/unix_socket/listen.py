"""A daemon's listening socket: bound safely, served a thread per connection, and systemd
told when it is ready (sd_notify's READY=1, for Type=notify).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from slurm_triage.errors import TriageError

LISTEN_BACKLOG = 128
ACCEPT_POLL_S = 0.5  # how often the accept loop looks for a stop


class ListenError(TriageError):
    """The daemon cannot have its socket; the message is one line for the operator
    (exit 2)."""


class Listener:
    """A listening socket and the identity (device, inode) of its file."""

    def __init__(self, path: str, sock: socket.socket) -> None:
        self.path, self.sock = path, sock
        found = os.lstat(path)
        self._identity = (found.st_dev, found.st_ino)

    def close(self) -> None:
        """Stop listening and remove the socket file, unless it is no longer the one we
        bound (another daemon started on the path since)."""
        self.sock.close()
        with contextlib.suppress(OSError):
            found = os.lstat(self.path)
            if (found.st_dev, found.st_ino) == self._identity:
                os.unlink(self.path)


def bind_socket(path: str, *, setting: str = "socket", daemon: str = "process") -> Listener:
    """Listen on `path`, mode 0600, owned by this process's uid. The directory must be
    ours and writable by no one else (systemd's RuntimeDirectory is), so nobody can swap
    the socket; a stale socket file is replaced, a live daemon's is not, anything else at
    the path is a ListenError. `setting` names the config key in messages, `daemon` who
    serves such a socket."""
    where = Path(path)
    if not where.is_absolute():
        raise ListenError(f"{setting} = {path!r}: must be an absolute path")
    try:
        where.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        parent = os.stat(where.parent)
        found: os.stat_result | None = os.lstat(where)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise ListenError(f"{where.parent}: {exc.strerror or exc}") from None
    if parent.st_uid != os.geteuid() or parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ListenError(
            f"{where.parent}: must be owned by uid {os.geteuid()} and writable by no one else"
        )
    if found is not None:
        if not stat.S_ISSOCK(found.st_mode):
            raise ListenError(f"{path}: exists and is not a socket")
        if _answers(path):
            raise ListenError(f"{path}: another {daemon} is serving it")
        where.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # the file is born 0600: no moment where others may connect
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise ListenError(f"{path}: cannot listen: {exc.strerror or exc}") from None
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


def accept_loop(
    listener: Listener,
    handle: Callable[[socket.socket], None],
    stop: threading.Event,
    *,
    name: str,
    conn_timeout_s: float,
    on_error: Callable[[OSError], None],
) -> None:
    """Accept connections until `stop` is set, each handled in a daemon thread of its own
    (`name`); an accept error (EMFILE and the like) is reported and waited out, not spun."""
    listener.sock.settimeout(ACCEPT_POLL_S)
    while not stop.is_set():
        try:
            conn, _ = listener.sock.accept()
        except TimeoutError:
            continue
        except OSError as exc:
            on_error(exc)
            stop.wait(ACCEPT_POLL_S)
            continue
        conn.settimeout(conn_timeout_s)
        threading.Thread(target=handle, args=(conn,), name=name, daemon=True).start()


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
