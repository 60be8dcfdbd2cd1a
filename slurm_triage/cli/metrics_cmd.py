"""`slurm-triage metrics [serve]`: the current metrics, printed or served over HTTP."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from slurm_triage.errors import TriageError

DESCRIPTION = """\
Print this host's slurm-triage metrics in OpenMetrics text: on the controller, the
decisions recorded in the journal (decision.journal): decisions by cause, domain and
verdict, GPU-seconds lost, requeue latency, drains, held jobs whose requeue budget was
spent, lemon nodes, notifications; on a compute node, what its Prolog, Epilog and health
checks recorded (with metrics.node_textfile set): check status and duration, runs, drains,
resumes, breaker trips. The node_exporter textfiles (metrics.node_textfile,
metrics.controller_textfile) hold the same series. Series and their meaning:
docs/observability.md."""

SERVE_DESCRIPTION = """\
Serve the same metrics at http://ADDRESS:PORT/metrics, read afresh at each scrape
(OpenMetrics when the scraper asks for it, else the Prometheus text format). Listens on
metrics.listen_address and metrics.listen_port (127.0.0.1:9717) unless --address/--port
say otherwise. Runs until interrupted."""


def register(sub: Any) -> None:
    metrics = sub.add_parser(
        "metrics",
        help="print this host's metrics (OpenMetrics text), or serve them over HTTP",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _scope_arguments(metrics)
    metrics.add_argument(
        "--format",
        choices=("openmetrics", "prometheus"),
        default="openmetrics",
        help="OpenMetrics 1.0 (default) or the Prometheus text format of the textfiles",
    )
    metrics.set_defaults(handler=_print)
    actions = metrics.add_subparsers(dest="metrics_action", metavar="ACTION")
    serve = actions.add_parser(
        "serve",
        help="serve the metrics over HTTP (GET /metrics)",
        description=SERVE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _scope_arguments(serve)
    serve.add_argument("--address", help="address to listen on (default metrics.listen_address)")
    serve.add_argument("--port", type=_port, help="port (default metrics.listen_port)")
    serve.set_defaults(handler=_serve)


def _scope_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--controller", action="store_true", help="only the decisions' metrics (the journal)"
    )
    scope.add_argument("--nodes", action="store_true", help="only the node ledgers' metrics")


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text!r}")
    return int(text)


def _families(args: argparse.Namespace, context: Any) -> tuple[Any, tuple[str, ...]]:
    from slurm_triage.observe.current import current

    found = current(context.config(), controller=not args.nodes, nodes=not args.controller)
    return found.families, found.notes


def _print(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.observe.exposition import openmetrics, prometheus_text

    families, notes = _families(args, context)
    for note in notes:
        print(f"slurm-triage: {note}", file=sys.stderr)
    render = openmetrics if args.format == "openmetrics" else prometheus_text
    sys.stdout.write(render(families))
    return 0


def _serve(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.observe.serve import make_server

    config = context.config()
    address = args.address or config.metrics.listen_address
    port = args.port or config.metrics.listen_port
    server = make_server(address, port, lambda: _families(args, context)[0])
    host, bound = server.server_address[:2]
    print(f"slurm-triage: serving metrics at http://{host!s}:{bound}/metrics", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 0
    finally:
        server.server_close()
    raise TriageError("metrics server stopped")  # pragma: no cover (serve_forever returned)
