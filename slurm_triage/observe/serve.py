"""`slurm-triage metrics serve`: the current metrics over HTTP, for a scraper.

The standard library's threading HTTP server; GET /metrics only. The exposition is
OpenMetrics when the scraper's Accept header asks for it (Prometheus does), else the
Prometheus text format. It binds to localhost unless told otherwise: the metrics name
nodes and causes, which a site may not want on every network.
"""

from __future__ import annotations

import http.server
from collections.abc import Callable

from slurm_triage.errors import TriageError
from slurm_triage.logs import get_logger
from slurm_triage.observe.exposition import Family, openmetrics, prometheus_text

OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT_S = 10.0


def exposition(families: tuple[Family, ...], accept: str) -> tuple[bytes, str]:
    """The body and content type for a scraper sending this Accept header."""
    if "application/openmetrics-text" in accept:
        return openmetrics(families).encode(), OPENMETRICS_TYPE
    return prometheus_text(families).encode(), TEXT_TYPE


def make_server(
    address: str, port: int, families: Callable[[], tuple[Family, ...]]
) -> http.server.ThreadingHTTPServer:
    """A server answering GET /metrics with `families()` read at each request."""

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S
        server_version = "slurm-triage"

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path.split("?", 1)[0] != "/metrics":
                self._answer(404, b"not found; metrics are at /metrics\n", "text/plain")
                return
            try:
                body, kind = exposition(families(), self.headers.get("Accept", ""))
            except Exception as exc:  # a busy journal must not end the server
                get_logger().error("metrics_scrape_failed", error=f"{type(exc).__name__}: {exc}")
                self._answer(500, f"metrics unavailable: {exc}\n".encode(), "text/plain")
                return
            self._answer(200, body, kind)

        def _answer(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            get_logger().debug("metrics_request", client=self.client_address[0])

    try:
        server = http.server.ThreadingHTTPServer((address, port), Handler)
    except OSError as exc:
        raise TriageError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    return server
