"""A server that answers before it reads and closes at once, for the node agent's and the
decider's clients (test_agent.py, test_decider.py): the race the CI once saw."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def answers_then_closes(
    path: str, answer: bytes, client: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A socket at `path` that sends `answer` on its one connection without reading the
    request, and closes it; the client module's peer check (`client.peer_uid`) waits for
    that close, so the client's request is sent to a closed connection (EPIPE)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    closed = threading.Event()

    def answer_and_close() -> None:
        conn, _ = listener.accept()
        conn.sendall(answer)
        conn.close()
        closed.set()

    thread = threading.Thread(target=answer_and_close, daemon=True)
    thread.start()
    real_peer_uid = client.peer_uid

    def after_the_close(conn: Any) -> int:
        assert closed.wait(10)
        return int(real_peer_uid(conn))

    monkeypatch.setattr(client, "peer_uid", after_the_close)
    try:
        yield
    finally:
        thread.join(5)
        listener.close()
