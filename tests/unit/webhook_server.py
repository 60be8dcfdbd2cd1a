"""A webhook endpoint for tests: a real HTTP server on 127.0.0.1 and an ephemeral port.

It answers each POST with the next status of `statuses` (then 200), records the bodies it
took, and with `hang` set holds every request until the test ends (a dead endpoint that
accepted the connection).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Webhook:
    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.bodies: list[bytes] = []
        self.requests = 0
        self.hang = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.url = ""

    def messages(self) -> list[Any]:
        with self.lock:
            return [json.loads(b) for b in self.bodies]

    def url_file(self, directory: Path) -> str:
        path = directory / "webhook.url"
        path.write_text(self.url + "\n")
        return str(path)


@contextmanager
def webhook_server() -> Iterator[Webhook]:
    hook = Webhook()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with hook.lock:
                hook.requests += 1
                status = hook.statuses.pop(0) if hook.statuses else 200
            if hook.hang.is_set():
                hook.release.wait(60)
                return
            if status == 200:
                with hook.lock:
                    hook.bodies.append(body)
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        hook.release.set()
        server.shutdown()
        server.server_close()
