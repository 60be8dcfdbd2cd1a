"""Entry point of `slurm-triage`: builds the parser from the command table and dispatches.

Each subcommand lives in its own module exposing `register(subparsers)`; handlers import
what they need when they run, so `slurm-triage --help` and the light commands stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from slurm_triage import __version__
from slurm_triage.config import Config, LoggingConfig, load_config
from slurm_triage.errors import TriageError
from slurm_triage.logs import setup_logging

# Order here is the order in `--help`.
COMMAND_MODULES = (
    "slurm_triage.cli.config_cmd",
    "slurm_triage.cli.classify_cmd",
    "slurm_triage.cli.slurm_cmd",
    "slurm_triage.cli.health_cmd",
    "slurm_triage.cli.journal_cmd",
    "slurm_triage.cli.metrics_cmd",
    "slurm_triage.cli.wrap_cmd",
    "slurm_triage.cli.devcluster_cmd",
    "slurm_triage.cli.analytics_cmd",
    "slurm_triage.cli.replay_cmd",
    "slurm_triage.cli.twin_cmd",
)

DESCRIPTION = """\
slurm-triage screens GPU nodes before jobs land on them, tells why every job ended,
and requeues jobs that infrastructure killed with the guilty node excluded and drained.

slurm.conf runs the standalone programs slurm-triage-prolog, slurm-triage-epilog,
slurm-triage-epilog-slurmctld and slurm-triage-healthcheck; this command is for
operators and researchers."""

EPILOG = """\
configuration: /etc/slurm-triage/config.toml, or the file named by $SLURM_TRIAGE_CONFIG
or --config; single keys can be overridden with SLURM_TRIAGE__<SECTION>__<KEY>=value.
exit status: 0 success, 1 `check` found a failure, 2 bad input or configuration,
3 Slurm unreachable or failing, 4 the journal unusable."""


class Context:
    """What a handler may need; the config is loaded on first use, so `config check`
    works even when the default config is broken."""

    def __init__(self, config_path: Path | None) -> None:
        self._config_path = config_path
        self._config: Config | None = None
        # Set by commands whose stderr is a job's output (wrap), before config() is asked.
        self.job_output = False

    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self._config_path)
            setup_logging(self._config.logging, job_output=self.job_output)
        return self._config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurm-triage",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"slurm-triage {__version__}")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="config file to use instead of $SLURM_TRIAGE_CONFIG or the default",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging(LoggingConfig(level="warning"))
    parser = build_parser()
    args = parser.parse_args(argv)
    context = Context(args.config)
    try:
        return int(args.handler(args, context) or 0)
    except TriageError as exc:
        print(f"slurm-triage: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("slurm-triage: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
