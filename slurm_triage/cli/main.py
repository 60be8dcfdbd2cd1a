"""Entry point of `slurm-triage`: builds the parser from the command table and dispatches.

Each subcommand lives in its own module exposing `register(subparsers)`; handlers import
what they need when they run, so `slurm-triage --help` and the light commands stay fast.
"""

from __future__ import annotations

import contextlib
import os
import sys

from slurm_triage import __version__
from slurm_triage.errors import TriageError
from slurm_triage.logs import setup_logging, setup_stderr_logging

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any

    from slurm_triage.config import Config

# Every command: its name, the module whose `register(subparsers)` adds it, and its one-line
# help for `slurm-triage --help` (the same text the module gives add_parser(help=...); a test
# compares them). Order here is the order in `--help`. `main` imports only the module of the
# command asked for, so `slurm-triage wrap` on every rank does not import the analytics, the
# twin or the dev cluster. To add a command: write `slurm_triage/cli/<name>_cmd.py` with
# `register(sub)` calling `sub.add_parser(name, help=...)`, and add a row here.
COMMANDS: dict[str, tuple[str, str]] = {
    "config": (
        "slurm_triage.cli.config_cmd",
        "show the effective configuration, check a config file or write its parsed copy",
    ),
    "classify": (
        "slurm_triage.cli.classify_cmd",
        "say why a job ended: cause, blamed nodes, confidence and what to do",
    ),
    "slurm": (
        "slurm_triage.cli.slurm_cmd",
        "read jobs and nodes, requeue, exclude, drain and resume through Slurm",
    ),
    "check": (
        "slurm_triage.cli.health_cmd",
        "run node health checks; drain on failure, resume nodes we drained",
    ),
    "inject": (
        "slurm_triage.cli.health_cmd",
        "inject a fault into the simulated GPU estate (demos, tests)",
    ),
    "nodes": (
        "slurm_triage.cli.nodes_cmd",
        "the node lifecycle: state, repairs, burn-in, RMA (reconcile, release)",
    ),
    "burn-in": (
        "slurm_triage.cli.burn_in_cmd",
        "prove a repaired node: health screen, DCGM diag, the site's test (run as a job)",
    ),
    "history": (
        "slurm_triage.cli.journal_cmd",
        "show the decisions taken on job ends (the journal)",
    ),
    "lemons": (
        "slurm_triage.cli.journal_cmd",
        "list nodes whose history makes them lemon candidates, and why",
    ),
    "agent": (
        "slurm_triage.cli.agent_cmd",
        "run the node agent the Prolog asks first (root daemon, Unix socket, NVML open)",
    ),
    "decider": (
        "slurm_triage.cli.decider_cmd",
        "run the decider EpilogSlurmctld asks first (SlurmUser daemon, Unix socket)",
    ),
    "metrics": (
        "slurm_triage.cli.metrics_cmd",
        "print this host's metrics (OpenMetrics text), or serve them over HTTP",
    ),
    "wrap": (
        "slurm_triage.cli.wrap_cmd",
        "run a job step's command and exit exactly as it did (srun ... wrap -- CMD)",
    ),
    "devcluster": (
        "slurm_triage.cli.devcluster_cmd",
        "run a real 3-node Slurm cluster on this host (tests, demos)",
    ),
    "mttf": (
        "slurm_triage.cli.analytics_cmd",
        "expected mean time to failure of a job of N GPUs",
    ),
    "ettr": (
        "slurm_triage.cli.analytics_cmd",
        "expected ETTR of a job run, optimal checkpoint interval, Monte Carlo check",
    ),
    "report": (
        "slurm_triage.cli.analytics_cmd",
        "reliability report (HTML + PNG) from Slurm accounting and node events",
    ),
    "synth": (
        "slurm_triage.cli.analytics_cmd",
        "write synthetic sacct accounting (and node events) with the paper's job mix",
    ),
    "replay": (
        "slurm_triage.cli.replay_cmd",
        "re-run a site's history through other policy settings",
    ),
    "twin": (
        "slurm_triage.cli.twin_cmd",
        "simulate a 2k-16k node GPU cluster under policy sets none, native, triage",
    ),
}

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
            # Imported here: classify and the offline commands never read a config, and
            # the config module (a dozen dataclasses, the TOML parser) is not free (issue 20).
            from slurm_triage.config import load_config

            self._config = load_config(self._config_path)
            setup_logging(self._config.logging, job_output=self.job_output)
        return self._config


