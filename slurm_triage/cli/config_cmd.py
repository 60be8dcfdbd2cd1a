"""`slurm-triage config show|check`: print the effective config, validate a file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from slurm_triage.config import deprecations, load_config, to_toml


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "config",
        help="show the effective configuration or check a config file",
        description="Show the effective configuration, or validate a config file before "
        "deploying it to the nodes.",
    )
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION")
    actions.required = True
    show = actions.add_parser(
        "show",
        help="print the effective configuration (defaults, file, env) as TOML",
        description="Print the configuration this host would use, as TOML: built-in "
        "defaults, then the config file, then SLURM_TRIAGE__SECTION__KEY overrides. "
        "With --defaults: every key with its default, what it accepts and what it does "
        "(the file contrib/config.toml.example is this output).",
    )
    show.add_argument(
        "--defaults",
        action="store_true",
        help="print the annotated built-in defaults instead (no file or overrides read)",
    )
    show.set_defaults(handler=_show)
    check = actions.add_parser(
        "check",
        help="validate a config file; exit 0 if good, 2 with the reason if not",
        description="Validate FILE: TOML syntax, known sections and keys, value types and "
        "ranges. Prints 'FILE: ok' or one line naming the bad key and what it accepts; a "
        "deprecated setting that is still honoured is a warning on stderr (exit 0).",
    )
    check.add_argument("file", type=Path, metavar="FILE")
    check.set_defaults(handler=_check)


def _show(args: argparse.Namespace, context: Any) -> int:
    if args.defaults:
        from slurm_triage.config_example import example_toml

        print(example_toml(), end="")
        return 0
    print(to_toml(context.config()), end="")
    return 0


def _check(args: argparse.Namespace, context: Any) -> int:
    config = load_config(args.file, env={})
    print(f"{args.file}: ok")
    for line in deprecations(config):
        print(f"{args.file}: warning: {line}", file=sys.stderr)
    return 0