def _columns() -> int:
    """shutil.get_terminal_size().columns, without importing shutil: argparse's formatter
    imports it (and with it bz2, lzma, zlib: ~4 ms) for this one number, at every parser
    built, so at every start of `wrap` and `classify` (issue 20)."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get("COLUMNS", "0")) > 0:
            return int(os.environ["COLUMNS"])
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns if columns > 0 else 80


def _parser_class() -> type[argparse.ArgumentParser]:
    """An ArgumentParser whose formatters get the terminal's width from `_columns`; its
    sub-commands' parsers are of this class too (add_subparsers' default). Defined when a
    parser is built: argparse (with gettext and locale) is no import of `wrap` (issue 20)."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        def _get_formatter(self) -> argparse.HelpFormatter:
            # HelpFormatter's own default, less shutil: the width is the terminal's less 2.
            return self.formatter_class(prog=self.prog, width=_columns() - 2)  # type: ignore[call-arg]

    return _Parser


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser. Without `command`, every command's module is imported (tests walk the
    whole tree); with a command, only that command's module and its commands; with "" or an
    unknown word, every command is a stub that only lists it in `--help`."""
    import argparse
    import importlib
    from pathlib import Path

    parser = _parser_class()(
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
    registered: set[str] = set()
    for name, (module_name, help_text) in COMMANDS.items():
        if name in sub.choices:
            continue  # registered with another command of its module
        if command is None or COMMANDS.get(command, ("",))[0] == module_name:
            if module_name not in registered:
                importlib.import_module(module_name).register(sub)
                registered.add(module_name)
        elif command not in COMMANDS:
            # No command named: stubs for the root's --help and its "invalid choice" list.
            # A command named needs none of them (25-odd parsers, ~2.5 ms of every rank's
            # `wrap` and every `classify`: issue 20).
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def command_asked(argv: Sequence[str]) -> str | None:
    """The command named in `argv`: the first word that is not an option or --config's
    value (maybe not a command at all: argparse then says so)."""
    after_config = False
    for arg in argv:
        if after_config:
            after_config = False
        elif arg.startswith("-"):
            # --config FILE, also abbreviated (argparse accepts --conf FILE)
            after_config = len(arg) > 2 and "--config".startswith(arg)
        else:
            return arg
    return None


def _short_args(argv: list[str]) -> Any:
    """`wrap`'s or `classify`'s arguments as their parser reads them, without argparse
    (every rank of every job starts `wrap`, and argparse with re, gettext and locale was a
    sixth of its start; for `classify` a third: issue 20); None for any other command and
    for anything a short reader leaves to argparse (--help, an error)."""
    if argv[:1] == ["wrap"]:
        from slurm_triage.cli.wrap_cmd import parse_without_argparse

        return parse_without_argparse(argv[1:])
    if argv[:1] == ["classify"]:
        from slurm_triage.cli.classify_cmd import parse_without_argparse as classify_args

        return classify_args(argv[1:])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    setup_stderr_logging("warning")
    as_process = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] != ["wrap"]:  # wrap's stdout is the job's, and wrap writes none of it
        sys.stdout = _Output(sys.stdout)  # type: ignore[assignment]
    args: Any = _short_args(argv)
    if args is None:
        args = build_parser(command_asked(argv) or "").parse_args(argv)
    code = _handle(args, Context(args.config))
    if as_process and argv[:1] == ["wrap"]:
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End a rank's wrapper at once, with the child's code: everything it writes (record,
    log lines, summary) is written and closed by now, and the interpreter's teardown of
    every module and object was a tenth of a wrapped `true` (issue 20)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing left to say
            stream.flush()
    os._exit(code)


def _handle(args: Any, context: Context) -> int:
    try:
        code = int(args.handler(args, context) or 0)
        # Flushed here, not at the interpreter's exit: output that cannot be written is an
        # error said on stderr (exit 2), not a traceback or a silent loss after exit 0.
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except TriageError as exc:
        print(f"slurm-triage: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("slurm-triage: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        if not (isinstance(sys.stdout, _Output) and sys.stdout.refused):
            raise
        reason = exc.strerror or str(exc)
        print(f"slurm-triage: error: cannot write the output: {reason}", file=sys.stderr)
        # What is left in its buffer can never be written: dropped, so that the exit does
        # not try again and report it a second time.
        sys.stdout = None  # type: ignore[assignment]
        return 2


class _Output:
    """A command's stdout, which remembers a write it refused (a full disk, a closed
    descriptor), so that `_handle` can tell lost output from any other OSError. Without a
    stdout at all (started with `>&-`), where print() would drop the output and the
    command say it succeeded, a write fails as writing to a closed descriptor does."""

    def __init__(self, stream: Any) -> None:
        self._stream: Any = stream._stream if isinstance(stream, _Output) else stream
        self.refused = False

    def write(self, text: str) -> int:
        try:
            if self._stream is None:
                raise OSError(9, "standard output is closed")  # EBADF
            return self._stream.write(text)  # type: ignore[no-any-return]
        except OSError:
            self.refused = True
            raise

    def flush(self) -> None:
        try:
            if self._stream is not None:
                self._stream.flush()
        except OSError:
            self.refused = True
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


if __name__ == "__main__":
    raise SystemExit(main())
